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

"""The cxl driver's redfish back end on the emulator's CXL fabric manager
(profile ``cxl``): the memory devices it finds, chunks made and connected
to a host's port and taken back, two binds racing for the last capacity,
refusals, task monitors, ETag changes, a timeout, and credentials kept
out of the logs."""

import copy
import logging
import threading

import pytest

from composable.common import exception
from composable import conf
from composable.fabric import cxl
from tests.functional.fabric import redfish_emulator as emu
from tests.functional.fabric import redfish_rows
from tests import waiting

PASSWORD = emu.DEFAULT_CONFIG['password']
HOST0 = {'name': 'compute-0'}
HOST1 = {'name': 'compute-1'}
MEM0 = 'CXLMem0.1'
MEM1 = 'CXLMem1.1'
CHUNKS0 = emu.CHASSIS + '/CXLMem0/MemoryDomains/1/MemoryChunks'
CONNECTIONS = emu.FABRICS + '/CXL/Connections'


@pytest.fixture
def driver():
    return cxl.CxlFabricDriver()


def _fabric(url, **info):
    row = redfish_rows.fabric_row(url, name='cxl-rf', backend='redfish',
                                  **info)
    return row


def _state(emulator):
    return emulator.cxl_state()


def _posts(emulator, path):
    return [r for r in emulator.requests
            if r['method'] == 'POST' and r['path'].rstrip('/') == path]


# ------------------------------------------------------------- settings

@pytest.mark.parametrize('info, key', [
    ({'backend': 'redfish'}, 'driver_info/address'),
    ({'backend': 'redfish', 'address': 'ftp://fm', 'username': 'u',
      'password': 'p'}, 'driver_info/address'),
    ({'backend': 'redfish', 'address': 'https://fm', 'username': 'u'},
     'driver_info/password'),
    ({'backend': 'redfish', 'address': 'https://fm', 'username': 'u',
      'password': 'p', 'chunk_mode': 'some'}, 'driver_info/chunk_mode'),
    ({'backend': 'redfish', 'address': 'https://fm', 'username': 'u',
      'password': 'p', 'timeout': -1}, 'driver_info/timeout'),
    ({'backend': 'redfish', 'address': 'https://fm', 'username': 'u',
      'password': 'p', 'devices': {}}, 'driver_info/devices'),
])
def test_driver_info_errors_name_the_key(driver, info, key):
    with pytest.raises(exception.Invalid) as err:
        driver.validate_driver_info(info)
    assert "Invalid input for field '%s'" % key in str(err.value)
    assert err.value.code == 400
    assert "'p'" not in str(err.value)


def test_good_driver_info_is_accepted(driver):
    driver.validate_driver_info({
        'backend': 'redfish', 'address': 'https://fm.example.net',
        'username': 'u', 'password': 'p', 'fabric_id': 'CXL',
        'system_map': {'compute-0': '/redfish/v1/Systems/Host1'},
        'match_by': 'uuid', 'timeout': '30', 'verify_ca': 'false',
        'chunk_mode': 'create'})


# ------------------------------------------------------------ discovery

def test_discovery_reports_capacity_free_chunks_serial_and_reach(profile,
                                                                 driver):
    url, emulator = profile('cxl')
    found = {d['name']: d for d in driver.discover_memory(_fabric(url))}
    assert sorted(found) == [MEM0, MEM1]
    mem0, mem1 = found[MEM0], found[MEM1]
    # The GCXLID's eight bytes, as the host's kernel prints the serial.
    assert mem0['serial'] == '0x4c1d96fffeddd835'
    assert mem1['serial'] == '0x4c1d96fffeddd836'
    assert (mem0['capacity_mb'], mem0['free_chunks']) == (2048, 8)
    # 512 MiB of CXLMem1 are someone else's chunk and connection: not
    # the pool's to lend, not free.
    assert (mem1['capacity_mb'], mem1['free_chunks']) == (1536, 6)
    assert mem0['hosts'] == ['compute-0', 'compute-1']
    assert mem1['hosts'] == ['compute-1']
    # Reading changes nothing.
    assert not [r for r in emulator.requests if r['method'] != 'GET'
                and 'Sessions' not in r['path']]


# ---------------------------------------------------------- bind/unbind

def test_bind_makes_a_chunk_and_a_memory_connection_unbind_removes_them(
        profile, driver):
    url, emulator = profile('cxl')
    fabric = _fabric(url)
    locator = driver.bind_memory(fabric, MEM0, HOST0, 512, 'lease-a')
    assert locator['serial'] == '0x4c1d96fffeddd835'
    assert locator['device'] == MEM0 and locator['size_mb'] == 512
    chunks, connections = _state(emulator)
    [chunk] = chunks['CXLMem0'].items()
    assert chunk[1] == 512
    assert locator['chunk'] == CHUNKS0 + '/' + chunk[0]
    made = [c for c in connections.values() if c[0] == 'compute-0']
    assert made == [('compute-0', 'CXLMem0', chunk[0])]
    [post] = _posts(emulator, CONNECTIONS)
    body = post['body']
    assert body['ConnectionType'] == 'Memory'
    assert body['MemoryChunkInfo'] == [{
        'AccessCapabilities': ['Read', 'Write'],
        'MemoryChunk': {'@odata.id': locator['chunk']}}]
    assert body['Links']['InitiatorEndpoints'] == [
        {'@odata.id': emu.FABRICS + '/CXL/Endpoints/I-compute-0'}]
    # Asked again (a resumed bind): the same, nothing new made.
    assert driver.bind_memory(fabric, MEM0, HOST0, 512,
                              'lease-a') == locator
    assert len(_posts(emulator, CONNECTIONS)) == 1
    assert len(_posts(emulator, CHUNKS0)) == 1
    # The chunk counts as used now.
    found = {d['name']: d for d in driver.discover_memory(fabric)}
    assert found[MEM0]['free_chunks'] == 6
    assert found[MEM0]['capacity_mb'] == 2048

    driver.unbind_memory(fabric, MEM0, HOST0, 'lease-a', locator)
    chunks, connections = _state(emulator)
    assert chunks['CXLMem0'] == {}
    assert sorted(connections) == ['12']
    deletes = [r for r in emulator.requests if r['method'] == 'DELETE'
               and 'Sessions' not in r['path']]
    # The connection first, then its chunk, each with its ETag.
    assert [r['path'] for r in deletes] == [locator['connection'],
                                            locator['chunk']]
    assert all(r['headers'].get('if-match') for r in deletes)
    # Already gone: done, nothing asked.
    driver.unbind_memory(fabric, MEM0, HOST0, 'lease-a', locator)
    assert len([r for r in emulator.requests if r['method'] == 'DELETE'
                and 'Sessions' not in r['path']]) == 2


def test_a_host_that_does_not_reach_the_device_is_refused(profile, driver):
    url, emulator = profile('cxl')
    with pytest.raises(exception.DriverError) as err:
        driver.bind_memory(_fabric(url), MEM1, HOST0, 256, 'lease-a')
    assert 'has no port on fabric cxl-rf that reaches CXL memory device ' \
           'CXLMem1.1 (hosts that reach it: compute-1)' in str(err.value)
    assert not _posts(emulator, CONNECTIONS)
    with pytest.raises(exception.DriverError) as err:
        driver.bind_memory(_fabric(url), 'nothing.1', HOST0, 256, 'lease-a')
    assert 'no CXL memory device nothing.1' in str(err.value)
    with pytest.raises(exception.DriverError) as err:
        driver.bind_memory(_fabric(url), MEM0, HOST0, 300, 'lease-a')
    assert 'at least 256 MiB in steps of 256 MiB' in str(err.value)


def test_two_binds_racing_for_the_last_capacity(profile, driver):
    url, emulator = profile('cxl')
    fabric = _fabric(url)
    driver.bind_memory(fabric, MEM0, HOST1, 1536, 'lease-big')
    # Both binds have read 512 MiB free before either asks: the service
    # decides.
    barrier = threading.Barrier(2, timeout=60)

    def together(record):
        if record['method'] == 'POST' and record['path'] == CHUNKS0:
            try:
                barrier.wait()
            except threading.BrokenBarrierError:
                pass

    emulator.observe(together)
    outcome = {}

    def bind(lease, host):
        try:
            outcome[lease] = driver.bind_memory(fabric, MEM0, host, 512,
                                                lease)
        except exception.DriverError as exc:
            outcome[lease] = exc

    threads = [threading.Thread(target=bind, args=('lease-b', HOST0)),
               threading.Thread(target=bind, args=('lease-c', HOST1))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not any(t.is_alive() for t in threads)
    errors = [v for v in outcome.values()
              if isinstance(v, exception.DriverError)]
    won = [k for k, v in outcome.items() if isinstance(v, dict)]
    assert len(errors) == 1 and len(won) == 1, outcome
    assert 'refused to make a chunk of 512 MiB on CXL memory device ' \
           'CXLMem0.1' in str(errors[0])
    assert '0 MiB free' in str(errors[0])
    # Nothing leaked: the big lease's and the winner's chunks only.
    chunks, connections = _state(emulator)
    assert sorted(chunks['CXLMem0'].values()) == [512, 1536]
    assert len([c for c in connections.values()
                if c[1] == 'CXLMem0']) == 2


def test_a_fabric_that_refuses_the_connection_keeps_no_chunk(profile,
                                                             driver):
    url, emulator = profile('cxl')
    fabric = _fabric(url)
    emulator.refuse_cxl('connection', 'Port I-compute-0 is disabled by '
                                      'the fabric administrator.')
    with pytest.raises(exception.DriverError) as err:
        driver.bind_memory(fabric, MEM0, HOST0, 512, 'lease-a')
    assert 'Port I-compute-0 is disabled by the fabric administrator' in \
        str(err.value)
    assert 'connecting 512 MiB of CXL memory device CXLMem0.1 to host ' \
           'compute-0' in str(err.value)
    assert _state(emulator)[0]['CXLMem0'] == {}
    emulator.refuse_cxl('connection', None)
    locator = driver.bind_memory(fabric, MEM0, HOST0, 512, 'lease-a')
    # A refused delete: an error naming what and why; nothing lost.
    emulator.refuse_cxl('delete', 'The memory is in use by the host.')
    with pytest.raises(exception.DriverError) as err:
        driver.unbind_memory(fabric, MEM0, HOST0, 'lease-a', locator)
    assert 'refused to delete connection %s' % locator['connection'] in \
        str(err.value)
    assert 'The memory is in use by the host.' in str(err.value)
    assert locator['chunk'].rsplit('/', 1)[-1] in _state(emulator)[0][
        'CXLMem0']
    emulator.refuse_cxl('delete', None)
    driver.unbind_memory(fabric, MEM0, HOST0, 'lease-a', locator)
    assert _state(emulator)[0]['CXLMem0'] == {}
    # A chunk the service will not make.
    emulator.refuse_cxl('chunk', 'The memory device is being sanitized.')
    with pytest.raises(exception.DriverError) as err:
        driver.bind_memory(fabric, MEM0, HOST0, 512, 'lease-a')
    assert 'refused to make a chunk of 512 MiB' in str(err.value)
    assert 'being sanitized' in str(err.value)


def test_task_monitors_and_etag_changes(profile, driver):
    url, emulator = profile('cxl')
    emulator.task_polls = 2
    fabric = _fabric(url)
    locator = driver.bind_memory(fabric, MEM0, HOST0, 256, 'lease-a')
    assert locator['connection'].startswith(CONNECTIONS + '/')
    monitors = [r for r in emulator.requests
                if r['path'].startswith(emu.MONITORS)]
    assert len(monitors) >= 4
    # Someone changes the connection twice between read and delete.
    emulator.inject('412', method='DELETE', path='/Connections/', count=2)
    driver.unbind_memory(fabric, MEM0, HOST0, 'lease-a', locator)
    assert _state(emulator)[0]['CXLMem0'] == {}
    # Refused twice with 412, read again and sent with the new ETag.
    tries = [r for r in emulator.requests if r['method'] == 'DELETE'
             and r['path'] == locator['connection']]
    assert len(tries) == 3
    assert len({r['headers'].get('if-match') for r in tries}) == 3


def test_existing_chunks_where_the_domain_makes_none(profile, driver):
    config = copy.deepcopy(emu.PROFILES['cxl'])
    config['cxl']['creation'] = False
    config['cxl']['devices'][0]['chunks'] = [
        {'id': '1', 'size_mb': 512}, {'id': '2', 'size_mb': 1024}]
    url, emulator = profile(config)
    fabric = _fabric(url)
    found = {d['name']: d for d in driver.discover_memory(fabric)}
    assert found[MEM0]['capacity_mb'] == 1536
    locator = driver.bind_memory(fabric, MEM0, HOST0, 1024, 'lease-a')
    assert locator['chunk'] == CHUNKS0 + '/2' and not locator['created']
    assert not _posts(emulator, CHUNKS0)
    with pytest.raises(exception.DriverError) as err:
        driver.bind_memory(fabric, MEM0, HOST0, 256, 'lease-b')
    assert 'no unconnected chunk of 256 MiB' in str(err.value)
    driver.unbind_memory(fabric, MEM0, HOST0, 'lease-a', locator)
    # The chunk was the service's: it stays.
    assert _state(emulator)[0]['CXLMem0'] == {'1': 512, '2': 1024}
    assert _state(emulator)[1] == {'12': ('compute-1', 'CXLMem1', '1')}


def test_a_bind_bounded_by_the_operation_timeout_is_undone(profile,
                                                           driver):
    url, emulator = profile('cxl')
    # Every try (the HTTP layer tries a timed-out request again) is
    # slower than the operation may take.
    emulator.inject('delay', method='POST', path=CHUNKS0, seconds=6,
                    count=5)
    conf.CONF.set_override('operation_timeout', 2, 'fabric')
    try:
        with pytest.raises(exception.DriverError) as err:
            driver.bind_memory(_fabric(url, auth_type='basic'), MEM0, HOST0,
                               512, 'lease-a')
    finally:
        conf.CONF.clear_override('operation_timeout', 'fabric')
    assert 'did not answer in time' in str(err.value)
    # The chunk lands late; the unbind that undoes the failed bind takes
    # it (it bears the lease's name).
    waiting.wait_until(lambda: _state(emulator)[0]['CXLMem0'], 60,
                       'the late chunk to land')
    driver.unbind_memory(_fabric(url), MEM0, HOST0, 'lease-a', None)
    assert _state(emulator)[0]['CXLMem0'] == {}


def test_credentials_never_logged(profile, driver, caplog):
    url, emulator = profile('cxl')
    tokens = []
    emulator.observe(lambda r: tokens.append(r['headers']['x-auth-token'])
                     if 'x-auth-token' in r['headers'] else None)
    caplog.set_level(logging.DEBUG)
    fabric = _fabric(url)
    driver.discover_memory(fabric)
    locator = driver.bind_memory(fabric, MEM0, HOST0, 256, 'lease-a')
    driver.unbind_memory(fabric, MEM0, HOST0, 'lease-a', locator)
    with pytest.raises(exception.DriverError) as err:
        driver.discover_memory(_fabric(url, password='wrong-secret-77'))
    assert 'username and password' in str(err.value)
    assert 'wrong-secret-77' not in str(err.value)
    assert tokens
    text = caplog.text
    assert 'HTTP request' in text  # sushy's DEBUG lines were captured
    assert PASSWORD not in text and 'wrong-secret-77' not in text
    for token in set(tokens):
        assert token not in text


def test_an_unreadable_memory_domain_fails_the_discovery(profile, driver):
    # Reported without it, the device would look gone and the sync
    # would take its memory node out of the pool.
    url, emulator = profile('cxl')
    emulator.inject('status', method='GET',
                    path='/CXLMem1/MemoryDomains/1', code=500, count=100)
    with pytest.raises(exception.DriverError) as err:
        driver.discover_memory(_fabric(url))
    assert 'HTTP 500' in str(err.value)
    assert '/CXLMem1/MemoryDomains/1' in str(err.value)


def test_one_lease_bound_twice_at_once_gets_one_chunk(profile, driver):
    # A resumed bind while the first still runs (the conductor stopped
    # waiting for it): the second waits, then finds what the first made.
    url, emulator = profile('cxl')
    fabric = _fabric(url)
    emulator.inject('delay', method='POST', path=CHUNKS0, seconds=1,
                    count=1)
    found = []

    def bind():
        found.append(driver.bind_memory(fabric, MEM0, HOST0, 512,
                                        'lease-a'))

    threads = [threading.Thread(target=bind) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert len(found) == 2 and found[0] == found[1]
    assert len(_posts(emulator, CHUNKS0)) == 1
    assert len(_posts(emulator, CONNECTIONS)) == 1
