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

"""Leases in composable.db.api: project scoping, lists, conditional
updates, and the per-lease reservations of conductors."""

import datetime

import pytest
import sqlalchemy as sa

from composable.common import exception
from composable.common import states
from composable.common import utils
from composable.db import api as dbapi
from composable.db import models
from tests.unit.db import inventory as inv


# ------------------------------------------------------------ scoping

def test_lease_get_is_scoped_to_the_project():
    lease = inv.lease('A', name='mine', memory_mb=1024)
    ctx_a = inv.project('A')
    ctx_b = inv.project('B')
    assert dbapi.lease_get(ctx_a, lease.uuid).id == lease.id
    assert dbapi.lease_get(ctx_a, 'mine').id == lease.id
    for ident in (lease.uuid, 'mine'):
        with pytest.raises(exception.LeaseNotFound) as info:
            dbapi.lease_get(ctx_b, ident)
        assert info.value.code == 404
    # Admins see every project.
    assert dbapi.lease_get(inv.admin(), lease.uuid).project_id == 'A'


def test_lease_list_is_scoped_to_the_project():
    a1 = inv.lease('A', memory_mb=1024)
    a2 = inv.lease('A', device_count=1, device_kind='gpu')
    b1 = inv.lease('B', memory_mb=2048)
    uuids = [lease.uuid for lease in dbapi.lease_list(inv.project('A'))]
    assert uuids == [a1.uuid, a2.uuid]
    # A non-admin asking for another project still gets only its own.
    assert dbapi.lease_list(inv.project('A'),
                            filters={'project_id': 'B'}) == []
    every = [lease.uuid for lease in dbapi.lease_list(inv.admin())]
    assert every == [a1.uuid, a2.uuid, b1.uuid]
    only_b = dbapi.lease_list(inv.admin(), filters={'project_id': 'B'})
    assert [lease.uuid for lease in only_b] == [b1.uuid]


def test_lease_name_shared_by_two_leases_is_a_conflict():
    inv.lease('A', name='twin')
    second = inv.lease('A', name='twin')
    inv.lease('B', name='solo')
    with pytest.raises(exception.Conflict, match='use its UUID'):
        dbapi.lease_get(inv.project('A'), 'twin')
    assert dbapi.lease_get(inv.project('A'), second.uuid).id == second.id
    assert dbapi.lease_get(inv.project('B'), 'solo').project_id == 'B'


def test_lease_list_filters_and_pagination():
    fab = inv.fabric()
    mem = inv.memory_pool(fab)
    gpu = inv.gpu_pool(fab)
    leases = [
        inv.lease('A', name='l0', memory_mb=1024, memory_pool_id=mem.id),
        inv.lease('A', name='l1', device_count=1, device_kind='gpu',
                  device_pool_id=gpu.id, status=states.BOUND),
        inv.lease('A', name='l2', memory_mb=1024, memory_pool_id=mem.id,
                  status=states.RELEASED),
        inv.lease('A', name='l3', device_count=2, device_kind='nvme',
                  status=states.ALLOC_FAILED),
    ]
    ctx = inv.project('A')

    def names(**kwargs):
        return [lease.name for lease in dbapi.lease_list(ctx, **kwargs)]

    assert names(filters={'status': states.BOUND}) == ['l1']
    assert names(filters={'status': [states.RESERVED,
                                     states.ALLOC_FAILED]}) == ['l0', 'l3']
    assert names(filters={'pool_id': mem.id}) == ['l0', 'l2']
    assert names(filters={'kind': 'memory'}) == ['l0', 'l2']
    assert names(filters={'kind': 'gpu'}) == ['l1']
    assert names(filters={'kind': 'nvme'}) == ['l3']
    assert names(filters={'name': 'l2'}) == ['l2']
    assert names(limit=2) == ['l0', 'l1']
    assert names(limit=2, marker=leases[1].uuid) == ['l2', 'l3']
    assert names(sort_key='name', sort_dir='desc', limit=3,
                 marker=leases[3].uuid) == ['l2', 'l1', 'l0']


@pytest.mark.parametrize('sort_dir', ['asc', 'desc'])
def test_lease_pages_of_several_statuses_are_in_order(sort_dir):
    # A page of several statuses is merged from a page of each status;
    # walked page by page, it is the one list sorted by creation time
    # then id, ties (leases created in the same second) included.
    mix = [states.RESERVED, states.BOUND, states.ERROR, states.REQUESTED,
           states.RELEASED]
    t0 = datetime.datetime(2026, 11, 1)
    leases = []
    for i in range(37):
        row = inv.lease('A', name='l%02d' % i, status=mix[(i * 7) % 5])
        inv.update_row(models.Lease, row.id, created_at=t0 +
                       datetime.timedelta(seconds=(i * 13) % 11))
        leases.append(dbapi.lease_get(inv.admin(), row.uuid))
    wanted = [states.RESERVED, states.BOUND, states.ERROR, states.REQUESTED]
    expected = sorted((lease for lease in leases if lease.status in wanted),
                      key=lambda lease: (lease.created_at, lease.id),
                      reverse=sort_dir == 'desc')
    for ctx in (inv.project('A'), inv.admin()):
        got, marker = [], None
        while True:
            page = dbapi.lease_list(ctx, filters={'status': wanted},
                                    limit=5, marker=marker,
                                    sort_dir=sort_dir, for_view=True)
            got += [lease.uuid for lease in page]
            if len(page) < 5:
                break
            marker = page[-1].uuid
        assert got == [lease.uuid for lease in expected]
    with pytest.raises(exception.Invalid):
        dbapi.lease_list(inv.admin(), filters={'status': wanted}, limit=5,
                         marker='7a1b3c4d-0000-4000-8000-000000000000')


def test_lease_refs_due_lists_only_the_leases_whose_time_came():
    now = utils.utcnow()
    past = now - datetime.timedelta(minutes=1)
    future = now + datetime.timedelta(hours=1)
    ended = inv.lease('A', status=states.BOUND, end_at=past)
    ended_too = inv.lease('B', status=states.RESERVED, end_at=now)
    inv.lease('A', status=states.BOUND, end_at=future)
    inv.lease('A', status=states.BOUND)
    inv.lease('A', status=states.RELEASED, end_at=past)
    at_once = inv.lease('A', status=states.REQUESTED)
    started = inv.lease('A', status=states.REQUESTED, start_at=past)
    inv.lease('A', status=states.REQUESTED, start_at=future)
    inv.lease('A', status=states.RESERVED, start_at=past)
    ctx = inv.admin()
    due = dbapi.lease_refs_due(ctx, [states.BOUND, states.RESERVED],
                               'end_at', now)
    assert [r.uuid for r in due] == [ended.uuid, ended_too.uuid]
    assert (due[0].id, due[0].reservation, due[0].end_at) == (
        ended.id, None, past)
    due = dbapi.lease_refs_due(ctx, [states.REQUESTED], 'start_at', now)
    assert [r.uuid for r in due] == [at_once.uuid, started.uuid]


def test_elastic_lease_refs_leave_out_leases_of_fixed_size():
    fab = inv.fabric()
    mem = inv.memory_pool(fab)
    policy = {'min_mb': 1024, 'max_mb': 4096, 'observation_window': 600,
              'prediction_window': 300}
    elastic = inv.lease('A', status=states.BOUND, memory_mb=1024,
                        memory_pool_id=mem.id, elastic=policy)
    # Stored as {} (the column's default): of fixed size.
    fixed = inv.lease('A', status=states.BOUND, memory_mb=1024,
                      memory_pool_id=mem.id)
    inv.lease('A', status=states.BOUND, memory_mb=1024,
              memory_pool_id=mem.id, elastic={})
    inv.lease('A', status=states.RESERVED, memory_mb=1024,
              memory_pool_id=mem.id, elastic=policy)
    with dbapi.reader(inv.admin()) as session:
        stored = session.execute(sa.text(
            'SELECT elastic FROM leases WHERE id = :i'),
            {'i': fixed.id}).scalar()
    assert stored == '{}'
    refs = dbapi.elastic_lease_refs(inv.admin())
    assert [r.uuid for r in refs] == [elastic.uuid]


# ------------------------------------------------------------ updates

def test_lease_writers_compare_the_status_and_never_set_it():
    lease = inv.lease('A', status=states.RESERVED)
    ctx = inv.admin()
    assert not dbapi.lease_set_fault(ctx, lease.id, 'f',
                                     expected_status=states.BINDING)
    assert dbapi.lease_get(ctx, lease.uuid).fault is None
    assert dbapi.lease_set_fault(ctx, lease.id, 'f',
                                 expected_status=[states.RESERVED,
                                                  states.BOUND])
    assert dbapi.lease_link_instance(ctx, lease.id, 'vm-1',
                                     expected_status=states.RESERVED)
    assert dbapi.lease_edit(ctx, lease.id, states.RESERVED, name='new',
                            description='d')
    found = dbapi.lease_get(ctx, lease.uuid)
    assert (found.status, found.fault, found.instance_uuid, found.name,
            found.description) == (states.RESERVED, 'f', 'vm-1', 'new', 'd')
    assert dbapi.lease_forget_binding(ctx, lease.id,
                                      expected_status=states.RESERVED)
    found = dbapi.lease_get(ctx, lease.uuid)
    assert (found.fault, found.instance_uuid) == (None, None)
    # What a user edits, nothing else: the status changes by
    # lease_transition only.
    for fields in ({'status': states.BOUND}, {'host_id': 1},
                   {'fault': 'x'}):
        with pytest.raises(TypeError):
            dbapi.lease_edit(ctx, lease.id, states.RESERVED, **fields)
    with pytest.raises(ValueError):
        dbapi._lease_set(ctx, lease.id, {'status': states.BOUND},
                         states.RESERVED)
    assert dbapi.lease_get(ctx, lease.uuid).status == states.RESERVED
    # No writer of any column left: leases change through those doors.
    assert not hasattr(dbapi, 'lease_update')


def test_lease_edit_refuses_a_live_name_in_use():
    ctx = inv.admin()
    inv.lease('A', name='taken', live_name='taken', status=states.RESERVED)
    lease = inv.lease('A', name='mine', live_name='mine',
                      status=states.RESERVED)
    with pytest.raises(exception.NameInUse):
        dbapi.lease_edit(ctx, lease.id, states.RESERVED, name='taken',
                         description='lost')
    found = dbapi.lease_get(ctx, lease.uuid)
    assert (found.name, found.description) == ('mine', None)


def test_lease_create_records_the_first_action():
    ctx = inv.project('A')
    lease = dbapi.lease_create(ctx, {'project_id': 'A', 'memory_mb': 1024},
                               action='create')
    assert lease.status == states.REQUESTED
    dbapi.action_finish(ctx, lease.id, 'create', 'success')
    actions = dbapi.action_list(ctx, lease.id)
    assert [(a.action, a.result, a.project_id, a.user_id)
            for a in actions] == [('create', 'success', 'A', 'user-A')]
    assert actions[0].finish_time is not None


# ------------------------------------------------------------ reservations

def _reservation(lease):
    return dbapi.lease_get(inv.admin(), lease.uuid).reservation


def test_lease_reserve_and_release():
    lease = inv.lease('A')
    ctx = inv.admin()
    assert dbapi.lease_reserve(ctx, lease.id, 'c1') is True
    # Taking it again is fine for the holder, refused for anyone else.
    assert dbapi.lease_reserve(ctx, lease.id, 'c1') is True
    assert dbapi.lease_reserve(ctx, lease.id, 'c2') is False
    assert _reservation(lease) == 'c1'
    # Only the holder releases it.
    dbapi.lease_release_reservation(ctx, lease.id, 'c2')
    assert _reservation(lease) == 'c1'
    dbapi.lease_release_reservation(ctx, lease.id, 'c1')
    assert _reservation(lease) is None
    assert dbapi.lease_reserve(ctx, lease.id, 'c2') is True
    assert _reservation(lease) == 'c2'


def test_conductor_heartbeat_registers_once_and_refreshes():
    ctx = inv.admin()
    dbapi.conductor_heartbeat(ctx, 'c1')
    dbapi.conductor_offline(ctx, 'c1')
    assert [(c.hostname, c.online) for c in dbapi.conductor_list(ctx)] == [
        ('c1', False)]
    dbapi.conductor_heartbeat(ctx, 'c1')
    assert [(c.hostname, c.online) for c in dbapi.conductor_list(ctx)] == [
        ('c1', True)]


def test_conductor_offline_drops_its_reservations():
    ctx = inv.admin()
    mine = inv.lease('A')
    other = inv.lease('A')
    dbapi.conductor_heartbeat(ctx, 'c1')
    dbapi.conductor_heartbeat(ctx, 'c2')
    dbapi.lease_reserve(ctx, mine.id, 'c1')
    dbapi.lease_reserve(ctx, other.id, 'c2')
    dbapi.conductor_offline(ctx, 'c1')
    assert _reservation(mine) is None
    assert _reservation(other) == 'c2'


def test_break_dead_reservations():
    ctx = inv.admin()
    alive, dead, orphan, free = [inv.lease('A') for _ in range(4)]
    dbapi.conductor_heartbeat(ctx, 'alive')
    dbapi.conductor_heartbeat(ctx, 'dead')
    long_ago = utils.utcnow() - datetime.timedelta(seconds=300)
    with dbapi.writer(ctx) as session:
        session.query(models.Conductor).filter(
            models.Conductor.hostname == 'dead').update(
                {'heartbeat_at': long_ago}, synchronize_session=False)
    assert dbapi.lease_reserve(ctx, alive.id, 'alive')
    assert dbapi.lease_reserve(ctx, dead.id, 'dead')
    # A reservation by a conductor that has no row at all is dead too.
    assert dbapi.lease_reserve(ctx, orphan.id, 'gone')

    assert dbapi.break_dead_reservations(ctx, 60) == ['dead', 'gone']
    # Found dead once: not reported again.
    assert dbapi.break_dead_reservations(ctx, 60) == []

    assert _reservation(alive) == 'alive'
    assert _reservation(dead) is None
    assert _reservation(orphan) is None
    assert _reservation(free) is None
    online = {c.hostname: c.online for c in dbapi.conductor_list(ctx)}
    assert online == {'alive': True, 'dead': False}
    # The freed leases may be taken over at once.
    assert dbapi.lease_reserve(ctx, dead.id, 'alive')


def test_break_dead_reservations_with_everyone_alive_changes_nothing():
    ctx = inv.admin()
    lease = inv.lease('A')
    dbapi.conductor_heartbeat(ctx, 'c1')
    dbapi.lease_reserve(ctx, lease.id, 'c1')
    assert dbapi.break_dead_reservations(ctx, 60) == []
    assert _reservation(lease) == 'c1'


def test_break_dead_reservations_when_no_conductor_is_alive():
    ctx = inv.admin()
    lease = inv.lease('A')
    dbapi.lease_reserve(ctx, lease.id, 'ghost')
    assert dbapi.break_dead_reservations(ctx, 60) == ['ghost']
    assert _reservation(lease) is None


def test_a_conductor_never_breaks_its_own_reservations():
    ctx = inv.admin()
    lease = inv.lease('A')
    dbapi.conductor_heartbeat(ctx, 'slow')
    long_ago = utils.utcnow() - datetime.timedelta(seconds=300)
    with dbapi.writer(ctx) as session:
        session.query(models.Conductor).filter(
            models.Conductor.hostname == 'slow').update(
                {'heartbeat_at': long_ago}, synchronize_session=False)
    assert dbapi.lease_reserve(ctx, lease.id, 'slow')
    # Its heartbeat lags, but it is the one asking: it is alive.
    assert dbapi.break_dead_reservations(ctx, 60, caller='slow') == []
    assert _reservation(lease) == 'slow'
    # Any other conductor sees it dead.
    assert dbapi.break_dead_reservations(ctx, 60, caller='other') == \
        ['slow']
    assert _reservation(lease) is None


def _usage_rows_of(leases, samples):
    """Insert (lease index, taken_at, used_mb) samples directly."""
    with dbapi.writer(inv.admin()) as session:
        session.execute(models.LeaseUsage.__table__.insert(), [
            {'lease_id': leases[i].id, 'taken_at': taken_at,
             'used_mb': used, 'size_mb': 4096}
            for i, taken_at, used in samples])


@pytest.mark.parametrize('packed', [True, False])
def test_usage_windows_read_many_leases_at_once(monkeypatch, packed):
    if not packed:
        # The row-by-row reading (other databases, or a string cut).
        monkeypatch.setattr(dbapi, '_usage_packed',
                            lambda session, dialect, where: None)
    leases = [inv.lease('A', status=states.BOUND) for _ in range(3)]
    t0 = datetime.datetime(2026, 11, 27, 12, 0, 0)
    sec = datetime.timedelta(seconds=1)
    _usage_rows_of(leases, [
        (0, t0 + 30 * sec, 300),
        (0, t0 + 10 * sec + datetime.timedelta(microseconds=120000), 100),
        (0, t0 - sec, 999),                     # before the window
        (0, t0 + 61 * sec, 999),                # after it
        (1, t0, 50),                            # at its start
        (1, t0 + 60 * sec, 60),                 # at its end
        (1, t0 + 20 * sec, 21),                 # two at one time:
        (1, t0 + 20 * sec, 22),                 # in the order of their ids
    ])
    got = dbapi.usage_windows(inv.admin(), [lease.id for lease in leases],
                              t0, t0 + 60 * sec)
    # MariaDB's DATETIME keeps whole seconds; SQLite and PostgreSQL keep
    # the fraction, which comes back as it went in.
    fraction = t0 + 10 * sec + datetime.timedelta(microseconds=120000)
    with dbapi.reader(inv.admin()) as session:
        stored = session.execute(sa.select(
            models.LeaseUsage.taken_at).where(
            models.LeaseUsage.used_mb == 100)).scalar()
    assert stored in (fraction, fraction.replace(microsecond=0))
    assert got == {
        leases[0].id: [(stored, 100), (t0 + 30 * sec, 300)],
        leases[1].id: [(t0, 50), (t0 + 20 * sec, 21), (t0 + 20 * sec, 22),
                       (t0 + 60 * sec, 60)]}


def test_usage_stamps_as_databases_write_them():
    assert dbapi._stamp('2026-11-27 12:00:05') == \
        datetime.datetime(2026, 11, 27, 12, 0, 5)
    assert dbapi._stamp('2026-11-27 12:00:05.12') == \
        datetime.datetime(2026, 11, 27, 12, 0, 5, 120000)
    assert dbapi._stamp('2026-11-27 12:00:05.000123') == \
        datetime.datetime(2026, 11, 27, 12, 0, 5, 123)
