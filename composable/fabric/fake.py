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

"""A simulated PCIe fabric for demos, DevStack and tests.

It touches no hardware. Bindings are kept in this process's memory so tests
can check that nothing is left bound. Faults can be injected through the
fabric's driver_info:

``simulate_delay``
    seconds every bind and unbind takes (a number), to exercise
    ``[fabric]operation_timeout``;
``simulate_failure``
    ``"bind"``, ``"unbind"`` or ``true`` (both): those operations fail.

What it discovers is what ``driver_info`` lists under ``inventory``: a list
of devices, each ``{"address": ..., "kind": "gpu", "model": ...,
"vendor_id": ..., "product_id": ..., "serial": ..., "health": "ok"}``
(only ``address`` is required; ``"hosts": ["compute-1", ...]`` names the
only hosts that can reach it, absent or null for every host), so that
the conductor's fabric sync can be
tried without hardware. A fabric whose driver_info has no ``inventory`` at
all (the demo's) simulates no discovery: ``discover`` answers None, "cannot
tell", and the sync leaves the devices registered through the API alone. An
empty list is an inventory too: a fabric that holds nothing.
"""

import threading
import time
import zlib

from oslo_log import log as logging

from composable.common import exception
from composable.common import locator as locator_mod
from composable.fabric import base

LOG = logging.getLogger(__name__)

SIMULATED = 'SIMULATED fabric: no hardware is touched'

_FAILURE_CHOICES = ('bind', 'unbind')
_INVENTORY_KEYS = ('address', 'kind', 'model', 'vendor_id', 'product_id',
                   'serial', 'health', 'hosts')


def fake_pci_address(device):
    """The same address for the same device every time, so a repeated
    bind returns what the first one did."""
    key = str(device.get('address') or device.get('uuid'))
    crc = zlib.crc32(key.encode('utf-8'))
    bus = 0x40 + crc % 0xa0
    slot = (crc >> 8) % 0x20
    return '0000:%02x:%02x.0' % (bus, slot)


class FakeFabricDriver(base.FabricDriver):

    simulated = True

    # (fabric name, device address) -> host name, shared by every instance
    # in the process like a real fabric's state would be.
    _bindings = {}
    _lock = threading.Lock()

    def __init__(self):
        LOG.warning('%s (driver "fake" loaded)', SIMULATED)

    @classmethod
    def bindings(cls):
        with cls._lock:
            return dict(cls._bindings)

    @classmethod
    def reset(cls):
        with cls._lock:
            cls._bindings.clear()

    def validate_driver_info(self, driver_info):
        info = driver_info or {}
        if not isinstance(info, dict):
            raise exception.Invalid(reason='driver_info must be an object')
        delay = info.get('simulate_delay')
        if delay is not None:
            if (isinstance(delay, bool)
                    or not isinstance(delay, (int, float)) or delay < 0):
                raise exception.Invalid(
                    reason='driver_info simulate_delay must be a number of '
                           'seconds >= 0')
        failure = info.get('simulate_failure')
        if failure is not None and not isinstance(failure, bool):
            if failure not in _FAILURE_CHOICES:
                raise exception.Invalid(
                    reason='driver_info simulate_failure must be true, '
                           'false, "bind" or "unbind"')
        inventory = info.get('inventory')
        if inventory is not None:
            self._validate_inventory(inventory)

    @staticmethod
    def _validate_inventory(inventory):
        if not isinstance(inventory, list):
            raise exception.Invalid(
                reason='driver_info inventory must be a list of devices')
        seen = set()
        for index, item in enumerate(inventory):
            where = 'driver_info inventory[%d]' % index
            if not isinstance(item, dict) or not item.get('address'):
                raise exception.Invalid(
                    reason='%s must be an object with an address' % where)
            unknown = set(item) - set(_INVENTORY_KEYS)
            if unknown:
                raise exception.Invalid(
                    reason='%s has unknown keys: %s' %
                    (where, ', '.join(sorted(unknown))))
            if item.get('kind', 'gpu') not in base.KINDS:
                raise exception.Invalid(
                    reason='%s kind must be one of %s' %
                    (where, ', '.join(base.KINDS)))
            if item.get('health', base.HEALTH_OK) not in base.HEALTHS:
                raise exception.Invalid(
                    reason='%s health must be one of %s' %
                    (where, ', '.join(base.HEALTHS)))
            hosts = item.get('hosts')
            if hosts is not None and not (
                    isinstance(hosts, list) and
                    all(isinstance(h, str) and h for h in hosts)):
                raise exception.Invalid(
                    reason='%s hosts must be a list of host names, or '
                           'null for every host' % where)
            if item['address'] in seen:
                raise exception.Invalid(
                    reason='%s repeats address %s' % (where,
                                                      item['address']))
            seen.add(item['address'])

    def _simulate(self, fabric, operation):
        info = fabric.get('driver_info') or {}
        delay = info.get('simulate_delay')
        if delay:
            time.sleep(float(delay))
        failure = info.get('simulate_failure')
        if failure is True or failure == operation:
            raise exception.DriverError(
                reason='simulated %s failure on fabric %s (driver_info '
                       'simulate_failure)' % (operation, fabric.get('name')))

    def bind_device(self, fabric, device, host):
        LOG.debug('%(sim)s: binding device %(dev)s to host %(host)s on '
                  'fabric %(fabric)s',
                  {'sim': SIMULATED, 'dev': device.get('uuid'),
                   'host': host.get('name'), 'fabric': fabric.get('name')})
        self._simulate(fabric, 'bind')
        listed = next((item for item in (fabric.get('driver_info') or {})
                       .get('inventory') or []
                       if item.get('address') == device.get('address')),
                      {})
        if listed.get('hosts') is not None and \
                host.get('name') not in listed['hosts']:
            # As a fabric whose zones keep the device from the host.
            raise exception.DriverError(
                reason='device %s cannot reach host %s on fabric %s (it '
                       'reaches %s)' % (device.get('uuid'), host.get('name'),
                                        fabric.get('name'),
                                        ', '.join(listed['hosts']) or
                                        'no host'))
        key = (fabric.get('name'), device.get('address'))
        with self._lock:
            holder = self._bindings.get(key)
            if holder is not None and holder != host.get('name'):
                raise exception.DriverError(
                    reason='device %s is bound to host %s on fabric %s' %
                    (device.get('uuid'), holder, fabric.get('name')))
            self._bindings[key] = host.get('name')
        # A simulated fabric may as well know the bus address.
        return locator_mod.Locator(vendor_id=device.get('vendor_id'),
                                   product_id=device.get('product_id'),
                                   pci_address=fake_pci_address(device),
                                   fabric_ref=device.get('address'))

    def unbind_device(self, fabric, device, host):
        LOG.debug('%(sim)s: unbinding device %(dev)s from host %(host)s '
                  'on fabric %(fabric)s',
                  {'sim': SIMULATED, 'dev': device.get('uuid'),
                   'host': host.get('name') if host else None,
                   'fabric': fabric.get('name')})
        self._simulate(fabric, 'unbind')
        with self._lock:
            self._bindings.pop((fabric.get('name'), device.get('address')),
                               None)

    def discover(self, fabric):
        info = fabric.get('driver_info') or {}
        if info.get('inventory') is None:
            # Nothing simulated to discover: "cannot tell", not "empty",
            # or every device registered through the API would vanish.
            return None
        with self._lock:
            bound = {address: host for (name, address), host
                     in self._bindings.items() if name == fabric.get('name')}
        found = []
        for item in info.get('inventory') or []:
            found.append({
                'address': item['address'],
                'kind': item.get('kind', 'gpu'),
                'model': item.get('model'),
                'vendor_id': item.get('vendor_id'),
                'product_id': item.get('product_id'),
                'serial': item.get('serial'),
                'health': item.get('health', base.HEALTH_OK),
                'hosts': item.get('hosts'),
                'bound_to': bound.get(item['address'])})
        return found
