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

import pytest

from composable.common import exception
from composable.fabric import switchtec
from composable.privsep import fabric as priv_fabric

GFMS = {
    'device': '/dev/switchtec0',
    'hosts': {'compute-1': {'switch_index': 0, 'phys_port': 0,
                            'logical_ports': [1, 2]},
              'compute-2': {'switch_index': 1, 'phys_port': 0,
                            'logical_ports': [0]}},
}
PARTITION = {
    'mode': 'partition', 'device': '10.0.0.5:5000',
    'cli': '/usr/local/bin/switchtec', 'timeout': 12.5,
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
    (GFMS, ['cli'], '/bin/sh', 'cli'),
    (GFMS, ['cli'], 'bin/switchtec', 'cli'),
    (GFMS, ['timeout'], 0, 'timeout'),
    (GFMS, ['timeout'], True, 'timeout'),
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


@pytest.mark.parametrize('argv', [
    ['switchtec', 'fabric', 'gfms_dump', '/dev/switchtec0', '-t',
     'PAX_ALL'],
    ['/opt/bin/switchtec', 'fabric', 'gfms-dump', '/dev/switchtec0', '-t',
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
])
def test_privsep_refuses(argv):
    with pytest.raises(ValueError):
        priv_fabric.check_argv(argv)


def test_privsep_refuses_what_is_not_a_list_of_strings():
    with pytest.raises(TypeError):
        priv_fabric.check_argv('switchtec port-bind-info /dev/switchtec0')
    with pytest.raises(TypeError):
        priv_fabric.check_argv(['switchtec', 'port-bind-info', 0])
