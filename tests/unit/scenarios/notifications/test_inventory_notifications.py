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

"""pool.update and device.health, from the database writes and the fabric
sync (fake fabric driver, SQLite)."""

import pytest

from composable.common import states
from composable.conductor import fabric_sync
from composable import conf
from composable.db import api as db_api
from composable import fabric as fabric_drivers
from composable.fabric import fake
from tests.unit.conductor.allocator import inventory as inv
from tests.unit.scenarios.notifications import conftest

CONF = conf.CONF
data = conftest.data


@pytest.fixture
def fabric(sqlite_db):  # noqa: F811
    CONF.set_override('enabled_drivers', ['fake'], 'fabric')
    fabric_drivers.reset()
    fake.FakeFabricDriver.reset()
    fabric_sync._LEASED_HEALTH.clear()
    yield db_api.fabric_create(inv.admin(), {
        'name': 'fab', 'driver': 'fake',
        'driver_info': {'inventory': [], 'password': 'fabric-secret'}})
    fabric_sync._LEASED_HEALTH.clear()
    fake.FakeFabricDriver.reset()
    fabric_drivers.reset()
    CONF.clear_override('enabled_drivers', 'fabric')


def _set_inventory(fabric, inventory):
    db_api.fabric_update(inv.admin(), fabric.uuid, {
        'driver_info': {'inventory': inventory, 'password': 'fabric-secret'}})


def _sync():
    return fabric_sync.FabricSync('cond-0').run(inv.admin())


def _of(sent, event_type):
    return [m for m in sent.all() if m['event_type'] == event_type]


def test_operator_changes_to_a_pool_are_notified(fabric, sent):
    pool, _ = inv.gpu_inventory(fabric, models_=('A', 'A'))
    updates = _of(sent, 'pool.update')
    # Each device added changed the pool's total.
    assert [data(m)['total'] for m in updates] == [1, 2]
    db_api.pool_update(inv.admin(), pool.uuid, {'reserved': 1})
    last = _of(sent, 'pool.update')[-1]
    assert last['priority'] == 'INFO'
    assert last['payload']['composable_object.name'] == 'PoolPayload'
    body = data(last)
    assert (body['uuid'], body['name'], body['kind']) == (
        pool.uuid, pool.name, 'gpu')
    assert (body['total'], body['reserved'], body['used'], body['free']) == (
        2, 1, 0, 1)
    assert body['fabric_uuid'] == fabric.uuid
    # A refused change (it would take capacity leases hold) commits
    # nothing, and so tells nothing.
    lease = inv.new_lease(device_count=1)
    inv.allocate(lease)
    count = len(_of(sent, 'pool.update'))
    devices = db_api.device_list(inv.admin(),
                                 filters={'pool_id': pool.id})
    free = [d for d in devices if d.lease_id is None][0]
    with pytest.raises(Exception):
        db_api.device_update(inv.admin(), free.uuid,
                             {'state': states.DEVICE_FAULTY})
    assert len(_of(sent, 'pool.update')) == count


def test_fabric_sync_notifies_device_health(fabric, sent):
    pool, devices = inv.gpu_inventory(fabric, models_=('A', 'A', 'A'))
    _set_inventory(fabric, [
        {'address': 'gpu-1', 'kind': 'gpu', 'health': 'critical'},
        {'address': 'gpu-2', 'kind': 'gpu'},
        {'address': 'gpu-9', 'kind': 'gpu', 'health': 'critical'}])
    _sync()
    health = {data(m)['address']: m for m in _of(sent, 'device.health')}
    assert set(health) == {'gpu-0', 'gpu-1', 'gpu-9'}
    gone = data(health['gpu-0'])
    assert (gone['previous_state'], gone['state'], gone['health']) == (
        'available', 'maintenance', 'absent')
    assert health['gpu-0']['priority'] == 'ERROR'
    failed = data(health['gpu-1'])
    assert (failed['previous_state'], failed['state'], failed['health']) == (
        'available', 'faulty', 'critical')
    assert failed['pool_uuid'] == pool.uuid
    assert failed['fabric_uuid'] == fabric.uuid
    assert failed['fabric_name'] == 'fab'
    assert 'unhealthy' in failed['reason']
    added = data(health['gpu-9'])
    assert (added['previous_state'], added['state']) == (None, 'faulty')
    assert health['gpu-0']['payload']['composable_object.name'] == (
        'DeviceHealthPayload')
    # The pool lost two devices and gained none in service.
    assert data(_of(sent, 'pool.update')[-1])['total'] == 1
    # Nothing changed: nothing more to say.
    count = len(sent.all())
    _sync()
    assert len(sent.all()) == count
    assert 'fabric-secret' not in repr(sent.all())


def test_a_leased_device_is_notified_once_per_health(fabric, sent):
    pool, devices = inv.gpu_inventory(fabric, models_=('A',))
    lease = inv.new_lease(device_count=1)
    inv.allocate(lease)
    _set_inventory(fabric, [{'address': 'gpu-0', 'kind': 'gpu',
                             'health': 'critical'}])
    _sync()
    _sync()
    reports = _of(sent, 'device.health')
    assert len(reports) == 1
    body = data(reports[0])
    assert body['lease_uuid'] == lease.uuid
    assert (body['state'], body['health']) == (states.DEVICE_RESERVED,
                                               'critical')
    _set_inventory(fabric, [{'address': 'gpu-0', 'kind': 'gpu'}])
    _sync()
    reports = _of(sent, 'device.health')
    assert [data(m)['health'] for m in reports] == ['critical', 'ok']
    assert reports[-1]['priority'] == 'INFO'


def test_without_notifications_nothing_listens(fabric):
    conftest.assert_no_listener()
    inv.gpu_inventory(fabric, models_=('A',))
    _set_inventory(fabric, [])
    _sync()
