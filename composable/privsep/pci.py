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

"""Privileged PCI work of a compute node: the sysfs writes of
composable.privsep.pci_sysfs, and the search for a composed function
(which reads the Device Serial Number from config space, readable by
root only).

Every argument is checked before anything is written: a PCI address must
be a full, lower-case bus address (``0000:41:00.0``), because it becomes
part of a path under /sys written to as root; counts and limits must be
integers in range; a locator is parsed as composable.common.locator
parses it everywhere. Reading sysfs needs no privilege, so the agent does
that itself.

Every error leaves as one type, pci_sysfs.PciError, whose ``code`` (a
pci_sysfs.ErrorCode) the caller decides by: the privsep client raises it
again from its class and arguments.
"""

import functools
import re

from composable.common import locator as locator_mod
from composable import privsep
from composable.privsep import pci_sysfs as pci

# The host's root directory, and the writer of sysfs files. Fixed here;
# tests run these functions in-process against a fake sysfs tree.
ROOT = '/'
WRITER = pci.write

FIND_DEFAULT_TIMEOUT = 60
# More virtual functions than any PCIe device offers (the field is 16 bits,
# devices stop far below).
MAX_VFS = 65535
# A lease never asks for more devices of one model on one host.
MAX_INTERCHANGEABLE = 256
MAX_KNOWN = 65536
# Nova's configuration text, passed for its device_spec check.
MAX_NOVA_CONF = 1 << 20

_BDF = re.compile(r'[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]')
_ID = re.compile(r'(0x)?[0-9a-fA-F]{1,4}')


def _typed(func):
    """Whatever ``func`` raises leaves as a PciError with its code."""
    @functools.wraps(func)
    def typed(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except Exception as exc:
            raise pci.as_pci_error(exc) from None
    return typed


def check_address(address):
    """``address`` when it is a full PCI address as sysfs names it;
    ValueError otherwise."""
    if not isinstance(address, str) or not _BDF.fullmatch(address):
        raise ValueError('%r is not a PCI address of the form '
                         '0000:41:00.0' % (address,))
    return address


def check_count(value, what, low, high):
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError('%s must be an integer, not %r' % (what, value))
    if not low <= value <= high:
        raise ValueError('%s must be from %d to %d, not %d'
                         % (what, low, high, value))
    return value


def check_locator(locator):
    """The locator (its primitive, a dict) parsed, so every field is
    checked (composable.common.locator); its checked primitive."""
    return locator_mod.Locator.from_primitive(locator).to_primitive()


def _known(known):
    if not isinstance(known, (list, tuple)) or len(known) > MAX_KNOWN:
        raise TypeError('known must be a list of PCI addresses')
    return [check_address(a) for a in known]


@privsep.sys_admin_pctxt.entrypoint
@_typed
def rescan():
    """``echo 1 > /sys/bus/pci/rescan``."""
    pci.rescan(ROOT, writer=WRITER)


@privsep.sys_admin_pctxt.entrypoint
@_typed
def find_function(locator, known, timeout=None, interchangeable=1):
    """The address of the function ``locator`` describes, found as
    pci.find_function does (rescanning) within ``timeout`` seconds."""
    locator = check_locator(locator)
    known = _known(known)
    timeout = privsep.timeout_seconds(timeout, FIND_DEFAULT_TIMEOUT)
    check_count(interchangeable, 'interchangeable', 1, MAX_INTERCHANGEABLE)
    return pci.find_function(locator, root=ROOT, timeout=timeout,
                             known=known, writer=WRITER,
                             interchangeable=interchangeable)


@privsep.sys_admin_pctxt.entrypoint
@_typed
def bind_vfio(address):
    """Hand the function to vfio-pci; False when it already was."""
    return pci.bind_vfio(check_address(address), root=ROOT, writer=WRITER)


@privsep.sys_admin_pctxt.entrypoint
@_typed
def release(address):
    """Take the function off vfio-pci; False when there was nothing to
    do."""
    return pci.release(check_address(address), root=ROOT, writer=WRITER)


@privsep.sys_admin_pctxt.entrypoint
@_typed
def remove(address):
    """Remove the function from the bus; False when it is not there."""
    return pci.remove(check_address(address), root=ROOT, writer=WRITER)


@privsep.sys_admin_pctxt.entrypoint
@_typed
def set_num_vfs(pf_address, count):
    """Give the PF ``count`` virtual functions; their addresses."""
    check_count(count, 'the number of virtual functions', 0, MAX_VFS)
    return pci.set_num_vfs(check_address(pf_address), count, root=ROOT,
                           writer=WRITER)


@privsep.sys_admin_pctxt.entrypoint
@_typed
def attach_function(locator, known, timeout=None, interchangeable=1,
                    recorded=None, nova_conf_text=None):
    """The whole attach in one round trip, as pci.attach_function does it:
    find, Nova's device_spec, IOMMU group, vfio-pci, /dev/vfio."""
    locator = check_locator(locator)
    known = _known(known)
    timeout = privsep.timeout_seconds(timeout, FIND_DEFAULT_TIMEOUT)
    check_count(interchangeable, 'interchangeable', 1, MAX_INTERCHANGEABLE)
    if recorded is not None:
        check_address(recorded)
    if nova_conf_text is not None and (
            not isinstance(nova_conf_text, str) or
            len(nova_conf_text) > MAX_NOVA_CONF):
        raise ValueError('nova_conf_text must be text of at most %d '
                         'characters' % MAX_NOVA_CONF)
    return pci.attach_function(locator, known=known, timeout=timeout,
                               interchangeable=interchangeable,
                               recorded=recorded,
                               nova_conf_text=nova_conf_text, root=ROOT,
                               writer=WRITER)


@privsep.sys_admin_pctxt.entrypoint
@_typed
def detach_function(address, vendor_id=None, product_id=None):
    """Release and remove the function, unless another device is there;
    as pci.detach_function."""
    for value in (vendor_id, product_id):
        if value is not None and (not isinstance(value, str) or
                                  not _ID.fullmatch(value)):
            raise ValueError('%r is not a PCI id' % (value,))
    return pci.detach_function(check_address(address), vendor_id,
                               product_id, root=ROOT, writer=WRITER)


@privsep.sys_admin_pctxt.entrypoint
@_typed
def detach_unrecorded_function(locator, known, interchangeable=1):
    """Release and remove the function ``locator`` describes among those
    not in ``known``; as pci.detach_unrecorded_function."""
    locator = check_locator(locator)
    known = _known(known)
    check_count(interchangeable, 'interchangeable', 1, MAX_INTERCHANGEABLE)
    return pci.detach_unrecorded_function(
        locator, known=known, interchangeable=interchangeable, root=ROOT,
        writer=WRITER)
