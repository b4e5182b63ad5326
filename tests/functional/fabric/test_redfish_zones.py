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

"""The redfish driver on a fabric manager that zones endpoints
(/redfish/v1/Fabrics/{id} with Zones, Endpoints and Connections): what it
finds, binds by a PATCH of the host zone's Links.Endpoints (or a
Connection), and the faults of the other modes -- ETag storms, task
monitors, timeouts, a bind undone after the conductor stopped waiting,
one unreadable resource."""

import threading

import pytest

from composable.common import exception
from composable.common import states
from composable.conductor import fabric_sync
from composable.db import api as dbapi
from composable.fabric.redfish import driver as redfish_driver
from tests.functional.fabric import redfish_emulator as emu
from tests.functional.fabric import redfish_rows
from tests.functional.fabric import redfish_stack
from tests.unit.conductor import harness as harness_mod
from tests import waiting

PASSWORD = emu.DEFAULT_CONFIG['password']
_device = redfish_rows.device_row
ENDPOINTS = emu.FABRICS + '/CXL/Endpoints/'
ZONES = emu.FABRICS + '/CXL/Zones/'
GPU0 = ENDPOINTS + 'T-GPU0'
GPU1 = ENDPOINTS + 'T-GPU1'
NIC0 = ENDPOINTS + 'T-NIC0'
CXL0 = ENDPOINTS + 'T-CXL0'
SWITCH = ENDPOINTS + 'Switch'
HOST0 = {'name': 'compute-0'}
HOST1 = {'name': 'compute-1'}


def _fabric(url, **info):
    return redfish_rows.fabric_row(url, name='cxl', **info)


def _given(emulator):
    with emulator.locked() as state:
        return {sid: list(devices)
                for sid, devices in state.fabric['given'].items()}


def _changes(emulator):
    return [(r['method'], r['path']) for r in emulator.requests
            if r['method'] in ('PATCH', 'POST', 'DELETE')
            and r['path'].startswith(emu.FABRICS)]


def _found(driver, url, **info):
    return {d['address']: d for d in driver.discover(_fabric(url, **info))}


# ------------------------------------------------------------ discovery

def test_discovery_walks_endpoints_to_their_devices(profile, driver):
    url, emulator = profile('zones')
    found = _found(driver, url)
    assert sorted(found) == sorted([SWITCH, GPU0, GPU1, NIC0, CXL0])
    gpu = found[GPU0]
    # Ids from the PCIe function the endpoint leads to, model and serial
    # from its device.
    assert (gpu['kind'], gpu['vendor_id'], gpu['product_id'], gpu['model'],
            gpu['serial']) == ('gpu', '10de', '2330', 'H100 80GB',
                               'GPU-SN-0000')
    nic = found[NIC0]
    assert (nic['kind'], nic['vendor_id'], nic['product_id'],
            nic['serial']) == ('nic', '15b3', '101d', 'NIC-SN-0000')
    # Reachability: what each host's zone may be given.
    assert found[GPU0]['hosts'] == ['compute-0']
    assert found[GPU1]['hosts'] == ['compute-1']
    assert found[NIC0]['hosts'] == ['compute-0', 'compute-1']
    for address in (GPU0, GPU1, NIC0):
        assert 'not_poolable' not in found[address]
        assert found[address]['bound_to'] is None
    assert 'CXL memory is pooled by a cxl memory pool' in \
        found[CXL0]['not_poolable']
    assert 'part of the fabric' in found[SWITCH]['not_poolable']
    # The switch is in every host's zone, yet given to none.
    assert found[SWITCH]['bound_to'] is None
    # Initiators are hosts, not devices.
    assert not [a for a in found if '/I-' in a]
    assert _changes(emulator) == []


def test_a_host_with_two_zones_gets_a_device_in_the_one_that_allows_it(
        profile, driver):
    config = dict(emu.PROFILES['zones'])
    # compute-0's first zone (sorted first) may be given GPU0 only, its
    # second zone the NIC only.
    config['fabric'] = dict(config['fabric'],
                            reach={'compute-0': ['GPU0'],
                                   'compute-1': ['GPU1', 'NIC0']},
                            more_zones={'compute-0': ['NIC0']})
    url, emulator = profile(config)
    fabric = _fabric(url)
    found = _found(driver, url)
    assert found[NIC0]['hosts'] == ['compute-0', 'compute-1']
    driver.bind_device(fabric, _device(NIC0), HOST0)
    driver.bind_device(fabric, _device(GPU0), HOST0)
    with emulator.locked() as state:
        assert state.fabric['given_more'] == {'compute-0': ['NIC0']}
        assert state.fabric['given']['compute-0'] == ['GPU0']
    assert [path for method, path in _changes(emulator)] == [
        ZONES + 'Y-compute-0', ZONES + 'Z-compute-0']
    found = _found(driver, url)
    assert found[NIC0]['bound_to'] == 'compute-0'
    assert found[GPU0]['bound_to'] == 'compute-0'
    # Binding it again changes nothing; unbinding takes it out of the
    # zone that holds it.
    driver.bind_device(fabric, _device(NIC0), HOST0)
    driver.unbind_device(fabric, _device(NIC0), HOST0)
    with emulator.locked() as state:
        assert state.fabric['given_more'] == {'compute-0': []}
        assert state.fabric['given']['compute-0'] == ['GPU0']
    assert _changes(emulator)[-1] == ('PATCH', ZONES + 'Y-compute-0')
    assert _found(driver, url)[NIC0]['bound_to'] is None


@pytest.mark.parametrize('name,config,binds', [
    ('zones', {}, 'PATCH'),
    ('zones-actions', {}, 'zone action'),
    ('zones-connections', {}, 'connection'),
    ('zones-created', {}, 'new zone'),
])
def test_describe_service_tells_the_fabric_and_how_binds_go(
        profile, driver, name, config, binds):
    url, emulator = profile(name)
    found = driver.describe_service(_fabric(url))
    assert found['mode'] == 'zones'
    assert found['fabric']['id'] == 'CXL'
    assert found['fabric']['uri'] == emu.FABRICS + '/CXL'
    assert found['fabric']['type'] == 'CXL'
    assert found['fabrics'] == [{
        'id': 'CXL', 'uri': emu.FABRICS + '/CXL', 'name': 'CXL fabric',
        'type': 'CXL', 'zoned': True,
        'connections': name != 'zones-created'}]
    # A switch, two initiators, two GPUs, a NIC and a CXL memory device.
    assert (found['endpoints'], found['initiators']) == (7, 2)
    assert found['zones'] == {'zones': 2, 'zones-actions': 2,
                              'zones-connections': 1,
                              'zones-created': 0}[name]
    assert found['connections'] == (None if name == 'zones-created'
                                    else 0)
    assert found['unreadable'] == {}
    assert found['binds'] == {emu.SYSTEMS + '/compute-0': binds,
                              emu.SYSTEMS + '/compute-1': binds}
    assert _changes(emulator) == []


def test_describe_service_names_what_could_not_be_read(profile, driver):
    url, emulator = profile('zones')
    emulator.inject('status', method='GET', path=ZONES + 'Z-compute-1',
                    count=100, code=500)
    found = driver.describe_service(_fabric(url))
    assert list(found['unreadable']) == [ZONES + 'Z-compute-1']
    assert 'HTTP 500' in found['unreadable'][ZONES + 'Z-compute-1']
    # Without its zone compute-1 would get a zone made for it.
    assert found['binds'][emu.SYSTEMS + '/compute-0'] == 'PATCH'


def test_auto_mode_picks_zones_only_where_nothing_is_composed(
        profile, emulator, driver):
    url, _ = profile('zones')
    assert driver.discover(_fabric(url, composition_mode='auto'))
    url, expandable = emulator
    found = _found(driver, url)
    assert emu.BLOCKS + '/GPU0' in found
    assert not [r for r in expandable.requests
                if r['path'].startswith(emu.FABRICS)]


# ------------------------------------------------------- bind, unbind

def test_bind_puts_the_endpoint_into_the_hosts_zone(profile, driver):
    url, emulator = profile('zones')
    fabric = _fabric(url)
    locator = driver.bind_device(fabric, _device(GPU0), HOST0)
    assert locator.to_primitive() == {
        'vendor_id': '10de', 'product_id': '2330',
        'serial': 'GPU-SN-0000', 'pci_address': None,
        'fabric_ref': GPU0}
    assert _given(emulator) == {'compute-0': ['GPU0'], 'compute-1': []}
    [patch] = [r for r in emulator.requests if r['method'] == 'PATCH']
    assert patch['path'] == ZONES + 'Z-compute-0'
    assert patch['headers'].get('if-match')
    assert {'@odata.id': GPU0} in patch['body']['Links']['Endpoints']
    # The host's initiator stays in its zone.
    assert {'@odata.id': ENDPOINTS + 'I-compute-0'} in \
        patch['body']['Links']['Endpoints']
    found = _found(driver, url)
    assert found[GPU0]['bound_to'] == 'compute-0'
    assert found[GPU0]['holders'] == ['compute-0']
    assert found[NIC0]['bound_to'] is None
    # A bind repeated (a resumed conductor) changes nothing.
    assert driver.bind_device(fabric, _device(GPU0), HOST0) == locator
    assert len(_changes(emulator)) == 1
    driver.unbind_device(fabric, _device(GPU0), HOST0)
    assert _given(emulator) == {'compute-0': [], 'compute-1': []}
    assert _found(driver, url)[GPU0]['bound_to'] is None
    # Unbinding what is not bound succeeds without a request.
    driver.unbind_device(fabric, _device(GPU0), HOST0)
    assert len(_changes(emulator)) == 2


def test_zone_actions_where_the_zone_offers_them(profile, driver):
    """Zones whose Links.Endpoints are read-only (DSP0268) and that offer
    Zone.AddEndpoint and Zone.RemoveEndpoint."""
    url, emulator = profile('zones-actions')
    fabric = _fabric(url)
    driver.bind_device(fabric, _device(GPU0), HOST0)
    assert _given(emulator)['compute-0'] == ['GPU0']
    [post] = [r for r in emulator.requests if r['method'] == 'POST'
              and '/Zones/' in r['path']]
    assert post['path'] == ZONES + 'Z-compute-0/Actions/Zone.AddEndpoint'
    assert post['body']['Endpoint'] == {'@odata.id': GPU0}
    assert post['body']['ZoneETag'] == post['headers']['if-match']
    assert post['body']['EndpointETag']
    assert not [r for r in emulator.requests if r['method'] == 'PATCH']
    assert _found(driver, url)[GPU0]['bound_to'] == 'compute-0'
    # A zone changed meanwhile: the action again with the fresh ETags.
    emulator.inject('412', method='POST', path='Zone.AddEndpoint', count=2)
    driver.bind_device(fabric, _device(NIC0), HOST0)
    assert _given(emulator)['compute-0'] == ['GPU0', 'NIC0']
    driver.unbind_device(fabric, _device(GPU0), HOST0)
    assert _given(emulator)['compute-0'] == ['NIC0']
    assert [r['path'].rsplit('/', 1)[-1] for r in emulator.requests
            if r['method'] == 'POST' and '/Zones/' in r['path']] == [
        'Zone.AddEndpoint'] * 4 + ['Zone.RemoveEndpoint']


def test_a_device_no_zone_of_the_host_may_hold_is_refused(profile, driver):
    url, emulator = profile('zones')
    with pytest.raises(exception.DriverError) as err:
        driver.bind_device(_fabric(url), _device(GPU0), HOST1)
    assert 'in no zone that system' in str(err.value)
    assert 'compute-1' in str(err.value)
    # One given to another host is not taken from it.
    driver.bind_device(_fabric(url), _device(NIC0), HOST0)
    with pytest.raises(exception.DriverError) as err:
        driver.bind_device(_fabric(url), _device(NIC0), HOST1)
    assert 'given to system %s/compute-0' % emu.SYSTEMS in str(err.value)
    assert _given(emulator) == {'compute-0': ['NIC0'], 'compute-1': []}


@pytest.mark.parametrize('address,says', [
    (CXL0, 'CXL memory is pooled by a cxl memory pool'),
    (SWITCH, 'part of the fabric'),
    (ENDPOINTS + 'I-compute-1', 'initiator of a host'),
    (ENDPOINTS + 'T-GPU7', 'HTTP 404'),
    (emu.BLOCKS + '/GPU0', 'not an endpoint of fabric')])
def test_what_no_host_can_be_given_is_not_bound(profile, driver, address,
                                                says):
    url, emulator = profile('zones')
    with pytest.raises(exception.DriverError) as err:
        driver.bind_device(_fabric(url), _device(address), HOST0)
    assert says in str(err.value)
    assert _changes(emulator) == []


def test_a_fabric_of_connections_binds_by_a_connection(profile, driver):
    url, emulator = profile('zones-connections')
    found = _found(driver, url)
    # One zone of every endpoint: every host reaches every device.
    assert found[GPU0]['hosts'] == ['compute-0', 'compute-1']
    locator = driver.bind_device(_fabric(url), _device(GPU0), HOST1)
    assert locator.fabric_ref == GPU0
    with emulator.locked() as state:
        assert list(state.fabric['connections'].values()) == [
            ('compute-1', 'GPU0')]
    [post] = [r for r in emulator.requests if r['method'] == 'POST'
              and r['path'].startswith(emu.FABRICS)]
    assert post['body']['Links'] == {
        'InitiatorEndpoints': [{'@odata.id': ENDPOINTS + 'I-compute-1'}],
        'TargetEndpoints': [{'@odata.id': GPU0}]}
    assert _found(driver, url)[GPU0]['bound_to'] == 'compute-1'
    with pytest.raises(exception.DriverError):
        driver.bind_device(_fabric(url), _device(GPU0), HOST0)
    driver.unbind_device(_fabric(url), _device(GPU0), HOST1)
    with emulator.locked() as state:
        assert state.fabric['connections'] == {}
    deletes = [r for r in emulator.requests if r['method'] == 'DELETE'
               and r['path'].startswith(emu.FABRICS)]
    assert len(deletes) == 1 and deletes[0]['headers'].get('if-match')


def test_a_fabric_without_host_zones_or_connections_gets_a_zone_made(
        profile, driver):
    url, emulator = profile('zones-created')
    found = _found(driver, url)
    # The service says nothing of reach: every host on the fabric.
    assert found[GPU0]['hosts'] == ['compute-0', 'compute-1']
    driver.bind_device(_fabric(url), _device(GPU0), HOST1)
    with emulator.locked() as state:
        assert list(state.fabric['created'].values()) == [
            ('compute-1', 'GPU0')]
    [post] = [r for r in emulator.requests if r['method'] == 'POST'
              and r['path'] == ZONES.rstrip('/')]
    assert post['body']['Links']['Endpoints'] == [
        {'@odata.id': ENDPOINTS + 'I-compute-1'}, {'@odata.id': GPU0}]
    assert _found(driver, url)[GPU0]['bound_to'] == 'compute-1'
    # The zone's endpoints cannot change: it is deleted.
    driver.unbind_device(_fabric(url), _device(GPU0), HOST1)
    with emulator.locked() as state:
        assert state.fabric['created'] == {}
    assert [m for m, _ in _changes(emulator)] == ['POST', 'PATCH',
                                                  'DELETE']
    assert _found(driver, url)[GPU0]['bound_to'] is None


# --------------------------------------------------------------- faults

def test_an_etag_storm_shorter_than_the_retries_is_ridden_out(
        profile, driver):
    url, emulator = profile('zones')
    emulator.inject('412', method='PATCH', path=ZONES + 'Z-compute-0',
                    count=3)
    driver.bind_device(_fabric(url), _device(GPU0), HOST0)
    patches = [r for r in emulator.requests if r['method'] == 'PATCH']
    assert len(patches) == 4
    assert all(r['headers'].get('if-match') for r in patches)
    # Each try carried the ETag the zone had just then.
    assert len(set(r['headers']['if-match'] for r in patches)) == 4
    assert _given(emulator)['compute-0'] == ['GPU0']


def test_an_endless_etag_storm_fails_clearly_and_changes_nothing(
        profile, driver):
    url, emulator = profile('zones')
    emulator.inject('412', method='PATCH', path=ZONES + 'Z-compute-0',
                    count=100)
    with pytest.raises(exception.DriverError) as err:
        driver.bind_device(_fabric(url), _device(GPU0), HOST0)
    message = str(err.value)
    assert 'HTTP 412' in message and 'try again later' in message
    assert ZONES + 'Z-compute-0' in message
    assert PASSWORD not in message
    assert len([r for r in emulator.requests
                if r['method'] == 'PATCH']) == \
        redfish_driver.PRECONDITION_RETRIES + 1
    assert _given(emulator)['compute-0'] == []


def test_task_monitors_are_followed(profile, driver):
    url, emulator = profile(dict(emu.PROFILES['zones'], task_polls=2))
    driver.bind_device(_fabric(url), _device(NIC0), HOST1)
    assert _given(emulator)['compute-1'] == ['NIC0']
    driver.unbind_device(_fabric(url), _device(NIC0), HOST1)
    assert _given(emulator)['compute-1'] == []
    monitors = [r for r in emulator.requests
                if r['path'].startswith(emu.MONITORS)]
    # Two 202 and the final answer, for the bind and for the unbind.
    assert len(monitors) == 6


def test_a_task_that_does_not_end_in_time_is_undone_after(profile,
                                                          driver):
    url, emulator = profile('zones')

    slowed = []

    def endless(record):
        # Only the bind's PATCH: its task runs on and on.
        if record['method'] == 'PATCH' and not slowed:
            slowed.append(record)
            emulator.task_polls = 100000

    emulator.observe(endless)
    with pytest.raises(exception.DriverError) as err:
        driver.bind_device(_fabric(url, timeout=1), _device(GPU0), HOST0)
    assert 'did not finish within' in str(err.value)
    # The service did it; the conductor's undo takes it back.
    emulator.task_polls = 0
    driver.unbind_device(_fabric(url), _device(GPU0), HOST0)
    assert _given(emulator)['compute-0'] == []


def test_a_request_is_bounded_by_the_operation_timeout(profile, driver):
    from composable import conf
    url, emulator = profile('zones')
    # Every try (the HTTP layer tries a timed-out request again) is
    # slower than the operation may take.
    emulator.inject('delay', method='PATCH', path=ZONES, seconds=6,
                    count=5)
    conf.CONF.set_override('operation_timeout', 2, 'fabric')
    try:
        with pytest.raises(exception.DriverError) as err:
            # HTTP Basic: the emulator checks a request's credentials
            # after the delay, when the driver's session is long closed.
            driver.bind_device(_fabric(url, auth_type='basic'),
                               _device(GPU0), HOST0)
    finally:
        conf.CONF.clear_override('operation_timeout', 'fabric')
    assert 'did not answer in time' in str(err.value)
    # The PATCH lands late; the undo removes it.
    waiting.wait_until(lambda: _given(emulator)['compute-0'] == ['GPU0'],
                       60, 'the late PATCH to land')
    driver.unbind_device(_fabric(url), _device(GPU0), HOST0)
    assert _given(emulator)['compute-0'] == []


def test_a_bind_the_conductor_stopped_waiting_for_is_undone(profile,
                                                            driver):
    """The bind goes on in its thread; the unbind that undoes it waits
    for it and takes the endpoint out after it landed."""
    url, emulator = profile('zones')
    sent = threading.Event()
    emulator.observe(lambda record: sent.set()
                     if record['method'] == 'PATCH' else None)
    emulator.inject('delay', method='PATCH', path=ZONES, seconds=1.5)
    binder = threading.Thread(target=driver.bind_device,
                              args=(_fabric(url), _device(GPU0), HOST0))
    binder.start()
    assert sent.wait(30)
    driver.unbind_device(_fabric(url), _device(GPU0), HOST0)
    binder.join(30)
    assert not binder.is_alive()
    assert _given(emulator)['compute-0'] == []
    methods = [m for m, _ in _changes(emulator)]
    assert methods == ['PATCH', 'PATCH']


def test_two_binds_into_one_zone_at_once_both_land(profile, driver):
    """Two devices bound to one host at the same time: the second PATCH
    changes the zone under the first, whose If-Match then fails (412); it
    is sent again on the zone as it is now, so neither is lost."""
    url, emulator = profile('zones')
    sent = threading.Event()
    emulator.observe(lambda record: sent.set()
                     if record['method'] == 'PATCH' else None)
    emulator.inject('delay', method='PATCH', path=ZONES, seconds=1)
    first = threading.Thread(target=driver.bind_device,
                             args=(_fabric(url), _device(GPU0), HOST0))
    first.start()
    assert sent.wait(30)
    driver.bind_device(_fabric(url), _device(NIC0), HOST0)
    first.join(30)
    assert not first.is_alive()
    assert _given(emulator)['compute-0'] == ['GPU0', 'NIC0']
    statuses = [r.get('status') for r in emulator.requests
                if r['method'] == 'PATCH']
    assert statuses.count(412) == 1 and statuses.count(204) == 2
    found = _found(driver, url)
    assert found[GPU0]['bound_to'] == found[NIC0]['bound_to'] == \
        'compute-0'


# ------------------------------------------------------ errors stay local

def test_one_unreadable_endpoint_zone_or_entity_is_only_that_device(
        profile, driver):
    url, emulator = profile('zones')
    driver.bind_device(_fabric(url), _device(GPU1), HOST1)
    emulator.inject('status', method='GET', path=NIC0, code=404)
    emulator.inject('status', method='GET', path=ZONES + 'Z-compute-1',
                    code=404)
    emulator.inject('garbage', method='GET',
                    path=emu.POOL + '/PCIeDevices/GPU0/PCIeFunctions/0')
    found = _found(driver, url)
    assert 'HTTP 404' in found[NIC0]['error']
    # GPU1 is in the zone that could not be read: who holds it is not
    # known this round.
    assert 'Z-compute-1' in found[GPU1]['error']
    assert 'not JSON' in found[GPU0]['error']
    for address in (NIC0, GPU1, GPU0):
        assert found[address]['bound_to'] is None
    # The rest is synced as usual.
    assert 'error' not in found[CXL0] and 'error' not in found[SWITCH]
    assert found[CXL0]['not_poolable']
    found = _found(driver, url)
    assert found[GPU1]['bound_to'] == 'compute-1'
    assert not [d for d in found.values() if d.get('error')]


# ------------------------------------------------------------ bad input

@pytest.mark.parametrize('info,key', [
    ({'fabric_id': 'PCIe'}, 'fabric_id'),
    ({'fabric_id': '/redfish/v1/Fabrics/Nope'}, 'fabric_id'),
    ({'fabric_id': ''}, 'fabric_id'),
    ({'fabric_id': 'CXL', 'composition_mode': 'specific'}, 'fabric_id'),
    ({'composition_mode': 'zone'}, 'composition_mode'),
])
def test_a_bad_fabric_id_or_mode_is_refused_naming_the_key(
        profile, driver, info, key):
    url, emulator = profile('zones')
    with pytest.raises(exception.Invalid) as err:
        driver.validate_driver_info(_fabric(url, **info)['driver_info'])
    assert key in str(err.value)
    assert PASSWORD not in str(err.value)
    assert _changes(emulator) == []


def test_zones_asked_of_a_service_without_fabrics_is_refused(
        emulator, driver):
    url, _ = emulator
    with pytest.raises(exception.Invalid) as err:
        driver.validate_driver_info(
            _fabric(url, composition_mode='zones')['driver_info'])
    assert 'composition_mode' in str(err.value)
    assert 'no Fabrics' in str(err.value)


def test_a_good_fabric_id_by_id_or_odata_id(profile, driver):
    url, emulator = profile('zones')
    for ref in ('CXL', emu.FABRICS + '/CXL'):
        info = _fabric(url, fabric_id=ref, composition_mode='zones')
        driver.validate_driver_info(info['driver_info'])
        assert GPU0 in {d['address'] for d in driver.discover(info)}


# ------------------------------------------------------- through the API

def test_a_lease_end_to_end_on_a_zoned_fabric(stack_on):
    h, api, url, emulator = stack_on('zones')
    bad = api.post('/v1/fabrics', {
        'name': 'rf-bad', 'driver': 'redfish',
        'driver_info': redfish_stack.driver_info(url, fabric_id='PCIe')})
    assert bad.status == 400, bad
    assert 'fabric_id' in bad.error['detail']
    assert PASSWORD not in bad.text
    assert api.get('/v1/fabrics/rf-bad').status == 404

    devices = redfish_stack.inventory(api, url)
    gpu0 = devices[GPU0]
    assert gpu0['state'] == states.DEVICE_AVAILABLE
    made = api.as_('member').post('/v1/leases', {
        'device_count': 1, 'device_uuids': [gpu0['uuid']]})
    assert made.status == 201, made
    uuid = made.json['uuid']
    bound = api.post('/v1/leases/%s/bind' % uuid,
                     {'host': redfish_stack.HOST})
    assert bound.status == 202, bound
    lease = redfish_stack.wait(h, uuid, [states.BOUND, states.BIND_FAILED])
    assert lease.status == states.BOUND, lease.fault
    assert _given(emulator)['compute-0'] == ['GPU0']
    [att] = dbapi.attachment_list(harness_mod.admin(), lease.id,
                                  states_=[states.ATT_ATTACHED])
    locator = att.details['locators'][gpu0['uuid']]
    assert (locator['vendor_id'], locator['product_id'],
            locator['fabric_ref']) == ('10de', '2330', GPU0)
    # The sync finds the device in the host's zone: the lease's.
    fabric = dbapi.fabric_get(harness_mod.admin(), 'rf')
    summary = fabric_sync.FabricSync('cond-0').sync(harness_mod.admin(),
                                                    fabric)
    assert not summary['bound_outside'], summary
    assert api.get('/v1/devices/%s' % gpu0['uuid']).json['state'] == \
        states.DEVICE_ATTACHED
    deleted = api.as_('member').delete('/v1/leases/%s' % uuid)
    assert deleted.status in (202, 204), deleted
    assert redfish_stack.wait(h, uuid, [states.RELEASED,
                                        states.ERROR]).status == \
        states.RELEASED
    assert _given(emulator)['compute-0'] == []
    assert api.get('/v1/devices/%s' % gpu0['uuid']).json['state'] == \
        states.DEVICE_AVAILABLE
