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

"""GPU leases end to end through the API on a Redfish fabric.

The API (in process), a conductor on SQLite with in-process messaging and
a compute agent whose host side is the simulated one (no PCI work: that
is the compute-node part), and the project's Redfish composition emulator
over real HTTP: a lease bound to a host composes its block into the
host's system, unbinding and deleting it leave the block Unused, and the
fabric's inventory reaches the pool through the conductor's sync.
"""


import pytest

from composable.common import states
from composable.conductor import fabric_sync
from composable.db import api as dbapi
from composable import fabric as fabric_drivers
from tests.functional.fabric import redfish_emulator
from tests.functional.fabric import redfish_stack
from tests.unit.conductor import harness as harness_mod

HOST = redfish_stack.HOST
_inventory = redfish_stack.inventory
_block = redfish_stack.block
_wait = redfish_stack.wait
_composed_into = redfish_stack.composed_into
_driver_info = redfish_stack.driver_info


@pytest.fixture
def stack(tmp_path, emulator):
    with redfish_stack.running(tmp_path, emulator) as parts:
        yield parts


def test_gpu_lease_composes_the_block_into_the_hosts_system(stack):
    h, api, url, emu = stack
    devices = _inventory(api, url)
    gpu0 = devices[redfish_emulator.BLOCKS + '/GPU0']
    assert gpu0['state'] == states.DEVICE_AVAILABLE
    member = api.as_('member')
    made = member.post('/v1/leases', {'name': 'gpu', 'device_count': 1,
                                      'device_uuids': [gpu0['uuid']]})
    assert made.status == 201, made
    uuid = made.json['uuid']
    assert made.json['status'] == states.RESERVED

    bound = api.post('/v1/leases/%s/bind' % uuid, {'host': HOST})
    assert bound.status == 202, bound
    lease = _wait(h, uuid, [states.BOUND, states.BIND_FAILED])
    assert lease.status == states.BOUND, lease.fault
    assert _block(emu, 'GPU0') == ('Composed', 'compute-0')
    assert 'GPU0' in _composed_into(emu, 'compute-0')
    # Redfish knows no host bus address: the locator says how the host
    # finds the function instead.
    [att] = dbapi.attachment_list(harness_mod.admin(), lease.id,
                                  states_=[states.ATT_ATTACHED])
    locator = att.details['locators'][gpu0['uuid']]
    assert (locator['vendor_id'], locator['product_id'],
            locator['serial']) == ('10de', '2330', 'GPU-SN-0000')
    assert locator['pci_address'] is None
    assert locator['fabric_ref'].endswith('/GPU0')

    # A bind repeated by a resumed conductor finds the block composed
    # already: the same answer, nothing new on the fabric.
    driver = fabric_drivers.get_driver('redfish')
    fabric = dbapi.fabric_get(harness_mod.admin(), 'rf').as_dict()
    again = driver.bind_device(fabric, {'address': gpu0['address']},
                               {'name': HOST})
    # The attachment holds the locator's primitive.
    assert again.to_primitive() == locator

    unbound = api.post('/v1/leases/%s/unbind' % uuid)
    assert unbound.status == 202, unbound
    assert _wait(h, uuid, [states.RESERVED, states.ERROR]).status == \
        states.RESERVED
    assert _block(emu, 'GPU0') == ('Unused', None)
    assert 'GPU0' not in _composed_into(emu, 'compute-0')

    api.post('/v1/leases/%s/bind' % uuid, {'host': HOST})
    assert _wait(h, uuid, [states.BOUND, states.BIND_FAILED]).status == \
        states.BOUND
    deleted = member.delete('/v1/leases/%s' % uuid)
    assert deleted.status in (202, 204), deleted
    assert _wait(h, uuid, [states.RELEASED, states.ERROR]).status == \
        states.RELEASED
    assert _block(emu, 'GPU0') == ('Unused', None)
    row = api.get('/v1/devices/%s' % gpu0['uuid']).json
    assert row['state'] == states.DEVICE_AVAILABLE


def test_a_block_outside_the_hosts_zones_fails_the_bind_and_stays_unused(
        stack):
    h, api, url, emu = stack
    devices = _inventory(api, url)
    # GPU1 is in zone 2 only; compute-0's system is in zone 1.
    gpu1 = devices[redfish_emulator.BLOCKS + '/GPU1']
    made = api.as_('member').post('/v1/leases', {
        'device_count': 1, 'device_uuids': [gpu1['uuid']]})
    uuid = made.json['uuid']
    # The device the lease asked for is one the host cannot reach: the
    # bind is refused at once (409), before the fabric is asked.
    resp = api.post('/v1/leases/%s/bind' % uuid, {'host': HOST})
    assert resp.status == 409, resp
    assert 'redfish-secret' not in str(resp.json)
    assert _block(emu, 'GPU1') == ('Unused', None)
    api.as_('member').delete('/v1/leases/%s' % uuid)
    assert _wait(h, uuid, [states.RELEASED, states.ERROR]).status == \
        states.RELEASED


def test_a_block_that_fails_to_compose_fails_the_bind_with_its_message(
        stack):
    h, api, url, emu = stack
    devices = _inventory(api, url)
    gpu0 = devices[redfish_emulator.BLOCKS + '/GPU0']
    emu.set_block_fault('GPU0', 'fail')
    made = api.as_('member').post('/v1/leases', {
        'device_count': 1, 'device_uuids': [gpu0['uuid']]})
    uuid = made.json['uuid']
    api.post('/v1/leases/%s/bind' % uuid, {'host': HOST})
    lease = _wait(h, uuid, [states.BOUND, states.BIND_FAILED])
    assert lease.status == states.BIND_FAILED
    assert 'PCIe link training failed' in lease.fault
    # The failed bind was undone: the block is not left in the system.
    assert 'GPU0' not in _composed_into(emu, 'compute-0')


def test_misconfigured_fabric_is_refused_with_the_key_named(stack):
    h, api, url, emu = stack
    bad = api.post('/v1/fabrics', {
        'name': 'rf-bad', 'driver': 'redfish',
        'driver_info': _driver_info(url, poll_interval='soon')})
    assert bad.status == 400, bad
    assert 'poll_interval' in bad.error['detail']
    assert 'redfish-secret' not in bad.text
    assert api.get('/v1/fabrics/rf-bad').status == 404


def test_a_lease_on_a_service_that_composes_whole_systems(stack_on):
    """Specific composition: the bind composes the host's system again
    with the block, the sync finds the lease's device on the host's new
    system, and the unbind composes it again without the block."""
    h, api, url, emu = stack_on('specific')
    uuid0 = redfish_emulator.DEFAULT_CONFIG['systems'][0]['uuid']
    devices = _inventory(api, url, system_map={HOST: uuid0})
    gpu0 = devices[redfish_emulator.BLOCKS + '/GPU0']
    made = api.as_('member').post('/v1/leases', {
        'device_count': 1, 'device_uuids': [gpu0['uuid']]})
    assert made.status == 201, made
    uuid = made.json['uuid']
    api.post('/v1/leases/%s/bind' % uuid, {'host': HOST})
    lease = _wait(h, uuid, [states.BOUND, states.BIND_FAILED])
    assert lease.status == states.BOUND, lease.fault
    state, system = _block(emu, 'GPU0')
    assert state == 'Composed' and system != 'compute-0'
    assert sorted(_composed_into(emu, system)) == ['GPU0',
                                                   'compute-0-Compute']
    # The sync finds the device bound to the lease's host.
    fabric = dbapi.fabric_get(harness_mod.admin(), 'rf')
    summary = fabric_sync.FabricSync('cond-0').sync(harness_mod.admin(),
                                                    fabric)
    assert not summary['bound_outside'], summary
    assert api.get('/v1/devices/%s' % gpu0['uuid']).json['state'] == \
        states.DEVICE_ATTACHED
    api.post('/v1/leases/%s/unbind' % uuid)
    assert _wait(h, uuid, [states.RESERVED, states.ERROR]).status == \
        states.RESERVED
    assert _block(emu, 'GPU0') == ('Unused', None)
