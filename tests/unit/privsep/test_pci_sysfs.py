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

"""The compute host's PCI handling on a fake sysfs: a tree laid out as
the kernel's, and a fake kernel that reacts to the writes the way Linux
does (rescan, unbind, drivers_probe, remove, sriov_numvfs)."""

import ast
import errno
import io
import json
import os
import shutil
import subprocess
import sys
import threading

import pytest

from composable.common import locator as locator_mod
from composable.privsep import pci_sysfs as pci

GPU = '0000:41:00.0'
NIC = '0000:41:00.1'
BRIDGE = '0000:40:01.0'
LOCAL = '0000:03:00.0'
DEVROOT = 'pci0000:00'


def _dsn_config(serial, before=True):
    """256 bytes of header, then an AER capability pointing to a Device
    Serial Number capability holding ``serial``."""
    config = bytearray(4096)
    offset = 0x100
    if before:
        config[0x100:0x104] = (0x0001 | 1 << 16 | 0x140 << 20).to_bytes(
            4, 'little')
        offset = 0x140
    config[offset:offset + 4] = (0x0003 | 1 << 16).to_bytes(4, 'little')
    config[offset + 4:offset + 8] = (serial & 0xffffffff).to_bytes(
        4, 'little')
    config[offset + 8:offset + 12] = (serial >> 32).to_bytes(4, 'little')
    return bytes(config)


class FakeSysfs(object):
    """A sysfs tree under ``root`` and the kernel behind its files.

    ``write`` is the writer the functions under test are given; every
    write is recorded in ``writes`` as (path relative to root, value).
    """

    def __init__(self, root):
        self.root = str(root)
        self.writes = []
        self.kernel_lock = threading.RLock()
        self.hidden = {}
        self.native = {}
        # PF address -> the driver its VFs are probed with when made
        # (while sriov_drivers_autoprobe, where the PF has it, is not 0).
        self.vf_drivers = {}
        # Drivers that let go of a function late: their unbind leaves a
        # release that runs right after the next probe of the function,
        # taking whatever driver bound it then (the nvme driver's removal
        # of a controller it could not start).
        self.late_releasers = set()
        self._late_release = set()
        for path in ('sys/bus/pci/devices', 'sys/bus/pci/drivers',
                     'sys/kernel/iommu_groups', 'dev/vfio',
                     'sys/devices/' + DEVROOT):
            os.makedirs(self.path(path), exist_ok=True)
        for name in ('rescan', 'drivers_probe'):
            self._put('sys/bus/pci/' + name, '')

    def path(self, *parts):
        return os.path.join(self.root, *parts)

    def _put(self, rel, text, mode='w'):
        with open(self.path(rel), mode) as f:
            f.write(text)

    def _link(self, rel, target):
        os.symlink(target, self.path(rel))

    def dev(self, address, *parts):
        return os.path.join('sys/devices', DEVROOT, address, *parts)

    def add_driver(self, name):
        rel = 'sys/bus/pci/drivers/' + name
        if not os.path.isdir(self.path(rel)):
            os.makedirs(self.path(rel))
            for f in ('bind', 'unbind', 'new_id'):
                self._put(rel + '/' + f, '')

    def add(self, address, vendor='0x10de', device='0x2330',
            cls='0x030200', driver=None, group=None, totalvfs=None,
            config=None, hidden=False, physfn=None):
        """A function; ``hidden`` ones appear at the next rescan, and
        ``driver`` is the one the kernel's probe gives them."""
        spec = dict(vendor=vendor, device=device, cls=cls, driver=driver,
                    group=group, totalvfs=totalvfs, config=config,
                    physfn=physfn)
        if hidden:
            self.hidden[address] = spec
        else:
            self._create(address, **spec)

    def _create(self, address, vendor, device, cls, driver, group,
                totalvfs, config, physfn):
        os.makedirs(self.path(self.dev(address)))
        self._put(self.dev(address, 'vendor'), vendor + '\n')
        self._put(self.dev(address, 'device'), device + '\n')
        self._put(self.dev(address, 'class'), cls + '\n')
        self._put(self.dev(address, 'driver_override'), '(null)\n')
        self._put(self.dev(address, 'remove'), '')
        self._put(self.dev(address, 'config'),
                  config if config is not None else bytes(256), 'wb')
        self._link('sys/bus/pci/devices/' + address,
                   '../../../devices/%s/%s' % (DEVROOT, address))
        if group is not None:
            grp = 'sys/kernel/iommu_groups/%s' % group
            os.makedirs(self.path(grp, 'devices'), exist_ok=True)
            self._link(self.dev(address, 'iommu_group'),
                       '../../../kernel/iommu_groups/%s' % group)
            self._link('%s/devices/%s' % (grp, address),
                       '../../../../devices/%s/%s' % (DEVROOT, address))
        if totalvfs is not None:
            self._put(self.dev(address, 'sriov_totalvfs'),
                      '%d\n' % totalvfs)
            self._put(self.dev(address, 'sriov_numvfs'), '0\n')
        if physfn:
            self._link(self.dev(address, 'physfn'), '../' + physfn)
        self.native[address] = driver
        if driver:
            self._bind(address, driver)

    def _bind(self, address, name):
        self.add_driver(name)
        self._link(self.dev(address, 'driver'),
                   '../../../bus/pci/drivers/' + name)
        self._link('sys/bus/pci/drivers/%s/%s' % (name, address),
                   '../../../../devices/%s/%s' % (DEVROOT, address))
        if name == pci.VFIO_DRIVER:
            group = os.readlink(self.path(self.dev(address, 'iommu_group')))
            node = self.path('dev/vfio', os.path.basename(group))
            if not os.path.exists(node):
                self._put(node, '')

    def add_vf_driver(self, pf, name, autoprobe_file=True):
        """The VFs ``pf`` makes are probed with driver ``name``; with
        ``autoprobe_file`` the PF has sriov_drivers_autoprobe (1)."""
        self.add_driver(name)
        self.vf_drivers[pf] = name
        if autoprobe_file:
            self._put(self.dev(pf, 'sriov_drivers_autoprobe'), '1\n')

    def _unbind(self, address):
        name = os.path.basename(os.readlink(self.path(
            self.dev(address, 'driver'))))
        if name in self.late_releasers:
            self._late_release.add(address)
        os.unlink(self.path(self.dev(address, 'driver')))
        os.unlink(self.path('sys/bus/pci/drivers', name, address))

    def _destroy(self, address):
        if os.path.islink(self.path(self.dev(address, 'driver'))):
            self._unbind(address)
        if os.path.islink(self.path(self.dev(address, 'iommu_group'))):
            group = os.readlink(self.path(self.dev(address, 'iommu_group')))
            os.unlink(self.path('sys/kernel/iommu_groups',
                                os.path.basename(group), 'devices',
                                address))
        os.unlink(self.path('sys/bus/pci/devices', address))
        shutil.rmtree(self.path(self.dev(address)))

    def driver_of(self, address):
        try:
            return os.path.basename(os.readlink(self.path(
                self.dev(address, 'driver'))))
        except OSError:
            return None

    def read(self, address, name):
        with open(self.path(self.dev(address, name))) as f:
            return f.read().strip()

    def write(self, path, value):
        # The kernel serializes rescan, remove and binding of PCI
        # functions (pci_lock_rescan_remove, the device lock).
        with self.kernel_lock:
            self._write(path, value)

    def _write(self, path, value):
        rel = os.path.relpath(path, self.root)
        self.writes.append((rel, value))
        parts = rel.split(os.sep)
        if rel == 'sys/bus/pci/rescan':
            for address, spec in sorted(self.hidden.items()):
                self._create(address, **spec)
            self.hidden.clear()
        elif rel == 'sys/bus/pci/drivers_probe':
            address = value.strip()
            if self.driver_of(address) is None:
                override = self.read(address, 'driver_override')
                name = (override if override != '(null)'
                        else self.native.get(address))
                if name and os.path.isdir(self.path('sys/bus/pci/drivers',
                                                    name)):
                    self._bind(address, name)
            if address in self._late_release and \
                    self.driver_of(address) is not None:
                self._late_release.discard(address)
                self._unbind(address)
        elif parts[:4] == ['sys', 'bus', 'pci', 'devices']:
            address, attr = parts[4], '/'.join(parts[5:])
            if attr == 'driver/unbind':
                assert value == address
                self._unbind(address)
            elif attr == 'driver_override':
                self._put(self.dev(address, attr),
                          (value.strip() or '(null)') + '\n')
            elif attr == 'remove':
                self._destroy(address)
            elif attr == 'sriov_numvfs':
                self._set_vfs(address, int(value))
            elif attr == 'sriov_drivers_autoprobe':
                self._put(self.dev(address, attr), '%d\n' % int(value))
            else:
                raise AssertionError('unexpected write to %s' % rel)
        else:
            raise AssertionError('unexpected write to %s' % rel)

    def _set_vfs(self, address, count):
        current = int(self.read(address, 'sriov_numvfs'))
        if current and count:
            raise OSError(errno.EBUSY, 'Device or resource busy')
        if count > int(self.read(address, 'sriov_totalvfs')):
            raise OSError(errno.ERANGE, 'Numerical result out of range')
        bus = address.rsplit(':', 1)[0]
        for n in range(current):
            self._destroy(os.path.basename(os.readlink(self.path(
                self.dev(address, 'virtfn%d' % n)))))
            os.unlink(self.path(self.dev(address, 'virtfn%d' % n)))
        for n in range(count):
            vf = '%s:%02x.%d' % (bus, 0x10 + n // 8, n % 8)
            self._create(vf, vendor='0x15b3', device='0x101e',
                         cls='0x020000', driver=None, group=100 + n,
                         totalvfs=None, config=None, physfn=address)
            self.native[vf] = self.vf_drivers.get(address)
            try:
                autoprobe = self.read(address, 'sriov_drivers_autoprobe')
            except FileNotFoundError:
                autoprobe = '1'
            if self.native[vf] and autoprobe != '0':
                self._bind(vf, self.native[vf])
            self._link(self.dev(address, 'virtfn%d' % n), '../' + vf)
        self._put(self.dev(address, 'sriov_numvfs'), '%d\n' % count)


class FakeClock(object):
    def __init__(self):
        self.now = 0.0
        self.sleeps = 0

    def __call__(self):
        return self.now

    def sleep(self, secs):
        self.sleeps += 1
        self.now += secs


@pytest.fixture
def fs(tmp_path):
    fs = FakeSysfs(tmp_path)
    fs.add_driver(pci.VFIO_DRIVER)
    fs.add(BRIDGE, vendor='0x8086', device='0x2030', cls='0x060400',
           driver='pcieport', group=7)
    fs.add(LOCAL, vendor='0x8086', device='0x1572', cls='0x020000',
           driver='i40e', group=3)
    return fs


@pytest.fixture
def clock():
    return FakeClock()


def _find(fs, clock, locator, **kw):
    kw.setdefault('timeout', 10)
    return pci.find_function(locator, root=fs.root, writer=fs.write,
                             clock=clock, sleep=clock.sleep, **kw)


def _locator(**kw):
    """A locator as the module is given it: its primitive."""
    fields = {'vendor_id': '10de', 'product_id': '2330',
              'fabric_ref': 'blk-1'}
    fields.update(kw)
    return locator_mod.Locator(**fields).to_primitive()


# Finding the composed function.

def test_rescan_writes_one_to_the_bus(fs):
    pci.rescan(fs.root, writer=fs.write)
    assert fs.writes == [('sys/bus/pci/rescan', '1')]


def test_the_default_writer_writes_the_file(tmp_path):
    path = tmp_path / 'sriov_numvfs'
    path.write_text('0\n')
    pci.write(str(path), '4')
    assert path.read_text() == '4'


def test_find_by_ids_among_new_functions(fs, clock):
    known = pci.functions(fs.root)
    fs.add(GPU, group=12, hidden=True)
    assert _find(fs, clock, _locator(), known=known) == GPU
    assert fs.writes == [('sys/bus/pci/rescan', '1')]
    assert clock.sleeps == 0


def test_find_waits_for_the_function_to_appear(fs, clock):
    known = pci.functions(fs.root)
    real_write = fs.write
    rescans = []

    def late_kernel(path, value):
        rescans.append(path)
        if len(rescans) == 3:
            fs.add(GPU, group=12, hidden=True)
        real_write(path, value)

    found = pci.find_function(_locator(), root=fs.root, timeout=10,
                              known=known, writer=late_kernel,
                              interval=1.0, clock=clock, sleep=clock.sleep)
    assert found == GPU
    assert len(rescans) == 3 and clock.sleeps == 2


def test_find_ignores_functions_present_before_the_bind(fs, clock):
    fs.add(GPU, group=12)  # a local GPU of the same model
    known = pci.functions(fs.root)
    fs.add('0000:42:00.0', group=13, hidden=True)
    assert _find(fs, clock, _locator(), known=known) == '0000:42:00.0'


def test_find_times_out_naming_what_it_looked_for(fs, clock):
    known = pci.functions(fs.root)
    with pytest.raises(pci.PciError) as e:
        _find(fs, clock, _locator(serial='GPU-SN-0000'), known=known,
              timeout=5)
    assert e.value.code is pci.ErrorCode.NOT_FOUND
    message = str(e.value)
    assert 'ids 10de:2330' in message
    assert 'serial GPU-SN-0000' in message
    assert 'blk-1' in message and 'within 5 s' in message
    assert clock.now >= 5
    assert fs.writes.count(('sys/bus/pci/rescan', '1')) == 6


def test_find_by_the_fabric_address(fs, clock):
    fs.add(GPU, group=12, hidden=True)
    # The module itself reads a short address too (a locator's parser
    # passes only the full form).
    assert _find(fs, clock, dict(_locator(), pci_address='41:00.0')) == GPU


def test_find_by_address_refuses_another_device(fs, clock):
    fs.add(GPU, device='0x20b5', group=12, hidden=True)
    with pytest.raises(pci.PciError) as e:
        _find(fs, clock, _locator(pci_address=GPU))
    assert e.value.code is pci.ErrorCode.MISMATCH
    assert '10de:20b5' in str(e.value) and '10de:2330' in str(e.value)


def test_find_by_address_times_out(fs, clock):
    with pytest.raises(pci.PciError) as e:
        _find(fs, clock, _locator(pci_address=GPU), timeout=2)
    assert e.value.code is pci.ErrorCode.NOT_FOUND
    assert 'address %s' % GPU in str(e.value)


def test_find_uses_a_readable_serial(fs, clock):
    known = pci.functions(fs.root)
    fs.add('0000:41:00.0', group=12, hidden=True,
           config=_dsn_config(0x0011223344556677))
    fs.add('0000:42:00.0', group=13, hidden=True,
           config=_dsn_config(0x8899aabbccddeeff, before=False))
    assert pci.read_serial('0000:42:00.0', fs.root) is None  # not yet
    found = _find(fs, clock, _locator(serial='88-99-AA-BB-CC-DD-EE-FF'),
                  known=known)
    assert found == '0000:42:00.0'
    assert pci.read_serial(GPU, fs.root) == '0011223344556677'


def test_find_skips_a_function_whose_serial_differs(fs, clock):
    known = pci.functions(fs.root)
    fs.add(GPU, group=12, hidden=True,
           config=_dsn_config(0x0011223344556677))
    with pytest.raises(pci.PciError) as refused:
        _find(fs, clock, _locator(serial='0x8899aabbccddeeff'),
              known=known, timeout=1)
    assert refused.value.code is pci.ErrorCode.NOT_FOUND


def test_find_by_ids_when_the_serial_is_unreadable(fs, clock):
    known = pci.functions(fs.root)
    fs.add(GPU, group=12, hidden=True)  # 256 bytes: not root
    assert pci.read_serial(GPU, fs.root) is None
    assert _find(fs, clock, _locator(serial='0011223344556677'),
                 known=known) == GPU


def test_find_refuses_two_new_devices_of_the_same_model(fs, clock):
    known = pci.functions(fs.root)
    fs.add('0000:41:00.0', group=12, hidden=True)
    fs.add('0000:42:00.0', group=13, hidden=True)
    with pytest.raises(pci.PciError) as e:
        _find(fs, clock, _locator(), known=known)
    assert e.value.code is pci.ErrorCode.AMBIGUOUS
    assert '0000:41:00.0, 0000:42:00.0' in str(e.value)


def test_find_takes_any_of_the_devices_the_caller_waits_for(fs, clock):
    known = pci.functions(fs.root)
    fs.add('0000:41:00.0', group=12, hidden=True)
    fs.add('0000:42:00.0', group=13, hidden=True)
    # Two GPUs of one model for one lease: either is the caller's.
    assert _find(fs, clock, _locator(), known=known,
                 interchangeable=2) == '0000:41:00.0'
    fs.add('0000:43:00.0', group=14, hidden=True)
    # A third one is somebody else's: no guess.
    with pytest.raises(pci.PciError) as refused:
        _find(fs, clock, _locator(), known=known, interchangeable=2)
    assert refused.value.code is pci.ErrorCode.AMBIGUOUS


def test_find_takes_the_first_function_of_a_multifunction_device(
        fs, clock):
    known = pci.functions(fs.root)
    fs.add('0000:41:00.1', group=12, hidden=True)
    fs.add('0000:41:00.0', group=12, hidden=True)
    assert _find(fs, clock, _locator(), known=known) == '0000:41:00.0'


def test_find_needs_an_address_or_ids(fs, clock):
    with pytest.raises(ValueError):
        _find(fs, clock, _locator(vendor_id=None))


def test_addresses_are_checked_before_becoming_paths(fs):
    with pytest.raises(ValueError):
        pci.remove('../../../etc', fs.root, writer=fs.write)
    with pytest.raises(ValueError):
        pci.group_members('3/../..', fs.root)
    assert fs.writes == []


# IOMMU groups.

def test_iommu_group_and_members(fs):
    fs.add(GPU, group=12)
    fs.add(NIC, vendor='0x10de', device='0x22e8', cls='0x040300',
           group=12)
    assert pci.iommu_group(GPU, fs.root) == '12'
    assert pci.group_members('12', fs.root) == [GPU, NIC]
    assert pci.group_members(12, fs.root) == [GPU, NIC]


def test_no_iommu_group(fs):
    fs.add(GPU)
    with pytest.raises(pci.PciError) as e:
        pci.iommu_group(GPU, fs.root)
    assert e.value.code is pci.ErrorCode.NO_IOMMU_GROUP
    assert 'intel_iommu=on' in str(e.value)
    with pytest.raises(pci.PciError) as refused:
        pci.group_members('99', fs.root)
    assert refused.value.code is pci.ErrorCode.NO_IOMMU_GROUP


def test_group_with_bridge_and_driverless_function_is_isolated(fs):
    fs.add(GPU, group=7, driver='nouveau')
    fs.add(NIC, device='0x22e8', cls='0x040300', group=7)
    assert pci.check_group_isolated(GPU, fs.root) == [BRIDGE, GPU, NIC]


def test_group_holding_a_host_nic_is_refused_with_its_name(fs):
    fs.add(GPU, group=12, driver=pci.VFIO_DRIVER)
    fs.add(NIC, vendor='0x8086', device='0x1572', cls='0x020000',
           driver='i40e', group=12)
    with pytest.raises(pci.PciError) as e:
        pci.check_group_isolated(GPU, fs.root)
    assert e.value.code is pci.ErrorCode.IOMMU_GROUP_SHARED
    assert '%s on driver i40e' % NIC in str(e.value)
    assert 'IOMMU group 12' in str(e.value)


def test_group_members_on_vfio_or_pci_stub_are_fine(fs):
    fs.add(GPU, group=12, driver=pci.VFIO_DRIVER)
    fs.add(NIC, device='0x22e8', group=12, driver='pci-stub')
    assert pci.check_group_isolated(GPU, fs.root) == [GPU, NIC]


# vfio-pci.

def test_bind_vfio_overrides_unbinds_and_probes(fs):
    fs.add(GPU, group=12, driver='nouveau')
    assert pci.bind_vfio(GPU, fs.root, writer=fs.write) is True
    assert fs.writes == [
        ('sys/bus/pci/devices/%s/driver_override' % GPU, 'vfio-pci'),
        ('sys/bus/pci/devices/%s/driver/unbind' % GPU, GPU),
        ('sys/bus/pci/drivers_probe', GPU)]
    assert fs.driver_of(GPU) == 'vfio-pci'
    assert pci.vfio_device_node(GPU, fs.root) == os.path.join(
        fs.root, 'dev', 'vfio', '12')


def test_bind_vfio_of_a_driverless_function_only_probes(fs):
    fs.add(GPU, group=12)
    assert pci.bind_vfio(GPU, fs.root, writer=fs.write) is True
    assert [rel for rel, _ in fs.writes] == [
        'sys/bus/pci/devices/%s/driver_override' % GPU,
        'sys/bus/pci/drivers_probe']
    assert pci.driver(GPU, fs.root) == 'vfio-pci'


def test_bind_vfio_again_does_nothing(fs):
    fs.add(GPU, group=12, driver='nouveau')
    pci.bind_vfio(GPU, fs.root, writer=fs.write)
    del fs.writes[:]
    assert pci.bind_vfio(GPU, fs.root, writer=fs.write) is False
    assert fs.writes == []


def test_bind_vfio_without_the_driver_fails(fs):
    shutil.rmtree(fs.path('sys/bus/pci/drivers/vfio-pci'))
    fs.add(GPU, group=12, driver='nouveau')
    with pytest.raises(pci.PciError) as e:
        pci.bind_vfio(GPU, fs.root, writer=fs.write)
    assert e.value.code is pci.ErrorCode.VFIO_REFUSED
    assert 'driver none' in str(e.value)


def test_missing_vfio_node(fs):
    fs.add(GPU, group=12)
    with pytest.raises(pci.PciError) as e:
        pci.vfio_device_node(GPU, fs.root)
    assert e.value.code is pci.ErrorCode.VFIO_REFUSED
    assert 'dev/vfio/12' in str(e.value)


def test_release_unbinds_and_clears_the_override(fs):
    fs.add(GPU, group=12, driver='nouveau')
    pci.bind_vfio(GPU, fs.root, writer=fs.write)
    del fs.writes[:]
    assert pci.release(GPU, fs.root, writer=fs.write) is True
    assert fs.writes == [
        ('sys/bus/pci/devices/%s/driver/unbind' % GPU, GPU),
        ('sys/bus/pci/devices/%s/driver_override' % GPU, '\n')]
    assert fs.driver_of(GPU) is None
    assert fs.read(GPU, 'driver_override') == '(null)'
    del fs.writes[:]
    assert pci.release(GPU, fs.root, writer=fs.write) is False
    assert fs.writes == []


def test_release_leaves_a_host_driver_alone(fs):
    assert pci.release(LOCAL, fs.root, writer=fs.write) is False
    assert fs.driver_of(LOCAL) == 'i40e' and fs.writes == []


def test_remove_and_remove_again(fs):
    fs.add(GPU, group=12, driver=pci.VFIO_DRIVER)
    assert pci.remove(GPU, fs.root, writer=fs.write) is True
    assert fs.writes == [('sys/bus/pci/devices/%s/remove' % GPU, '1')]
    assert GPU not in pci.functions(fs.root)
    assert pci.group_members('12', fs.root) == []
    assert pci.remove(GPU, fs.root, writer=fs.write) is False
    assert pci.release(GPU, fs.root, writer=fs.write) is False
    assert len(fs.writes) == 1


# SR-IOV.

PF = '0000:5e:00.0'


@pytest.fixture
def pf(fs):
    fs.add(PF, vendor='0x15b3', device='0x101d', cls='0x020000',
           driver='mlx5_core', group=20, totalvfs=8)
    return PF


def test_set_num_vfs_creates_the_vfs(fs, pf):
    vfs = pci.set_num_vfs(pf, 2, fs.root, writer=fs.write)
    assert vfs == ['0000:5e:10.0', '0000:5e:10.1']
    assert pci.virtual_functions(pf, fs.root) == vfs
    assert pci.is_virtual_function(vfs[0], fs.root)
    assert fs.writes == [
        ('sys/bus/pci/devices/%s/sriov_numvfs' % pf, '2')]


def test_the_vfs_made_for_leases_get_no_host_driver(fs, pf):
    """The PF's own driver would probe each VF as it is made, and may let
    go of it only after vfio-pci took it: the VFs are made with
    sriov_drivers_autoprobe 0, and a VF still binds to vfio-pci."""
    fs.add_vf_driver(pf, 'nvme')
    fs.late_releasers.add('nvme')
    vfs = pci.set_num_vfs(pf, 2, fs.root, writer=fs.write)
    assert fs.writes == [
        ('sys/bus/pci/devices/%s/sriov_drivers_autoprobe' % pf, '0'),
        ('sys/bus/pci/devices/%s/sriov_numvfs' % pf, '2')]
    assert [fs.driver_of(vf) for vf in vfs] == [None, None]
    answer = pci.attach_function(
        _locator(vendor_id='15b3', product_id='101e', pci_address=vfs[0]),
        timeout=1, root=fs.root, writer=fs.write)
    assert answer['bound'] and 'error' not in answer, answer
    assert fs.driver_of(vfs[0]) == pci.VFIO_DRIVER
    # Already 0: not written again.
    del fs.writes[:]
    pci.set_num_vfs(pf, 0, fs.root, writer=fs.write)
    pci.set_num_vfs(pf, 1, fs.root, writer=fs.write)
    assert [rel.rsplit('/', 1)[1] for rel, _ in fs.writes] == [
        'sriov_numvfs', 'sriov_numvfs']


def test_a_vf_its_host_driver_lets_go_late_is_bound_again(fs, pf, clock):
    """A kernel without sriov_drivers_autoprobe: the PF's driver probed
    the VF, and its release of it runs after vfio-pci took the VF. The
    attach binds it again and answers only once it is on vfio-pci with
    its /dev/vfio node, never a VF left without a driver."""
    fs.add_vf_driver(pf, 'nvme', autoprobe_file=False)
    fs.late_releasers.add('nvme')
    vfs = pci.set_num_vfs(pf, 2, fs.root, writer=fs.write)
    assert fs.driver_of(vfs[1]) == 'nvme'
    answer = _attach(fs, clock, _locator(
        vendor_id='15b3', product_id='101e', pci_address=vfs[1]))
    assert 'error' not in answer, answer
    assert answer['bound'] is True
    assert fs.driver_of(vfs[1]) == pci.VFIO_DRIVER
    assert answer['vfio_node'] == fs.path('dev', 'vfio', '101')
    assert os.path.exists(answer['vfio_node'])
    probes = [w for w in fs.writes if w[0] == 'sys/bus/pci/drivers_probe']
    assert probes == [('sys/bus/pci/drivers_probe', vfs[1])] * 2


def test_a_function_that_keeps_losing_vfio_fails_the_attach(fs, clock):
    """Bounded: a function that loses vfio-pci after every bind is
    refused after VFIO_BIND_ATTEMPTS binds, naming the driver it has."""
    known = pci.functions(fs.root)
    fs.add(GPU, group=12, driver='nouveau', hidden=True)
    fs.late_releasers.update(['nouveau', pci.VFIO_DRIVER])
    answer = _attach(fs, clock, _locator(), known=known)
    assert answer['error'] == 'vfio_refused'
    assert answer['address'] == GPU
    assert 'driver none' in answer['message']
    assert '%d attempts' % pci.VFIO_BIND_ATTEMPTS in answer['message']
    probes = [w for w in fs.writes if w[0] == 'sys/bus/pci/drivers_probe']
    assert len(probes) == pci.VFIO_BIND_ATTEMPTS


def test_set_num_vfs_changes_through_zero(fs, pf):
    pci.set_num_vfs(pf, 2, fs.root, writer=fs.write)
    del fs.writes[:]
    vfs = pci.set_num_vfs(pf, 4, fs.root, writer=fs.write)
    assert len(vfs) == 4
    assert [v for _, v in fs.writes] == ['0', '4']
    del fs.writes[:]
    assert pci.set_num_vfs(pf, 4, fs.root, writer=fs.write) == vfs
    assert fs.writes == []
    assert pci.set_num_vfs(pf, 0, fs.root, writer=fs.write) == []
    assert [v for _, v in fs.writes] == ['0']
    assert '0000:5e:10.0' not in pci.functions(fs.root)


def test_the_kernel_refuses_a_change_not_through_zero(fs, pf):
    numvfs = fs.path('sys/bus/pci/devices', pf, 'sriov_numvfs')
    fs.write(numvfs, '2')
    with pytest.raises(OSError) as e:
        fs.write(numvfs, '4')
    assert e.value.errno == errno.EBUSY


def test_set_num_vfs_refuses_more_than_total(fs, pf):
    with pytest.raises(pci.PciError) as e:
        pci.set_num_vfs(pf, 9, fs.root, writer=fs.write)
    assert e.value.code is pci.ErrorCode.SRIOV_REFUSED
    assert '0 to 8' in str(e.value)
    with pytest.raises(pci.PciError) as refused:
        pci.set_num_vfs(pf, -1, fs.root, writer=fs.write)
    assert refused.value.code is pci.ErrorCode.SRIOV_REFUSED
    assert fs.writes == []


def test_set_num_vfs_of_a_function_without_sriov(fs):
    with pytest.raises(pci.PciError) as e:
        pci.set_num_vfs(LOCAL, 1, fs.root, writer=fs.write)
    assert e.value.code is pci.ErrorCode.SRIOV_REFUSED
    assert 'no SR-IOV' in str(e.value)


def test_virtual_functions_of_a_missing_function(fs):
    with pytest.raises(pci.PciError) as refused:
        pci.virtual_functions(GPU, fs.root)
    assert refused.value.code is pci.ErrorCode.NOT_FOUND
    assert pci.virtual_functions(LOCAL, fs.root) == []


def test_new_vfs_are_not_taken_for_the_composed_device(fs, clock, pf):
    known = pci.functions(fs.root)
    pci.set_num_vfs(pf, 1, fs.root, writer=fs.write)
    with pytest.raises(pci.PciError) as refused:
        _find(fs, clock, _locator(vendor_id='15b3', product_id='101e'),
              known=known, timeout=0)
    assert refused.value.code is pci.ErrorCode.NOT_FOUND


# Host checks.

RELEASE = '6.8.0-45-generic'


def _modules(fs, name, text):
    path = fs.path('lib/modules', RELEASE)
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, name), 'w') as f:
        f.write(text)


def test_host_checks_pass(fs):
    assert pci.host_checks(fs.root, kernel_release=RELEASE) == []


def test_host_checks_without_iommu_or_vfio(tmp_path):
    fs = FakeSysfs(tmp_path)
    problems = pci.host_checks(fs.root, kernel_release=RELEASE)
    assert len(problems) == 2
    assert 'IOMMU' in problems[0]
    assert 'vfio-pci' in problems[1] and RELEASE in problems[1]


@pytest.mark.parametrize('name,text', [
    ('modules.builtin', 'kernel/drivers/vfio/pci/vfio-pci.ko\n'),
    ('modules.dep', 'kernel/drivers/vfio/pci/vfio-pci.ko.zst: '
                    'kernel/drivers/vfio/pci/vfio-pci-core.ko.zst\n'),
])
def test_host_checks_find_the_vfio_module(fs, name, text):
    shutil.rmtree(fs.path('sys/bus/pci/drivers/vfio-pci'))
    _modules(fs, 'modules.dep', 'kernel/drivers/vfio/vfio.ko:\n')
    assert pci.host_checks(fs.root, kernel_release=RELEASE) != []
    _modules(fs, name, text)
    assert pci.host_checks(fs.root, kernel_release=RELEASE) == []


# Nova's device_spec.

FABRIC_GPU = _locator()
FABRIC_GPU_AT = _locator(pci_address='0000:41:00.0')


def _conf(*lines):
    return '\n'.join(('[DEFAULT]', 'debug = True', '[pci]') + lines) + '\n'


def test_device_spec_conflict_by_ids():
    conf = _conf('device_spec = {"vendor_id": "10DE", '
                 '"product_id": "2330"}',
                 'device_spec = {"vendor_id": "8086", '
                 '"product_id": "1572"}')
    conflicts = pci.nova_device_spec_conflicts(conf, [FABRIC_GPU])
    assert len(conflicts) == 1
    assert conflicts[0]['option'] == '[pci] device_spec'
    assert conflicts[0]['entry']['vendor_id'] == '10DE'
    assert conflicts[0]['locator'] == FABRIC_GPU
    assert 'ids 10de:2330' in conflicts[0]['message']
    assert 'another instance' in conflicts[0]['message']


def test_device_spec_every_repeated_value_counts():
    conf = _conf('device_spec = {"vendor_id": "8086"}',
                 'device_spec = {"vendor_id": "10de"}',
                 'device_spec = {"vendor_id": "15b3"}')
    conflicts = pci.nova_device_spec_conflicts(conf, [FABRIC_GPU])
    assert [c['entry'] for c in conflicts] == [{'vendor_id': '10de'}]


@pytest.mark.parametrize('address', [
    '*:41:*.*', '0000:41:00.0', '41:00.', ':41:', '*:41:00.*',
    {'domain': '.*', 'bus': '4[0-9]', 'slot': '00', 'function': '[0-7]'},
])
def test_device_spec_conflict_by_address(address):
    conf = _conf('passthrough_whitelist = %s' % json.dumps(
        {'address': address}))
    conflicts = pci.nova_device_spec_conflicts(conf, [FABRIC_GPU_AT])
    assert len(conflicts) == 1
    assert conflicts[0]['option'] == '[pci] passthrough_whitelist'


@pytest.mark.parametrize('address', [
    '*:42:*.*', '0000:41:00.1', '*:*:01.*', {'bus': '42'},
])
def test_device_spec_address_elsewhere_is_no_conflict(address):
    conf = _conf('device_spec = %s' % json.dumps(
        {'address': address, 'vendor_id': '10de'}))
    assert pci.nova_device_spec_conflicts(conf, [FABRIC_GPU_AT]) == []


def test_device_spec_address_conflicts_while_the_address_is_unknown():
    conf = _conf('device_spec = {"address": "0000:41:00.0"}')
    assert len(pci.nova_device_spec_conflicts(conf, [FABRIC_GPU])) == 1


def test_no_device_spec_conflict():
    conf = _conf('device_spec = [{"vendor_id": "8086", '
                 '"product_id": "1572"},',
                 '  {"vendor_id": "10de", "product_id": "20b5"}]',
                 '[libvirt]', 'device_spec = {"vendor_id": "10de"}')
    assert pci.nova_device_spec_conflicts(conf, [FABRIC_GPU]) == []
    assert pci.nova_device_spec_conflicts('[pci]\n', [FABRIC_GPU]) == []


def test_device_spec_list_continuation_and_quotes():
    conf = _conf("device_spec = '[{\"vendor_id\": \"8086\"},",
                 "  {\"vendor_id\": \"10de\", \"product_id\": \"*\"}]'")
    conflicts = pci.nova_device_spec_conflicts(conf, [FABRIC_GPU])
    assert [c['entry'] for c in conflicts] == [
        {'vendor_id': '10de', 'product_id': '*'}]


def test_device_spec_old_default_option_and_unreadable_value():
    conf = ('[DEFAULT]\npci_passthrough_whitelist: {"vendor_id": "10de"}\n'
            '[pci]\ndevice_spec = {vendor_id: 10de\n')
    conflicts = pci.nova_device_spec_conflicts(conf, [FABRIC_GPU])
    assert [c['option'] for c in conflicts] == [
        '[DEFAULT] pci_passthrough_whitelist', '[pci] device_spec']
    assert 'is not JSON' in conflicts[1]['message']


# Running as a script inside a guest.

MODULE = pci.__file__


def test_module_imports_only_the_standard_library():
    with open(MODULE) as f:
        tree = ast.parse(f.read())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(a.name.split('.')[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0
            imported.add(node.module.split('.')[0])
    assert imported
    assert imported <= sys.stdlib_module_names, (
        imported - sys.stdlib_module_names)


def test_runs_as_a_script_without_site_packages(fs):
    fs.add(GPU, group=12)
    out = subprocess.run(
        [sys.executable, '-I', '-S', MODULE, 'iommu_group',
         json.dumps({'address': GPU, 'root': fs.root})],
        capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == {'result': '12'}


def test_main_reports_errors_as_json(fs):
    out = io.StringIO()
    assert pci.main(['check_group_isolated',
                     json.dumps({'address': LOCAL, 'root': fs.root})],
                    out=out) == 0
    assert json.loads(out.getvalue()) == {'result': [LOCAL]}
    out = io.StringIO()
    assert pci.main(['iommu_group', json.dumps({'address': GPU,
                                                'root': fs.root})],
                    out=out) == 1
    assert json.loads(out.getvalue()) == {
        'error': 'not_found', 'message': 'no PCI function %s' % GPU}
    out = io.StringIO()
    assert pci.main(['reboot'], out=out) == 1
    assert 'usage' in json.loads(out.getvalue())['message']


def test_main_answers_what_the_sriov_path_asks(fs, pf):
    # The SR-IOV path of HostPciDevices asks these through its bus, so a
    # bus running the module elsewhere needs them as commands.
    vfs = pci.set_num_vfs(pf, 1, fs.root, writer=fs.write)
    for command, address, expected in (
            ('exists', pf, True), ('exists', '0000:5e:10.7', False),
            ('is_virtual_function', vfs[0], True),
            ('is_virtual_function', pf, False)):
        out = io.StringIO()
        assert pci.main([command, json.dumps({'address': address,
                                              'root': fs.root})],
                        out=out) == 0
        assert json.loads(out.getvalue()) == {'result': expected}, command
    out = io.StringIO()
    assert pci.main(['exists', json.dumps({'address': 'not-a-bdf',
                                           'root': fs.root})],
                    out=out) == 1
    assert json.loads(out.getvalue())['error'] == 'invalid_argument'


def test_main_reads_nova_conf_from_a_path(tmp_path):
    conf = tmp_path / 'nova.conf'
    conf.write_text(_conf('device_spec = {"vendor_id": "10de"}'))
    out = io.StringIO()
    assert pci.main(['nova_device_spec_conflicts', json.dumps(
        {'nova_conf_path': str(conf), 'locators': [FABRIC_GPU]})],
        out=out) == 0
    result = json.loads(out.getvalue())['result']
    assert len(result) == 1 and result[0]['entry'] == {'vendor_id': '10de'}


# The combined attach and detach (one call, one process, per device).

def _attach(fs, clock, locator, **kw):
    kw.setdefault('timeout', 10)
    return pci.attach_function(locator, root=fs.root, writer=fs.write,
                               clock=clock, sleep=clock.sleep, **kw)


def test_attach_function_finds_checks_and_binds_in_one_call(fs, clock):
    known = pci.functions(fs.root)
    fs.add(GPU, group=12, driver='nouveau', hidden=True)
    answer = _attach(fs, clock, _locator(), known=known)
    # How long the search and the bind took (the agent's debug log).
    assert answer.pop('find_ms') >= 0 and answer.pop('bind_ms') >= 0
    assert answer == {
        'address': GPU, 'found': True, 'iommu_group': '12',
        'vfio_node': os.path.join(fs.root, 'dev', 'vfio', '12'),
        'bound': True, 'members': [GPU]}
    assert fs.driver_of(GPU) == pci.VFIO_DRIVER
    assert fs.writes[0] == ('sys/bus/pci/rescan', '1')
    # Again, with the address noted the first time: no search, no write.
    del fs.writes[:]
    again = _attach(fs, clock, _locator(), known=known, recorded=GPU)
    assert (again['found'], again['bound']) == (False, False)
    assert fs.writes == []


def test_attach_function_searches_when_the_noted_function_changed(
        fs, clock):
    known = pci.functions(fs.root)
    fs.add(GPU, group=12, hidden=True)
    # The noted address now holds the host's NIC: it is not taken.
    answer = _attach(fs, clock, _locator(), known=known, recorded=LOCAL)
    assert (answer['address'], answer['found']) == (GPU, True)
    assert fs.driver_of(LOCAL) == 'i40e'


def test_attach_function_not_found_raises(fs, clock):
    with pytest.raises(pci.PciError) as refused:
        _attach(fs, clock, _locator(), known=pci.functions(fs.root),
                timeout=2)
    assert refused.value.code is pci.ErrorCode.NOT_FOUND


def test_attach_function_shared_group_answers_the_address(fs, clock):
    known = pci.functions(fs.root)
    fs.add(GPU, group=3, hidden=True)
    answer = _attach(fs, clock, _locator(), known=known)
    assert answer['address'] == GPU
    assert answer['error'] == 'iommu_group_shared'
    assert '%s on driver i40e' % LOCAL in answer['message']
    # Nothing was bound: the host keeps its NIC, the function no driver.
    assert fs.driver_of(GPU) is None
    assert fs.driver_of(LOCAL) == 'i40e'
    assert 'vfio_node' not in answer


def test_attach_function_refuses_what_nova_would_take(fs, clock):
    known = pci.functions(fs.root)
    fs.add(GPU, group=12, hidden=True)
    text = '[pci]\ndevice_spec = {"vendor_id": "10de"}\n'
    answer = _attach(fs, clock, _locator(), known=known,
                     nova_conf_text=text)
    assert answer['error'] == 'not_permitted_by_device_spec'
    assert answer['address'] == GPU
    assert 'Nova could give it to another instance' in answer['message']
    assert fs.driver_of(GPU) is None


def test_attach_function_without_vfio_answers_the_failure(fs, clock):
    known = pci.functions(fs.root)
    fs.add(GPU, group=12, hidden=True)
    shutil.rmtree(fs.path('sys/bus/pci/drivers', pci.VFIO_DRIVER))
    answer = _attach(fs, clock, _locator(), known=known)
    assert answer['error'] == 'vfio_refused'
    assert answer['address'] == GPU


def test_detach_function_releases_and_removes(fs):
    fs.add(GPU, group=12, driver=pci.VFIO_DRIVER)
    fs._put(fs.dev(GPU, 'driver_override'), pci.VFIO_DRIVER)
    assert pci.detach_function(GPU, '10de', '2330', root=fs.root,
                               writer=fs.write) == 'removed'
    assert not pci.exists(GPU, fs.root)
    assert pci.detach_function(GPU, '10de', '2330', root=fs.root,
                               writer=fs.write) == 'absent'


def test_detach_function_leaves_another_device_alone(fs):
    assert pci.detach_function(LOCAL, '10de', '2330', root=fs.root,
                               writer=fs.write) == 'other'
    assert fs.driver_of(LOCAL) == 'i40e'
    assert fs.writes == []


def test_main_answers_the_combined_attach_as_json(fs):
    fs.add(GPU, group=12)
    out = io.StringIO()
    # Plain files, no kernel behind them: the probe binds nothing, and
    # the answer says so with the address found.
    assert pci.main(['attach_function', json.dumps({
        'locator': _locator(pci_address=GPU), 'root': fs.root,
        'timeout': 1})], out=out) == 0
    answer = json.loads(out.getvalue())['result']
    assert (answer['address'], answer['found']) == (GPU, True)
    assert answer['error'] == 'vfio_refused'
    assert 'is on driver none after the probe' in answer['message']


# The error codes: what crosses the privsep and guest boundaries.

def test_an_error_is_rebuilt_from_its_class_and_arguments(fs):
    # As the privsep client raises what the daemon raised: the class
    # named by its module and name, called with its arguments (sent as
    # plain text over the daemon's channel).
    with pytest.raises(pci.PciError) as e:
        pci.iommu_group(GPU, fs.root)
    assert all(type(a) is str for a in e.value.args)
    again = pci.PciError(*json.loads(json.dumps(e.value.args)))
    assert again.code is e.value.code is pci.ErrorCode.NOT_FOUND
    assert str(again) == again.message == 'no PCI function %s' % GPU


@pytest.mark.parametrize('exc,code', [
    (pci.PciError(pci.ErrorCode.AMBIGUOUS, 'two'), 'AMBIGUOUS'),
    (PermissionError(errno.EACCES, 'Permission denied'), 'NOT_PERMITTED'),
    (OSError(errno.EPERM, 'Operation not permitted'), 'NOT_PERMITTED'),
    (OSError(errno.EBUSY, 'Device or resource busy'), 'BUSY'),
    (OSError(errno.EIO, 'Input/output error'), 'OS_ERROR'),
    (ValueError('bad'), 'INVALID_ARGUMENT'),
    (TypeError('bad'), 'INVALID_ARGUMENT'),
    (RuntimeError('bug'), 'INTERNAL')])
def test_every_error_has_a_code(exc, code):
    assert pci.error_code(exc) is pci.ErrorCode[code]
    error = pci.as_pci_error(exc)
    assert error.code is pci.ErrorCode[code]
    assert str(exc) in error.message


def test_an_unknown_code_is_internal():
    # A newer module's code, read by an older agent.
    assert pci.PciError('melted', 'x').code is pci.ErrorCode.INTERNAL
    assert pci.ErrorCode.parse('not_found') is pci.ErrorCode.NOT_FOUND


def test_main_says_a_refused_write_needs_root(fs, monkeypatch):
    def refused(root='/'):
        raise PermissionError(errno.EACCES, 'Permission denied',
                              os.path.join(root, 'sys/bus/pci/rescan'))

    monkeypatch.setitem(pci.COMMANDS, 'rescan', refused)
    out = io.StringIO()
    assert pci.main(['rescan', json.dumps({'root': fs.root})],
                    out=out) == 1
    answer = json.loads(out.getvalue())
    assert answer['error'] == 'not_permitted'
    assert answer['message'].endswith('(needs root)')
