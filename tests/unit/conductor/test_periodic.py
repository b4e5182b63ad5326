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

"""Periodic tasks: takeover of a dead conductor's leases, delayed start,
expiry."""

import datetime
import threading

import pytest

from composable.common import exception
from composable.common import states
from composable.common import utils
from composable.conductor import manager as conductor_manager
from composable.conductor import task as lease_task
from composable.db import api as db_api
from tests import lease_rows
from tests.unit.conductor import harness as h_mod


def _stuck(harness, uuid, status, dead='cond-dead', action=None, **values):
    """Leave the lease as a conductor killed in ``status`` would."""
    lease = harness.lease(uuid)
    harness.set_conductor_heartbeat(dead, age_seconds=3600)
    values.update({'status': status, 'reservation': dead})
    assert lease_rows.write(h_mod.admin(), lease.id, values)
    if action:
        db_api.action_start(h_mod.user_context(), lease.id, action)
    return lease


def test_dead_conductor_binding_is_taken_over(harness):
    uuid = harness.create(memory_mb=2048, device_count=1)
    host = harness.hosts['compute-0']
    _stuck(harness, uuid, states.BINDING, action='bind', host_id=host.id)
    harness.conductor.run_periodic_tasks()
    lease = harness.wait(uuid, states.BOUND)
    assert lease.reservation is None
    assert harness.actions(uuid)[-1] == ('bind', 'success')
    conductors = {c.hostname: c.online
                  for c in db_api.conductor_list(h_mod.admin())}
    assert conductors['cond-dead'] is False
    assert conductors[h_mod.CONDUCTOR] is True


def test_dead_conductor_binding_with_dead_agent_ends_bind_failed(
        bare_harness):
    harness = bare_harness
    uuid = harness.create(memory_mb=1024)
    _stuck(harness, uuid, states.BINDING, action='bind',
           host_id=harness.hosts['compute-0'].id)
    harness.conductor.run_periodic_tasks()
    lease = harness.wait(uuid, [states.BOUND, states.BIND_FAILED])
    assert lease.status == states.BIND_FAILED
    assert harness.actions(uuid)[-1] == ('bind', 'error')


def test_live_conductor_reservation_is_left_alone(harness):
    uuid = harness.create(memory_mb=1024)
    lease = harness.lease(uuid)
    harness.set_conductor_heartbeat('cond-alive', age_seconds=0)
    lease_rows.write(h_mod.admin(), lease.id,
                     {'status': states.BINDING,
                      'reservation': 'cond-alive',
                      'host_id': harness.hosts['compute-0'].id})
    harness.conductor.run_periodic_tasks()
    harness.idle()
    lease = harness.lease(uuid)
    assert lease.status == states.BINDING
    assert lease.reservation == 'cond-alive'


def test_each_stuck_state_is_resumed(harness):
    host = harness.hosts['compute-0']
    # An allocating lease holds nothing yet (claim and state change are
    # one transaction): a conductor killed then leaves just the row.
    fresh = db_api.lease_create(h_mod.admin(), {
        'project_id': 'p1', 'memory_mb': 1024,
        'status': states.ALLOCATING, 'reservation': 'cond-dead'})
    harness.set_conductor_heartbeat('cond-dead', age_seconds=3600)

    bound = harness.create(memory_mb=1024)
    harness.api.bind_lease(h_mod.user_context(), bound, host.uuid)
    harness.wait(bound, states.BOUND)
    _stuck(harness, bound, states.UNBINDING, action='unbind')

    doomed = harness.create(device_count=1)
    _stuck(harness, doomed, states.RELEASING, action='delete')

    harness.conductor.run_periodic_tasks()
    harness.idle()
    assert harness.wait(fresh.uuid, states.RESERVED)
    assert harness.wait(bound, states.RESERVED).host is None
    assert harness.wait(doomed, states.RELEASED)
    assert harness.actions(doomed)[-1] == ('delete', 'success')
    assert harness.actions(bound)[-1] == ('unbind', 'success')
    harness.assert_nothing_live()


def test_two_conductors_never_resume_the_same_lease(harness):
    uuid = harness.create(memory_mb=1024)
    _stuck(harness, uuid, states.BINDING, action='bind',
           host_id=harness.hosts['compute-0'].id)
    other = conductor_manager.ConductorManager('cond-1')
    other.start()
    calls = []
    lock = threading.Lock()
    for mgr in (harness.conductor, other):
        original = mgr.flows.bind

        def counted(*args, _original=original, _host=mgr.host, **kwargs):
            with lock:
                calls.append(_host)
            return _original(*args, **kwargs)
        mgr.flows.bind = counted
    barrier = threading.Barrier(2)

    def run(mgr):
        barrier.wait()
        mgr.run_periodic_tasks()

    threads = [threading.Thread(target=run, args=(m,))
               for m in (harness.conductor, other)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    harness.idle()
    assert other.wait_for_workers(30)
    other.stop()
    assert len(calls) == 1
    assert harness.wait(uuid, states.BOUND)


def test_delayed_start(harness):
    start = utils.utcnow() + datetime.timedelta(hours=1)
    uuid = harness.create(memory_mb=1024, start_at=utils.isotime(start))
    lease = harness.lease(uuid)
    assert lease.status == states.REQUESTED
    assert lease.start_at == start
    assert harness.pool(harness.memory_pool).used == 0
    assert harness.actions(uuid) == [('create', 'success')]

    harness.conductor.run_periodic_tasks()
    harness.idle()
    assert harness.lease(uuid).status == states.REQUESTED

    lease_rows.write(h_mod.admin(), lease.id, {
        'start_at': utils.utcnow() - datetime.timedelta(seconds=1)})
    harness.conductor.run_periodic_tasks()
    harness.idle()
    assert harness.wait(uuid, states.RESERVED)
    assert harness.pool(harness.memory_pool).used == 1024
    assert harness.actions(uuid) == [('create', 'success'),
                                     ('start', 'success')]


def test_delayed_start_without_capacity_is_alloc_failed(harness):
    start = utils.utcnow() + datetime.timedelta(hours=1)
    uuid = harness.create(memory_mb=64 * 1024,
                          start_at=utils.isotime(start))
    lease_rows.write(h_mod.admin(), harness.lease(uuid).id, {
        'start_at': utils.utcnow() - datetime.timedelta(seconds=1)})
    harness.conductor.run_periodic_tasks()
    harness.idle()
    lease = harness.wait(uuid, states.ALLOC_FAILED)
    assert 'MiB' in lease.fault
    assert harness.actions(uuid)[-1] == ('start', 'error')


def test_expiry_releases_bound_and_reserved_leases(harness):
    end = utils.utcnow() + datetime.timedelta(hours=1)
    bound = harness.create(memory_mb=1024, device_count=1,
                           end_at=utils.isotime(end))
    harness.api.bind_lease(h_mod.user_context(), bound,
                           harness.hosts['compute-0'].uuid)
    harness.wait(bound, states.BOUND)
    reserved = harness.create(memory_mb=1024, end_at=utils.isotime(end))
    keeps = harness.create(memory_mb=1024)

    harness.conductor.run_periodic_tasks()
    harness.idle()
    assert harness.lease(bound).status == states.BOUND

    past = utils.utcnow() - datetime.timedelta(seconds=1)
    for uuid in (bound, reserved):
        lease_rows.write(h_mod.admin(), harness.lease(uuid).id,
                         {'end_at': past})
    harness.conductor.run_periodic_tasks()
    harness.idle()
    for uuid in (bound, reserved):
        assert harness.wait(uuid, states.RELEASED)
        assert harness.actions(uuid)[-1] == ('expire', 'success')
    assert harness.lease(keeps).status == states.RESERVED
    assert harness.pool(harness.memory_pool).used == 1024
    assert harness.pool(harness.gpu_pool).used == 0
    harness.assert_nothing_live()


# ---------------------------------------------------------------- end_at

def _ended(harness, **values):
    """A lease whose end_at has just passed, as a list by the expiry
    reads it."""
    uuid = harness.create(memory_mb=1024, **values)
    past = utils.utcnow() - datetime.timedelta(seconds=1)
    assert lease_rows.write(h_mod.admin(), harness.lease(uuid).id,
                            {'end_at': past})
    return uuid, harness.lease(uuid)


def _later(hours=1):
    return utils.isotime(utils.utcnow() + datetime.timedelta(hours=hours))


def _assert_consistent(harness, uuid, extended):
    """Either the extension or the expiry happened, never both."""
    lease = harness.wait(uuid, [states.RESERVED, states.RELEASED])
    if extended:
        assert lease.status == states.RESERVED
        assert lease.end_at > utils.utcnow()
        assert 'expire' not in [a for a, _ in harness.actions(uuid)]
    else:
        assert lease.status == states.RELEASED
        assert lease.end_at <= utils.utcnow()
        assert harness.actions(uuid)[-1] == ('expire', 'success')


def test_end_at_extended_before_the_expiry_keeps_the_lease(harness):
    uuid, listed = _ended(harness)
    end = _later()
    assert harness.api.update_lease(h_mod.user_context(), uuid,
                                    {'end_at': end}) == uuid
    # The expiry acts on what it listed before the extension.
    assert harness.conductor.periodic.expire(h_mod.admin(), listed) is None
    harness.idle()
    assert utils.isotime(harness.lease(uuid).end_at) == end
    _assert_consistent(harness, uuid, extended=True)


def test_end_at_extended_after_the_expiry_is_refused(harness):
    uuid, listed = _ended(harness)
    harness.conductor.periodic.expire(h_mod.admin(), listed)
    harness.idle()
    with pytest.raises(exception.InvalidState):
        harness.api.update_lease(h_mod.user_context(), uuid,
                                 {'end_at': _later()})
    _assert_consistent(harness, uuid, extended=False)


def test_expiry_skips_a_lease_whose_end_at_is_being_changed(harness):
    uuid, listed = _ended(harness)
    with lease_task.acquire(h_mod.admin(), listed.id, 'cond-other') as task:
        # The lease's reservation is held by the extension: neither the
        # short release nor the full expiry touches the lease.
        assert harness.conductor.periodic.expire(h_mod.admin(),
                                                 listed) is None
        task.set_end(utils.utcnow() + datetime.timedelta(hours=1))
    harness.idle()
    _assert_consistent(harness, uuid, extended=True)


def test_end_at_extension_races_the_expiry(harness):
    for attempt in range(4):
        uuid, listed = _ended(harness)
        start = threading.Barrier(2)
        outcome = {}

        def extend():
            start.wait()
            try:
                harness.api.update_lease(h_mod.user_context(), uuid,
                                         {'end_at': _later()})
                outcome['extended'] = True
            except exception.Conflict:
                outcome['extended'] = False

        def expire():
            start.wait()
            harness.conductor.periodic.expire(h_mod.admin(), listed)

        threads = [threading.Thread(target=extend),
                   threading.Thread(target=expire)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
            assert not thread.is_alive()
        assert 'extended' in outcome, 'the extension failed otherwise'
        harness.idle()
        _assert_consistent(harness, uuid, outcome['extended'])
        if outcome['extended']:
            # Its capacity back for the next attempt.
            harness.api.delete_lease(h_mod.user_context(), uuid)
            harness.wait(uuid, states.RELEASED)


def test_update_lease_checks_end_at_under_the_reservation(harness):
    uuid = harness.create(memory_mb=1024,
                          start_at=_later(hours=2))
    with pytest.raises(exception.Invalid):
        harness.api.update_lease(h_mod.user_context(), uuid,
                                 {'end_at': _later(hours=1)})
    with pytest.raises(exception.Invalid):
        harness.api.update_lease(
            h_mod.user_context(), uuid,
            {'end_at': utils.isotime(utils.utcnow() -
                                     datetime.timedelta(seconds=5))})
    with pytest.raises(exception.Invalid):
        harness.api.update_lease(h_mod.user_context(), uuid,
                                 {'status': states.RELEASED})
    assert harness.lease(uuid).end_at is None
    end = _later(hours=3)
    harness.api.update_lease(h_mod.user_context(), uuid, {'end_at': end})
    assert utils.isotime(harness.lease(uuid).end_at) == end
