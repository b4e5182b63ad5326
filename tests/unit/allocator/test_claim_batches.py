"""Group commit of creates and quick releases
(composable.conductor.claim_batches), on SQLite; the same races on MariaDB
and PostgreSQL are in tests/functional/allocator."""

import threading

import pytest
import sqlalchemy as sa

from composable.common import context as ctx_mod
from composable.common import exception
from composable import conf
from composable.conductor import allocator
from composable.conductor import claim_batches
from composable.conductor import states
from composable.db import api as dbapi
from tests.unit.allocator import inventory as inv
from tests.unit.allocator import test_allocator

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
    """Queue ``requests`` (callables taking the batcher) while the claim
    thread is busy, so that they form one batch; their outcomes in
    order."""
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
    threads = [threading.Thread(target=call, args=(i, fn))
               for i, fn in enumerate(requests) if i]
    for thread in threads:
        thread.start()
    while batcher._queue.qsize() < len(threads):
        pass
    gate.set()
    for thread in [blocker] + threads:
        thread.join(30)
    return outcomes


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
    outcomes = _run_together(batcher, [
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
    assert allocator.check_consistency(inv.admin()) == []


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
    assert allocator.check_consistency(inv.admin()) == []
    assert commits['n'] < 24


def test_a_failing_batch_runs_its_requests_alone(batcher, monkeypatch):
    inv.memory_inventory(nodes=(4096,))
    real = allocator.create_in
    calls = {'n': 0}

    def create_in(session, context, values, action):
        calls['n'] += 1
        if values.get('name') == 'poison' and calls['n'] < 3:
            raise exception.ServiceUnavailable(reason='database went away')
        return real(session, context, values, action)

    monkeypatch.setattr(allocator, 'create_in', create_in)
    outcomes = _run_together(batcher, [
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
    assert allocator.check_consistency(inv.admin()) == []


def test_not_started_means_no_thread():
    inv.memory_inventory(nodes=(4096,))
    claims = claim_batches.ClaimBatcher()
    assert not claims.running
    uuid, status, document = claims.create(
        user(), {'project_id': 'p1', 'memory_mb': 1024})
    assert status == states.RESERVED and document['uuid'] == uuid
