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

"""A stand-in for VFIO device assignment into a running guest.

This machine cannot pass a PCI function through to a guest (no VFIO), so
the hostdev hot-plug is tested at the libvirt API contract instead: a
connection and domains that take attachDeviceFlags/detachDeviceAlias as
libvirt does, raise libvirt.libvirtError with libvirt's own error codes
and messages, and deliver VIR_DOMAIN_EVENT_ID_DEVICE_REMOVED and
DEVICE_REMOVAL_FAILED through the callbacks registered with
domainEventRegisterAny, from another thread, as libvirt's event loop
does.
"""

import threading
from xml.etree import ElementTree

import libvirt

# How a guest answers an unplug request of one device.
RELEASES = 'releases'      # device gone, then the device-removed event
SILENT = 'silent'          # device gone, no event ever comes
IGNORES = 'ignores'        # nothing happens (the guest ignores the eject)
REFUSES = 'refuses'        # device stays, device-removal-failed event
VANISHES = 'vanishes'      # the domain is destroyed during the unplug


def libvirt_error(code, message):
    """A libvirt.libvirtError as the binding raises it (its err tuple
    carries the code and message)."""
    error = libvirt.libvirtError(message)
    error.err = (code, libvirt.VIR_FROM_QEMU, message,
                 libvirt.VIR_ERR_ERROR, None, None, None, 0, 0)
    return error


class VfioStandInConnection(object):

    def __init__(self):
        self.domains = {}
        self.callbacks = {}
        self.alive = True
        self.opened = 0

    def open(self, uri):
        self.opened += 1
        return self

    def isAlive(self):
        return self.alive

    def add(self, domain):
        domain.conn = self
        self.domains[domain.uuid] = domain
        return domain

    def lookupByUUIDString(self, uuid):
        domain = self.domains.get(uuid)
        if domain is None:
            raise libvirt_error(libvirt.VIR_ERR_NO_DOMAIN,
                                "Domain not found: no domain with matching "
                                "uuid '%s'" % uuid)
        return domain

    def domainEventRegisterAny(self, dom, event_id, cb, opaque):
        self.callbacks.setdefault(event_id, []).append((cb, opaque))
        return len(self.callbacks)

    def emit(self, event_id, domain, alias):
        for cb, opaque in self.callbacks.get(event_id, ()):
            cb(self, domain, alias, opaque)


class VfioStandInDomain(object):
    """A running q35 guest with ``free_slots`` empty pcie-root-ports
    (None: any number)."""

    def __init__(self, uuid, free_slots=None, event_delay=0.05):
        self.uuid = uuid
        self.conn = None
        self.active = True
        self.gone = False
        self.free_slots = free_slots
        self.event_delay = event_delay
        self.hostdevs = []
        self.guest = {}            # alias -> how the guest answers
        self.default_guest = RELEASES
        self.attach_calls = []
        self.detach_calls = []
        self.lock = threading.Lock()
        self.timers = []

    def _check(self):
        if self.gone:
            raise libvirt_error(libvirt.VIR_ERR_NO_DOMAIN,
                                "Domain not found: no domain with matching "
                                "uuid '%s'" % self.uuid)

    def UUIDString(self):
        return self.uuid

    def isActive(self):
        self._check()
        return self.active

    def aliases(self):
        with self.lock:
            return [h.find('alias').get('name') for h in self.hostdevs]

    def XMLDesc(self, flags=0):
        self._check()
        with self.lock:
            devices = ''.join(ElementTree.tostring(h, encoding='unicode')
                              for h in self.hostdevs)
        return ("<domain type='kvm'><uuid>%s</uuid><os><type "
                "machine='pc-q35-7.2'>hvm</type></os><devices>"
                "<disk type='file' device='disk'><alias name='virtio-disk0'/>"
                "</disk>%s</devices></domain>" % (self.uuid, devices))

    def attachDeviceFlags(self, xml, flags):
        self._check()
        self.attach_calls.append((xml, flags))
        if not self.active:
            raise libvirt_error(libvirt.VIR_ERR_OPERATION_INVALID,
                                'Requested operation is not valid: domain '
                                'is not running')
        element = ElementTree.fromstring(xml)
        assert element.tag == 'hostdev' and flags == \
            libvirt.VIR_DOMAIN_AFFECT_LIVE
        with self.lock:
            if self.free_slots is not None:
                if self.free_slots <= 0:
                    raise libvirt_error(libvirt.VIR_ERR_INTERNAL_ERROR,
                                        'internal error: No more available '
                                        'PCI slots')
                self.free_slots -= 1
            self.hostdevs.append(element)

    def _remove(self, alias):
        with self.lock:
            kept = [h for h in self.hostdevs
                    if h.find('alias').get('name') != alias]
            if len(kept) != len(self.hostdevs) and \
                    self.free_slots is not None:
                self.free_slots += 1
            self.hostdevs = kept

    def _later(self, func, *args):
        timer = threading.Timer(self.event_delay, func, args)
        timer.daemon = True
        self.timers.append(timer)
        timer.start()

    def detachDeviceAlias(self, alias, flags):
        self._check()
        self.detach_calls.append((alias, flags))
        assert flags == libvirt.VIR_DOMAIN_AFFECT_LIVE
        if alias not in self.aliases():
            raise libvirt_error(libvirt.VIR_ERR_DEVICE_MISSING,
                                "device not found: no device found with "
                                "alias %s" % alias)
        how = self.guest.get(alias, self.default_guest)
        if how == RELEASES:
            def release():
                self._remove(alias)
                self.conn.emit(libvirt.VIR_DOMAIN_EVENT_ID_DEVICE_REMOVED,
                               self, alias)
            self._later(release)
        elif how == SILENT:
            self._later(self._remove, alias)
        elif how == REFUSES:
            self._later(self.conn.emit,
                        libvirt.VIR_DOMAIN_EVENT_ID_DEVICE_REMOVAL_FAILED,
                        self, alias)
        elif how == VANISHES:
            self.gone = True
            self.conn.domains.pop(self.uuid, None)
            raise libvirt_error(libvirt.VIR_ERR_NO_DOMAIN,
                                "Domain not found: no domain with matching "
                                "uuid '%s'" % self.uuid)

    def wait_timers(self):
        for timer in self.timers:
            timer.join(30)
