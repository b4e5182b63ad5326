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

"""The tmpfs area, on temporary directories, and its privileged file
functions run in-process."""

import errno
import os
import tempfile
import uuid

import pytest

from composable.common import exception
from composable import conf
from composable.memory import tmpfs
from composable.privsep import memory as priv_memory
from tests.unit.memory.conftest import make_extent

CONF = conf.CONF
MiB = 1024 * 1024


INVALID = priv_memory.ErrorCode.INVALID_ARGUMENT
# O_DIRECTORY | O_NOFOLLOW on a symbolic link: ENOTDIR.
LINK_DIR = priv_memory.ErrorCode.WRONG_TYPE


def _refused(code, call, *args):
    """The message of the MemoryNodeError of ``code`` that ``call``
    refuses ``args`` with; its arguments are what crosses the privsep
    channel."""
    with pytest.raises(priv_memory.MemoryNodeError) as caught:
        call(*args)
    assert caught.value.code is code, caught.value.message
    assert caught.value.args == (code.value, caught.value.message)
    return caught.value.message


def test_create_reserves_the_memory(area):
    extent = make_extent(size_mb=3)
    path = area.create(extent)
    assert path == os.path.join(area.path, 'extent-' + extent['uuid'])
    st = os.stat(path)
    assert st.st_size == 3 * MiB
    assert st.st_blocks * 512 >= 3 * MiB
    assert oct(st.st_mode & 0o777) == '0o600'


def test_overcommit_creates_a_sparse_file(tmp_path, privsep_in_process):
    area = tmpfs.TmpfsArea(path=str(tmp_path), allow_overcommit=True,
                           require_tmpfs=False)
    path = area.create(make_extent(size_mb=8))
    st = os.stat(path)
    assert st.st_size == 8 * MiB
    assert st.st_blocks * 512 < 8 * MiB


def test_overcommit_from_config(tmp_path, memory_conf):
    CONF.set_override('allow_overcommit', True, 'memory_node')
    area = tmpfs.TmpfsArea(path=str(tmp_path), require_tmpfs=False)
    assert area.allow_overcommit is True


def test_create_again_keeps_the_contents(area):
    extent = make_extent(size_mb=2)
    path = area.create(extent)
    with open(path, 'r+b') as f:
        f.write(b'swap header')
    assert area.create(extent) == path
    with open(path, 'rb') as f:
        assert f.read(11) == b'swap header'
    assert os.path.getsize(path) == 2 * MiB


def _count_fallocate(monkeypatch):
    calls = []
    real = priv_memory.os.posix_fallocate

    def counting(fd, offset, length):
        calls.append(length)
        return real(fd, offset, length)

    monkeypatch.setattr(priv_memory.os, 'posix_fallocate', counting)
    return calls


def test_create_again_skips_fallocate_only_when_all_is_reserved(
        area, monkeypatch):
    calls = _count_fallocate(monkeypatch)
    extent = make_extent(size_mb=2)
    path = area.create(extent)
    assert calls == [2 * MiB]
    # Every page is there: nothing to reserve again.
    area.create(extent)
    assert calls == [2 * MiB]
    # A hole (punched here, as a sparse file of another origin has): the
    # file is reserved again, whole.
    os.truncate(path, MiB)
    os.truncate(path, 2 * MiB)
    assert os.stat(path).st_blocks * 512 < 2 * MiB
    area.create(extent)
    assert calls == [2 * MiB, 2 * MiB]
    assert os.stat(path).st_blocks * 512 >= 2 * MiB


def test_create_with_another_size_is_refused(area):
    extent = make_extent(size_mb=2)
    area.create(extent)
    extent['size_mb'] = 4
    with pytest.raises(exception.DriverError, match='another size'):
        area.create(extent)


def test_no_room_is_a_clear_error_before_allocating(area, monkeypatch):
    monkeypatch.setattr(area, '_free_bytes', lambda: 1 * MiB)
    with pytest.raises(exception.DriverError) as err:
        area.create(make_extent(size_mb=4))
    assert 'has 1 MiB free' in str(err.value)
    assert 'needs 4 MiB' in str(err.value)
    assert area.list() == []


def test_no_ram_is_a_clear_error(area, monkeypatch):
    monkeypatch.setattr(tmpfs, 'mem_available_bytes', lambda: 2 * MiB)
    with pytest.raises(exception.DriverError, match='MemAvailable'):
        area.create(make_extent(size_mb=4))


class FakeOps(object):
    """Privileged file operations that fail as asked."""

    def __init__(self, error=None, keep=False):
        self.error, self.keep = error, keep
        self.mounted = []

    def mount_tmpfs(self, path, size_mb):
        self.mounted.append((path, size_mb))
        return True

    def stat_extent_file(self, directory, name):
        return {'name': name, 'size': 1, 'allocated': 0} if self.keep else None

    def create_extent_file(self, directory, name, size, reserve):
        raise self.error

    def remove_extent_file(self, directory, name):
        return True

    def list_extent_files(self, directory, prefix):
        return []


def test_enospc_from_fallocate_is_explained(tmp_path, monkeypatch):
    area = tmpfs.TmpfsArea(path=str(tmp_path), require_tmpfs=False,
                           ops=FakeOps(priv_memory.MemoryNodeError(
                               priv_memory.ErrorCode.NO_SPACE, 'No space')))
    monkeypatch.setattr(tmpfs, 'mem_available_bytes', lambda: None)
    with pytest.raises(exception.DriverError) as err:
        area.create(make_extent(size_mb=1))
    assert 'cannot hold extent' in str(err.value)
    assert 'tmpfs_size_mb' in str(err.value)


def test_other_create_errors_are_wrapped(tmp_path):
    area = tmpfs.TmpfsArea(path=str(tmp_path), require_tmpfs=False,
                           ops=FakeOps(priv_memory.MemoryNodeError(
                               priv_memory.ErrorCode.NOT_PERMITTED,
                               'denied')))
    with pytest.raises(exception.DriverError, match='could not create'):
        area.create(make_extent(size_mb=1))


def test_failed_reservation_leaves_no_file(area, monkeypatch):
    def no_space(fd, offset, length):
        raise OSError(errno.ENOSPC, 'No space left on device')

    monkeypatch.setattr(priv_memory.os, 'posix_fallocate', no_space)
    monkeypatch.setattr(tmpfs, 'mem_available_bytes', lambda: None)
    with pytest.raises(exception.DriverError, match='cannot hold'):
        area.create(make_extent(size_mb=1))
    assert os.listdir(area.path) == []


def test_remove_is_idempotent_and_verified(area):
    extent = make_extent()
    path = area.create(extent)
    assert area.remove(extent) is True
    assert not os.path.exists(path)
    assert area.remove(extent) is False
    assert not area.exists(extent)


def test_remove_that_leaves_the_file_fails(tmp_path):
    area = tmpfs.TmpfsArea(path=str(tmp_path), require_tmpfs=False,
                           ops=FakeOps(keep=True))
    with pytest.raises(exception.DriverError, match='still there'):
        area.remove(make_extent())


def test_remove_without_area_is_a_no_op(tmp_path):
    area = tmpfs.TmpfsArea(path=str(tmp_path / 'absent'),
                           require_tmpfs=False, ops=FakeOps())
    assert area.remove(make_extent()) is False
    assert area.list() == []


def test_new_file_after_scrub_is_zero(area):
    extent = make_extent(size_mb=1)
    path = area.create(extent)
    with open(path, 'r+b') as f:
        f.write(b'\xab' * MiB)
    area.remove(extent)
    path = area.create(extent)
    with open(path, 'rb') as f:
        assert f.read() == b'\0' * MiB


def test_list_and_usage(area):
    one, two = make_extent(size_mb=1), make_extent(size_mb=2)
    area.create(one)
    area.create(two)
    with open(os.path.join(area.path, 'not-an-extent'), 'w') as f:
        f.write('x')
    listed = sorted(area.list(), key=lambda e: e['size_mb'])
    assert listed == [
        {'uuid': one['uuid'], 'size_mb': 1, 'allocated_mb': 1},
        {'uuid': two['uuid'], 'size_mb': 2, 'allocated_mb': 2}]
    usage = area.usage()
    assert usage['extents'] == 2
    assert usage['extent_mb'] == 3
    assert usage['allocated_mb'] == 3
    assert usage['overcommit'] is False
    assert usage['total_mb'] > 0
    assert usage['free_mb'] <= usage['total_mb']


def test_non_tmpfs_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(tmpfs, 'filesystem_type', lambda path: 'ext4')
    area = tmpfs.TmpfsArea(path=str(tmp_path), ops=FakeOps())
    with pytest.raises(exception.DriverError, match='not on a tmpfs'):
        area.ensure_ready()


def test_missing_directory_is_explained(tmp_path):
    area = tmpfs.TmpfsArea(path=str(tmp_path / 'nope'), ops=FakeOps(),
                           manage_mount=False)
    with pytest.raises(exception.DriverError, match='manage_mount'):
        area.ensure_ready()


def test_managed_mount(tmp_path, monkeypatch):
    monkeypatch.setattr(tmpfs, 'filesystem_type', lambda path: 'tmpfs')
    ops = FakeOps()
    area = tmpfs.TmpfsArea(path=str(tmp_path / 'm'), size_mb=512,
                           manage_mount=True, ops=ops)
    area.ensure_ready()
    area.ensure_ready()
    assert ops.mounted == [(str(tmp_path / 'm'), 512)]


@pytest.mark.skipif(not os.path.isdir('/dev/shm'), reason='no /dev/shm')
def test_dev_shm_is_accepted(privsep_in_process):
    with tempfile.TemporaryDirectory(dir='/dev/shm') as d:
        if tmpfs.filesystem_type(d) != 'tmpfs':
            pytest.skip('/dev/shm is not a tmpfs here')
        area = tmpfs.TmpfsArea(path=d)
        extent = make_extent(size_mb=1)
        area.create(extent)
        assert area.usage()['allocated_mb'] == 1
        area.remove(extent)


MOUNTINFO = """\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
30 22 0:25 / /dev/shm rw shared:2 - tmpfs tmpfs rw
31 22 0:26 / /var/lib/composable/memory rw - tmpfs composable-memory rw
32 22 0:27 / /mnt/with\\040space rw - tmpfs x rw
"""


@pytest.mark.parametrize('path,fstype', [
    ('/var/lib/composable/memory', 'tmpfs'),
    ('/var/lib/composable/memory/sub', 'tmpfs'),
    ('/var/lib/composable', 'ext4'),
    ('/var/lib/composable/memoryx', 'ext4'),
    ('/mnt/with space/a', 'tmpfs'),
    ('/dev/shm', 'tmpfs')])
def test_filesystem_type(tmp_path, path, fstype):
    info = tmp_path / 'mountinfo'
    info.write_text(MOUNTINFO)
    assert tmpfs.filesystem_type(path, mountinfo=str(info)) == fstype


def test_filesystem_type_unknown(tmp_path):
    assert tmpfs.filesystem_type('/x', str(tmp_path / 'absent')) is None


def test_mem_available(tmp_path):
    info = tmp_path / 'meminfo'
    info.write_text('MemTotal: 100 kB\nMemAvailable:  2048 kB\n')
    assert tmpfs.mem_available_bytes(str(info)) == 2 * MiB
    assert tmpfs.mem_available_bytes(str(tmp_path / 'absent')) is None


# ------------------------------------------------- privileged functions


@pytest.mark.parametrize('name', ['../etc/passwd', 'a/b', '', '.hidden',
                                  'x' * 300, 'extent-\n'])
def test_bad_names_are_refused(tmp_path, privsep_in_process, name):
    _refused(INVALID, priv_memory.create_extent_file, str(tmp_path), name,
             MiB)
    _refused(INVALID, priv_memory.remove_extent_file, str(tmp_path), name)


def test_relative_directory_is_refused(privsep_in_process):
    _refused(INVALID, priv_memory.create_extent_file, 'relative/dir',
             'extent-1', MiB)


def test_symlinks_are_not_followed(tmp_path, privsep_in_process):
    victim = tmp_path / 'victim'
    victim.write_text('keep me')
    area_dir = tmp_path / 'area'
    area_dir.mkdir()
    (area_dir / 'extent-1').symlink_to(victim)
    # The kernel's ELOOP (O_NOFOLLOW).
    assert 'Too many levels of symbolic links' in _refused(
        priv_memory.ErrorCode.OS_ERROR, priv_memory.create_extent_file,
        str(area_dir), 'extent-1', MiB)
    assert victim.read_text() == 'keep me'
    # Removing the link removes the link, not its target.
    assert priv_memory.remove_extent_file(str(area_dir), 'extent-1')
    assert victim.read_text() == 'keep me'
    # A symlinked area directory is refused.
    (tmp_path / 'link').symlink_to(area_dir)
    _refused(LINK_DIR, priv_memory.create_extent_file,
             str(tmp_path / 'link'), 'extent-2', MiB)


def test_size_must_be_positive(tmp_path, privsep_in_process):
    _refused(INVALID, priv_memory.create_extent_file, str(tmp_path),
             'extent-1', 0)


def test_list_skips_directories(tmp_path, privsep_in_process):
    (tmp_path / ('extent-' + str(uuid.uuid4()))).mkdir()
    assert priv_memory.list_extent_files(str(tmp_path), 'extent-') == []
    assert 'is a directory' in _refused(
        priv_memory.ErrorCode.WRONG_TYPE, priv_memory.remove_extent_file,
        str(tmp_path), os.listdir(tmp_path)[0])
