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

"""The conductor's fabric inventory sync (composable/conductor/
fabric_sync.py), against the fake fabric's simulated inventory."""

import logging
import threading

import pytest

from composable.common import exception
from composable.common import states
from composable.conductor.allocator import claims as allocator
from composable.conductor import fabric_sync
from composable import conf
from composable.db import api as dbapi
from composable.db import models
from composable import fabric as fabric_drivers
from composable.fabric import fake
from tests import lease_rows
from tests.unit.conductor.allocator import inventory as inv
from tests.unit.db import inventory as db_inv

CONF = conf.CONF


@pytest.fixture(autouse=True)
def drivers(sqlite_db):
    CONF.set_override('enabled_drivers', ['fake'], 'fabric')
    fabric_drivers.reset()
    fake.FakeFabricDriver.reset()
    yield
    fake.FakeFabricDriver.reset()
    fabric_drivers.reset()
    CONF.clear_override('enabled_drivers', 'fabric')


def _fabric(inventory, name='fab'):
    return dbapi.fabric_create(inv.admin(), {
        'name': name, 'driver': 'fake',
        'driver_info': {'inventory': inventory}})


def _set_inventory(fabric, inventory):
    dbapi.fabric_update(inv.admin(), fabric.uuid,
                        {'driver_info': {'inventory': inventory}})


def _devices(pool):
    return {d.address: d for d in dbapi.device_list(
        inv.admin(), filters={'pool_id': pool.id})}


def _sync():
    return fabric_sync.FabricSync('cond-0').run(inv.admin())


def test_new_devices_join_the_pool_of_their_kind(caplog):
    fabric = _fabric([
        {'address': 'gpu-a', 'kind': 'gpu', 'model': 'A100',
         'vendor_id': '10de', 'product_id': '20b0'},
        {'address': 'gpu-b', 'kind': 'gpu', 'health': 'critical'},
        {'address': 'nvme-a', 'kind': 'nvme'}])
    pool, _ = inv.gpu_inventory(fabric, models_=())
    caplog.set_level(logging.INFO)
    summary = _sync()['fab']
    assert sorted(summary['added']) == ['gpu-a', 'gpu-b']
    assert summary['faulty'] == ['gpu-b']
    # No pool serves NVMe drives on this fabric: reported, not guessed.
    assert summary['unpooled'] == ['nvme-a']
    rows = _devices(pool)
    assert rows['gpu-a'].state == states.DEVICE_AVAILABLE
    assert (rows['gpu-a'].model, rows['gpu-a'].vendor_id,
            rows['gpu-a'].product_id) == ('A100', '10de', '20b0')
    assert rows['gpu-b'].state == states.DEVICE_FAULTY
    assert dbapi.pool_get(inv.admin(), pool.uuid).total == 1
    assert 'Fabric fab: added 2 device(s)' in caplog.text
    assert 'no pool of their kind (nvme-a)' in caplog.text
    # A second pass changes nothing; the device without a pool is still
    # reported, until an operator makes a pool for it.
    caplog.clear()
    again = _sync()['fab']
    assert again['added'] == [] and again['faulty'] == []
    assert 'added' not in caplog.text
    assert again['unpooled'] == ['nvme-a']


def test_vanished_failed_and_foreign_bound_devices_leave_service():
    fabric = _fabric([])
    pool, devices = inv.gpu_inventory(fabric, models_=('A', 'A', 'A', 'A'))
    _set_inventory(fabric, [
        {'address': 'gpu-1', 'kind': 'gpu', 'health': 'critical'},
        {'address': 'gpu-2', 'kind': 'gpu'},
        {'address': 'gpu-3', 'kind': 'gpu'}])
    # gpu-2 is bound to a host on the fabric, but no lease holds it.
    fake.FakeFabricDriver().bind_device(
        {'name': 'fab'}, {'address': 'gpu-2'}, {'name': 'elsewhere'})
    summary = _sync()['fab']
    assert summary['gone'] == ['gpu-0']
    assert summary['faulty'] == ['gpu-1']
    assert summary['bound_outside'] == ['gpu-2']
    rows = _devices(pool)
    assert rows['gpu-0'].state == states.DEVICE_MAINTENANCE
    assert rows['gpu-1'].state == states.DEVICE_FAULTY
    assert rows['gpu-2'].state == states.DEVICE_MAINTENANCE
    assert rows['gpu-3'].state == states.DEVICE_AVAILABLE
    # Only gpu-3 can be leased now.
    assert dbapi.pool_get(inv.admin(), pool.uuid).total == 1


def test_a_leased_device_is_never_changed_only_reported(caplog):
    fabric = _fabric([])
    pool, devices = inv.gpu_inventory(fabric, models_=('A',))
    lease = inv.new_lease(device_count=1)
    inv.allocate(lease)
    assert _devices(pool)['gpu-0'].lease_id == lease.id
    # The fabric says the device failed, and then that it is gone.
    _set_inventory(fabric, [{'address': 'gpu-0', 'kind': 'gpu',
                             'health': 'critical'}])
    summary = _sync()['fab']
    assert summary['faulty'] == []
    assert 'is unhealthy' in summary['leased_warnings'][0]
    _set_inventory(fabric, [])
    summary = _sync()['fab']
    assert summary['gone'] == []
    assert 'no longer reported' in summary['leased_warnings'][0]
    row = _devices(pool)['gpu-0']
    assert (row.state, row.lease_id) == (states.DEVICE_RESERVED, lease.id)
    assert 'its state follows its lease' in caplog.text


def test_a_device_the_pool_needs_stays_in_service_with_a_warning(caplog):
    fabric = _fabric([{'address': 'gpu-1', 'kind': 'gpu'}])
    pool, devices = inv.gpu_inventory(fabric, models_=('A', 'A'))
    # Both devices are counted as used: taking gpu-0 out of service
    # would leave the pool with less than its leases hold.
    db_inv.update_row(models.Pool, pool.id, used=2)
    summary = _sync()['fab']
    assert summary['gone'] == []
    assert _devices(pool)['gpu-0'].state == states.DEVICE_AVAILABLE
    assert 'stays available' in caplog.text
    assert 'would hold less than its leases use' in caplog.text


def test_a_lease_that_took_the_device_first_wins_quietly(caplog):
    fabric = _fabric([])
    pool, devices = inv.gpu_inventory(fabric, models_=('A',))
    # The sync read the device before a claim took it.
    listed = _devices(pool)['gpu-0']
    lease = inv.new_lease(device_count=1)
    inv.allocate(lease)
    assert not fabric_sync.FabricSync._set_state(
        inv.admin(), listed, states.DEVICE_MAINTENANCE, reason='test')
    row = _devices(pool)['gpu-0']
    assert (row.state, row.lease_id) == (states.DEVICE_RESERVED, lease.id)
    assert 'stays' not in caplog.text


def test_a_claim_racing_the_sync_keeps_its_device():
    """The allocator and the sync both lock the pool first: either the
    lease gets the device and the sync leaves it alone, or the device is
    out of service and the lease fails for lack of devices. Never both a
    leased device in maintenance nor a lease without its device."""
    for _ in range(5):
        fabric = _fabric([], name='fab-race')
        pool, _ = inv.gpu_inventory(fabric, models_=('A',), name='race')
        lease = inv.new_lease(device_count=1, requested_pools=[pool.uuid])
        outcome = {}

        def claim():
            try:
                outcome['claim'] = allocator.allocate(inv.admin(), lease.id)
            except exception.InsufficientCapacity as exc:
                outcome['claim'] = exc

        start = threading.Barrier(2)

        def claim_at_once():
            start.wait(30)
            claim()

        worker = threading.Thread(target=claim_at_once)
        worker.start()
        start.wait(30)
        fabric_sync.FabricSync('cond-0').sync(inv.admin(), fabric)
        worker.join(30)
        assert not worker.is_alive()
        row = _devices(pool)['race-0']
        if row.lease_id is not None:
            assert row.state == states.DEVICE_RESERVED
        else:
            assert row.state == states.DEVICE_MAINTENANCE
            assert isinstance(outcome['claim'],
                              exception.InsufficientCapacity)
        lease_rows.write(inv.admin(), lease.id,
                         {'status': states.RELEASING})
        if row.lease_id is not None:
            allocator.release_capacity(inv.admin(), lease.id)
        for device in dbapi.device_list(inv.admin(),
                                        filters={'pool_id': pool.id}):
            dbapi.device_delete(inv.admin(), device.uuid)
        dbapi.pool_delete(inv.admin(), pool.uuid)
        dbapi.fabric_delete(inv.admin(), fabric.uuid)


def test_a_fabric_that_fails_or_hangs_changes_nothing(
        caplog, monkeypatch):
    fabric = _fabric([{'address': 'gpu-9', 'kind': 'gpu'}])
    pool, _ = inv.gpu_inventory(fabric, models_=('A',))
    release = threading.Event()
    calls = []

    class Broken(fake.FakeFabricDriver):
        def discover(self, fabric):
            raise exception.DriverError(reason='fabric manager said 503')

    class Stuck(fake.FakeFabricDriver):
        def discover(self, fabric):
            calls.append(fabric['name'])
            release.wait(60)
            return []

    CONF.set_override('operation_timeout', 1, 'fabric')
    try:
        for driver in (Broken(), Stuck(), Stuck()):
            monkeypatch.setattr(fabric_drivers, 'get_driver',
                                lambda name, driver=driver: driver)
            assert _sync() == {}
    finally:
        release.set()
        CONF.clear_override('operation_timeout', 'fabric')
    assert 'fabric manager said 503' in caplog.text
    assert 'did not answer within 1 seconds' in caplog.text
    # The hung discovery is not started again while it runs.
    assert calls == ['fab']
    assert 'previous discovery on fabric fab has not ended' in caplog.text
    assert set(_devices(pool)) == {'gpu-0'}
    assert _devices(pool)['gpu-0'].state == states.DEVICE_AVAILABLE


def test_a_device_out_of_service_keeps_its_state_when_it_vanishes():
    fabric = _fabric([])
    pool, devices = inv.gpu_inventory(fabric, models_=('A', 'A'))
    dbapi.device_update(inv.admin(), devices[0].uuid,
                        {'state': states.DEVICE_FAULTY})
    dbapi.device_update(inv.admin(), devices[1].uuid,
                        {'state': states.DEVICE_MAINTENANCE})
    summary = _sync()['fab']
    assert summary['gone'] == []
    rows = _devices(pool)
    assert rows['gpu-0'].state == states.DEVICE_FAULTY
    assert rows['gpu-1'].state == states.DEVICE_MAINTENANCE


def test_fabrics_of_drivers_not_enabled_are_skipped():
    fabric = dbapi.fabric_create(inv.admin(), {'name': 'other',
                                               'driver': 'redfish'})
    inv.gpu_inventory(fabric, models_=())
    assert 'other' not in _sync()


def test_serial_health_and_reachable_hosts_are_stored_and_follow_the_fabric():
    fabric = _fabric([
        {'address': 'gpu-a', 'kind': 'gpu', 'serial': 'SN-A',
         'hosts': ['compute-2', 'compute-1', 'compute-1']},
        {'address': 'gpu-b', 'kind': 'gpu', 'health': 'warning'},
        {'address': 'gpu-c', 'kind': 'gpu', 'hosts': []}])
    pool, _ = inv.gpu_inventory(fabric, models_=())
    _sync()
    rows = _devices(pool)
    facts = {a: (r.serial, r.health, r.health_reason, r.reachable_hosts)
             for a, r in rows.items()}
    assert facts == {
        'gpu-a': ('SN-A', 'ok', None, ['compute-1', 'compute-2']),
        'gpu-b': (None, 'warning', 'the fabric reports its health as '
                                   'warning', None),
        'gpu-c': (None, 'ok', None, [])}
    # A leased device's facts follow the fabric too (its state does not).
    lease = inv.new_lease(device_count=1, device_kind='gpu',
                          requested_devices=[rows['gpu-a'].uuid])
    inv.allocate(lease)
    _set_inventory(fabric, [
        {'address': 'gpu-a', 'kind': 'gpu', 'serial': 'SN-A',
         'health': 'critical', 'hosts': None},
        {'address': 'gpu-c', 'kind': 'gpu', 'hosts': ['compute-1']}])
    _sync()
    rows = _devices(pool)
    assert (rows['gpu-a'].state, rows['gpu-a'].health,
            rows['gpu-a'].reachable_hosts) == (
        states.DEVICE_RESERVED, 'critical', None)
    assert rows['gpu-c'].reachable_hosts == ['compute-1']
    # gpu-b is no longer reported.
    assert (rows['gpu-b'].health, rows['gpu-b'].health_reason) == (
        'unknown', 'no longer reported by the fabric')


def test_an_unchanged_device_is_not_written_again(monkeypatch):
    fabric = _fabric([{'address': 'gpu-a', 'kind': 'gpu', 'serial': 'S',
                       'hosts': ['compute-1']}])
    inv.gpu_inventory(fabric, models_=())
    _sync()
    writes = []
    monkeypatch.setattr(dbapi, 'device_set_facts',
                        lambda *args: writes.append(args))
    _sync()
    assert writes == []


def test_the_fake_fabric_refuses_a_host_its_inventory_does_not_reach():
    driver = fake.FakeFabricDriver()
    fab = {'name': 'fab', 'driver_info': {'inventory': [
        {'address': 'gpu-a', 'hosts': ['compute-1']}]}}
    with pytest.raises(exception.DriverError) as err:
        driver.bind_device(fab, {'address': 'gpu-a', 'uuid': 'u'},
                           {'name': 'compute-2'})
    assert 'cannot reach host compute-2' in err.value.message
    driver.bind_device(fab, {'address': 'gpu-a', 'uuid': 'u'},
                       {'name': 'compute-1'})
    with pytest.raises(exception.Invalid) as err:
        driver.validate_driver_info({'inventory': [
            {'address': 'gpu-a', 'hosts': 'compute-1'}]})
    assert 'hosts must be a list of host names' in err.value.message
