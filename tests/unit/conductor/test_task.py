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

"""composable.conductor.task.lease_periodic: the skeleton of the periodic
lease tasks (list, take the reservation without waiting, pass by the busy
leases, act), on a real database."""

import concurrent.futures

import pytest

from composable.common import states
from composable.conductor import task as lease_task
from composable.db import api as db_api
from tests.unit.conductor import harness as h_mod

HOST = 'cond-periodic'


def _lease(status=states.RESERVED, **values):
    return db_api.lease_create(h_mod.admin(), dict(
        {'project_id': 'p1', 'status': status}, **values))


def _reservation(lease_id):
    return db_api.lease_get_by_id(h_mod.admin(), lease_id).reservation


class Owner(object):
    """A periodic's owner as the conductor's are: a host, and methods
    decorated with lease_periodic that record what they saw."""

    host = HOST

    def __init__(self, fail=(), refuse=(), stop_after=None):
        self.seen = []
        self.held = []
        self.errors = []
        self.fail = set(fail)
        self.refuse = set(refuse)
        self.stop_after = stop_after

    def _wanted(self, context, lease, tag):
        return lease.uuid not in self.refuse

    def _stop(self):
        return self.stop_after is not None and \
            len(self.seen) >= self.stop_after

    def _failed(self, lease, exc, tag):
        self.errors.append((lease.uuid, str(exc), tag))

    @lease_task.lease_periodic('testing', filters={'status':
                                                   states.RESERVED},
                               predicate=_wanted, stop=_stop,
                               on_error=_failed)
    def act(self, task, context, tag):
        self.seen.append((task.lease.uuid, tag))
        # The reservation is this conductor's while the method runs.
        self.held.append(_reservation(task.lease_id))
        if task.lease.uuid in self.fail:
            raise RuntimeError('boom on %s' % task.lease.uuid)
        return task.lease.uuid

    @lease_task.lease_periodic(
        'testing filters', filters=lambda self: {'status': self.status})
    def by_status(self, task, context):
        return task.lease.uuid

    @lease_task.lease_periodic(
        'testing a lister',
        lister=lambda self, context: [db_api.lease_get_by_id(context, i)
                                      for i in self.ids])
    def listed(self, task, context):
        return task.lease.uuid

    @lease_task.lease_periodic('testing workers',
                               filters={'status': states.RESERVED})
    def spawning(self, task, context, pool):
        task.spawn_after(
            lambda reservation, fn, *args: reservation.hand_off(pool, fn,
                                                                *args),
            _reservation, task.lease_id)


def test_busy_leases_are_passed_by(sqlite_db):
    free, busy, also_free = _lease(), _lease(), _lease()
    owner = Owner()
    with lease_task.acquire(h_mod.admin(), busy.id, 'cond-other'):
        results = owner.act(h_mod.admin(), 'pass-1')
        # The busy lease was not waited for: the pass ended while its
        # reservation was still held.
        assert _reservation(busy.id) == 'cond-other'
    assert results == [free.uuid, also_free.uuid]
    assert owner.seen == [(free.uuid, 'pass-1'), (also_free.uuid, 'pass-1')]
    assert owner.held == [HOST, HOST]
    # Every reservation the pass took is given back.
    for lease in (free, busy, also_free):
        assert _reservation(lease.id) is None


def test_a_lease_reserved_when_listed_is_not_tried(sqlite_db):
    lease = _lease()
    listed = db_api.lease_get_by_id(h_mod.admin(), lease.id)
    with lease_task.acquire(h_mod.admin(), lease.id, 'cond-other'):
        listed_busy = db_api.lease_get_by_id(h_mod.admin(), lease.id)
    # Listed while reserved, free now: passed by all the same (the next
    # pass sees it).
    owner = Owner()
    assert owner.act.for_lease(h_mod.admin(), listed_busy, 't') is None
    assert owner.seen == []
    assert owner.act.for_lease(h_mod.admin(), listed, 't') == lease.uuid


def test_an_error_on_one_lease_does_not_stop_the_pass(sqlite_db):
    first, bad, last = _lease(), _lease(), _lease()
    owner = Owner(fail=[bad.uuid])
    results = owner.act(h_mod.admin(), 'tag')
    assert results == [first.uuid, last.uuid]
    assert [uuid for uuid, _ in owner.seen] == [first.uuid, bad.uuid,
                                                last.uuid]
    assert owner.errors == [(bad.uuid, 'boom on %s' % bad.uuid, 'tag')]
    # The failed lease's reservation is released too.
    assert _reservation(bad.id) is None


def test_for_lease_raises_what_the_method_raises(sqlite_db):
    bad = _lease()
    owner = Owner(fail=[bad.uuid])
    listed = db_api.lease_get_by_id(h_mod.admin(), bad.id)
    with pytest.raises(RuntimeError):
        owner.act.for_lease(h_mod.admin(), listed, 'tag')
    assert _reservation(bad.id) is None
    assert owner.errors == []


def test_the_filters_choose_the_leases(sqlite_db):
    reserved = _lease()
    bound = _lease(states.BOUND)
    _lease(states.RELEASED)
    owner = Owner()
    assert owner.act(h_mod.admin(), 't') == [reserved.uuid]
    owner.status = states.BOUND
    assert owner.by_status(h_mod.admin()) == [bound.uuid]
    owner.status = [states.BOUND, states.RESERVED]
    assert sorted(owner.by_status(h_mod.admin())) == sorted(
        [reserved.uuid, bound.uuid])
    owner.status = states.ERROR
    assert owner.by_status(h_mod.admin()) == []


def test_a_lister_replaces_the_filters(sqlite_db):
    first, _, last = _lease(), _lease(), _lease(states.BOUND)
    owner = Owner()
    owner.ids = [last.id, first.id]
    # The lister's leases, in its order, whatever their state.
    assert owner.listed(h_mod.admin()) == [last.uuid, first.uuid]


def test_the_predicate_passes_by_without_the_reservation(sqlite_db):
    refused, taken = _lease(), _lease()
    owner = Owner(refuse=[refused.uuid])
    assert owner.act(h_mod.admin(), 't') == [taken.uuid]
    assert owner.seen == [(taken.uuid, 't')]


def test_stop_ends_the_pass(sqlite_db):
    for _ in range(3):
        _lease()
    owner = Owner(stop_after=1)
    assert len(owner.act(h_mod.admin(), 't')) == 1
    assert len(owner.seen) == 1


def test_a_worker_keeps_the_reservation_and_its_future_is_returned(
        sqlite_db):
    lease = _lease()
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        [future] = Owner().spawning(h_mod.admin(), pool)
        # The worker ran with the reservation it was handed.
        assert future.result(timeout=60) == HOST
    assert _reservation(lease.id) is None


def test_filters_or_lister_is_required():
    with pytest.raises(TypeError):
        lease_task.lease_periodic('nothing to list')
    with pytest.raises(TypeError):
        lease_task.lease_periodic('both', filters={}, lister=lambda s, c: [])
