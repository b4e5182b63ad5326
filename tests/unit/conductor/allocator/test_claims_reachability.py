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

"""Devices a host can reach (devices.reachable_hosts) on SQLite: a claim
that knows the lease's host takes only those, a bind trades the devices
its host cannot reach for free ones it can or is refused with 409, and
two binds racing for the last reachable device get it once."""

import threading

import pytest

from composable.common import exception
from composable.common import states
from composable.conductor.allocator import claims as allocator
from composable import conf
from composable.db import allocation
from composable.db import api as dbapi
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


def _gpus(reach, models_=None):
    """A GPU pool whose device i reaches ``reach[i]`` (None: every
    host)."""
    ctx = inv.admin()
    fabric = dbapi.fabric_create(ctx, {'name': 'fab', 'driver': 'fake'})
    for name in ('compute-a', 'compute-b'):
        dbapi.host_create(ctx, {'name': name, 'fabric_id': fabric.id})
    pool, devices = inv.gpu_inventory(
        fabric, models_=models_ or ['A'] * len(reach))
    for device, hosts in zip(devices, reach):
        dbapi.device_set_facts(ctx, device.id, {'reachable_hosts': hosts})
    return fabric, pool, [dbapi.device_get(ctx, d.uuid) for d in devices]


def _held(lease):
    return sorted(d.address for d in
                  dbapi.lease_get(inv.admin(), lease.uuid).devices)


def test_reachable_hosts_are_stored_null_apart_from_empty():
    _, _, devices = _gpus([None, [], ['compute-a']])
    assert [d.reachable_hosts for d in devices] == [None, [], ['compute-a']]
    with dbapi.reader(inv.admin()) as session:
        raw = [row[0] for row in session.execute(dbapi.sa.text(
            'SELECT reachable_hosts FROM devices ORDER BY id'))]
    # NULL in the database, not the JSON text "null".
    assert raw == [None, '[]', '["compute-a"]']


def test_claim_for_a_host_takes_only_devices_it_reaches():
    _, pool, _ = _gpus([['compute-b'], [], ['compute-a'], None])
    ctx = inv.admin()
    host = dbapi.host_get(ctx, 'compute-a')
    lease = inv.new_lease(device_count=2, device_kind='gpu',
                          host_id=host.id)
    assert inv.allocate(lease) is True
    assert _held(lease) == ['gpu-2', 'gpu-3']
    assert dbapi.pool_get(ctx, pool.uuid).used == 2
    # No third device reaches compute-a: the claim says so, takes nothing.
    again = inv.new_lease(device_count=1, device_kind='gpu',
                          host_id=host.id)
    with pytest.raises(exception.InsufficientCapacity) as err:
        inv.allocate(again)
    assert ('gpu has 2 matching free, 0 of them reachable from host '
            'compute-a') in err.value.message
    assert dbapi.pool_get(ctx, pool.uuid).used == 2
    assert allocation.check_consistency(ctx) == []


def test_create_and_allocate_for_a_host_and_requested_devices():
    _, pool, devices = _gpus([['compute-b'], ['compute-a']])
    uuid, status = allocator.create_and_allocate(
        inv.admin(), {'project_id': 'p1', 'device_count': 1,
                      'device_kind': 'gpu'}, host_name='compute-a')
    assert status == states.RESERVED
    assert [d.address for d in dbapi.lease_get(
        inv.admin(), uuid).devices] == ['gpu-1']
    uuid, status = allocator.create_and_allocate(
        inv.admin(), {'project_id': 'p1', 'device_count': 1,
                      'requested_devices': [devices[0].uuid]},
        host_name='compute-a')
    assert status == states.ALLOC_FAILED
    lease = dbapi.lease_get(inv.admin(), uuid)
    assert ('Device %s cannot be reached from host compute-a (the fabric '
            'connects it to compute-b)' % devices[0].uuid) in lease.fault


def test_bind_trades_unreachable_devices_for_reachable_ones():
    _, pool, devices = _gpus([['compute-b'], None, ['compute-a']])
    lease = inv.new_lease(device_count=1, device_kind='gpu')
    inv.allocate(lease)
    assert _held(lease) == ['gpu-0']  # no host known at the claim
    # compute-b reaches it: nothing to change.
    assert allocator.reach_host(inv.admin(), lease.id, 'compute-b') == {}
    traded = allocator.reach_host(inv.admin(), lease.id, 'compute-a')
    assert traded == {devices[0].uuid: devices[1].uuid}
    assert _held(lease) == ['gpu-1']
    back = dbapi.device_get(inv.admin(), devices[0].uuid)
    assert (back.state, back.lease_id) == (states.DEVICE_AVAILABLE, None)
    assert dbapi.pool_get(inv.admin(), pool.uuid).used == 1
    assert allocation.check_consistency(inv.admin()) == []


def test_bind_with_no_reachable_free_device_is_a_409_that_changes_nothing():
    _, pool, devices = _gpus([['compute-b'], ['compute-b'], []])
    lease = inv.new_lease(device_count=1, device_kind='gpu')
    inv.allocate(lease)
    with pytest.raises(exception.Conflict) as err:
        allocator.reach_host(inv.admin(), lease.id, 'compute-a')
    assert err.value.code == 409
    assert err.value.message == (
        'Conflict: host compute-a cannot reach device %s of lease %s (the '
        'fabric connects it to compute-b), and pool gpu has no free device '
        'that host can reach to take its place; bind the lease to a host '
        'that reaches its devices, or try again once a device is free' %
        (devices[0].uuid, lease.uuid))
    assert _held(lease) == ['gpu-0']
    assert dbapi.pool_get(inv.admin(), pool.uuid).used == 1


def test_bind_keeps_model_and_named_devices():
    _, _, devices = _gpus([['compute-b'], ['compute-a'], ['compute-a']],
                          models_=['A', 'B', 'A'])
    lease = inv.new_lease(device_count=1, device_kind='gpu',
                          device_model='A')
    inv.allocate(lease)
    assert allocator.reach_host(inv.admin(), lease.id, 'compute-a') == {
        devices[0].uuid: devices[2].uuid}
    named = inv.new_lease(device_count=1,
                          requested_devices=[devices[0].uuid])
    inv.allocate(named)
    with pytest.raises(exception.Conflict) as err:
        allocator.reach_host(inv.admin(), named.id, 'compute-a')
    assert 'the lease asked for that device' in err.value.message


def test_a_bound_device_is_not_traded():
    _, _, devices = _gpus([['compute-b'], None])
    lease = inv.new_lease(device_count=1, device_kind='gpu')
    inv.allocate(lease)
    dbapi.device_set_facts(inv.admin(), devices[0].id,
                           {'pci_address': '0000:41:00.0'})
    dbapi.device_transition(inv.admin(), devices[0].id,
                            states.DEVICE_ATTACH)
    with pytest.raises(exception.Conflict) as err:
        allocator.reach_host(inv.admin(), lease.id, 'compute-a')
    assert 'unbind the lease first' in err.value.message
    assert _held(lease) == ['gpu-0']


def test_two_binds_racing_for_the_last_reachable_device():
    """Two leases hold devices compute-a cannot reach; one free device
    reaches it: one bind gets it, the other is refused (409) and keeps
    what it held."""
    _, pool, devices = _gpus([['compute-b'], ['compute-b'], ['compute-a']])
    leases = [inv.new_lease(device_count=1, device_kind='gpu')
              for _ in range(2)]
    for lease in leases:
        inv.allocate(lease)
    assert [_held(lease) for lease in leases] == [['gpu-0'], ['gpu-1']]
    barrier = threading.Barrier(2)
    results = {}

    def bind(lease):
        barrier.wait()
        try:
            results[lease.uuid] = allocator.reach_host(
                inv.admin(), lease.id, 'compute-a')
        except exception.Conflict as exc:
            results[lease.uuid] = exc

    threads = [threading.Thread(target=bind, args=(lease,))
               for lease in leases]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not any(thread.is_alive() for thread in threads)
    won = [uuid for uuid, r in results.items() if isinstance(r, dict)]
    lost = [uuid for uuid, r in results.items()
            if isinstance(r, exception.Conflict)]
    assert len(won) == 1 and len(lost) == 1, results
    assert results[won[0]] and set(results[won[0]].values()) == {
        devices[2].uuid}
    assert 'pool gpu has no free device' in results[lost[0]].message
    holdings = sorted(a for lease in leases for a in _held(lease))
    assert holdings == ['gpu-0', 'gpu-2'] or holdings == ['gpu-1', 'gpu-2']
    assert dbapi.pool_get(inv.admin(), pool.uuid).used == 2
    assert allocation.check_consistency(inv.admin()) == []
