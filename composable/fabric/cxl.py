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

"""The CXL fabric driver: memory devices composed onto hosts as NUMA nodes.

A fabric of driver ``cxl`` holds CXL Type-3 memory devices; its memory
pool (``medium`` cxl) leases their capacity in whole chunks, and a
compute host's agent makes a RAM region of a lease's chunks and onlines
it (composable.agent.compute_node.cxl_memory). The fabric's
``driver_info`` chooses the back end:

``local``
    A multi-headed device (or a device behind a switch that is already
    set up) wired to its hosts: there is nothing to compose, each host
    sees the device on its own CXL bus. ``driver_info``::

        {"backend": "local",
         "devices": {"cmm0": {"serial": "0x5a5a0001",
                              "capacity_mb": 65536,
                              "hosts": ["compute-1", "compute-2"]}}}

    Each device's key is the name of its memory node in the pool;
    ``serial`` is what the device reports (``cxl list -M``, sysfs
    ``serial``) and what the host looks it up by; ``capacity_mb`` is the
    capacity a host may be given from it (whole chunks of the pool);
    ``hosts`` the hosts cabled to one of its heads.

``redfish``
    A CXL fabric manager speaking Redfish: memory domains of its devices'
    chassis, a chunk of each lease made (or taken) there and connected to
    the host's port on the fabric (composable.fabric.redfish.cxl_memory,
    which says what the service must offer). ``driver_info``::

        {"backend": "redfish", "address": "https://fm.example.net",
         "username": "...", "password": "...", "fabric_id": "CXL",
         "system_map": {"compute-1": "/redfish/v1/Systems/Host1"}}

    and optionally ``verify_ca``, ``match_by`` (``name`` or ``uuid``, how
    a host without a system_map entry is matched to a computer system;
    a host's reported DMI UUID is tried first), ``timeout``,
    ``poll_interval``, ``auth_type`` and ``chunk_mode`` (``auto``,
    ``create`` or ``existing``). The devices are discovered, not listed.

``bind_memory`` is given the MiB of the lease on the device and the
lease's UUID (the redfish back end composes exactly that much, named
after the lease); ``unbind_memory`` the lease's UUID and the locator
the bind returned. The local back end needs neither.

``driver_info`` is never logged; the API masks its password.
"""

import re

from composable.common import exception
from composable.common import locator as locator_mod
from composable.common import media
from composable.fabric import base
from composable.fabric.redfish import cxl_memory

LOCAL = 'local'
REDFISH = 'redfish'
BACKENDS = (LOCAL, REDFISH)

# Device names are memory node names; serials go into sysfs lookups on
# the host.
_NAME = re.compile(r'[A-Za-z0-9][A-Za-z0-9._-]{0,63}')
_SERIAL = re.compile(r'(0x)?[0-9a-fA-F]{1,16}')
MAX_DEVICES = 256
MAX_HOSTS = 1024


def _invalid(key, why):
    return exception.Invalid(
        "Invalid input for field 'driver_info/%s': %s" % (key, why))


def normalize_serial(value):
    """A device serial number as the kernel prints it (``0x`` and lower
    case hex digits, no leading zeros)."""
    return '0x%x' % int(str(value), 16)


def devices(driver_info):
    """{device name: {'serial', 'capacity_mb', 'hosts'}} of a checked
    ``driver_info``."""
    found = {}
    for name, device in sorted((driver_info.get('devices') or {}).items()):
        found[name] = {'serial': normalize_serial(device['serial']),
                       'capacity_mb': int(device['capacity_mb']),
                       'hosts': sorted(set(device['hosts']))}
    return found


class CxlFabricDriver(base.FabricDriver):
    """Fabric driver ``cxl``."""

    def validate_driver_info(self, driver_info):
        backend = driver_info.get('backend', LOCAL)
        if backend not in BACKENDS:
            raise _invalid('backend', '%r is not one of %s' % (
                backend, ', '.join(BACKENDS)))
        if backend == REDFISH:
            cxl_memory.check_driver_info(driver_info)
            return
        unknown = set(driver_info) - {'backend', 'devices'}
        if unknown:
            raise _invalid(sorted(unknown)[0], 'not a setting of the cxl '
                                               'driver (backend, devices)')
        table = driver_info.get('devices')
        if not isinstance(table, dict) or not table:
            raise _invalid('devices', 'give the memory devices, by name: '
                                      '{"cmm0": {"serial": ..., '
                                      '"capacity_mb": ..., "hosts": [...]}}')
        if len(table) > MAX_DEVICES:
            raise _invalid('devices', 'at most %d devices' % MAX_DEVICES)
        serials = {}
        for name, device in table.items():
            key = 'devices/%s' % name
            if not _NAME.fullmatch(str(name)):
                raise _invalid(key, 'a device name is 1 to 64 letters, '
                                    'digits, ".", "_" or "-"')
            if not isinstance(device, dict):
                raise _invalid(key, 'an object with serial, capacity_mb '
                                    'and hosts')
            extra = set(device) - {'serial', 'capacity_mb', 'hosts'}
            if extra:
                raise _invalid('%s/%s' % (key, sorted(extra)[0]),
                               'not a device setting (serial, '
                               'capacity_mb, hosts)')
            serial = device.get('serial')
            if not isinstance(serial, str) or not _SERIAL.fullmatch(serial):
                raise _invalid(key + '/serial', 'the serial number the '
                                                'device reports, in hex '
                                                '(e.g. 0x5a5a0001)')
            serial = normalize_serial(serial)
            if serial in serials:
                raise _invalid(key + '/serial', 'device %s has it too' %
                               serials[serial])
            serials[serial] = name
            capacity = device.get('capacity_mb')
            if (isinstance(capacity, bool) or
                    not isinstance(capacity, int) or capacity <= 0 or
                    capacity % media.CXL_GRANULE_MB):
                raise _invalid(key + '/capacity_mb', 'a positive multiple '
                                                     'of %d MiB' %
                               media.CXL_GRANULE_MB)
            hosts = device.get('hosts')
            if (not isinstance(hosts, list) or not hosts or
                    len(hosts) > MAX_HOSTS or
                    not all(isinstance(h, str) and h for h in hosts)):
                raise _invalid(key + '/hosts', 'the names of the hosts '
                                               'wired to the device, a '
                                               'non-empty list')

    # A CXL fabric pools no PCIe devices.
    def bind_device(self, fabric, device, host):
        raise exception.DriverError(
            reason='fabric %s (driver cxl) holds memory devices only; '
                   'device %s cannot be bound through it' % (
                       fabric['name'], device.get('uuid')))

    def unbind_device(self, fabric, device, host):
        return None

    def discover(self, fabric):
        # No PCIe devices; the memory devices are discover_memory's.
        return None

    @staticmethod
    def _redfish(fabric):
        """The redfish back end's settings, or None for the local one."""
        info = fabric.get('driver_info') or {}
        if info.get('backend', LOCAL) != REDFISH:
            return None
        try:
            return cxl_memory.merged(info)
        except exception.Invalid as exc:
            raise exception.DriverError(
                reason='fabric %s: %s' % (fabric['name'], exc.message))

    def discover_memory(self, fabric):
        """The memory devices of the fabric: a list of ``{'name',
        'serial', 'capacity_mb', 'hosts'}`` (``hosts``: the names of the
        hosts that reach it; the redfish back end adds ``free_chunks``,
        ``free_mb`` and ``address``, the memory domain). The local back
        end knows them from ``driver_info``: the devices are wired, not
        composed."""
        redfish = self._redfish(fabric)
        if redfish is not None:
            return _REDFISH.discover_memory(fabric, redfish)
        info = fabric.get('driver_info') or {}
        return [dict(device, name=name)
                for name, device in devices(info).items()]

    def bind_memory(self, fabric, device_name, host, size_mb=None,
                    lease_uuid=None):
        """Make ``size_mb`` of device ``device_name`` reachable from
        ``host`` for lease ``lease_uuid``; the locator the host finds it
        by (a locator.Locator of its serial and name; the redfish back end
        answers a dict that adds the chunk and connection it made, which
        the conductor keeps for the unbind). The local back end composes
        nothing: it refuses a host that is not wired to the device."""
        redfish = self._redfish(fabric)
        if redfish is not None:
            return _REDFISH.bind_memory(fabric, redfish, device_name, host,
                                        size_mb, lease_uuid)
        info = fabric.get('driver_info') or {}
        device = devices(info).get(device_name)
        if device is None:
            raise exception.DriverError(
                reason='fabric %s has no CXL memory device %s in its '
                       'driver_info' % (fabric['name'], device_name))
        if host['name'] not in device['hosts']:
            raise exception.DriverError(
                reason='host %s is not wired to CXL memory device %s '
                       '(hosts reaching it: %s)' % (
                           host['name'], device_name,
                           ', '.join(device['hosts'])))
        return locator_mod.Locator(serial=device['serial'],
                                   fabric_ref=device_name)

    def unbind_memory(self, fabric, device_name, host, lease_uuid=None,
                      locator=None):
        """Take the lease's memory of the device away from ``host`` once
        its regions are gone (and erased); idempotent. Nothing to do for
        wired devices."""
        redfish = self._redfish(fabric)
        if redfish is not None:
            return _REDFISH.unbind_memory(fabric, redfish, device_name, host,
                                          lease_uuid, locator)
        return None


_REDFISH = cxl_memory.RedfishCxl()
