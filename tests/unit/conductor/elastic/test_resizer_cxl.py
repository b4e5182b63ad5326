# Licensed under the Apache License, Version 2.0 (the "License"); you may
# not use this file except in compliance with the License. You may obtain
# a copy of the License at
#
#      http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS, WITHOUT
# WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied. See the
# License for the specific language governing permissions and limitations
# under the License.

"""Elastic leases of CXL memory in virtio-mem mode: the conductor's
resizing task with a real conductor, the cxl fabric driver (local back
end), a real agent RPC server whose compute endpoint speaks agent RPC 1.4
as the contract says (fake_vmem_agent: simulated regions, a guest device
whose requested size it keeps) and a SQLite database. Placement is not
configured here: the host's count of the memory (``host_memory_mb`` on
the attachment) is what follows; test_cxl_host_memory.py in the
functional tests checks the compute node's MEMORY_MB and the hold in a
real Placement."""

import datetime
import threading
import types

import pytest

from composable.agent import rpcapi as agent_rpcapi
from composable.common import exception
from composable.common import states
from composable.common import utils
from composable import conf
from composable.conductor.allocator import claims as allocator
from composable.conductor.elastic import resizer as resizer_mod
from composable.conductor.placement import claims as placement_claims
from composable.conductor.placement import client as pclient
from composable.conductor.placement import host_memory
from composable.db import allocation
from composable.db import api as db_api
from composable import fabric as fabric_drivers
from composable.fabric import cxl as cxl_driver
from tests.unit.conductor.elastic import fake_vmem_agent
from tests.unit.conductor.elastic import passes
from tests.unit.conductor import harness as harness_mod

CONF = conf.CONF
admin = harness_mod.admin
HOST = 'cxl-host'
GUEST = '11111111-2222-3333-4444-555555555555'
DEADLINE = 60
STEP = 512
POLICY = {'min_mb': 512, 'max_mb': 2048, 'observation_window': 300,
          'prediction_window': 60, 'headroom': 0.2}


@pytest.fixture(autouse=True)
def ten_second_samples():
    CONF.set_override('sample_interval', 10, 'elastic')
    CONF.set_override('shrink_hysteresis', 0, 'elastic')
    yield
    CONF.clear_override('sample_interval', 'elastic')
    CONF.clear_override('shrink_hysteresis', 'elastic')


@pytest.fixture
def env(harness, monkeypatch):
    """Two CXL memory devices of 1024 MiB wired to HOST (local back
    end), a cxl pool of 512 MiB chunks, HOST's agent with the 1.4 fake,
    and the agent calls to HOST as the conductor's client sent them:
    [(method, version)]."""
    CONF.set_override('enabled_drivers', ['fake', 'cxl'], 'fabric')
    fabric_drivers._DRIVERS['cxl'] = cxl_driver.CxlFabricDriver()
    ctx = admin()
    fabric = db_api.fabric_create(ctx, {
        'name': 'cxl1', 'driver': 'cxl', 'driver_info': {
            'backend': 'local', 'devices': {
                'cmm0': {'serial': '0x5a5a0001', 'capacity_mb': 1024,
                         'hosts': [HOST]},
                'cmm1': {'serial': '0x5a5a0002', 'capacity_mb': 1024,
                         'hosts': [HOST]}}}})
    host = db_api.host_create(ctx, {'name': HOST, 'fabric_id': fabric.id})
    pool = db_api.pool_create(ctx, {
        'name': 'cxl-mem', 'kind': 'memory', 'medium': 'cxl',
        'resource_class': 'CUSTOM_COMPOSABLE_CXL_MEMORY_MB',
        'fabric_id': fabric.id, 'step_size': STEP, 'total': 0, 'used': 0,
        'reserved': 0, 'traits': []})
    for name in ('cmm0', 'cmm1'):
        db_api.memory_node_create(ctx, {'name': name, 'pool_id': pool.id,
                                        'capacity_mb': 1024,
                                        'exporter': 'cxl'})
    harness.start_agent(HOST)
    fake = fake_vmem_agent.FakeVirtioMemAgent(
        harness.agents[HOST].compute).install(monkeypatch)
    sent = []
    original = agent_rpcapi.AgentAPI._call

    def spy(self, context, node, method, version=None, **kwargs):
        if node == HOST:
            # Sent only with the version that knows it (1.4).
            assert kwargs.get('partial') in (None, True)
            assert (kwargs.get('partial') is True) == (version == '1.4')
            sent.append((method, version))
        return original(self, context, node, method, version=version,
                        **kwargs)
    monkeypatch.setattr(agent_rpcapi.AgentAPI, '_call', spy)
    try:
        yield types.SimpleNamespace(fabric=fabric, host=host, pool=pool,
                                    fake=fake, sent=sent)
    finally:
        CONF.clear_override('enabled_drivers', 'fabric')


def _bound(harness, env, memory_mb=512):
    uuid = harness.create(memory_mb=memory_mb, elastic=dict(POLICY),
                          requested_pools=[env.pool.uuid],
                          attach_mode=states.ATTACH_VIRTIO_MEM)
    harness.api.bind_lease(harness_mod.user_context(), uuid,
                           env.host.uuid, instance_uuid=GUEST,
                           attach_mode=states.ATTACH_VIRTIO_MEM)
    lease = harness.wait(uuid, [states.BOUND, states.BIND_FAILED])
    assert lease.status == states.BOUND, lease.fault
    del env.fake.calls[:]
    del env.sent[:]
    return lease


def _samples(lease, values, now, interval=10):
    count = len(values)
    stored, _ = db_api.usage_record(admin(), HOST, [
        {'lease_uuid': lease.uuid, 'used_mb': int(v),
         'size_mb': lease.memory_mb,
         'taken_at': now - datetime.timedelta(
             seconds=(count - 1 - i) * interval)}
        for i, v in enumerate(values)])
    assert stored == count


def _details(harness, uuid):
    [att] = db_api.attachment_list(admin(), harness.lease(uuid).id,
                                   states_=states.LIVE_ATTACHMENT_STATES)
    return att.details


def _by_index(lease):
    return sorted(lease.extents, key=lambda e: e.index)


def _consistent(harness, uuid):
    lease = harness.lease(uuid)
    assert lease.memory_mb == sum(e.size_mb for e in lease.extents)
    assert allocation.check_consistency(admin()) == []


def test_grows_and_shrinks_through_the_guest_device(harness, env):
    lease = _bound(harness, env)
    [first] = lease.extents
    assert first.memory_node.name == 'cmm0'
    # The device was plugged with the policy's max_mb of address space.
    assert env.fake.plugged_mb[lease.uuid] == 2048
    assert _details(harness, lease.uuid)[host_memory.COUNTED] == 512

    now = utils.utcnow()
    _samples(lease, [2000] * 6, now)
    assert len(passes.run(harness, now)) == 1
    grown = harness.lease(lease.uuid)
    assert grown.memory_mb == 2048 and grown.status == states.BOUND
    new = [e for e in _by_index(grown) if e.uuid != first.uuid]
    # Whole chunks, on the device the lease had first while it has room,
    # then on the other one.
    assert [e.size_mb for e in new] == [STEP] * 3
    assert [e.memory_node.name for e in new] == ['cmm0', 'cmm1', 'cmm1']
    # Only the new chunks, partial, at 1.4; nothing exported.
    assert env.fake.calls == [('attach_memory',
                               sorted(e.uuid for e in new), True)]
    assert env.sent == [('attach_memory', '1.4')]
    assert env.fake.requested[lease.uuid] == 2048
    assert all(e.export_state == states.EXTENT_ALLOCATED and
               e.chap_username is None for e in grown.extents)
    details = _details(harness, lease.uuid)
    # cmm1 was made reachable as a bind does, and recorded.
    assert sorted(details['cxl_locators']) == ['cmm0', 'cmm1']
    assert details['cxl_locators']['cmm1']['serial'] == '0x5a5a0002'
    assert set(details['memory']) == {e.uuid for e in grown.extents}
    assert details[host_memory.COUNTED] == 2048
    assert resizer_mod._pending(admin(), grown) == {}
    [action] = passes.resizes(harness, lease.uuid)
    assert action.result == 'success', action.message
    assert harness.pool(env.pool).used == 2048
    _consistent(harness, lease.uuid)

    # Low: the newest chunks go, the guest first, down to min_mb.
    del env.fake.calls[:]
    del env.sent[:]
    later = now + datetime.timedelta(seconds=60)
    _samples(grown, [100] * 10, later)
    passes.run(harness, later)
    passes.run(harness, later + datetime.timedelta(seconds=1))
    shrunk = harness.lease(lease.uuid)
    assert shrunk.memory_mb == 512
    assert [e.uuid for e in shrunk.extents] == [first.uuid]
    assert env.fake.calls == [('detach_memory',
                               sorted(e.uuid for e in new), True)]
    assert env.sent == [('detach_memory', '1.4')]
    assert env.fake.requested[lease.uuid] == 512
    assert list(env.fake.regions[lease.uuid]) == [first.uuid]
    details = _details(harness, lease.uuid)
    # No chunk left on cmm1: the fabric let go of it.
    assert sorted(details['cxl_locators']) == ['cmm0']
    assert set(details['memory']) == {first.uuid}
    assert details[host_memory.COUNTED] == 512
    assert harness.pool(env.pool).used == 512
    assert [a.result for a in passes.resizes(harness, lease.uuid)] == [
        'success', 'success']
    _consistent(harness, lease.uuid)


def test_a_guest_that_keeps_its_memory_keeps_the_lease(harness, env):
    lease = _bound(harness, env, memory_mb=1024)
    env.fake.floor_mb = 1024
    now = utils.utcnow()
    _samples(lease, [100] * 10, now)
    passes.run(harness, now)
    passes.run(harness, now + datetime.timedelta(seconds=1))
    kept = harness.lease(lease.uuid)
    assert kept.memory_mb == 1024 and len(kept.extents) == 2
    assert kept.status == states.BOUND and kept.fault is None
    newest = _by_index(kept)[-1]
    assert env.fake.calls == [('detach_memory', [newest.uuid], True)]
    # Nothing changed on the host, nor in what it counts.
    assert env.fake.requested[lease.uuid] == 1024
    assert len(env.fake.regions[lease.uuid]) == 2
    assert _details(harness, lease.uuid)[host_memory.COUNTED] == 1024
    assert resizer_mod._pending(admin(), kept) == {}
    [action] = passes.resizes(harness, lease.uuid)
    assert action.result == 'error'
    assert 'Kept at 1024 MiB' in action.message
    assert 'did not give the memory back in time' in action.message
    assert harness.pool(env.pool).used == 1024
    _consistent(harness, lease.uuid)


def test_an_agent_that_stops_answering_mid_grow(harness, env, monkeypatch):
    """The attach of the new chunks times out, and so does the detach
    that undoes it: the host may map them, so they stay with the lease
    (marked) until it answers; then the next pass takes them back."""
    lease = _bound(harness, env)
    harness.stop_agent(HOST)
    now = utils.utcnow()
    _samples(lease, [2000] * 6, now)
    passes.run(harness, now)
    held = harness.lease(lease.uuid)
    assert held.status == states.BOUND
    new = sorted(e.uuid for e in held.extents
                 if e.uuid != lease.extents[0].uuid)
    assert len(new) == 3
    assert resizer_mod._pending(admin(), held) == {
        resizer_mod.PENDING_GROW: new}
    # Never counted on the host.
    assert _details(harness, lease.uuid)[host_memory.COUNTED] == 512
    [action] = passes.resizes(harness, lease.uuid)
    assert action.result == 'error'
    assert 'did not answer' in action.message
    assert 'asks it again before they go back to the pool' in \
        action.message
    assert harness.pool(env.pool).used == 2048

    # The agent is back (with the 1.4 fake again): settled first.
    agent = harness.start_agent(HOST)
    fake = fake_vmem_agent.FakeVirtioMemAgent(agent.compute).install(
        monkeypatch)
    assert len(passes.run(harness, now)) == 1
    settled = harness.lease(lease.uuid)
    assert settled.memory_mb == 512
    assert [e.uuid for e in settled.extents] == [lease.extents[0].uuid]
    assert ('detach_memory', new) in [c[:2] for c in fake.calls]
    assert resizer_mod._pending(admin(), settled) == {}
    assert _details(harness, lease.uuid)[host_memory.COUNTED] == 512
    assert [a.result for a in passes.resizes(harness, lease.uuid)] == [
        'error', 'success']
    assert harness.pool(env.pool).used == 512
    _consistent(harness, lease.uuid)


def test_placement_refusing_the_claim_keeps_the_lease(harness, env,
                                                      monkeypatch):
    lease = _bound(harness, env)

    def refuse(lease_id):
        raise pclient.PlacementError(status=409, method='PUT',
                                     url='/allocations/x',
                                     detail='no capacity')
    monkeypatch.setattr(placement_claims, 'update_claim', refuse)
    now = utils.utcnow()
    _samples(lease, [2000] * 6, now)
    passes.run(harness, now)
    kept = harness.lease(lease.uuid)
    assert kept.memory_mb == 512 and len(kept.extents) == 1
    # The host was never asked.
    assert env.fake.calls == [] and env.sent == []
    [action] = passes.resizes(harness, lease.uuid)
    assert action.result == 'error'
    assert 'Placement has no room' in action.message
    assert harness.pool(env.pool).used == 512
    _consistent(harness, lease.uuid)


def test_placement_refusing_the_host_count_undoes_the_grow(harness, env,
                                                           monkeypatch):
    """The guest got the new chunks but the compute node's MEMORY_MB (and
    the guest's hold) cannot follow: taken out of the guest again and
    given back, the lease keeps its size."""
    lease = _bound(harness, env)
    real = host_memory.follow

    def refuse_more(context, lease_, size_mb):
        if size_mb > 512:
            raise exception.ServiceUnavailable(
                reason='Placement said 503 to PUT /allocations/x')
        return real(context, lease_, size_mb)
    monkeypatch.setattr(host_memory, 'follow', refuse_more)
    now = utils.utcnow()
    _samples(lease, [2000] * 6, now)
    passes.run(harness, now)
    kept = harness.lease(lease.uuid)
    assert kept.memory_mb == 512 and len(kept.extents) == 1
    [(_, attached, _), (_, detached, partial)] = env.fake.calls
    assert attached == detached and len(attached) == 3 and partial
    assert env.sent == [('attach_memory', '1.4'), ('detach_memory', '1.4')]
    assert env.fake.requested[lease.uuid] == 512
    details = _details(harness, lease.uuid)
    assert details[host_memory.COUNTED] == 512
    assert sorted(details['cxl_locators']) == ['cmm0']
    assert set(details['memory']) == {kept.extents[0].uuid}
    assert resizer_mod._pending(admin(), kept) == {}
    [action] = passes.resizes(harness, lease.uuid)
    assert action.result == 'error'
    assert 'counting the new memory on compute node cxl-host' in \
        action.message
    assert 'Kept at 512 MiB' in action.message
    assert harness.pool(env.pool).used == 512
    _consistent(harness, lease.uuid)


def test_an_unbind_during_a_grow_waits_for_it(harness, env, monkeypatch):
    """The grow holds the lease's reservation: the unbind asked for
    meanwhile is refused as busy (LeaseLocked) and changes nothing. Asked
    again once the grow is done, it takes every chunk off the host, the
    grown ones too, in one whole (not partial) detach."""
    lease = _bound(harness, env)
    entered, go_on = threading.Event(), threading.Event()
    fake_attach = env.fake.attach_memory

    def slow(*args, **kwargs):
        entered.set()
        assert go_on.wait(DEADLINE)
        return fake_attach(*args, **kwargs)
    monkeypatch.setattr(env.fake.endpoint, 'attach_memory', slow)
    now = utils.utcnow()
    _samples(lease, [2000] * 6, now)
    [future] = harness.conductor.resizer.run(admin(), now=now)
    try:
        assert entered.wait(DEADLINE)
        with pytest.raises(exception.LeaseLocked):
            harness.api.unbind_lease(harness_mod.user_context(),
                                     lease.uuid)
        assert harness.lease(lease.uuid).status == states.BOUND
    finally:
        go_on.set()
    future.result(timeout=DEADLINE)
    grown = harness.wait(lease.uuid, states.BOUND)
    assert grown.memory_mb == 2048
    assert env.fake.requested[lease.uuid] == 2048
    del env.fake.calls[:]
    del env.sent[:]
    harness.api.unbind_lease(harness_mod.user_context(), lease.uuid)
    unbound = harness.wait(lease.uuid, [states.RESERVED, states.ERROR])
    assert unbound.status == states.RESERVED, unbound.fault
    assert unbound.memory_mb == 2048
    assert env.fake.calls == [('detach_memory',
                               sorted(e.uuid for e in grown.extents),
                               False)]
    assert env.sent == [('detach_memory', '1.3')]
    assert lease.uuid not in env.fake.regions
    assert harness.agents[HOST].memory_attachments == {}
    _consistent(harness, lease.uuid)


def test_a_grow_cut_short_after_the_host_counted_it_is_undone(harness,
                                                              env):
    """A conductor died after the guest got the new chunks and the host
    counted them, before the grow was recorded: the next pass takes them
    out of the guest and lowers the count again."""
    lease = _bound(harness, env)
    new = allocator.grow_memory(admin(), lease.id, 1024)
    grown = harness.lease(lease.uuid)
    resizer_mod._mark(admin(), grown, resizer_mod.PENDING_GROW, new)
    flows = harness.conductor.flows
    extents = [e for e in grown.extents if e.uuid in set(new)]
    # One lands on cmm1, made reachable as the grow does.
    locators = harness.conductor.resizer._reach(admin(), grown, extents)
    assert sorted(locators) == ['cmm0', 'cmm1']
    flows.agents.attach_memory(
        admin(), HOST, resizer_mod.lease_flows.lease_view(grown),
        flows.cxl_extent_views(grown, extents, locators),
        grown.attach_mode, grown.instance_uuid, partial=True)
    host_memory.follow(admin(), grown, grown.memory_mb)
    assert _details(harness, lease.uuid)[host_memory.COUNTED] == 1536
    assert env.fake.requested[lease.uuid] == 1536
    assert len(passes.run(harness, utils.utcnow())) == 1
    settled = harness.lease(lease.uuid)
    assert settled.memory_mb == 512
    assert env.fake.requested[lease.uuid] == 512
    assert env.fake.calls[-1] == ('detach_memory', sorted(new), True)
    details = _details(harness, lease.uuid)
    assert details[host_memory.COUNTED] == 512
    assert sorted(details['cxl_locators']) == ['cmm0']
    assert resizer_mod._pending(admin(), settled) == {}
    [action] = passes.resizes(harness, lease.uuid)
    assert action.result == 'success'
    assert 'taking back 2 extent(s) of a grow' in action.message
    _consistent(harness, lease.uuid)


def test_not_bound_in_virtio_mem_mode_is_refused(harness, env):
    uuid = harness.create(memory_mb=512, elastic=dict(POLICY),
                          requested_pools=[env.pool.uuid],
                          attach_mode=states.ATTACH_VIRTIO_MEM)
    with pytest.raises(exception.Invalid) as err:
        harness.api.bind_lease(harness_mod.user_context(), uuid,
                               env.host.uuid,
                               attach_mode=states.ATTACH_HOST)
    assert ('elastic CXL leases resize through virtio-mem: give '
            'attach_mode virtio-mem' in str(err.value))
    assert harness.lease(uuid).status == states.RESERVED
    assert env.fake.calls == []


def test_a_fabric_that_composes_now_keeps_the_lease(harness, env):
    """The fabric's back end was changed to a fabric manager after the
    lease was made: its chunks no longer change size."""
    lease = _bound(harness, env)
    info = dict(env.fabric.driver_info, backend='redfish')
    db_api.fabric_update(admin(), env.fabric.uuid, {'driver_info': info})
    now = utils.utcnow()
    _samples(lease, [2000] * 6, now)
    passes.run(harness, now)
    kept = harness.lease(lease.uuid)
    assert kept.memory_mb == 512
    assert env.fake.calls == []
    [action] = passes.resizes(harness, lease.uuid)
    assert action.result == 'error'
    assert 'whose CXL back end redfish composes memory' in action.message
    assert harness.pool(env.pool).used == 512


def test_the_conductor_refuses_an_elastic_cxl_lease_in_host_mode(harness,
                                                                 env):
    """The rule holds for a create that did not come through the API
    (Heat, a flavor) too."""
    with pytest.raises(exception.Invalid) as err:
        harness.create(memory_mb=512, elastic=dict(POLICY),
                       requested_pools=[env.pool.uuid])
    assert 'elastic CXL leases resize through virtio-mem' in str(err.value)
    assert db_api.lease_list(admin()) == []


def _chunks(*spec):
    """Extents (index, uuid) of a CXL lease and the host's details:
    spec items are (index, region or None)."""
    extents = [types.SimpleNamespace(index=i, uuid='chunk-%d' % i)
               for i, _ in spec]
    details = {'chunk-%d' % i: ({'cxl_device': 'cmm0', 'region': r}
                                if r else {}) for i, r in spec}
    return extents, details


def _victims(monkeypatch, spec, count):
    extents, details = _chunks(*spec)
    lease = types.SimpleNamespace(extents=extents)
    monkeypatch.setattr(resizer_mod, '_cxl', lambda lease_: True)
    return [e.index for e in resizer_mod._shrink_victims(lease, count,
                                                         details)]


def test_a_cxl_shrink_gives_back_whole_regions_newest_first(monkeypatch):
    # The bind made region0 of two chunks, a grow region1 of three.
    spec = [(0, 'region0'), (1, 'region0'), (2, 'region1'), (3, 'region1'),
            (4, 'region1')]
    assert _victims(monkeypatch, spec, 3) == [2, 3, 4]
    # Four asked: region1 and not half of region0.
    assert _victims(monkeypatch, spec, 4) == [2, 3, 4]
    # Fewer than the newest region holds: nothing can go.
    assert _victims(monkeypatch, spec, 2) == []
    assert _victims(monkeypatch, spec, 5) == [0, 1, 2, 3, 4]
    # Chunks the host named no region for go one by one.
    assert _victims(monkeypatch, [(0, None), (1, None), (2, None)], 2) == [
        1, 2]
    # A network lease: the newest extents, as many as asked.
    lease = types.SimpleNamespace(extents=_chunks((0, None), (1, None),
                                                  (2, None))[0])
    monkeypatch.setattr(resizer_mod, '_cxl', lambda lease_: False)
    assert [e.index for e in resizer_mod._shrink_victims(lease, 2, {})] == [
        1, 2]


def _shrink_to(harness, lease, target_mb):
    decision = resizer_mod.Decision(
        kind=resizer_mod.SHRINK, size_mb=harness.lease(lease.uuid).memory_mb,
        target_mb=target_mb, peak_mb=100.0, order=1, samples=10,
        prediction_window=60, headroom=0.2)
    with harness_mod.task_on(lease.id) as task:
        return harness.conductor.resizer.resize(task, decision)


def test_a_shrink_smaller_than_the_newest_region_keeps_it(harness, env):
    """The grow made one region per device (cmm0: one chunk, cmm1: two);
    the host gives a region back whole only, so a shrink by one chunk
    keeps the lease as it is, and a shrink by two takes cmm1's region."""
    lease = _bound(harness, env)
    now = utils.utcnow()
    _samples(lease, [2000] * 6, now)
    passes.run(harness, now)
    grown = harness.lease(lease.uuid)
    assert grown.memory_mb == 2048
    details = _details(harness, lease.uuid)['memory']
    regions = {}
    for extent in _by_index(grown)[1:]:
        regions.setdefault(details[extent.uuid]['region'], []).append(
            extent.memory_node.name)
    assert sorted(regions.values()) == [['cmm0'], ['cmm1', 'cmm1']]
    del env.fake.calls[:]

    assert _shrink_to(harness, lease, 1536) == 2048
    assert env.fake.calls == []
    last = passes.resizes(harness, lease.uuid)[-1]
    assert last.result == 'error'
    assert 'a region at a time' in last.message, last.message
    assert env.fake.requested[lease.uuid] == 2048

    assert _shrink_to(harness, lease, 1024) == 1024
    shrunk = harness.lease(lease.uuid)
    assert [e.memory_node.name for e in _by_index(shrunk)] == ['cmm0',
                                                               'cmm0']
    assert env.fake.requested[lease.uuid] == 1024
    assert passes.resizes(harness, lease.uuid)[-1].result == 'success'
    assert _details(harness, lease.uuid)[host_memory.COUNTED] == 1024
    _consistent(harness, lease.uuid)
