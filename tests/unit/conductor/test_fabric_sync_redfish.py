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

"""The fabric sync with the redfish driver against the emulated
composition service: what one unreadable resource does to a round."""

import pytest

from composable.common import states
from composable.conductor import fabric_sync
from composable import conf
from composable.db import api as dbapi
from composable import fabric as fabric_drivers
from composable import notifications
from tests.functional.fabric import redfish_emulator as emu
from tests.unit.conductor.allocator import inventory as inv

CONF = conf.CONF


@pytest.fixture
def service(sqlite_db):
    CONF.set_override('enabled_drivers', ['redfish'], 'fabric')
    fabric_drivers.reset()
    url, stop, emulator = emu.serve()
    try:
        yield url, emulator
    finally:
        stop()
        fabric_drivers.reset()
        CONF.clear_override('enabled_drivers', 'fabric')


def _rows(pool):
    return {d.address: d for d in dbapi.device_list(
        inv.admin(), filters={'pool_id': pool.id})}


def test_unreadable_blocks_stay_as_they_are_the_rest_is_synced(
        service, monkeypatch):
    url, emulator = service
    ctx = inv.admin()
    fabric = dbapi.fabric_create(ctx, {
        'name': 'rf', 'driver': 'redfish', 'driver_info': {
            'address': url, 'username': 'admin',
            'password': emu.DEFAULT_CONFIG['password']}})
    pool = dbapi.pool_create(ctx, {
        'name': 'gpu', 'kind': 'gpu', 'fabric_id': fabric.id,
        'resource_class': 'CUSTOM_COMPOSABLE_GPU'})
    for address in (emu.BLOCKS + '/GPU1', emu.BLOCKS + '/GONE'):
        dbapi.device_create(ctx, {'pool_id': pool.id, 'address': address,
                                  'kind': 'gpu'})
    health = []
    monkeypatch.setattr(notifications, 'device_health',
                        lambda ctx, row, **kw: health.append(
                            (row.address, kw.get('health'),
                             kw.get('reason'))))
    # GPU1 vanishes between the listing and its read; GPU0 (new) is
    # read; the GPU row GONE is not reported at all.
    seen = []

    def remove_gpu1(record):
        if record['path'] == emu.BLOCKS and record['method'] == 'GET':
            seen.append(record)
        elif seen and record['path'].startswith(emu.BLOCKS + '/GPU0'):
            with emulator.locked() as state:
                state.blocks.pop('GPU1', None)

    emulator.observe(remove_gpu1)
    summary = fabric_sync.FabricSync('c').run(ctx)['rf']
    rows = _rows(pool)
    assert summary['added'] == [emu.BLOCKS + '/GPU0']
    assert summary['gone'] == [emu.BLOCKS + '/GONE']
    assert [u.split(':')[0] for u in summary['unknown']] == [
        emu.BLOCKS + '/GPU1']
    assert 'HTTP 404' in summary['unknown'][0]
    assert rows[emu.BLOCKS + '/GPU1'].state == states.DEVICE_AVAILABLE
    assert rows[emu.BLOCKS + '/GONE'].state == states.DEVICE_MAINTENANCE
    assert rows[emu.BLOCKS + '/GPU0'].state == states.DEVICE_AVAILABLE
    unknown = [h for h in health if h[0] == emu.BLOCKS + '/GPU1']
    assert unknown and unknown[0][1] == 'unknown'
    assert 'HTTP 404' in unknown[0][2]
    # What the service says of each device is stored: GPU0's serial and
    # health, the hosts sharing its zone; the unreadable one's reason.
    gpu0 = rows[emu.BLOCKS + '/GPU0']
    assert (gpu0.serial, gpu0.health, gpu0.health_reason,
            gpu0.reachable_hosts) == ('GPU-SN-0000', 'ok', None,
                                      ['compute-0', 'compute-1'])
    gpu1 = rows[emu.BLOCKS + '/GPU1']
    assert gpu1.health == 'unknown'
    assert gpu1.health_reason.startswith('could not be read from the '
                                         'fabric: ')
    assert 'HTTP 404' in gpu1.health_reason
    assert (rows[emu.BLOCKS + '/GONE'].health,
            rows[emu.BLOCKS + '/GONE'].health_reason) == (
        'unknown', 'no longer reported by the fabric')
    # Next round GPU1 is gone for good, and GPU0 answers garbage: GPU0
    # is unknown (and left available), GPU1 leaves service.
    for _ in range(2):
        emulator.inject('garbage', method='GET',
                        path=emu.BLOCKS + '/GPU0', count=1)
        summary = fabric_sync.FabricSync('c').run(ctx)['rf']
        assert [u.split(':')[0] for u in summary['unknown']] == [
            emu.BLOCKS + '/GPU0']
    rows = _rows(pool)
    assert rows[emu.BLOCKS + '/GPU0'].state == states.DEVICE_AVAILABLE
    assert rows[emu.BLOCKS + '/GPU1'].state == states.DEVICE_MAINTENANCE
    # Told once per reason, not every round.
    assert [h[1] for h in health if h[0] == emu.BLOCKS + '/GPU0'] == [
        'unknown']


def test_not_poolable_out_of_service_and_shared_blocks(service):
    ctx = inv.admin()
    url, stop, emulator = emu.serve(config=emu.PROFILES['states'])
    try:
        fabric = dbapi.fabric_create(ctx, {
            'name': 'rf', 'driver': 'redfish', 'driver_info': {
                'address': url, 'username': 'admin',
                'password': emu.DEFAULT_CONFIG['password']}})
        gpu = dbapi.pool_create(ctx, {
            'name': 'gpu', 'kind': 'gpu', 'fabric_id': fabric.id,
            'resource_class': 'CUSTOM_COMPOSABLE_GPU'})
        nvme = dbapi.pool_create(ctx, {
            'name': 'nvme', 'kind': 'pci', 'fabric_id': fabric.id,
            'resource_class': 'CUSTOM_COMPOSABLE_PCI_NVME'})
        summary = fabric_sync.FabricSync('c').run(ctx)['rf']
        rows = _rows(gpu)
        rows.update(_rows(nvme))
    finally:
        stop()
    states_ = {a.rsplit('/', 1)[-1]: r.state for a, r in rows.items()}
    assert states_ == {
        'GPU0': states.DEVICE_AVAILABLE,
        'GPU-Failed': states.DEVICE_MAINTENANCE,
        'GPU-Unavailable': states.DEVICE_MAINTENANCE,
        'GPU-Reserved': states.DEVICE_MAINTENANCE,
        'GPU-Disabled': states.DEVICE_MAINTENANCE,
        'GPU-Foreign': states.DEVICE_MAINTENANCE,
        'NVMe-Shared': states.DEVICE_MAINTENANCE}
    assert sorted(a.rsplit('/', 1)[-1] for a in summary['unavailable']) == [
        'GPU-Disabled', 'GPU-Failed', 'GPU-Reserved', 'GPU-Unavailable']
    assert sorted(a.rsplit('/', 1)[-1]
                  for a in summary['bound_outside']) == [
        'GPU-Foreign', 'NVMe-Shared']
    # The NIC has no pool here.
    assert [a.rsplit('/', 1)[-1] for a in summary['unpooled']] == ['NIC0']


def test_blocks_no_host_can_be_given_are_listed_not_added(service):
    ctx = inv.admin()
    url, stop, emulator = emu.serve(
        config=emu.PROFILES['storage-appliance'])
    try:
        fabric = dbapi.fabric_create(ctx, {
            'name': 'rf', 'driver': 'redfish', 'driver_info': {
                'address': url, 'username': 'admin',
                'password': emu.DEFAULT_CONFIG['password']}})
        nvme = dbapi.pool_create(ctx, {
            'name': 'nvme', 'kind': 'pci', 'fabric_id': fabric.id,
            'resource_class': 'CUSTOM_COMPOSABLE_PCI_NVME'})
        gpu = dbapi.pool_create(ctx, {
            'name': 'gpu', 'kind': 'gpu', 'fabric_id': fabric.id,
            'resource_class': 'CUSTOM_COMPOSABLE_GPU'})
        summary = fabric_sync.FabricSync('c').run(ctx)['rf']
    finally:
        stop()
    assert sorted(_rows(nvme)) == [emu.BLOCKS + '/NVMe0',
                                   emu.BLOCKS + '/NVMe1']
    assert _rows(gpu) == {}
    listed = {line.split(':')[0].rsplit('/', 1)[-1]: line
              for line in summary['not_poolable']}
    assert sorted(listed) == ['DIMM0', 'GPU9', 'SAS0', 'VLAN20']
    assert 'SAS drive' in listed['SAS0']


def test_hosts_are_named_by_the_dmi_uuid_their_agent_reported(
        service, monkeypatch):
    from composable.conductor import host_facts
    url, emulator = service
    ctx = inv.admin()
    fabric = dbapi.fabric_create(ctx, {
        'name': 'rf', 'driver': 'redfish', 'driver_info': {
            'address': url, 'username': 'admin',
            'password': emu.DEFAULT_CONFIG['password'],
            'poll_interval': 0.05}})
    dbapi.pool_create(ctx, {
        'name': 'gpu', 'kind': 'gpu', 'fabric_id': fabric.id,
        'resource_class': 'CUSTOM_COMPOSABLE_GPU'})
    # A host whose name no system has; its agent reported the UUID of
    # system compute-1.
    dbapi.host_create(ctx, {'name': 'node-b', 'fabric_id': fabric.id})
    uuid1 = emu.DEFAULT_CONFIG['systems'][1]['uuid']
    assert host_facts.record(ctx, 'node-b', {'dmi_uuid': uuid1.upper()})
    host = dbapi.host_get(ctx, 'node-b')
    assert host.properties == {'dmi_uuid': uuid1}
    driver = fabric_drivers.get_driver('redfish')
    driver.bind_device(fabric.as_dict(), {'address': emu.BLOCKS + '/GPU1'},
                       {'name': 'node-b', 'properties': host.properties})
    with emulator.locked() as state:
        assert state.blocks['GPU1']['system'] == 'compute-1'
    found = []
    original = fabric_sync.discover

    def spy(fabric_row, timeout):
        found.extend(original(fabric_row, timeout))
        return found

    monkeypatch.setattr(fabric_sync, 'discover', spy)
    fabric_sync.FabricSync('c').run(ctx)
    by_address = {d['address']: d for d in found}
    assert by_address[emu.BLOCKS + '/GPU1']['bound_to'] == 'node-b'
    assert 'node-b' in by_address[emu.BLOCKS + '/GPU0']['hosts']
    assert 'compute-1' not in by_address[emu.BLOCKS + '/GPU1']['hosts']


def test_zones_give_the_reachable_hosts_none_reach_every_host(service):
    """GPU1 is in zone 2, which only compute-1 is in; a service without
    resource zones says nothing of reachability: every host."""
    ctx = inv.admin()
    url, _ = service
    no_zones = dict(emu.DEFAULT_CONFIG, zones=[], systems=[
        dict(s, zones=[]) for s in emu.DEFAULT_CONFIG['systems']], blocks=[
        dict(b, zones=[]) for b in emu.DEFAULT_CONFIG['blocks']])
    for name, address in (('zoned', url), ('open', None)):
        if address is None:
            address, stop, _ = emu.serve(config=no_zones)
        fabric = dbapi.fabric_create(ctx, {
            'name': name, 'driver': 'redfish', 'driver_info': {
                'address': address, 'username': 'admin',
                'password': emu.DEFAULT_CONFIG['password']}})
        dbapi.pool_create(ctx, {
            'name': 'gpu-' + name, 'kind': 'gpu', 'fabric_id': fabric.id,
            'resource_class': 'CUSTOM_COMPOSABLE_GPU'})
    try:
        fabric_sync.FabricSync('c').run(ctx)
    finally:
        stop()
    zoned = _rows(dbapi.pool_get(ctx, 'gpu-zoned'))
    assert zoned[emu.BLOCKS + '/GPU1'].reachable_hosts == ['compute-1']
    assert zoned[emu.BLOCKS + '/GPU1'].serial == 'GPU-SN-0001'
    open_ = _rows(dbapi.pool_get(ctx, 'gpu-open'))
    assert sorted(open_) == [emu.BLOCKS + '/GPU0', emu.BLOCKS + '/GPU1']
    assert {r.reachable_hosts for r in open_.values()} == {None}
