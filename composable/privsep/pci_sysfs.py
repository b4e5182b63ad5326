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

"""A composed PCI function on the compute host, through sysfs.

A fabric driver composes a device into the host and returns a locator
(composable.common.locator.Locator): vendor and device ids, perhaps a serial
number and rarely the host's bus address. The host then has to

* rescan the bus and find the new function (``find_function``): by its
  address when the fabric knows it, else by its ids among the functions
  that were not there before the bind, checked against the Device Serial
  Number capability when config space is readable;
* make sure its IOMMU group holds nothing the host still drives
  (``check_group_isolated``): vfio hands the whole group to the guest;
* hand it to vfio-pci (``bind_vfio``) and check ``/dev/vfio/<group>``;
* for SR-IOV devices, create the virtual functions (``set_num_vfs``) --
  one VF per lease, the PF stays with the host, and no host driver
  probes the VFs;
* on release, give it back (``release``) and remove it from the host's
  bus (``remove``) before the fabric unbinds it, so that no driver sees
  the device vanish under it.

``attach_function`` does the whole attach (find, Nova's device_spec,
IOMMU group, vfio-pci, /dev/vfio) and ``detach_function`` the whole
detach (release, remove) in one call each: the agent makes one privileged
round trip, or one process start, per device and operation.

``host_checks`` says whether the host can do passthrough at all and
``nova_device_spec_conflicts`` whether Nova's own ``[pci] device_spec``
would hand a composed device to another instance.

Only the Python standard library is used: the same file runs inside a
test VM through the QEMU guest agent, as ``python3 pci.py <command>
'<json keyword arguments>'``, which prints ``{"result": ...}`` (or
``{"error": <an ErrorCode value>, "message": ...}`` with exit status
1).

A locator is taken in its primitive form (composable.common.locator.
Locator.to_primitive(), a dict), the form that crosses the privsep and
guest boundaries; the callers have checked it by parsing it.

Every function takes ``root``, the directory holding ``sys``, ``dev`` and
``lib`` ('/' on a host), and the writing ones a ``writer(path, value)``
that does the write; both let a fake tree stand in for the kernel.
"""

import enum
import errno
import fnmatch
import json
import os
import re
import sys
import time

VFIO_DRIVER = 'vfio-pci'
# Drivers vfio accepts beside itself in a group it hands to a guest.
VFIO_SAFE_DRIVERS = (VFIO_DRIVER, 'pci-stub')
PCI_BRIDGE_CLASS = '0x0604'
DSN_CAP_ID = 0x0003
EXT_CAP_START = 0x100

_ADDRESS = re.compile(
    r'^([0-9a-f]{4,8}):([0-9a-f]{2}):([0-9a-f]{2})\.([0-7])$')
_SHORT_ADDRESS = re.compile(r'^[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$')
_GROUP = re.compile(r'^[0-9]+$')


class ErrorCode(str, enum.Enum):
    """Why a PCI step failed, as every boundary carries it: the privsep
    daemon re-raises PciError(code, message), the command line prints
    ``{"error": <code>, "message": ...}``, and attach_function's answer
    holds the code of a refusal. Callers decide by the code, never by an
    exception's class name."""

    # No function matching the locator appeared in time (or none is at
    # the address asked about).
    NOT_FOUND = 'not_found'
    # The function at the fabric's address is not the device it bound.
    MISMATCH = 'mismatch'
    # Several new functions match and nothing tells them apart.
    AMBIGUOUS = 'ambiguous'
    # The function has no IOMMU group: the IOMMU is off.
    NO_IOMMU_GROUP = 'no_iommu_group'
    # A member of the IOMMU group is still driven by the host.
    IOMMU_GROUP_SHARED = 'iommu_group_shared'
    # vfio-pci did not take the function or its group.
    VFIO_REFUSED = 'vfio_refused'
    # The function cannot have that many virtual functions.
    SRIOV_REFUSED = 'sriov_refused'
    # Nova's [pci] device_spec on the host would hand the function to
    # an instance of its own.
    NOT_PERMITTED_BY_DEVICE_SPEC = 'not_permitted_by_device_spec'
    # An argument that is not what it must be.
    INVALID_ARGUMENT = 'invalid_argument'
    # The kernel refused a read or write: it needs root.
    NOT_PERMITTED = 'not_permitted'
    # The kernel answered that the device is busy.
    BUSY = 'busy'
    # Any other error of the kernel.
    OS_ERROR = 'os_error'
    # A fault of the module itself.
    INTERNAL = 'internal'

    @classmethod
    def parse(cls, value):
        """The code ``value`` names; INTERNAL for one this release does not
        know (a newer module's)."""
        try:
            return cls(value)
        except ValueError:
            return cls.INTERNAL


class PciError(Exception):
    """Anything that keeps a function from being found or prepared:
    ``code`` (an ErrorCode) says what, ``message`` says it in words.

    Its arguments are the code's value and the message, so that the
    privsep daemon's client, which rebuilds an exception from its class
    and arguments, raises the same error."""

    def __init__(self, code, message):
        code = ErrorCode.parse(code)
        super().__init__(code.value, str(message))
        self.code = code
        self.message = str(message)

    def __str__(self):
        return self.message


def error_code(exc):
    """The ErrorCode of any exception a PCI step raised."""
    if isinstance(exc, PciError):
        return exc.code
    if isinstance(exc, OSError):
        if exc.errno in (errno.EACCES, errno.EPERM):
            return ErrorCode.NOT_PERMITTED
        if exc.errno == errno.EBUSY:
            return ErrorCode.BUSY
        return ErrorCode.OS_ERROR
    if isinstance(exc, (ValueError, TypeError, LookupError)):
        return ErrorCode.INVALID_ARGUMENT
    return ErrorCode.INTERNAL


def as_pci_error(exc):
    """``exc`` as a PciError with its code."""
    if isinstance(exc, PciError):
        return exc
    return PciError(error_code(exc), str(exc) or type(exc).__name__)


def write(path, value):
    """The kernel interface: one write of ``value`` to a sysfs file."""
    with open(path, 'w') as f:
        f.write(value)


def normalize_address(address):
    """``address`` as sysfs names it (``0000:41:00.0``); ValueError when it
    is no PCI address. Checked because it becomes part of paths written
    to as root."""
    value = str(address or '').strip().lower()
    if _SHORT_ADDRESS.match(value):
        value = '0000:' + value
    if not _ADDRESS.match(value):
        raise ValueError('%r is not a PCI address' % (address,))
    return value


def normalize_id(value):
    """A vendor or device id as four lower-case hex digits ('10de' from
    '0x10DE'); None for None or an empty value."""
    if value is None:
        return None
    text = str(value).strip().lower()
    if text.startswith('0x'):
        text = text[2:]
    if not text:
        return None
    try:
        return '%04x' % int(text, 16)
    except ValueError:
        return text


def normalize_serial(value):
    """A Device Serial Number as 16 hex digits, from the ways tools print
    it ('00-11-22-33-44-55-66-77', '0x0011223344556677'); None when
    ``value`` is no such number -- a fabric often reports the vendor's
    product serial instead, which the function itself does not carry."""
    if value is None:
        return None
    text = str(value).strip().lower()
    if text.startswith('0x'):
        text = text[2:]
    text = re.sub(r'[-: ]', '', text)
    if re.match(r'^[0-9a-f]{16}$', text):
        return text
    return None


def _sys(root, *parts):
    return os.path.join(root, 'sys', *parts)


def _device(root, address, *parts):
    return _sys(root, 'bus', 'pci', 'devices', address, *parts)


def _read(path):
    with open(path) as f:
        return f.read().strip()


def _link_name(path):
    """The last component of the symlink's target, None when absent."""
    try:
        return os.path.basename(os.readlink(path))
    except OSError:
        return None


def functions(root='/'):
    """Addresses of the functions on the host's PCI bus, sorted."""
    try:
        return sorted(os.listdir(_sys(root, 'bus', 'pci', 'devices')))
    except FileNotFoundError:
        return []


def boot_id(root='/'):
    """The kernel's id of this boot of the host, None when unreadable:
    the functions present at one moment of a boot stay the host's own
    until it boots again."""
    try:
        return _read(os.path.join(root, 'proc', 'sys', 'kernel', 'random',
                                  'boot_id')) or None
    except OSError:
        return None


def exists(address, root='/'):
    return os.path.exists(_device(root, normalize_address(address)))


def device_ids(address, root='/'):
    """(vendor_id, product_id) of a function, as in a locator."""
    address = normalize_address(address)
    return (normalize_id(_read(_device(root, address, 'vendor'))),
            normalize_id(_read(_device(root, address, 'device'))))


def driver(address, root='/'):
    """Name of the driver bound to the function, None when driverless."""
    return _link_name(_device(root, normalize_address(address), 'driver'))


def is_bridge(address, root='/'):
    try:
        value = _read(_device(root, normalize_address(address), 'class'))
    except OSError:
        return False
    return value.lower().startswith(PCI_BRIDGE_CLASS)


def is_virtual_function(address, root='/'):
    return os.path.islink(_device(root, normalize_address(address),
                                  'physfn'))


def read_serial(address, root='/'):
    """The function's Device Serial Number (16 hex digits, as
    normalize_serial gives it), or None.

    None when the function has no such capability, and when config space
    past its first 256 bytes cannot be read: the kernel gives those only
    to root, so a serial is a confirmation to use when there is one,
    never a requirement.
    """
    path = _device(root, normalize_address(address), 'config')
    try:
        with open(path, 'rb') as f:
            config = f.read(4096)
    except OSError:
        return None
    offset, seen = EXT_CAP_START, set()
    while offset and offset + 4 <= len(config) and offset not in seen:
        seen.add(offset)
        header = int.from_bytes(config[offset:offset + 4], 'little')
        if header in (0, 0xffffffff):
            return None
        if header & 0xffff == DSN_CAP_ID:
            if offset + 12 > len(config):
                return None
            low = int.from_bytes(config[offset + 4:offset + 8], 'little')
            high = int.from_bytes(config[offset + 8:offset + 12], 'little')
            return '%016x' % (high << 32 | low)
        offset = (header >> 20) & 0xffc
    return None


def rescan(root='/', writer=write):
    """Ask the kernel to enumerate the bus again: a function composed by
    the fabric appears on the host only then (unless its slot's hotplug
    controller announced it)."""
    writer(_sys(root, 'bus', 'pci', 'rescan'), '1')


def _describe(locator):
    parts = []
    if locator.get('pci_address'):
        parts.append('address %s' % locator['pci_address'])
    if locator.get('vendor_id') or locator.get('product_id'):
        parts.append('ids %s:%s' % (
            normalize_id(locator.get('vendor_id')) or '*',
            normalize_id(locator.get('product_id')) or '*'))
    if locator.get('serial'):
        parts.append('serial %s' % locator['serial'])
    if locator.get('fabric_ref'):
        parts.append('fabric reference %s' % locator['fabric_ref'])
    return ', '.join(parts) or 'an empty locator'


def _ids_match(locator, address, root):
    vendor, product = device_ids(address, root)
    want_vendor = normalize_id(locator.get('vendor_id'))
    want_product = normalize_id(locator.get('product_id'))
    return (want_vendor in (None, vendor)
            and want_product in (None, product))


def _match(locator, root, known, interchangeable=1):
    """The function matching ``locator`` now, or None."""
    address = locator.get('pci_address')
    if address:
        address = normalize_address(address)
        if not exists(address, root):
            return None
        if not _ids_match(locator, address, root):
            raise PciError(
                ErrorCode.MISMATCH,
                'the function at %s has ids %s:%s, not those of %s'
                % ((address,) + device_ids(address, root)
                   + (_describe(locator),)))
        return address
    if not (locator.get('vendor_id') and locator.get('product_id')):
        raise ValueError('cannot find %s: a locator needs an address or '
                         'both ids' % _describe(locator))
    known = {normalize_address(a) for a in known}
    # A fabric composes physical functions; VFs come from set_num_vfs.
    candidates = [a for a in functions(root)
                  if a not in known and not is_virtual_function(a, root)
                  and _ids_match(locator, a, root)]
    serial = normalize_serial(locator.get('serial'))
    if serial:
        serials = {a: read_serial(a, root) for a in candidates}
        confirmed = [a for a in candidates if serials[a] == serial]
        if confirmed:
            candidates = confirmed
        else:
            # A readable serial that differs is another device.
            candidates = [a for a in candidates if serials[a] is None]
    if not candidates:
        return None
    slots = {a.rsplit('.', 1)[0] for a in candidates}
    if len(slots) > interchangeable:
        # Two devices of the same model composed at once: guessing would
        # give a guest the wrong one.
        raise PciError(ErrorCode.AMBIGUOUS,
                       '%s matches the new functions %s'
                       % (_describe(locator), ', '.join(candidates)))
    # Functions of one multi-function device: the first one is the device.
    # Up to ``interchangeable`` devices are the caller's own, any of which
    # will do: the first one is taken.
    return candidates[0]


def find_function(locator, root='/', timeout=60, known=(), writer=write,
                  interval=1.0, clock=time.monotonic, sleep=time.sleep,
                  interchangeable=1):
    """Address of the function the fabric composed, as ``locator`` says.

    Rescans and looks until it appears or ``timeout`` seconds pass (the
    fabric's bind may return before the link trains). Without
    ``pci_address`` the function is one matching the ids that is not in
    ``known`` -- the addresses present before the bind -- and, when both
    the locator's serial and the function's are readable, the serial.

    ``interchangeable`` is how many devices of this very locator the
    caller is waiting for (several GPUs of one model for one lease): as
    long as no more new devices than that match, any of them is the
    caller's and the first is returned; more is a PciError of code AMBIGUOUS.
    """
    deadline = clock() + timeout
    tries = 0
    while True:
        rescan(root, writer)
        tries += 1
        found = _match(locator, root, known, interchangeable)
        if found:
            return found
        if clock() >= deadline:
            raise PciError(
                ErrorCode.NOT_FOUND,
                'no PCI function with %s appeared within %s s '
                '(%d rescans)' % (_describe(locator), timeout, tries))
        sleep(interval)


def iommu_group(address, root='/'):
    """The function's IOMMU group number (a string, as in /dev/vfio)."""
    address = normalize_address(address)
    if not exists(address, root):
        raise PciError(ErrorCode.NOT_FOUND, 'no PCI function %s' % address)
    group = _link_name(_device(root, address, 'iommu_group'))
    if not group:
        raise PciError(
            ErrorCode.NO_IOMMU_GROUP,
            '%s has no IOMMU group: the IOMMU is off (intel_iommu=on or '
            'amd_iommu=on on the kernel command line)' % address)
    return group


def group_members(group, root='/'):
    """Addresses of the functions in IOMMU group ``group``, sorted."""
    group = str(group)
    if not _GROUP.match(group):
        raise ValueError('%r is not an IOMMU group' % (group,))
    path = _sys(root, 'kernel', 'iommu_groups', group, 'devices')
    try:
        return sorted(os.listdir(path))
    except FileNotFoundError:
        raise PciError(ErrorCode.NO_IOMMU_GROUP,
                       'IOMMU group %s does not exist' % group)


def check_group_isolated(address, root='/'):
    """The members of the function's IOMMU group, when passthrough of it
    is safe; a PciError of code IOMMU_GROUP_SHARED naming a member the host
    still drives.

    vfio gives the guest the whole group: a host NIC or disk controller
    sharing it would be reachable by the guest's DMA. The other members
    must be on vfio-pci (or pci-stub, which vfio accepts), have no
    driver, or be PCI bridges.
    """
    address = normalize_address(address)
    members = group_members(iommu_group(address, root), root)
    for member in members:
        if member == address:
            continue
        name = driver(member, root)
        if name is None or name in VFIO_SAFE_DRIVERS:
            continue
        if is_bridge(member, root):
            continue
        raise PciError(
            ErrorCode.IOMMU_GROUP_SHARED,
            'IOMMU group %s of %s also holds %s on driver %s: passing the '
            'group through would hand it to the guest'
            % (iommu_group(address, root), address, member, name))
    return members


def bind_vfio(address, root='/', writer=write):
    """Hand the function to vfio-pci; False when it already was.

    driver_override first, so that whatever probes the function once it
    is unbound (udev, drivers_probe) picks vfio-pci and no other driver
    grabs it in between.
    """
    address = normalize_address(address)
    current = driver(address, root)
    if current == VFIO_DRIVER:
        return False
    writer(_device(root, address, 'driver_override'), VFIO_DRIVER)
    if current:
        writer(_device(root, address, 'driver', 'unbind'), address)
    writer(_sys(root, 'bus', 'pci', 'drivers_probe'), address)
    now = driver(address, root)
    if now != VFIO_DRIVER:
        raise PciError(ErrorCode.VFIO_REFUSED,
                       '%s is on driver %s after the probe, not %s (is '
                       'the vfio-pci module loaded?)'
                       % (address, now or 'none', VFIO_DRIVER))
    return True


# How often bind_vfio_settled binds a function again that lost vfio-pci,
# and the seconds between its looks.
VFIO_BIND_ATTEMPTS = 3
VFIO_SETTLE_INTERVAL = 0.05


def vfio_bound(address, root='/'):
    """The function's /dev/vfio/<group> when it is on vfio-pci and vfio
    made that node, else None."""
    if driver(address, root) != VFIO_DRIVER:
        return None
    try:
        node = vfio_device_node(address, root)
    except PciError:
        return None
    return node


def bind_vfio_settled(address, root='/', writer=write,
                      attempts=VFIO_BIND_ATTEMPTS,
                      interval=VFIO_SETTLE_INTERVAL, sleep=time.sleep):
    """bind_vfio, then check that the bind landed and held: the
    function's driver link is vfio-pci and ``/dev/vfio/<group>`` exists,
    read again after the bind. Returns (whether it was newly bound, the
    node).

    A driver that had the function before may let it go late: the nvme
    driver, for one, releases a controller it could not start from a
    work item that can run after vfio-pci took the function, and takes
    vfio-pci's binding with it (a VF the host's driver probed the moment
    sriov_numvfs made it). Such a function is bound again, up to
    ``attempts`` times; one that still is not on vfio-pci then is a
    PciError of code VFIO_REFUSED, never an attach that answers a
    function vfio does not hold.
    """
    address = normalize_address(address)
    bound = False
    problem = None
    for attempt in range(attempts):
        if attempt:
            sleep(interval)
        try:
            bound = bind_vfio(address, root, writer) or bound
        except PciError as exc:
            if exc.code is not ErrorCode.VFIO_REFUSED:
                raise
            problem = exc
            continue
        node = vfio_bound(address, root)
        if node:
            return bound, node
        problem = PciError(
            ErrorCode.VFIO_REFUSED,
            '%s is on driver %s right after it was bound to %s' % (
                address, driver(address, root) or 'none', VFIO_DRIVER))
    if attempts > 1:
        problem = PciError(problem.code, '%s (%d attempts)' % (
            problem.message, attempts))
    # The node's own message when only it is missing.
    if driver(address, root) == VFIO_DRIVER:
        vfio_device_node(address, root)
    raise problem


def vfio_device_node(address, root='/'):
    """Path of the function's /dev/vfio/<group>, which the guest's QEMU
    opens; a PciError of code VFIO_REFUSED when vfio did not create it."""
    group = iommu_group(address, root)
    path = os.path.join(root, 'dev', 'vfio', group)
    if not os.path.exists(path):
        raise PciError(ErrorCode.VFIO_REFUSED,
                       '%s does not exist: vfio-pci has not taken IOMMU '
                       'group %s of %s' % (path, group, address))
    return path


def release(address, root='/', writer=write):
    """Take the function off vfio-pci and clear its driver_override;
    False when there was nothing to do.

    No probe follows: the function is on its way off the host (remove),
    and a host driver bound now would only have to let go again.
    """
    address = normalize_address(address)
    if not exists(address, root):
        return False
    changed = False
    if driver(address, root) == VFIO_DRIVER:
        writer(_device(root, address, 'driver', 'unbind'), address)
        changed = True
    try:
        override = _read(_device(root, address, 'driver_override'))
    except FileNotFoundError:
        override = ''
    if override == VFIO_DRIVER:
        # A lone newline clears it (the kernel shows '(null)' then).
        writer(_device(root, address, 'driver_override'), '\n')
        changed = True
    return changed


def remove(address, root='/', writer=write):
    """Remove the function from the host's bus before the fabric takes it
    away; False when it is not there."""
    address = normalize_address(address)
    if not exists(address, root):
        return False
    writer(_device(root, address, 'remove'), '1')
    return True


def virtual_functions(pf_address, root='/'):
    """Addresses of the PF's virtual functions, in VF number order."""
    path = _device(root, normalize_address(pf_address))
    try:
        names = os.listdir(path)
    except FileNotFoundError:
        raise PciError(ErrorCode.NOT_FOUND,
                       'no PCI function %s' % pf_address)
    numbered = sorted((int(n[len('virtfn'):]), n) for n in names
                      if re.match(r'^virtfn[0-9]+$', n))
    return [_link_name(os.path.join(path, n)) for _, n in numbered]


def set_num_vfs(pf_address, count, root='/', writer=write):
    """Give the PF ``count`` virtual functions; their addresses.

    The kernel refuses to change a non-zero number of VFs to another
    non-zero one, so a change goes through 0 (which destroys the old
    VFs: none may be leased then, which the caller checks).
    """
    address = normalize_address(pf_address)
    count = int(count)
    try:
        total = int(_read(_device(root, address, 'sriov_totalvfs')))
        current = int(_read(_device(root, address, 'sriov_numvfs')))
    except FileNotFoundError:
        raise PciError(ErrorCode.SRIOV_REFUSED,
                       '%s has no SR-IOV capability' % address)
    if not 0 <= count <= total:
        raise PciError(ErrorCode.SRIOV_REFUSED,
                       '%s can have 0 to %d virtual functions, not %d'
                       % (address, total, count))
    if count != current:
        if current:
            writer(_device(root, address, 'sriov_numvfs'), '0')
        if count:
            _no_vf_autoprobe(address, root, writer)
            writer(_device(root, address, 'sriov_numvfs'), str(count))
    return virtual_functions(address, root)


def _no_vf_autoprobe(pf_address, root, writer):
    """Keep the host's drivers off the PF's VFs as they are made
    (``sriov_drivers_autoprobe`` 0; kernels before 4.12 have no such
    file). Every VF made here is for a lease, on its way to vfio-pci: a
    host driver probing it meanwhile (the PF's own, such as nvme) only
    races that bind, and may let go of the VF after vfio-pci took it
    (see bind_vfio_settled). A bind with driver_override still probes
    it."""
    path = _device(root, pf_address, 'sriov_drivers_autoprobe')
    try:
        if _read(path) == '0':
            return
    except FileNotFoundError:
        return
    writer(path, '0')


def _module_listed(path, name):
    """Whether a modules.builtin or modules.dep file lists module
    ``name`` (file names use '-' or '_' and may be compressed)."""
    wanted = name.replace('-', '_')
    try:
        with open(path) as f:
            for line in f:
                module = os.path.basename(line.split(':', 1)[0].strip())
                module = module.split('.ko', 1)[0].replace('-', '_')
                if module == wanted:
                    return True
    except OSError:
        pass
    return False


def host_checks(root='/', kernel_release=None):
    """What keeps this host from passing functions through; empty when
    nothing does."""
    problems = []
    groups = _sys(root, 'kernel', 'iommu_groups')
    try:
        has_groups = bool(os.listdir(groups))
    except OSError:
        has_groups = False
    if not has_groups:
        problems.append(
            'no IOMMU groups in /sys/kernel/iommu_groups: enable the IOMMU '
            '(intel_iommu=on or amd_iommu=on on the kernel command line, '
            'and VT-d or AMD-Vi in the firmware)')
    if not os.path.isdir(_sys(root, 'bus', 'pci', 'drivers', VFIO_DRIVER)):
        release = kernel_release or os.uname().release
        modules = os.path.join(root, 'lib', 'modules', release)
        if not any(_module_listed(os.path.join(modules, name), VFIO_DRIVER)
                   for name in ('modules.builtin', 'modules.dep')):
            problems.append(
                'the vfio-pci driver is neither loaded nor a module of '
                'kernel %s' % release)
    return problems


# Nova's [pci] device_spec and the names it had before.
NOVA_SPEC_OPTIONS = (('pci', 'device_spec'),
                     ('pci', 'passthrough_whitelist'),
                     ('default', 'pci_passthrough_whitelist'))


def nova_pci_specs(nova_conf_text):
    """(option, value) of every device_spec value in nova.conf text.

    Read line by line as oslo.config does, not with configparser: Nova
    takes the option several times, one entry each, and configparser
    keeps only the last.
    """
    found, section, current = [], None, None
    for line in nova_conf_text.splitlines():
        stripped = line.strip()
        if not stripped or stripped[0] in '#;':
            continue
        if line[0].isspace() and current is not None:
            current[1].append(stripped)
            continue
        current = None
        if stripped.startswith('['):
            section = stripped[1:].split(']', 1)[0].strip().lower()
            continue
        key, sep, value = stripped.partition('=')
        if not sep or ':' in key:
            key, sep, value = stripped.partition(':')
        if not sep:
            continue
        key = key.strip().lower()
        if (section, key) in NOVA_SPEC_OPTIONS:
            current = ('[%s] %s' % (section.replace('default', 'DEFAULT'),
                                    key), [value.strip()])
            found.append(current)
    specs = []
    for option, lines in found:
        value = '\n'.join(lines).strip()
        if len(value) > 1 and value[0] == value[-1] and value[0] in '"\'':
            value = value[1:-1]
        specs.append((option, value))
    return specs


def _field_match(pattern, value, width):
    """One field of a glob address, the way Nova reads it ('*' or an empty
    field is any, hex otherwise), and a shell glob for what Nova would
    reject: an unreadable pattern counts as a match."""
    pattern = pattern.strip().lower()
    if pattern in ('', '*'):
        return True
    try:
        pattern = '%0*x' % (width, int(pattern, 16))
    except ValueError:
        pass
    return fnmatch.fnmatchcase(value, pattern)


def _address_match(spec, address):
    """Whether a device_spec ``address`` covers ``address``; True when the
    address is not known yet: any pattern could cover it then."""
    if address is None:
        return True
    domain, bus, slot, func = _ADDRESS.match(address).groups()
    if isinstance(spec, dict):
        # Nova's dict form holds a regular expression per field.
        fields = (('domain', domain), ('bus', bus), ('slot', slot),
                  ('function', func))
        for key, value in fields:
            pattern = str(spec.get(key, '.*'))
            try:
                if re.match(pattern, value):
                    continue
            except re.error:
                pass
            if not fnmatch.fnmatchcase(value, pattern.lower()):
                return False
        return True
    dbs, _, want_func = str(spec).partition('.')
    parts = dbs.split(':') if dbs else []
    if len(parts) > 3:
        return True  # not an address Nova reads: assume the worst
    parts = [''] * (3 - len(parts)) + parts
    return all(_field_match(p, v, w) for p, v, w in zip(
        parts + [want_func], (domain, bus, slot, func), (4, 2, 2, 1)))


def _id_match(spec_value, locator_value):
    if spec_value is None or str(spec_value).strip() in ('', '*'):
        return True
    if locator_value is None:
        return True
    return fnmatch.fnmatchcase(normalize_id(locator_value),
                               normalize_id(spec_value))


def _entry_conflicts(entry, locator):
    if not isinstance(entry, dict):
        return True
    if not (_id_match(entry.get('vendor_id'), locator.get('vendor_id'))
            and _id_match(entry.get('product_id'),
                          locator.get('product_id'))):
        return False
    if 'address' in entry and 'devname' not in entry:
        address = locator.get('pci_address')
        if address:
            address = normalize_address(address)
        return _address_match(entry['address'], address)
    # devname names a host network device whose address a locator cannot
    # say: its ids decide.
    return True


def nova_device_spec_conflicts(nova_conf_text, locators):
    """The device_spec entries of ``nova_conf_text`` that would let Nova
    hand one of ``locators``' devices to an instance of its own.

    Each is a dict: ``option``, ``entry`` (the JSON value), ``locator``
    and ``message``. A locator without an address conflicts with every
    address pattern its ids match: the function's address is known only
    once it is composed. An entry that is no valid JSON is a conflict as
    well: nothing says what it would match.
    """
    conflicts = []
    for option, value in nova_pci_specs(nova_conf_text):
        try:
            parsed = json.loads(value)
        except ValueError:
            conflicts.append({
                'option': option, 'entry': value, 'locator': None,
                'message': '%s = %s is not JSON: cannot tell which '
                           'devices it gives Nova' % (option, value)})
            continue
        entries = parsed if isinstance(parsed, list) else [parsed]
        for entry in entries:
            for locator in locators:
                if _entry_conflicts(entry, locator):
                    conflicts.append({
                        'option': option, 'entry': entry,
                        'locator': locator,
                        'message': '%s entry %s matches the fabric device '
                                   'with %s: Nova could give it to another '
                                   'instance' % (option, json.dumps(
                                       entry, sort_keys=True),
                                       _describe(locator))})
    return conflicts


def _failed(address, exc):
    return {'address': address, 'error': error_code(exc).value,
            'message': as_pci_error(exc).message}


def attach_function(locator, known=(), timeout=60, interval=1.0,
                    interchangeable=1, recorded=None, nova_conf_text=None,
                    root='/', writer=write, clock=time.monotonic,
                    sleep=time.sleep):
    """The whole host side of an attach in one call: find the function
    (``find_function``), check it against Nova's device_spec, check its
    IOMMU group (``check_group_isolated``), bind it to vfio-pci
    (``bind_vfio``) and check ``/dev/vfio/<group>``.

    One call because each call may be a process of its own (a privsep
    round trip, or a guest-exec on a test host) and the attach is on the
    path of every bind.

    ``recorded`` is the address the caller noted for this device before
    (a repeated attach): when the function there still has the locator's
    ids it is taken without a search. ``nova_conf_text`` is the text of
    Nova's configuration on the host, when it should be checked.

    Failures before the function is found raise (a PciError of code
    NOT_FOUND, ...).
    Once it is found the answer always carries its ``address``, so that
    the caller can note it and take it off the bus later: a dict with
    ``address``, ``found`` (searched for now), and either
    ``iommu_group``, ``vfio_node``, ``bound`` (newly bound),
    ``members`` (of its group), ``find_ms`` and ``bind_ms`` (how long
    the search and the group check with the bind took), or ``error``
    (an ErrorCode's value: NOT_PERMITTED_BY_DEVICE_SPEC,
    IOMMU_GROUP_SHARED, ...) and ``message``
    (composable.common.locator.AttachResult reads it). The bind is
    bind_vfio_settled's: the function is on vfio-pci with its
    /dev/vfio node when the answer says so.
    """
    started = clock()
    address = None
    if recorded:
        recorded = normalize_address(recorded)
        if exists(recorded, root) and _ids_match(locator, recorded, root):
            address = recorded
    found = address is None
    if found:
        address = find_function(locator, root=root, timeout=timeout,
                                known=known, writer=writer,
                                interval=interval, clock=clock, sleep=sleep,
                                interchangeable=interchangeable)
    answer = {'address': address, 'found': found}
    if nova_conf_text:
        conflicts = nova_device_spec_conflicts(
            nova_conf_text, [dict(locator, pci_address=address)])
        if conflicts:
            answer.update(
                error=ErrorCode.NOT_PERMITTED_BY_DEVICE_SPEC.value,
                message=conflicts[0]['message'])
            return answer
    searched = clock()
    try:
        members = check_group_isolated(address, root)
        bound, node = bind_vfio_settled(address, root, writer, sleep=sleep)
    except (PciError, ValueError, OSError) as exc:
        answer.update(_failed(address, exc))
        return answer
    answer.update(iommu_group=os.path.basename(node), vfio_node=node,
                  bound=bound, members=members,
                  find_ms=round((searched - started) * 1000.0, 1),
                  bind_ms=round((clock() - searched) * 1000.0, 1))
    return answer


def detach_function(address, vendor_id=None, product_id=None, root='/',
                    writer=write):
    """Take a leased function off vfio-pci and off the bus in one call;
    what was done: ``removed``, ``absent`` (nothing there), or ``other``
    (the function at ``address`` has ids other than ``vendor_id``:
    ``product_id``, so it is not the leased device and is left alone)."""
    address = normalize_address(address)
    if not exists(address, root):
        return 'absent'
    ids = device_ids(address, root)
    want = (normalize_id(vendor_id), normalize_id(product_id))
    if any(w is not None and w != i for w, i in zip(want, ids)):
        return 'other'
    release(address, root, writer)
    remove(address, root, writer)
    return 'removed'


def detach_unrecorded_function(locator, known=(), interchangeable=1,
                               root='/', writer=write):
    """Take off vfio-pci and off the bus the function ``locator``
    describes, for a device whose address the caller never noted (it
    died between the fabric's bind and its own record): found as
    find_function finds it among the functions not in ``known`` (the
    host's own and the other devices'), without rescanning or waiting --
    a function that is not there now was never enumerated. Returns
    ``{'address': <address or None>, 'done': 'removed' | 'absent'}``;
    a PciError of code AMBIGUOUS when more devices match than
    ``interchangeable`` (the caller's own unrecorded devices of that
    locator)."""
    # Without the address: an address is detach_function's to check.
    address = _match(dict(locator, pci_address=None), root, known,
                     interchangeable)
    if address is None:
        return {'address': None, 'done': 'absent'}
    release(address, root, writer)
    remove(address, root, writer)
    return {'address': address, 'done': 'removed'}


def describe_functions(addresses, root='/'):
    """``address``, ``vendor_id``, ``product_id`` and ``iommu_group``
    (None without one) of each function."""
    described = []
    for address in addresses:
        vendor, product = device_ids(address, root)
        try:
            group = iommu_group(address, root)
        except PciError:
            group = None
        described.append({'address': normalize_address(address),
                          'vendor_id': vendor, 'product_id': product,
                          'iommu_group': group})
    return described


COMMANDS = {
    'rescan': rescan,
    'find_function': find_function,
    'iommu_group': iommu_group,
    'group_members': group_members,
    'check_group_isolated': check_group_isolated,
    'bind_vfio': bind_vfio,
    'vfio_device_node': vfio_device_node,
    'release': release,
    'remove': remove,
    'set_num_vfs': set_num_vfs,
    'virtual_functions': virtual_functions,
    'host_checks': host_checks,
    'nova_device_spec_conflicts': nova_device_spec_conflicts,
    'functions': functions,
    'boot_id': boot_id,
    'exists': exists,
    'is_virtual_function': is_virtual_function,
    'device_ids': device_ids,
    'driver': driver,
    'read_serial': read_serial,
    'attach_function': attach_function,
    'detach_function': detach_function,
    'detach_unrecorded_function': detach_unrecorded_function,
    'describe_functions': describe_functions,
}


def main(argv=None, out=None):
    """``pci.py <command> ['<json object of keyword arguments>']``.

    Prints one JSON object and returns the exit status. For
    nova_device_spec_conflicts, ``nova_conf_path`` may stand for
    ``nova_conf_text``.
    """
    argv = sys.argv[1:] if argv is None else argv
    out = out or sys.stdout
    try:
        if not argv or argv[0] not in COMMANDS:
            raise ValueError('usage: pci.py {%s} [JSON keyword arguments]'
                             % ','.join(sorted(COMMANDS)))
        kwargs = json.loads(argv[1]) if len(argv) > 1 else {}
        if not isinstance(kwargs, dict):
            raise ValueError('the arguments must be a JSON object')
        if 'nova_conf_path' in kwargs:
            with open(kwargs.pop('nova_conf_path')) as f:
                kwargs['nova_conf_text'] = f.read()
        result = COMMANDS[argv[0]](**kwargs)
    except (PciError, ValueError, TypeError, OSError) as e:
        error = as_pci_error(e)
        message = error.message
        if error.code is ErrorCode.NOT_PERMITTED:
            message = '%s (needs root)' % message
        json.dump({'error': error.code.value, 'message': message}, out)
        out.write('\n')
        return 1
    json.dump({'result': result}, out)
    out.write('\n')
    return 0


if __name__ == '__main__':
    sys.exit(main())
