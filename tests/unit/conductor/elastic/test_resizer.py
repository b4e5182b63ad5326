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

"""Elastic memory leases: the conductor's resizing task with a real
conductor, real agent RPC servers (simulated data plane: the compute
agent records what it is asked to attach) and a SQLite database."""

import datetime
import threading

import pytest

from composable.common import exception
from composable.common import states
from composable.common import utils
from composable import conf
from composable.conductor.allocator import claims as allocator
from composable.conductor.elastic import resizer as resizer_mod
from composable.conductor import task as lease_task
from composable.db import allocation
from composable.db import api as db_api
from tests.unit.conductor.elastic import passes
from tests.unit.conductor import harness as harness_mod

CONF = conf.CONF
admin = harness_mod.admin
HOST = harness_mod.HOSTS[0]
# Generous for a loaded machine; nothing here waits for it unless broken.
DEADLINE = 60

POLICY = {'min_mb': 1024, 'max_mb': 4096, 'observation_window': 300,
          'prediction_window': 60, 'headroom': 0.2}


@pytest.fixture(autouse=True)
def ten_second_samples():
    # The samples these tests report come every 10 s.
    CONF.set_override('sample_interval', 10, 'elastic')
    yield
    CONF.clear_override('sample_interval', 'elastic')


@pytest.fixture
def calls(harness, monkeypatch):
    """What the compute agent is asked to attach and detach: [(method,
    [extent uuids])]."""
    agent = harness.agents[HOST].compute
    seen = []
    for name in ('attach_memory', 'detach_memory'):
        original = getattr(agent, name)

        def record(context, lease, extents, mode, instance_uuid=None,
                   _name=name, _original=original):
            seen.append((_name, sorted(e['uuid'] for e in extents)))
            return _original(context, lease, extents, mode,
                             instance_uuid=instance_uuid)
        monkeypatch.setattr(agent, name, record)
    return seen


def _bound(harness, memory_mb=1024, policy=POLICY, calls=None):
    uuid = harness.create(memory_mb=memory_mb, elastic=dict(policy))
    harness.api.bind_lease(harness_mod.user_context(), uuid,
                           harness.hosts[HOST].uuid)
    lease = harness.wait(uuid, states.BOUND)
    assert lease.elastic == policy
    if calls is not None:
        # The bind's own attach is not the resizer's.
        del calls[:]
    return lease


def _samples(harness, lease, values, now, interval=10):
    """Usage samples ``values`` (oldest first), the newest taken at
    ``now``, as the compute agent of HOST reports them."""
    count = len(values)
    stored, dropped = db_api.usage_record(admin(), HOST, [
        {'lease_uuid': lease.uuid, 'used_mb': int(v),
         'size_mb': lease.memory_mb,
         'taken_at': now - datetime.timedelta(
             seconds=(count - 1 - i) * interval)}
        for i, v in enumerate(values)])
    assert (stored, dropped) == (count, [])


def _extent_uuids(harness, uuid):
    return sorted(e.uuid for e in harness.lease(uuid).extents)


def _consistent(harness, uuid):
    lease = harness.lease(uuid)
    assert lease.memory_mb == sum(e.size_mb for e in lease.extents)
    assert allocation.check_consistency(admin()) == []


def test_grows_ahead_of_a_rising_workload(harness, calls):
    lease = _bound(harness, calls=calls)
    before = _extent_uuids(harness, lease.uuid)
    now = utils.utcnow()
    _samples(harness, lease, [100, 300, 500, 700, 900, 1000], now)
    assert len(passes.run(harness, now)) == 1
    grown = harness.lease(lease.uuid)
    assert grown.status == states.BOUND and grown.reservation is None
    # A peak of at least the newest sample, plus 20 %: more than 1024,
    # in whole extents, within max_mb.
    assert 2048 <= grown.memory_mb <= 4096
    assert grown.memory_mb % 1024 == 0
    _consistent(harness, lease.uuid)
    new = sorted(set(_extent_uuids(harness, lease.uuid)) - set(before))
    assert len(new) == (grown.memory_mb - 1024) // 1024
    # Only the new extents are handed to the agent; the old one stays.
    assert calls == [('attach_memory', new)]
    for extent in grown.extents:
        assert extent.export_state == states.EXTENT_EXPORTED
    attached = db_api.attachment_list(
        admin(), grown.id, states_=states.LIVE_ATTACHMENT_STATES)
    assert set(attached[0].details['memory']) == set(before) | set(new)
    [action] = passes.resizes(harness, lease.uuid)
    assert action.result == 'success'
    assert 'Growing from 1024 to %d MiB: predicted peak' % (
        grown.memory_mb) in action.message
    # The capacity is the pool's: counted there.
    assert harness.pool(harness.memory_pool).used == grown.memory_mb


def test_full_pool_keeps_the_lease_at_its_size(harness, calls):
    lease = _bound(harness, calls=calls)
    # The rest of the pool (2 nodes x 4 GiB) goes to another lease.
    other = harness.create(memory_mb=7168)
    assert harness.lease(other).status == states.RESERVED
    now = utils.utcnow()
    _samples(harness, lease, [1024] * 6, now)
    passes.run(harness, now)
    kept = harness.lease(lease.uuid)
    assert kept.memory_mb == 1024 and len(kept.extents) == 1
    assert kept.status == states.BOUND and kept.fault is None
    assert calls == []
    [action] = passes.resizes(harness, lease.uuid)
    assert action.result == 'error'
    assert 'Kept at 1024 MiB' in action.message
    assert 'has 0 MiB free' in action.message
    _consistent(harness, lease.uuid)


def test_shrinks_only_after_the_hysteresis(harness, calls):
    CONF.set_override('shrink_hysteresis', 30, 'elastic')
    try:
        lease = _bound(harness, memory_mb=3072, calls=calls)
        extents = sorted(harness.lease(lease.uuid).extents,
                         key=lambda e: e.index)
        t0 = utils.utcnow()
        _samples(harness, lease, [200] * 30, t0)
        # Low for the first time: only noted.
        assert passes.run(harness, t0) == []
        assert harness.lease(lease.uuid).elastic_low_since is not None
        assert passes.run(harness, t0 + datetime.timedelta(seconds=10)) == []
        assert harness.lease(lease.uuid).memory_mb == 3072
        assert calls == []
        # Low for longer than the hysteresis: shrunk to what the
        # prediction needs (200 MiB + 20 % = one extent = min_mb).
        passes.run(harness, t0 + datetime.timedelta(seconds=31))
        shrunk = harness.lease(lease.uuid)
        assert shrunk.memory_mb == 1024
        assert [e.uuid for e in shrunk.extents] == [extents[0].uuid]
        # The newest extents were detached (swapoff on the host) first.
        assert calls == [('detach_memory',
                          sorted(e.uuid for e in extents[1:]))]
        assert shrunk.elastic_low_since is None
        _consistent(harness, lease.uuid)
        assert harness.pool(harness.memory_pool).used == 1024
        # Unexported and scrubbed: only the kept extent is still live on
        # its memory node.
        live = {uuid for exports in harness.live_exports().values()
                for uuid in exports}
        backed = set().union(*harness.backed().values())
        for extent in extents[1:]:
            assert not any(extent.uuid in str(x) for x in live | backed)
        [action] = passes.resizes(harness, lease.uuid)
        assert action.result == 'success'
        assert 'Shrinking from 3072 to 1024 MiB' in action.message
    finally:
        CONF.clear_override('shrink_hysteresis', 'elastic')


def test_a_rising_prediction_resets_the_hysteresis(harness, calls):
    lease = _bound(harness, memory_mb=2048, calls=calls)
    t0 = utils.utcnow()
    _samples(harness, lease, [100] * 10, t0)
    passes.run(harness, t0)
    assert harness.lease(lease.uuid).elastic_low_since is not None
    # Back to what the lease holds: no longer low.
    t1 = t0 + datetime.timedelta(seconds=10)
    _samples(harness, lease, [1600], t1)
    passes.run(harness, t1)
    assert harness.lease(lease.uuid).elastic_low_since is None
    assert harness.lease(lease.uuid).memory_mb == 2048


def test_agent_timeout_during_a_grow_rolls_it_back(harness, calls):
    lease = _bound(harness, calls=calls)
    before = {node: exports
              for node, exports in harness.live_exports().items()
              if exports}
    # The compute agent stops answering: the attach of the new extents
    # times out (and so does the detach the roll-back asks for).
    harness.stop_agent(HOST)
    now = utils.utcnow()
    _samples(harness, lease, [1024] * 6, now)
    passes.run(harness, now)
    kept = harness.lease(lease.uuid)
    assert kept.memory_mb == 1024 and len(kept.extents) == 1
    assert kept.status == states.BOUND
    # The new extents were unexported and scrubbed: the memory nodes
    # export what they did before.
    assert {node: exports
            for node, exports in harness.live_exports().items()
            if exports} == before
    _consistent(harness, lease.uuid)
    assert harness.pool(harness.memory_pool).used == 1024
    [action] = passes.resizes(harness, lease.uuid)
    assert action.result == 'error'
    assert 'did not answer' in action.message
    assert 'Kept at 1024 MiB' in action.message


def test_a_delete_waits_for_a_running_grow(harness, calls, monkeypatch):
    lease = _bound(harness, calls=calls)
    agent = harness.agents[HOST].compute
    entered, go_on = threading.Event(), threading.Event()
    original = agent.attach_memory

    def slow_attach(*args, **kwargs):
        entered.set()
        assert go_on.wait(DEADLINE)
        return original(*args, **kwargs)
    monkeypatch.setattr(agent, 'attach_memory', slow_attach)
    now = utils.utcnow()
    _samples(harness, lease, [1024] * 6, now)
    [future] = harness.conductor.resizer.run(admin(), now=now)
    try:
        assert entered.wait(DEADLINE)
        # The grow holds the lease's reservation: a delete or an unbind
        # is refused as busy, and changes nothing.
        with pytest.raises(exception.LeaseLocked):
            harness.api.delete_lease(harness_mod.user_context(), lease.uuid)
        with pytest.raises(exception.LeaseLocked):
            harness.api.unbind_lease(harness_mod.user_context(), lease.uuid)
        assert harness.lease(lease.uuid).status == states.BOUND
    finally:
        go_on.set()
    future.result(timeout=DEADLINE)
    grown = harness.wait(lease.uuid, states.BOUND)
    assert grown.memory_mb > 1024
    # Now the delete goes through and takes the grown lease down whole.
    harness.api.delete_lease(harness_mod.user_context(), lease.uuid)
    harness.wait(lease.uuid, states.RELEASED)
    harness.idle(DEADLINE)
    harness.assert_nothing_live()
    assert harness.pool(harness.memory_pool).used == 0
    assert allocation.check_consistency(admin()) == []


def test_a_lease_being_unbound_is_not_resized(harness, calls):
    lease = _bound(harness, calls=calls)
    now = utils.utcnow()
    _samples(harness, lease, [1024] * 6, now)
    # Another operation holds the lease (as an unbind in progress does).
    with lease_task.acquire(admin(), lease.id, 'other-conductor'):
        assert harness.conductor.resizer.run(admin(), now=now) == []
    assert harness.lease(lease.uuid).memory_mb == 1024
    assert calls == []
    # Unbound, it is no longer looked at at all.
    harness.api.unbind_lease(harness_mod.user_context(), lease.uuid)
    harness.wait(lease.uuid, states.RESERVED)
    assert harness.conductor.resizer.run(admin(), now=now) == []
    assert passes.resizes(harness, lease.uuid) == []


def test_grow_races_a_create_for_the_last_extent(harness):
    lease = _bound(harness)
    # One extent left in the pool; a grow and a create both want it.
    harness.create(memory_mb=6144)
    assert harness.pool(harness.memory_pool).used == 7168
    barrier = threading.Barrier(2)
    outcome = {}

    def grow():
        barrier.wait()
        try:
            outcome['grow'] = allocator.grow_memory(admin(), lease.id, 1024)
        except exception.InsufficientCapacity as exc:
            outcome['grow'] = exc

    def create():
        barrier.wait()
        outcome['create'] = harness.lease(harness.create(memory_mb=1024))

    threads = [threading.Thread(target=grow), threading.Thread(target=create)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(DEADLINE)
    grew = isinstance(outcome['grow'], list)
    created = outcome['create'].status == states.RESERVED
    assert grew != created, outcome
    assert harness.pool(harness.memory_pool).used == 8192
    assert allocation.check_consistency(admin()) == []


def test_no_prediction_without_enough_samples(harness, calls):
    lease = _bound(harness, calls=calls)
    now = utils.utcnow()
    _samples(harness, lease, [1024] * (CONF.elastic.min_samples - 1), now)
    assert harness.conductor.resizer.run(admin(), now=now) == []
    # Samples older than the observation window do not count.
    _samples(harness, lease, [1024] * 10,
             now - datetime.timedelta(seconds=1000))
    assert harness.conductor.resizer.run(admin(), now=now) == []
    assert calls == []


def test_usage_grid_puts_samples_on_their_steps():
    end = datetime.datetime(2026, 11, 25, 12, 1, 0)

    class Row(object):
        def __init__(self, seconds_ago, used):
            self.taken_at = end - datetime.timedelta(seconds=seconds_ago)
            self.used_mb = used
    # Steps of 10 s: [-60,-50) ... [-10, 0], newest last.
    grid = resizer_mod.usage_grid(
        [Row(59, 10), Row(48, 20), Row(45, 25), Row(15, 40), Row(0, 50),
         Row(61, 99), Row(-5, 99)], end, 10, 6)
    assert grid[0] == 10 and grid[1] == 25 and grid[4] == 40
    assert grid[5] == 50
    assert all(grid[i] != grid[i] for i in (2, 3))  # NaN: no sample


def test_a_grow_cut_short_by_a_dead_conductor_is_rolled_back(
        harness, calls):
    lease = _bound(harness, calls=calls)
    before = {node: exports
              for node, exports in harness.live_exports().items()
              if exports}
    # What a conductor that died mid-grow leaves: the extents claimed,
    # marked as pending, exported to the host, never attached.
    new = allocator.grow_memory(admin(), lease.id, 2048)
    grown = harness.lease(lease.uuid)
    resizer_mod._mark(admin(), grown, resizer_mod.PENDING_GROW, new)
    for extent in grown.extents:
        if extent.uuid in new:
            harness.conductor.flows._export(admin(), grown, extent,
                                            grown.host)
    assert harness.pool(harness.memory_pool).used == 3072
    now = utils.utcnow()
    _samples(harness, lease, [1024] * 6, now)
    # The next pass settles it before predicting anything.
    assert len(passes.run(harness, now)) == 1
    settled = harness.lease(lease.uuid)
    assert settled.memory_mb == 1024 and len(settled.extents) == 1
    assert {node: exports
            for node, exports in harness.live_exports().items()
            if exports} == before
    assert calls == [('detach_memory', sorted(new))]
    assert resizer_mod._pending(admin(), settled) == {}
    _consistent(harness, lease.uuid)
    [action] = passes.resizes(harness, lease.uuid)
    assert action.result == 'success'
    assert 'taking back 2 extent(s) of a grow' in action.message
    # And the pass after that predicts again (and grows).
    passes.run(harness, now)
    assert harness.lease(lease.uuid).memory_mb > 1024


def test_a_shrink_the_host_refuses_keeps_the_extents(harness, calls,
                                                     monkeypatch):
    CONF.set_override('shrink_hysteresis', 0, 'elastic')
    try:
        lease = _bound(harness, memory_mb=2048, calls=calls)
        agent = harness.agents[HOST].compute

        def refuse(context, lease, extents, mode, instance_uuid=None):
            calls.append(('detach_memory', sorted(e['uuid']
                                                  for e in extents)))
            raise exception.DriverError(
                reason='swapoff: Cannot allocate memory')
        monkeypatch.setattr(agent, 'detach_memory', refuse)
        t0 = utils.utcnow()
        _samples(harness, lease, [100] * 10, t0)
        passes.run(harness, t0)
        passes.run(harness, t0 + datetime.timedelta(seconds=1))
        kept = harness.lease(lease.uuid)
        assert kept.memory_mb == 2048 and len(kept.extents) == 2
        assert [c[0] for c in calls] == ['detach_memory']
        [action] = passes.resizes(harness, lease.uuid)
        assert action.result == 'error'
        assert 'Cannot allocate memory' in action.message
        assert resizer_mod._pending(admin(), kept) == {}
        _consistent(harness, lease.uuid)
    finally:
        CONF.clear_override('shrink_hysteresis', 'elastic')


def test_two_conductors_resize_a_lease_once(harness, calls):
    from composable.conductor import manager as conductor_manager

    lease = _bound(harness, calls=calls)
    other = conductor_manager.ConductorManager('cond-1')
    now = utils.utcnow()
    _samples(harness, lease, [1024] * 6, now)
    barrier = threading.Barrier(2)
    started = {}

    def run(name, manager):
        barrier.wait()
        started[name] = manager.resizer.run(admin(), now=now)

    threads = [threading.Thread(target=run, args=(name, manager))
               for name, manager in (('cond-0', harness.conductor),
                                     ('cond-1', other))]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(DEADLINE)
        for futures in started.values():
            for future in futures:
                future.result(timeout=DEADLINE)
        harness.idle(DEADLINE)
        assert other.wait_for_workers(DEADLINE)
    finally:
        other._executor.shutdown(wait=True)
    # However the two passes interleaved, the lease grew once.
    assert sum(len(f) for f in started.values()) == 1
    assert [a.result for a in passes.resizes(harness, lease.uuid)] == [
        'success']
    assert len(calls) == 1
    _consistent(harness, lease.uuid)


@pytest.fixture
def reserved_by_pass(monkeypatch):
    """The ids of the leases whose reservation the resizing pass tries
    to take, in order."""
    seen = []
    original = lease_task.try_acquire

    def recording(context, lease_id, host, listed=None):
        seen.append(lease_id)
        return original(context, lease_id, host, listed=listed)
    monkeypatch.setattr(lease_task, 'try_acquire', recording)
    return seen


def test_a_pass_reserves_only_the_leases_it_acts_on(
        harness, calls, reserved_by_pass):
    # Steady: its prediction (500 MiB + 20 %) fits the one extent it
    # holds, so there is nothing to do, nothing to write.
    steady = _bound(harness, calls=calls)
    # Busy: 1024 MiB used of 1024: grows.
    busy = _bound(harness, calls=calls)
    # Idle: predicted low, the start of which is noted first.
    idle = _bound(harness, memory_mb=2048, calls=calls)
    del calls[:]
    now = utils.utcnow()
    _samples(harness, steady, [500] * 6, now)
    _samples(harness, busy, [1024] * 6, now)
    _samples(harness, idle, [100] * 6, now)

    assert len(passes.run(harness, now)) == 1
    assert sorted(reserved_by_pass) == sorted([busy.id, idle.id])
    assert harness.lease(busy.uuid).memory_mb == 2048
    assert [a.result for a in passes.resizes(harness, busy.uuid)] == [
        'success']
    assert harness.lease(idle.uuid).elastic_low_since is not None
    assert harness.lease(steady.uuid).memory_mb == 1024
    assert passes.resizes(harness, steady.uuid) == []
    assert [name for name, _ in calls] == ['attach_memory']

    # Next pass: the busy lease has what it needs, the idle one waits for
    # the hysteresis (600 s by default): nobody's reservation is taken.
    del reserved_by_pass[:]
    later = now + datetime.timedelta(seconds=10)
    assert passes.run(harness, later) == []
    assert reserved_by_pass == []
    assert harness.lease(idle.uuid).memory_mb == 2048
    assert harness.lease(idle.uuid).elastic_low_since is not None
    _consistent(harness, busy.uuid)


@pytest.mark.parametrize('request_', ['unbind', 'delete'])
def test_a_lease_unbound_or_deleted_after_the_listing_is_passed_by(
        harness, calls, monkeypatch, request_):
    lease = _bound(harness, calls=calls)
    now = utils.utcnow()
    _samples(harness, lease, [1024] * 6, now)
    original = db_api.elastic_lease_refs

    def listed_then_changed(context):
        rows = original(context)
        assert [r.uuid for r in rows] == [lease.uuid]
        # Between the listing and the pass's action on the lease.
        if request_ == 'unbind':
            harness.api.unbind_lease(harness_mod.user_context(), lease.uuid)
            harness.wait(lease.uuid, states.RESERVED)
        else:
            harness.api.delete_lease(harness_mod.user_context(), lease.uuid)
            harness.wait(lease.uuid, states.RELEASED)
        harness.idle(DEADLINE)
        return rows
    monkeypatch.setattr(db_api, 'elastic_lease_refs', listed_then_changed)

    # The listed row still asks for a grow; under the reservation the
    # lease is seen as it is now, and left alone.
    assert harness.conductor.resizer.run(admin(), now=now) == []
    harness.idle(DEADLINE)
    assert passes.resizes(harness, lease.uuid) == []
    assert [name for name, _ in calls] == ['detach_memory']  # the unbind's
    after = harness.lease(lease.uuid)
    assert after.status == (states.RESERVED if request_ == 'unbind'
                            else states.RELEASED)
    assert allocation.check_consistency(admin()) == []


def test_a_resize_cut_short_is_settled_without_samples(harness, calls):
    # The pending mark alone (no usage sample at all, so no prediction)
    # makes the pass take the lease: what a dead conductor left is
    # settled first.
    lease = _bound(harness, calls=calls)
    new = allocator.grow_memory(admin(), lease.id, 1024)
    resizer_mod._mark(admin(), harness.lease(lease.uuid),
                      resizer_mod.PENDING_GROW, new)
    assert len(passes.run(harness, utils.utcnow())) == 1
    settled = harness.lease(lease.uuid)
    assert settled.memory_mb == 1024 and len(settled.extents) == 1
    assert resizer_mod._pending(admin(), settled) == {}
    [action] = passes.resizes(harness, lease.uuid)
    assert 'taking back 1 extent(s) of a grow' in action.message
    _consistent(harness, lease.uuid)
