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

"""The switchtec driver's driver_info checks, and the commands its
privileged function agrees to run."""

import copy
import json
import os
import stat

import pytest

from composable.common import exception
from composable import conf
from composable.fabric import base
from composable.fabric import switchtec
from composable.fabric.switchtec import driver as switchtec_driver
from composable.privsep import fabric as priv_fabric

CONF = conf.CONF

GFMS = {
    'device': '/dev/switchtec0',
    'hosts': {'compute-1': {'switch_index': 0, 'phys_port': 0,
                            'logical_ports': [1, 2]},
              'compute-2': {'switch_index': 1, 'phys_port': 0,
                            'logical_ports': [0]}},
}
PARTITION = {
    'mode': 'partition', 'device': '10.0.0.5:5000', 'timeout': 12.5,
    'hosts': {'compute-1': {'partition': 0, 'logical_ports': [1]}},
}


def invalid(info):
    with pytest.raises(exception.Invalid) as raised:
        switchtec.SwitchtecFabricDriver().validate_driver_info(info)
    return raised.value.message


def changed(base, path, value):
    info = copy.deepcopy(base)
    target = info
    for key in path[:-1]:
        target = target[key]
    if value is KeyError:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return info


@pytest.mark.parametrize('info', [GFMS, PARTITION])
def test_valid(info):
    switchtec.SwitchtecFabricDriver().validate_driver_info(info)


@pytest.mark.parametrize('base,path,value,named', [
    (GFMS, ['mode'], 'redfish', 'mode'),
    (GFMS, ['device'], KeyError, 'device'),
    (GFMS, ['device'], '-o /etc/passwd', 'device'),
    (GFMS, ['device'], '/dev/switchtec0\n', 'device'),
    (GFMS, ['device'], '/dev/sda', 'device'),
    (GFMS, ['device'], '/tmp/switchtec0', 'device'),
    (GFMS, ['cli'], 'switchtec', 'cli'),
    (GFMS, ['cli'], '/bin/sh', 'cli'),
    (GFMS, ['timeout'], 0, 'timeout'),
    (GFMS, ['timeout'], True, 'timeout'),
    (GFMS, ['timeout'], float('inf'), 'timeout'),
    (GFMS, ['timeout'], float('nan'), 'timeout'),
    (GFMS, ['timeout'], 601, 'timeout'),
    (GFMS, ['timeout'], 1e300, 'timeout'),
    (GFMS, ['hosts'], {}, 'hosts'),
    (GFMS, ['hosts'], KeyError, 'hosts'),
    (GFMS, ['password'], 'x', 'password'),
    (GFMS, ['hosts', 'compute-1'], [], 'hosts.compute-1'),
    (GFMS, ['hosts', 'compute-1', 'switch_index'], KeyError,
     'hosts.compute-1.switch_index'),
    (GFMS, ['hosts', 'compute-1', 'phys_port'], -1,
     'hosts.compute-1.phys_port'),
    (GFMS, ['hosts', 'compute-1', 'logical_ports'], [],
     'hosts.compute-1.logical_ports'),
    (GFMS, ['hosts', 'compute-1', 'logical_ports'], [1, 1],
     'hosts.compute-1.logical_ports'),
    (GFMS, ['hosts', 'compute-1', 'logical_ports'], ['1'],
     'hosts.compute-1.logical_ports'),
    (GFMS, ['hosts', 'compute-1', 'partition'], 0,
     'hosts.compute-1.partition'),
    (GFMS, ['hosts', 'compute-2', 'switch_index'], 0,
     'hosts.compute-2.phys_port'),
    (PARTITION, ['hosts', 'compute-1', 'phys_port'], 3,
     'hosts.compute-1.phys_port'),
    (PARTITION, ['hosts', 'compute-1', 'partition'], KeyError,
     'hosts.compute-1.partition'),
    (PARTITION, ['hosts', 'compute-1', 'logical_ports'], [0],
     'hosts.compute-1.logical_ports'),
])
def test_invalid_names_the_key(base, path, value, named):
    message = invalid(changed(base, path, value))
    assert 'driver_info %s ' % named in message


def test_not_an_object():
    assert 'must be an object' in invalid(['device'])


def test_cli_is_set_in_the_configuration_only():
    message = invalid(dict(GFMS, cli='/tmp/switchtec'))
    assert 'driver_info cli is not a setting' in message
    assert "conductor's configuration ([fabric]switchtec_command)" in \
        message


def test_timeout_is_capped():
    switchtec.SwitchtecFabricDriver().validate_driver_info(
        dict(GFMS, timeout=priv_fabric.MAX_TIMEOUT))
    assert 'at most 600 seconds' in invalid(dict(GFMS, timeout=600.5))


@pytest.mark.parametrize('device', [
    '/dev/switchtec0', '/dev/switchtec12', '0@/dev/switchtec0',
    '/dev/i2c-1@0x20', '/dev/i2c-1:0x20', '0@0x20', '10.0.0.5:5000',
    'pax-mgmt.example.com:0',
])
def test_devices_the_driver_and_privsep_agree_on(device):
    switchtec.SwitchtecFabricDriver().validate_driver_info(
        dict(GFMS, device=device))
    assert priv_fabric.check_argv(['switchtec', 'port-bind-info', device])


@pytest.mark.parametrize('wait', [float('inf'), float('nan'), 0, -1, None])
def test_the_switch_lock_never_waits_forever(wait):
    with pytest.raises(exception.DriverError):
        with switchtec_driver.one_operation('/dev/switchtec9', wait):
            pass


def test_lock_wait_is_finite():
    info = dict(GFMS, timeout=priv_fabric.MAX_TIMEOUT)
    assert switchtec_driver.SwitchtecFabricDriver._lock_wait(info) == max(
        priv_fabric.MAX_TIMEOUT, CONF.fabric.operation_timeout)


@pytest.fixture
def command():
    """[fabric]switchtec_command, set for one test."""
    def set_command(value):
        CONF.set_override('switchtec_command', value, 'fabric')
    yield set_command
    CONF.clear_override('switchtec_command', 'fabric')


@pytest.mark.parametrize('argv', [
    ['switchtec', 'fabric', 'gfms_dump', '/dev/switchtec0', '-t',
     'PAX_ALL'],
    ['switchtec', 'fabric', 'gfms-dump', '/dev/switchtec0', '-t',
     'HVD_DETAIL', '-d', '3'],
    ['switchtec', 'fabric', 'gfms_bind', '0@/dev/switchtec0', '-s', '0',
     '-p', '0', '-l', '1', '-f', '0x0100,0x0101'],
    ['switchtec', 'fabric', 'gfms-unbind', '10.0.0.5:5000', '-s', '0',
     '-p', '0', '-l', '1'],
    ['switchtec', 'port-bind', '/dev/switchtec0', '-p', '0', '-l', '1',
     '-f', '12'],
    ['switchtec', 'port_unbind', '/dev/switchtec0', '-p', '0', '-l', '1'],
    ['switchtec', 'port-bind-info', '/dev/switchtec0'],
])
def test_privsep_runs(argv):
    assert priv_fabric.check_argv(argv) == argv


def test_privsep_runs_the_configured_command(command):
    command('/opt/bin/switchtec')
    argv = ['/opt/bin/switchtec', 'port-bind-info', '/dev/switchtec0']
    assert priv_fabric.check_argv(argv) == argv


@pytest.mark.parametrize('configured,program', [
    ('switchtec', '/tmp/switchtec'),
    ('switchtec', '/usr/bin/switchtec'),
    ('switchtec', './switchtec'),
    ('switchtec', 'switchtec\n'),
    ('/opt/bin/switchtec', 'switchtec'),
    ('/opt/bin/switchtec', '/tmp/switchtec'),
    ('/opt/bin/switchtec', '/opt/bin/../bin/switchtec'),
    ('/opt/bin/switchtec', 'sh'),
])
def test_privsep_refuses_another_program(command, configured, program):
    command(configured)
    with pytest.raises(ValueError) as raised:
        priv_fabric.check_argv([program, 'port-bind-info',
                                '/dev/switchtec0'])
    assert 'switchtec_command' in str(raised.value)


def test_privsep_refuses_a_relative_configured_command(command):
    command('bin/switchtec')
    with pytest.raises(ValueError):
        priv_fabric.check_argv(['bin/switchtec', 'port-bind-info',
                                '/dev/switchtec0'])


def test_a_bare_command_is_found_on_the_fixed_path_only(
        command, tmp_path, monkeypatch):
    program = tmp_path / 'switchtec'
    program.write_text('#!/bin/sh\necho ran\n')
    program.chmod(stat.S_IRWXU)
    monkeypatch.setenv('PATH', os.pathsep.join(
        [str(tmp_path), os.environ.get('PATH', '')]))
    assert priv_fabric.resolve_command('switchtec') != str(program)
    command('switchtec')
    rc, out, err = priv_fabric.run_switchtec(
        ['switchtec', 'port-bind-info', '/dev/switchtec0'], 5)
    assert out != 'ran\n'


@pytest.mark.parametrize('argv', [
    [],
    ['sh', '-c', 'id'],
    ['/tmp/evil/switchtec-x', 'port-bind-info', '/dev/switchtec0'],
    ['bin/switchtec', 'port-bind-info', '/dev/switchtec0'],
    ['switchtec', 'fw-update', '/dev/switchtec0', 'image.pmc'],
    ['switchtec', 'fabric', 'port_control', '/dev/switchtec0'],
    ['switchtec', 'port-bind-info'],
    ['switchtec', 'port-bind-info', '-f', '1'],
    ['switchtec', 'fabric', 'gfms_dump', '/dev/switchtec0', '-t', 'FABRIC'],
    ['switchtec', 'fabric', 'gfms_dump', '/dev/switchtec0', '-o', 'x'],
    ['switchtec', 'fabric', 'gfms_bind', '/dev/switchtec0', '-s', '0',
     '-s', '1'],
    ['switchtec', 'fabric', 'gfms_bind', '/dev/switchtec0', '-s', '$(id)'],
    ['switchtec', 'port-bind', '/dev/switchtec0', '-p'],
    ['switchtec', 'port-bind', '/dev/switchtec0', '--partition', '0'],
    ['switchtec', 'fabric', 'gfms_dump', '/dev/switchtec0', '-t',
     'PAX_ALL\n'],
    ['switchtec', 'port-bind-info', '/dev/switchtec0\n'],
    ['switchtec', 'port-bind-info', '/dev/switchtec0\n-f'],
    ['switchtec', 'port-bind-info', '/dev/sda'],
    ['switchtec', 'port-bind-info', '/tmp/x'],
    ['switchtec', 'port-bind-info', '-f'],
    ['switchtec', 'port-bind-info', '/dev/switchtec0', '-f', '1\n'],
    ['switchtec', 'port-bind', '/dev/switchtec0', '-p', '0', '-l', '1',
     '-f', '0x1,2'],
])
def test_privsep_refuses(argv):
    with pytest.raises(ValueError):
        priv_fabric.check_argv(argv)


def test_privsep_refuses_what_is_not_a_list_of_strings():
    with pytest.raises(TypeError):
        priv_fabric.check_argv('switchtec port-bind-info /dev/switchtec0')
    with pytest.raises(TypeError):
        priv_fabric.check_argv(['switchtec', 'port-bind-info', 0])


@pytest.mark.parametrize('timeout', [float('inf'), float('nan'), 0, -5])
def test_privsep_refuses_a_timeout_that_is_not_finite(timeout):
    with pytest.raises(ValueError):
        priv_fabric.run_switchtec(
            ['switchtec', 'port-bind-info', '/dev/switchtec0'], timeout)


def test_privsep_caps_the_timeout():
    assert priv_fabric._timeout(1000) == priv_fabric.MAX_TIMEOUT
    for bad in (10 ** 9, float('inf'), float('nan'), 0, -1):
        with pytest.raises(ValueError):
            priv_fabric._timeout(bad)


def test_partition_health_of_the_bind_states():
    health = switchtec_driver._PORT_HEALTH
    assert health['fail'] == base.HEALTH_CRITICAL
    assert health['in_progress'] == base.HEALTH_WARNING
    assert health['bound'] == health['unbound'] == base.HEALTH_OK


def test_the_sample_is_valid():
    path = os.path.join(os.path.dirname(__file__), '..', '..', '..', '..',
                        'etc',
                        'composable', 'fabric-switchtec.json.sample')
    with open(path) as f:
        body = json.load(f)
    assert body['driver'] == 'switchtec'
    assert 'cli' not in body['driver_info']
    switchtec.SwitchtecFabricDriver().validate_driver_info(
        body['driver_info'])
