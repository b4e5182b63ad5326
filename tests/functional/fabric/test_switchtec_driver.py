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

"""The switchtec fabric driver against a fake ``switchtec`` executable.

tests/functional/fabric/fake_switchtec.py plays the switch: it keeps the
fabric's state in a JSON file and logs every argv it is run with. It is
started by a two-line ``switchtec`` wrapper written into the test's
temporary directory (``[fabric]switchtec_command`` points at it), through
the real privileged function
(composable.privsep.fabric.switchtec) run in this process, as the test
user: every command goes through the same checks and subprocess call as
in production, only no privsep daemon is started.
"""

import copy
import json
import os
import stat
import sys
import threading
import time

import pytest

from composable.common import exception
from composable import conf
from composable.fabric import base
from composable.fabric import switchtec
from composable.fabric.switchtec import driver as switchtec_driver
from composable import privsep
from composable.privsep import fabric as privsep_fabric

CONF = conf.CONF

FAKE = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                    'fake_switchtec.py')
DEVICE = '/dev/switchtec0'

GPU = '0x0100'
NVME = '0x0101'
NIC = '0x0102'

PAX_STATE = {
    'device': DEVICE,
    'pax_id': 0,
    'swfid': '0x0100',
    'ep_ports': [
        {'phys_port': 8, 'functions': [
            {'function': 0, 'type': 'PF', 'pdfid': 0x100, 'vid': '0x10de',
             'did': '0x20b5', 'class_code': '0x030200'}]},
        {'phys_port': 9, 'functions': [
            {'function': 0, 'type': 'PF', 'pdfid': 0x101, 'vid': '0x144d',
             'did': '0xa80a', 'class_code': '0x010802'},
            {'function': 1, 'type': 'SRIOV-VF', 'pdfid': 0x102,
             'vid': '0x15b3', 'did': '0x101e'}]},
        {'phys_port': 10, 'functions': []},
    ],
    'hvds': [
        {'hvd_id': 0, 'phys_port': 0, 'hfid': '0x0080', 'usp_bdf': '0x40',
         'logical_ports': {'1': None, '2': None}},
        {'hvd_id': 1, 'phys_port': 4, 'hfid': '0x0081', 'usp_bdf': '0x80',
         'logical_ports': {'1': None}},
    ],
}

PARTITION_STATE = {
    'device': DEVICE,
    'part_ports': {'12': None, '13': None, '14': [1, 1]},
}


def gfms_info(switch, timeout=5):
    # switch: the fake's wrapper, [fabric]switchtec_command of the test.
    return {
        'mode': 'gfms', 'device': DEVICE, 'timeout': timeout,
        'hosts': {
            'compute-1': {'switch_index': 0, 'phys_port': 0,
                          'logical_ports': [1, 2]},
            'compute-2': {'switch_index': 0, 'phys_port': 4,
                          'logical_ports': [1]},
        },
    }


def partition_info(switch, timeout=5):
    return {
        'mode': 'partition', 'device': DEVICE, 'timeout': timeout,
        'hosts': {
            'compute-1': {'partition': 0, 'logical_ports': [1, 2]},
            'compute-2': {'partition': 1, 'logical_ports': [1]},
        },
    }


class Switch(object):
    """The fake switch: its state file and its wrapper executable."""

    def __init__(self, directory, state):
        self.state_path = os.path.join(directory, 'switch.json')
        self.program = os.path.join(directory, 'switchtec')
        with open(self.program, 'w') as f:
            f.write('#!/bin/sh\nexec %s %s "$@"\n' % (sys.executable, FAKE))
        os.chmod(self.program, stat.S_IRWXU)
        self.write(copy.deepcopy(state))

    def read(self):
        with open(self.state_path) as f:
            return json.load(f)

    def write(self, state):
        with open(self.state_path, 'w') as f:
            json.dump(state, f)

    def update(self, **changes):
        state = self.read()
        state.update(changes)
        self.write(state)

    @property
    def calls(self):
        return self.read().get('calls', [])

    def clear_calls(self):
        self.update(calls=[])

    def hvd_ports(self, hvd_id):
        hvd = next(h for h in self.read()['hvds'] if h['hvd_id'] == hvd_id)
        return hvd['logical_ports']


@pytest.fixture
def privsep_in_process():
    privsep.sys_admin_pctxt.set_client_mode(False)
    yield
    privsep.sys_admin_pctxt.set_client_mode(True)


def use_command(program):
    CONF.set_override('switchtec_command', program, 'fabric')


@pytest.fixture
def switchtec_command():
    """Sets [fabric]switchtec_command (use_command) for one test."""
    yield use_command
    CONF.clear_override('switchtec_command', 'fabric')


@pytest.fixture
def pax(tmp_path, monkeypatch, privsep_in_process, switchtec_command):
    switch = Switch(str(tmp_path), PAX_STATE)
    monkeypatch.setenv('FAKE_SWITCHTEC_STATE', switch.state_path)
    switchtec_command(switch.program)
    return switch


@pytest.fixture
def psx(tmp_path, monkeypatch, privsep_in_process, switchtec_command):
    switch = Switch(str(tmp_path), PARTITION_STATE)
    monkeypatch.setenv('FAKE_SWITCHTEC_STATE', switch.state_path)
    switchtec_command(switch.program)
    return switch


@pytest.fixture
def driver():
    return switchtec.SwitchtecFabricDriver()


def fabric(info):
    return {'name': 'rack-1', 'driver': 'switchtec', 'driver_info': info}


def device(address, **extra):
    dev = {'uuid': 'dev-%s' % address, 'address': address}
    dev.update(extra)
    return dev


HOST1 = {'name': 'compute-1'}
HOST2 = {'name': 'compute-2'}


def dump(kind, extra=()):
    return ['fabric', 'gfms_dump', DEVICE, '-t', kind] + list(extra)


# ------------------------------------------------------------------ gfms


def test_bind_runs_dump_bind_detail(pax, driver):
    fab = fabric(gfms_info(pax.program))
    locator = driver.bind_device(fab, device(GPU), HOST1)
    assert locator.to_primitive() == {
        'vendor_id': '10de', 'product_id': '20b5',
        'serial': None, 'pci_address': '0000:43:00.0',
        'fabric_ref': GPU}
    assert pax.calls == [
        dump('PAX_ALL'),
        ['fabric', 'gfms_bind', DEVICE, '-s', '0', '-p', '0', '-l', '1',
         '-f', GPU],
        dump('HVD_DETAIL', ['-d', '0']),
    ]
    assert pax.hvd_ports(0) == {'1': 0x100, '2': None}


def test_bind_again_is_idempotent(pax, driver):
    fab = fabric(gfms_info(pax.program))
    first = driver.bind_device(fab, device(GPU), HOST1)
    pax.clear_calls()
    again = driver.bind_device(fab, device(GPU), HOST1)
    assert again == first
    # No second gfms_bind: only the state and the address are read.
    assert pax.calls == [dump('PAX_ALL'), dump('HVD_DETAIL', ['-d', '0'])]
    assert pax.hvd_ports(0) == {'1': 0x100, '2': None}


def test_second_function_takes_the_next_free_logical_port(pax, driver):
    fab = fabric(gfms_info(pax.program))
    driver.bind_device(fab, device(GPU), HOST1)
    locator = driver.bind_device(fab, device('0x101'), HOST1)
    assert locator.fabric_ref == NVME
    assert locator.pci_address == '0000:44:00.0'
    assert ['fabric', 'gfms_bind', DEVICE, '-s', '0', '-p', '0', '-l', '2',
            '-f', NVME] in pax.calls
    assert pax.hvd_ports(0) == {'1': 0x100, '2': 0x101}


def test_no_free_logical_port(pax, driver):
    fab = fabric(gfms_info(pax.program))
    driver.bind_device(fab, device(GPU), HOST2)
    pax.clear_calls()
    with pytest.raises(exception.DriverError) as raised:
        driver.bind_device(fab, device(NVME), HOST2)
    assert 'host compute-2 has no free logical port' in raised.value.message
    assert 'logical ports 1 are all bound' in raised.value.message
    assert pax.calls == [dump('PAX_ALL')]


def test_function_bound_to_another_host(pax, driver):
    fab = fabric(gfms_info(pax.program))
    driver.bind_device(fab, device(GPU), HOST2)
    pax.clear_calls()
    with pytest.raises(exception.DriverError) as raised:
        driver.bind_device(fab, device(GPU), HOST1)
    assert raised.value.message == (
        'function 0x0100 is bound to host compute-2 (switch 0, physical '
        'port 4, logical port 1), not to host compute-1')
    assert pax.calls == [dump('PAX_ALL')]


def test_function_bound_where_no_host_is_mapped(pax, driver):
    pax.update(remote={str(0x100): [3, 16, 5]})
    fab = fabric(gfms_info(pax.program))
    with pytest.raises(exception.DriverError) as raised:
        driver.bind_device(fab, device(GPU), HOST1)
    assert 'a port no host maps to (switch 3, physical port 16, ' \
        'logical port 5)' in raised.value.message


def test_unknown_pdfid(pax, driver):
    fab = fabric(gfms_info(pax.program))
    with pytest.raises(exception.DriverError) as raised:
        driver.bind_device(fab, device('0x01ff'), HOST1)
    assert 'no function with PDFID 0x01ff' in raised.value.message


def test_host_without_mapping(pax, driver):
    fab = fabric(gfms_info(pax.program))
    with pytest.raises(exception.DriverError) as raised:
        driver.bind_device(fab, device(GPU), {'name': 'compute-9'})
    assert 'host compute-9 has no port mapping' in raised.value.message
    assert pax.calls == []


def test_unbind_unbinds_the_logical_port(pax, driver):
    fab = fabric(gfms_info(pax.program))
    driver.bind_device(fab, device(GPU), HOST1)
    driver.bind_device(fab, device(NVME), HOST1)
    pax.clear_calls()
    driver.unbind_device(fab, device(NVME), HOST1)
    assert pax.calls == [
        dump('PAX_ALL'),
        ['fabric', 'gfms_unbind', DEVICE, '-s', '0', '-p', '0', '-l', '2'],
    ]
    assert pax.hvd_ports(0) == {'1': 0x100, '2': None}


def test_unbind_of_an_unbound_function_succeeds(pax, driver):
    fab = fabric(gfms_info(pax.program))
    driver.unbind_device(fab, device(GPU), HOST1)
    driver.unbind_device(fab, device(GPU), None)
    assert pax.calls == [dump('PAX_ALL'), dump('PAX_ALL')]


def test_unbind_leaves_another_hosts_binding(pax, driver):
    fab = fabric(gfms_info(pax.program))
    driver.bind_device(fab, device(GPU), HOST2)
    pax.clear_calls()
    driver.unbind_device(fab, device(GPU), HOST1)
    assert pax.calls == [dump('PAX_ALL')]
    assert pax.hvd_ports(1) == {'1': 0x100}
    # Without a host (the reconciler's cleanup) it is unbound wherever.
    driver.unbind_device(fab, device(GPU), None)
    assert pax.hvd_ports(1) == {'1': None}


def test_bind_unbind_bind_cycle(pax, driver):
    fab = fabric(gfms_info(pax.program))
    driver.bind_device(fab, device(GPU), HOST1)
    driver.unbind_device(fab, device(GPU), HOST1)
    driver.unbind_device(fab, device(GPU), HOST1)
    locator = driver.bind_device(fab, device(GPU), HOST2)
    assert locator.pci_address == '0000:83:00.0'
    assert pax.hvd_ports(0) == {'1': None, '2': None}
    assert pax.hvd_ports(1) == {'1': 0x100}


def test_firmware_error_carries_mrpc_and_code(pax, driver):
    pax.update(fail={'gfms_bind': ['Invalid PDFID', '0x84', '0x6']})
    fab = fabric(gfms_info(pax.program))
    with pytest.raises(exception.DriverError) as raised:
        driver.bind_device(fab, device(GPU), HOST1)
    exc = raised.value
    assert exc.message == ('switchtec fabric gfms_bind on /dev/switchtec0 '
                           'failed: Invalid PDFID (MRPC 0x84, error 0x6)')
    assert exc.kwargs['mrpc'] == '0x84'
    assert exc.kwargs['mrpc_error'] == '0x6'
    assert exc.kwargs['message_text'] == 'Invalid PDFID'


def test_address_unknown_while_the_host_link_is_down(pax, driver):
    state = pax.read()
    state['hvds'][0]['link_up'] = False
    pax.write(state)
    fab = fabric(gfms_info(pax.program))
    locator = driver.bind_device(fab, device(GPU), HOST1)
    assert locator.pci_address is None
    assert pax.hvd_ports(0)['1'] == 0x100


@pytest.mark.parametrize('fault', [
    {'garbage': {'gfms_dump.HVD_DETAIL': 'garbage\n'}},
    {'fail': {'gfms_dump.HVD_DETAIL': ['Invalid HVD index', '0x84',
                                       '0x1']}},
])
def test_address_unknown_when_hvd_detail_fails(pax, driver, fault):
    """The bind is done; only the address the host sees is unknown."""
    pax.update(**fault)
    fab = fabric(gfms_info(pax.program))
    locator = driver.bind_device(fab, device(GPU), HOST1)
    assert locator.pci_address is None
    assert locator.fabric_ref == GPU
    assert pax.hvd_ports(0)['1'] == 0x100


def test_timeout_kills_the_cli(pax, driver):
    pax.update(hang={'gfms_dump': 60})
    fab = fabric(gfms_info(pax.program, timeout=1))
    started = time.monotonic()
    with pytest.raises(exception.DriverTimeout) as raised:
        driver.bind_device(fab, device(GPU), HOST1)
    assert time.monotonic() - started < 30
    assert raised.value.message == (
        'switchtec fabric gfms_dump on /dev/switchtec0 did not answer '
        'within 1 seconds.')
    assert pax.calls == [dump('PAX_ALL')]
    # The switch lock is free again.
    pax.update(hang={})
    assert driver.bind_device(fab, device(GPU), HOST1).fabric_ref == GPU


@pytest.mark.parametrize('garbage', [
    '', 'Segmentation fault\n', 'PAX ID: 0 (SWFID: 0x0100)\nGeneral:\n',
    '\x00\x01\x02 binary',
])
def test_garbage_output_is_refused(pax, driver, garbage):
    pax.update(garbage={'gfms_dump': garbage})
    fab = fabric(gfms_info(pax.program))
    with pytest.raises(exception.DriverError) as raised:
        driver.bind_device(fab, device(GPU), HOST1)
    assert 'printed output the driver cannot read' in raised.value.message
    with pytest.raises(exception.DriverError):
        driver.unbind_device(fab, device(GPU), HOST1)
    # Nothing was bound or unbound on a state the driver could not read.
    assert all(call[1] == 'gfms_dump' for call in pax.calls)


def test_missing_cli(pax, driver, tmp_path, switchtec_command):
    switchtec_command(os.path.join(str(tmp_path), 'bin', 'switchtec'))
    info = gfms_info(pax.program)
    with pytest.raises(exception.DriverError) as raised:
        driver.bind_device(fabric(info), device(GPU), HOST1)
    assert raised.value.message == (
        'switchtec fabric gfms_dump on /dev/switchtec0 failed: command not '
        'found')
    assert raised.value.kwargs['exit_code'] == 127


def test_driver_info_cannot_choose_the_program(pax, driver, tmp_path):
    """A cli in driver_info is refused before anything runs: the program
    run as root is the conductor's [fabric]switchtec_command only."""
    info = gfms_info(pax.program)
    info['cli'] = pax.program
    with pytest.raises(exception.DriverError) as raised:
        driver.bind_device(fabric(info), device(GPU), HOST1)
    assert 'driver_info cli is not a setting' in raised.value.message
    assert '[fabric]switchtec_command' in raised.value.message
    assert pax.calls == []


def test_privileged_side_runs_only_the_configured_command(pax, tmp_path):
    """A caller naming another switchtec executable is refused by the
    privileged function itself."""
    other = os.path.join(str(tmp_path), 'other')
    os.mkdir(other)
    impostor = Switch(other, PAX_STATE)
    argv = ['fabric', 'gfms_dump', DEVICE, '-t', 'PAX_ALL']
    for program in (impostor.program, 'switchtec', '/bin/sh'):
        with pytest.raises(privsep_fabric.FabricError) as refused:
            privsep_fabric.switchtec([program] + argv, 5)
        assert refused.value.code is \
            privsep_fabric.ErrorCode.INVALID_ARGUMENT
    assert pax.calls == [] and impostor.calls == []
    rc, out, err = privsep_fabric.switchtec([pax.program] + argv, 5)
    assert rc == 0 and out.startswith('PAX ID: 0')


@pytest.mark.parametrize('timeout', [float('inf'), float('nan'), 601])
def test_timeout_without_end_is_refused(pax, driver, timeout):
    with pytest.raises(exception.DriverError) as raised:
        driver.bind_device(fabric(gfms_info(pax.program, timeout)),
                           device(GPU), HOST1)
    assert 'driver_info timeout must be' in raised.value.message
    assert pax.calls == []


def test_wrong_device(pax, driver):
    info = gfms_info(pax.program)
    info['device'] = '/dev/switchtec7'
    with pytest.raises(exception.DriverError) as raised:
        driver.bind_device(fabric(info), device(GPU), HOST1)
    assert raised.value.message == (
        'switchtec fabric gfms_dump on /dev/switchtec7 failed: No such '
        'file or directory')


def test_discover(pax, driver):
    fab = fabric(gfms_info(pax.program))
    driver.bind_device(fab, device(NVME), HOST2)
    found = driver.discover(fab)
    assert [d['address'] for d in found] == [GPU, NVME, NIC]
    by_address = {d['address']: d for d in found}
    assert by_address[GPU] == {
        'address': GPU, 'kind': 'gpu', 'model': None, 'vendor_id': '10de',
        'product_id': '20b5', 'serial': None, 'health': 'ok',
        'hosts': ['compute-1', 'compute-2'], 'bound_to': None,
        'fabric_binding': None}
    assert by_address[NVME]['kind'] == 'nvme'
    assert by_address[NVME]['bound_to'] == 'compute-2'
    assert by_address[NVME]['fabric_binding'] == {
        'switch_index': 0, 'phys_port': 4, 'logical_port': 1}
    # No class code printed: a plain PCI function.
    assert by_address[NIC]['kind'] == 'pci'
    assert {d['health'] for d in found} == {base.HEALTH_OK}


def test_discover_function_bound_where_no_host_is_mapped(pax, driver):
    """A function bound outside composable (to a domain no host of
    driver_info maps to) is not reported free."""
    pax.update(remote={str(0x100): [3, 16, 5]})
    state = pax.read()
    state['hvds'][1]['logical_ports'] = {'1': 0x101}
    pax.write(state)
    fab = fabric(gfms_info(pax.program))
    fab['driver_info']['hosts'].pop('compute-2')
    by_address = {d['address']: d for d in driver.discover(fab)}
    assert by_address[GPU]['bound_to'] == 'PAX 3 HVD port 16'
    assert by_address[GPU]['fabric_binding'] == {
        'switch_index': 3, 'phys_port': 16, 'logical_port': 5}
    assert by_address[NVME]['bound_to'] == 'PAX 0 HVD port 4'
    assert by_address[NIC]['bound_to'] is None


def test_one_operation_per_switch(pax, driver):
    """Two binds on one switch from two threads: the second command starts
    only after the first operation (dump, bind, detail) is over."""
    pax.update(hang={'gfms_bind': 1})
    fab = fabric(gfms_info(pax.program))
    errors = []

    def bind(address):
        try:
            driver.bind_device(fab, device(address), HOST1)
        except Exception as exc:  # noqa
            errors.append(exc)

    threads = [threading.Thread(target=bind, args=(a,))
               for a in (GPU, NVME)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []
    kinds = [(c[1], c[4] if c[1] == 'gfms_dump' else None)
             for c in pax.calls]
    assert kinds == [('gfms_dump', 'PAX_ALL'), ('gfms_bind', None),
                     ('gfms_dump', 'HVD_DETAIL')] * 2
    assert sorted(pax.hvd_ports(0).values()) == [0x100, 0x101]


def test_busy_switch_is_an_error(pax, driver, monkeypatch):
    fab = fabric(gfms_info(pax.program, timeout=0.2))
    monkeypatch.setattr(switchtec_driver.SwitchtecFabricDriver,
                        '_lock_wait', staticmethod(lambda info: 0.2))
    lock = switchtec_driver._switch_lock(DEVICE)
    with lock:
        with pytest.raises(exception.DriverError) as raised:
            driver.bind_device(fab, device(GPU), HOST1)
    assert 'switch /dev/switchtec0 is busy' in raised.value.message
    assert pax.calls == []


# ------------------------------------------------------------- partition


def test_partition_bind_unbind(psx, driver):
    fab = fabric(partition_info(psx.program))
    locator = driver.bind_device(fab, device('12', vendor_id='10de',
                                             product_id='20b5'), HOST1)
    assert locator.to_primitive() == {
        'vendor_id': '10de', 'product_id': '20b5',
        'serial': None, 'pci_address': None,
        'fabric_ref': '12'}
    assert psx.calls == [['port-bind-info', DEVICE],
                         ['port-bind', DEVICE, '-p', '0', '-l', '1',
                          '-f', '12']]
    assert psx.read()['part_ports']['12'] == [0, 1]
    psx.clear_calls()
    # Again: nothing to do.
    driver.bind_device(fab, device('12'), HOST1)
    assert psx.calls == [['port-bind-info', DEVICE]]
    # The next port takes the next logical port of the partition.
    driver.bind_device(fab, device('13'), HOST1)
    assert psx.read()['part_ports']['13'] == [0, 2]
    psx.clear_calls()
    driver.unbind_device(fab, device('12'), HOST1)
    driver.unbind_device(fab, device('12'), HOST1)
    assert psx.calls == [['port-bind-info', DEVICE],
                         ['port-unbind', DEVICE, '-p', '0', '-l', '1'],
                         ['port-bind-info', DEVICE]]
    assert psx.read()['part_ports']['12'] is None


def test_partition_errors(psx, driver):
    fab = fabric(partition_info(psx.program))
    with pytest.raises(exception.DriverError) as raised:
        driver.bind_device(fab, device('14'), HOST1)
    assert raised.value.message == (
        'physical port 14 is bound to host compute-2 (partition 1, '
        'logical port 1), not to host compute-1')
    with pytest.raises(exception.DriverError) as raised:
        driver.bind_device(fab, device('12'), HOST2)
    assert 'host compute-2 has no free logical port in partition 1' in \
        raised.value.message
    with pytest.raises(exception.DriverError) as raised:
        driver.bind_device(fab, device('99'), HOST1)
    assert 'reports no physical port 99' in raised.value.message
    psx.update(fail={'port_bind': ['Physical port link active', '0xc',
                                   '0x2']})
    with pytest.raises(exception.DriverError) as raised:
        driver.bind_device(fab, device('12'), HOST1)
    assert raised.value.message == (
        'switchtec port-bind on /dev/switchtec0 failed: Physical port '
        'link active (MRPC 0xc, error 0x2)')


def test_partition_discover(psx, driver):
    found = driver.discover(fabric(partition_info(psx.program)))
    assert [(d['address'], d['bound_to']) for d in found] == [
        ('12', None), ('13', None), ('14', 'compute-2')]
    assert [d['kind'] for d in found] == ['pci'] * 3
    assert [d['health'] for d in found] == [base.HEALTH_OK] * 3


def test_partition_discover_bound_outside_composable(psx, driver):
    psx.update(part_ports={'12': None, '13': [5, 2], '14': [1, 1]})
    found = driver.discover(fabric(partition_info(psx.program)))
    assert [(d['address'], d['bound_to']) for d in found] == [
        ('12', None), ('13', 'partition 5 logical port 2'),
        ('14', 'compute-2')]


def test_partition_discover_health(psx, driver):
    """A failed bind takes the port out of service (critical); one in
    progress is only a warning."""
    psx.update(part_ports={'12': 'fail', '13': 'in_progress',
                           '14': None})
    found = driver.discover(fabric(partition_info(psx.program)))
    assert [(d['address'], d['health'], d['bound_to']) for d in found] == [
        ('12', base.HEALTH_CRITICAL, None),
        ('13', base.HEALTH_WARNING, None),
        ('14', base.HEALTH_OK, None)]
