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

"""The redfish driver against the emulator's profiles of real services:
duplicate system names, storage appliances, shared and failed blocks,
HTTP Basic, paged collections."""

import logging

import pytest

from composable.common import exception
from tests.functional.fabric import redfish_emulator as emu
from tests.functional.fabric import redfish_rows

PASSWORD = emu.DEFAULT_CONFIG['password']
_device = redfish_rows.device_row
GPU0 = emu.BLOCKS + '/GPU0'
GPU1 = emu.BLOCKS + '/GPU1'
SLED1 = emu.SYSTEMS + '/Sled-1'
SLED2 = emu.SYSTEMS + '/Sled-2'
SLED3 = emu.SYSTEMS + '/Sled-3'
SLED2_UUID = '7a3e0c1e-0b7e-4b53-9d1e-5d1f6a2f0002'


def _info(url, **more):
    info = {'address': url, 'username': 'admin', 'password': PASSWORD,
            'poll_interval': 0.05, 'timeout': 15}
    info.update(more)
    return info


def _fabric(url, **more):
    return {'name': 'rack1', 'driver_info': _info(url, **more)}


def _added_to(emulator):
    return [r['path'].split('/Actions/')[0] for r in emulator.actions()
            if r['path'].endswith(emu.ADD)]


# ------------------------------------------------------ duplicate names

def test_a_name_two_systems_share_is_refused_naming_both(profile, driver):
    url, emulator = profile('duplicate-names')
    with pytest.raises(exception.DriverError) as err:
        driver.bind_device(_fabric(url), _device(GPU0), {'name': 'sled-5'})
    message = str(err.value)
    assert SLED1 in message and SLED2 in message
    assert SLED3 not in message
    assert 'system_map' in message
    # The chassis' HostName names all three.
    with pytest.raises(exception.DriverError) as err:
        driver.bind_device(_fabric(url), _device(GPU0),
                           {'name': 'chassis-a'})
    assert all(s in str(err.value) for s in (SLED1, SLED2, SLED3))
    assert _added_to(emulator) == []


def test_a_unique_name_binds_and_reads_back_the_same(profile, driver):
    url, emulator = profile('duplicate-names')
    driver.bind_device(_fabric(url), _device(GPU0), {'name': 'sled-3'})
    assert _added_to(emulator) == [SLED3]
    found = {d['address']: d for d in driver.discover(_fabric(url))}
    # The identity it bound by, not the shared HostName.
    assert found[GPU0]['bound_to'] == 'sled-3'
    # Systems with no unique name are reported by their @odata.id.
    assert found[GPU1]['hosts'] == sorted([SLED1, SLED2, 'sled-3'])


@pytest.mark.parametrize('ref', [SLED2, SLED2_UUID, SLED2_UUID.upper()])
def test_system_map_by_odata_id_or_uuid(profile, driver, ref):
    url, emulator = profile('duplicate-names')
    fabric = _fabric(url, system_map={'sled-5': ref})
    driver.validate_driver_info(fabric['driver_info'])
    driver.bind_device(fabric, _device(GPU1), {'name': 'sled-5'})
    assert _added_to(emulator) == [SLED2]
    found = {d['address']: d for d in driver.discover(fabric)}
    assert found[GPU1]['bound_to'] == 'sled-5'
    driver.unbind_device(fabric, _device(GPU1), {'name': 'sled-5'})
    with emulator.locked() as state:
        assert state.blocks['GPU1']['system'] is None


@pytest.mark.parametrize('ref,says', [
    ('Sled-5', [SLED1, SLED2]),
    ('chassis-a', [SLED1, SLED2, SLED3]),
    ('/redfish/v1/Systems/Sled-9', ['does not have', SLED3]),
    ('7a3e0c1e-0b7e-4b53-9d1e-5d1f6a2f0009', ['does not have']),
])
def test_a_bad_system_map_is_refused_when_the_fabric_is_set(
        profile, driver, ref, says):
    url, emulator = profile('duplicate-names')
    info = _info(url, system_map={'node-1': ref})
    with pytest.raises(exception.Invalid) as err:
        driver.validate_driver_info(info)
    message = str(err.value)
    assert 'node-1' in message
    assert all(s in message for s in says), message
    assert PASSWORD not in message
    # A sync with that map keeps going and says why in its log.
    found = driver.discover(_fabric(url, system_map={'node-1': ref}))
    assert all(d['bound_to'] is None for d in found)


def test_system_map_is_accepted_when_the_service_is_down(driver):
    # Nothing listens on port 1: the map is checked at sync and bind.
    driver.validate_driver_info(_info(
        'http://127.0.0.1:1', system_map={'node-1': 'Sled-5'}))


# ----------------------------------------------------- what is pooled

def test_storage_blocks_and_what_cannot_be_pooled(profile, driver):
    url, emulator = profile('storage-appliance')
    found = {d['address'].rsplit('/', 1)[-1]: d
             for d in driver.discover(_fabric(url))}
    assert sorted(found) == ['DIMM0', 'GPU9', 'NVMe0', 'NVMe1', 'SAS0',
                             'VLAN20']
    nvme = found['NVMe0']
    # Storage -> Drives: model and serial from the drive, ids from the
    # storage controller's PCIe function.
    assert (nvme['kind'], nvme['model'], nvme['serial'], nvme['vendor_id'],
            nvme['product_id']) == ('nvme', 'PM9A3 3.84TB',
                                    'S64FNE0R000001', '144d', 'a80a')
    assert 'not_poolable' not in nvme
    assert found['NVMe1']['hosts'] == ['compute-0', 'compute-1']
    assert 'SAS drive' in found['SAS0']['not_poolable']
    assert 'network settings' in found['VLAN20']['not_poolable']
    assert 'memory' in found['DIMM0']['not_poolable']
    assert 'no PCI vendor and device id' in found['GPU9']['not_poolable']
    assert found['GPU9']['kind'] == 'gpu'


@pytest.mark.parametrize('block', ['SAS0', 'VLAN20', 'DIMM0', 'GPU9'])
def test_a_block_no_host_can_be_given_is_not_bound(profile, driver, block):
    url, emulator = profile('storage-appliance')
    with pytest.raises(exception.DriverError) as err:
        driver.bind_device(_fabric(url), _device(emu.BLOCKS + '/' + block),
                           {'name': 'compute-0'})
    assert 'cannot be given to a host' in str(err.value)
    assert emulator.actions() == []


def test_a_storage_block_binds_with_its_drive_as_locator(profile, driver):
    url, emulator = profile('storage-appliance')
    locator = driver.bind_device(_fabric(url),
                                 _device(emu.BLOCKS + '/NVMe0'),
                                 {'name': 'compute-0'})
    assert locator.to_primitive() == {
        'vendor_id': '144d', 'product_id': 'a80a',
        'serial': 'S64FNE0R000001', 'pci_address': None,
        'fabric_ref': emu.BLOCKS + '/NVMe0'}


# -------------------------------------------------- state and sharing

def test_states_reservations_and_sharing(profile, driver):
    url, emulator = profile('states')
    found = {d['address'].rsplit('/', 1)[-1]: d
             for d in driver.discover(_fabric(url))}
    assert 'unavailable' not in found['GPU0']
    assert found['GPU0']['bound_to'] is None
    assert 'failed' in found['GPU-Failed']['unavailable']
    assert found['GPU-Failed']['health'] == 'ok'
    assert 'Unavailable' in found['GPU-Unavailable']['unavailable']
    assert 'reserved' in found['GPU-Reserved']['unavailable']
    assert 'Disabled' in found['GPU-Disabled']['unavailable']
    shared = found['NVMe-Shared']
    assert shared['holders'] == ['compute-0', 'compute-1']
    assert shared['bound_to'] == 'compute-0, compute-1'
    assert found['GPU-Foreign']['bound_to'] == 'render-7'
    # The default NIC's Warning keeps it out of service too.
    assert 'Warning' in found['NIC0']['unavailable']


@pytest.mark.parametrize('block,says', [
    ('GPU-Failed', 'failed'), ('GPU-Unavailable', 'Unavailable'),
    ('GPU-Reserved', 'reserved'), ('GPU-Disabled', 'Disabled'),
    ('NVMe-Shared', 'composed into system'),
    ('GPU-Foreign', 'composed into system')])
def test_blocks_the_service_will_not_give_are_not_bound(profile, driver,
                                                        block, says):
    url, emulator = profile('states')
    host = 'render-7' if block == 'NVMe-Shared' else 'compute-0'
    with pytest.raises(exception.DriverError) as err:
        driver.bind_device(_fabric(url), _device(emu.BLOCKS + '/' + block),
                           {'name': host})
    assert says in str(err.value)
    assert emulator.actions() == []


def test_a_system_that_is_not_expandable_says_so(profile, driver):
    url, emulator = profile('states')
    with pytest.raises(exception.DriverError) as err:
        driver.bind_device(_fabric(url), _device(GPU0), {'name': 'fixed-0'})
    message = str(err.value)
    assert 'not expandable' in message
    assert 'offers only ComputerSystem.Reset' in message
    assert 'HTTP' not in message
    assert emulator.actions() == []


# -------------------------------------------------------------- protocol

def _auth_headers(emulator):
    return [(r['method'], r['path'], 'authorization' in r['headers'],
             'x-auth-token' in r['headers']) for r in emulator.requests]


def test_http_basic_where_there_is_no_session_service(profile, driver):
    url, emulator = profile('no-sessions')
    found = driver.discover(_fabric(url))
    assert len([d for d in found if 'not_poolable' not in d]) == 4
    driver.bind_device(_fabric(url), _device(GPU0), {'name': 'compute-0'})
    seen = _auth_headers(emulator)
    assert not [r for r in seen if 'Sessions' in r[1]]
    # Everything but the service root carries the credentials.
    assert all(r[2] for r in seen if r[1].rstrip('/') != emu.ROOT)
    # Forcing sessions on it fails clearly.
    with pytest.raises(exception.DriverError) as err:
        driver.discover(_fabric(url, auth_type='session'))
    assert 'HTTP 404' in str(err.value) and PASSWORD not in str(err.value)


def test_auth_type_forces_basic_on_a_service_with_sessions(emulator,
                                                           driver):
    url, emulator_ = emulator
    driver.discover(_fabric(url, auth_type='basic'))
    seen = _auth_headers(emulator_)
    assert not [r for r in seen if 'Sessions' in r[1]]
    assert not [r for r in seen if r[3]]


@pytest.mark.parametrize('auth_type', ['session', 'basic'])
def test_one_operation_reads_the_service_root_once_logged_in(emulator,
                                                             driver,
                                                             auth_type):
    # A bind follows several of the root's links (Systems,
    # CompositionService, ...): the service sees one read of the root
    # before the login and one after it, per operation; the next
    # operation reads it again (the service may have changed).
    url, emulator_ = emulator
    fabric = _fabric(url, auth_type=auth_type)

    def root_reads():
        return [(r[2] or r[3]) for r in _auth_headers(emulator_)
                if r[0] == 'GET' and r[1].rstrip('/') == emu.ROOT]

    for operation in (
            lambda: driver.discover(fabric),
            lambda: driver.bind_device(fabric, _device(GPU0),
                                       {'name': 'compute-0'}),
            lambda: driver.unbind_device(fabric, _device(GPU0),
                                         {'name': 'compute-0'})):
        del emulator_.requests[:]
        operation()
        assert root_reads() == [False, True]


@pytest.mark.parametrize('change', [{'auth_type': 'kerberos'},
                                    {'auth_type': ''},
                                    {'mode': 'zones'}])
def test_unknown_auth_type_or_mode_is_refused(driver, change):
    with pytest.raises(exception.Invalid) as err:
        driver.validate_driver_info(_info('http://127.0.0.1:1', **change))
    assert list(change)[0] in str(err.value)


def test_paged_collections_are_read_to_the_end(profile, driver):
    url, emulator = profile('paged')
    found = {d['address']: d for d in driver.discover(_fabric(url))}
    # 4 device blocks and 2 system blocks: three pages of two.
    assert sorted(a.rsplit('/', 1)[-1] for a in found) == [
        'GPU0', 'GPU1', 'NIC0', 'NVMe0']
    assert found[GPU1]['hosts'] == ['compute-1']
    pages = [r['path'] for r in emulator.requests
             if r['path'] == emu.BLOCKS]
    assert len(pages) >= 3


def test_a_collection_whose_pages_loop_is_an_error(emulator, driver):
    url, emulator_ = emulator
    emulator_.inject('garbage', method='GET', path=emu.BLOCKS, count=10,
                     body='{"Members": [], "Members@odata.nextLink": '
                          '"%s"}' % emu.BLOCKS)
    with pytest.raises(exception.DriverError) as err:
        driver.discover(_fabric(url))
    assert 'lead back' in str(err.value)


def test_every_request_is_bounded_by_the_operation_timeout(driver):
    from composable import conf
    conf.CONF.set_override('operation_timeout', 12, 'fabric')
    try:
        conn = driver._connect(driver._info(_fabric('http://127.0.0.1:1',
                                                    timeout=300)))
        assert conn._timeout == 12
        conn.close()
    finally:
        conf.CONF.clear_override('operation_timeout', 'fabric')


def test_expand_only_where_the_service_offers_it(profile, driver):
    url, emulator = profile('expand')
    found = {d['address']: d for d in driver.discover(_fabric(url))}
    assert sorted(a.rsplit('/', 1)[-1] for a in found) == [
        'GPU0', 'GPU1', 'NIC0', 'NVMe0']
    assert found[GPU1]['hosts'] == ['compute-1']
    assert found[GPU0]['vendor_id'] == '10de'
    # The blocks and systems came with their collections' pages.
    gets = [r['path'] for r in emulator.requests if r['method'] == 'GET']
    assert GPU0 not in gets and emu.SYSTEMS + '/compute-0' not in gets
    assert all('$expand=.' in r['query'] for r in emulator.requests
               if r['path'] == emu.BLOCKS)
    # A bind reads what it acts on afresh.
    driver.bind_device(_fabric(url), _device(GPU0), {'name': 'compute-0'})
    with emulator.locked() as state:
        assert state.blocks['GPU0']['state'] == 'Composed'


def test_no_expand_where_the_service_does_not_say_so(emulator, driver):
    url, emulator_ = emulator
    driver.discover(_fabric(url))
    assert not [r for r in emulator_.requests if '$expand' in r['query']]


# ----------------------------------------------------------- assemblies

def _assembly_reads(emulator):
    return [r['path'] for r in emulator.requests
            if r['method'] == 'GET' and r['path'].endswith('/Assembly')]


def test_model_and_serial_come_from_the_assembly(profile, driver, caplog):
    url, emulator = profile('assemblies')
    found = {d['address']: d for d in driver.discover(_fabric(url))}
    gpu = found[GPU0]
    assert (gpu['model'], gpu['serial']) == ('H100 80GB', 'GPU-SN-0000')
    nic = found[emu.BLOCKS + '/NIC0']
    assert (nic['model'], nic['serial']) == ('ConnectX-6 Dx', 'NIC-SN-0000')
    # GPU1 says them itself: no Assembly read for it; one read each for
    # the others, though their Processor and PCIeDevice both link it.
    assert found[GPU1]['serial'] == 'GPU-SN-0001'
    assert sorted(_assembly_reads(emulator)) == [
        emu.POOL + '/PCIeDevices/GPU0/Assembly',
        emu.POOL + '/PCIeDevices/NIC0/Assembly']
    # The compute agent is told the serial the Assembly gave.
    caplog.set_level(logging.INFO)
    locator = driver.bind_device(_fabric(url), _device(GPU0),
                                 {'name': 'compute-0'})
    assert locator.serial == 'GPU-SN-0000'
    assert locator.vendor_id == '10de'
    assert 'device 10de:2330 serial GPU-SN-0000' in caplog.text


def test_an_unreadable_assembly_leaves_model_and_serial_unknown(
        profile, driver, caplog):
    url, emulator = profile('assemblies')
    emulator.inject('status', method='GET', path='GPU0/Assembly', count=100,
                    code=500)
    found = {d['address']: d for d in driver.discover(_fabric(url))}
    gpu = found[GPU0]
    assert 'error' not in gpu and 'not_poolable' not in gpu
    assert (gpu['model'], gpu['serial']) == (None, None)
    assert (gpu['vendor_id'], gpu['product_id']) == ('10de', '2330')
    assert found[emu.BLOCKS + '/NIC0']['serial'] == 'NIC-SN-0000'
    assert 'PCIeDevices/GPU0/Assembly could not be read' in caplog.text
    assert 'HTTP 500' in caplog.text
    # Nor does it stop a bind.
    locator = driver.bind_device(_fabric(url), _device(GPU0),
                                 {'name': 'compute-0'})
    assert locator.serial is None and locator.product_id == '2330'


def test_an_assembly_that_is_not_one_leaves_them_unknown(profile, driver,
                                                         caplog):
    url, emulator = profile('assemblies')
    emulator.inject('garbage', method='GET', path='NIC0/Assembly',
                    count=100, body={'@odata.id': '/x', 'Assemblies': 7})
    found = {d['address']: d for d in driver.discover(_fabric(url))}
    nic = found[emu.BLOCKS + '/NIC0']
    assert 'error' not in nic and nic['serial'] is None
    assert 'no Assemblies array' in caplog.text


def test_zones_mode_reads_the_assembly_of_an_endpoints_device(profile,
                                                              driver):
    config = dict(emu.PROFILES['zones'])
    config['blocks'] = [dict(b, assembly=True) if b['id'] == 'GPU0' else b
                        for b in config['blocks']]
    url, emulator = profile(config)
    found = {d['address']: d for d in driver.discover(_fabric(url))}
    gpu = found[emu.FABRICS + '/CXL/Endpoints/T-GPU0']
    assert (gpu['model'], gpu['serial']) == ('H100 80GB', 'GPU-SN-0000')
    assert _assembly_reads(emulator) == [
        emu.POOL + '/PCIeDevices/GPU0/Assembly']
