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

"""Leased PCI devices hot-plugged into guests, at the libvirt API
contract: VFIO assignment cannot run on this machine, so the domains are
the stand-in of tests/unit/agent/compute_node/fake_vfio.py (libvirt's error
codes and its device-removed events through the registered callbacks)."""

import time
from xml.etree import ElementTree

import libvirt
import pytest

from composable.agent.compute_node import hostdev
from composable.common import exception
from tests.unit.agent.compute_node import fake_vfio

INSTANCE = '5f0e2f4c-8b7a-4c39-9d5e-0a6f3a1b2c3d'
LEASE = '9c1d6a52-32e8-4b0b-8a53-6e2b0c9b7f10'
GPU_A = '1b0b4a1e-0f6e-4f59-9a35-2f3c8b9d0e11'
GPU_B = '2c1c5b2f-1a7f-4a6a-8b46-3a4d9c0e1f22'


def test_libvirt_numbers_are_libvirts():
    # The module keeps its own copies so it imports without the binding.
    for name in ('VIR_ERR_INTERNAL_ERROR', 'VIR_ERR_OPERATION_FAILED',
                 'VIR_ERR_NO_DOMAIN', 'VIR_ERR_OPERATION_INVALID',
                 'VIR_ERR_DEVICE_MISSING', 'VIR_DOMAIN_AFFECT_LIVE',
                 'VIR_DOMAIN_EVENT_ID_DEVICE_REMOVED',
                 'VIR_DOMAIN_EVENT_ID_DEVICE_REMOVAL_FAILED'):
        assert getattr(hostdev, name) == getattr(libvirt, name), name


def test_hostdev_xml():
    element = ElementTree.fromstring(hostdev.hostdev_xml(GPU_A,
                                                         '0000:41:1f.3'))
    assert element.tag == 'hostdev'
    assert element.attrib == {'mode': 'subsystem', 'type': 'pci',
                              'managed': 'no'}
    assert element.find('driver').get('name') == 'vfio'
    assert element.find('./source/address').attrib == {
        'domain': '0x0000', 'bus': '0x41', 'slot': '0x1f',
        'function': '0x3'}
    assert element.find('alias').get('name') == 'ua-composable-' + GPU_A
    # A short address (no PCI domain) means domain 0.
    short = ElementTree.fromstring(hostdev.hostdev_xml(GPU_A, '41:00.0'))
    assert short.find('./source/address').get('domain') == '0x0000'


@pytest.mark.parametrize('bad', [None, '', '0000:41:00', '0000:4g:00.0',
                                 '0000:41:00.8', 'pci_0000_41_00_0'])
def test_bad_pci_address_is_refused(bad):
    with pytest.raises(exception.DriverError) as info:
        hostdev.hostdev_xml(GPU_A, bad)
    assert 'is not a PCI address' in info.value.message


@pytest.fixture
def conn():
    return fake_vfio.VfioStandInConnection()


@pytest.fixture
def domain(conn):
    guest = conn.add(fake_vfio.VfioStandInDomain(INSTANCE))
    yield guest
    guest.wait_timers()


def _attacher(conn, **kwargs):
    kwargs.setdefault('detach_timeout', 10)
    kwargs.setdefault('detach_attempts', 3)
    kwargs.setdefault('attach_timeout', 10)
    return hostdev.GuestDeviceAttacher(uri='qemu:///test',
                                       connect=conn.open, **kwargs)


def test_attach_two_devices_of_a_lease_then_detach(conn, domain):
    attacher = _attacher(conn)
    plugged = attacher.attach(INSTANCE, LEASE, {GPU_A: '0000:41:00.0',
                                                GPU_B: '0000:42:00.0'})
    assert plugged == {GPU_A: 'ua-composable-' + GPU_A,
                       GPU_B: 'ua-composable-' + GPU_B}
    assert sorted(domain.aliases()) == sorted(plugged.values())
    assert attacher.present(INSTANCE, [GPU_A, GPU_B]) == {GPU_A, GPU_B}
    # The events come through the callbacks registered on the connection.
    assert set(conn.callbacks) == {
        libvirt.VIR_DOMAIN_EVENT_ID_DEVICE_REMOVED,
        libvirt.VIR_DOMAIN_EVENT_ID_DEVICE_REMOVAL_FAILED}
    attacher.detach(INSTANCE, LEASE, [GPU_A, GPU_B])
    assert domain.aliases() == []
    assert sorted(a for a, _f in domain.detach_calls) == sorted(
        plugged.values())
    assert attacher.events.pending() == 0


def test_attach_again_at_restart_is_idempotent(conn, domain):
    attacher = _attacher(conn)
    addresses = {GPU_A: '0000:41:00.0'}
    attacher.attach(INSTANCE, LEASE, addresses)
    attacher.attach(INSTANCE, LEASE, addresses)
    assert len(domain.attach_calls) == 1
    assert domain.aliases() == ['ua-composable-' + GPU_A]


def test_no_free_hotplug_slot(conn):
    guest = conn.add(fake_vfio.VfioStandInDomain(INSTANCE, free_slots=1))
    attacher = _attacher(conn)
    with pytest.raises(hostdev.NoHotplugSlot) as info:
        attacher.attach(INSTANCE, LEASE, {GPU_A: '0000:41:00.0',
                                          GPU_B: '0000:42:00.0'})
    message = info.value.message
    assert 'no free PCIe hot-plug slot' in message
    assert 'num_pcie_ports' in message and 'q35' in message
    assert 'No more available PCI slots' in message
    # The device plugged before the failure was taken out again.
    guest.wait_timers()
    assert guest.aliases() == []
    assert guest.free_slots == 1


def test_function_passed_through_by_someone_else(conn, domain):
    domain.hostdevs.append(ElementTree.fromstring(
        "<hostdev mode='subsystem' type='pci' managed='yes'><source>"
        "<address domain='0x0000' bus='0x41' slot='0x00' function='0x0'/>"
        "</source><alias name='hostdev0'/></hostdev>"))
    with pytest.raises(exception.DriverError) as info:
        _attacher(conn).attach(INSTANCE, LEASE, {GPU_A: '0000:41:00.0'})
    assert 'hostdev0' in info.value.message
    assert domain.attach_calls == []


def test_attach_to_a_stopped_or_missing_guest(conn, domain):
    domain.active = False
    with pytest.raises(exception.DriverError) as info:
        _attacher(conn).attach(INSTANCE, LEASE, {GPU_A: '0000:41:00.0'})
    assert 'not running' in info.value.message
    with pytest.raises(exception.DriverError):
        _attacher(conn).attach('00000000-0000-0000-0000-000000000000',
                               LEASE, {GPU_A: '0000:41:00.0'})


def test_attach_without_host_address(conn, domain):
    with pytest.raises(exception.DriverError) as info:
        _attacher(conn).attach(INSTANCE, LEASE, {GPU_A: None})
    assert GPU_A in info.value.message
    assert domain.attach_calls == []


def test_late_event_within_the_deadline(conn, domain):
    attacher = _attacher(conn, detach_timeout=20)
    attacher.attach(INSTANCE, LEASE, {GPU_A: '0000:41:00.0'})
    domain.event_delay = 1.0
    start = time.monotonic()
    attacher.detach(INSTANCE, LEASE, [GPU_A])
    # One request: the wait ended with the event, not with a retry.
    assert len(domain.detach_calls) == 1
    assert domain.aliases() == []
    assert time.monotonic() - start < 20


def test_event_never_arrives_but_device_went(conn, domain):
    attacher = _attacher(conn, detach_timeout=1)
    attacher.attach(INSTANCE, LEASE, {GPU_A: '0000:41:00.0'})
    domain.default_guest = fake_vfio.SILENT
    domain.event_delay = 0.01
    attacher.detach(INSTANCE, LEASE, [GPU_A])
    assert len(domain.detach_calls) == 1
    assert domain.aliases() == []


def test_guest_never_lets_go(conn, domain):
    attacher = _attacher(conn, detach_timeout=0.2, detach_attempts=3)
    attacher.attach(INSTANCE, LEASE, {GPU_A: '0000:41:00.0',
                                      GPU_B: '0000:42:00.0'})
    domain.guest['ua-composable-' + GPU_B] = fake_vfio.IGNORES
    with pytest.raises(exception.DriverError) as info:
        attacher.detach(INSTANCE, LEASE, [GPU_A, GPU_B])
    message = info.value.message
    assert GPU_B in message and LEASE in message and GPU_A not in message
    assert 'after 3 unplug requests' in message
    assert 'stop the server' in message
    # Bounded: the released device was asked once, the held one three
    # times; the held device is still in the guest.
    asked = [a for a, _f in domain.detach_calls]
    assert asked.count('ua-composable-' + GPU_A) == 1
    assert asked.count('ua-composable-' + GPU_B) == 3
    assert domain.aliases() == ['ua-composable-' + GPU_B]
    assert attacher.events.pending() == 0


def test_removal_failed_event_is_final(conn, domain):
    attacher = _attacher(conn, detach_timeout=10, detach_attempts=5)
    attacher.attach(INSTANCE, LEASE, {GPU_A: '0000:41:00.0'})
    domain.default_guest = fake_vfio.REFUSES
    with pytest.raises(exception.DriverError) as info:
        attacher.detach(INSTANCE, LEASE, [GPU_A])
    assert 'device-removal-failed' in info.value.message
    assert len(domain.detach_calls) == 1
    assert domain.aliases() == ['ua-composable-' + GPU_A]


def test_domain_gone_mid_detach(conn, domain):
    attacher = _attacher(conn)
    attacher.attach(INSTANCE, LEASE, {GPU_A: '0000:41:00.0'})
    domain.default_guest = fake_vfio.VANISHES
    attacher.detach(INSTANCE, LEASE, [GPU_A])
    assert len(domain.detach_calls) == 1
    # Nothing left to detach from a domain that is not there.
    attacher.detach(INSTANCE, LEASE, [GPU_A])


def test_stopped_guest_has_nothing_to_detach(conn, domain):
    attacher = _attacher(conn)
    attacher.attach(INSTANCE, LEASE, {GPU_A: '0000:41:00.0'})
    domain.active = False
    attacher.detach(INSTANCE, LEASE, [GPU_A])
    assert domain.detach_calls == []
    assert attacher.present(INSTANCE, [GPU_A]) == {GPU_A}


def test_device_already_gone(conn, domain):
    attacher = _attacher(conn)
    attacher.detach(INSTANCE, LEASE, [GPU_A])
    assert domain.detach_calls == []


def test_unplug_already_in_progress_keeps_waiting(conn, domain):
    attacher = _attacher(conn)
    attacher.attach(INSTANCE, LEASE, {GPU_A: '0000:41:00.0'})
    alias = 'ua-composable-' + GPU_A
    real = domain.detachDeviceAlias

    def busy(name, flags):
        # QEMU still runs the unplug of an earlier request: its event
        # is still due.
        real(name, flags)
        raise fake_vfio.libvirt_error(
            libvirt.VIR_ERR_INTERNAL_ERROR,
            "internal error: unable to execute QEMU command 'device_del': "
            "Device %s is already in the process of unplug" % name)

    domain.detachDeviceAlias = busy
    attacher.detach(INSTANCE, LEASE, [GPU_A])
    assert domain.aliases() == []
    assert alias not in domain.aliases()


def test_other_libvirt_error_on_unplug(conn, domain):
    attacher = _attacher(conn)
    attacher.attach(INSTANCE, LEASE, {GPU_A: '0000:41:00.0'})

    def broken(name, flags):
        raise fake_vfio.libvirt_error(libvirt.VIR_ERR_INTERNAL_ERROR,
                                      'internal error: qemu unexpectedly '
                                      'closed the monitor')

    domain.detachDeviceAlias = broken
    with pytest.raises(exception.DriverError) as info:
        attacher.detach(INSTANCE, LEASE, [GPU_A])
    assert 'closed the monitor' in info.value.message
    assert attacher.events.pending() == 0


def test_reconnects_and_registers_again(conn, domain):
    fresh = fake_vfio.VfioStandInConnection()
    fresh.add(domain)
    # libvirtd answers the first open with conn, every later one (after
    # its restart) with fresh.
    opens = [conn.open, fresh.open]
    attacher = hostdev.GuestDeviceAttacher(
        uri='qemu:///test', connect=lambda uri: opens[
            min(attacher.connection.opened, 1)](uri),
        detach_timeout=10, detach_attempts=3, attach_timeout=10)
    attacher.attach(INSTANCE, LEASE, {GPU_A: '0000:41:00.0'})
    conn.alive = False
    attacher.detach(INSTANCE, LEASE, [GPU_A])
    assert attacher.connection.opened == 2
    assert fresh.opened == 1
    assert libvirt.VIR_DOMAIN_EVENT_ID_DEVICE_REMOVED in fresh.callbacks
    assert domain.aliases() == []


def test_device_options_are_listed_once_in_compute_node():
    from composable.conf import CONF
    from composable.conf import opts
    listed = [(getattr(group, 'name', group), [o.name for o in group_opts])
              for group, group_opts in opts.list_opts()]
    assert [name for name, _ in listed].count('compute_node') == 1
    names = dict(listed)['compute_node']
    assert {'device_detach_timeout', 'device_detach_attempts',
            'detach_timeout'} <= set(names)
    # The agent gives up before the conductor stops waiting for it.
    assert (CONF.compute_node.device_detach_timeout *
            CONF.compute_node.device_detach_attempts <
            CONF.rpc_response_timeout_bind)


def test_real_libvirt_connection_takes_the_event_callbacks():
    """libvirt's own test driver (no hot-plug there, so only the
    connection, the event loop and the callback registration are real)."""
    attacher = hostdev.GuestDeviceAttacher(uri='test:///default')
    conn = attacher._connection()
    assert attacher.events.registered_on is conn
    domain = conn.lookupByName('test')
    assert attacher.present(domain.UUIDString(), [GPU_A]) == set()
    with pytest.raises(exception.DriverError) as info:
        attacher.attach(domain.UUIDString(), LEASE,
                        {GPU_A: '0000:41:00.0'})
    assert 'could not hot-plug' in info.value.message
    # Nothing to detach: the device is not in the domain.
    attacher.detach(domain.UUIDString(), LEASE, [GPU_A])
    assert attacher.present('00000000-0000-0000-0000-000000000000',
                            [GPU_A]) == {GPU_A}
