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

"""The emulator checked by DMTF's Redfish Service Validator.

The validator needs the DMTF schema files (CSDL, published as DSP8010).
It downloads them from DMTF's site when it can reach it; without network
access, point ``COMPOSABLE_REDFISH_SCHEMAS`` at a directory that holds the
unpacked ``*_v1.xml`` CSDL files. Without schemas the validator can only
walk the service (every resource answers, nothing fails) and the strict
test is skipped, saying why.
"""

import glob
import json
import os
import re
import subprocess
import sys

import pytest
import requests

from tests.functional.fabric import redfish_emulator as emu

SCHEMAS_VAR = 'COMPOSABLE_REDFISH_SCHEMAS'

# Every resource of the default inventory the validator must have visited.
EXPECTED = [
    emu.ROOT + '/', emu.SYSTEMS, emu.SYSTEMS + '/compute-0',
    emu.SYSTEMS + '/compute-1', emu.ROOT + '/CompositionService',
    emu.BLOCKS, emu.ZONES, emu.ZONES + '/1', emu.ZONES + '/2',
    emu.BLOCKS + '/GPU0', emu.BLOCKS + '/GPU0/Processors/0',
    emu.BLOCKS + '/NVMe0/Drives/0', emu.BLOCKS + '/NIC0/NetworkInterfaces/0',
    emu.BLOCKS + '/compute-0-Compute', emu.POOL,
    emu.POOL + '/PCIeDevices/GPU1/PCIeFunctions/0',
    emu.POOL + '/NetworkAdapters/NIC0', emu.ROOT + '/SessionService',
    emu.SESSIONS,
]

_VALIDATOR = ('import sys; '
              'from redfish_service_validator import console_scripts; '
              'sys.argv[0] = "rf_service_validator"; '
              'console_scripts.main()')


def _run_validator(url, tmp_path, schema_dir, skipschema,
                   authtype='Session'):
    config = emu.DEFAULT_CONFIG
    cmd = [sys.executable, '-c', _VALIDATOR, '--rhost', url,
           '--user', config['username'], '--password', config['password'],
           '--authtype', authtype, '--schema_directory', schema_dir,
           '--logdir', str(tmp_path / 'logs'), '--timeout', '30']
    if skipschema:
        cmd.append('--skipschema')
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600,
                          cwd=str(tmp_path))
    out = proc.stdout + proc.stderr
    match = re.search(r'PASS\s*\|\s*WARN\s*\|\s*FAIL\s*\|\s*NOT TESTED\s*\|'
                      r'\s*\n[+-]+\n\|\s*(\d+)\s*\|\s*(\d+)\s*\|\s*(\d+)\s*\|',
                      out)
    assert match, 'no summary in the validator output:\n%s' % out
    passed, warned, failed = (int(g) for g in match.groups())
    visited = set(re.findall(r'^Validating (\S+?)\.\.\.$', out, re.M))
    logs = glob.glob(str(tmp_path / 'logs' / '*' / '*Debug*.log'))
    problems = []
    for log in logs:
        with open(log) as f:
            problems += [line.strip() for line in f
                         if ' - FAIL - ' in line or ' - WARN - ' in line]
    return proc.returncode, passed, warned, failed, visited, problems, out


@pytest.fixture
def validator_run(tmp_path):
    """(url of a running emulator, tmp_path)."""
    url, stop, _ = emu.serve()
    try:
        yield url, tmp_path
    finally:
        stop()


@pytest.mark.parametrize('name', sorted(set(emu.PROFILES) - {'expandable'}))
def test_validator_walks_every_profile(tmp_path, name):
    config = emu.PROFILES[name]
    url, stop, emulator = emu.serve(config=config)
    try:
        if emulator.fabric is not None:
            # A device given to a host, so that the host's zone (or a
            # connection, or a zone made for it) links it.
            with emulator.locked() as state:
                if state.fabric['binding'] == 'connections':
                    state.fabric['connections']['1'] = ('compute-1', 'GPU1')
                elif state.fabric['binding'] == 'create':
                    state.fabric['created']['Z1'] = ('compute-1', 'GPU1')
                else:
                    state.fabric['given']['compute-0'] = ['GPU0']
        empty = tmp_path / 'no-schemas'
        empty.mkdir()
        rc, passed, warned, failed, visited, problems, out = _run_validator(
            url, tmp_path, str(empty), skipschema=True,
            authtype='Basic' if config.get('sessions') is False
            else 'Session')
        with emulator.locked() as state:
            if state.cxl is not None:
                # A CXL fabric manager: endpoints, zones, connections and
                # each device's memory chunks.
                cxl = state.cxl
                blocks = [state._cxl_fabric('Endpoints', e) for e in
                          ['I-' + s for s in cxl['systems']] +
                          ['T-' + d for d in cxl['devices']]]
                blocks += [state._cxl_fabric('Zones', z)
                           for z in cxl['zones']]
                blocks += [state._cxl_fabric('Connections', c)
                           for c in cxl['connections']]
                blocks += [state._cxl_domain(d, 'MemoryChunks', c)
                           for d, dev in cxl['devices'].items()
                           for c in dev['chunks']]
            elif state.fabric is None:
                blocks = [emu.BLOCKS + '/' + b for b in state.blocks]
            else:
                # A fabric manager: its endpoints, zones, connections.
                blocks = [state._fabric_uri('Endpoints', e)
                          for e in state._endpoint_ids()]
                blocks += [state._fabric_uri('Zones', z)
                           for z in state._zone_ids()]
                blocks += [state._fabric_uri('Connections', c)
                           for c in state.fabric['connections']]
            systems = [emu.SYSTEMS + '/' + s for s in state.systems]
    finally:
        stop()
    assert rc == 0, out
    assert failed == 0, '\n'.join(problems)
    missing = [uri for uri in blocks + systems if uri not in visited]
    assert not missing, 'not visited: %s\n%s' % (missing, out)
    others = [p for p in problems if 'Schema Error' not in p]
    assert not others, '\n'.join(others)


def _schemas():
    """A directory with the DMTF CSDL files, or None."""
    path = os.environ.get(SCHEMAS_VAR)
    if path and glob.glob(os.path.join(path, 'ResourceBlock_v1.xml')):
        return path
    return None


def test_validator_walks_the_whole_service(validator_run):
    url, tmp_path = validator_run
    empty = tmp_path / 'no-schemas'
    empty.mkdir()
    rc, passed, warned, failed, visited, problems, out = _run_validator(
        url, tmp_path, str(empty), skipschema=True)
    assert rc == 0, out
    assert failed == 0, '\n'.join(problems)
    missing = [uri for uri in EXPECTED if uri not in visited]
    assert not missing, 'not visited: %s\n%s' % (missing, out)
    # Without schemas a resource can only be reported as not checked.
    others = [p for p in problems if 'Schema Error' not in p]
    assert not others, '\n'.join(others)


def test_validator_finds_no_error_against_dsp8010(validator_run):
    url, tmp_path = validator_run
    schema_dir = _schemas()
    rc, passed, warned, failed, visited, problems, out = _run_validator(
        url, tmp_path, schema_dir or str(tmp_path / 'schemas'),
        skipschema=schema_dir is not None)
    if schema_dir is None and passed == 0:
        pytest.skip('the DMTF schema files (DSP8010) could not be '
                    'downloaded; set %s to a directory of the unpacked '
                    'CSDL files' % SCHEMAS_VAR)
    assert rc == 0, out
    assert (failed, warned) == (0, 0), '\n'.join(problems)
    missing = [uri for uri in EXPECTED if uri not in visited]
    assert not missing, 'not visited: %s' % missing
    # Each of the ~40 resources checks several properties.
    assert passed > 300, out


# ----------------------------------------------- the emulator's own rules

def _login(url, session=None):
    session = session or requests.Session()
    config = emu.DEFAULT_CONFIG
    answer = session.post(url + emu.SESSIONS, json={
        'UserName': config['username'], 'Password': config['password']})
    assert answer.status_code == 201
    session.headers['X-Auth-Token'] = answer.headers['X-Auth-Token']
    return session, answer.headers['Location']


def test_sessions_etags_and_if_match(emulator):
    url, emulator_ = emulator
    assert requests.get(url + emu.SYSTEMS).status_code == 401
    assert requests.post(url + emu.SESSIONS, json={
        'UserName': 'admin', 'Password': 'wrong'}).status_code == 401
    http, location = _login(url)
    system = http.get(url + emu.SYSTEMS + '/compute-0')
    etag = system.headers['ETag']
    assert http.get(url + emu.SYSTEMS + '/compute-0').headers['ETag'] == etag
    target = system.json()['Actions']['#' + emu.ADD]['target']
    block = {'ResourceBlock': {'@odata.id': emu.BLOCKS + '/GPU0'}}
    stale = http.post(url + target, json=block,
                      headers={'If-Match': '"stale"'})
    assert stale.status_code == 412
    assert http.post(url + target, json=block,
                     headers={'If-Match': etag}).status_code == 204
    system = http.get(url + emu.SYSTEMS + '/compute-0')
    assert system.headers['ETag'] != etag
    assert {'@odata.id': emu.BLOCKS + '/GPU0'} in (
        system.json()['Links']['ResourceBlocks'])
    gpu = http.get(url + emu.BLOCKS + '/GPU0').json()
    assert gpu['CompositionStatus']['CompositionState'] == 'Composing'
    assert gpu['Links']['ComputerSystems'] == [
        {'@odata.id': emu.SYSTEMS + '/compute-0'}]
    # Once only: the block is in use now.
    assert http.post(url + target, json=block).status_code == 400
    assert http.delete(url + location).status_code == 204
    assert http.get(url + emu.SYSTEMS).status_code == 401


def test_session_expiry(emulator):
    url, emulator_ = emulator
    http, _ = _login(url)
    assert http.get(url + emu.BLOCKS).status_code == 200
    emulator_.expire_sessions()
    assert http.get(url + emu.BLOCKS).status_code == 401


def test_standalone_with_a_config_file(tmp_path):
    config = {'username': 'u', 'password': 'p', 'compose_delay': 0,
              'zones': [{'id': 'z'}],
              'systems': [{'id': 'node-1', 'uuid': 'u-1', 'zones': ['z']}],
              'blocks': [{'id': 'FPGA0', 'kind': 'fpga', 'zones': ['z'],
                          'vendor_id': '0x1d0f', 'device_id': 'f010'}]}
    path = tmp_path / 'inventory.json'
    path.write_text(json.dumps(config))
    proc = subprocess.Popen(
        [sys.executable, '-m', 'tests.functional.fabric.redfish_emulator',
         '--port', '0', '--config', str(path)],
        stdout=subprocess.PIPE, text=True,
        cwd=os.path.dirname(os.path.dirname(os.path.dirname(
            os.path.dirname(os.path.abspath(__file__))))))
    try:
        line = proc.stdout.readline()
        root = re.search(r'(http://\S+)/redfish/v1', line).group(1)
        blocks = requests.get(root + emu.BLOCKS)
        assert blocks.status_code == 401
        http = requests.Session()
        token = http.post(root + emu.SESSIONS, json={
            'UserName': 'u', 'Password': 'p'}).headers['X-Auth-Token']
        http.headers['X-Auth-Token'] = token
        function = http.get(root + emu.POOL +
                            '/PCIeDevices/FPGA0/PCIeFunctions/0').json()
        assert (function['VendorId'], function['DeviceId']) == (
            '0x1D0F', '0xF010')
    finally:
        proc.terminate()
        proc.wait(10)
