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

"""Leased PCI devices on the compute agent, end to end in this process:
AgentManager -> HostPciDevices -> the privileged functions of
composable.privsep.pci (run in-process, privsep's client mode off) ->
the PCI module, on the fake sysfs of test_pci, whose fake kernel reacts
to rescan, driver_override, unbind, drivers_probe, remove and
sriov_numvfs as Linux does. Nothing here touches the machine's PCI bus.
"""

import json
import logging
import os
import threading

import pytest

from composable.agent.compute_node import backends
from composable.agent.compute_node import host_pci
from composable.agent import manager
from composable.common import exception
from composable import conf
from composable import privsep
from composable.privsep import pci as priv_pci
from composable.privsep import pci_sysfs as pci
from tests.unit.privsep import test_pci_sysfs as test_pci

GPU = test_pci.GPU
LOCAL = test_pci.LOCAL
LEASE = {'uuid': 'lease-1'}


@pytest.fixture
def fs(tmp_path):
    fs = test_pci.FakeSysfs(tmp_path / 'host')
    fs.add_driver(pci.VFIO_DRIVER)
    fs.add(test_pci.BRIDGE, vendor='0x8086', device='0x2030',
           cls='0x060400', driver='pcieport', group=7)
    fs.add(LOCAL, vendor='0x8086', device='0x1572', cls='0x020000',
           driver='i40e', group=3)
    return fs


@pytest.fixture
def privileged(fs, monkeypatch):
    """The privileged functions, in this process, on the fake tree."""
    privsep.sys_admin_pctxt.set_client_mode(False)
    monkeypatch.setattr(priv_pci, 'ROOT', fs.root)
    monkeypatch.setattr(priv_pci, 'WRITER', fs.write)
    yield priv_pci
    privsep.sys_admin_pctxt.set_client_mode(True)


@pytest.fixture
def nova_conf(tmp_path):
    return tmp_path / 'nova.conf'


def _devices(fs, privileged, nova_conf, tmp_path, timeout=5):
    devices = host_pci.HostPciDevices(
        ops=privileged, root=fs.root, find_timeout=timeout,
        nova_config_files=[str(nova_conf)],
        state_file=str(tmp_path / 'state' / 'pci-devices.json'),
        kernel_release='6.1.0-test')
    return devices


@pytest.fixture
def host(fs, privileged, nova_conf, tmp_path):
    devices = _devices(fs, privileged, nova_conf, tmp_path)
    assert devices.start() == []
    return devices


def _device(uuid='dev-1', **locator):
    found = {'vendor_id': '10de', 'product_id': '2330', 'serial': None,
             'pci_address': None, 'fabric_ref': 'blk-%s' % uuid}
    found.update(locator)
    return {'uuid': uuid, 'vendor_id': '10de', 'product_id': '2330',
            'pci_address': found['pci_address'], 'locator': found}


def _state(tmp_path):
    with open(tmp_path / 'state' / 'pci-devices.json') as f:
        return json.load(f)['devices']


def _writes_but_rescans(fs):
    return [w for w in fs.writes if w[0] != 'sys/bus/pci/rescan']


# Attach.

def test_attach_finds_a_late_function_and_binds_it_to_vfio(
        fs, host, tmp_path, monkeypatch):
    fs.add(GPU, group=12, driver='nouveau')
    fs._destroy(GPU)  # the fabric's bind has not reached the host yet
    rescans = []

    def late_kernel(path, value):
        if path.endswith('rescan'):
            rescans.append(value)
            if len(rescans) == 2:
                fs.add(GPU, group=12, driver='nouveau', hidden=True)
        fs.write(path, value)

    monkeypatch.setattr(priv_pci, 'WRITER', late_kernel)
    assert host.attach(LEASE, [_device()]) == {'dev-1': GPU}
    assert len(rescans) == 2
    assert fs.driver_of(GPU) == pci.VFIO_DRIVER
    assert os.path.exists(fs.path('dev/vfio/12'))
    assert fs.read(GPU, 'driver_override') == pci.VFIO_DRIVER
    # The host's own NIC of group 3 was not touched.
    assert fs.driver_of(LOCAL) == 'i40e'
    assert _state(tmp_path)['dev-1']['address'] == GPU
    assert _state(tmp_path)['dev-1']['lease'] == 'lease-1'


def test_attach_times_out_with_what_it_looked_for(fs, privileged,
                                                  nova_conf, tmp_path):
    devices = _devices(fs, privileged, nova_conf, tmp_path, timeout=1)
    devices.start()
    with pytest.raises(exception.DriverError) as e:
        devices.attach(LEASE, [_device(serial='GPU-SN-7')])
    message = e.value.message
    assert 'ids 10de:2330' in message and 'serial GPU-SN-7' in message
    assert 'within 1' in message and 'did not show up' in message
    assert _writes_but_rescans(fs) == []
    assert not os.path.exists(tmp_path / 'state' / 'pci-devices.json')


def test_attach_by_the_fabric_address(fs, host):
    fs.add(GPU, group=12, hidden=True)
    assert host.attach(LEASE, [_device(pci_address=GPU)]) == {'dev-1': GPU}
    assert fs.driver_of(GPU) == pci.VFIO_DRIVER


def test_a_function_of_the_host_is_never_taken(fs, privileged, nova_conf,
                                               tmp_path):
    # A local GPU of the same model, on the bus before the agent starts.
    fs.add('0000:05:00.0', group=5, driver='nouveau')
    devices = _devices(fs, privileged, nova_conf, tmp_path, timeout=1)
    devices.start()
    with pytest.raises(exception.DriverError):
        devices.attach(LEASE, [_device()])
    assert fs.driver_of('0000:05:00.0') == 'nouveau'
    fs.add(GPU, group=12, hidden=True)
    assert devices.attach(LEASE, [_device()]) == {'dev-1': GPU}


def test_a_shared_iommu_group_is_refused_and_nothing_changes(
        fs, host, tmp_path):
    fs.add(GPU, group=12, hidden=True)
    fs.add(test_pci.NIC, vendor='0x15b3', device='0x1017', cls='0x020000',
           driver='mlx5_core', group=12)
    with pytest.raises(exception.DriverError) as e:
        host.attach(LEASE, [_device()])
    message = e.value.message
    assert test_pci.NIC in message and 'mlx5_core' in message
    assert 'dev-1' in message and 'IOMMU group 12' in message
    # Found, but left as it was: no driver, no override, no vfio node.
    assert fs.driver_of(GPU) is None
    assert fs.read(GPU, 'driver_override') == '(null)'
    assert not os.path.exists(fs.path('dev/vfio/12'))
    assert fs.driver_of(test_pci.NIC) == 'mlx5_core'
    assert _writes_but_rescans(fs) == []
    # The conductor's teardown still takes it off the bus.
    host.detach(LEASE, [_device()])
    assert not pci.exists(GPU, fs.root)
    assert pci.exists(test_pci.NIC, fs.root)
    assert _state(tmp_path) == {}


def test_attach_and_detach_are_idempotent(fs, host, tmp_path):
    fs.add(GPU, group=12, hidden=True)
    assert host.attach(LEASE, [_device()]) == {'dev-1': GPU}
    writes = list(fs.writes)
    # The conductor repeats the call after a timeout.
    assert host.attach(LEASE, [_device()]) == {'dev-1': GPU}
    assert fs.writes == writes
    host.detach(LEASE, [_device()])
    assert not pci.exists(GPU, fs.root)
    assert fs.writes[len(writes):] == [
        ('sys/bus/pci/devices/%s/driver/unbind' % GPU, GPU),
        ('sys/bus/pci/devices/%s/driver_override' % GPU, '\n'),
        ('sys/bus/pci/devices/%s/remove' % GPU, '1')]
    writes = list(fs.writes)
    host.detach(LEASE, [_device()])
    assert fs.writes == writes
    assert _state(tmp_path) == {}


def test_attach_rebinds_a_function_that_left_vfio(fs, host):
    fs.add(GPU, group=12, hidden=True)
    host.attach(LEASE, [_device()])
    fs.write(fs.path('sys/bus/pci/devices', GPU, 'driver', 'unbind'), GPU)
    assert host.attach(LEASE, [_device()]) == {'dev-1': GPU}
    assert fs.driver_of(GPU) == pci.VFIO_DRIVER


def test_detach_of_a_function_already_gone(fs, host, tmp_path):
    fs.add(GPU, group=12, hidden=True)
    host.attach(LEASE, [_device()])
    fs._destroy(GPU)  # surprise removal: the fabric pulled it
    writes = list(fs.writes)
    host.detach(LEASE, [_device()])
    assert fs.writes == writes
    assert _state(tmp_path) == {}


def test_detach_of_a_device_never_found_changes_nothing(fs, host):
    host.detach(LEASE, [_device()])
    assert fs.writes == []


def test_detach_by_the_conductor_address_spares_other_functions(fs, host):
    # The conductor's record names the host's own NIC: not the device.
    device = dict(_device(), pci_address=LOCAL, locator=None)
    host.detach(LEASE, [device])
    assert fs.writes == [] and pci.exists(LOCAL, fs.root)


def test_two_devices_of_one_model_in_one_lease(fs, host):
    fs.add('0000:41:00.0', group=12, hidden=True)
    fs.add('0000:42:00.0', group=13, hidden=True)
    result = host.attach(LEASE, [_device('dev-1'), _device('dev-2')])
    assert sorted(result.values()) == ['0000:41:00.0', '0000:42:00.0']
    assert fs.driver_of('0000:41:00.0') == pci.VFIO_DRIVER
    assert fs.driver_of('0000:42:00.0') == pci.VFIO_DRIVER
    host.detach(LEASE, [_device('dev-1'), _device('dev-2')])
    assert not pci.exists('0000:41:00.0', fs.root)
    assert not pci.exists('0000:42:00.0', fs.root)


def test_a_device_already_held_does_not_widen_the_search(fs, host):
    fs.add('0000:41:00.0', group=12, hidden=True)
    assert host.attach(LEASE, [_device('dev-2')]) == {
        'dev-2': '0000:41:00.0'}
    # dev-1 of the same lease and a device of another lease, both of
    # the model, appear: only dev-1 is awaited, so there is no guess.
    fs.add('0000:42:00.0', group=13, hidden=True)
    fs.add('0000:43:00.0', group=14, hidden=True)
    with pytest.raises(exception.DriverError) as e:
        host.attach(LEASE, [_device('dev-1'), _device('dev-2')])
    assert '0000:42:00.0, 0000:43:00.0' in e.value.message
    assert fs.driver_of('0000:42:00.0') is None
    assert fs.driver_of('0000:43:00.0') is None


def test_detach_spares_a_function_that_is_no_longer_the_device(
        fs, host, tmp_path):
    fs.add(GPU, group=12, hidden=True)
    host.attach(LEASE, [_device()])
    # The fabric took the GPU away and another function took its address.
    fs._destroy(GPU)
    fs.add(GPU, vendor='0x8086', device='0x0b60', group=12)
    writes = list(fs.writes)
    host.detach(LEASE, [_device()])
    assert fs.writes == writes and pci.exists(GPU, fs.root)
    assert _state(tmp_path) == {}


def test_another_lease_device_of_the_model_is_not_guessed(fs, host):
    fs.add('0000:41:00.0', group=12, hidden=True)
    fs.add('0000:42:00.0', group=13, hidden=True)
    with pytest.raises(exception.DriverError) as e:
        host.attach(LEASE, [_device('dev-1')])
    assert '0000:41:00.0, 0000:42:00.0' in e.value.message
    assert fs.driver_of('0000:41:00.0') is None
    assert fs.driver_of('0000:42:00.0') is None


def test_concurrent_attaches_get_distinct_functions(fs, host):
    fs.add('0000:41:00.0', group=12, hidden=True)
    fs.add('0000:42:00.0', device='0x20b5', group=13, hidden=True)
    results, errors = {}, []
    start = threading.Barrier(2)

    def attach(lease, device):
        start.wait(30)
        try:
            results.update(host.attach(lease, [device]))
        except Exception as exc:
            errors.append(exc)

    threads = [
        threading.Thread(target=attach, args=({'uuid': 'l1'},
                                              _device('dev-1'))),
        threading.Thread(target=attach, args=(
            {'uuid': 'l2'}, dict(_device('dev-2', product_id='20b5'),
                                 product_id='20b5')))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    assert results == {'dev-1': '0000:41:00.0', 'dev-2': '0000:42:00.0'}
    assert fs.driver_of('0000:41:00.0') == pci.VFIO_DRIVER
    assert fs.driver_of('0000:42:00.0') == pci.VFIO_DRIVER


def test_a_restarted_agent_knows_its_devices(fs, host, privileged,
                                             nova_conf, tmp_path):
    fs.add(GPU, group=12, hidden=True)
    host.attach(LEASE, [_device()])
    again = _devices(fs, privileged, nova_conf, tmp_path, timeout=1)
    assert again.start() == []
    assert GPU not in again.baseline
    writes = list(fs.writes)
    assert again.attach(LEASE, [_device()]) == {'dev-1': GPU}
    assert fs.writes == writes
    again.detach(LEASE, [_device()])
    assert not pci.exists(GPU, fs.root)


def test_records_of_an_older_agent_are_read(fs, privileged, nova_conf,
                                            tmp_path):
    # The records file as the previous release wrote it: the locator the
    # agent searched with, a dict (ids as the fabric printed them).
    fs.add(GPU, group=12, driver='nouveau')
    state = tmp_path / 'state'
    state.mkdir()
    (state / 'pci-devices.json').write_text(json.dumps({
        'devices': {'dev-1': {
            'address': GPU, 'lease': 'lease-1',
            'locator': {'vendor_id': '0x10DE', 'product_id': '2330',
                        'serial': None, 'pci_address': None,
                        'fabric_ref': 'blk-dev-1'}}},
        'baseline': None, 'boot_id': None}))
    again = _devices(fs, privileged, nova_conf, tmp_path, timeout=1)
    assert again.start() == []
    assert [r['ok'] for r in again.restore()] == [True]
    assert fs.driver_of(GPU) == pci.VFIO_DRIVER
    # Written back in the one primitive form.
    assert _state(tmp_path)['dev-1']['locator']['vendor_id'] == '0x10DE'
    again.attach(LEASE, [_device()])
    assert _state(tmp_path)['dev-1']['locator'] == {
        'vendor_id': '10de', 'product_id': '2330', 'serial': None,
        'pci_address': None, 'fabric_ref': 'blk-dev-1'}
    # A conductor of any release sends the device's view without a
    # locator at teardown: the record says what to remove.
    again.detach(LEASE, [{'uuid': 'dev-1', 'vendor_id': '10de',
                          'product_id': '2330', 'pci_address': None}])
    assert not pci.exists(GPU, fs.root)
    assert _state(tmp_path) == {}


def test_an_attach_without_a_locator_uses_the_devices_view(fs, host):
    # A conductor that sends no locator (or an empty one): the device's
    # own ids find it.
    fs.add(GPU, group=12, hidden=True)
    view = {'uuid': 'dev-1', 'vendor_id': '10de', 'product_id': '2330',
            'pci_address': None}
    assert host.attach(LEASE, [view]) == {'dev-1': GPU}
    host.detach(LEASE, [view])
    assert not pci.exists(GPU, fs.root)


def test_an_attach_with_a_bad_locator_is_refused_naming_the_field(
        fs, host, tmp_path):
    fs.add(GPU, group=12, hidden=True)
    with pytest.raises(exception.DriverError) as e:
        host.attach(LEASE, [_device(vendor_id='10de; rm -rf')])
    assert 'device dev-1: locator vendor_id' in e.value.message
    assert _writes_but_rescans(fs) == []
    assert fs.writes == []


def test_a_restarted_host_gets_its_held_functions_back_on_vfio(
        fs, host, privileged, nova_conf, tmp_path):
    fs.add(GPU, group=12, driver='nouveau', hidden=True)
    host.attach(LEASE, [dict(_device(), lease_uuid='lease-1')])
    # The host rebooted: the fabric kept the device composed, the kernel
    # enumerated it again and its own driver took it.
    fs._destroy(GPU)
    fs.add(GPU, group=12, driver='nouveau')
    again = _devices(fs, privileged, nova_conf, tmp_path, timeout=1)
    assert again.start() == []
    # What the conductor is told: the lease's device is bound again.
    assert again.restore() == [{
        'lease_uuid': 'lease-1', 'device_uuid': 'dev-1', 'address': GPU,
        'ok': True, 'message': '%s is bound to vfio-pci again after the '
                               'host restarted' % GPU}]
    assert fs.driver_of(GPU) == pci.VFIO_DRIVER
    assert _state(tmp_path)['dev-1']['address'] == GPU
    # An agent restarted within that boot finds it bound: nothing to say.
    third = _devices(fs, privileged, nova_conf, tmp_path, timeout=1)
    assert third.start() == []
    assert third.restore() == []


def test_a_held_function_gone_while_the_agent_was_away_is_reported(
        fs, host, privileged, nova_conf, tmp_path):
    fs.add(GPU, group=12, hidden=True)
    host.attach(LEASE, [_device()])
    fs._destroy(GPU)
    again = _devices(fs, privileged, nova_conf, tmp_path, timeout=1)
    assert again.start() == []
    results = again.restore()
    assert [(r['device_uuid'], r['address'], r['ok']) for r in results] == [
        ('dev-1', GPU, False)]
    assert 'no PCI function with ids 10de:2330' in results[0]['message']
    # Still recorded: the unbind that follows has nothing to remove, and
    # says so instead of failing.
    assert _state(tmp_path)['dev-1']['address'] == GPU
    again.detach(LEASE, [_device()])
    assert _state(tmp_path) == {}


def test_an_unrecorded_function_is_removed_before_the_fabric_unbind(
        fs, privileged, nova_conf, tmp_path):
    """The agent died after the fabric composed the device and before it
    noted the function, which appeared meanwhile. The restarted agent
    (same boot of the host) holds no record of it, yet the detach finds
    it by its locator among the functions that are not the host's own
    and takes it off the bus."""
    _boot(fs, 'boot-1')
    # A host function of the very same model: never to be touched.
    own = '0000:40:00.0'
    fs.add(own, group=11, driver='nouveau')
    first = _devices(fs, privileged, nova_conf, tmp_path, timeout=1)
    assert first.start() == []
    assert own in first.baseline
    fs.add(GPU, group=12)  # composed while the agent was dead
    again = _devices(fs, privileged, nova_conf, tmp_path, timeout=1)
    assert again.start() == []
    assert GPU not in again.baseline
    again.detach(LEASE, [_device()])
    assert not pci.exists(GPU, fs.root)
    assert pci.exists(own, fs.root)
    assert fs.driver_of(own) == 'nouveau'
    # Nothing left to find: a second detach (a retried unbind) is fine.
    again.detach(LEASE, [_device()])


def test_an_unrecorded_device_leaves_other_leases_functions_alone(
        fs, host, privileged, nova_conf, tmp_path):
    _boot(fs, 'boot-1')
    fresh = _devices(fs, privileged, nova_conf, tmp_path, timeout=1)
    assert fresh.start() == []
    fs.add(GPU, group=12, hidden=True)
    fresh.attach({'uuid': 'lease-2'}, [_device('dev-2')])
    # dev-1 was never composed here: its detach finds nothing of its own.
    fresh.detach(LEASE, [_device('dev-1')])
    assert fs.driver_of(GPU) == pci.VFIO_DRIVER
    assert {u: r['address'] for u, r in _state(tmp_path).items()} == {
        'dev-2': GPU}


def test_unrecorded_devices_that_cannot_be_told_apart_are_left(
        fs, privileged, nova_conf, tmp_path):
    """Two new functions of one model and one unrecorded device: which
    is its function cannot be told, so none is removed (the fabric's
    unbind takes it); two unrecorded devices of that model in one
    detach are the lease's both and both go."""
    _boot(fs, 'boot-1')
    first = _devices(fs, privileged, nova_conf, tmp_path, timeout=1)
    assert first.start() == []
    other = '0000:42:00.0'
    fs.add(GPU, group=12)
    fs.add(other, group=13)
    again = _devices(fs, privileged, nova_conf, tmp_path, timeout=1)
    assert again.start() == []
    again.detach(LEASE, [_device('dev-1')])
    assert pci.exists(GPU, fs.root) and pci.exists(other, fs.root)
    again.detach(LEASE, [_device('dev-1'), _device('dev-2')])
    assert not pci.exists(GPU, fs.root)
    assert not pci.exists(other, fs.root)


def test_an_unrecorded_function_that_will_not_go_fails_the_detach(
        fs, privileged, nova_conf, tmp_path, monkeypatch):
    _boot(fs, 'boot-1')
    first = _devices(fs, privileged, nova_conf, tmp_path, timeout=1)
    assert first.start() == []
    fs.add(GPU, group=12)

    def refuse(*args, **kwargs):
        raise OSError(13, 'Permission denied')
    monkeypatch.setattr(privileged, 'detach_unrecorded_function', refuse)
    with pytest.raises(exception.DriverError) as caught:
        first.detach(LEASE, [_device()])
    assert 'dev-1' in caught.value.message
    assert 'needs root' in caught.value.message


def test_a_write_refused_as_root_says_what_to_check(fs, host,
                                                    monkeypatch):
    # The privileged functions raise one PciError whose code says the
    # kernel refused; the agent turns that code, not a class name, into
    # its advice.
    fs.add(GPU, group=12, hidden=True)
    host.attach(LEASE, [_device()])

    def refused(path, value):
        raise PermissionError(13, 'Permission denied')

    monkeypatch.setattr(priv_pci, 'WRITER', refused)
    with pytest.raises(exception.DriverError) as caught:
        host.detach(LEASE, [_device()])
    assert caught.value.message.startswith(
        'removing device dev-1 at %s from this host: ' % GPU)
    assert "check the agent's [composable_sys_admin] helper_command" in \
        caught.value.message
    assert pci.exists(GPU, fs.root)


def test_two_leases_racing_for_devices_of_one_model_guess_nothing(
        fs, host):
    """Two leases' attaches of one GPU model run at once, both functions
    on the bus: nothing tells which is whose, so both are refused (the
    searches take turns; neither binds a function the other may own),
    and the faults name both functions."""
    other = GPU.replace('41', '42')
    fs.add(GPU, group=12, hidden=True)
    fs.add(other, group=13, hidden=True)
    results, errors = {}, []
    start = threading.Barrier(2)

    def attach(lease, uuid):
        start.wait(30)
        try:
            results.update(host.attach({'uuid': lease}, [_device(uuid)]))
        except exception.DriverError as exc:
            errors.append(exc.message)
    threads = [threading.Thread(target=attach, args=('lease-%d' % i,
                                                     'dev-%d' % i))
               for i in (1, 2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert results == {}
    assert len(errors) == 2
    assert all('%s, %s' % (GPU, other) in e for e in errors)
    assert fs.driver_of(GPU) is None and fs.driver_of(other) is None


def _boot(fs, boot_id):
    os.makedirs(fs.path('proc/sys/kernel/random'), exist_ok=True)
    fs._put('proc/sys/kernel/random/boot_id', boot_id + '\n')


def test_a_function_composed_while_the_agent_was_down_is_not_the_hosts(
        fs, privileged, nova_conf, tmp_path):
    _boot(fs, 'boot-1')
    first = _devices(fs, privileged, nova_conf, tmp_path, timeout=1)
    assert first.start() == []
    # The fabric composed the GPU while no agent ran; it came up.
    fs.add(GPU, group=12)
    again = _devices(fs, privileged, nova_conf, tmp_path, timeout=1)
    assert again.start() == []
    assert GPU not in again.baseline
    assert again.attach(LEASE, [_device()]) == {'dev-1': GPU}
    again.detach(LEASE, [_device()])
    # Another boot: what is on the bus then is the host's own.
    fs.add(GPU, group=12)
    _boot(fs, 'boot-2')
    rebooted = _devices(fs, privileged, nova_conf, tmp_path, timeout=1)
    assert rebooted.start() == []
    assert GPU in rebooted.baseline
    with pytest.raises(exception.DriverError):
        rebooted.attach(LEASE, [_device()])


# Nova's device_spec.

def _nova(nova_conf, *specs):
    nova_conf.write_text('[DEFAULT]\ndebug = true\n[pci]\n' + ''.join(
        'device_spec = %s\n' % s for s in specs))


def test_a_device_spec_matching_the_device_refuses_the_attach(
        fs, host, nova_conf):
    _nova(nova_conf, '{"address": "0000:03:00.0"}',
          '{"vendor_id": "10de", "product_id": "2330"}')
    fs.add(GPU, group=12, hidden=True)
    with pytest.raises(exception.DriverError) as e:
        host.attach(LEASE, [_device()])
    message = e.value.message
    assert '[pci] device_spec entry' in message
    assert '"product_id": "2330"' in message
    assert 'Change that entry' in message and 'restart nova-compute' in (
        message)
    assert fs.driver_of(GPU) is None
    assert _writes_but_rescans(fs) == []
    # A spec naming only the host's own function lets it through.
    _nova(nova_conf, '{"address": "0000:03:00.0"}')
    assert host.attach(LEASE, [_device()]) == {'dev-1': GPU}


def test_no_nova_conf_holds_no_specs(fs, host, nova_conf):
    assert not nova_conf.exists()
    fs.add(GPU, group=12, hidden=True)
    assert host.attach(LEASE, [_device()]) == {'dev-1': GPU}


@pytest.mark.parametrize('spec', ['{}', '{"address": "*:*:*.*"}',
                                  '[{"vendor_id": "*"}]', 'not json'])
def test_a_device_spec_matching_everything_refuses_device_work(
        fs, privileged, nova_conf, tmp_path, spec):
    _nova(nova_conf, spec)
    devices = _devices(fs, privileged, nova_conf, tmp_path)
    problems = devices.start()
    assert len(problems) == 1 and '[pci] device_spec' in problems[0]
    fs.add(GPU, group=12, hidden=True)
    with pytest.raises(exception.DriverError) as e:
        devices.attach(LEASE, [_device()])
    assert 'device work is refused on this host' in e.value.message
    assert fs.writes == []


def test_a_device_spec_matching_a_held_device_refuses_at_start(
        fs, host, privileged, nova_conf, tmp_path):
    fs.add(GPU, group=12, hidden=True)
    host.attach(LEASE, [_device()])
    _nova(nova_conf, '{"vendor_id": "10de"}')
    problems = _devices(fs, privileged, nova_conf, tmp_path).start()
    assert len(problems) == 1
    assert 'matches the fabric device' in problems[0]


def test_an_unreadable_nova_conf_refuses_device_work(
        fs, privileged, tmp_path):
    devices = _devices(fs, privileged, tmp_path, tmp_path)  # a directory
    problems = devices.start()
    assert len(problems) == 1 and 'cannot read Nova' in problems[0]
    assert 'nova_config_files' in problems[0]


def test_a_host_without_iommu_refuses_device_work(fs, privileged,
                                                  nova_conf, tmp_path):
    for group in ('3', '7'):
        for name in os.listdir(fs.path('sys/kernel/iommu_groups', group,
                                       'devices')):
            os.unlink(fs.path('sys/kernel/iommu_groups', group, 'devices',
                              name))
        os.rmdir(fs.path('sys/kernel/iommu_groups', group, 'devices'))
        os.rmdir(fs.path('sys/kernel/iommu_groups', group))
    devices = _devices(fs, privileged, nova_conf, tmp_path)
    problems = devices.start()
    assert len(problems) == 1 and 'intel_iommu=on' in problems[0]
    with pytest.raises(exception.DriverError) as e:
        devices.attach(LEASE, [_device()])
    assert 'intel_iommu=on' in e.value.message


# SR-IOV.

@pytest.fixture
def pf(fs):
    fs.add('0000:41:00.0', vendor='0x15b3', device='0x1017',
           cls='0x020000', driver='mlx5_core', group=20, totalvfs=8)
    return '0000:41:00.0'


def test_set_virtual_functions_through_zero(fs, host, pf):
    result = host.set_virtual_functions(pf, 2)
    assert result['pf_address'] == pf
    assert [v['address'] for v in result['vfs']] == ['0000:41:10.0',
                                                     '0000:41:10.1']
    assert result['vfs'][0] == {'address': '0000:41:10.0',
                                'vendor_id': '15b3', 'product_id': '101e',
                                'iommu_group': '100'}
    fs.writes.clear()
    assert len(host.set_virtual_functions(pf, 3)['vfs']) == 3
    assert fs.writes == [
        ('sys/bus/pci/devices/%s/sriov_numvfs' % pf, '0'),
        ('sys/bus/pci/devices/%s/sriov_numvfs' % pf, '3')]
    # The PF stays with the host.
    assert fs.driver_of(pf) == 'mlx5_core'


def test_a_leased_vf_keeps_its_pf_from_changing(fs, host, pf):
    host.set_virtual_functions(pf, 2)
    vf = '0000:41:10.1'
    assert host.attach(LEASE, [_device(
        'vf-1', vendor_id='15b3', product_id='101e', pci_address=vf)]) == {
            'vf-1': vf}
    fs.writes.clear()
    with pytest.raises(exception.DriverError) as e:
        host.set_virtual_functions(pf, 4)
    assert vf in e.value.message and 'unbind' in e.value.message
    assert fs.writes == [] and fs.driver_of(vf) == pci.VFIO_DRIVER
    # Asking for what there is changes nothing and is fine.
    assert len(host.set_virtual_functions(pf, 2)['vfs']) == 2
    assert fs.writes == []


def test_set_virtual_functions_refuses_bad_input(fs, host, pf):
    for address, count, words in ((pf, 9, '0 to 8'), (pf, -1, 'at least'),
                                  (pf, '2', 'integer'),
                                  ('41:00.0/..', 2, 'not a PCI address'),
                                  (test_pci.LOCAL, 1, 'no SR-IOV')):
        with pytest.raises(exception.DriverError) as e:
            host.set_virtual_functions(address, count)
        assert words in e.value.message
    assert fs.writes == []


def test_configured_vfs_are_created(fs, host, pf):
    problems = host.create_configured_vfs([pf + ':4', 'nonsense',
                                           '0000:99:00.0:2'])
    assert len(pci.virtual_functions(pf, fs.root)) == 4
    assert len(problems) == 2
    assert "'nonsense'" in problems[0]
    assert '0000:99:00.0' in problems[1]


# The privileged functions check what they are given, and refuse it
# with one error type and its code (what crosses the privsep boundary).

def _invalid(call, *args, **kwargs):
    """The message of the PciError of code INVALID_ARGUMENT that
    ``call`` refuses its arguments with."""
    with pytest.raises(pci.PciError) as e:
        call(*args, **kwargs)
    assert e.value.code is pci.ErrorCode.INVALID_ARGUMENT
    assert e.value.args == (pci.ErrorCode.INVALID_ARGUMENT.value,
                            e.value.message)
    return e.value.message


@pytest.mark.parametrize('address', [
    '../../../etc', '41:00.0', '0000:41:00.0/remove', '0000:41:00.8',
    '0000:41:00.0\n', '0000:4G:00.0', '0000:41:00.0 ', 41, None,
    b'0000:41:00.0'])
def test_privileged_functions_refuse_a_bad_address(fs, privileged,
                                                   address):
    for fn in (privileged.bind_vfio, privileged.release, privileged.remove):
        assert 'not a PCI address' in _invalid(fn, address)
    _invalid(privileged.set_num_vfs, address, 1)
    if address is not None:
        assert 'locator pci_address' in _invalid(
            privileged.find_function,
            dict(_device()['locator'], pci_address=address), [],
            timeout=1)
    _invalid(privileged.find_function, _device()['locator'], [address],
             timeout=1)
    assert fs.writes == []


@pytest.mark.parametrize('count,words', [
    (True, 'must be an integer'), ('4', 'must be an integer'),
    (4.0, 'must be an integer'), (-1, 'must be from 0 to'),
    (65536, 'must be from 0 to')])
def test_privileged_sriov_refuses_a_bad_count(fs, privileged, count,
                                              words):
    assert words in _invalid(privileged.set_num_vfs, GPU, count)
    assert fs.writes == []


@pytest.mark.parametrize('change,words', [
    ({'vendor_id': '10de/..'}, 'locator vendor_id'),
    ({'product_id': 0x2330}, 'locator product_id'),
    ({'serial': 'x' * 200}, 'locator serial'),
    ({'serial': 'bad\nserial'}, 'locator serial'),
    ({'fabric_ref': 'x' * 2000}, 'locator fabric_ref'),
    ('timeout', 'a timeout must be at most'),
    ('interchangeable', 'interchangeable must be from 1'),
    ('known', 'known must be a list'), ('locator', 'a locator is a dict')])
def test_privileged_find_refuses_bad_arguments(fs, privileged, change,
                                               words):
    locator, known = _device()['locator'], []
    kwargs = {'timeout': 1}
    if change == 'timeout':
        kwargs['timeout'] = privsep.MAX_TIMEOUT + 1
    elif change == 'interchangeable':
        kwargs['interchangeable'] = 0
    elif change == 'known':
        known = '0000:41:00.0'
    elif change == 'locator':
        locator = [locator]
    else:
        locator.update(change)
    assert words in _invalid(privileged.find_function, locator, known,
                             **kwargs)
    assert fs.writes == []


def test_privileged_functions_run_on_good_arguments(fs, privileged):
    fs.add(GPU, group=12, hidden=True)
    privileged.rescan()
    assert privileged.bind_vfio(GPU) is True
    assert privileged.release(GPU) is True
    assert privileged.remove(GPU) is True
    assert privileged.remove(GPU) is False


@pytest.mark.parametrize('kwargs,words', [
    ({'recorded': '../../dev/sda'}, 'not a PCI address'),
    ({'nova_conf_text': 42}, 'nova_conf_text must be text'),
    ({'nova_conf_text': 'x' * (priv_pci.MAX_NOVA_CONF + 1)},
     'nova_conf_text must be text'),
    ({'locator': {'vendor_id': '10de/..'}}, 'locator vendor_id')])
def test_privileged_attach_refuses_bad_arguments(fs, privileged, kwargs,
                                                 words):
    fs.add(GPU, group=12, hidden=True)
    call = {'locator': _device()['locator'], 'known': [], 'timeout': 1}
    call.update(kwargs)
    assert words in _invalid(privileged.attach_function, **call)
    assert fs.writes == []
    assert 'is not a PCI id' in _invalid(privileged.detach_function, GPU,
                                         '10de/..', None)


def test_privileged_errors_keep_their_code(fs, privileged):
    # A PCI error raised as root leaves with its own code: the agent
    # decides by it.
    with pytest.raises(pci.PciError) as e:
        privileged.find_function(_device()['locator'], [], timeout=0.01)
    assert e.value.code is pci.ErrorCode.NOT_FOUND
    assert 'no PCI function with ids 10de:2330' in e.value.message


@pytest.mark.parametrize('call,code', [
    (('find_function', ({'vendor_id': '10de', 'product_id': '2330'}, []),
      {'timeout': 0.01}), 'NOT_FOUND'),
    (('bind_vfio', ('../../etc',), {}), 'INVALID_ARGUMENT')])
def test_errors_cross_the_privsep_channel_with_their_code(fs, privileged,
                                                          call, code):
    # oslo.privsep's own daemon side runs the function and answers the
    # error as (class path, arguments); its channel's serialiser carries
    # that; its client rebuilds the error from them. Only the socket pair
    # and the in-process daemon stand in for the root process.
    import socket

    from oslo_privsep import comm
    from oslo_privsep import daemon
    from oslo_utils import importutils

    name, args, kwargs = call
    server = daemon.Daemon(None, privsep.sys_admin_pctxt)
    reply = server._process_cmd(
        'msg-1', comm.Message.CALL, 'composable.privsep.pci.%s' % name,
        args, kwargs)
    assert reply[0] == comm.Message.ERR.value
    left, right = socket.socketpair()
    try:
        comm.Serializer(left).send(reply)
        received = next(iter(comm.Deserializer(right)))
    finally:
        left.close()
        right.close()
    rebuilt = importutils.import_class(received[1])(*received[2])
    assert isinstance(rebuilt, pci.PciError)
    assert rebuilt.code is pci.ErrorCode[code]
    assert rebuilt.message == str(rebuilt) and rebuilt.message


class _Counting(object):
    """The privileged functions, counting the calls (each one a round
    trip to the privsep daemon on a host)."""

    def __init__(self, privileged):
        self.privileged = privileged
        self.calls = []

    def __getattr__(self, name):
        function = getattr(self.privileged, name)

        def call(*args, **kwargs):
            self.calls.append(name)
            return function(*args, **kwargs)
        return call


def test_attach_and_detach_are_one_privileged_call_each(
        fs, privileged, nova_conf, tmp_path):
    counting = _Counting(privileged)
    devices = host_pci.HostPciDevices(
        ops=counting, root=fs.root, find_timeout=5,
        nova_config_files=[str(nova_conf)],
        state_file=str(tmp_path / 'state' / 'pci-devices.json'),
        kernel_release='6.1.0-test')
    assert devices.start() == []
    fs.add(GPU, group=12, driver='nouveau', hidden=True)
    assert devices.attach(LEASE, [_device()]) == {'dev-1': GPU}
    assert counting.calls == ['attach_function']
    assert fs.driver_of(GPU) == pci.VFIO_DRIVER
    devices.detach(LEASE, [_device()])
    assert counting.calls == ['attach_function', 'detach_function']
    assert not pci.exists(GPU, fs.root)


def test_the_agent_runs_pci_work_through_privsep_by_default():
    assert host_pci.HostPciDevices().ops is priv_pci
    assert priv_pci.ROOT == '/'
    assert priv_pci.WRITER is pci.write


# The agent's RPC methods.

@pytest.fixture
def sysfs_conf():
    conf.CONF.set_override('pci_backend', 'sysfs', 'compute_node')
    yield conf.CONF
    conf.CONF.clear_override('pci_backend', 'compute_node')


def test_the_agent_delegates_devices_to_the_host(fs, host, pf, sysfs_conf):
    agent = manager.AgentManager('compute-0', ['compute_node'],
                                 host_pci=host)
    assert not agent.simulate_devices
    fs.add(GPU.replace('41', '42'), group=12, hidden=True)
    assert agent.compute.attach_devices(None, LEASE, [_device()]) == {
        'dev-1': '0000:42:00.0'}
    assert agent.device_attachments == {'lease-1': {'dev-1': '0000:42:00.0'}}
    assert fs.driver_of('0000:42:00.0') == pci.VFIO_DRIVER
    agent.compute.detach_devices(None, LEASE, [_device()])
    assert agent.device_attachments == {}
    assert not pci.exists('0000:42:00.0', fs.root)
    vfs = agent.compute.set_sriov_vfs(None, pf, 1)['vfs']
    assert [v['address'] for v in vfs] == ['0000:41:10.0']


def test_the_agent_refuses_when_start_checks_failed(fs, privileged,
                                                    nova_conf, tmp_path,
                                                    sysfs_conf):
    _nova(nova_conf, '{}')
    devices = _devices(fs, privileged, nova_conf, tmp_path)
    agent = manager.AgentManager('compute-0', ['compute_node'],
                                 host_pci=devices)
    conf.CONF.set_override('hook_socket', '', 'compute_node')
    try:
        agent.start()
    finally:
        conf.CONF.clear_override('hook_socket', 'compute_node')
        agent.stop()
    fs.add(GPU, group=12, hidden=True)
    with pytest.raises(exception.DriverError) as e:
        agent.compute.attach_devices(None, LEASE, [_device()])
    assert 'matches every PCI device' in e.value.message
    assert fs.driver_of(GPU) is None


def test_pci_backend_follows_the_memory_exporter():
    assert backends.pci_backend() == 'noop'
    assert manager.AgentManager('compute-0',
                                ['compute_node']).simulate_devices
    conf.CONF.set_override('memory_exporter', 'tgt', 'agent')
    try:
        assert backends.pci_backend() == 'sysfs'
        conf.CONF.set_override('pci_backend', 'noop', 'compute_node')
        assert backends.pci_backend() == 'noop'
    finally:
        conf.CONF.clear_override('memory_exporter', 'agent')
        conf.CONF.clear_override('pci_backend', 'compute_node')


def test_simulated_devices_only_log(caplog):
    caplog.set_level(logging.DEBUG)
    agent = manager.AgentManager('compute-0', ['compute_node'])
    result = agent.compute.set_sriov_vfs(None, '0000:41:00.0', 4)
    assert result['simulated'] and result['vfs'] == []
    assert 'would give 0000:41:00.0 4 virtual function(s)' in caplog.text


def test_agent_start_creates_the_configured_vfs(fs, host, pf, sysfs_conf):
    agent = manager.AgentManager('compute-0', ['compute_node'],
                                 host_pci=host)
    conf.CONF.set_override('sriov_numvfs', [pf + ':3'], 'compute_node')
    conf.CONF.set_override('hook_socket', '', 'compute_node')
    try:
        agent.start()
    finally:
        conf.CONF.clear_override('sriov_numvfs', 'compute_node')
        conf.CONF.clear_override('hook_socket', 'compute_node')
        agent.stop()
    assert host.refusal is None
    assert pci.virtual_functions(pf, fs.root) == [
        '0000:41:10.0', '0000:41:10.1', '0000:41:10.2']


class _Conductor(object):
    """The conductor's side of report_devices_restored as the agent sees
    it (tests/unit/conductor/test_device_reports.py runs the real one)."""

    def __init__(self, error=None):
        self.reports = []
        self.error = error

    def report_devices_restored(self, context, host, results):
        if self.error:
            raise self.error
        self.reports.append((host, results))


def _start_agent(devices, conductor):
    agent = manager.AgentManager('compute-0', ['compute_node'],
                                 host_pci=devices, conductor_api=conductor)
    conf.CONF.set_override('hook_socket', '', 'compute_node')
    try:
        agent.start()
    finally:
        conf.CONF.clear_override('hook_socket', 'compute_node')
        agent.stop()
    return agent


def test_the_agent_tells_the_conductor_what_it_bound_again(
        fs, host, privileged, nova_conf, tmp_path, sysfs_conf):
    other = GPU.replace('41', '42')
    fs.add(GPU, group=12, hidden=True)
    fs.add(other, device='0x20b5', group=13, hidden=True)
    host.attach(LEASE, [dict(_device(), lease_uuid='lease-1')])
    host.attach({'uuid': 'lease-2'}, [dict(
        _device('dev-2', product_id='20b5'), product_id='20b5',
        lease_uuid='lease-2')])
    # The host restarted: GPU is back without vfio-pci, the other is gone.
    fs._destroy(GPU)
    fs._destroy(other)
    fs.add(GPU, group=12, driver='nouveau')
    conductor = _Conductor()
    _start_agent(_devices(fs, privileged, nova_conf, tmp_path, timeout=1),
                 conductor)
    [(reporter, results)] = conductor.reports
    assert reporter == 'compute-0'
    assert [(r['lease_uuid'], r['device_uuid'], r['address'], r['ok'])
            for r in results] == [('lease-1', 'dev-1', GPU, True),
                                  ('lease-2', 'dev-2', other, False)]
    assert 'no PCI function with ids 10de:20b5' in results[1]['message']
    assert fs.driver_of(GPU) == pci.VFIO_DRIVER

    # Restarted again within that boot: nothing new to tell but the
    # device still missing.
    conductor = _Conductor()
    _start_agent(_devices(fs, privileged, nova_conf, tmp_path, timeout=1),
                 conductor)
    [(_host, results)] = conductor.reports
    assert [(r['device_uuid'], r['ok']) for r in results] == [
        ('dev-2', False)]


def test_an_agent_that_cannot_tell_the_conductor_still_starts(
        fs, host, privileged, nova_conf, tmp_path, sysfs_conf, caplog):
    fs.add(GPU, group=12, driver='nouveau', hidden=True)
    host.attach(LEASE, [dict(_device(), lease_uuid='lease-1')])
    fs._destroy(GPU)
    fs.add(GPU, group=12, driver='nouveau')
    devices = _devices(fs, privileged, nova_conf, tmp_path, timeout=1)
    _start_agent(devices, _Conductor(error=RuntimeError('no broker')))
    assert devices.refusal is None
    assert fs.driver_of(GPU) == pci.VFIO_DRIVER
    assert 'Could not tell the conductor' in caplog.text
    assert 'no broker' in caplog.text


def test_an_agent_that_never_listed_the_hosts_functions_takes_none(
        fs, privileged, nova_conf, tmp_path):
    """Start failed (the host's own functions are unknown): a detach of
    an unrecorded device removes nothing rather than guess."""
    fs.add(GPU, group=12)
    devices = _devices(fs, privileged, nova_conf, tmp_path, timeout=1)
    assert devices.baseline is None
    devices.detach(LEASE, [_device()])
    assert pci.exists(GPU, fs.root)


def test_the_unrecorded_detach_checks_what_it_is_given(fs, privileged):
    fs.add(GPU, group=12)
    locator = _device()['locator']
    for bad in ((dict(locator, vendor_id='10de; rm'), []),
                (locator, 'not a list'),
                (locator, ['../../etc'])):
        _invalid(privileged.detach_unrecorded_function, *bad)
    _invalid(privileged.detach_unrecorded_function, locator, [],
             interchangeable=0)
    assert pci.exists(GPU, fs.root)
    assert privileged.detach_unrecorded_function(locator, [GPU]) == {
        'address': None, 'done': 'absent'}
    assert privileged.detach_unrecorded_function(locator, []) == {
        'address': GPU, 'done': 'removed'}
    assert not pci.exists(GPU, fs.root)
