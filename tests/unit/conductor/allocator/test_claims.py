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

"""Allocator behaviour on SQLite (a file database, as in production)."""

import threading

import pytest

from composable.common import exception
from composable.common import states
from composable.conductor.allocator import claims as allocator
from composable import conf
from composable.db import allocation
from composable.db import api as dbapi
from tests import lease_rows
from tests.unit.conductor.allocator import inventory as inv

CONF = conf.CONF


@pytest.fixture(autouse=True)
def sqlite_db(tmp_path):
    CONF([], project='composable', default_config_files=[])
    CONF.set_override('connection', 'sqlite:///%s/t.sqlite' % tmp_path,
                      'database')
    dbapi.reset_facade()
    dbapi.create_schema_for_tests()
    yield
    dbapi.reset_facade()
    CONF.reset()
    CONF.clear_override('connection', 'database')
    CONF.clear_override('memory_placement', 'allocator')


def _extents_per_node(lease):
    counts = {}
    for extent in dbapi.extent_list(inv.admin(), lease.id):
        name = extent.memory_node.name
        counts[name] = counts.get(name, 0) + extent.size_mb
    return counts


def test_memory_lease_is_carved_into_extents_spread_over_nodes():
    _, pool = inv.memory_inventory(nodes=(4096, 4096))
    lease = inv.new_lease(memory_mb=2048)
    assert inv.allocate(lease) is True
    got = dbapi.lease_get(inv.admin(), lease.uuid)
    assert got.status == states.RESERVED
    assert got.memory_pool_id == pool.id
    assert _extents_per_node(lease) == {'mem-node-0': 1024,
                                        'mem-node-1': 1024}
    assert dbapi.pool_get(inv.admin(), 'mem').used == 2048
    assert allocation.check_consistency(inv.admin()) == []


def test_pack_policy_fills_one_node_first():
    CONF.set_override('memory_placement', 'pack', 'allocator')
    inv.memory_inventory(nodes=(4096, 4096))
    lease = inv.new_lease(memory_mb=2048)
    inv.allocate(lease)
    assert list(_extents_per_node(lease).values()) == [2048]


def test_not_enough_free_memory_claims_nothing_and_says_what_is_free():
    inv.memory_inventory(nodes=(2048,))
    first = inv.new_lease(memory_mb=1024)
    inv.allocate(first)
    second = inv.new_lease(memory_mb=2048)
    with pytest.raises(exception.InsufficientCapacity) as err:
        inv.allocate(second)
    assert 'mem has 1024 MiB free' in err.value.message
    # Nothing of the failed claim stays behind; the lease is untouched.
    assert dbapi.lease_get(inv.admin(), second.uuid).status == \
        states.ALLOCATING
    assert dbapi.extent_list(inv.admin(), second.id) == []
    assert dbapi.pool_get(inv.admin(), 'mem').used == 1024
    assert allocation.check_consistency(inv.admin()) == []


def test_pool_headroom_is_never_leased():
    inv.memory_inventory(nodes=(4096,), reserved=2048)
    lease = inv.new_lease(memory_mb=3072)
    with pytest.raises(exception.InsufficientCapacity):
        inv.allocate(lease)
    lease = inv.new_lease(memory_mb=2048)
    assert inv.allocate(lease)


def test_size_not_a_multiple_of_the_step_is_refused():
    inv.memory_inventory(step=1024)
    lease = inv.new_lease(memory_mb=1536)
    with pytest.raises(exception.InsufficientCapacity) as err:
        inv.allocate(lease)
    assert 'multiples of 1024 MiB' in err.value.message


def test_fragmented_nodes_refuse_and_roll_back_the_pool_counter():
    # 1536 + 1536 MiB free = 3072 in the pool, but only two whole 1024 MiB
    # extents fit; a 3072 MiB lease cannot be placed.
    inv.memory_inventory(nodes=(1536, 1536))
    lease = inv.new_lease(memory_mb=3072)
    with pytest.raises(exception.InsufficientCapacity) as err:
        inv.allocate(lease)
    assert 'whole extents' in err.value.message
    assert dbapi.pool_get(inv.admin(), 'mem').used == 0


def test_falls_back_to_the_next_pool():
    fabric, small = inv.memory_inventory(nodes=(1024,), name='small')
    _, big = inv.memory_inventory(nodes=(8192,), name='big', fabric=fabric)
    lease = inv.new_lease(memory_mb=2048, requested_pools=[small.uuid,
                                                           big.uuid])
    inv.allocate(lease)
    assert dbapi.lease_get(inv.admin(), lease.uuid).memory_pool_id == big.id


def test_gpu_lease_by_model_and_traits():
    fabric, _ = inv.memory_inventory()
    pool, devices = inv.gpu_inventory(fabric, traits={3: ['CUSTOM_NVLINK']})
    lease = inv.new_lease(device_count=1, device_kind='gpu',
                          device_model='B', device_traits=['CUSTOM_NVLINK'])
    inv.allocate(lease)
    got = dbapi.lease_get(inv.admin(), lease.uuid)
    assert [d.uuid for d in got.devices] == [devices[3].uuid]
    assert got.devices[0].state == 'reserved'
    assert dbapi.pool_get(inv.admin(), pool.uuid).used == 1
    # Only one B device has the trait: a second such lease cannot be placed
    # although two devices are free.
    again = inv.new_lease(device_count=1, device_kind='gpu',
                          device_model='B', device_traits=['CUSTOM_NVLINK'])
    with pytest.raises(exception.InsufficientCapacity) as err:
        inv.allocate(again)
    assert '0 matching free' in err.value.message
    assert dbapi.pool_get(inv.admin(), pool.uuid).used == 1


def test_memory_and_gpus_in_one_lease_are_all_or_nothing():
    fabric, _ = inv.memory_inventory(nodes=(4096,))
    inv.gpu_inventory(fabric, models_=('A',))
    lease = inv.new_lease(memory_mb=1024, device_count=2, device_kind='gpu')
    with pytest.raises(exception.InsufficientCapacity):
        inv.allocate(lease)
    # The memory part was claimed first and rolled back with the rest.
    assert dbapi.pool_get(inv.admin(), 'mem').used == 0
    assert dbapi.extent_list(inv.admin(), lease.id) == []
    assert allocation.check_consistency(inv.admin()) == []


def test_requested_devices_checked_before_a_lease_exists():
    fabric, _ = inv.memory_inventory()
    _, devices = inv.gpu_inventory(fabric)
    lease = inv.new_lease(requested_devices=[devices[0].uuid],
                          device_count=1, device_kind='gpu')
    inv.allocate(lease)
    with pytest.raises(exception.DeviceAlreadyLeased) as err:
        allocation.check_requested_devices(inv.admin(), [devices[0].uuid])
    assert lease.uuid in err.value.message
    with pytest.raises(exception.DeviceNotFound):
        allocation.check_requested_devices(
            inv.admin(), ['6f1c1f0e-0000-4000-8000-000000000000'])
    assert allocation.check_requested_devices(
        inv.admin(), [devices[1].uuid]) is not None


def test_release_returns_everything_and_is_idempotent():
    fabric, _ = inv.memory_inventory()
    inv.gpu_inventory(fabric)
    lease = inv.new_lease(memory_mb=3072, device_count=2, device_kind='gpu')
    inv.allocate(lease)
    assert inv.release(lease) is True
    assert allocator.release_capacity(inv.admin(), lease.id) is False
    got = dbapi.lease_get(inv.admin(), lease.uuid)
    assert got.status == states.RELEASED
    assert got.devices == []
    assert dbapi.pool_get(inv.admin(), 'mem').used == 0
    assert dbapi.pool_get(inv.admin(), 'gpu').used == 0
    assert all(d.state == 'available'
               for d in dbapi.device_list(inv.admin()))
    assert allocation.check_consistency(inv.admin()) == []


def test_allocate_only_runs_from_allocating():
    inv.memory_inventory()
    lease = inv.new_lease(memory_mb=1024)
    assert inv.allocate(lease) is True
    # Run again (a retried RPC): the claim is not made twice.
    assert inv.allocate(lease) is False
    assert dbapi.pool_get(inv.admin(), 'mem').used == 1024
    lease_rows.write(inv.admin(), lease.id, {'status': states.BOUND})
    with pytest.raises(exception.InvalidState):
        inv.allocate(lease)


def test_consistency_check_reports_drift():
    inv.memory_inventory()
    lease = inv.new_lease(memory_mb=1024)
    inv.allocate(lease)
    with dbapi.writer(inv.admin()) as session:
        session.execute(dbapi.sa.text('UPDATE pools SET used = 0'))
    problems = allocation.check_consistency(inv.admin())
    assert problems == ['pool mem: used 0 but leases hold 1024']


def test_racing_claims_never_overcommit_sqlite():
    """Twenty threads race for eight 1 GiB extents; exactly eight win."""
    inv.memory_inventory(nodes=(4096, 4096))
    leases = [inv.new_lease(memory_mb=1024) for _ in range(20)]
    results = []
    barrier = threading.Barrier(len(leases))

    def claim(lease):
        barrier.wait()
        try:
            results.append(inv.allocate(lease))
        except exception.InsufficientCapacity:
            results.append(False)

    threads = [threading.Thread(target=claim, args=(lease,))
               for lease in leases]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results.count(True) == 8
    assert dbapi.pool_get(inv.admin(), 'mem').used == 8192
    assert allocation.check_consistency(inv.admin()) == []


def _actions(lease_uuid):
    lease = dbapi.lease_get(inv.admin(), lease_uuid)
    return [(a.action, a.result, a.message)
            for a in dbapi.action_list(inv.admin(), lease.id)]


def test_create_and_allocate_is_one_step():
    inv.memory_inventory(nodes=(4096,))
    uuid, status = allocator.create_and_allocate(
        inv.admin(), {'project_id': 'p1', 'memory_mb': 2048})
    assert status == states.RESERVED
    lease = dbapi.lease_get(inv.admin(), uuid)
    assert lease.status == states.RESERVED and lease.fault is None
    assert len(lease.extents) == 2
    assert _actions(uuid) == [('create', 'success', None)]
    assert dbapi.pool_get(inv.admin(), 'mem').used == 2048


def test_create_and_allocate_keeps_a_failed_lease_with_its_fault():
    inv.memory_inventory(nodes=(1024,))
    uuid, status = allocator.create_and_allocate(
        inv.admin(), {'project_id': 'p1', 'memory_mb': 2048})
    assert status == states.ALLOC_FAILED
    lease = dbapi.lease_get(inv.admin(), uuid)
    assert 'mem has 1024 MiB free' in lease.fault
    assert lease.memory_pool_id is None and lease.extents == []
    assert _actions(uuid) == [('create', 'error', lease.fault)]
    assert dbapi.pool_get(inv.admin(), 'mem').used == 0
    assert allocation.check_consistency(inv.admin()) == []


def test_racing_one_step_creates_never_overcommit():
    inv.memory_inventory(nodes=(4096, 4096))
    results = []
    barrier = threading.Barrier(20)

    def create():
        barrier.wait()
        results.append(allocator.create_and_allocate(
            inv.admin(), {'project_id': 'p1', 'memory_mb': 1024})[1])

    threads = [threading.Thread(target=create) for _ in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results.count(states.RESERVED) == 8
    assert results.count(states.ALLOC_FAILED) == 12
    assert allocation.check_consistency(inv.admin()) == []


def test_release_unbound_returns_capacity_in_one_step():
    fabric, _ = inv.memory_inventory()
    inv.gpu_inventory(fabric)
    uuid, _ = allocator.create_and_allocate(
        inv.admin(), {'project_id': 'p1', 'memory_mb': 1024,
                      'device_count': 1, 'device_kind': 'gpu'})
    lease = dbapi.lease_get(inv.admin(), uuid)
    assert allocator.release_unbound(inv.admin(), lease.id) == \
        states.RELEASED
    lease = dbapi.lease_get(inv.admin(), uuid)
    assert lease.status == states.RELEASED
    assert [a[:2] for a in _actions(uuid)] == [('create', 'success'),
                                               ('delete', 'success')]
    assert dbapi.pool_get(inv.admin(), 'mem').used == 0
    assert dbapi.pool_get(inv.admin(), 'gpu').used == 0
    assert allocation.check_consistency(inv.admin()) == []


def test_release_unbound_refuses_anything_live_or_busy():
    inv.memory_inventory()
    uuid, _ = allocator.create_and_allocate(
        inv.admin(), {'project_id': 'p1', 'memory_mb': 1024})
    lease = dbapi.lease_get(inv.admin(), uuid)
    # Handed to a memory node once (credentials stored): must be scrubbed
    # by the full flow.
    dbapi.extent_update(inv.admin(), lease.extents[0].id,
                        {'chap_username': 'u'})
    assert allocator.release_unbound(inv.admin(), lease.id) is None
    dbapi.extent_update(inv.admin(), lease.extents[0].id,
                        {'chap_username': None})
    # Another conductor works on it.
    assert dbapi.lease_reserve(inv.admin(), lease.id, 'other')
    assert allocator.release_unbound(inv.admin(), lease.id) is None
    dbapi.lease_release_reservation(inv.admin(), lease.id, 'other')
    # Bound leases never take the short path.
    lease_rows.write(inv.admin(), lease.id, {'status': states.BOUND})
    assert allocator.release_unbound(inv.admin(), lease.id) is None
    assert dbapi.lease_get(inv.admin(), uuid).status == states.BOUND
    assert dbapi.pool_get(inv.admin(), 'mem').used == 1024
