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

"""The lease reconciler, with a real conductor and real agent RPC servers
(noop exporters) on the in-process transport: leases in error are
released (or unbound) without a user action, failed binds give back
what they held, orphan targets on memory nodes go away, and several
conductors reconciling at once never act twice on one lease."""

import datetime
import threading

import pytest
from oslo_utils import uuidutils
from sqlalchemy import event as sa_event

from composable.common import states
from composable.common import utils
from composable.conductor import manager as conductor_manager
from composable.conductor import node_reports
from composable.conductor import reconciler
from composable import conf
from composable.db import api as db_api
from composable.db import models
from tests import lease_rows
from tests.unit.conductor import harness as h_mod

CONF = conf.CONF


@pytest.fixture
def no_backoff():
    CONF.set_override('reconcile_retry_backoff', 0, 'conductor')
    yield
    CONF.clear_override('reconcile_retry_backoff', 'conductor')


def _run(harness, manager=None):
    return reconciler.Reconciler(manager or harness.conductor).run()


def _bind(harness, uuid, host='compute-0'):
    harness.api.bind_lease(h_mod.user_context(), uuid,
                           harness.hosts[host].uuid)


def _bound(harness, memory_mb=1024):
    uuid = harness.create(memory_mb=memory_mb)
    _bind(harness, uuid)
    harness.wait(uuid, states.BOUND)
    return uuid


def _nodes_of(harness, uuid):
    return sorted({e.memory_node.name for e in harness.lease(uuid).extents})


def _in_error(harness, uuid):
    """Delete a bound lease while its memory node's agent is down: the
    release fails and the lease ends in error."""
    for node in _nodes_of(harness, uuid):
        harness.stop_agent(node)
    harness.api.delete_lease(h_mod.user_context(), uuid)
    lease = harness.wait(uuid, states.ERROR)
    assert harness.actions(uuid)[-1] == ('delete', 'error')
    return lease


def _restart(harness, nodes):
    for node in nodes:
        harness.start_agent(node)


def _reconciles(harness, uuid):
    return [a for a in harness.actions(uuid) if a[0] == 'reconcile']


def _age_last_action(harness, uuid, seconds):
    lease = harness.lease(uuid)
    row = db_api.action_list(h_mod.admin(), lease.id)[-1]
    with db_api.writer(h_mod.admin()) as session:
        session.query(models.LeaseAction).filter(
            models.LeaseAction.id == row.id).update(
                {'finish_time': row.finish_time -
                 datetime.timedelta(seconds=seconds)},
                synchronize_session=False)


def _export_behind_the_db(harness, node, extent_uuid):
    """A target on ``node`` the database knows nothing of, as an agent
    whose answer was lost (or a restored database) leaves it."""
    harness.agents[node].exporter.export(
        {'uuid': extent_uuid, 'size_mb': 1024, 'portal': '127.0.0.1:3260'},
        'iqn.2026-11.org.openstack:compute-0', 'user', 'secret')


# ---------------------------------------------------------------- error


def test_failed_release_is_finished_once_the_agent_is_back(harness):
    uuid = _bound(harness)
    nodes = _nodes_of(harness, uuid)
    lease = _in_error(harness, uuid)
    assert nodes[0] in lease.fault
    assert harness.pool(harness.memory_pool).used == 1024

    _restart(harness, nodes)
    summary = _run(harness)

    assert summary['released'] == [uuid]
    lease = harness.wait(uuid, states.RELEASED)
    assert lease.fault is None
    assert harness.actions(uuid)[-2:] == [('delete', 'error'),
                                          ('reconcile', 'success')]
    assert harness.pool(harness.memory_pool).used == 0
    assert set(harness.node_allocated().values()) == {0}
    harness.assert_nothing_live()
    assert all(not b for b in harness.backed().values())
    # Nothing is left to do.
    assert not reconciler.changed(_run(harness))


def test_agent_timeout_keeps_the_lease_and_the_next_run_retries(
        harness, no_backoff):
    uuid = _bound(harness)
    nodes = _nodes_of(harness, uuid)
    _in_error(harness, uuid)

    summary = _run(harness)

    # The agent is still down: the lease stays, with a fault that names
    # the node, and the attempt is in the action log.
    lease = harness.wait(uuid, states.ERROR)
    assert summary['released'] == []
    assert nodes[0] in summary['retry_failed'][uuid]
    assert nodes[0] in lease.fault
    assert 'did not answer' in lease.fault
    assert nodes[0] in summary['unreachable']
    assert harness.actions(uuid)[-1] == ('reconcile', 'error')
    assert harness.pool(harness.memory_pool).used == 1024

    _restart(harness, nodes)
    summary = _run(harness)

    assert summary['released'] == [uuid]
    harness.wait(uuid, states.RELEASED)
    assert _reconciles(harness, uuid) == [('reconcile', 'error'),
                                          ('reconcile', 'success')]
    harness.assert_nothing_live()


def test_failed_attempts_back_off(harness):
    CONF.set_override('reconcile_retry_backoff', 60, 'conductor')
    try:
        uuid = _bound(harness)
        nodes = _nodes_of(harness, uuid)
        _in_error(harness, uuid)
        # A failure of the user's own request is retried at once.
        _run(harness)
        assert len(_reconciles(harness, uuid)) == 1

        summary = _run(harness)
        assert summary['waiting'] == [uuid]
        assert len(_reconciles(harness, uuid)) == 1

        _age_last_action(harness, uuid, 61)
        _run(harness)
        assert _reconciles(harness, uuid) == [('reconcile', 'error')] * 2

        # Two failures in a row: 120 seconds now.
        _age_last_action(harness, uuid, 61)
        assert _run(harness)['waiting'] == [uuid]
        _age_last_action(harness, uuid, 60)
        _restart(harness, nodes)
        assert _run(harness)['released'] == [uuid]
    finally:
        CONF.clear_override('reconcile_retry_backoff', 'conductor')


def test_backoff_is_bounded():
    CONF.set_override('reconcile_retry_backoff', 60, 'conductor')
    CONF.set_override('reconcile_retry_max_backoff', 600, 'conductor')
    try:
        assert [reconciler.backoff(n) for n in range(6)] == [
            0, 60, 120, 240, 480, 600]
        assert reconciler.backoff(10 ** 6) == 600
    finally:
        CONF.clear_override('reconcile_retry_backoff', 'conductor')
        CONF.clear_override('reconcile_retry_max_backoff', 'conductor')


def test_failed_unbind_is_retried_as_an_unbind(harness):
    uuid = _bound(harness)
    harness.stop_agent('compute-0')
    harness.api.unbind_lease(h_mod.user_context(), uuid)
    harness.wait(uuid, states.ERROR)
    harness.start_agent('compute-0')

    summary = _run(harness)

    # The user asked to unbind, not to delete: the lease keeps its
    # capacity and can be bound again.
    assert summary['unbound'] == [uuid]
    lease = harness.wait(uuid, states.RESERVED)
    assert lease.host is None
    assert harness.pool(harness.memory_pool).used == 1024
    harness.assert_nothing_live()
    _bind(harness, uuid)
    harness.wait(uuid, states.BOUND)


def test_two_conductors_racing_on_one_lease_act_once(harness):
    uuid = _bound(harness)
    nodes = _nodes_of(harness, uuid)
    extents = len(harness.lease(uuid).extents)
    _in_error(harness, uuid)
    _restart(harness, nodes)
    other = conductor_manager.ConductorManager('cond-1')
    other.start()
    calls = []
    lock = threading.Lock()
    for mgr in (harness.conductor, other):
        agents = mgr.flows.agents
        original = agents.unexport_extent

        def counted(*args, _original=original, _host=mgr.host, **kwargs):
            with lock:
                calls.append(_host)
            return _original(*args, **kwargs)
        agents.unexport_extent = counted
    barrier = threading.Barrier(2)
    summaries = {}

    def run(mgr):
        barrier.wait()
        summaries[mgr.host] = reconciler.Reconciler(mgr).run()

    threads = [threading.Thread(target=run, args=(m,))
               for m in (harness.conductor, other)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    other.stop()

    harness.wait(uuid, states.RELEASED)
    assert sorted(len(s['released']) for s in summaries.values()) == [0, 1]
    # One conductor unexported the extent, once; one attempt is logged.
    assert len(calls) == extents
    assert len(set(calls)) == 1
    assert _reconciles(harness, uuid) == [('reconcile', 'success')]
    harness.assert_nothing_live()


def test_a_lease_reserved_by_a_live_conductor_is_left_alone(harness):
    uuid = _bound(harness)
    nodes = _nodes_of(harness, uuid)
    lease = _in_error(harness, uuid)
    _restart(harness, nodes)
    harness.set_conductor_heartbeat('cond-alive', age_seconds=0)
    lease_rows.write(h_mod.admin(), lease.id,
                     {'reservation': 'cond-alive'})

    summary = _run(harness)

    assert summary['released'] == [] and summary['retry_failed'] == {}
    assert harness.lease(uuid).status == states.ERROR
    assert _reconciles(harness, uuid) == []


def test_conductor_dying_during_a_release_retry(harness):
    uuid = _bound(harness)
    nodes = _nodes_of(harness, uuid)
    lease = _in_error(harness, uuid)
    _restart(harness, nodes)
    # A conductor moved the lease to releasing for its retry, logged the
    # attempt, and was killed.
    harness.set_conductor_heartbeat('cond-dead', age_seconds=3600)
    lease_rows.write(h_mod.admin(), lease.id,
                     {'status': states.RELEASING,
                      'reservation': 'cond-dead'})
    db_api.action_start(h_mod.admin(), lease.id, 'reconcile')

    # The takeover breaks its reservation and finishes that very attempt.
    harness.conductor.run_periodic_tasks()
    harness.wait(uuid, states.RELEASED)
    harness.idle()
    assert _reconciles(harness, uuid) == [('reconcile', 'success')]
    harness.assert_nothing_live()


# ---------------------------------------------------------------- bind_failed


def _failed_bind_with_a_lost_export(harness):
    """A two-extent lease whose bind failed on the second extent's node;
    that node then exports the extent anyway (its answer was lost)."""
    uuid = harness.create(memory_mb=2048)
    extents = sorted(harness.lease(uuid).extents, key=lambda e: e.index)
    late = extents[-1]
    harness.stop_agent(late.memory_node.name)
    _bind(harness, uuid)
    lease = harness.wait(uuid, states.BIND_FAILED)
    assert late.memory_node.name in lease.fault
    harness.start_agent(late.memory_node.name)
    _export_behind_the_db(harness, late.memory_node.name, late.uuid)
    return uuid, late


def test_failed_bind_leftovers_are_torn_down(harness):
    uuid, late = _failed_bind_with_a_lost_export(harness)
    fault = harness.lease(uuid).fault
    assert harness.live_exports()[late.memory_node.name]

    summary = _run(harness)

    assert summary['cleaned'] == [uuid]
    lease = harness.wait(uuid, states.BIND_FAILED)
    # The user's fault stays: it says why the bind failed.
    assert lease.fault == fault
    harness.assert_nothing_live()
    for extent in lease.extents:
        assert extent.export_state != states.EXTENT_EXPORTED
        assert extent.chap_username is None and extent.chap_secret is None
    assert harness.actions(uuid)[-2:] == [('bind', 'error'),
                                          ('reconcile', 'success')]
    # Capacity stays with the lease, which can be bound again.
    assert harness.pool(harness.memory_pool).used == 2048
    assert not reconciler.changed(_run(harness))
    assert len(_reconciles(harness, uuid)) == 1
    _bind(harness, uuid)
    harness.wait(uuid, states.BOUND)


def test_failed_bind_teardown_with_the_node_still_down(harness, no_backoff):
    uuid, late = _failed_bind_with_a_lost_export(harness)
    node = late.memory_node.name
    harness.stop_agent(node)

    summary = _run(harness)

    assert node in summary['clean_failed'][uuid]
    assert harness.lease(uuid).status == states.BIND_FAILED
    assert harness.actions(uuid)[-1] == ('reconcile', 'error')
    # The node that did not answer is not asked again in this run.
    assert node in summary['unreachable']

    harness.start_agent(node)
    _export_behind_the_db(harness, node, late.uuid)
    assert _run(harness)['cleaned'] == [uuid]
    harness.assert_nothing_live()


def test_conductor_dying_during_a_teardown_the_next_run_finishes(harness):
    uuid, late = _failed_bind_with_a_lost_export(harness)
    lease = harness.lease(uuid)
    harness.set_conductor_heartbeat('cond-dead', age_seconds=3600)
    lease_rows.write(h_mod.admin(), lease.id,
                     {'reservation': 'cond-dead'})
    db_api.action_start(h_mod.admin(), lease.id, 'reconcile')

    summary = _run(harness)

    assert 'cond-dead' in summary['dead_conductors']
    assert summary['cleaned'] == [uuid]
    lease = harness.wait(uuid, states.BIND_FAILED)
    assert lease.reservation is None
    harness.assert_nothing_live()
    # The attempt the dead conductor started is the one finished.
    assert _reconciles(harness, uuid) == [('reconcile', 'success')]


def test_bind_failed_with_nothing_held_is_not_touched(harness):
    # compute-1 has no agent: the failed bind takes its exports back
    # itself and leaves nothing.
    uuid = harness.create(memory_mb=1024)
    _bind(harness, uuid, host='compute-1')
    harness.wait(uuid, states.BIND_FAILED)
    summary = _run(harness)
    assert summary['cleaned'] == [] and summary['clean_failed'] == {}
    assert _reconciles(harness, uuid) == []


# ---------------------------------------------------------------- nodes


def test_orphan_targets_are_removed_and_live_ones_kept(harness):
    bound = _bound(harness)
    live = {e.uuid for e in harness.lease(bound).extents}

    released = _bound(harness)
    old = harness.lease(released).extents[0]
    harness.api.delete_lease(h_mod.user_context(), released)
    harness.wait(released, states.RELEASED)

    resting = harness.create(memory_mb=1024)
    unexported = harness.lease(resting).extents[0]
    db_api.extent_transition(h_mod.admin(), unexported.id,
                             states.EXTENT_UNEXPORT)

    unknown = 'feedface-0000-4000-8000-000000000001'
    _export_behind_the_db(harness, 'memory-0', unknown)
    _export_behind_the_db(harness, old.memory_node.name, old.uuid)
    _export_behind_the_db(harness, unexported.memory_node.name,
                          unexported.uuid)

    # The node check alone (no conductor named) cannot take
    # reservations: it removes what nothing will ever export again.
    results = node_reports.check_memory_nodes(h_mod.admin(),
                                              harness.conductor.flows.agents)
    removed = sorted(u for r in results.values()
                     for u in r['orphan_targets'])
    assert removed == sorted([unknown, old.uuid])
    assert unexported.uuid in harness.live_exports()[
        unexported.memory_node.name]

    summary = _run(harness)

    assert summary['orphan_targets'] == {
        unexported.memory_node.name: [unexported.uuid]}
    exports = set()
    for node_exports in harness.live_exports().values():
        exports |= set(node_exports)
    assert exports == live
    extent = [e for e in harness.lease(resting).extents
              if e.uuid == unexported.uuid][0]
    assert extent.export_state == states.EXTENT_UNEXPORTED
    assert harness.lease(resting).status == states.RESERVED


def test_target_of_a_busy_lease_is_left_alone(harness):
    uuid = harness.create(memory_mb=1024)
    extent = harness.lease(uuid).extents[0]
    # A bind under way exports before it marks the extent exported.
    harness.set_conductor_heartbeat('cond-alive', age_seconds=0)
    lease_rows.write(h_mod.admin(), harness.lease(uuid).id,
                     {'status': states.BINDING,
                      'reservation': 'cond-alive'})
    _export_behind_the_db(harness, extent.memory_node.name, extent.uuid)

    summary = _run(harness)

    assert not any(summary['orphan_targets'].values())
    assert extent.uuid in harness.live_exports()[extent.memory_node.name]


def test_silent_memory_node_is_reported(harness):
    harness.stop_agent('memory-1')
    summary = _run(harness)
    assert any('memory-1' in p and 'did not report' in p
               for p in summary['problems'])
    assert summary['unreachable'] == ['memory-1']


# ---------------------------------------------------------------- loop


def test_conductor_runs_the_reconciler_loop(harness):
    db_api.conductor_heartbeat(h_mod.admin(), 'cond-loop')
    uuid = _bound(harness)
    nodes = _nodes_of(harness, uuid)
    _in_error(harness, uuid)
    _restart(harness, nodes)

    CONF.set_override('reconcile_interval', 1, 'conductor')
    mgr = conductor_manager.ConductorManager('cond-loop')
    mgr.start()
    try:
        assert 'conductor-reconcile' in [t.name for t in mgr._threads]
        harness.wait(uuid, states.RELEASED, timeout=30)
    finally:
        mgr.stop()
        CONF.set_override('reconcile_interval', 0, 'conductor')

    mgr = conductor_manager.ConductorManager('cond-quiet')
    mgr.start()
    try:
        assert 'conductor-reconcile' not in [t.name for t in mgr._threads]
    finally:
        mgr.stop()


def test_summary_is_described():
    summary = reconciler.new_summary()
    assert reconciler.describe(summary) == 'nothing to do'
    assert not reconciler.changed(summary)
    summary['released'] = ['a']
    summary['orphan_targets'] = {'memory-0': ['x', 'y']}
    summary['unreachable'] = ['memory-1']
    text = reconciler.describe(summary)
    assert 'released 1 lease(s) in error' in text
    assert 'removed 2 orphan target(s)' in text
    assert 'no answer from memory-1' in text
    assert reconciler.changed(summary)


def test_next_attempt_counts_only_failed_reconciles():
    now = utils.utcnow()

    def row(action, result, ago=0):
        return models.LeaseAction(
            action=action, result=result,
            finish_time=now - datetime.timedelta(seconds=ago))

    CONF.set_override('reconcile_retry_backoff', 10, 'conductor')
    try:
        assert reconciler.next_attempt([row('delete', 'error')]) is None
        assert reconciler.next_attempt([
            row('delete', 'error'), row('reconcile', 'error', 5),
            row('reconcile', 'error', 1)]) == (
                now - datetime.timedelta(seconds=1) +
                datetime.timedelta(seconds=20))
        # A user request in between starts the count again.
        assert reconciler.next_attempt([
            row('reconcile', 'error'), row('delete', 'error')]) is None
    finally:
        CONF.clear_override('reconcile_retry_backoff', 'conductor')
    assert reconciler.user_intent([row('unbind', 'error'),
                                   row('reconcile', 'error')]) == 'unbind'
    assert reconciler.user_intent([row('unbind', 'error'),
                                   row('delete', 'error')]) == 'release'


class _ReportingAgents(object):
    """Agents that answer a fixed memory report and record unexports."""

    def __init__(self, reports):
        self.reports = reports
        self.unexported = []

    def get_memory_report(self, context, node):
        return self.reports[node]

    def unexport_extent(self, context, node, extent):
        self.unexported.append((node, extent['uuid']))

    def scrub_extent(self, context, node, extent):
        pass


def _report(exported, problem=None):
    report = {'node': 'x', 'simulated': False, 'path': '/mem',
              'total_mb': 8192, 'extent_uuids': [],
              'exported_extent_uuids': exported}
    if problem:
        report['exporter_problem'] = problem
    return report


def test_target_on_the_wrong_node_is_removed_there_only(harness):
    uuid = _bound(harness)
    extent = harness.lease(uuid).extents[0]
    home = extent.memory_node.name
    other = [n for n in h_mod.MEMORY_NODES if n != home][0]
    agents = _ReportingAgents({home: _report([extent.uuid]),
                               other: _report([extent.uuid])})

    results = node_reports.check_memory_nodes(h_mod.admin(), agents,
                                              host=h_mod.CONDUCTOR)

    # The live export on its own node stays; the copy elsewhere goes.
    assert agents.unexported == [(other, extent.uuid)]
    assert results[other]['orphan_targets'] == [extent.uuid]


def test_exporter_that_cannot_list_targets_is_reported(harness):
    agents = _ReportingAgents({
        'memory-0': _report(None, problem='tgtd does not answer'),
        'memory-1': _report([])})
    results = node_reports.check_memory_nodes(h_mod.admin(), agents,
                                              host=h_mod.CONDUCTOR)
    assert any('tgtd does not answer' in p
               for p in results['memory-0']['problems'])
    assert agents.unexported == []


# ---------------------------------------------------------------- costs


def _quiet_lease(harness, status):
    """A lease in ``status`` the reconciler has nothing to do for: in
    error, its last attempt just failed (it backs off); in bind_failed,
    it holds nothing."""
    ctx = h_mod.admin()
    lease = db_api.lease_create(ctx, {
        'project_id': h_mod.PROJECT, 'memory_mb': 1024,
        'memory_pool_id': harness.memory_pool.id, 'status': status})
    if status == states.ERROR:
        db_api.action_start(ctx, lease.id, 'delete')
        db_api.action_finish(ctx, lease.id, 'delete', reconciler.ERROR)
        db_api.action_start(ctx, lease.id, reconciler.RECONCILE)
        db_api.action_finish(ctx, lease.id, reconciler.RECONCILE,
                             reconciler.ERROR)
    return lease


def _pass_costs(harness, monkeypatch):
    """(statements, reservations taken) of one reconciler run."""
    statements = []
    reserved = []
    engine = db_api.get_engine()

    def count(*args, **kwargs):
        statements.append(1)
    original = db_api.lease_reserve

    def reserve(context, lease_id, conductor):
        reserved.append(lease_id)
        return original(context, lease_id, conductor)
    monkeypatch.setattr(db_api, 'lease_reserve', reserve)
    sa_event.listen(engine, 'before_cursor_execute', count)
    try:
        summary = _run(harness)
    finally:
        sa_event.remove(engine, 'before_cursor_execute', count)
        monkeypatch.setattr(db_api, 'lease_reserve', original)
    return len(statements), len(reserved), summary


def test_quiet_leases_cost_no_query_or_reservation_of_their_own(
        harness, monkeypatch):
    # Leases with nothing to do are decided from the pass's bulk reads:
    # ten times as many of them cost the same queries, and none is
    # reserved. (Reading each one's action log or attachments made a
    # pass over 100,000 leases take 15 s.)
    for _ in range(2):
        _quiet_lease(harness, states.ERROR)
        _quiet_lease(harness, states.BIND_FAILED)
    _pass_costs(harness, monkeypatch)  # warm the caches
    few, reserved, summary = _pass_costs(harness, monkeypatch)
    assert reserved == 0
    assert len(summary['waiting']) == 2
    for _ in range(18):
        _quiet_lease(harness, states.ERROR)
        _quiet_lease(harness, states.BIND_FAILED)
    many, reserved, summary = _pass_costs(harness, monkeypatch)
    assert reserved == 0
    assert len(summary['waiting']) == 20
    assert not reconciler.changed(summary)
    assert many == few


def test_bulk_holding_agrees_with_the_lease(harness):
    # What a pass lists as holding something is what holds_something
    # says of the lease, mark by mark (an empty CHAP user or PCI address
    # is no mark, as in Python).
    ctx = h_mod.admin()
    node = db_api.memory_node_list(ctx)[0]
    host = harness.hosts['compute-0']
    devices = iter(harness.devices)
    marks = {}
    for mark in ('nothing', 'exported', 'chap', 'chap_empty', 'attached',
                 'detached', 'pci', 'device_attached'):
        lease = _quiet_lease(harness, states.BIND_FAILED)
        marks[mark] = lease.id
        if mark in ('exported', 'chap', 'chap_empty'):
            with db_api.writer(ctx) as session:
                session.add(models.MemoryExtent(
                    uuid=uuidutils.generate_uuid(), lease_id=lease.id,
                    memory_node_id=node.id, size_mb=1024, index=0,
                    export_state=(states.EXTENT_EXPORTED
                                  if mark == 'exported' else 'allocated'),
                    chap_username={'chap': 'user',
                                   'chap_empty': ''}.get(mark)))
        elif mark in ('attached', 'detached'):
            db_api.attachment_create(ctx, {
                'lease_id': lease.id, 'host_id': host.id, 'mode': 'host',
                'state': (states.LIVE_ATTACHMENT_STATES[0]
                          if mark == 'attached' else 'detached'),
                'details': {}})
        elif mark in ('pci', 'device_attached'):
            values = {'lease_id': lease.id, 'state': 'reserved',
                      'pci_address': ''}
            if mark == 'pci':
                values['pci_address'] = '0000:01:00.0'
            else:
                values['state'] = states.DEVICE_ATTACHED
            with db_api.writer(ctx) as session:
                session.query(models.Device).filter(
                    models.Device.id == next(devices).id).update(
                        values, synchronize_session=False)
    holding = db_api.leases_holding(ctx, marks.values())
    assert holding == {marks[m] for m in ('exported', 'chap', 'attached',
                                          'pci', 'device_attached')}
    for mark, lease_id in marks.items():
        full = db_api.lease_get_by_id(ctx, lease_id)
        assert reconciler.holds_something(ctx, full) == (
            lease_id in holding), mark


def test_lease_changed_after_the_listing_is_decided_afresh(harness):
    # Between the pass's list and the lease's reservation a lease in
    # error is released by another conductor, and what a failed bind
    # held is torn down: under the reservation the reconciler reads the
    # lease again and acts on neither.
    uuid, late = _failed_bind_with_a_lost_export(harness)
    bind_failed = harness.lease(uuid)
    ctx = h_mod.admin()
    in_error = _quiet_lease(harness, states.ERROR)
    _age_last_action(harness, in_error.uuid, 3600 * 24)
    original_errors = reconciler.Reconciler._list_errors
    original_binds = reconciler.Reconciler._list_failed_binds

    def list_errors(self, context):
        listed = original_errors(self, context)
        assert [lease.id for lease in listed] == [in_error.id]
        lease_rows.write(ctx, in_error.id, {'status': states.RELEASED})
        return listed

    def list_failed_binds(self, context):
        listed = original_binds(self, context)
        assert [(lease.id, lease.listed_holds) for lease in listed] == [
            (bind_failed.id, True)]
        # What the teardown would do, done by someone else.
        harness.agents[late.memory_node.name].exporter.unexport(
            {'uuid': late.uuid})
        with db_api.writer(ctx) as session:
            session.query(models.MemoryExtent).filter(
                models.MemoryExtent.lease_id == bind_failed.id).update(
                    {'export_state': 'allocated', 'chap_username': None,
                     'chap_secret': None}, synchronize_session=False)
            session.query(models.Attachment).filter(
                models.Attachment.lease_id == bind_failed.id).update(
                    {'state': 'detached'}, synchronize_session=False)
        return listed

    reconciler.Reconciler._list_errors = list_errors
    reconciler.Reconciler._list_failed_binds = list_failed_binds
    try:
        summary = _run(harness)
    finally:
        reconciler.Reconciler._list_errors = original_errors
        reconciler.Reconciler._list_failed_binds = original_binds
    assert summary['released'] == [] and summary['cleaned'] == []
    assert summary['retry_failed'] == {} and summary['clean_failed'] == {}
    assert _reconciles(harness, in_error.uuid) == [('reconcile', 'error')]
    assert _reconciles(harness, uuid) == []
    assert harness.lease(in_error.uuid).reservation is None
    assert harness.lease(uuid).reservation is None
