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

"""Privileged CXL memory work of a compute node, through sysfs.

The kernel's CXL region interface (Linux 6.3 and later; what ``cxl
create-region`` and ``daxctl`` drive underneath) and its memory hotplug:

make a region
    on a free endpoint decoder of the memory device: ``mode`` = ram and
    ``dpa_size``; a name read from the root decoder's
    ``create_ram_region`` and written back; the region's
    ``interleave_ways``, ``interleave_granularity``, ``size``,
    ``target0`` (the endpoint decoder) and ``commit``; then the region
    bound to the ``cxl_region`` driver, which makes its DAX device.
online it
    the DAX device in ``kmem`` (where Linux puts a RAM region's at
    once), and every memory block of its physical range onlined
    ``online_movable`` (in
    ZONE_MOVABLE only can the pages be migrated away again when the
    memory goes back); its ``target_node`` is the new NUMA node.
give it back
    every block ``offline``: the kernel migrates the pages. A page that
    is unmovable gets EBUSY at once, but a movable page that cannot move
    now (no room for it on any other node, a short-lived extra
    reference) makes Linux (seen on 6.12) retry the
    migration for as long as the writer has no signal pending: the
    write blocks until it is interrupted (then EINTR). So each block's
    write is done by a child process, killed after a deadline; a block
    whose write was interrupted, or refused with EBUSY, is reported busy
    and stays online. Then the DAX device back to ``device_dax``,
    the region's contents erased (overwritten through the DAX device, or
    the device's sanitize once no region maps it), the region unbound,
    decommitted, its target and decoder cleared, and deleted.

Every name is checked before it becomes part of a path written to as
root. Every ``@entrypoint`` function fails with one error type, CxlError,
whose code (composable.privsep.errors.ErrorCode) the agent decides by: a
kernel's refusal (an OSError) and a bad argument (ValueError) become one,
code BUSY for EBUSY and so on. Reading sysfs needs no privilege: the
agent reads through the plain functions here; the writes, the overwrite
and the read of other processes' ``numa_maps`` are ``@entrypoint``
functions run in the privsep daemon.

``ROOT`` and ``WRITER`` are fixed here; tests run these functions
in-process against a fake sysfs tree whose writer emulates the kernel.
"""

import errno
import glob
import mmap
import os
import re
import subprocess
import sys
import time

from composable import privsep
from composable.privsep import errors

ROOT = '/'


class CxlError(errors.PrivilegedError):
    """A privileged CXL function failed: ``code`` (an
    composable.privsep.errors.ErrorCode) says why, ``message`` in words.
    Every ``@entrypoint`` function here raises only this."""


ErrorCode = errors.ErrorCode
_typed = errors.typed(CxlError)


def _write(path, value):
    """The kernel interface: one write of ``value`` to a sysfs file."""
    with open(path, 'w') as f:
        f.write(value)


WRITER = _write


def _write_with_deadline(path, value, timeout):
    """One write of ``value`` to a sysfs file by a child process, which
    is killed if the write has not returned after ``timeout`` seconds:
    OSError(EINTR) then (the kill is the signal that ends the kernel's
    retries), the write's own error otherwise.

    A child process rather than a thread or an alarm: the privsep daemon
    is multi-threaded, a signal set to interrupt the write would reach
    its main thread only, and Python retries a write interrupted by a
    signal whose handler returns. The kernel sees the kill at the end of
    the migration pass under way (seconds on a slow host): the wait for
    the child to end is bounded too. Note that a write whose pages had
    nowhere to go may have filled the rest of the host's memory first;
    that (and the OOM killer it may call on) is the kernel's doing."""
    child = subprocess.Popen(
        [sys.executable or 'python3', '-I', '-S', '-c', _CHILD_WRITER,
         path, value], stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        close_fds=True)
    try:
        status = child.wait(timeout)
    except subprocess.TimeoutExpired:
        child.kill()
        try:
            child.wait(60)
        except subprocess.TimeoutExpired:
            pass
        raise OSError(errno.EINTR, 'writing %s to %s did not end in %s '
                                   'seconds; interrupted' %
                      (value, path, timeout))
    if status < 0:
        raise OSError(errno.EINTR, 'the writer of %s to %s got signal %d'
                      % (value, path, -status))
    if status:
        raise OSError(status, os.strerror(status))


# The offline of a block in use, which may block until interrupted.
BOUNDED_WRITER = _write_with_deadline

CXL = 'sys/bus/cxl'
DAX = 'sys/bus/dax'
MEMORY = 'sys/devices/system/memory'
NODES = 'sys/devices/system/node'

# What a host needs, as (path under ROOT, what is missing when it is not
# there). Checked at the agent's start.
REQUIREMENTS = (
    (CXL + '/devices', 'the CXL bus (CONFIG_CXL_BUS, CONFIG_CXL_PCI, '
                       'CONFIG_CXL_MEM; the cxl_pci and cxl_mem modules)'),
    (CXL + '/drivers/cxl_region', 'CXL regions (CONFIG_CXL_REGION, '
                                  'Linux 6.3 or later)'),
    (CXL + '/drivers/cxl_dax_region', 'DAX devices of CXL regions '
                                      '(CONFIG_DEV_DAX_CXL)'),
    (DAX + '/drivers/kmem', 'the kmem DAX driver (CONFIG_DEV_DAX_KMEM; '
                            'modprobe kmem)'),
    (DAX + '/drivers/device_dax', 'the device_dax driver '
                                  '(CONFIG_DEV_DAX)'),
    (MEMORY + '/block_size_bytes', 'memory hotplug (CONFIG_MEMORY_HOTPLUG, '
                                   'CONFIG_MEMORY_HOTREMOVE)'),
)

_NAME = re.compile(r'(mem|decoder|region|dax|endpoint|memory|node)'
                   r'[0-9]+(\.[0-9]+)?')
_SERIAL = re.compile(r'0x[0-9a-f]{1,16}')
# An overwrite walks the DAX device in windows of this many bytes: a
# multiple of every device-dax alignment (4 KiB, 2 MiB, 1 GiB).
WINDOW = 1 << 30
# ... written a slice at a time.
SLICE = 64 << 20
MAX_SIZE = 1 << 50
SANITIZE_DEFAULT_TIMEOUT = 600
OFFLINE_DEFAULT_TIMEOUT = 10
# A block's offline write, run by a child process: its exit status is
# the write's errno (0 when it was done).
_CHILD_WRITER = '''
import os, sys
try:
    fd = os.open(sys.argv[1], os.O_WRONLY)
    try:
        os.write(fd, sys.argv[2].encode())
    finally:
        os.close(fd)
except OSError as exc:
    sys.exit(exc.errno if 0 < (exc.errno or 0) < 256 else 255)
'''


def path(*parts):
    return os.path.join(ROOT, *parts)


def check_name(name):
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValueError('%r is not a CXL, DAX or memory sysfs name' %
                         (name,))
    return name


def check_serial(serial):
    if not isinstance(serial, str) or not _SERIAL.fullmatch(serial):
        raise ValueError('%r is not a device serial number (0x...)' %
                         (serial,))
    return serial


def check_size(size):
    if isinstance(size, bool) or not isinstance(size, int) or \
            not 0 < size <= MAX_SIZE:
        raise ValueError('a region size is a positive number of bytes, '
                         'not %r' % (size,))
    return size


def _read(*parts, default=None):
    try:
        with open(path(*parts)) as f:
            return f.read().strip()
    except OSError:
        return default


def _int(text, default=0):
    if text is None or text == '':
        return default
    return int(text, 0)


def _devices(prefix):
    found = []
    for entry in sorted(os.listdir(path(CXL, 'devices'))):
        if entry.startswith(prefix) and _NAME.fullmatch(entry):
            found.append(entry)
    return found


# ------------------------------------------------------------ reading

def probe():
    """What this host lacks for CXL memory: a list of descriptions, empty
    when nothing is missing."""
    return [what for where, what in REQUIREMENTS
            if not os.path.exists(path(where))]


def boot_id():
    """The kernel's id of this boot of the host, None when unreadable.
    Regions, decoders and DAX devices are the kernel's state of one
    boot; what a device's memory holds outlives it."""
    return _read('proc', 'sys', 'kernel', 'random', 'boot_id') or None


def memdev_by_serial(serial):
    """The memory device (``memN``) whose serial is ``serial``, or
    None."""
    check_serial(serial)
    for memdev in _devices('mem'):
        value = _read(CXL, 'devices', memdev, 'serial')
        if value is not None and _int(value, -1) == int(serial, 16):
            return memdev
    return None


def endpoint_decoders(memdev):
    """The endpoint decoders (``decoderN.M``) of ``memdev``: those of the
    endpoint port whose ``uport`` is the memory device."""
    check_name(memdev)
    found = []
    for port in _devices('endpoint'):
        uport = os.path.realpath(path(CXL, 'devices', port, 'uport'))
        if os.path.basename(uport) != memdev:
            continue
        number = port[len('endpoint'):]
        found.extend(d for d in _devices('decoder%s.' % number))
    return found


def root_decoders():
    """The decoders that can make RAM regions (a ``create_ram_region``
    file)."""
    return [d for d in _devices('decoder')
            if os.path.exists(path(CXL, 'devices', d, 'create_ram_region'))]


def region_targets(region):
    check_name(region)
    ways = _int(_read(CXL, 'devices', region, 'interleave_ways'), 1) or 1
    return [t for t in (_read(CXL, 'devices', region, 'target%d' % i)
                        for i in range(ways)) if t]


def regions_of(memdev):
    """The regions with an endpoint decoder of ``memdev`` as a target."""
    decoders = set(endpoint_decoders(memdev))
    return [r for r in _devices('region')
            if decoders.intersection(region_targets(r))]


def untargeted_regions():
    """Regions with no target yet: only a region make cut short leaves
    one for long."""
    return [r for r in _devices('region') if not region_targets(r)]


def dax_of(region):
    """The DAX device (``daxN.M``) of a region bound to cxl_region, or
    None."""
    check_name(region)
    for entry in sorted(glob.glob(path(CXL, 'devices', region,
                                       'dax_region*', 'dax*'))):
        name = os.path.basename(entry)
        if _NAME.fullmatch(name):
            return name
    return None


def dax_driver(dax):
    check_name(dax)
    link = path(DAX, 'devices', dax, 'driver')
    if not os.path.exists(link):
        return None
    return os.path.basename(os.path.realpath(link))


def memory_blocks(dax):
    """The memory blocks (``memoryN``) of the DAX device's physical
    range."""
    check_name(dax)
    start = _int(_read(DAX, 'devices', dax, 'resource'), None)
    size = _int(_read(DAX, 'devices', dax, 'size'), 0)
    # block_size_bytes is hex without its 0x.
    block = int(_read(MEMORY, 'block_size_bytes') or '0', 16)
    if start is None or not size or not block:
        return []
    return ['memory%d' % n for n in range(start // block,
                                          (start + size) // block)]


def block_state(block):
    check_name(block)
    return _read(MEMORY, block, 'state')


def block_zone(block):
    """The zone an online block is in (``Movable``, ``Normal``)."""
    check_name(block)
    zones = _read(MEMORY, block, 'valid_zones') or ''
    return zones.split()[0] if zones else None


def target_node(dax):
    check_name(dax)
    value = _read(DAX, 'devices', dax, 'target_node')
    return None if value is None else int(value)


def node_cpus(node):
    """The CPU list of NUMA node ``node`` ('' for a node without
    CPUs)."""
    return _read(NODES, 'node%d' % int(node), 'cpulist', default='')


def region_info(region):
    """What sysfs says of a region, or None when it does not exist."""
    check_name(region)
    if not os.path.isdir(path(CXL, 'devices', region)):
        return None
    return {'region': region,
            'size': _int(_read(CXL, 'devices', region, 'size'), 0),
            'committed': _read(CXL, 'devices', region, 'commit') == '1',
            'targets': region_targets(region),
            'dax': dax_of(region)}


def can_sanitize(memdev):
    check_name(memdev)
    return os.path.exists(path(CXL, 'devices', memdev, 'security',
                               'sanitize'))


# ------------------------------------------------------------ writing

def _dax_driver_name(driver):
    if driver not in ('device_dax', 'kmem'):
        raise CxlError(ErrorCode.BUSY, 'the DAX device is held by driver '
                       '%s, not device_dax or kmem' % driver)
    return driver


def _put(value, *parts):
    WRITER(path(*parts), value)


def _region_driver_bound(region):
    return os.path.exists(path(CXL, 'devices', region, 'driver'))


def _make_region(memdev, size):
    check_name(memdev)
    check_size(size)
    roots = root_decoders()
    if not roots:
        raise CxlError(ErrorCode.NO_DEVICE, 'no root decoder can make RAM '
                       'regions (no create_ram_region file)')
    free = [d for d in endpoint_decoders(memdev)
            if _int(_read(CXL, 'devices', d, 'dpa_size'), 0) == 0]
    if not free:
        raise CxlError(ErrorCode.NO_SPACE, 'memory device %s has no free '
                       'endpoint decoder' % memdev)
    decoder, root = free[0], roots[0]
    _put('ram', CXL, 'devices', decoder, 'mode')
    _put(str(size), CXL, 'devices', decoder, 'dpa_size')
    region = _read(CXL, 'devices', root, 'create_ram_region')
    check_name(region)
    _put(region, CXL, 'devices', root, 'create_ram_region')
    granularity = _read(CXL, 'devices', root, 'interleave_granularity',
                        default='256')
    _put('1', CXL, 'devices', region, 'interleave_ways')
    _put(granularity, CXL, 'devices', region, 'interleave_granularity')
    _put(str(size), CXL, 'devices', region, 'size')
    _put(decoder, CXL, 'devices', region, 'target0')
    _put('1', CXL, 'devices', region, 'commit')
    _put(region, CXL, 'drivers', 'cxl_region', 'bind')
    return {'region': region, 'decoder': decoder, 'root_decoder': root}


@privsep.sys_admin_pctxt.entrypoint
@_typed
def make_region(memdev, size):
    """Make and enable a RAM region of ``size`` bytes on ``memdev``;
    ``{'region', 'decoder', 'root_decoder'}``."""
    return _make_region(memdev, size)


def _online_region(region):
    dax = dax_of(region)
    if dax is None:
        raise CxlError(ErrorCode.NO_DEVICE, 'region %s has no DAX device '
                       '(is it enabled?)' % region)
    driver = dax_driver(dax)
    if driver != 'kmem':
        if driver is not None:
            _put(dax, DAX, 'drivers', _dax_driver_name(driver), 'unbind')
        _put(dax, DAX, 'drivers', 'kmem', 'bind')
    blocks = memory_blocks(dax)
    for block in blocks:
        state = block_state(block)
        if state == 'online' and block_zone(block) != 'Movable':
            # Onlined by the kernel's auto-online policy into
            # ZONE_NORMAL, where pages may be unmovable: give it back
            # now, while nothing uses it, and online it movable.
            _put('offline', MEMORY, block, 'state')
            state = 'offline'
        if state != 'online':
            _put('online_movable', MEMORY, block, 'state')
    return {'dax': dax, 'numa_node': target_node(dax), 'blocks': blocks}


@privsep.sys_admin_pctxt.entrypoint
@_typed
def online_region(region):
    """Put the region's DAX device in kmem and online its memory
    movable; ``{'dax', 'numa_node', 'blocks'}``."""
    return _online_region(check_name(region))


def _offline_region(region, timeout):
    dax = dax_of(region)
    if dax is None or dax_driver(dax) != 'kmem':
        return []
    busy = []
    for block in memory_blocks(dax):
        if block_state(block) == 'offline':
            continue
        try:
            BOUNDED_WRITER(path(MEMORY, block, 'state'), 'offline', timeout)
        except OSError as exc:
            if exc.errno not in (errno.EBUSY, errno.EAGAIN, errno.EINTR):
                raise
            busy.append(block)
    return busy


@privsep.sys_admin_pctxt.entrypoint
@_typed
def offline_region(region, timeout=None):
    """Offline every memory block of the region, each given ``timeout``
    seconds; the blocks the kernel could not offline (their pages could
    not be moved, within the time), [] when all are."""
    timeout = privsep.timeout_seconds(timeout, OFFLINE_DEFAULT_TIMEOUT)
    return _offline_region(check_name(region), timeout)


@privsep.sys_admin_pctxt.entrypoint
@_typed
def online_blocks(blocks):
    """Online ``blocks`` movable again (an offline that could not finish
    gives back what it took)."""
    for block in blocks:
        check_name(block)
        if block_state(block) != 'online':
            _put('online_movable', MEMORY, block, 'state')


def _release_dax(region):
    dax = dax_of(region)
    if dax is None:
        return None
    if dax_driver(dax) == 'kmem':
        _put(dax, DAX, 'drivers', 'kmem', 'unbind')
    if dax_driver(dax) is None:
        # A RAM region's DAX device is of the kmem type: device_dax
        # matches it only once named in its new_id (a plain bind is
        # refused with ENODEV); the new id also binds it. This is what
        # daxctl reconfigure-device --mode=devdax does.
        _put(dax, DAX, 'drivers', 'device_dax', 'new_id')
        if dax_driver(dax) is None:
            _put(dax, DAX, 'drivers', 'device_dax', 'bind')
    return dax


@privsep.sys_admin_pctxt.entrypoint
@_typed
def release_dax(region):
    """Take the region's DAX device from kmem (its blocks offline) back
    to device_dax, so it can be overwritten."""
    return _release_dax(check_name(region))


def _overwrite(dax):
    size = _int(_read(DAX, 'devices', dax, 'size'), 0)
    if not size:
        raise CxlError(ErrorCode.NO_DEVICE, 'DAX device %s has no size'
                       % dax)
    zeros = bytes(SLICE)
    fd = os.open(path('dev', dax), os.O_RDWR)
    try:
        offset = 0
        while offset < size:
            length = min(WINDOW, size - offset)
            with mmap.mmap(fd, length, offset=offset) as window:
                # Zeros: what the next holder reads is all-zero memory.
                for start in range(0, length, SLICE):
                    end = min(length, start + SLICE)
                    window[start:end] = zeros[:end - start]
                # No flush: the stores reach the device directly (a DAX
                # mapping has no page cache), and Linux refuses msync on
                # a device-dax file (EINVAL: it has no fsync).
            offset += length
    finally:
        os.close(fd)
    return size


@privsep.sys_admin_pctxt.entrypoint
@_typed
def overwrite(region):
    """Write zeros over all of the region's memory through its DAX
    device (bound to device_dax); the bytes written."""
    dax = dax_of(check_name(region))
    if dax is None:
        raise CxlError(ErrorCode.NO_DEVICE, 'region %s has no DAX device'
                       % region)
    if dax_driver(dax) != 'device_dax':
        raise CxlError(ErrorCode.BUSY, 'DAX device %s of region %s is not '
                                       'with device_dax (%s)' %
                       (dax, region, dax_driver(dax)))
    return _overwrite(dax)


def _destroy_region(region, decoder, root_decoder):
    if decoder is not None:
        check_name(decoder)
    check_name(root_decoder)
    if os.path.isdir(path(CXL, 'devices', region)):
        if _region_driver_bound(region):
            _put(region, CXL, 'drivers', 'cxl_region', 'unbind')
        if _read(CXL, 'devices', region, 'commit') == '1':
            _put('0', CXL, 'devices', region, 'commit')
        for index, target in enumerate(region_targets(region)):
            _put('', CXL, 'devices', region, 'target%d' % index)
        _put(region, CXL, 'devices', root_decoder, 'delete_region')
    if decoder is not None and \
            _int(_read(CXL, 'devices', decoder, 'dpa_size'), 0):
        _put('0', CXL, 'devices', decoder, 'dpa_size')


@privsep.sys_admin_pctxt.entrypoint
@_typed
def destroy_region(region, decoder, root_decoder):
    """Disable and delete the region and free its decoder's capacity;
    what is already gone is skipped."""
    _destroy_region(check_name(region), decoder, root_decoder)


@privsep.sys_admin_pctxt.entrypoint
@_typed
def release_idle_decoders(memdev):
    """Free the capacity of the endpoint decoders of ``memdev`` that
    hold some (``dpa_size``) but are no region's target: left by a region
    make cut short. The decoders freed."""
    check_name(memdev)
    targeted = set()
    for region in _devices('region'):
        targeted.update(region_targets(region))
    freed = []
    for decoder in endpoint_decoders(memdev):
        if decoder in targeted:
            continue
        if _int(_read(CXL, 'devices', decoder, 'dpa_size'), 0):
            _put('0', CXL, 'devices', decoder, 'dpa_size')
            freed.append(decoder)
    return freed


@privsep.sys_admin_pctxt.entrypoint
@_typed
def sanitize(memdev, timeout=None):
    """Run the device's sanitize (every byte of its media erased) and
    wait until it is over; refused by the kernel while a region maps the
    device."""
    check_name(memdev)
    timeout = privsep.timeout_seconds(timeout, SANITIZE_DEFAULT_TIMEOUT)
    _put('1', CXL, 'devices', memdev, 'security', 'sanitize')
    deadline = time.monotonic() + timeout
    while _read(CXL, 'devices', memdev, 'security', 'state') == 'sanitize':
        if time.monotonic() > deadline:
            raise CxlError(ErrorCode.TIMED_OUT, 'the sanitize of %s did '
                                                'not end in %d seconds' %
                           (memdev, timeout))
        time.sleep(0.1)


@privsep.sys_admin_pctxt.entrypoint
@_typed
def page_holders(node, limit=10):
    """The processes holding the most pages on NUMA node ``node``, from
    /proc/*/numa_maps: [(pid, command, pages)], most pages first."""
    node = int(node)
    key = 'N%d=' % node
    holders = []
    for entry in os.listdir(path('proc')):
        if not entry.isdigit():
            continue
        try:
            with open(path('proc', entry, 'numa_maps')) as f:
                pages = sum(int(word[len(key):]) for line in f
                            for word in line.split()
                            if word.startswith(key))
        except (OSError, ValueError):
            continue
        if pages:
            comm = _read('proc', entry, 'comm', default='?')
            holders.append((int(entry), comm, pages))
    holders.sort(key=lambda h: (-h[2], h[0]))
    return holders[:int(limit)]
