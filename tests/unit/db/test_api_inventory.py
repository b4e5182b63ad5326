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

"""Fabrics, hosts, pools, memory nodes and devices in composable.db.api:
unique names, refused deletes, pool totals that follow the inventory."""

import pytest

from composable.common import exception
from composable.common import states
from composable.db import api as dbapi
from composable.db import models
from tests.unit.db import inventory as inv


# ------------------------------------------------------------ unique names

def test_duplicate_fabric_name():
    inv.fabric('f1')
    with pytest.raises(exception.DuplicateName) as info:
        inv.fabric('f1')
    assert info.value.code == 409
    assert info.value.message == 'A fabric named f1 already exists.'
    # The failed insert left nothing behind and the database still works.
    assert [f.name for f in dbapi.fabric_list(inv.admin())] == ['f1']
    inv.fabric('f2')


def test_duplicate_names_of_hosts_pools_and_memory_nodes():
    fab = inv.fabric()
    inv.host(fab, 'c1')
    with pytest.raises(exception.DuplicateName, match='host named c1'):
        inv.host(fab, 'c1')
    pool = inv.memory_pool(fab, 'mem')
    with pytest.raises(exception.DuplicateName, match='pool named mem'):
        inv.memory_pool(fab, 'mem')
    inv.memory_node(pool, 'n1')
    with pytest.raises(exception.DuplicateName,
                       match='memory node named n1'):
        inv.memory_node(pool, 'n1')
    # The refused node did not count in the pool.
    assert dbapi.pool_get(inv.admin(), 'mem').total == 4096


def test_device_address_is_unique_within_its_pool_only():
    fab = inv.fabric()
    gpu1 = inv.gpu_pool(fab, 'gpu1')
    gpu2 = inv.gpu_pool(fab, 'gpu2')
    inv.device(gpu1, 'slot-1')
    with pytest.raises(exception.DuplicateName, match='slot-1'):
        inv.device(gpu1, 'slot-1')
    inv.device(gpu2, 'slot-1')
    assert dbapi.pool_get(inv.admin(), 'gpu1').total == 1
    assert dbapi.pool_get(inv.admin(), 'gpu2').total == 1


def test_rename_to_a_taken_name():
    inv.fabric('f1')
    f2 = inv.fabric('f2')
    with pytest.raises(exception.DuplicateName, match='fabric named f1'):
        dbapi.fabric_update(inv.admin(), f2.uuid, {'name': 'f1'})
    assert dbapi.fabric_get(inv.admin(), f2.uuid).name == 'f2'
    dbapi.fabric_update(inv.admin(), 'f2', {'name': 'f3'})
    assert dbapi.fabric_get(inv.admin(), 'f3').uuid == f2.uuid


def test_get_by_uuid_or_name_and_not_found():
    fab = inv.fabric('f1')
    assert dbapi.fabric_get(inv.admin(), 'f1').id == fab.id
    assert dbapi.fabric_get(inv.admin(), fab.uuid).id == fab.id
    with pytest.raises(exception.FabricNotFound) as info:
        dbapi.fabric_get(inv.admin(), 'nope')
    assert info.value.code == 404
    with pytest.raises(exception.PoolNotFound):
        dbapi.pool_get(inv.admin(), 'f1')


# ------------------------------------------------------------ deletes

def test_fabric_with_hosts_or_pools_cannot_be_deleted():
    fab = inv.fabric()
    host = inv.host(fab)
    with pytest.raises(exception.InUse, match='1 hosts are on it'):
        dbapi.fabric_delete(inv.admin(), fab.uuid)
    dbapi.host_delete(inv.admin(), host.uuid)
    pool = inv.gpu_pool(fab)
    with pytest.raises(exception.InUse, match='1 pools are on it'):
        dbapi.fabric_delete(inv.admin(), fab.uuid)
    dbapi.pool_delete(inv.admin(), pool.uuid)
    dbapi.fabric_delete(inv.admin(), fab.uuid)
    with pytest.raises(exception.FabricNotFound):
        dbapi.fabric_get(inv.admin(), fab.uuid)


def test_pool_with_memory_nodes_or_devices_cannot_be_deleted():
    fab = inv.fabric()
    mem = inv.memory_pool(fab)
    node = inv.memory_node(mem)
    with pytest.raises(exception.InUse, match='1 memory nodes are in it'):
        dbapi.pool_delete(inv.admin(), mem.uuid)
    dbapi.memory_node_delete(inv.admin(), node.uuid)
    dbapi.pool_delete(inv.admin(), mem.uuid)

    gpu = inv.gpu_pool(fab)
    dev = inv.device(gpu)
    with pytest.raises(exception.InUse, match='1 devices are in it'):
        dbapi.pool_delete(inv.admin(), 'gpu')
    dbapi.device_delete(inv.admin(), dev.uuid)
    dbapi.pool_delete(inv.admin(), 'gpu')
    assert dbapi.pool_list(inv.admin()) == []


def test_pool_used_by_a_live_lease_cannot_be_deleted():
    fab = inv.fabric()
    pool = inv.memory_pool(fab)
    lease = inv.lease(memory_mb=1024, memory_pool_id=pool.id)
    with pytest.raises(exception.InUse, match='1 leases use it'):
        dbapi.pool_delete(inv.admin(), pool.uuid)
    # A released lease keeps its history but lets the pool go.
    inv.update_row(models.Lease, lease.id, status=states.RELEASED)
    dbapi.pool_delete(inv.admin(), pool.uuid)
    assert dbapi.lease_get(inv.admin(), lease.uuid).memory_pool_id is None


def test_memory_node_with_extents_cannot_be_deleted():
    fab = inv.fabric()
    pool = inv.memory_pool(fab)
    node = inv.memory_node(pool)
    lease = inv.lease(memory_mb=1024, memory_pool_id=pool.id)
    inv.add_extent(lease, node)
    with pytest.raises(exception.InUse, match='1 lease extents are on it'):
        dbapi.memory_node_delete(inv.admin(), node.uuid)
    assert dbapi.memory_node_get(inv.admin(), node.uuid).name == 'node1'
    assert dbapi.pool_get(inv.admin(), pool.uuid).total == 4096


def test_device_in_a_lease_cannot_be_deleted_nor_change_state():
    fab = inv.fabric()
    pool = inv.gpu_pool(fab)
    dev = inv.device(pool)
    lease = inv.lease(device_count=1, device_kind='gpu',
                      device_pool_id=pool.id)
    inv.update_row(models.Device, dev.id, lease_id=lease.id,
                   state='reserved')
    with pytest.raises(exception.InUse, match='it is in a lease'):
        dbapi.device_delete(inv.admin(), dev.uuid)
    with pytest.raises(exception.DeviceInLease, match='its state follows'):
        dbapi.device_update(inv.admin(), dev.uuid, {'state': 'maintenance'})
    # Other fields may still change.
    dbapi.device_update(inv.admin(), dev.uuid, {'model': 'A100'})
    got = dbapi.device_get(inv.admin(), dev.uuid)
    assert (got.state, got.model) == ('reserved', 'A100')
    assert [d.uuid for d in dbapi.lease_get(inv.admin(),
                                            lease.uuid).devices] == [dev.uuid]


def test_host_with_a_bound_lease_cannot_be_deleted():
    fab = inv.fabric()
    host = inv.host(fab)
    inv.lease(status=states.BOUND, memory_mb=1024, host_id=host.id)
    with pytest.raises(exception.InUse, match='1 leases are bound'):
        dbapi.host_delete(inv.admin(), host.uuid)


# ------------------------------------------------------------ pool totals

def test_memory_pool_total_follows_its_nodes():
    fab = inv.fabric()
    pool = inv.memory_pool(fab)

    def total():
        return dbapi.pool_get(inv.admin(), pool.uuid).total

    assert total() == 0
    n1 = inv.memory_node(pool, 'n1', 4096)
    assert total() == 4096
    n2 = inv.memory_node(pool, 'n2', 2048, reserved_mb=512)
    assert total() == 4096 + 1536
    dbapi.memory_node_update(inv.admin(), n1.uuid, {'capacity_mb': 8192})
    assert total() == 8192 + 1536
    dbapi.memory_node_update(inv.admin(), 'n2', {'enabled': False})
    assert total() == 8192
    dbapi.memory_node_update(inv.admin(), 'n2', {'enabled': True,
                                                 'reserved_mb': 0})
    assert total() == 8192 + 2048
    dbapi.memory_node_delete(inv.admin(), n2.uuid)
    assert total() == 8192
    dbapi.memory_node_delete(inv.admin(), n1.uuid)
    assert total() == 0


def test_device_pool_total_counts_usable_devices():
    fab = inv.fabric()
    pool = inv.gpu_pool(fab)

    def total():
        return dbapi.pool_get(inv.admin(), pool.uuid).total

    devs = [inv.device(pool, 'gpu-%d' % i) for i in range(3)]
    assert total() == 3
    dbapi.device_update(inv.admin(), devs[0].uuid, {'state': 'maintenance'})
    assert total() == 2
    dbapi.device_update(inv.admin(), devs[1].uuid, {'state': 'faulty'})
    assert total() == 1
    dbapi.device_update(inv.admin(), devs[0].uuid, {'state': 'available'})
    assert total() == 2
    dbapi.device_delete(inv.admin(), devs[2].uuid)
    assert total() == 1


def test_memory_node_capacity_cannot_drop_below_allocated():
    fab = inv.fabric()
    pool = inv.memory_pool(fab)
    node = inv.memory_node(pool, 'n1', 4096)
    inv.update_row(models.MemoryNode, node.id, allocated_mb=3072)
    inv.update_row(models.Pool, pool.id, used=3072)

    with pytest.raises(exception.InUse, match='leases hold 3072 MiB'):
        dbapi.memory_node_update(inv.admin(), 'n1', {'capacity_mb': 2048})
    with pytest.raises(exception.InUse, match='leases hold 3072 MiB'):
        dbapi.memory_node_update(inv.admin(), 'n1', {'reserved_mb': 2048})
    got = dbapi.memory_node_get(inv.admin(), 'n1')
    assert (got.capacity_mb, got.reserved_mb) == (4096, 0)

    dbapi.memory_node_update(inv.admin(), 'n1', {'capacity_mb': 3072})
    assert dbapi.pool_get(inv.admin(), pool.uuid).total == 3072


def test_memory_node_change_may_not_shrink_pool_below_used():
    fab = inv.fabric()
    pool = inv.memory_pool(fab, reserved=1024)
    node = inv.memory_node(pool, 'n1', 4096)
    inv.update_row(models.MemoryNode, node.id, allocated_mb=2048)
    inv.update_row(models.Pool, pool.id, used=2048)
    # 3584 - 1024 reserved still covers 2048 used; with 2560 the node
    # still covers its own 2048 but the pool (2560 - 1024) does not.
    dbapi.memory_node_update(inv.admin(), 'n1', {'capacity_mb': 3584})
    with pytest.raises(exception.InUse, match='would hold less'):
        dbapi.memory_node_update(inv.admin(), 'n1', {'capacity_mb': 2560})
    assert dbapi.memory_node_get(inv.admin(), 'n1').capacity_mb == 3584
    assert dbapi.pool_get(inv.admin(), pool.uuid).total == 3584


def test_device_taken_out_of_service_may_not_shrink_pool_below_used():
    fab = inv.fabric()
    pool = inv.gpu_pool(fab)
    devs = [inv.device(pool, 'gpu-%d' % i) for i in range(2)]
    inv.update_row(models.Pool, pool.id, used=2)
    with pytest.raises(exception.PoolCapacityInUse, match='would hold less'):
        dbapi.device_update(inv.admin(), devs[0].uuid, {'state': 'faulty'})
    assert dbapi.device_get(inv.admin(), devs[0].uuid).state == 'available'
    assert dbapi.pool_get(inv.admin(), pool.uuid).total == 2


# ------------------------------------------------------------ lists

def _names(rows):
    return [row.name for row in rows]


def test_pagination_with_marker_and_sort():
    fabs = [inv.fabric('f%d' % i, driver='fake' if i % 2 else 'other')
            for i in range(5)]
    ctx = inv.admin()
    page = dbapi.fabric_list(ctx, limit=2)
    assert _names(page) == ['f0', 'f1']
    page = dbapi.fabric_list(ctx, limit=2, marker=page[-1].uuid)
    assert _names(page) == ['f2', 'f3']
    page = dbapi.fabric_list(ctx, limit=2, marker=page[-1].uuid)
    assert _names(page) == ['f4']

    page = dbapi.fabric_list(ctx, limit=3, sort_key='name', sort_dir='desc')
    assert _names(page) == ['f4', 'f3', 'f2']
    page = dbapi.fabric_list(ctx, limit=3, sort_key='name', sort_dir='desc',
                             marker=page[-1].uuid)
    assert _names(page) == ['f1', 'f0']

    assert _names(dbapi.fabric_list(ctx, filters={'driver': 'fake'})) == [
        'f1', 'f3']
    assert _names(dbapi.fabric_list(ctx, filters={'driver': 'other'},
                                    limit=1, marker=fabs[0].uuid)) == ['f2']


def test_pagination_with_same_sort_values_uses_id_as_tie_breaker():
    fab = inv.fabric()
    pool = inv.gpu_pool(fab)
    for i in range(5):
        inv.device(pool, 'gpu-%d' % i, model='same')
    ctx = inv.admin()
    seen = []
    marker = None
    while True:
        page = dbapi.device_list(ctx, limit=2, marker=marker,
                                 sort_key='model')
        if not page:
            break
        seen.extend(d.address for d in page)
        marker = page[-1].uuid
    assert seen == ['gpu-%d' % i for i in range(5)]


def test_bad_marker_or_sort_key_is_invalid():
    inv.fabric('f1')
    with pytest.raises(exception.Invalid, match='marker'):
        dbapi.fabric_list(inv.admin(),
                          marker='3f0e7b5c-1d9a-4a52-8a38-0d1b2c3d4e5f')
    with pytest.raises(exception.Invalid, match='cannot sort by'):
        dbapi.fabric_list(inv.admin(), sort_key='nope')


def test_host_with_only_past_attachments_can_be_deleted():
    fab = inv.fabric()
    host = inv.host(fab)
    lease = inv.lease(status=states.BOUND, memory_mb=1024, host_id=host.id)
    attachment = dbapi.attachment_create(inv.admin(), {
        'lease_id': lease.id, 'host_id': host.id, 'mode': 'host',
        'state': 'attached'})
    # Unbound: the lease forgets the host, the attachment is history.
    inv.update_row(models.Lease, lease.id, status=states.RESERVED,
                   host_id=None)
    with pytest.raises(exception.InUse, match='1 attachments'):
        dbapi.host_delete(inv.admin(), host.uuid)
    dbapi.attachment_transition(inv.admin(), attachment.id,
                                states.ATT_DETACH)
    dbapi.attachment_transition(inv.admin(), attachment.id,
                                states.ATT_DETACH_DONE)
    dbapi.host_delete(inv.admin(), host.uuid)
    with pytest.raises(exception.HostNotFound):
        dbapi.host_get(inv.admin(), host.uuid)
    assert dbapi.attachment_list(inv.admin(), lease.id) == []
