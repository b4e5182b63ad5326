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

"""Racing claims on the real databases: no over-commit, no device in two
leases, counters equal to what leases hold, on SQLite, MariaDB and
PostgreSQL. Each worker thread has its own connection, so the races happen
inside the database server, as between several conductors."""

import random
import threading

from composable.common import exception
from composable.common import states
from composable.conductor.allocator import claims as allocator
from composable.db import allocation
from composable.db import api as dbapi
from tests.unit.conductor.allocator import inventory as inv


def _race(leases, action, workers=16):
    results = {}
    lock = threading.Lock()
    queue = list(leases)
    barrier = threading.Barrier(workers)

    def run():
        barrier.wait()
        while True:
            with lock:
                if not queue:
                    return
                lease = queue.pop()
            try:
                outcome = action(lease)
            except exception.InsufficientCapacity:
                outcome = False
            with lock:
                results[lease.uuid] = outcome

    threads = [threading.Thread(target=run) for _ in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def test_memory_claims_race(db_backend):
    inv.memory_inventory(nodes=(4096, 4096, 2048), step=512)
    # 20 GiB asked for from 10 GiB: exactly 20 of 40 half-GiB leases win.
    leases = [inv.new_lease(memory_mb=512) for _ in range(40)]
    results = _race(leases, inv.allocate)
    assert sum(1 for ok in results.values() if ok) == 20
    assert dbapi.pool_get(inv.admin(), 'mem').used == 10240
    assert allocation.check_consistency(inv.admin()) == []


def test_device_claims_race_never_share_a_device(db_backend):
    fabric, _ = inv.memory_inventory(nodes=(8192,))
    inv.gpu_inventory(fabric, models_=['A'] * 6)
    leases = [inv.new_lease(device_count=random.choice((1, 2)),
                            device_kind='gpu') for _ in range(24)]
    _race(leases, inv.allocate)
    taken = []
    granted = 0
    for lease in leases:
        got = dbapi.lease_get(inv.admin(), lease.uuid)
        if got.status == states.RESERVED:
            assert len(got.devices) == got.device_count
            granted += got.device_count
            taken.extend(d.uuid for d in got.devices)
    assert len(taken) == len(set(taken)), 'a device is in two leases'
    assert granted == len(taken) <= 6
    assert dbapi.pool_get(inv.admin(), 'gpu').used == granted
    assert allocation.check_consistency(inv.admin()) == []


def test_claims_and_releases_interleaved(db_backend):
    fabric, _ = inv.memory_inventory(nodes=(4096, 4096), step=1024)
    inv.gpu_inventory(fabric, models_=['A'] * 4)
    first = [inv.new_lease(memory_mb=1024, device_count=1,
                           device_kind='gpu') for _ in range(4)]
    for lease in first:
        inv.allocate(lease)
    second = [inv.new_lease(memory_mb=1024, device_count=1,
                            device_kind='gpu') for _ in range(12)]

    def act(lease):
        if lease in first:
            return inv.release(lease)
        return inv.allocate(lease)

    _race(first + second, act, workers=8)
    assert allocation.check_consistency(inv.admin()) == []
    live = [dbapi.lease_get(inv.admin(), lease.uuid) for lease in second]
    granted = [lease for lease in live if lease.status == states.RESERVED]
    assert len(granted) <= 4
    assert dbapi.pool_get(inv.admin(), 'gpu').used == len(granted)
    assert dbapi.pool_get(inv.admin(), 'mem').used == 1024 * len(granted)


def _churn_values(n, i):
    """The i-th lease worker n asks for: memory and GPUs in turn."""
    values = {'project_id': 'p%d' % n}
    if (n + i) % 2:
        values['memory_mb'] = 2048
    else:
        values.update(device_count=1, device_kind='gpu')
    return values


def _assert_pools_hold_what_leases_hold(made):
    """``made``: (uuid, status) of leases created on 8 GiB of memory and
    4 GPUs: never more given out, counters equal to the live leases."""
    assert allocation.check_consistency(inv.admin()) == []
    held = [dbapi.lease_get(inv.admin(), uuid) for uuid, _ in made]
    memory = sum(lease.memory_mb for lease in held
                 if lease.status == states.RESERVED)
    gpus = sum(lease.device_count for lease in held
               if lease.status == states.RESERVED)
    assert memory <= 8192 and gpus <= 4
    assert dbapi.pool_get(inv.admin(), 'mem').used == memory
    assert dbapi.pool_get(inv.admin(), 'gpu').used == gpus


def test_one_step_creates_and_quick_releases_race(db_backend):
    """create_and_allocate and release_unbound, as the conductor runs them
    for the API: racing creates and deletes never over-commit."""
    fabric, _ = inv.memory_inventory(nodes=(4096, 4096), step=1024)
    inv.gpu_inventory(fabric, models_=['A'] * 4)
    made = []
    lock = threading.Lock()

    def worker(n):
        for i in range(6):
            values = _churn_values(n, i)
            uuid, status = allocator.create_and_allocate(inv.admin(),
                                                         values)
            with lock:
                made.append((uuid, status))
            if i % 3 == 2:
                lease = dbapi.lease_get(inv.admin(), uuid)
                allocator.release_unbound(inv.admin(), lease.id)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(made) == 48
    _assert_pools_hold_what_leases_hold(made)


def test_batched_creates_and_releases_race_across_conductors(db_backend):
    """Two conductors' claim threads (group commit, a savepoint a lease)
    racing on the same pools, with creates and quick releases mixed in
    their batches: never an over-commit, counters equal to the leases."""
    from composable.common import context as ctx_mod
    from composable.conductor.allocator import batches as claim_batches

    fabric, _ = inv.memory_inventory(nodes=(4096, 4096), step=1024)
    inv.gpu_inventory(fabric, models_=['A'] * 4)
    conductors = [claim_batches.ClaimBatcher(max_batch=8) for _ in range(2)]
    for claims in conductors:
        claims.start()
    made = []
    lock = threading.Lock()

    def worker(n):
        claims = conductors[n % 2]
        ctx = ctx_mod.RequestContext(user_id='u', project_id='p%d' % n)
        for i in range(6):
            values = _churn_values(n, i)
            uuid, status, document = claims.create(ctx, values)
            assert document['status'] == status
            with lock:
                made.append((uuid, status))
            if i % 3 == 2:
                ref, released = claims.release(ctx, uuid)
                assert ref.uuid == uuid and released == states.RELEASED

    threads = [threading.Thread(target=worker, args=(n,))
               for n in range(12)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        for claims in conductors:
            claims.stop()
    assert len(made) == 72
    _assert_pools_hold_what_leases_hold(made)


def test_binds_race_for_the_devices_a_host_reaches(db_backend):
    """Eight leases hold devices compute-a cannot reach; three free ones
    reach it. Eight binds to compute-a at once: three are traded a device
    (each a different one), five are refused with 409 and keep theirs;
    meanwhile claims for compute-a find nothing left."""
    ctx = inv.admin()
    fabric, _ = inv.memory_inventory(nodes=(8192,))
    host = dbapi.host_create(ctx, {'name': 'compute-a',
                                   'fabric_id': fabric.id})
    _, devices = inv.gpu_inventory(fabric, models_=['A'] * 11)
    leases = [inv.new_lease(device_count=1, device_kind='gpu')
              for _ in range(8)]
    for lease in leases:
        assert inv.allocate(lease) is True
    for device in devices:
        dbapi.device_set_facts(ctx, device.id, {
            'reachable_hosts': ['compute-b'] if device.id <= devices[7].id
            else ['compute-a']})
    for_host = [inv.new_lease(device_count=1, device_kind='gpu',
                              host_id=host.id) for _ in range(4)]

    def bind(lease):
        if lease.host_id is not None:
            return inv.allocate(lease)
        try:
            return allocator.reach_host(ctx, lease.id, 'compute-a')
        except exception.Conflict:
            return None

    results = _race(leases + for_host, bind, workers=12)
    traded = [r for u, r in results.items() if isinstance(r, dict)]
    refused = [u for u, r in results.items() if r is None]
    claimed = [u for u, r in results.items() if r is True]
    assert len(traded) + len(claimed) == 3, results
    assert len(refused) == 8 - len(traded)
    reachable = {d.uuid for d in devices[8:]}
    holders = {}
    for lease in leases + for_host:
        for device in dbapi.lease_get(ctx, lease.uuid).devices:
            assert device.uuid not in holders, 'a device in two leases'
            holders[device.uuid] = lease.uuid
    assert reachable <= set(holders)
    assert dbapi.pool_get(ctx, 'gpu').used == 8 + len(claimed)
    assert allocation.check_consistency(ctx) == []
