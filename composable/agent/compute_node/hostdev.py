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

"""Leased PCI devices passed through into a running Nova instance.

Once the host side has bound a composed function to ``vfio-pci``
(composable.privsep.pci_sysfs), the function is hot-plugged into the
libvirt domain of the lease's instance as::

    <hostdev mode='subsystem' type='pci' managed='no'>
      <driver name='vfio'/>
      <source><address domain='0x0000' bus='0x41' slot='0x00'
                       function='0x0'/></source>
      <alias name='ua-composable-<device uuid>'/>
    </hostdev>

- ``managed='no'``: the agent, not libvirt, binds the function to
  vfio-pci and gives it back, because the function must also be removed
  from the host's bus before the fabric unbinds it.
- The user alias names the device of the lease, so the device is found
  again in the live XML (an attach already done is not done twice) and
  unplugged by alias.
- Only the live domain is changed, never its persistent definition: Nova
  owns that, and regenerates the domain on hard reboot, resize,
  migration...; the libvirt hook plugs the devices again at every start
  (composable.agent.hook_server).
- A hot-plug needs a free hot-plug capable PCIe slot in the guest: on
  q35 machines an empty ``pcie-root-port``, which Nova adds with its
  ``[libvirt] num_pcie_ports`` option. libvirt answers "No more available
  PCI slots" when there is none; the lease then gets a fault that says
  so (NoHotplugSlot).

Unplugging is a request the guest acknowledges (PCIe native hot-plug or
ACPI eject). As Nova's libvirt driver does, each request is followed by a
wait for libvirt's VIR_DOMAIN_EVENT_ID_DEVICE_REMOVED event (or
DEVICE_REMOVAL_FAILED, which is final) for ``[compute_node]
device_detach_timeout`` seconds; a device still in the live XML after
that is asked again, ``device_detach_attempts`` times in all. A guest
that never lets go gets a DriverError the lease shows as its fault, and
the device stays in the guest (and bound to the host): the host side and
the fabric must never pull a function a running guest still drives.
A domain that is not running, or goes away meanwhile, has no device to
unplug.

Events need libvirt's event loop: the default implementation is
registered before the agent's libvirt connection (libvirt_connection,
shared with the guest memory attacher) is opened, and a daemon thread
runs it; the removal callbacks are registered again on every connection
it opens.
"""

import re
import threading
import time
from xml.etree import ElementTree

from oslo_concurrency import lockutils
from oslo_log import log as logging
from oslo_utils import importutils

from composable.agent.compute_node import libvirt_connection
from composable.common import exception
from composable.common import utils
from composable import conf

libvirt = importutils.try_import('libvirt')

CONF = conf.CONF
LOG = logging.getLogger(__name__)

ALIAS_PREFIX = 'ua-composable-'

# libvirt numbers (virErrorNumber, virDomainEventID, flags), so that this
# module can be imported, and tested, without the libvirt binding.
VIR_ERR_INTERNAL_ERROR = 1
VIR_ERR_OPERATION_FAILED = 9
VIR_ERR_NO_DOMAIN = 42
VIR_ERR_OPERATION_INVALID = 55
VIR_ERR_DEVICE_MISSING = 99
VIR_DOMAIN_AFFECT_LIVE = 1
VIR_DOMAIN_EVENT_ID_DEVICE_REMOVED = 15
VIR_DOMAIN_EVENT_ID_DEVICE_REMOVAL_FAILED = 22

REMOVED = 'removed'
REMOVAL_FAILED = 'removal-failed'

# What libvirt says when the guest has no free hot-plug capable slot for
# a new PCI device (VIR_ERR_INTERNAL_ERROR), or the slot it would take
# does not take hot-plugs.
NO_SLOT_HINTS = ('no more available pci slots',
                 'does not support hotplug',
                 "doesn't support hotplug")
# QEMU is still unplugging the device from an earlier request.
UNPLUG_IN_PROGRESS = 'already in the process of unplug'

_PCI_ADDRESS = re.compile(
    r'^(?:([0-9a-fA-F]{4}):)?([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])$')


class NoHotplugSlot(exception.DriverError):
    """The guest has no free PCIe slot that takes a hot-plugged device."""


def device_alias(device_uuid):
    return ALIAS_PREFIX + device_uuid


def parse_pci_address(address):
    """'0000:41:00.0' (or '41:00.0') -> (domain, bus, slot, function)."""
    match = _PCI_ADDRESS.match(address or '')
    if match is None:
        raise exception.DriverError(
            reason='%r is not a PCI address (domain:bus:slot.function, '
                   'e.g. 0000:41:00.0)' % (address,))
    domain, bus, slot, function = match.groups()
    return (int(domain or '0', 16), int(bus, 16), int(slot, 16),
            int(function, 16))


def hostdev_xml(device_uuid, pci_address):
    """The <hostdev> element that passes one host function through."""
    domain, bus, slot, function = parse_pci_address(pci_address)
    hostdev = ElementTree.Element('hostdev', mode='subsystem', type='pci',
                                  managed='no')
    ElementTree.SubElement(hostdev, 'driver', name='vfio')
    source = ElementTree.SubElement(hostdev, 'source')
    ElementTree.SubElement(source, 'address', domain='0x%04x' % domain,
                           bus='0x%02x' % bus, slot='0x%02x' % slot,
                           function='0x%x' % function)
    ElementTree.SubElement(hostdev, 'alias', name=device_alias(device_uuid))
    return ElementTree.tostring(hostdev, encoding='unicode')


class LiveHostdev(object):
    """A PCI <hostdev> of the live domain XML."""

    def __init__(self, element):
        self.element = element
        alias = element.find('alias')
        self.alias = alias.get('name') if alias is not None else None
        address = element.find('./source/address')
        self.address = None
        if address is not None:
            try:
                self.address = '%04x:%02x:%02x.%x' % tuple(
                    int(address.get(k), 16)
                    for k in ('domain', 'bus', 'slot', 'function'))
            except (TypeError, ValueError):
                pass


def live_hostdevs(domain_xml):
    root = ElementTree.fromstring(domain_xml)
    return [LiveHostdev(h) for h in root.findall('./devices/hostdev')
            if h.get('type') == 'pci']


def _normal_address(address):
    domain, bus, slot, function = parse_pci_address(address)
    return '%04x:%02x:%02x.%x' % (domain, bus, slot, function)


def _error_code(exc):
    try:
        return exc.get_error_code()
    except Exception:
        return None


def _error_text(exc):
    try:
        message = exc.get_error_message()
    except Exception:
        message = None
    return message or str(exc)


class DeviceEvents(object):
    """libvirt's device-removed and device-removal-failed events, waited
    for by (domain uuid, device alias).

    A waiter is made *before* the unplug request, so an event that comes
    before the wait starts is not missed.
    """

    def __init__(self):
        self._lock = threading.Lock()
        self._waiters = {}
        self.registered_on = None

    def register(self, conn):
        """Have ``conn`` deliver the two events here (once per
        connection)."""
        if self.registered_on is conn:
            return
        conn.domainEventRegisterAny(
            None, VIR_DOMAIN_EVENT_ID_DEVICE_REMOVED, self._on_removed, None)
        conn.domainEventRegisterAny(
            None, VIR_DOMAIN_EVENT_ID_DEVICE_REMOVAL_FAILED,
            self._on_removal_failed, None)
        self.registered_on = conn

    # libvirt's callback signature: (conn, dom, dev_alias, opaque).
    def _on_removed(self, conn, dom, alias, opaque):
        self.deliver(dom.UUIDString(), alias, REMOVED)

    def _on_removal_failed(self, conn, dom, alias, opaque):
        self.deliver(dom.UUIDString(), alias, REMOVAL_FAILED)

    def deliver(self, domain_uuid, alias, kind):
        LOG.debug('libvirt event %(kind)s for device %(alias)s of domain '
                  '%(domain)s', {'kind': kind, 'alias': alias,
                                 'domain': domain_uuid})
        with self._lock:
            waiters = list(self._waiters.get((domain_uuid.lower(), alias),
                                             ()))
        for waiter in waiters:
            waiter.set(kind)

    def waiter(self, domain_uuid, alias):
        waiter = _Waiter((domain_uuid.lower(), alias))
        with self._lock:
            self._waiters.setdefault(waiter.key, []).append(waiter)
        return waiter

    def forget(self, waiter):
        with self._lock:
            waiters = self._waiters.get(waiter.key, [])
            if waiter in waiters:
                waiters.remove(waiter)
            if not waiters:
                self._waiters.pop(waiter.key, None)

    def pending(self):
        with self._lock:
            return sum(len(w) for w in self._waiters.values())


class _Waiter(object):

    def __init__(self, key):
        self.key = key
        self.kind = None
        self._event = threading.Event()

    def set(self, kind):
        # A removal failure is final: a later event does not hide it.
        if self.kind != REMOVAL_FAILED:
            self.kind = kind
        self._event.set()

    def wait(self, timeout):
        self._event.wait(max(0.0, timeout))
        return self.kind


class GuestDeviceAttacher(object):
    """Hot-plugs leased PCI functions into running libvirt domains and
    unplugs them.

    ``connection`` is the agent's LibvirtConnection (libvirt_connection),
    shared with the guest memory attacher; without it one is made from
    ``uri``, ``connect`` (the URI -> a libvirt connection) and
    ``event_loop`` (run before the first connection), by default
    libvirt.open and libvirt_connection.start_libvirt_event_loop. The
    timeouts come from the [compute_node] options unless given.
    """

    def __init__(self, uri=None, connect=None, event_loop=None,
                 attach_timeout=None, detach_timeout=None,
                 detach_attempts=None, connection=None):
        if connection is None:
            connection = libvirt_connection.LibvirtConnection(
                uri, connect=connect, event_loop=event_loop)
        self.connection = connection
        self.uri = connection.uri
        self.attach_timeout = (attach_timeout if attach_timeout is not None
                               else CONF.compute_node.attach_timeout)
        self.detach_timeout = (
            detach_timeout if detach_timeout is not None
            else CONF.compute_node.device_detach_timeout)
        self.detach_attempts = (
            detach_attempts if detach_attempts is not None
            else CONF.compute_node.device_detach_attempts)
        self.events = DeviceEvents()
        # Every connection, the reopened ones too, delivers the removal
        # events of devices.
        self.connection.add_listener(self.events.register)

    # ---------------------------------------------------------- libvirt

    def _connection(self):
        return self.connection.get(
            'leased devices cannot be passed through to guests on this '
            'host')

    def _domain(self, instance_uuid):
        """The domain of the instance, or None when it has none."""
        try:
            return self._connection().lookupByUUIDString(instance_uuid)
        except exception.DriverError:
            raise
        except Exception as exc:
            if _error_code(exc) == VIR_ERR_NO_DOMAIN:
                return None
            raise

    @staticmethod
    def _live(domain):
        return live_hostdevs(domain.XMLDesc(0))

    @staticmethod
    def _running(domain):
        try:
            return bool(domain.isActive())
        except Exception as exc:
            if _error_code(exc) == VIR_ERR_NO_DOMAIN:
                return False
            raise

    # ----------------------------------------------------------- attach

    def attach(self, instance_uuid, lease_uuid, addresses,
               still_wanted=None):
        """Hot-plug the lease's functions ({device uuid: host PCI
        address}) into the running domain of the instance.

        ``still_wanted`` (a callable) is asked under the domain's lock,
        before anything is plugged: an unbind that came meanwhile makes
        it answer False, and nothing is plugged (the unbind's detach
        takes the same lock, so it never misses a device plugged here).

        A device whose alias is already in the live domain is left as it
        is (the hook re-applies devices at every start). If one device
        cannot be plugged, those this call plugged are unplugged again and
        DriverError (NoHotplugSlot when the guest has no free slot) is
        raised. Returns {device uuid: alias}.
        """
        with lockutils.lock('composable-guest-%s' % instance_uuid):
            if still_wanted is not None and not still_wanted():
                LOG.info('Lease %(lease)s is being unbound: its devices '
                         'do not go into instance %(instance)s',
                         {'lease': lease_uuid, 'instance': instance_uuid})
                return {}
            return self._attach(instance_uuid, lease_uuid, addresses)

    def _attach(self, instance_uuid, lease_uuid, addresses):
        missing = sorted(u for u, a in addresses.items() if not a)
        if missing:
            raise exception.DriverError(
                reason='the host bus address of device(s) %s of lease %s is '
                       'not known, so they cannot be passed through to '
                       'instance %s' % (', '.join(missing), lease_uuid,
                                        instance_uuid))
        domain = self._domain(instance_uuid)
        if domain is None or not self._running(domain):
            raise exception.DriverError(
                reason='instance %s is not running on this host; leased '
                       'devices are hot-plugged into running guests only '
                       '(the libvirt hook plugs them when the guest '
                       'starts)' % instance_uuid)
        live = self._live(domain)
        by_alias = {h.alias: h for h in live if h.alias}
        by_address = {h.address: h for h in live if h.address}
        plugged = {}
        added = []
        try:
            for device_uuid, address in sorted(addresses.items()):
                alias = device_alias(device_uuid)
                address = _normal_address(address)
                if alias in by_alias:
                    LOG.info('Device %(device)s of lease %(lease)s is '
                             'already in instance %(instance)s (%(alias)s)',
                             {'device': device_uuid, 'lease': lease_uuid,
                              'instance': instance_uuid, 'alias': alias})
                    plugged[device_uuid] = alias
                    continue
                other = by_address.get(address)
                if other is not None:
                    raise exception.DriverError(
                        reason='host function %s (device %s of lease %s) is '
                               'already passed through to instance %s under '
                               'another name (%s), not by composable' % (
                                   address, device_uuid, lease_uuid,
                                   instance_uuid, other.alias or 'no alias'))
                self._plug(domain, instance_uuid, lease_uuid, device_uuid,
                           address)
                added.append(device_uuid)
                plugged[device_uuid] = alias
        except Exception:
            if added:
                try:
                    self._unplug(domain, instance_uuid, added)
                except Exception:
                    LOG.exception('Could not unplug the devices of lease '
                                  '%(lease)s from instance %(instance)s '
                                  'after a failed attach; unbind the lease '
                                  'to retry', {'lease': lease_uuid,
                                               'instance': instance_uuid})
            raise
        return plugged

    def _plug(self, domain, instance_uuid, lease_uuid, device_uuid,
              address):
        what = ('host function %s (device %s of lease %s) into instance '
                '%s' % (address, device_uuid, lease_uuid, instance_uuid))
        LOG.info('Hot-plugging %s', what)
        xml = hostdev_xml(device_uuid, address)
        start = time.monotonic()
        try:
            utils.call_with_timeout(
                lambda: domain.attachDeviceFlags(xml,
                                                 VIR_DOMAIN_AFFECT_LIVE),
                self.attach_timeout, 'Hot-plug of ' + what,
                name='hostdev-attach')
        except exception.DriverTimeout:
            raise
        except Exception as exc:
            code = _error_code(exc)
            text = _error_text(exc)
            if code == VIR_ERR_NO_DOMAIN or (
                    code == VIR_ERR_OPERATION_INVALID and
                    'not running' in text.lower()):
                raise exception.DriverError(
                    reason='instance %s stopped while %s was hot-plugged '
                           'into it; it gets the device when it starts '
                           'again' % (instance_uuid, address))
            if any(h in text.lower() for h in NO_SLOT_HINTS):
                raise NoHotplugSlot(
                    reason='instance %s has no free PCIe hot-plug slot for '
                           'device %s of lease %s (libvirt: %s). A guest '
                           'takes hot-plugged devices only on a q35 machine '
                           'type with an empty pcie-root-port per device: '
                           'raise Nova\'s [libvirt] num_pcie_ports on the '
                           'compute host (the ports are made when the '
                           'server\'s domain is defined, so stop and start '
                           'the server, or hard reboot it, afterwards), or '
                           'use an image with hw_machine_type=q35; then '
                           'bind the lease again' % (
                               instance_uuid, device_uuid, lease_uuid,
                               text))
            raise exception.DriverError(
                reason='could not hot-plug %s: %s; check that the function '
                       'is bound to vfio-pci on this host and that its '
                       'IOMMU group holds no device the host uses' % (
                           what, text))
        LOG.info('Hot-plugged %(what)s in %(secs).1fs',
                 {'what': what, 'secs': time.monotonic() - start})

    # ----------------------------------------------------------- detach

    def detach(self, instance_uuid, lease_uuid, device_uuids):
        """Unplug the devices from the instance's running domain and wait
        until the guest let go of them.

        Nothing to do for a domain that does not exist, is not running,
        or stops meanwhile, nor for a device not in the domain. Raises
        DriverError when the guest refuses (a device-removal-failed
        event) or still holds a device after device_detach_attempts
        requests.
        """
        with lockutils.lock('composable-guest-%s' % instance_uuid):
            domain = self._domain(instance_uuid)
            if domain is None or not self._running(domain):
                LOG.info('Instance %(instance)s is not running here; the '
                         'devices of lease %(lease)s are in no guest',
                         {'instance': instance_uuid, 'lease': lease_uuid})
                return
            self._unplug(domain, instance_uuid, device_uuids,
                         lease_uuid=lease_uuid)

    def present(self, instance_uuid, device_uuids):
        """The device uuids whose hostdev is in the instance's running
        domain (all of them when it does not run: nothing is missing)."""
        domain = self._domain(instance_uuid)
        if domain is None or not self._running(domain):
            return set(device_uuids)
        aliases = {h.alias for h in self._live(domain)}
        return {u for u in device_uuids if device_alias(u) in aliases}

    def _still_there(self, domain, aliases):
        """The aliases still in the live domain; None when the domain
        is gone or stopped."""
        try:
            if not domain.isActive():
                return None
            live = {h.alias for h in self._live(domain)}
        except Exception as exc:
            if _error_code(exc) == VIR_ERR_NO_DOMAIN:
                return None
            raise
        return [a for a in aliases if a in live]

    def _request_unplug(self, domain, alias):
        """Ask libvirt to unplug; False when there is nothing left to
        wait for (the device or the domain is gone)."""
        try:
            domain.detachDeviceAlias(alias, VIR_DOMAIN_AFFECT_LIVE)
        except Exception as exc:
            code = _error_code(exc)
            text = _error_text(exc)
            if code == VIR_ERR_DEVICE_MISSING or (
                    code == VIR_ERR_OPERATION_FAILED and
                    'not found' in text):
                return False
            if code == VIR_ERR_NO_DOMAIN:
                return False
            if code == VIR_ERR_OPERATION_INVALID and \
                    'not running' in text.lower():
                return False
            if code == VIR_ERR_INTERNAL_ERROR and UNPLUG_IN_PROGRESS in text:
                # An earlier request still runs: its event is still due.
                LOG.debug('Unplug of %s already in progress', alias)
                return True
            raise exception.DriverError(
                reason='libvirt refused to unplug %s: %s' % (alias, text))
        return True

    def _unplug(self, domain, instance_uuid, device_uuids, lease_uuid=None):
        aliases = [device_alias(u) for u in device_uuids]
        pending = self._still_there(domain, aliases)
        if not pending:
            return
        domain_uuid = instance_uuid
        start = time.monotonic()
        for attempt in range(1, self.detach_attempts + 1):
            waiters = {a: self.events.waiter(domain_uuid, a)
                       for a in pending}
            try:
                for alias in pending:
                    LOG.info('Unplugging %(alias)s from instance '
                             '%(instance)s (attempt %(n)d of %(of)d)',
                             {'alias': alias, 'instance': instance_uuid,
                              'n': attempt, 'of': self.detach_attempts})
                    if not self._request_unplug(domain, alias):
                        waiters[alias].set(REMOVED)
                deadline = time.monotonic() + self.detach_timeout
                for alias, waiter in waiters.items():
                    kind = waiter.wait(deadline - time.monotonic())
                    if kind == REMOVAL_FAILED:
                        raise exception.DriverError(
                            reason=self._refusal(
                                instance_uuid, lease_uuid, [alias],
                                'libvirt reported that the guest failed to '
                                'release it (device-removal-failed)'))
                    if kind is None:
                        LOG.warning('No device-removed event for %(alias)s '
                                    'of instance %(instance)s within '
                                    '%(secs)d s (attempt %(n)d)',
                                    {'alias': alias,
                                     'instance': instance_uuid,
                                     'secs': self.detach_timeout,
                                     'n': attempt})
            finally:
                for waiter in waiters.values():
                    self.events.forget(waiter)
            pending = self._still_there(domain, pending)
            if not pending:
                LOG.info('Instance %(instance)s released %(aliases)s in '
                         '%(secs).1fs', {'instance': instance_uuid,
                                         'aliases': ', '.join(aliases),
                                         'secs': time.monotonic() - start})
                return
        raise exception.DriverError(reason=self._refusal(
            instance_uuid, lease_uuid, pending,
            'the guest did not release it after %d unplug requests over '
            '%d s' % (self.detach_attempts, time.monotonic() - start)))

    @staticmethod
    def _refusal(instance_uuid, lease_uuid, aliases, why):
        devices = ', '.join(a[len(ALIAS_PREFIX):] for a in aliases)
        return ('instance %s keeps leased device(s) %s%s: %s. The device '
                'stays in the guest and bound to this host, so that nothing '
                'is pulled from under it. The guest must accept PCIe '
                'hot-unplug (a Linux guest with pciehp or ACPI hot-plug, '
                'and nothing in it holding the device open); otherwise '
                'stop the server (its devices are released when it stops) '
                'and unbind or delete the lease again' % (
                    instance_uuid, devices,
                    ' of lease %s' % lease_uuid if lease_uuid else '',
                    why))
