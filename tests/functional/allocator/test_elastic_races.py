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

"""Elastic grows racing creates and shrinks on the real databases: the
grows of bound elastic leases claim through the same conditional UPDATEs
as creates, so together they never over-commit a pool, on SQLite,
MariaDB and PostgreSQL. Each worker thread has its own connection."""

import threading

from composable.common import exception
from composable.common import states
from composable.conductor.allocator import claims as allocator
from composable.db import allocation
from composable.db import api as dbapi
from tests import lease_rows
from tests.unit.conductor.allocator import inventory as inv


def _bound_lease(memory_mb=1024):
    lease = inv.new_lease(memory_mb=memory_mb)
    assert inv.allocate(lease)
    # As after a bind: only bound leases grow.
    assert lease_rows.write(inv.admin(), lease.id,
                            {'status': states.BOUND})
    return lease


def _run_together(jobs):
    barrier = threading.Barrier(len(jobs))
    results = [None] * len(jobs)

    def run(i, job):
        barrier.wait()
        try:
            results[i] = job()
        except exception.InsufficientCapacity as exc:
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i, job))
               for i, job in enumerate(jobs)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
        assert not thread.is_alive()
    return results


def test_grows_and_creates_race_for_the_last_extents(db_backend):
    inv.memory_inventory(nodes=(4096, 4096), step=512)
    # 8 GiB in 16 extents: 8 held by bound leases, 8 left for 8 grows of
    # one extent and 8 creates of one extent each.
    bound = [_bound_lease(512) for _ in range(8)]
    creates = [inv.new_lease(memory_mb=512) for _ in range(8)]
    jobs = [lambda lease=lease: allocator.grow_memory(inv.admin(), lease.id,
                                                      512)
            for lease in bound]
    jobs += [lambda lease=lease: inv.allocate(lease) for lease in creates]
    results = _run_together(jobs)
    grown = sum(1 for r in results[:8] if isinstance(r, list))
    created = sum(1 for lease in creates
                  if dbapi.lease_get(inv.admin(), lease.uuid).status ==
                  states.RESERVED)
    assert grown + created == 8, results
    assert dbapi.pool_get(inv.admin(), 'mem').used == 8192
    assert allocation.check_consistency(inv.admin()) == []
    for lease in bound:
        got = dbapi.lease_get(inv.admin(), lease.uuid)
        assert got.memory_mb == sum(e.size_mb for e in got.extents)
        assert sorted(e.index for e in got.extents) == list(
            range(len(got.extents)))


def test_grows_race_shrinks_of_other_leases(db_backend):
    inv.memory_inventory(nodes=(4096, 4096), step=1024)
    # The pool is full; shrinks free what grows take, concurrently.
    shrinking = [_bound_lease(2048) for _ in range(2)]
    growing = [_bound_lease(1024) for _ in range(4)]
    victims = [max(dbapi.lease_get(inv.admin(), lease.uuid).extents,
                   key=lambda e: e.index).uuid for lease in shrinking]
    jobs = [lambda lease=lease, uuid=uuid: allocator.shrink_memory(
        inv.admin(), lease.id, [uuid])
        for lease, uuid in zip(shrinking, victims)]
    jobs += [lambda lease=lease: allocator.grow_memory(inv.admin(),
                                                       lease.id, 1024)
             for lease in growing]
    results = _run_together(jobs)
    assert results[:2] == [1024, 1024]
    grown = sum(1 for r in results[2:] if isinstance(r, list))
    # Only what the shrinks gave back, and only once it was given back.
    assert grown <= 2
    used = dbapi.pool_get(inv.admin(), 'mem').used
    assert used == 8192 - 2048 + 1024 * grown
    assert allocation.check_consistency(inv.admin()) == []
