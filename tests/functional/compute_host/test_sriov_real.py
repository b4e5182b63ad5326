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

"""Leases of SR-IOV virtual functions on a real kernel: the conductor
(in this process, on SQLite and the in-process message transport) asks
the compute agent for a VF per lease; the agent's HostPciDevices does its
work inside the compute host guest (q35, Intel IOMMU, TCG): its bus is
guest_bus.GuestPciBus, each call one command of the PCI module kept
running in the guest (guest_exec.PciServerRunner). It creates the VFs of
the NVMe controller the Redfish emulator composed into the guest (QEMU
``nvme`` with ``sriov_max_vfs``), binds one per lease to vfio-pci and
removes them when the last lease lets go.

Real: the guest's kernel, sysfs, vfio-pci and SR-IOV. Not real: the
hardware (QEMU's emulated NVMe stands for a NIC), and handing the VF on
to a guest of the host (nested VFIO): the tests stop at
``/dev/vfio/<group>``.
"""

import time

import pytest

from composable.common import sriov
from composable.common import states
from composable import conf
from composable.db import api as db_api
from composable.agent.compute_node import host_pci
from tests.functional.compute_host import guest_bus
from tests.functional.compute_host import guest_exec
from tests.unit.conductor import harness as h_mod
from tests.unit.conductor import sriov_harness

CONF = conf.CONF
FIND_TIMEOUT = 60
# Each step of the agent is one or more guest-exec round trips under
# TCG: generous, for a loaded machine.
RPC_TIMEOUT = 300
# The agent's copy of the PCI module (and its server) in the guest, apart
# from the tests' own (the pci fixture's).
AGENT_MODULE_DIR = '/tmp/composable-sriov-agent'
LEASE_TIMEOUT = 600


@pytest.fixture
def sqlite_db(tmp_path):
    CONF.set_override('connection',
                      'sqlite:///%s' % (tmp_path / 't.sqlite'), 'database')
    db_api.reset_facade()
    db_api.create_schema_for_tests()
    yield
    db_api.reset_facade()
    CONF.clear_override('connection', 'database')


@pytest.fixture
def nvme_pf(host, pci, composer):
    """The NVMe controller composed into the host guest: the physical
    function. Its VFs and itself leave the guest's bus afterwards, even
    when the test failed (the composer fixture then decomposes it)."""
    known = pci.call('functions')
    locator = composer.bind('NVMe0')
    pf = pci.call('find_function', locator=locator.to_primitive(),
                  known=known,
                  timeout=FIND_TIMEOUT, interval=0.1)
    try:
        yield pf
    finally:
        try:
            for vf in pci.call('virtual_functions', pf_address=pf):
                pci.call('release', address=vf)
            pci.call('set_num_vfs', pf_address=pf, count=0)
        finally:
            pci.call('remove', address=pf)


@pytest.fixture(scope='module')
def guest_pci_bus(agent):
    """The agent's PCI bus: the guest's, through the PCI module server
    started there at the first call; stopped afterwards, even when a test
    failed."""
    try:
        yield guest_bus.GuestPciBus(guest_exec.PciServerRunner(
            agent, directory=AGENT_MODULE_DIR))
    finally:
        agent.shell('p=%s/server.pid; [ -f $p ] && kill "$(cat $p)" '
                    '2>/dev/null; rm -rf %s' % (AGENT_MODULE_DIR,
                                                AGENT_MODULE_DIR))


@pytest.fixture
def conductor(sqlite_db, guest_pci_bus, tmp_path):
    """The harness, not started: a test starts it with its pool
    (``start(vf_count=, pf_address=)``)."""
    h = sriov_harness.SriovHarness(rpc_timeout=RPC_TIMEOUT,
                                   fabric_timeout=60)
    devices = host_pci.HostPciDevices(
        bus=guest_pci_bus, find_timeout=FIND_TIMEOUT,
        nova_config_files=[str(tmp_path / 'nova.conf')],
        state_file=str(tmp_path / 'state' / 'pci-devices.json'))
    started = []

    def start(**kwargs):
        started.append(h)
        return sriov_harness.SriovHarness.start(
            h, tmp_path, host_pci=devices, vf_kind='nvme', **kwargs)

    h.start_in_guest = start
    try:
        yield h
    finally:
        if started:
            h.stop()


def _bound(h, uuid, what='bind'):
    started = time.monotonic()
    h.api.bind_lease(h_mod.user_context(), uuid,
                     h.hosts[sriov_harness.HOST].uuid)
    lease = h.wait(uuid, [states.BOUND, states.BIND_FAILED],
                   timeout=LEASE_TIMEOUT)
    # Shown with -s / -rP: every PCI step is a guest-exec round trip
    # under TCG, so these are upper bounds of a real host.
    print('%s: %.0f ms' % (what, (time.monotonic() - started) * 1000))
    return lease


def test_vfs_made_bound_released_and_removed_on_the_host(
        conductor, nvme_pf, pci, agent):
    h = conductor.start_in_guest(vf_count=2, pf_address=nvme_pf)
    assert pci.call('virtual_functions', pf_address=nvme_pf) == []
    first = h.create(device_count=1, device_kind='nvme')
    second = h.create(device_count=1, device_kind='nvme')

    lease = _bound(h, first, 'bind creating the VFs')
    assert lease.status == states.BOUND, lease.fault
    vfs = pci.call('virtual_functions', pf_address=nvme_pf)
    assert len(vfs) == 2
    [device] = lease.devices
    vf = vfs[sriov.vf_index(device.address)]
    assert device.pci_address == vf
    # The kernel's own view: the VF on vfio-pci, its group's node there,
    # the PF still the host's.
    assert agent.shell('readlink /sys/bus/pci/devices/%s/driver'
                       % vf).strip().endswith('/vfio-pci')
    group = pci.call('iommu_group', address=vf)
    assert agent.shell('test -c /dev/vfio/%s && echo yes'
                       % group).strip() == 'yes'
    assert agent.shell('readlink /sys/bus/pci/devices/%s/physfn'
                       % vf).strip().endswith(nvme_pf)
    assert pci.call('driver', address=nvme_pf) == 'nvme'
    assert agent.shell('cat /sys/bus/pci/devices/%s/sriov_numvfs'
                       % nvme_pf).strip() == '2'

    lease2 = _bound(h, second, 'bind of a VF already made')
    assert lease2.status == states.BOUND, lease2.fault
    vf2 = lease2.devices[0].pci_address
    assert vf2 in vfs and vf2 != vf
    # The same VFs: the count did not go through 0 under the first lease.
    assert pci.call('virtual_functions', pf_address=nvme_pf) == vfs
    assert pci.call('driver', address=vf) == 'vfio-pci'
    assert pci.call('driver', address=vf2) == 'vfio-pci'

    h.api.unbind_lease(h_mod.user_context(), first)
    lease = h.wait(first, [states.RESERVED, states.BIND_FAILED],
                   timeout=LEASE_TIMEOUT)
    assert lease.status == states.RESERVED, lease.fault
    assert pci.call('driver', address=vf) is None
    assert pci.call('virtual_functions', pf_address=nvme_pf) == vfs

    h.api.delete_lease(h_mod.user_context(), second)
    lease2 = h.wait(second, [states.RELEASED, states.ERROR],
                    timeout=LEASE_TIMEOUT)
    assert lease2.status == states.RELEASED, lease2.fault
    assert pci.call('virtual_functions', pf_address=nvme_pf) == []
    assert agent.shell('cat /sys/bus/pci/devices/%s/sriov_numvfs'
                       % nvme_pf).strip() == '0'
    for gone in vfs:
        assert gone not in pci.call('functions')
    assert pci.call('driver', address=nvme_pf) == 'nvme'
    h.api.delete_lease(h_mod.user_context(), first)
    h.wait(first, states.RELEASED, timeout=LEASE_TIMEOUT)
    h.assert_nothing_live()


def test_missing_pf_fails_the_bind_and_changes_nothing(conductor, pci):
    absent = '0000:7f:1f.7'
    before = pci.call('functions')
    h = conductor.start_in_guest(vf_count=1, pf_address=absent)
    uuid = h.create(device_count=1, device_kind='nvme')
    lease = _bound(h, uuid)
    assert lease.status == states.BIND_FAILED
    assert ('the physical function %s of device %s is not on this host'
            % (absent, lease.devices[0].uuid)) in lease.fault
    assert pci.call('functions') == before
    h.api.delete_lease(h_mod.user_context(), uuid)
    assert h.wait(uuid, states.RELEASED, timeout=LEASE_TIMEOUT)
    h.assert_nothing_live()
