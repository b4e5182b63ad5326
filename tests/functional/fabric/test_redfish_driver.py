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

"""The redfish fabric driver's contract, over HTTP against the emulator."""

import logging
import socket
import threading

import pytest

from composable.common import exception
from composable.fabric.redfish import driver as redfish_driver
from tests.functional.fabric import redfish_emulator as emu
from tests.functional.fabric import redfish_rows

PASSWORD = emu.DEFAULT_CONFIG['password']
_fabric = redfish_rows.fabric_row
_device = redfish_rows.device_row
GPU0 = emu.BLOCKS + '/GPU0'
GPU1 = emu.BLOCKS + '/GPU1'
NVME0 = emu.BLOCKS + '/NVMe0'
SYSTEM0 = emu.SYSTEMS + '/compute-0'
SYSTEM1 = emu.SYSTEMS + '/compute-1'
HOST0 = {'name': 'compute-0', 'uuid': 'aaaaaaaa-0000-0000-0000-000000000000'}
HOST1 = {'name': 'compute-1', 'uuid': 'aaaaaaaa-0000-0000-0000-000000000001'}


def _actions(emulator, name=None):
    return [r for r in emulator.actions()
            if name is None or r['path'].endswith(name)]


def _assert_secret_free(text):
    assert PASSWORD not in text


# ------------------------------------------------------------ discovery

def test_discover_lists_device_blocks(emulator, driver):
    url, emulator_ = emulator
    found = {d['address']: d for d in driver.discover(_fabric(url))}
    assert sorted(found) == sorted(
        emu.BLOCKS + '/' + b for b in ('GPU0', 'GPU1', 'NIC0', 'NVMe0'))
    assert found[GPU0] == {
        'address': GPU0, 'kind': 'gpu', 'model': 'H100 80GB',
        'vendor_id': '10de', 'product_id': '2330', 'serial': 'GPU-SN-0000',
        'health': 'ok', 'state': 'Unused',
        'hosts': ['compute-0', 'compute-1'], 'bound_to': None,
        'holders': []}
    # GPU1 is in zone 2 only, which only compute-1 shares.
    assert found[GPU1]['hosts'] == ['compute-1']
    assert found[NVME0]['kind'] == 'nvme'
    assert found[NVME0]['vendor_id'] == '144d'
    nic = found[emu.BLOCKS + '/NIC0']
    assert (nic['kind'], nic['vendor_id'], nic['product_id'],
            nic['health']) == ('nic', '15b3', '101d', 'warning')


def test_discover_shows_binding_and_system_map_names(emulator, driver):
    url, _ = emulator
    driver.bind_device(_fabric(url), _device(GPU0), HOST0)
    fabric = _fabric(url, system_map={'node-a.example': SYSTEM0})
    found = {d['address']: d for d in driver.discover(fabric)}
    assert found[GPU0]['bound_to'] == 'node-a.example'
    assert found[GPU0]['state'] == 'Composed'
    assert found[GPU0]['hosts'] == ['compute-1', 'node-a.example']


# ------------------------------------------------------- bind / unbind

def test_bind_composes_the_block_into_the_host_system(emulator, driver):
    url, emulator_ = emulator
    locator = driver.bind_device(_fabric(url), _device(GPU0), HOST0)
    assert locator.to_primitive() == {
        'vendor_id': '10de', 'product_id': '2330',
        'serial': 'GPU-SN-0000', 'pci_address': None,
        'fabric_ref': GPU0}
    with emulator_.locked() as state:
        assert 'GPU0' in state.systems['compute-0']['blocks']
        assert state.blocks['GPU0']['system'] == 'compute-0'
        assert state.blocks['GPU0']['state'] == 'Composed'
    add = _actions(emulator_, emu.ADD)
    assert len(add) == 1
    assert add[0]['path'] == SYSTEM0 + '/Actions/' + emu.ADD
    assert add[0]['body'] == {'ResourceBlock': {'@odata.id': GPU0}}


def test_bind_again_is_idempotent(emulator, driver):
    url, emulator_ = emulator
    first = driver.bind_device(_fabric(url), _device(GPU0), HOST0)
    again = driver.bind_device(_fabric(url), _device(GPU0), HOST0)
    assert again == first
    assert len(_actions(emulator_, emu.ADD)) == 1


def test_bind_waits_for_a_composition_under_way(emulator, driver):
    url, emulator_ = emulator
    emulator_.compose_delay = 0.5
    driver.bind_device(_fabric(url), _device(GPU0), HOST0)
    with emulator_.locked() as state:
        state.blocks['GPU0']['state'] = 'Composing'
        state.blocks['GPU0']['pending'] = (0, 'Composed')
    driver.bind_device(_fabric(url), _device(GPU0), HOST0)
    assert len(_actions(emulator_, emu.ADD)) == 1


def test_bind_matches_hosts_by_uuid_and_system_map(emulator, driver):
    url, emulator_ = emulator
    host = {'name': 'not-a-system-name',
            'uuid': '0C4A8A3C-59F3-4A6E-9F0B-2B7D1C1F0A01'}
    driver.bind_device(_fabric(url, match_by='uuid'), _device(NVME0), host)
    assert _actions(emulator_, emu.ADD)[-1]['path'].startswith(SYSTEM1)
    fabric = _fabric(url, system_map={'other': SYSTEM0})
    driver.bind_device(fabric, _device(GPU0), {'name': 'other'})
    assert _actions(emulator_, emu.ADD)[-1]['path'].startswith(SYSTEM0)


def test_bind_of_an_unknown_host_says_how_to_map_it(emulator, driver):
    url, _ = emulator
    with pytest.raises(exception.DriverError) as err:
        driver.bind_device(_fabric(url), _device(GPU0),
                           {'name': 'compute-9'})
    assert 'compute-9' in str(err.value)
    assert 'system_map' in str(err.value)


def test_bind_to_another_host_is_refused(emulator, driver):
    url, emulator_ = emulator
    driver.bind_device(_fabric(url), _device(GPU0), HOST0)
    with pytest.raises(exception.DriverError) as err:
        driver.bind_device(_fabric(url), _device(GPU0), HOST1)
    message = str(err.value)
    assert GPU0 in message and SYSTEM0 in message and SYSTEM1 in message
    _assert_secret_free(message)
    assert url not in message
    assert len(_actions(emulator_, emu.ADD)) == 1


def test_a_service_without_zones_binds_anywhere(driver):
    config = dict(emu.DEFAULT_CONFIG, zones=[], systems=[
        dict(s, zones=[]) for s in emu.DEFAULT_CONFIG['systems']], blocks=[
        dict(b, zones=[]) for b in emu.DEFAULT_CONFIG['blocks']])
    url, stop, emulator_ = emu.serve(config=config)
    try:
        found = {d['address']: d for d in driver.discover(_fabric(url))}
        # It tells nothing of reachability: every host.
        assert found[GPU1]['hosts'] is None
        driver.bind_device(_fabric(url), _device(GPU1), HOST0)
        assert len(_actions(emulator_, emu.ADD)) == 1
    finally:
        stop()


def test_bind_without_a_shared_zone_is_refused(emulator, driver):
    url, emulator_ = emulator
    with pytest.raises(exception.DriverError) as err:
        driver.bind_device(_fabric(url), _device(GPU1), HOST0)
    assert 'shares no resource zone' in str(err.value)
    assert GPU1 in str(err.value)
    assert _actions(emulator_) == []
    # A block of zones 1 and 2 in the system does not put the system in
    # zone 2.
    driver.bind_device(_fabric(url), _device(emu.BLOCKS + '/NIC0'), HOST0)
    with pytest.raises(exception.DriverError):
        driver.bind_device(_fabric(url), _device(GPU1), HOST0)
    assert len(_actions(emulator_)) == 1


def test_unbind_returns_the_block_to_the_pool(emulator, driver):
    url, emulator_ = emulator
    driver.bind_device(_fabric(url), _device(GPU0), HOST0)
    driver.unbind_device(_fabric(url), _device(GPU0), HOST0)
    with emulator_.locked() as state:
        assert 'GPU0' not in state.systems['compute-0']['blocks']
        assert state.blocks['GPU0']['system'] is None
        assert state.blocks['GPU0']['state'] == 'Unused'
    remove = _actions(emulator_, emu.REMOVE)
    assert [r['path'] for r in remove] == [SYSTEM0 + '/Actions/' +
                                           emu.REMOVE]
    # Again, and without a host: nothing to do.
    driver.unbind_device(_fabric(url), _device(GPU0), HOST0)
    driver.unbind_device(_fabric(url), _device(GPU0), None)
    assert len(_actions(emulator_, emu.REMOVE)) == 1


def test_unbind_leaves_another_hosts_block_alone(emulator, driver):
    url, emulator_ = emulator
    driver.bind_device(_fabric(url), _device(NVME0), HOST1)
    driver.unbind_device(_fabric(url), _device(NVME0), HOST0)
    assert _actions(emulator_, emu.REMOVE) == []
    driver.unbind_device(_fabric(url), _device(NVME0), None)
    with emulator_.locked() as state:
        assert state.blocks['NVMe0']['state'] == 'Unused'


def _block_state(emulator_, block_id):
    with emulator_.locked() as state:
        block = state.blocks[block_id]
        return block['state'], block.get('system')


def test_bind_unbind_bind_again(emulator, driver):
    url, emulator_ = emulator
    block_id = NVME0.rsplit('/', 1)[-1]
    for host in (HOST0, HOST1, HOST0):
        driver.bind_device(_fabric(url), _device(NVME0), host)
        assert _block_state(emulator_, block_id) == ('Composed',
                                                     host['name'])
        driver.unbind_device(_fabric(url), _device(NVME0), host)
        assert _block_state(emulator_, block_id) == ('Unused', None)


def test_an_unbind_waits_for_a_bind_still_running(emulator, driver):
    """A bind the conductor stopped waiting for goes on in its thread;
    the unbind that undoes it must come after it, or the late
    AddResourceBlock would leave the block composed."""
    url, emulator_ = emulator
    sent = threading.Event()
    emulator_.observe(lambda record: sent.set()
                      if record['path'].endswith(emu.ADD) else None)
    emulator_.inject('delay', method='POST', path=emu.ADD, seconds=1.5)
    binder = threading.Thread(target=driver.bind_device,
                              args=(_fabric(url), _device(GPU0), HOST0))
    binder.start()
    assert sent.wait(30)
    driver.unbind_device(_fabric(url), _device(GPU0), HOST0)
    binder.join(30)
    assert not binder.is_alive()
    assert _block_state(emulator_, 'GPU0') == ('Unused', None)


# ------------------------------------------------------------ ETags

def _assert_fresh_etags(emulator_, action):
    """Every action carried If-Match, each the system's ETag as served by
    the GET just before it."""
    records = emulator_.requests
    posts = [i for i, r in enumerate(records)
             if r['method'] == 'POST' and r['path'].endswith(action)]
    assert posts
    for i in posts:
        sent = records[i]['headers'].get('if-match')
        assert sent, 'an action without If-Match'
        system = records[i]['path'].split('/Actions/')[0]
        before = [r for r in records[:i]
                  if r['method'] == 'GET' and r['path'] == system]
        assert before[-1]['etag'] == sent
    return [records[i]['headers']['if-match'] for i in posts]


def test_412_is_retried_with_the_fresh_etag(emulator, driver):
    url, emulator_ = emulator
    emulator_.inject('412', method='POST', path=emu.ADD, count=2)
    driver.bind_device(_fabric(url), _device(GPU0), HOST0)
    sent = _assert_fresh_etags(emulator_, emu.ADD)
    assert len(sent) == 3
    assert len(set(sent)) == 3

    emulator_.inject('412', method='POST', path=emu.REMOVE, count=1)
    driver.unbind_device(_fabric(url), _device(GPU0), HOST0)
    sent = _assert_fresh_etags(emulator_, emu.REMOVE)
    assert len(sent) == 2 and len(set(sent)) == 2
    with emulator_.locked() as state:
        assert state.blocks['GPU0']['state'] == 'Unused'


def test_412_without_end_gives_up(emulator, driver):
    url, emulator_ = emulator
    emulator_.inject('412', method='POST', path=emu.ADD, count=100)
    with pytest.raises(exception.DriverError) as err:
        driver.bind_device(_fabric(url), _device(GPU0), HOST0)
    assert '412' in str(err.value)
    assert len(_actions(emulator_, emu.ADD)) == (
        redfish_driver.PRECONDITION_RETRIES + 1)
    _assert_fresh_etags(emulator_, emu.ADD)


def test_stale_etag_is_refused_by_the_service(emulator, driver):
    # The emulator itself checks If-Match, so the driver's ETags are the
    # ones the service holds.
    url, emulator_ = emulator
    emulator_.observe(lambda r: r['headers'].update({'if-match': '"old"'})
                      if r['method'] == 'POST' and '/Actions/' in r['path']
                      else None)
    with pytest.raises(exception.DriverError) as err:
        driver.bind_device(_fabric(url), _device(GPU0), HOST0)
    assert '412' in str(err.value)


# ------------------------------------------------- tasks and failures

def test_task_monitor_is_followed(emulator, driver):
    url, emulator_ = emulator
    emulator_.task_polls = 2
    driver.bind_device(_fabric(url), _device(GPU0), HOST0)
    driver.unbind_device(_fabric(url), _device(GPU0), HOST0)
    monitors = [r for r in emulator_.requests
                if r['path'].startswith(emu.MONITORS)]
    # Two answers 202 and the final one, for each action.
    assert len(monitors) == 6
    assert all(r['headers'].get('x-auth-token') for r in monitors)
    with emulator_.locked() as state:
        assert state.monitors == {}
        assert state.blocks['GPU0']['state'] == 'Unused'


def test_failed_composition_reports_the_fabric_message(emulator, driver):
    url, emulator_ = emulator
    emulator_.set_block_fault('GPU0', 'fail', 'retimer 3 lost the link')
    with pytest.raises(exception.DriverError) as err:
        driver.bind_device(_fabric(url), _device(GPU0), HOST0)
    assert 'retimer 3 lost the link' in str(err.value)
    assert GPU0 in str(err.value)
    # Cleaning up a failed composition works.
    driver.unbind_device(_fabric(url), _device(GPU0), HOST0)
    with emulator_.locked() as state:
        assert state.blocks['GPU0']['system'] is None


def test_block_stuck_composing_times_out(emulator, driver):
    url, emulator_ = emulator
    emulator_.set_block_fault('GPU0', 'stuck')
    with pytest.raises(exception.DriverError) as err:
        driver.bind_device(_fabric(url, timeout=0.5), _device(GPU0), HOST0)
    assert 'still Composing' in str(err.value)
    assert GPU0 in str(err.value)


# ------------------------------------------------------------ sessions

def test_expired_session_logs_in_again(emulator, driver):
    url, emulator_ = emulator
    state = {'expired': False}

    def expire_once(record):
        if (not state['expired'] and record['method'] == 'GET'
                and record['path'] == SYSTEM0):
            state['expired'] = True
            emulator_.expire_sessions()

    emulator_.observe(expire_once)
    driver.bind_device(_fabric(url), _device(GPU0), HOST0)
    logins = [r for r in emulator_.requests
              if r['method'] == 'POST' and r['path'] == emu.SESSIONS]
    assert state['expired'] and len(logins) == 2


def test_sessions_are_closed(emulator, driver):
    url, emulator_ = emulator
    driver.discover(_fabric(url))
    driver.bind_device(_fabric(url), _device(GPU0), HOST0)
    assert emulator_.sessions == {}


def test_wrong_password_is_reported_without_it(emulator, driver):
    url, _ = emulator
    with pytest.raises(exception.DriverError) as err:
        driver.discover(_fabric(url, password='not-the-password-42'))
    assert 'username and password' in str(err.value)
    assert 'not-the-password-42' not in str(err.value)


def test_credentials_never_logged(emulator, driver, caplog):
    url, emulator_ = emulator
    tokens = []
    emulator_.observe(lambda r: tokens.append(r['headers']['x-auth-token'])
                      if 'x-auth-token' in r['headers'] else None)
    caplog.set_level(logging.DEBUG)
    driver.bind_device(_fabric(url), _device(GPU0), HOST0)
    driver.unbind_device(_fabric(url), _device(GPU0), HOST0)
    with pytest.raises(exception.DriverError):
        driver.discover(_fabric(url, password='wrong-secret-77'))
    assert tokens
    text = caplog.text
    assert 'HTTP request' in text  # sushy's DEBUG lines were captured
    assert PASSWORD not in text and 'wrong-secret-77' not in text
    for token in set(tokens):
        assert token not in text


# -------------------------------------------------------------- faults

def test_transient_5xx_on_reads_is_retried(emulator, driver):
    url, emulator_ = emulator
    emulator_.inject('status', method='GET', path='/ResourceBlocks/GPU0',
                     code=503)
    driver.bind_device(_fabric(url), _device(GPU0), HOST0)
    # The 503 was answered (and used up), and the bind went on.
    assert emulator_.faults == []
    assert _block_state(emulator_, 'GPU0') == ('Composed', 'compute-0')


def test_5xx_on_an_action_is_reported(emulator, driver):
    url, emulator_ = emulator
    emulator_.inject('status', method='POST', path=emu.ADD, code=500,
                     count=10)
    with pytest.raises(exception.DriverError) as err:
        driver.bind_device(_fabric(url), _device(GPU0), HOST0)
    assert 'HTTP 500' in str(err.value)
    assert url in str(err.value)
    assert emu.ADD in str(err.value)


def test_slow_service_times_out(emulator, driver):
    url, emulator_ = emulator
    emulator_.inject('delay', method='GET', path='/ResourceBlocks/GPU0',
                     seconds=2.5, count=10)
    with pytest.raises(exception.DriverError) as err:
        driver.bind_device(_fabric(url, timeout=1), _device(GPU0), HOST0)
    assert 'did not answer in time' in str(err.value)
    assert url in str(err.value)


def test_dropped_connection_is_retried(emulator, driver):
    url, emulator_ = emulator
    emulator_.inject('drop', method='GET', path='/Systems/compute-0')
    driver.bind_device(_fabric(url), _device(GPU0), HOST0)
    assert emulator_.faults == []
    assert _block_state(emulator_, 'GPU0') == ('Composed', 'compute-0')


def test_dropped_connections_are_reported(emulator, driver):
    url, emulator_ = emulator
    emulator_.inject('drop', method='GET', path=emu.BLOCKS, count=100)
    with pytest.raises(exception.DriverError) as err:
        driver.discover(_fabric(url))
    assert 'could not be reached' in str(err.value)


@pytest.mark.parametrize('body', [
    None,  # not JSON
    {'@odata.id': GPU0, 'Name': 'no composition status'},
    {'@odata.id': GPU0, 'ResourceBlockType': ['Processor'],
     'CompositionStatus': {'CompositionState': 'Unused'},
     'Links': {'ComputerSystems': 'not links'}},
    ['not', 'an', 'object'],
])
def test_garbage_answers_are_reported(emulator, driver, body):
    url, emulator_ = emulator
    emulator_.inject('garbage', method='GET', path='/ResourceBlocks/GPU0',
                     body=body)
    with pytest.raises(exception.DriverError) as err:
        driver.bind_device(_fabric(url), _device(GPU0), HOST0)
    assert GPU0 in str(err.value)
    assert url in str(err.value)
    assert _actions(emulator_) == []


def test_garbage_collection_is_reported(emulator, driver):
    url, emulator_ = emulator
    emulator_.inject('garbage', method='GET', path=emu.SYSTEMS,
                     body={'Links': {'Members': []}})
    with pytest.raises(exception.DriverError) as err:
        driver.bind_device(_fabric(url), _device(GPU0), HOST0)
    assert 'Members' in str(err.value)


def test_unreachable_address(driver):
    sock = socket.socket()
    sock.bind(('127.0.0.1', 0))
    port = sock.getsockname()[1]
    sock.close()
    url = 'http://127.0.0.1:%d' % port
    with pytest.raises(exception.DriverError) as err:
        driver.bind_device(_fabric(url), _device(GPU0), HOST0)
    assert url in str(err.value)
    assert 'could not be reached' in str(err.value)
    _assert_secret_free(str(err.value))


def test_missing_ca_bundle(emulator, driver):
    url, _ = emulator
    address = url.replace('http://', 'https://')
    with pytest.raises(exception.DriverError) as err:
        driver.discover(_fabric(address, verify_ca='/nonexistent/ca.pem'))
    assert address in str(err.value)
    assert 'verify_ca' in str(err.value)


def test_https_to_a_plain_http_service(emulator, driver):
    url, _ = emulator
    address = url.replace('http://', 'https://')
    with pytest.raises(exception.DriverError) as err:
        driver.discover(_fabric(address))
    assert address in str(err.value)


# ------------------------------------------------- errors stay local

def test_one_unreadable_block_leaves_the_rest_of_the_fabric(emulator,
                                                            driver):
    url, emulator_ = emulator

    def remove_gpu1(record):
        # GPU1 vanishes after the listing, when GPU0 is read.
        if record['method'] == 'GET' and record['path'] == GPU0:
            with emulator_.locked() as state:
                state.blocks.pop('GPU1', None)

    emulator_.observe(remove_gpu1)
    # The NVMe block answers garbage once (its own read).
    emulator_.inject('garbage', method='GET', path=NVME0, count=1)
    found = {d['address']: d for d in driver.discover(_fabric(url))}
    assert sorted(found) == sorted([GPU0, GPU1, NVME0,
                                    emu.BLOCKS + '/NIC0'])
    assert 'HTTP 404' in found[GPU1]['error']
    assert GPU1 in found[GPU1]['error']
    assert 'not JSON' in found[NVME0]['error']
    for address in (GPU1, NVME0):
        assert found[address]['health'] is None
        assert 'kind' not in found[address]
    # The others are read as usual.
    assert found[GPU0]['vendor_id'] == '10de'
    assert 'error' not in found[GPU0]
    assert found[emu.BLOCKS + '/NIC0']['kind'] == 'nic'


def test_a_malformed_member_or_system_makes_one_device_unknown(emulator,
                                                               driver):
    url, emulator_ = emulator
    driver.bind_device(_fabric(url), _device(GPU1), HOST1)
    # The GPU0 processor is not an object; system compute-1 (which holds
    # GPU1) answers a payload without @odata.id.
    emulator_.inject('garbage', method='GET', path=GPU0 + '/Processors/0',
                     body='[1, 2]', count=1)
    emulator_.inject('garbage', method='GET', path=SYSTEM1, count=1,
                     body='{"Name": "compute-1"}')
    found = {d['address']: d for d in driver.discover(_fabric(url))}
    assert 'not a JSON object' in found[GPU0]['error']
    assert SYSTEM1 in found[GPU1]['error']
    assert 'error' not in found[NVME0]
    assert found[NVME0]['hosts'] == ['compute-0']
