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

"""CXL memory bound in host mode and the compute node's MEMORY_MB in a
real Placement: the inventory follows bind and unbind, an unbind (or a
delete) that would take memory instances hold is refused with 409 and
the numbers, and an allocation racing the unbind is either checked again
or refused by Placement.

The compute host's agent runs with the noop CXL back end (no CXL
hardware here: a mock that onlines nothing); the conductor, its
database, its Placement client and Placement are real.
"""

import pytest

from composable.common import exception
from composable.conductor.placement import claims as placement_claims
from composable.conductor.placement import client as pclient
from composable.conductor.placement import host_memory
from composable import conf
from composable.db import api as dbapi
from composable import fabric as fabric_drivers
from composable.fabric import cxl
from tests.unit.conductor import harness as h_mod

CONF = conf.CONF
HOST = 'cxl-host'
MB = 'MEMORY_MB'


@pytest.fixture
def cxl_host(harness, client):
    """A CXL fabric whose device cmm0 is wired to HOST, a cxl pool of it,
    HOST's agent, and HOST's compute node provider as nova-compute makes
    it: 4096 MiB of MEMORY_MB, 512 reserved."""
    CONF.set_override('enabled_drivers', ['fake', 'cxl'], 'fabric')
    fabric_drivers._DRIVERS['cxl'] = cxl.CxlFabricDriver()
    ctx = h_mod.admin()
    fabric = dbapi.fabric_create(ctx, {
        'name': 'cxl1', 'driver': 'cxl', 'driver_info': {
            'backend': 'local', 'devices': {
                'cmm0': {'serial': '0x5a5a0001', 'capacity_mb': 4096,
                         'hosts': [HOST]}}}})
    host = dbapi.host_create(ctx, {'name': HOST, 'fabric_id': fabric.id})
    pool = dbapi.pool_create(ctx, {
        'name': 'cxl-mem', 'kind': 'memory', 'medium': 'cxl',
        'resource_class': 'CUSTOM_COMPOSABLE_CXL_MEMORY_MB',
        'fabric_id': fabric.id, 'step_size': 256, 'total': 0, 'used': 0,
        'reserved': 0, 'traits': []})
    dbapi.memory_node_create(ctx, {'name': 'cmm0', 'pool_id': pool.id,
                                   'capacity_mb': 4096, 'exporter': 'cxl'})
    harness.start_agent(HOST)
    node = client.create_provider(pclient.new_provider_uuid(), HOST)
    client.set_inventories(node['uuid'], {
        'VCPU': {'total': 8},
        MB: {'total': 4096, 'reserved': 512, 'allocation_ratio': 1.0,
             'max_unit': 4096}})
    try:
        yield {'host': host, 'pool': dbapi.pool_get(ctx, pool.uuid),
               'node': node['uuid']}
    finally:
        CONF.clear_override('enabled_drivers', 'fabric')


def memory(client, node):
    return client.get_inventories(node)[1][MB]


def used(client, node):
    return client.get_usages(node).get(MB, 0)


def instance(client, node, mb):
    """An instance's allocation on the compute node, as Nova's scheduler
    writes it."""
    uuid = pclient.new_provider_uuid()
    client.put_allocations(uuid, {node: {MB: mb, 'VCPU': 1}}, 'p2', 'u2',
                           consumer_type='INSTANCE')
    return uuid


def bound_lease(harness, setup, mb=1024):
    uuid = harness.create(memory_mb=mb,
                          requested_pools=[setup['pool'].uuid])
    uuid = uuid['uuid'] if isinstance(uuid, dict) else uuid
    harness.wait(uuid, ['reserved'])
    harness.api.bind_lease(h_mod.user_context(), uuid, setup['host'].uuid)
    lease = harness.wait(uuid, ['bound', 'bind_failed'])
    assert lease.status == 'bound', lease.fault
    return uuid


def test_memory_follows_the_lease_and_unbind_waits_for_room(
        harness, client, cxl_host):
    node = cxl_host['node']
    uuid = bound_lease(harness, cxl_host)
    # Counted at once, not at nova-compute's next periodic run; reserved
    # and the ratio stay Nova's.
    assert memory(client, node)['total'] == 5120
    assert memory(client, node)['max_unit'] == 5120
    assert memory(client, node)['reserved'] == 512

    # Capacity now (5120 - 512) x 1 = 4608; without the lease 3584.
    instance(client, node, 3000)
    second = instance(client, node, 700)
    with pytest.raises(exception.HostMemoryInUse) as err:
        harness.api.unbind_lease(h_mod.user_context(), uuid)
    message = str(err.value)
    for words in ('gives compute node %s 1024 MiB of CXL memory' % HOST,
                  'they use 3700 MiB', 'total 5120 MiB',
                  'reserved 512 MiB', 'would offer 3584 MiB',
                  'at least 116 MiB'):
        assert words in message, message
    # Nothing changed: the lease is bound, no unbind was started, the
    # inventory is as it was.
    lease = harness.lease(uuid)
    assert lease.status == 'bound' and lease.reservation is None
    assert ('unbind', 'error') not in harness.actions(uuid)
    assert [a for a, _ in harness.actions(uuid)].count('unbind') == 0
    assert memory(client, node)['total'] == 5120
    # A delete would take the memory as well.
    with pytest.raises(exception.HostMemoryInUse):
        harness.api.delete_lease(h_mod.user_context(), uuid)
    assert harness.lease(uuid).status == 'bound'

    # One instance goes: 3000 fits in 3584.
    client.delete_allocations(second)
    harness.api.unbind_lease(h_mod.user_context(), uuid)
    assert harness.wait(uuid, ['reserved', 'error']).status == 'reserved'
    assert memory(client, node)['total'] == 4096
    assert memory(client, node)['max_unit'] == 4096
    assert used(client, node) == 3000

    # Bound again and deleted: counted, then taken off again.
    harness.api.bind_lease(h_mod.user_context(), uuid,
                           cxl_host['host'].uuid)
    assert harness.wait(uuid, ['bound', 'bind_failed']).status == 'bound'
    assert memory(client, node)['total'] == 5120
    harness.api.delete_lease(h_mod.user_context(), uuid)
    assert harness.wait(uuid, ['released', 'error']).status == 'released'
    assert memory(client, node)['total'] == 4096


def test_allocation_between_check_and_write_is_checked_again(
        harness, client, cxl_host, monkeypatch):
    """The check reads inventory and usage at generation G and writes
    the lowered total at G. An instance allocated in between moves the
    generation: the write is refused (concurrent update) and the check
    runs again on the usage with that instance."""
    node = cxl_host['node']
    uuid = bound_lease(harness, cxl_host)
    instance(client, node, 3000)
    real_read = host_memory._read
    reads = []

    def read_then_allocate(placement, provider):
        got = real_read(placement, provider)
        reads.append(got)
        if len(reads) == 1:
            # Fits with the lease (3000 + 1000 <= 4608), not without
            # it (> 3584).
            instance(client, node, 1000)
        return got

    monkeypatch.setattr(host_memory, '_read', read_then_allocate)
    with pytest.raises(exception.HostMemoryInUse) as err:
        harness.api.unbind_lease(h_mod.user_context(), uuid)
    assert 'they use 4000 MiB' in str(err.value)
    # First read: 3000 used; the second one saw the instance.
    assert [r[2] for r in reads] == [3000, 4000]
    assert memory(client, node)['total'] == 5120
    assert harness.lease(uuid).status == 'bound'


def test_allocation_after_the_write_is_refused_by_placement(
        harness, client, cxl_host):
    """Once the total is lowered, Placement checks every new allocation
    against it: an instance that would only fit with the lease's memory
    is refused while the memory is being taken off, and after."""
    node = cxl_host['node']
    uuid = bound_lease(harness, cxl_host)
    instance(client, node, 3000)
    harness.api.unbind_lease(h_mod.user_context(), uuid)
    # Lowered under the reservation, before the agent was asked.
    assert memory(client, node)['total'] == 4096
    with pytest.raises(pclient.PlacementError) as err:
        instance(client, node, 1000)
    assert err.value.status == 409
    assert harness.wait(uuid, ['reserved', 'error']).status == 'reserved'
    assert used(client, node) == 3000
    assert instance(client, node, 584)


def test_failed_unbind_gives_the_memory_back(harness, client, cxl_host,
                                             monkeypatch):
    """The host could not offline the memory (the kernel could not move
    its pages): it is still there, so MEMORY_MB counts it again."""
    node = cxl_host['node']
    uuid = bound_lease(harness, cxl_host)
    agent = harness.agents[HOST]

    def refuse(*args, **kwargs):
        raise exception.DriverError(
            reason='memory blocks 33, 34 of node 1 could not be offlined')

    monkeypatch.setattr(agent.compute, 'detach_memory', refuse)
    harness.api.unbind_lease(h_mod.user_context(), uuid)
    lease = harness.wait(uuid, ['reserved', 'error'])
    assert lease.status == 'error'
    assert memory(client, node)['total'] == 5120
    monkeypatch.undo()
    harness.api.unbind_lease(h_mod.user_context(), uuid)
    assert harness.wait(uuid, ['reserved', 'error']).status == 'reserved'
    assert memory(client, node)['total'] == 4096


def test_placement_unreachable_refuses_the_unbind(harness, client,
                                                  cxl_host):
    uuid = bound_lease(harness, cxl_host)
    placement_claims.set_client(pclient.ReportClient(
        _nowhere(), retry_delay=0))
    try:
        with pytest.raises(exception.ServiceUnavailable) as err:
            harness.api.unbind_lease(h_mod.user_context(), uuid)
    finally:
        placement_claims.set_client(None)
    assert 'cannot check that no instance on compute node %s uses' % HOST \
        in str(err.value)
    assert harness.lease(uuid).status == 'bound'


def _nowhere():
    from keystoneauth1 import adapter as ks_adapter
    from keystoneauth1 import session as ks_session
    from keystoneauth1 import token_endpoint
    auth = token_endpoint.Token('http://127.0.0.1:9/placement', 'admin')
    return ks_adapter.Adapter(ks_session.Session(auth=auth),
                              service_type='placement')


def test_expiry_takes_nothing_instances_use(harness, client, cxl_host):
    """A lease whose end passed is released by the conductor on its own,
    with no request to refuse: its flow checks the same rule and fails
    (error, with the numbers) rather than take the memory."""
    import datetime

    from composable.common import utils
    from tests import lease_rows

    node = cxl_host['node']
    uuid = bound_lease(harness, cxl_host)
    second = instance(client, node, 3700)
    lease_rows.write(h_mod.admin(), harness.lease(uuid).id, {
        'end_at': utils.utcnow() - datetime.timedelta(seconds=1)})
    harness.conductor.run_periodic_tasks()
    harness.idle()
    lease = harness.wait(uuid, ['error', 'released'])
    assert lease.status == 'error'
    assert 'they use 3700 MiB' in lease.fault
    assert 'would offer 3584 MiB' in lease.fault
    assert harness.actions(uuid)[-1] == ('expire', 'error')
    assert memory(client, node)['total'] == 5120
    # The memory is still the host's: its attachment is live.
    assert [a.state for a in dbapi.attachment_list(
        h_mod.admin(), lease.id,
        states_=['attaching', 'attached', 'detaching', 'failed'])] == [
        'attached']

    client.delete_allocations(second)
    harness.api.delete_lease(h_mod.user_context(), uuid)
    assert harness.wait(uuid, ['released', 'error']).status == 'released'
    assert memory(client, node)['total'] == 4096


def test_the_api_answers_409_with_the_numbers(harness, client, cxl_host):
    from composable.api import app as api_app
    from composable import policies
    from tests.unit.api import base as api_base

    policies.reset()
    api = api_base.Client(api_app.setup_app('noauth'), 'admin')
    node = cxl_host['node']
    uuid = bound_lease(harness, cxl_host)
    instance(client, node, 4000)
    url = '/v1/leases/%s' % uuid
    for resp in (api.post(url + '/unbind'), api.delete(url)):
        assert resp.status == 409, resp
        assert resp.error['code'] == 'composable.lease.host_memory_in_use'
        assert 'they use 4000 MiB' in resp.error['detail']
        assert 'would offer 3584 MiB' in resp.error['detail']
    assert api.get(url).json['status'] == 'bound'


def test_two_unbinds_at_once_take_only_what_is_free(harness, client,
                                                    cxl_host, monkeypatch):
    """Two leases on one host, unbound at the same moment (each under
    its own reservation, so nothing orders them but Placement): the
    instances fit without either, not without both. Both checks read
    the same figures before either writes; exactly one write lands, the
    other conflicts, reads again and is refused on the figures the first
    left."""
    import threading

    node = cxl_host['node']
    first = bound_lease(harness, cxl_host)
    second = bound_lease(harness, cxl_host)
    # (4096 + 2048 - 512) = 5632 with both, 4608 with one, 3584 with none.
    assert memory(client, node)['total'] == 6144
    instance(client, node, 4000)
    start = threading.Barrier(2)
    both_read = threading.Barrier(2)
    real_read = host_memory._read
    reads = []

    def read_together(placement, provider):
        got = real_read(placement, provider)
        reads.append(got[0])
        if len(reads) <= 2:
            both_read.wait(timeout=30)
        return got

    monkeypatch.setattr(host_memory, '_read', read_together)
    outcome = {}

    def unbind(uuid):
        start.wait(timeout=30)
        try:
            harness.api.unbind_lease(h_mod.user_context(), uuid)
            outcome[uuid] = 'unbinding'
        except exception.HostMemoryInUse as exc:
            outcome[uuid] = str(exc)

    threads = [threading.Thread(target=unbind, args=(uuid,))
               for uuid in (first, second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert sorted(outcome) == sorted([first, second])
    went = [uuid for uuid, said in outcome.items() if said == 'unbinding']
    assert len(went) == 1, outcome
    stayed = first if went == [second] else second
    assert 'they use 4000 MiB' in outcome[stayed]
    assert 'total 5120 MiB' in outcome[stayed]
    assert harness.wait(went[0], ['reserved', 'error']).status == 'reserved'
    assert harness.lease(stayed).status == 'bound'
    assert memory(client, node)['total'] == 5120
    # Two reads of one generation, then the loser's read of the next.
    assert reads[0] == reads[1] and len(reads) == 3 and reads[2] > reads[0]


# virtio-mem mode: the region onlined on the host is one guest's. The
# compute node counts it (MemTotal grows) and composable holds it with an
# allocation of its own, so what Nova's scheduler sees free is unchanged.

GUEST = '11111111-2222-3333-4444-555555555555'


def virtio_mem_lease(harness, setup, mb=1024):
    uuid = harness.create(memory_mb=mb,
                          requested_pools=[setup['pool'].uuid])
    uuid = uuid['uuid'] if isinstance(uuid, dict) else uuid
    harness.wait(uuid, ['reserved'])
    harness.api.bind_lease(h_mod.user_context(), uuid, setup['host'].uuid,
                           instance_uuid=GUEST, attach_mode='virtio-mem')
    lease = harness.wait(uuid, ['bound', 'bind_failed'])
    assert lease.status == 'bound', lease.fault
    return uuid


def held(client, node, uuid):
    """MiB of MEMORY_MB the lease's hold has on the compute node."""
    consumer = host_memory.hold_consumer(_Uuid(uuid))
    got = client.get_allocations(consumer)['allocations']
    return got.get(node, {}).get('resources', {}).get(MB, 0)


class _Uuid(object):
    def __init__(self, uuid):
        self.uuid = uuid


def free(client, node):
    inv = memory(client, node)
    return ((inv['total'] - inv['reserved']) * inv['allocation_ratio'] -
            used(client, node))


def test_virtio_mem_lease_is_counted_and_held(harness, client, cxl_host):
    from composable.conductor.placement import sync

    node = cxl_host['node']
    instance(client, node, 3000)
    before = free(client, node)
    uuid = virtio_mem_lease(harness, cxl_host)
    att = dbapi.attachment_list(h_mod.admin(), harness.lease(uuid).id,
                                states_=['attached'])
    assert [a.mode for a in att] == ['virtio-mem']
    assert memory(client, node)['total'] == 5120
    assert held(client, node, uuid) == 1024
    assert used(client, node) == 4024
    assert free(client, node) == before
    # The reconcile pass reads pool providers only: the hold stays.
    sync.reconcile(client=client)
    assert held(client, node, uuid) == 1024
    assert used(client, node) == 4024

    # The lease's own hold is no instance's: the unbind is not refused
    # (3000 fits in 3584 without the lease).
    harness.api.unbind_lease(h_mod.user_context(), uuid)
    assert harness.wait(uuid, ['reserved', 'error']).status == 'reserved'
    assert memory(client, node)['total'] == 4096
    assert held(client, node, uuid) == 0
    assert used(client, node) == 3000
    assert free(client, node) == before

    # Bound again and deleted: counted and held, then both gone.
    harness.api.bind_lease(h_mod.user_context(), uuid,
                           cxl_host['host'].uuid, instance_uuid=GUEST,
                           attach_mode='virtio-mem')
    assert harness.wait(uuid, ['bound', 'bind_failed']).status == 'bound'
    assert (memory(client, node)['total'], held(client, node, uuid)) == (
        5120, 1024)
    harness.api.delete_lease(h_mod.user_context(), uuid)
    assert harness.wait(uuid, ['released', 'error']).status == 'released'
    assert (memory(client, node)['total'], used(client, node)) == (
        4096, 3000)
    assert held(client, node, uuid) == 0


def test_virtio_mem_unbind_still_refused_for_instances(harness, client,
                                                       cxl_host):
    """The hold keeps instances off the lease's memory, so its own unbind
    always finds room. Without the hold (deleted by hand here) an
    instance can take that memory: the check, which leaves out only the
    hold, then refuses the unbind."""
    node = cxl_host['node']
    uuid = virtio_mem_lease(harness, cxl_host)
    instance(client, node, 3584)
    # 3584 + 1024 held = all of (5120 - 512): nothing more fits.
    with pytest.raises(pclient.PlacementError):
        instance(client, node, 1)
    client.delete_allocations(host_memory.hold_consumer(_Uuid(uuid)))
    instance(client, node, 100)
    with pytest.raises(exception.HostMemoryInUse) as err:
        harness.api.unbind_lease(h_mod.user_context(), uuid)
    assert 'they use 3684 MiB' in str(err.value)
    assert memory(client, node)['total'] == 5120
    assert harness.lease(uuid).status == 'bound'


def test_virtio_mem_on_a_full_node_is_counted_then_held(harness, client,
                                                        cxl_host):
    """No room for the hold before the memory is counted: the total
    grows first, and the hold takes exactly what it added."""
    node = cxl_host['node']
    instance(client, node, 3584)
    uuid = virtio_mem_lease(harness, cxl_host)
    assert memory(client, node)['total'] == 5120
    assert held(client, node, uuid) == 1024
    assert free(client, node) == 0


def test_failed_virtio_mem_unbind_gives_both_back(harness, client,
                                                  cxl_host, monkeypatch):
    """The guest did not give the memory back: the region stays on the
    host, counted and held again."""
    node = cxl_host['node']
    uuid = virtio_mem_lease(harness, cxl_host)
    agent = harness.agents[HOST]

    def refuse(*args, **kwargs):
        raise exception.DriverError(
            reason='instance %s did not give the memory back' % GUEST)

    monkeypatch.setattr(agent.compute, 'detach_memory', refuse)
    harness.api.unbind_lease(h_mod.user_context(), uuid)
    assert harness.wait(uuid, ['reserved', 'error']).status == 'error'
    assert (memory(client, node)['total'], held(client, node, uuid)) == (
        5120, 1024)
    assert used(client, node) == 1024
    monkeypatch.undo()
    harness.api.unbind_lease(h_mod.user_context(), uuid)
    assert harness.wait(uuid, ['reserved', 'error']).status == 'reserved'
    assert (memory(client, node)['total'], held(client, node, uuid)) == (
        4096, 0)


def test_virtio_mem_unbind_retries_a_generation_conflict(
        harness, client, cxl_host, monkeypatch):
    """An instance allocated between the read and the write moves the
    provider's generation: the lowering is refused by Placement, read
    again (with the instance and the hold) and written."""
    node = cxl_host['node']
    uuid = virtio_mem_lease(harness, cxl_host)
    real_read = host_memory._read
    reads = []

    def read_then_allocate(placement, provider):
        got = real_read(placement, provider)
        reads.append(got)
        if len(reads) == 1:
            instance(client, node, 1000)
        return got

    monkeypatch.setattr(host_memory, '_read', read_then_allocate)
    harness.api.unbind_lease(h_mod.user_context(), uuid)
    assert [r[2] for r in reads] == [1024, 2024]
    assert reads[1][0] > reads[0][0]
    assert harness.wait(uuid, ['reserved', 'error']).status == 'reserved'
    assert (memory(client, node)['total'], held(client, node, uuid)) == (
        4096, 0)
    assert used(client, node) == 1000


def test_virtio_mem_hold_not_deleted_is_given_back_then_resumed(
        harness, client, cxl_host, monkeypatch):
    """Placement refuses the deletion of the hold after the total was
    lowered: the unbind is refused (503) and the total given back. An
    unbind that
    stopped after lowering (the attachment says so) deletes the hold
    without lowering the total again."""
    node = cxl_host['node']
    uuid = virtio_mem_lease(harness, cxl_host)
    consumer = host_memory.hold_consumer(_Uuid(uuid))
    conductors = placement_claims.get_client()
    real_delete = conductors.delete_allocations

    def refuse(who):
        if who == consumer:
            raise pclient.PlacementError(status=500, method='PUT',
                                         url='/allocations/' + who,
                                         detail='(mock) refused')
        return real_delete(who)

    monkeypatch.setattr(conductors, 'delete_allocations', refuse)
    with pytest.raises(exception.ServiceUnavailable):
        harness.api.unbind_lease(h_mod.user_context(), uuid)
    monkeypatch.undo()
    lease = harness.lease(uuid)
    assert lease.status == 'bound'
    assert (memory(client, node)['total'], held(client, node, uuid)) == (
        5120, 1024)

    # An attempt that lowered the total and stopped: resumed, it only
    # deletes the hold.
    [att] = dbapi.attachment_list(h_mod.admin(), lease.id,
                                  states_=['attached'])
    host_memory._change(client, {'uuid': node}, -1024)
    host_memory._mark(h_mod.admin(), att, **{host_memory.TAKEN: True})
    host_memory.take_back(h_mod.admin(), harness.lease(uuid))
    assert (memory(client, node)['total'], held(client, node, uuid)) == (
        4096, 0)


def test_virtio_mem_hold_goes_with_a_gone_host(harness, client, cxl_host):
    """Nova evacuates the guest from a host that is down for good: the
    unbind checks nothing there, and deletes the hold, so the dead
    compute node's provider holds nothing of the lease."""
    from composable.common import states

    node = cxl_host['node']
    uuid = virtio_mem_lease(harness, cxl_host)
    instance(client, node, 3584)
    ctx = h_mod.admin()
    lease = harness.lease(uuid)
    with h_mod.task_on(lease.id, context=ctx) as task:
        task.process_event(states.UNBIND, action='evacuate')
        assert harness.conductor.flows.unbind(
            task, action='evacuate', keep_consumer=True,
            host_gone=True) == states.RESERVED
    assert held(client, node, uuid) == 0
    assert used(client, node) == 3584


# Elastic leases in virtio-mem mode: the compute node's MEMORY_MB and
# the guest's hold follow each resize, the hold first on a grow (after
# the guest got the memory), the total first on a shrink (after the
# guest gave it back).

ELASTIC = {'min_mb': 512, 'max_mb': 3072, 'observation_window': 300,
           'prediction_window': 60, 'headroom': 0.2}


def _decision(kind, size_mb, target_mb):
    from composable.conductor.elastic import resizer

    return resizer.Decision(kind=kind, size_mb=size_mb, target_mb=target_mb,
                            peak_mb=target_mb, order=1, samples=10,
                            prediction_window=60, headroom=0.2)


def _resize(harness, lease, decision):
    with h_mod.task_on(lease.id) as task:
        return harness.conductor.resizer.resize(task, decision)


def test_elastic_virtio_mem_lease_resizes_the_count_and_the_hold(
        harness, client, cxl_host, monkeypatch):
    from tests.unit.conductor.elastic import fake_vmem_agent

    node = cxl_host['node']
    fake = fake_vmem_agent.FakeVirtioMemAgent(
        harness.agents[HOST].compute).install(monkeypatch)
    uuid = harness.create(memory_mb=1024, elastic=dict(ELASTIC),
                          requested_pools=[cxl_host['pool'].uuid],
                          attach_mode='virtio-mem')
    harness.api.bind_lease(h_mod.user_context(), uuid, cxl_host['host'].uuid,
                           instance_uuid=GUEST, attach_mode='virtio-mem')
    lease = harness.wait(uuid, ['bound', 'bind_failed'])
    assert lease.status == 'bound', lease.fault
    instance(client, node, 2000)
    before = free(client, node)
    assert (memory(client, node)['total'], held(client, node, uuid)) == (
        5120, 1024)
    ctx = h_mod.admin()

    assert _resize(harness, lease, _decision('grow', 1024, 2048)) \
        == 2048
    assert fake.requested[uuid] == 2048
    assert (memory(client, node)['total'], held(client, node, uuid)) == (
        6144, 2048)
    assert memory(client, node)['max_unit'] == 6144
    # What instances see free is unchanged: the guest holds its memory.
    assert free(client, node) == before

    # A full node: no room for the larger hold before the total grows;
    # the total first, the hold at once after it.
    instance(client, node, int(before))
    assert free(client, node) == 0
    assert _resize(harness, lease, _decision('grow', 2048, 2560)) \
        == 2560
    assert (memory(client, node)['total'], held(client, node, uuid)) == (
        6656, 2560)
    assert free(client, node) == 0

    assert _resize(harness, lease, _decision('shrink', 2560, 1024)) \
        == 1024
    assert fake.requested[uuid] == 1024
    assert (memory(client, node)['total'], held(client, node, uuid)) == (
        5120, 1024)
    assert free(client, node) == 0
    assert [a.result for a in dbapi.action_list(ctx, lease.id)
            if a.action == 'resize'] == ['success'] * 3

    # A guest that does not give the memory back: nothing moves.
    fake.floor_mb = 1024
    assert _resize(harness, lease, _decision('shrink', 1024, 512)) \
        == 1024
    assert (memory(client, node)['total'], held(client, node, uuid)) == (
        5120, 1024)

    # The unbind takes back what the lease holds now.
    fake.floor_mb = 0
    harness.api.unbind_lease(h_mod.user_context(), uuid)
    assert harness.wait(uuid, ['reserved', 'error']).status == 'reserved'
    assert (memory(client, node)['total'], held(client, node, uuid)) == (
        4096, 0)
