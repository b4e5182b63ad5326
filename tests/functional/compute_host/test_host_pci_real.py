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

"""The agent's PCI module on a real kernel: inside the compute host guest
(q35, Intel IOMMU, TCG), with the Redfish emulator hot-plugging emulated
PCIe functions into it through the project's Redfish driver.

Everything here is real but the hardware: QEMU's ``edu`` device stands
for a GPU and its NVMe controller for an SR-IOV device. What cannot run
here is handing the function on to a guest of the host (VFIO device
assignment needs nested VFIO); the tests stop at ``/dev/vfio/<group>``.
"""

import time

import pytest

from composable.privsep import pci_sysfs
from tests import waiting
from tests.functional.compute_host import guest_exec

FIND_TIMEOUT = 60
EVENT_TIMEOUT = 60


def _report(name, seconds):
    # Shown with -rP / -s; the benchmark takes the numbers from here.
    print('%s: %.0f ms' % (name, seconds * 1000))


def test_host_can_pass_functions_through(host, pci):
    assert host.wait_for_line(r'^iommu-groups [1-9][0-9]*$', 5,
                              'IOMMU groups at boot')
    assert pci.call('host_checks') == []
    _report('host boot', host.boot_seconds)


def test_gpu_found_bound_to_vfio_released_and_removed(host, pci, agent,
                                                      composer):
    known = pci.call('functions')
    started = time.monotonic()
    locator = composer.bind('GPU0')
    assert (locator.vendor_id, locator.product_id) == ('1234', '11e8')
    assert locator.pci_address is None
    address = pci.call('find_function', locator=locator.to_primitive(),
                       known=known,
                       timeout=FIND_TIMEOUT, interval=0.1)
    assert address not in known
    assert pci.call('device_ids', address=address) == ['1234', '11e8']
    members = pci.call('check_group_isolated', address=address)
    assert address in members
    assert pci.call('bind_vfio', address=address) is True
    node = pci.call('vfio_device_node', address=address)
    bound = time.monotonic() - started
    _report('compose to vfio-pci', bound)
    group = pci.call('iommu_group', address=address)
    assert node == '/dev/vfio/%s' % group
    assert pci.call('driver', address=address) == 'vfio-pci'
    # The kernel's own view, not pci.py's.
    assert agent.shell('cat /sys/bus/pci/devices/%s/driver_override'
                       % address).strip() == 'vfio-pci'
    assert agent.shell('test -c %s && echo yes' % node).strip() == 'yes'
    # Binding again changes nothing.
    assert pci.call('bind_vfio', address=address) is False

    assert pci.call('release', address=address) is True
    assert pci.call('driver', address=address) is None
    assert agent.shell('cat /sys/bus/pci/devices/%s/driver_override'
                       % address).strip() == '(null)'
    assert pci.call('release', address=address) is False
    assert pci.call('remove', address=address) is True
    assert address not in pci.call('functions')
    assert pci.call('remove', address=address) is False

    plugged = composer.backend.plugged['GPU0']['id']
    seen = len(composer.backend.deleted)
    composer.unbind('GPU0')
    assert [d for d, _ in composer.backend.deleted[seen:]] == [plugged]
    assert not composer.backend.device_present(plugged)
    assert composer.state('GPU0')[:2] == ('Unused', None)
    # Gone for good: a rescan does not bring it back.
    pci.call('rescan')
    assert address not in pci.call('functions')


def test_nvme_virtual_functions_each_in_own_group(host, pci, agent,
                                                  composer):
    known = pci.call('functions')
    locator = composer.bind('NVMe0')
    assert locator.serial == 'NVME-SN-0000'
    pf = pci.call('find_function', locator=locator.to_primitive(),
                  known=known,
                  timeout=FIND_TIMEOUT, interval=0.1)
    assert pci.call('device_ids', address=pf) == ['1b36', '0010']
    # The block's serial is the controller's: the host sees the device
    # the fabric says it composed.
    waiting.wait_until(lambda: agent.shell(
        'cat /sys/bus/pci/devices/%s/nvme/nvme*/serial 2>/dev/null || true'
        % pf).strip() == 'NVME-SN-0000', 60, 'the NVMe serial')
    assert pci.call('driver', address=pf) == 'nvme'

    with pytest.raises(guest_exec.PciCommandError) as too_many:
        pci.call('set_num_vfs', pf_address=pf, count=5)
    assert too_many.value.code is pci_sysfs.ErrorCode.SRIOV_REFUSED
    assert '0 to 2 virtual functions, not 5' in too_many.value.message
    assert pci.call('virtual_functions', pf_address=pf) == []

    vfs = pci.call('set_num_vfs', pf_address=pf, count=2)
    try:
        assert len(vfs) == 2
        groups = {vf: pci.call('iommu_group', address=vf) for vf in vfs}
        pf_group = pci.call('iommu_group', address=pf)
        assert len(set(groups.values()) | {pf_group}) == 3
        for vf in vfs:
            assert pci.call('check_group_isolated', address=vf) == [vf]
        # A VF is never taken for a device the fabric composed.
        with pytest.raises(guest_exec.PciCommandError) as not_vf:
            pci.call('find_function', locator=locator.to_primitive(),
                     known=known + [pf],
                     timeout=0)
        assert not_vf.value.code is pci_sysfs.ErrorCode.NOT_FOUND
        assert pci.call('bind_vfio', address=vfs[0]) is True
        assert pci.call('vfio_device_node', address=vfs[0]) == (
            '/dev/vfio/%s' % groups[vfs[0]])
        assert pci.call('release', address=vfs[0]) is True
    finally:
        assert pci.call('set_num_vfs', pf_address=pf, count=0) == []
    for vf in vfs:
        assert vf not in pci.call('functions')

    assert pci.call('remove', address=pf) is True
    composer.unbind('NVMe0')
    assert composer.state('NVMe0')[:2] == ('Unused', None)
    assert not composer.backend.plugged


def test_refused_block_fails_and_plugs_nothing(host, pci, composer):
    from composable.common import exception
    known = pci.call('functions')
    with pytest.raises(exception.DriverError):
        composer.bind('GPU9')
    state, _, message = composer.state('GPU9')
    assert state == 'Failed'
    assert 'its function (QEMU edu) is 1234:11e8' in message
    assert 'GPU9' not in composer.backend.plugged
    pci.call('rescan')
    assert pci.call('functions') == known
    with pytest.raises(guest_exec.PciCommandError) as missing:
        pci.call('find_function', locator={'vendor_id': '10de',
                                           'product_id': '2330'},
                 known=known, timeout=1, interval=0.2)
    assert missing.value.code is pci_sysfs.ErrorCode.NOT_FOUND


def test_bad_addresses_are_refused_in_the_guest(pci):
    with pytest.raises(guest_exec.PciCommandError) as bad:
        pci.call('bind_vfio', address='../../../../dev/sda')
    assert bad.value.code is pci_sysfs.ErrorCode.INVALID_ARGUMENT
    assert 'is not a PCI address' in bad.value.message
    with pytest.raises(guest_exec.PciCommandError) as gone:
        pci.call('iommu_group', address='0000:7f:1f.7')
    assert gone.value.code is pci_sysfs.ErrorCode.NOT_FOUND


def test_function_sharing_a_group_with_a_host_device_is_refused(pci):
    # The edu function and the host's NVMe controller sit behind one
    # conventional PCI bridge (image.domain_xml): one IOMMU group.
    edu = pci.call('find_function', locator={'vendor_id': '1234',
                                             'product_id': '11e8'},
                   known=[], timeout=0)
    group = pci.call('iommu_group', address=edu)
    members = pci.call('group_members', group=group)
    host_nvme = [m for m in members
                 if pci.call('driver', address=m) == 'nvme']
    assert len(host_nvme) == 1, members
    with pytest.raises(guest_exec.PciCommandError) as shared:
        pci.call('check_group_isolated', address=edu)
    assert shared.value.code is pci_sysfs.ErrorCode.IOMMU_GROUP_SHARED
    assert ('IOMMU group %s of %s also holds %s on driver nvme'
            % (group, edu, host_nvme[0])) in shared.value.message
    # Nothing changed: the host keeps its controller.
    assert pci.call('driver', address=host_nvme[0]) == 'nvme'
    assert pci.call('driver', address=edu) is None
