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

"""SR-IOV virtual functions leased one at a time: HostPciDevices creates
them (on demand) or finds them (pre-created) under their physical
function, binds one to vfio-pci per lease, releases it at detach and,
on demand, takes the VFs away once none is held. On the fake sysfs of
test_pci, whose fake kernel refuses to change a non-zero VF count as
Linux does."""

import threading

import pytest

from composable.agent.compute_node import host_pci
from composable.agent import manager
from composable.common import exception
from composable.common import sriov
from composable import privsep
from composable.privsep import pci as priv_pci
from composable.privsep import pci_sysfs as pci
from tests.unit.agent.compute_node import test_host_pci
from tests.unit.privsep import test_pci_sysfs as test_pci

PF = '0000:41:00.0'
NUMVFS = 'sys/bus/pci/devices/%s/sriov_numvfs' % PF

_devices = test_host_pci._devices


# The fixtures of test_host_pci: a fake sysfs with a host NIC and a PF
# offering 8 VFs, the privileged functions on it, the agent's side.

@pytest.fixture(name='fs')
def fake_sysfs(tmp_path):
    tree = test_pci.FakeSysfs(tmp_path / 'host')
    tree.add_driver(pci.VFIO_DRIVER)
    tree.add(test_pci.LOCAL, vendor='0x8086', device='0x1572',
             cls='0x020000', driver='i40e', group=3)
    tree.add(PF, vendor='0x15b3', device='0x1017', cls='0x020000',
             driver='mlx5_core', group=20, totalvfs=8)
    return tree


@pytest.fixture(name='privileged')
def privileged_in_process(fs, monkeypatch):
    privsep.sys_admin_pctxt.set_client_mode(False)
    monkeypatch.setattr(priv_pci, 'ROOT', fs.root)
    monkeypatch.setattr(priv_pci, 'WRITER', fs.write)
    yield priv_pci
    privsep.sys_admin_pctxt.set_client_mode(True)


@pytest.fixture(name='nova_conf')
def nova_conf_path(tmp_path):
    return tmp_path / 'nova.conf'


@pytest.fixture(name='host')
def host_devices(fs, privileged, nova_conf, tmp_path):
    devices = _devices(fs, privileged, nova_conf, tmp_path)
    assert devices.start() == []
    return devices


def _vf_device(index, count=3, mode=sriov.ON_DEMAND, uuid=None, pf_address=PF,
               vendor_id='15b3', product_id='101e'):
    return {'uuid': uuid or 'vf-dev-%d' % index, 'vendor_id': vendor_id,
            'product_id': product_id, 'pci_address': None,
            'address': sriov.vf_device_address(pf_address, index),
            'locator': {'vendor_id': vendor_id, 'product_id': product_id,
                        'serial': None, 'pci_address': None,
                        'fabric_ref': sriov.vf_device_address(pf_address,
                                                              index)},
            'sriov': {'pf_address': pf_address, 'vf_index': index,
                      'vf_count': count, 'vf_mode': mode}}


def _lease(n):
    return {'uuid': 'lease-%d' % n}


def _numvfs_writes(fs):
    return [value for path, value in fs.writes if path == NUMVFS]


def test_on_demand_vfs_come_with_the_first_lease_and_go_with_the_last(
        fs, host):
    assert host.attach(_lease(1), [_vf_device(1)]) == {
        'vf-dev-1': '0000:41:10.1'}
    # All of the pool's VFs at once: the kernel changes a count only
    # through 0, which would destroy a VF another lease holds.
    assert _numvfs_writes(fs) == ['3']
    assert pci.virtual_functions(PF, fs.root) == [
        '0000:41:10.0', '0000:41:10.1', '0000:41:10.2']
    assert fs.driver_of('0000:41:10.1') == pci.VFIO_DRIVER
    assert fs.driver_of('0000:41:10.0') is None
    # The PF stays with the host.
    assert fs.driver_of(PF) == 'mlx5_core'

    assert host.attach(_lease(2), [_vf_device(0)]) == {
        'vf-dev-0': '0000:41:10.0'}
    assert _numvfs_writes(fs) == ['3']

    host.detach(_lease(1), [_vf_device(1)])
    # Released, still on the bus: lease 2 holds a VF of the same PF.
    assert fs.driver_of('0000:41:10.1') is None
    assert pci.exists('0000:41:10.1', fs.root)
    assert fs.driver_of('0000:41:10.0') == pci.VFIO_DRIVER
    assert _numvfs_writes(fs) == ['3']

    host.detach(_lease(2), [_vf_device(0)])
    assert _numvfs_writes(fs) == ['3', '0']
    assert pci.virtual_functions(PF, fs.root) == []
    assert host.records.devices == {}
    # Detaching again is fine and changes nothing.
    host.detach(_lease(2), [_vf_device(0)])
    assert _numvfs_writes(fs) == ['3', '0']


def test_a_restarted_agent_keeps_the_vfs_of_its_leases(
        fs, host, privileged, nova_conf, tmp_path):
    host.attach(_lease(1), [_vf_device(2)])
    again = _devices(fs, privileged, nova_conf, tmp_path)
    assert again.start() == []
    # Binding again after a conductor timeout: the same VF, no change.
    assert again.attach(_lease(1), [_vf_device(2)]) == {
        'vf-dev-2': '0000:41:10.2'}
    assert _numvfs_writes(fs) == ['3']
    with pytest.raises(exception.DriverError) as changed:
        again.set_virtual_functions(PF, 1)
    assert '0000:41:10.2 is leased' in changed.value.message
    again.detach(_lease(1), [_vf_device(2)])
    assert pci.virtual_functions(PF, fs.root) == []


def test_precreated_vfs_are_used_and_kept(fs, host):
    host.set_virtual_functions(PF, 4)
    fs.writes.clear()
    device = _vf_device(3, count=4, mode=sriov.PRECREATED)
    assert host.attach(_lease(1), [device]) == {
        'vf-dev-3': '0000:41:10.3'}
    assert fs.driver_of('0000:41:10.3') == pci.VFIO_DRIVER
    host.detach(_lease(1), [device])
    assert _numvfs_writes(fs) == []
    assert len(pci.virtual_functions(PF, fs.root)) == 4
    assert fs.driver_of('0000:41:10.3') is None


def test_missing_precreated_vfs_fail_saying_how_to_make_them(fs, host):
    device = _vf_device(1, count=2, mode=sriov.PRECREATED)
    with pytest.raises(exception.DriverError) as missing:
        host.attach(_lease(1), [device])
    assert ('[compute_node]sriov_numvfs = 0000:41:00.0:2'
            in missing.value.message)
    assert fs.writes == [] or all(p.endswith('rescan')
                                  for p, _ in fs.writes)
    assert host.records.devices == {}


def test_missing_pf_fails_and_changes_nothing(fs, host):
    with pytest.raises(exception.DriverError) as missing:
        host.attach(_lease(1), [_vf_device(0, pf_address='0000:42:00.0')])
    assert ('physical function 0000:42:00.0 of device vf-dev-0 is not on '
            'this host' in missing.value.message)
    assert 'lspci -D' in missing.value.message
    assert fs.writes == []
    # Detaching what was never attached is fine.
    host.detach(_lease(1), [_vf_device(0, pf_address='0000:42:00.0')])


def test_a_vf_given_as_pf_is_refused(fs, host):
    host.set_virtual_functions(PF, 2)
    fs.writes.clear()
    with pytest.raises(exception.DriverError) as vf:
        host.attach(_lease(1), [_vf_device(0, pf_address='0000:41:10.0')])
    assert 'is itself a virtual function' in vf.value.message
    assert fs.writes == []


def test_a_vf_held_by_another_device_is_refused(fs, host):
    host.attach(_lease(1), [_vf_device(0, uuid='first')])
    with pytest.raises(exception.DriverError) as held:
        host.attach(_lease(2), [_vf_device(0, uuid='second')])
    assert 'held by device first' in held.value.message
    assert fs.driver_of('0000:41:10.0') == pci.VFIO_DRIVER


def test_wrong_vf_ids_are_refused(fs, host):
    with pytest.raises(exception.DriverError) as wrong:
        host.attach(_lease(1), [_vf_device(0, vendor_id='8086',
                                           product_id='10ed')])
    assert 'ids 15b3:101e' in wrong.value.message
    assert fs.driver_of('0000:41:10.0') is None


def test_concurrent_binds_create_the_vfs_once(fs, host):
    barrier = threading.Barrier(3)
    results, errors = {}, []

    def bind(i):
        barrier.wait()
        try:
            results.update(host.attach(_lease(i), [_vf_device(i)]))
        except Exception as exc:
            errors.append(exc)

    threads = [threading.Thread(target=bind, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    assert results == {'vf-dev-0': '0000:41:10.0',
                       'vf-dev-1': '0000:41:10.1',
                       'vf-dev-2': '0000:41:10.2'}
    assert _numvfs_writes(fs) == ['3']
    assert all(fs.driver_of(a) == pci.VFIO_DRIVER for a in results.values())


def test_an_unbind_racing_a_bind_never_takes_the_new_vf(fs, host):
    # Lease 1 holds VF 0; lease 1 lets go while lease 2 binds VF 1.
    # Whichever runs first, lease 2 ends with its VF on vfio-pci.
    for _ in range(5):
        host.attach(_lease(1), [_vf_device(0)])
        barrier = threading.Barrier(2)
        errors = []

        def run(fn):
            barrier.wait()
            try:
                fn()
            except Exception as exc:
                errors.append(exc)

        threads = [
            threading.Thread(target=run, args=(
                lambda: host.detach(_lease(1), [_vf_device(0)]),)),
            threading.Thread(target=run, args=(
                lambda: host.attach(_lease(2), [_vf_device(1)]),))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert errors == []
        assert fs.driver_of('0000:41:10.1') == pci.VFIO_DRIVER
        assert set(host.records.devices) == {'vf-dev-1'}
        host.detach(_lease(2), [_vf_device(1)])
        assert pci.virtual_functions(PF, fs.root) == []


def test_the_agent_attaches_and_detaches_vfs(fs, host):
    agent = manager.AgentManager('compute-0', ['compute_node'],
                                 host_pci=host)
    assert agent.compute.attach_devices(None, _lease(1), [_vf_device(1)]) == {
        'vf-dev-1': '0000:41:10.1'}
    assert agent.device_attachments == {'lease-1': {
        'vf-dev-1': '0000:41:10.1'}}
    agent.compute.detach_devices(None, _lease(1), [_vf_device(1)])
    assert agent.device_attachments == {}
    assert pci.virtual_functions(PF, fs.root) == []


@pytest.mark.parametrize('sriov_entry, words', [
    ({'pf_address': 'nope', 'vf_index': 0, 'vf_count': 1},
     'not a usable virtual function'),
    ({'pf_address': PF, 'vf_index': 4, 'vf_count': 4},
     'virtual function 4 of a pool of 4'),
    ({'pf_address': PF, 'vf_count': 4}, 'not a usable virtual function'),
])
def test_bad_sriov_entries_are_refused(fs, host, sriov_entry, words):
    device = dict(_vf_device(0), sriov=sriov_entry)
    with pytest.raises(exception.DriverError) as bad:
        host.attach(_lease(1), [device])
    assert words in bad.value.message
    assert fs.writes == []


def test_vfs_made_by_an_agent_that_died_before_binding_are_removed(
        fs, host, privileged, nova_conf, tmp_path, monkeypatch):
    # The agent made the VFs and died before it bound (and recorded) one.
    def die(*args, **kwargs):
        raise SystemExit('killed')

    monkeypatch.setattr(host, '_attach_one', die)
    with pytest.raises(SystemExit):
        host.attach(_lease(1), [_vf_device(1)])
    assert len(pci.virtual_functions(PF, fs.root)) == 3
    assert host.records.devices == {}
    # The restarted agent is asked to detach (the conductor's teardown of
    # the failed bind): nothing of the PF's VFs is held, so they go.
    again = _devices(fs, privileged, nova_conf, tmp_path)
    assert again.start() == []
    again.detach(_lease(1), [_vf_device(1)])
    assert pci.virtual_functions(PF, fs.root) == []
    assert fs.driver_of(PF) == 'mlx5_core'


class _RecordingBus(object):
    """SysfsPci on the fake tree, noting each method called: the only way
    HostPciDevices may reach the PCI bus."""

    def __init__(self, bus):
        self._bus = bus
        self.calls = []

    def __getattr__(self, name):
        method = getattr(self._bus, name)

        def call(*args, **kwargs):
            self.calls.append(name)
            return method(*args, **kwargs)
        return call


class _NoPrivilegedCalls(object):
    def __getattr__(self, name):
        raise AssertionError('privileged %s called around the bus' % name)


def test_the_vf_path_works_only_through_the_bus(
        fs, privileged, nova_conf, tmp_path):
    # The agent's own root and privileged functions point nowhere: a
    # read of sysfs or a privileged call that bypassed the bus would see
    # no PF, or fail.
    bus = _RecordingBus(host_pci.SysfsPci(privileged, fs.root))
    host = host_pci.HostPciDevices(
        ops=_NoPrivilegedCalls(), root=str(tmp_path / 'not-the-host'),
        find_timeout=5, nova_config_files=[str(nova_conf)],
        state_file=str(tmp_path / 'state' / 'pci-devices.json'),
        kernel_release='6.1.0-test', bus=bus)
    assert host.start() == []
    assert host.attach(_lease(1), [_vf_device(1)]) == {
        'vf-dev-1': '0000:41:10.1'}
    assert fs.driver_of('0000:41:10.1') == pci.VFIO_DRIVER
    with pytest.raises(exception.DriverError) as vf:
        host.attach(_lease(2), [_vf_device(0, pf_address='0000:41:10.0')])
    assert 'is itself a virtual function' in vf.value.message
    host.detach(_lease(1), [_vf_device(1)])
    assert fs.driver_of('0000:41:10.1') is None
    assert pci.virtual_functions(PF, fs.root) == []
    assert host.records.devices == {}
    for method in ('exists', 'is_virtual_function', 'virtual_functions',
                   'set_num_vfs', 'attach_function', 'release'):
        assert method in bus.calls, method
    with pytest.raises(exception.DriverError) as missing:
        host.attach(_lease(3), [_vf_device(0, pf_address='0000:42:00.0')])
    assert 'is not on this host' in missing.value.message
