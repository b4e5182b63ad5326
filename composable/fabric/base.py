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

"""The interface every fabric driver implements.

A fabric driver runs in the conductor. It connects a pooled PCIe device to
a host's partition on the fabric (``bind_device``) and disconnects it
(``unbind_device``). Both calls must be idempotent: the conductor repeats
them when it resumes work another conductor left unfinished, and after a
timeout it cannot know whether the fabric did the work. It also reports
what the fabric holds (``discover``), so that an operator does not type
devices in by hand and the conductor notices devices that fail or vanish.

``fabric``, ``device`` and ``host`` are plain dicts of the database rows
(the column names of composable.db.models). ``fabric['driver_info']`` may
hold credentials: drivers never log it and never put it in exceptions.

Why a bind returns a locator and not a bus address: a fabric manager
rarely knows the PCI address the host will give the device (Redfish
resources carry no host bus numbers; of the Switchtec tools only a
detailed dump of the host's virtual domain shows one). What it does know
-- vendor and device ids, often a serial number, its own reference --
lets the compute node's agent find the function after a rescan. A bind
answers a composable.common.locator.Locator, made with its constructor,
which checks every field.
"""

import abc

# Device kinds a driver reports (devices.kind).
KINDS = ('gpu', 'nvme', 'nic', 'fpga', 'pci')

# Health a driver reports for a device.
HEALTH_OK = 'ok'
HEALTH_WARNING = 'warning'
HEALTH_CRITICAL = 'critical'
HEALTHS = (HEALTH_OK, HEALTH_WARNING, HEALTH_CRITICAL)
# What the sync stores when the fabric could not say (devices.health).
HEALTH_UNKNOWN = 'unknown'
DEVICE_HEALTHS = HEALTHS + (HEALTH_UNKNOWN,)


class FabricDriver(object, metaclass=abc.ABCMeta):

    # True for drivers that touch no hardware; the conductor and the
    # standalone service say so in their logs.
    simulated = False

    @abc.abstractmethod
    def validate_driver_info(self, driver_info):
        """Check a fabric's connection settings.

        Raises composable.common.exception.Invalid naming the bad key.
        """

    @abc.abstractmethod
    def bind_device(self, fabric, device, host):
        """Connect ``device`` to ``host``; return its locator (a
        composable.common.locator.Locator; fields the driver leaves
        unknown are taken from the device's row by the conductor).
        Binding a device that is already bound to that host returns the
        same locator; one bound to another host is an error."""

    @abc.abstractmethod
    def unbind_device(self, fabric, device, host):
        """Disconnect ``device`` from ``host``. Unbinding a device that is
        not bound succeeds."""

    @abc.abstractmethod
    def discover(self, fabric):
        """The devices the fabric holds: a list of dicts with ``address``
        (the fabric's own id of the device, ``devices.address``),
        ``kind`` (one of KINDS), ``model``, ``vendor_id``, ``product_id``,
        ``serial``, ``health`` (one of HEALTHS, or None when the fabric
        does not say), optionally ``health_reason`` (why, when not ok),
        ``hosts`` (names of the hosts the fabric can connect it to: None
        when the fabric tells nothing narrower than every host, an empty
        list when no host can reach it) and ``bound_to`` (the
        host name it is bound to now, or None; with several holders, all
        of them, comma separated, and ``holders`` lists them). None
        instead of a list when the driver cannot tell what the fabric
        holds: the sync then changes nothing.

        Optional keys say what the sync must not take at face value:
        ``error`` (the device could not be read this round -- a
        resource that vanished between the listing and the read, or
        answered garbage; the row is left as it is and the reason
        logged), ``not_poolable`` (why no host can be given it: never
        added) and ``unavailable`` (why the fabric cannot give it out
        now: kept in maintenance). One unreadable device must not fail
        the whole discovery."""
