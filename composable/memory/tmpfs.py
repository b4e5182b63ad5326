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

"""The tmpfs area of a memory node: the RAM it lends, as one file per
extent.

``[memory_node]tmpfs_path`` is a tmpfs, mounted by the agent when
``manage_mount`` is true (``size=tmpfs_size_mb``) or by the operator. A
directory on any other file system is refused: its files would be disk,
not memory.

Guaranteed memory, or over-commit
---------------------------------
By default (``allow_overcommit = False``) an extent file is created with
``posix_fallocate``. On tmpfs that really takes the pages (they count in
the tmpfs ``used`` and in the node's Shmem at once), so:

* an extent that does not fit fails at export time with an error naming
  what is free, instead of failing later as I/O errors inside the swap of
  a compute node when the pages are finally touched;
* the memory a lease was promised cannot be taken by anybody else.

Before allocating, the free space of the tmpfs and the node's
``MemAvailable`` are checked, so that a tmpfs mounted larger than the RAM
cannot push the node into its own swap or the OOM killer either.

``allow_overcommit = True`` creates sparse files (``ftruncate``): pages
are taken when first written, the node can promise more than it has, and
running out shows up late. It is meant for tests and demos.

Re-creating an existing extent file keeps its contents (fallocate only
fills holes), so a repeated export never wipes a live swap device.

Scrub
-----
Scrubbing removes the file. Once no process holds it open (the exporter
deletes its target first) tmpfs frees the pages, and a new file -- the
next lease's extent -- reads as zeros. There is nothing to overwrite.
"""

import os

from oslo_log import log as logging

from composable.common import exception
from composable import conf
from composable.privsep import memory as priv_memory

CONF = conf.CONF
LOG = logging.getLogger(__name__)

MiB = 1024 * 1024
PREFIX = 'extent-'
TMPFS_TYPES = ('tmpfs',)


def _unescape(field):
    # /proc/self/mountinfo escapes space, tab, newline and backslash.
    for code, char in (('\\040', ' '), ('\\011', '\t'), ('\\012', '\n'),
                       ('\\134', '\\')):
        field = field.replace(code, char)
    return field


def filesystem_type(path, mountinfo='/proc/self/mountinfo'):
    """The type of the file system ``path`` is on, or None."""
    real = os.path.realpath(path)
    best, best_type = '', None
    try:
        with open(mountinfo) as f:
            lines = f.readlines()
    except OSError:
        return None
    for line in lines:
        left, sep, right = line.partition(' - ')
        if not sep:
            continue
        fields = left.split()
        if len(fields) < 5:
            continue
        point = _unescape(fields[4])
        inside = (real == point or point == '/' or
                  real.startswith(point.rstrip('/') + '/'))
        if inside and len(point) >= len(best):
            best, best_type = point, right.split()[0]
    return best_type


def mem_available_bytes(meminfo='/proc/meminfo'):
    """MemAvailable of the node in bytes, or None if unknown."""
    try:
        with open(meminfo) as f:
            for line in f:
                if line.startswith('MemAvailable:'):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


class TmpfsArea(object):
    """The extent files of one memory node.

    ``ops`` does the privileged file work (composable.privsep.memory by
    default). ``require_tmpfs=False`` lets tests use a plain directory.
    """

    def __init__(self, path=None, size_mb=None, manage_mount=None,
                 allow_overcommit=None, ops=None, require_tmpfs=True,
                 node_name=None):
        group = CONF.memory_node
        self.path = path or group.tmpfs_path
        self.size_mb = group.tmpfs_size_mb if size_mb is None else size_mb
        self.manage_mount = (group.manage_mount if manage_mount is None
                             else manage_mount)
        self.allow_overcommit = (group.allow_overcommit
                                 if allow_overcommit is None
                                 else allow_overcommit)
        self.ops = ops or priv_memory
        self.require_tmpfs = require_tmpfs
        self.node_name = node_name or CONF.host
        self._ready = False

    # --------------------------------------------------------------- setup

    def ensure_ready(self):
        """Mount the tmpfs if the agent manages it; check it is one."""
        if self._ready:
            return
        if self.manage_mount:
            if self.ops.mount_tmpfs(self.path, self.size_mb):
                LOG.info('Mounted a tmpfs of %(size)s on %(path)s',
                         {'size': ('%d MiB' % self.size_mb
                                   if self.size_mb else 'default size'),
                          'path': self.path})
        elif not os.path.isdir(self.path):
            raise exception.DriverError(
                reason='memory node %s: [memory_node]tmpfs_path %s does not '
                       'exist; mount a tmpfs there or set '
                       '[memory_node]manage_mount = true' %
                       (self.node_name, self.path))
        if self.require_tmpfs:
            fstype = filesystem_type(self.path)
            if fstype not in TMPFS_TYPES:
                raise exception.DriverError(
                    reason='memory node %s: %s is on %s, not on a tmpfs; '
                           'its extents would be disk, not memory. Mount a '
                           'tmpfs there or set [memory_node]manage_mount = '
                           'true' % (self.node_name, self.path,
                                     fstype or 'an unknown file system'))
        self._ready = True

    # ------------------------------------------------------------- extents

    @staticmethod
    def file_name(extent):
        return PREFIX + str(extent['uuid'])

    def file_path(self, extent):
        return os.path.join(self.path, self.file_name(extent))

    def create(self, extent):
        """Create the extent's file (or find it); return its path."""
        self.ensure_ready()
        name = self.file_name(extent)
        size = int(extent['size_mb']) * MiB
        reserve = not self.allow_overcommit
        if reserve:
            self._check_room(name, size)
        try:
            result = self.ops.create_extent_file(self.path, name, size,
                                                 reserve)
        except priv_memory.MemoryNodeError as exc:
            if exc.code is priv_memory.ErrorCode.NO_SPACE:
                raise exception.DriverError(
                    reason='memory node %s cannot hold extent %s: %s' %
                           (self.node_name, extent['uuid'],
                            self._room_text(size)))
            if exc.code is priv_memory.ErrorCode.EXISTS:
                raise exception.DriverError(
                    reason='memory node %s: the file of extent %s exists '
                           'with another size than %s MiB; scrub the '
                           'extent first' % (self.node_name, extent['uuid'],
                                             extent['size_mb']))
            raise exception.DriverError(
                reason='memory node %s could not create the file of extent '
                       '%s: %s' % (self.node_name, extent['uuid'], exc))
        LOG.info('%(what)s file of extent %(extent)s: %(size)s MiB, '
                 '%(alloc)s MiB reserved',
                 {'what': 'Created' if result['created'] else 'Reusing the',
                  'extent': extent['uuid'], 'size': extent['size_mb'],
                  'alloc': result['file']['allocated'] // MiB})
        return os.path.join(self.path, name)

    def _check_room(self, name, size):
        """Refuse early, with a clear message, an extent that does not
        fit in the tmpfs or in the node's available RAM."""
        current = self.ops.stat_extent_file(self.path, name)
        need = size - (current['allocated'] if current else 0)
        if need <= 0:
            return
        free = self._free_bytes()
        if free is not None and need > free:
            raise exception.DriverError(
                reason='memory node %s cannot reserve %d MiB more: %s' %
                       (self.node_name, need // MiB, self._room_text(size)))
        avail = mem_available_bytes()
        if avail is not None and need > avail:
            raise exception.DriverError(
                reason='memory node %s cannot reserve %d MiB: only %d MiB '
                       'of RAM is available on the node (MemAvailable), '
                       'so the tmpfs at %s is larger than what the node can '
                       'back with RAM; lower [memory_node]tmpfs_size_mb or '
                       'the capacity_mb of the memory node' %
                       (self.node_name, need // MiB, avail // MiB,
                        self.path))

    def _free_bytes(self):
        try:
            st = os.statvfs(self.path)
        except OSError:
            return None
        return st.f_bavail * st.f_frsize

    def _room_text(self, size):
        free = self._free_bytes()
        return ('the extent needs %d MiB and the tmpfs at %s has %s MiB '
                'free; lower the capacity_mb of the memory node or grow '
                '[memory_node]tmpfs_size_mb' %
                (size // MiB, self.path,
                 'an unknown number of' if free is None else free // MiB))

    def exists(self, extent):
        return self.ops.stat_extent_file(
            self.path, self.file_name(extent)) is not None

    def remove(self, extent):
        """Scrub: remove the extent's file and check it is gone.
        Idempotent; returns True if there was a file."""
        if not os.path.isdir(self.path):
            # Nothing mounted (e.g. after a reboot): nothing to scrub.
            return False
        name = self.file_name(extent)
        removed = self.ops.remove_extent_file(self.path, name)
        if self.ops.stat_extent_file(self.path, name) is not None:
            raise exception.DriverError(
                reason='memory node %s: the file of extent %s is still '
                       'there after removal' % (self.node_name,
                                                extent['uuid']))
        if removed:
            LOG.info('Scrubbed extent %s: its file is removed and tmpfs '
                     'freed its pages', extent['uuid'])
        return removed

    def list(self):
        """The extent files present: uuid, size_mb, allocated_mb."""
        if not os.path.isdir(self.path):
            return []
        return [{'uuid': f['name'][len(PREFIX):],
                 'size_mb': f['size'] // MiB,
                 'allocated_mb': f['allocated'] // MiB}
                for f in self.ops.list_extent_files(self.path, PREFIX)]

    def usage(self):
        """Capacity and usage of the area, in MiB."""
        files = self.list()
        report = {'path': self.path,
                  'overcommit': self.allow_overcommit,
                  'extents': len(files),
                  'extent_mb': sum(f['size_mb'] for f in files),
                  'allocated_mb': sum(f['allocated_mb'] for f in files),
                  'total_mb': None, 'used_mb': None, 'free_mb': None}
        try:
            st = os.statvfs(self.path)
        except OSError:
            return report
        report['total_mb'] = st.f_blocks * st.f_frsize // MiB
        report['free_mb'] = st.f_bavail * st.f_frsize // MiB
        report['used_mb'] = ((st.f_blocks - st.f_bfree) * st.f_frsize //
                             MiB)
        return report
