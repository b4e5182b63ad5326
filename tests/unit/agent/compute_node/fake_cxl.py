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

"""MOCK: an emulated Linux CXL/DAX/memory-hotplug sysfs, for the CXL
memory tests.

No CXL hardware and no kernel new enough for CXL RAM regions (6.3+) runs
where these tests run, so this builds the sysfs layout the privileged
module reads (/sys/bus/cxl, /sys/bus/dax, /sys/devices/system/memory and
node, /proc/*/numa_maps, /dev/daxN.M) in a temporary directory, and
``write`` plays the kernel's part for each sysfs write: the state
changes, and the errors (EBUSY, EINVAL, ENXIO, ENOSPC) the kernel gives
for writes out of order. What it emulates, and what it does not, follows
the kernel's documented ABI (Documentation/ABI/testing/sysfs-bus-cxl,
sysfs-bus-dax, memory-hotplug.rst):

* endpoint decoders take ``mode`` ram then ``dpa_size`` (multiples of
  the decoder granule, from the device's free capacity, lowest first);
* a root decoder names the next region in ``create_ram_region``; a
  region takes ``size``, ``target0`` (a decoder of exactly that size),
  ``commit``, then ``cxl_region/bind`` gives it a DAX device with a
  physical range in the window and ``target_node``;
* ``kmem`` bind adds the range's memory blocks, offline or online in
  ZONE_NORMAL as ``auto_online_blocks`` says; blocks go online movable or
  normal, and offline unless they are ``pinned`` (unmovable pages: EBUSY
  at once) or ``stuck`` (movable pages with nowhere to go, e.g. the rest
  of the host's memory is full): as Linux 6.12 does, the offline of a
  stuck block does not return until the writer gets a signal. ``write``
  (no deadline) raises ``Hung`` there, since the write would never
  return; ``bounded_write`` (what ``cxl.BOUNDED_WRITER`` is in the
  tests) is the writer killed after its deadline: EINTR, the block
  still online;
* the device's media is a sparse file: what a region held is written
  back at region unbind and read again by the next region on the same
  capacity, so a test can see whether it was erased; ``sanitize`` zeroes
  it and is refused while a region maps the device.

It is scaled down so that a test writes megabytes, not gigabytes: the
granule is 2 MiB instead of the 256 MiB of real decoders, memory blocks
are 1 MiB instead of 128 MiB or more, a device holds 16 MiB.

Killing the agent mid-way is emulated by ``kill_after``: the n-th write
from then on raises Killed (a BaseException, so no cleanup runs).
"""

import errno
import os

MIB = 1 << 20
WINDOW_BASE = 0x1000000000
NODE = 1


class Killed(BaseException):
    """The agent process dies here."""


class Hung(BaseException):
    """A write that would block for ever: nothing interrupts it."""


def _fail(code, what):
    raise OSError(code, '%s: %s' % (os.strerror(code), what))


class FakeCxlKernel(object):

    def __init__(self, root, devices=(('0x5a5a0001', 16 * MIB, True),),
                 granule=2 * MIB, block_size=1 * MIB, auto_online='offline',
                 missing=(), node=NODE):
        self.root = str(root)
        # The NUMA node the kernel gives the regions' memory (a test that
        # hands it to real software may need one that exists there).
        self.node = node
        self.granule = granule
        self.block_size = block_size
        self.devices = {}
        self.serials = {}
        self.decoders = {}
        self.regions = {}
        self.blocks = {}
        self.dax = {}
        # DAX devices named in a DAX driver's new_id: {driver: {dax}}.
        self.named_ids = {}
        self.pinned = set()
        self.stuck = set()
        # (block, seconds) of each offline write interrupted after its
        # deadline.
        self.interrupted = []
        self.next_region = 0
        self.next_hpa = WINDOW_BASE
        self.writes = []
        self.sanitized = []
        self._kill_in = None
        self._mkdirs(missing)
        self._put('sys/devices/system/memory/auto_online_blocks',
                  auto_online)
        self._put('sys/devices/system/node/node0/cpulist', '0-1')
        self.boots = 0
        self._put('proc/sys/kernel/random/boot_id', self._boot_id())
        for index, (serial, capacity, sanitize) in enumerate(devices):
            self.add_device(index, serial, capacity, sanitize)

    # ------------------------------------------------------------ tree

    def p(self, rel):
        return os.path.join(self.root, rel)

    def _put(self, rel, value):
        full = self.p(rel)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, 'w') as f:
            f.write('%s\n' % value)

    def _get(self, rel):
        with open(self.p(rel)) as f:
            return f.read().strip()

    def _mkdirs(self, missing):
        for rel in ('sys/bus/cxl/devices', 'sys/bus/cxl/drivers/cxl_region',
                    'sys/bus/cxl/drivers/cxl_dax_region',
                    'sys/bus/dax/devices', 'sys/bus/dax/drivers/kmem',
                    'sys/bus/dax/drivers/device_dax', 'proc', 'dev'):
            if rel not in missing:
                os.makedirs(self.p(rel), exist_ok=True)
        if 'sys/devices/system/memory/block_size_bytes' not in missing:
            self._put('sys/devices/system/memory/block_size_bytes',
                      '%x' % self.block_size)
        self._put('sys/bus/cxl/devices/decoder0.0/create_ram_region',
                  'region0')
        self._put('sys/bus/cxl/devices/decoder0.0/delete_region', '')
        self._put('sys/bus/cxl/devices/decoder0.0/interleave_granularity',
                  '256')

    def add_device(self, index, serial, capacity, sanitize=True):
        mem = 'mem%d' % index
        port = index + 2
        base = 'sys/bus/cxl/devices/'
        self._put(base + mem + '/serial', serial)
        self._put(base + mem + '/ram/size', '0x%x' % capacity)
        if sanitize:
            self._put(base + mem + '/security/sanitize', '')
            self._put(base + mem + '/security/state', 'disabled')
        os.makedirs(self.p(base + 'endpoint%d' % port), exist_ok=True)
        os.symlink('../' + mem, self.p(base + 'endpoint%d/uport' % port))
        media = self.p('media-%s' % mem)
        with open(media, 'wb') as f:
            f.truncate(capacity)
        self.devices[mem] = {'capacity': capacity, 'media': media,
                             'decoders': []}
        self.serials[mem] = (serial, sanitize)
        for n in range(2):
            name = 'decoder%d.%d' % (port, n)
            self.decoders[name] = {'mem': mem, 'mode': 'none', 'size': 0,
                                   'dpa': None}
            self.devices[mem]['decoders'].append(name)
            self._sync_decoder(name)

    def _sync_decoder(self, name):
        d = self.decoders[name]
        base = 'sys/bus/cxl/devices/%s/' % name
        self._put(base + 'mode', d['mode'])
        self._put(base + 'dpa_size', '0x%x' % d['size'])
        self._put(base + 'dpa_resource',
                  '0x%x' % (d['dpa'] if d['dpa'] is not None else 0))

    def add_process(self, pid, comm, node_pages):
        self._put('proc/%d/comm' % pid, comm)
        self._put('proc/%d/numa_maps' % pid,
                  '7f0000000000 default anon=%d dirty=%d N%d=%d' % (
                      node_pages, node_pages, self.node, node_pages))

    # ------------------------------------------------------------ helpers

    def kill_after(self, writes):
        """The ``writes``-th write from now raises Killed (before it
        takes effect)."""
        self._kill_in = writes

    def memory_of(self, region):
        """The DAX device's backing file of a region (what the host's
        memory holds)."""
        return self.p('dev/' + self.regions[region]['dax'])

    def read_media(self, mem, offset, length):
        with open(self.devices[mem]['media'], 'rb') as f:
            f.seek(offset)
            return f.read(length)

    def online_blocks(self):
        return sorted(b for b, s in self.blocks.items()
                      if s['state'] == 'online')

    def _boot_id(self):
        return '00000000-0000-4000-8000-%012d' % self.boots

    def reboot(self, keep_devices=None):
        """The host restarts: the kernel forgets its regions, decoders,
        DAX devices and hot-added memory; each device keeps what its
        memory holds (a pooled device stays powered). ``keep_devices``:
        the memory devices still on the host's bus afterwards (default
        all), others are gone from it."""
        for name, region in sorted(self.regions.items()):
            if region['bound']:
                self._copy(region, to_memory=False)
            _rmtree(self.p('sys/bus/cxl/devices/' + name))
        for dax in self.dax:
            _rmtree(self.p('sys/bus/dax/devices/' + dax))
        for block in self.blocks:
            _rmtree(self.p('sys/devices/system/memory/' + block))
        self.regions, self.dax, self.blocks = {}, {}, {}
        self.named_ids, self.pinned, self.stuck = {}, set(), set()
        for name, decoder in self.decoders.items():
            decoder.update(mode='none', size=0, dpa=None)
            self._sync_decoder(name)
        self.next_region = 0
        self.next_hpa = WINDOW_BASE
        self._put('sys/bus/cxl/devices/decoder0.0/create_ram_region',
                  'region0')
        if keep_devices is not None:
            for index, mem in enumerate(sorted(self.devices)):
                if mem not in keep_devices:
                    _rmtree(self.p('sys/bus/cxl/devices/' + mem))
                    _rmtree(self.p('sys/bus/cxl/devices/endpoint%d' %
                                   (index + 2)))
        self.boots += 1
        self._put('proc/sys/kernel/random/boot_id', self._boot_id())

    def plug_back(self, mem):
        """A device gone from the bus at a reboot is back (its memory
        as it was)."""
        index = sorted(self.devices).index(mem)
        port = index + 2
        base = 'sys/bus/cxl/devices/'
        serial, sanitize = self.serials[mem]
        self._put(base + mem + '/serial', serial)
        if sanitize:
            self._put(base + mem + '/security/sanitize', '')
            self._put(base + mem + '/security/state', 'disabled')
        self._put(base + mem + '/ram/size', '0x%x' %
                  self.devices[mem]['capacity'])
        os.makedirs(self.p(base + 'endpoint%d' % port), exist_ok=True)
        os.symlink('../' + mem, self.p(base + 'endpoint%d/uport' % port))
        for name in self.devices[mem]['decoders']:
            self._sync_decoder(name)

    # ------------------------------------------------------------ writes

    def write(self, path, value):
        rel = os.path.relpath(path, self.root)
        if self._kill_in is not None:
            self._kill_in -= 1
            if self._kill_in <= 0:
                self._kill_in = None
                raise Killed(rel)
        value = value.strip()
        self.writes.append((rel, value))
        parts = rel.split('/')
        if rel.startswith('sys/bus/cxl/devices/decoder0.0/'):
            return self._root_decoder(parts[-1], value)
        if rel.startswith('sys/bus/cxl/devices/decoder'):
            return self._decoder(parts[4], parts[-1], value)
        if rel.startswith('sys/bus/cxl/devices/region'):
            return self._region(parts[4], parts[-1], value)
        if rel.startswith('sys/bus/cxl/drivers/cxl_region/'):
            return self._region_driver(parts[-1], value)
        if rel.startswith('sys/bus/dax/drivers/'):
            return self._dax_driver(parts[4], parts[-1], value)
        if rel.startswith('sys/devices/system/memory/memory'):
            return self._block(parts[4], value)
        if rel.endswith('/security/sanitize'):
            return self._sanitize(parts[4])
        _fail(errno.EACCES, rel)

    def bounded_write(self, path, value, timeout):
        """``write`` by a writer that is killed after ``timeout``
        seconds (cxl.BOUNDED_WRITER)."""
        rel = os.path.relpath(path, self.root)
        parts = rel.split('/')
        if rel.startswith('sys/devices/system/memory/memory') and \
                value.strip() == 'offline' and parts[4] in self.stuck and \
                self.blocks.get(parts[4], {}).get('state') == 'online':
            self.writes.append((rel, value.strip()))
            self.interrupted.append((parts[4], timeout))
            # The kernel gives the isolated range back and the write
            # returns EINTR; the block stays online.
            _fail(errno.EINTR, parts[4] + ' interrupted while migrating')
        return self.write(path, value)

    def _decoder(self, name, attr, value):
        d = self.decoders.get(name) or _fail(errno.ENOENT, name)
        targeted = any(name in r['targets'] for r in self.regions.values())
        if attr == 'mode':
            if d['size']:
                _fail(errno.EBUSY, name + ' has capacity')
            if value not in ('ram', 'pmem'):
                _fail(errno.EINVAL, value)
            d['mode'] = value
        elif attr == 'dpa_size':
            size = int(value, 0)
            if targeted:
                _fail(errno.EBUSY, name + ' is a region target')
            if size == 0:
                d['size'], d['dpa'] = 0, None
            else:
                if d['mode'] != 'ram' or size % self.granule:
                    _fail(errno.EINVAL, 'dpa_size %s' % value)
                d['dpa'] = self._free_dpa(d['mem'], size)
                d['size'] = size
        else:
            _fail(errno.EACCES, attr)
        self._sync_decoder(name)

    def _free_dpa(self, mem, size):
        used = sorted((d['dpa'], d['dpa'] + d['size'])
                      for d in self.decoders.values()
                      if d['mem'] == mem and d['size'])
        offset = 0
        for start, end in used:
            if start - offset >= size:
                break
            offset = max(offset, end)
        if offset + size > self.devices[mem]['capacity']:
            _fail(errno.ENOSPC, '%s has no %d bytes free' % (mem, size))
        return offset

    def _root_decoder(self, attr, value):
        base = 'sys/bus/cxl/devices/'
        if attr == 'create_ram_region':
            expected = 'region%d' % self.next_region
            if value != expected:
                _fail(errno.EINVAL, value)
            self.next_region += 1
            self._put(base + 'decoder0.0/create_ram_region',
                      'region%d' % self.next_region)
            self.regions[value] = {'size': 0, 'targets': [],
                                   'committed': False, 'bound': False,
                                   'ways': 1, 'hpa': None, 'dax': None}
            self._sync_region(value)
        elif attr == 'delete_region':
            region = self.regions.get(value) or _fail(errno.ENOENT, value)
            if region['committed'] or region['bound']:
                _fail(errno.EBUSY, value + ' is committed')
            del self.regions[value]
            _rmtree(self.p(base + value))
        else:
            _fail(errno.EACCES, attr)

    def _sync_region(self, name):
        r = self.regions[name]
        base = 'sys/bus/cxl/devices/%s/' % name
        self._put(base + 'size', '0x%x' % r['size'])
        self._put(base + 'interleave_ways', r['ways'])
        self._put(base + 'commit', '1' if r['committed'] else '0')
        self._put(base + 'target0', r['targets'][0] if r['targets'] else '')
        self._put(base + 'mode', 'ram')

    def _region(self, name, attr, value):
        r = self.regions.get(name) or _fail(errno.ENOENT, name)
        if attr in ('interleave_ways', 'interleave_granularity'):
            if r['committed']:
                _fail(errno.EBUSY, name)
            if attr == 'interleave_ways':
                r['ways'] = int(value)
        elif attr == 'size':
            size = int(value, 0)
            if r['committed'] or size % self.granule or not size:
                _fail(errno.EINVAL, 'size %s' % value)
            r['size'] = size
            r['hpa'] = self.next_hpa
            self.next_hpa += size
        elif attr == 'target0':
            if r['committed']:
                _fail(errno.EBUSY, name + ' is committed')
            if value == '':
                r['targets'] = []
            else:
                d = self.decoders.get(value) or _fail(errno.ENXIO, value)
                if d['size'] != r['size'] or d['mode'] != 'ram':
                    _fail(errno.ENXIO, '%s does not fit %s' % (value, name))
                r['targets'] = [value]
        elif attr == 'commit':
            if value == '1':
                if not r['targets'] or not r['size']:
                    _fail(errno.ENXIO, name + ' is not set up')
                r['committed'] = True
            else:
                if r['bound']:
                    _fail(errno.EBUSY, name + ' is enabled')
                r['committed'] = False
        else:
            _fail(errno.EACCES, attr)
        self._sync_region(name)

    def _region_driver(self, attr, name):
        r = self.regions.get(name) or _fail(errno.ENODEV, name)
        base = 'sys/bus/cxl/devices/%s/' % name
        index = int(name[len('region'):])
        dax = 'dax%d.0' % index
        if attr == 'bind':
            if not r['committed']:
                _fail(errno.ENXIO, name + ' is not committed')
            if r['bound']:
                _fail(errno.EBUSY, name + ' is bound')
            r['bound'] = True
            r['dax'] = dax
            os.makedirs(self.p(base + 'driver'), exist_ok=True)
            os.makedirs(self.p(base + 'dax_region%d/%s' % (index, dax)))
            dbase = 'sys/bus/dax/devices/%s/' % dax
            self._put(dbase + 'resource', '0x%x' % r['hpa'])
            self._put(dbase + 'size', '%d' % r['size'])
            self._put(dbase + 'target_node', self.node)
            self.dax[dax] = {'region': name, 'driver': None}
            self._copy(r, to_memory=True)
            # A RAM region's DAX device is of the kmem type: Linux gives
            # it to kmem at once (and onlines it as auto_online_blocks
            # says), as a real 6.12 kernel does.
            self._dax_driver('kmem', 'bind', dax)
        elif attr == 'unbind':
            if not r['bound']:
                _fail(errno.ENODEV, name)
            if self.dax[dax]['driver'] == 'kmem':
                _fail(errno.EBUSY, dax + ' is system RAM')
            self._copy(r, to_memory=False)
            r['bound'] = False
            r['dax'] = None
            del self.dax[dax]
            _rmtree(self.p(base + 'driver'))
            _rmtree(self.p(base + 'dax_region%d' % index))
            _rmtree(self.p('sys/bus/dax/devices/' + dax))
        else:
            _fail(errno.EACCES, attr)

    def _copy(self, region, to_memory):
        decoder = self.decoders[region['targets'][0]]
        media = self.devices[decoder['mem']]['media']
        memory = self.p('dev/' + region['dax'])
        if to_memory:
            with open(media, 'rb') as src, open(memory, 'w+b') as dst:
                dst.truncate(region['size'])
                _copy_range(src, decoder['dpa'], dst, 0, region['size'])
        else:
            with open(memory, 'rb') as src, open(media, 'r+b') as dst:
                _copy_range(src, 0, dst, decoder['dpa'], region['size'])
            os.unlink(memory)

    def _sync_dax(self, dax):
        link = self.p('sys/bus/dax/devices/%s/driver' % dax)
        if os.path.lexists(link):
            os.unlink(link)
        driver = self.dax[dax]['driver']
        if driver:
            os.symlink(self.p('sys/bus/dax/drivers/' + driver), link)

    def _dax_blocks(self, dax):
        r = self.regions[self.dax[dax]['region']]
        first = r['hpa'] // self.block_size
        return ['memory%d' % n for n in
                range(first, first + r['size'] // self.block_size)]

    def _dax_driver(self, driver, attr, dax):
        d = self.dax.get(dax) or _fail(errno.ENODEV, dax)
        if attr == 'unbind':
            if d['driver'] != driver:
                _fail(errno.ENODEV, dax)
            if driver == 'kmem':
                blocks = self._dax_blocks(dax)
                if any(self.blocks[b]['state'] == 'online' for b in blocks):
                    _fail(errno.EBUSY, dax + ' has online memory')
                for b in blocks:
                    del self.blocks[b]
                    _rmtree(self.p('sys/devices/system/memory/' + b))
            d['driver'] = None
        elif attr in ('bind', 'new_id'):
            if attr == 'new_id':
                self.named_ids.setdefault(driver, set()).add(dax)
                if d['driver'] is not None:
                    self._sync_dax(dax)
                    return
            if d['driver'] is not None:
                _fail(errno.EBUSY, dax + ' has a driver')
            if driver == 'device_dax' and \
                    dax not in self.named_ids.get(driver, ()):
                # The device is of the kmem type: device_dax matches it
                # only once it is named in its new_id (what daxctl
                # reconfigure-device does).
                _fail(errno.ENODEV, dax)
            d['driver'] = driver
            if driver == 'kmem':
                auto = self._get('sys/devices/system/memory/'
                                 'auto_online_blocks')
                for b in self._dax_blocks(dax):
                    self.blocks[b] = {'state': 'offline', 'zone': None}
                    if auto.startswith('online'):
                        self.blocks[b] = {
                            'state': 'online',
                            'zone': ('Movable' if auto == 'online_movable'
                                     else 'Normal')}
                    self._sync_block(b)
                self._put('sys/devices/system/node/node%d/cpulist' %
                          self.node, '')
        else:
            _fail(errno.EACCES, attr)
        self._sync_dax(dax)

    def _sync_block(self, block):
        s = self.blocks[block]
        base = 'sys/devices/system/memory/%s/' % block
        self._put(base + 'state', s['state'])
        self._put(base + 'valid_zones',
                  s['zone'] if s['state'] == 'online' else 'Movable Normal')

    def _block(self, block, value):
        s = self.blocks.get(block) or _fail(errno.ENOENT, block)
        if value in ('online_movable', 'online', 'online_kernel'):
            if s['state'] == 'online':
                _fail(errno.EINVAL, block + ' is online')
            s['state'] = 'online'
            s['zone'] = 'Movable' if value == 'online_movable' else 'Normal'
        elif value == 'offline':
            if s['state'] == 'offline':
                _fail(errno.EINVAL, block + ' is offline')
            if block in self.pinned:
                _fail(errno.EBUSY, block + ' has unmovable pages')
            if block in self.stuck:
                raise Hung('offline of %s: its pages have nowhere to go, '
                           'so the kernel retries until the writer is '
                           'interrupted, and nothing interrupts it' % block)
            s['state'] = 'offline'
            s['zone'] = None
        else:
            _fail(errno.EINVAL, value)
        self._sync_block(block)

    def _sanitize(self, mem):
        decoders = self.devices[mem]['decoders']
        if any(set(r['targets']) & set(decoders)
               for r in self.regions.values()):
            _fail(errno.EBUSY, mem + ' is mapped by a region')
        media = self.devices[mem]['media']
        with open(media, 'r+b') as f:
            f.truncate(0)
            f.truncate(self.devices[mem]['capacity'])
        self.sanitized.append(mem)


def _data_extents(f, start, end):
    """The (offset, length) of the parts of [start, end) of sparse file
    ``f`` that hold data (SEEK_DATA/SEEK_HOLE): reading the holes of a
    256 MiB region byte by byte would take seconds on a busy machine."""
    fd = f.fileno()
    found = []
    offset = start
    while offset < end:
        try:
            data = os.lseek(fd, offset, os.SEEK_DATA)
        except OSError as exc:
            if exc.errno == errno.ENXIO:
                break
            raise
        if data >= end:
            break
        hole = min(os.lseek(fd, data, os.SEEK_HOLE), end)
        found.append((data, hole - data))
        offset = hole
    return found


def _copy_range(src, src_offset, dst, dst_offset, length):
    """dst[dst_offset:+length] = src[src_offset:+length], for sparse files:
    what dst held there is zeroed, then what src holds there written."""
    for offset, size in _data_extents(dst, dst_offset, dst_offset + length):
        dst.seek(offset)
        dst.write(bytes(size))
    for offset, size in _data_extents(src, src_offset, src_offset + length):
        src.seek(offset)
        dst.seek(dst_offset + offset - src_offset)
        dst.write(src.read(size))
    dst.flush()


def _rmtree(path):
    if os.path.islink(path) or os.path.isfile(path):
        os.unlink(path)
        return
    if not os.path.isdir(path):
        return
    for entry in os.listdir(path):
        _rmtree(os.path.join(path, entry))
    os.rmdir(path)
