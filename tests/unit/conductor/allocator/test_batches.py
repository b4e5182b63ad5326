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

"""Group commit of creates and quick releases
(composable.conductor.allocator.batches), on SQLite; the same races on MariaDB
and PostgreSQL are in tests/functional/allocator."""

import threading

import pytest
import sqlalchemy as sa

from composable.common import context as ctx_mod
from composable.common import exception
from composable.common import states
from composable.conductor.allocator import batches as claim_batches
from composable.conductor.allocator import claims as allocator
from composable import conf
from composable.db import allocation
from composable.db import api as dbapi
from tests import lease_rows
from tests.unit.conductor.allocator import inventory as inv
from tests.unit.conductor.allocator import test_claims as test_allocator

CONF = conf.CONF
sqlite_db = test_allocator.sqlite_db


def user(project='p1'):
    return ctx_mod.RequestContext(user_id='u1', project_id=project)


def _commits():
    """Count the commits of composable's engine."""
    counter = {'n': 0}

    def on_commit(conn):
        counter['n'] += 1

    sa.event.listen(dbapi.get_engine(), 'commit', on_commit)
    return counter


def _run_together(batcher, requests):
    """Queue ``requests`` (callables taking the claim lane ``batcher``)
    while its thread is busy, so that they form one batch; their outcomes
    in order."""
    gate = threading.Event()
    real = batcher._execute
    first = {'held': False}

    def execute(batch):
        if not first['held']:
            # The first batch (a plain create) waits until every request
            # of the test is queued behind it.
            first['held'] = True
            gate.wait(10)
        return real(batch)

    batcher._execute = execute
    outcomes = [None] * len(requests)

    def call(i, fn):
        try:
            outcomes[i] = ('ok', fn(batcher))
        except Exception as exc:
            outcomes[i] = ('error', exc)

    blocker = threading.Thread(target=call, args=(0, requests[0]))
    blocker.start()
    while batcher._queue.qsize() or not first['held']:
        pass
    threads = []
    for i, fn in enumerate(requests):
        if not i:
            continue
        thread = threading.Thread(target=call, args=(i, fn))
        thread.start()
        threads.append(thread)
        # One at a time, so that the queue holds them in the test's
        # order: threads started together enqueue in any order.
        while batcher._queue.qsize() < len(threads):
            pass
    gate.set()
    for thread in [blocker] + threads:
        thread.join(30)
    return outcomes


def _assert_used(mem, gpu=None):
    """The pools' counters, and that they agree with the leases."""
    assert dbapi.pool_get(inv.admin(), 'mem').used == mem
    if gpu is not None:
        assert dbapi.pool_get(inv.admin(), 'gpu').used == gpu
    assert allocation.check_consistency(inv.admin()) == []


@pytest.fixture
def batcher():
    claims = claim_batches.ClaimBatcher(max_batch=32)
    claims.start()
    yield claims
    claims.stop()


def test_one_batch_one_commit_each_request_its_own_answer(batcher):
    inv.memory_inventory(nodes=(4096,))
    kept, _ = allocator.create_and_allocate(
        inv.admin(), {'project_id': 'p1', 'memory_mb': 1024})
    other, _ = allocator.create_and_allocate(
        inv.admin(), {'project_id': 'p2', 'memory_mb': 1024})
    commits = _commits()
    outcomes = _run_together(batcher.lane(claim_batches.MEMORY_LANE), [
        lambda b: b.create(user(), {'project_id': 'p1', 'memory_mb': 1024}),
        lambda b: b.create(user(), {'project_id': 'p1', 'memory_mb': 1024}),
        # More than is left: alloc_failed, in the same transaction.
        lambda b: b.create(user(), {'project_id': 'p1', 'memory_mb': 2048}),
        lambda b: b.release(user(), kept),
        # Another project's lease: not found, for this caller only.
        lambda b: b.release(user(), other),
        lambda b: b.release(user(), 'no-such-lease'),
    ])
    # The first request ran alone (the thread was idle); the five queued
    # behind it ran in one transaction (the refused releases then once
    # more alone, to get their own answer: no commit).
    assert commits['n'] == 2
    (kind0, first), (kind1, second), (kind2, failed) = outcomes[:3]
    assert (kind0, kind1, kind2) == ('ok', 'ok', 'ok')
    assert first[1] == second[1] == states.RESERVED
    assert failed[1] == states.ALLOC_FAILED
    assert 'MiB free' in failed[2]['fault']
    kind3, (ref, released) = outcomes[3]
    assert (kind3, ref.uuid, released) == ('ok', kept, states.RELEASED)
    assert outcomes[4][0] == 'error'
    assert isinstance(outcomes[4][1], exception.LeaseNotFound)
    assert isinstance(outcomes[5][1], exception.LeaseNotFound)
    # Each document is what the database says.
    for uuid, status, document in (first, second, failed):
        lease = dbapi.lease_get(inv.admin(), uuid)
        assert lease.status == status == document['status']
        assert sorted(e['uuid'] for e in document['extents']) == sorted(
            e.uuid for e in lease.extents)
    # 4096: 1024 (p2) + 1024 + 1024 held; the released one came back.
    assert dbapi.pool_get(inv.admin(), 'mem').used == 3072
    assert dbapi.lease_get(inv.admin(), other).status == states.RESERVED
    assert allocation.check_consistency(inv.admin()) == []


def test_racing_batched_creates_never_overcommit(batcher):
    fabric, _ = inv.memory_inventory(nodes=(4096, 4096))
    inv.gpu_inventory(fabric)
    commits = _commits()
    results = []
    lock = threading.Lock()
    barrier = threading.Barrier(24)

    def create(i):
        values = ({'project_id': 'p1', 'memory_mb': 1024} if i % 2 else
                  {'project_id': 'p1', 'device_count': 1})
        barrier.wait()
        made = batcher.create(user(), values)
        with lock:
            results.append(made[1])

    threads = [threading.Thread(target=create, args=(i,))
               for i in range(24)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    # 8 GiB of memory for 12 leases of 1 GiB, 4 GPUs for 12 leases.
    assert results.count(states.RESERVED) == 8 + 4
    assert results.count(states.ALLOC_FAILED) == 12
    assert dbapi.pool_get(inv.admin(), 'mem').used == 8192
    assert dbapi.pool_get(inv.admin(), 'gpu').used == 4
    assert allocation.check_consistency(inv.admin()) == []
    assert commits['n'] < 24


def test_a_failing_batch_runs_its_requests_alone(batcher, monkeypatch):
    inv.memory_inventory(nodes=(4096,))
    real = allocation.create_in
    calls = {'n': 0}

    def create_in(session, context, values, action, **kwargs):
        calls['n'] += 1
        if values.get('name') == 'poison' and calls['n'] < 3:
            raise exception.ServiceUnavailable(reason='database went away')
        return real(session, context, values, action, **kwargs)

    monkeypatch.setattr(allocation, 'create_in', create_in)
    outcomes = _run_together(batcher.lane(claim_batches.MEMORY_LANE), [
        lambda b: b.create(user(), {'project_id': 'p1', 'memory_mb': 1024}),
        lambda b: b.create(user(), {'project_id': 'p1', 'memory_mb': 1024,
                                    'name': 'poison'}),
        lambda b: b.create(user(), {'project_id': 'p1', 'memory_mb': 1024,
                                    'name': 'fine'}),
    ])
    # The batch transaction rolled back whole; each request then ran on
    # its own: nothing lost, nothing twice.
    assert [o[0] for o in outcomes] == ['ok', 'ok', 'ok']
    assert all(o[1][1] == states.RESERVED for o in outcomes)
    assert dbapi.pool_get(inv.admin(), 'mem').used == 3072
    leases = dbapi.lease_list(inv.admin(), filters={'project_id': 'p1'})
    assert sorted(lease.name or '' for lease in leases) == [
        '', 'fine', 'poison']
    assert allocation.check_consistency(inv.admin()) == []


def test_not_started_means_no_thread():
    inv.memory_inventory(nodes=(4096,))
    claims = claim_batches.ClaimBatcher()
    assert not claims.running
    uuid, status, document = claims.create(
        user(), {'project_id': 'p1', 'memory_mb': 1024})
    assert status == states.RESERVED and document['uuid'] == uuid


def test_one_lane_on_sqlite():
    claims = claim_batches.ClaimBatcher()
    assert list(claims.lanes) == [claim_batches.MEMORY_LANE]
    # Every lease goes to that lane.
    assert claims.lane(claim_batches.DEVICE_LANE) is claims.lane(
        claim_batches.MEMORY_LANE)


@pytest.fixture
def two_lanes():
    # SQLite queues writers (BEGIN IMMEDIATE): two lanes are correct on it
    # too, they only gain nothing there.
    claims = claim_batches.ClaimBatcher(max_batch=32, lanes=2)
    claims.start()
    yield claims
    claims.stop()


def _lanes_used(claims, monkeypatch):
    used = []
    for lane in claims.lanes.values():
        def submit(kind, context, args, lane=lane, real=lane._submit):
            used.append((lane.name, kind))
            return real(kind, context, args)
        monkeypatch.setattr(lane, '_submit', submit)
    return used


def test_device_leases_have_a_lane_of_their_own(two_lanes, monkeypatch):
    fabric, _ = inv.memory_inventory(nodes=(4096,))
    inv.gpu_inventory(fabric)
    used = _lanes_used(two_lanes, monkeypatch)
    gpu, _, _ = two_lanes.create(user(), {'project_id': 'p1',
                                          'device_count': 1})
    mem, _, _ = two_lanes.create(user(), {'project_id': 'p1',
                                          'memory_mb': 1024})
    both, _, _ = two_lanes.create(user(), {'project_id': 'p1',
                                           'memory_mb': 1024,
                                           'device_count': 1})
    # A lease this conductor did not create (another conductor's, or one
    # from before a restart): the memory lane releases it as well.
    stranger, _ = allocator.create_and_allocate(
        inv.admin(), {'project_id': 'p1', 'device_count': 1})
    for uuid in (gpu, mem, both, stranger):
        ref, released = two_lanes.release(user(), uuid)
        assert released == states.RELEASED
    assert used == [('devices', 'create'), ('memory', 'create'),
                    ('memory', 'create'), ('devices', 'release'),
                    ('memory', 'release'), ('memory', 'release'),
                    ('memory', 'release')]
    _assert_used(0, gpu=0)


def test_lanes_remember_a_bounded_number_of_leases(two_lanes, monkeypatch):
    fabric, _ = inv.memory_inventory(nodes=(4096,))
    inv.gpu_inventory(fabric)
    monkeypatch.setattr(claim_batches, 'REMEMBERED_LEASES', 2)
    made = [two_lanes.create(user(), {'project_id': 'p1',
                                      'device_count': 1})[0]
            for _ in range(3)]
    assert list(two_lanes._remembered) == made[1:]
    used = _lanes_used(two_lanes, monkeypatch)
    for uuid in made:
        assert two_lanes.release(user(), uuid)[1] == states.RELEASED
    # The oldest was forgotten: released by the memory lane.
    assert [name for name, _ in used] == ['memory', 'devices', 'devices']
    assert not two_lanes._remembered


def test_racing_creates_and_releases_on_two_lanes(two_lanes):
    fabric, _ = inv.memory_inventory(nodes=(4096, 4096))
    inv.gpu_inventory(fabric)
    outcomes = []
    lock = threading.Lock()
    barrier = threading.Barrier(16)

    def churn(i):
        values = [{'project_id': 'p1', 'memory_mb': 1024},
                  {'project_id': 'p1', 'device_count': 1},
                  {'project_id': 'p1', 'memory_mb': 1024,
                   'device_count': 1}][i % 3]
        barrier.wait()
        for _ in range(5):
            uuid, status, _ = two_lanes.create(user(), values)
            if status == states.RESERVED:
                two_lanes.release(user(), uuid)
            with lock:
                outcomes.append(status)

    threads = [threading.Thread(target=churn, args=(i,)) for i in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert len(outcomes) == 80
    assert states.RESERVED in outcomes
    # Everything came back, and nothing was ever held twice.
    _assert_used(0, gpu=0)


def test_a_request_no_pool_can_hold_is_refused_alone(batcher):
    fabric, _ = inv.memory_inventory(nodes=(4096,))
    inv.gpu_inventory(fabric)
    lane = batcher.lane(claim_batches.MEMORY_LANE)
    outcomes = _run_together(lane, [
        lambda b: b.create(user(), {'project_id': 'p1', 'memory_mb': 1024},
                           check_fit=True),
        lambda b: b.create(user(), {'project_id': 'p1', 'memory_mb': 1024},
                           check_fit=True),
        # More than the pool holds in total: bad input, not alloc_failed.
        lambda b: b.create(user(), {'project_id': 'p1', 'memory_mb': 8192},
                           check_fit=True),
        # Memory and more GPUs than the GPU pool has: refused before
        # anything was claimed for its memory.
        lambda b: b.create(user(), {'project_id': 'p1', 'memory_mb': 1024,
                                    'device_count': 5}, check_fit=True),
        lambda b: b.create(user(), {'project_id': 'p1', 'memory_mb': 1024},
                           check_fit=True),
    ])
    kinds = [kind for kind, _ in outcomes]
    assert kinds == ['ok', 'ok', 'error', 'error', 'ok']
    assert isinstance(outcomes[2][1], exception.Invalid)
    assert 'largest memory pool' in str(outcomes[2][1])
    assert isinstance(outcomes[3][1], exception.Invalid)
    assert 'largest gpu pool' in str(outcomes[3][1])
    assert dbapi.pool_get(inv.admin(), 'mem').used == 3072
    assert dbapi.pool_get(inv.admin(), 'gpu').used == 0
    assert len(dbapi.lease_list(inv.admin(),
                                filters={'project_id': 'p1'})) == 3
    assert allocation.check_consistency(inv.admin()) == []


def test_memory_and_devices_that_do_not_fit_leave_nothing(batcher):
    fabric, _ = inv.memory_inventory(nodes=(4096,))
    inv.gpu_inventory(fabric)
    lane = batcher.lane(claim_batches.MEMORY_LANE)
    outcomes = _run_together(lane, [
        lambda b: b.create(user(), {'project_id': 'p1', 'memory_mb': 1024}),
        lambda b: b.create(user(), {'project_id': 'p1', 'device_count': 4}),
        # Its memory is claimed before its GPUs are found wanting (4 in
        # the pool, 4 taken just before it): rolled back to its savepoint.
        lambda b: b.create(user(), {'project_id': 'p1', 'memory_mb': 2048,
                                    'device_count': 1}),
        lambda b: b.create(user(), {'project_id': 'p1', 'memory_mb': 1024}),
    ])
    assert [o[1][1] for o in outcomes] == [
        states.RESERVED, states.RESERVED, states.ALLOC_FAILED,
        states.RESERVED]
    assert 'No pool can give 1 gpu device' in outcomes[2][1][2]['fault']
    _assert_used(2048, gpu=4)


def test_a_lost_race_rolls_the_batch_back(batcher, monkeypatch):
    """A claim made, then found lost (a memory node changed under it):
    part of it may stand, so the whole transaction is rolled back and
    every request runs again alone. Nothing is lost, nothing twice."""
    inv.memory_inventory(nodes=(4096, 4096))
    real = allocation.create_in
    lost = {'n': 0}

    def create_in(session, context, values, action, **kwargs):
        result = real(session, context, values, action, **kwargs)
        if values.get('name') == 'unlucky' and not lost['n']:
            lost['n'] += 1
            raise allocation.LostRace('memory node mem-node-0')
        return result

    monkeypatch.setattr(allocation, 'create_in', create_in)
    outcomes = _run_together(batcher.lane(claim_batches.MEMORY_LANE), [
        lambda b: b.create(user(), {'project_id': 'p1', 'memory_mb': 1024}),
        lambda b: b.create(user(), {'project_id': 'p1', 'memory_mb': 1024,
                                    'name': 'fine'}),
        lambda b: b.create(user(), {'project_id': 'p1', 'memory_mb': 2048,
                                    'name': 'unlucky'}),
        lambda b: b.create(user(), {'project_id': 'p1', 'memory_mb': 1024,
                                    'name': 'after'}),
    ])
    assert lost['n'] == 1
    assert [o[1][1] for o in outcomes] == [states.RESERVED] * 4
    assert dbapi.pool_get(inv.admin(), 'mem').used == 5120
    leases = dbapi.lease_list(inv.admin(), filters={'project_id': 'p1'})
    assert sorted(lease.name or '' for lease in leases) == [
        '', 'after', 'fine', 'unlucky']
    assert allocation.check_consistency(inv.admin()) == []


def test_a_busy_lease_is_not_released_in_a_batch(batcher):
    """A quick release that finds the lease taken (a bind started) gives
    back nothing; the others of the batch stand."""
    inv.memory_inventory(nodes=(4096,))
    busy, _ = allocator.create_and_allocate(
        inv.admin(), {'project_id': 'p1', 'memory_mb': 1024})
    free, _ = allocator.create_and_allocate(
        inv.admin(), {'project_id': 'p1', 'memory_mb': 1024})
    ref = dbapi.lease_ref(inv.admin(), busy)
    assert lease_rows.write(inv.admin(), ref.id,
                            {'reservation': 'other-conductor'})
    outcomes = _run_together(batcher.lane(claim_batches.MEMORY_LANE), [
        lambda b: b.create(user(), {'project_id': 'p1', 'memory_mb': 1024}),
        lambda b: b.release(user(), busy),
        lambda b: b.release(user(), free),
    ])
    assert outcomes[1] == ('ok', (outcomes[1][1][0], None))
    assert outcomes[2][1][1] == states.RELEASED
    assert dbapi.lease_get(inv.admin(), busy).status == states.RESERVED
    # 1024 (busy) + 1024 (the new one); the free one came back.
    _assert_used(2048)
