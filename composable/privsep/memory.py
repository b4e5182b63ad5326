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

"""Privileged functions of a memory node.

Each function does one narrow thing as root: run ``tgtadm`` (never through
a shell), mount the tmpfs area, create, list and remove extent files in
it. Callers pass the directory and a plain file name; a name with a path
separator, or a symlink in place of a file, is refused.

CHAP passwords reach ``tgtadm`` only as arguments; every command that is
logged, or that appears in an error, has the value after ``--password``
masked.

The ``@entrypoint`` functions fail with one error type each, with a code
(composable.privsep.errors.ErrorCode) the callers decide by: the tmpfs
and extent file ones with MemoryNodeError (NO_SPACE when the area cannot
hold a file's pages, EXISTS for a file of another size, ...), the LIO
ones with composable.privsep.lio.LioError, the tgt ones (a whole export
or unexport, one call each) with composable.privsep.tgt.TgtError.
"""

import os
import re
import stat
import subprocess

from oslo_log import log as logging

from composable import privsep
from composable.privsep import errors
from composable.privsep import lio as priv_lio
from composable.privsep import tgt as priv_tgt

LOG = logging.getLogger(__name__)

MASK = priv_tgt.MASK
SECRET_FLAGS = priv_tgt.SECRET_FLAGS
TGTADM = 'tgtadm'
TGTADM_TIMEOUT = 60
MOUNT_TIMEOUT = 60

_NAME = re.compile(r'[A-Za-z0-9][A-Za-z0-9._-]{0,200}')


class MemoryNodeError(errors.PrivilegedError):
    """A privileged tmpfs or extent file function failed: ``code`` (an
    ErrorCode) says why, ``message`` in words."""


ErrorCode = errors.ErrorCode
_typed = errors.typed(MemoryNodeError)
_lio_typed = errors.typed(priv_lio.LioError)
_tgt_typed = errors.typed(priv_tgt.TgtError)


masked_command = priv_tgt.masked_command


def _check_args(args):
    if not isinstance(args, (list, tuple)) or not all(
            isinstance(a, str) for a in args):
        raise TypeError('tgtadm arguments must be a list of strings')


@privsep.sys_admin_pctxt.entrypoint
@_typed
def tgtadm(args):
    """Run ``tgtadm *args``; return ``(exit_code, stdout, stderr)``.

    A failing tgtadm is not an exception: the caller knows which failures
    ("this target already exists", "can't find the target") are expected.
    """
    _check_args(args)
    return _run_tgtadm(args)


def _run_tgtadm(args):
    return _run([TGTADM] + list(args), TGTADM_TIMEOUT)


@privsep.sys_admin_pctxt.entrypoint
@_tgt_typed
def tgt_export(lld, iqn, path, initiator_iqn, user, password, absent=()):
    """Export ``path`` as LUN 1 of target ``iqn`` to ``initiator_iqn``
    under the CHAP account ``user``: the whole tgtadm sequence of
    composable.privsep.tgt.TgtConfig.export in this one call, with its
    rollback. ``absent``: the drivers tgtd last said it lacks.

    Returns the tid, whether the target was created now, the drivers
    tgtd lacks and the commands run (masked); fails with TgtError, whose
    message has the password masked.
    """
    return priv_tgt.export(_run_tgtadm, absent, lld, iqn, path,
                           initiator_iqn, user, password)


@privsep.sys_admin_pctxt.entrypoint
@_tgt_typed
def tgt_unexport(lld, iqn, user=None, absent=()):
    """Delete target ``iqn`` and its accounts (TgtConfig.unexport) in one
    call; the number of targets deleted and the drivers tgtd lacks."""
    return priv_tgt.unexport(_run_tgtadm, absent, lld, iqn, user)


@privsep.sys_admin_pctxt.entrypoint
@_tgt_typed
def tgt_targets(lld, absent=(), every=True):
    """tgtd's targets over every driver it has (TgtConfig.targets) and
    the drivers it lacks."""
    return priv_tgt.targets(_run_tgtadm, absent, lld, every=every)


def _run(argv, timeout):
    shown = masked_command(argv)
    try:
        proc = subprocess.run(argv, stdin=subprocess.DEVNULL,
                              capture_output=True, text=True,
                              timeout=timeout, shell=False, check=False)
    except FileNotFoundError:
        return 127, '', '%s: command not found' % argv[0]
    except subprocess.TimeoutExpired:
        LOG.warning('%(cmd)s did not finish within %(t)s seconds',
                    {'cmd': shown, 't': timeout})
        return 124, '', '%s timed out after %s seconds' % (argv[0], timeout)
    LOG.debug('Ran %(cmd)s: exit %(rc)s',
              {'cmd': shown, 'rc': proc.returncode})
    return proc.returncode, proc.stdout, proc.stderr


def _check_dir(directory):
    if not isinstance(directory, str) or not os.path.isabs(directory):
        raise ValueError('%r is not an absolute directory path' %
                         (directory,))


def _check_name(name):
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValueError('%r is not a valid extent file name' % (name,))


def _open_dir(directory):
    _check_dir(directory)
    return os.open(directory,
                   os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW |
                   os.O_CLOEXEC)


def _stat_dict(name, st):
    return {'name': name, 'size': st.st_size,
            'allocated': st.st_blocks * 512}


@privsep.sys_admin_pctxt.entrypoint
@_typed
def mount_tmpfs(path, size_mb):
    """Mount a tmpfs of ``size_mb`` MiB (0: the kernel's default) on
    ``path`` unless one is already there. Returns True if it mounted."""
    _check_dir(path)
    size_mb = int(size_mb)
    if size_mb < 0:
        raise ValueError('tmpfs size must not be negative')
    os.makedirs(path, mode=0o700, exist_ok=True)
    if os.path.ismount(path):
        return False
    options = 'mode=0700'
    if size_mb:
        options += ',size=%dm' % size_mb
    rc, _out, err = _run(['mount', '-t', 'tmpfs', '-o', options,
                          'composable-memory', path], MOUNT_TIMEOUT)
    if rc != 0:
        raise MemoryNodeError(ErrorCode.REFUSED,
                              'mount of a tmpfs on %s failed (exit %s): '
                              '%s' % (path, rc, err.strip()))
    return True


@privsep.sys_admin_pctxt.entrypoint
@_typed
def create_extent_file(directory, name, size_bytes, reserve=True):
    """Create (or find) the extent file ``directory/name`` of exactly
    ``size_bytes``.

    ``reserve``: allocate every page now (posix_fallocate), failing with
    ENOSPC when the area does not have them; otherwise a sparse file.
    An existing file keeps its contents (fallocate only fills holes); one
    of another size is refused, and one whose every page is already
    allocated (a bind after an unbind) is not passed to fallocate again,
    which would walk each of its pages for nothing. Returns the file's
    stat dict and whether it was created.
    """
    _check_name(name)
    size_bytes = int(size_bytes)
    if size_bytes <= 0:
        raise ValueError('extent size must be positive')
    dfd = _open_dir(directory)
    try:
        created = False
        flags = os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = os.open(name, flags, dir_fd=dfd)
        except FileNotFoundError:
            fd = os.open(name, flags | os.O_CREAT | os.O_EXCL, 0o600,
                         dir_fd=dfd)
            created = True
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise MemoryNodeError(ErrorCode.WRONG_TYPE,
                                      '%s/%s is not a regular file' %
                                      (directory, name))
            if not created and st.st_size != size_bytes:
                raise MemoryNodeError(ErrorCode.EXISTS,
                                      '%s/%s exists with %d bytes, not %d' %
                                      (directory, name, st.st_size,
                                       size_bytes))
            try:
                if reserve and (created or
                                st.st_blocks * 512 < size_bytes):
                    os.posix_fallocate(fd, 0, size_bytes)
                else:
                    os.ftruncate(fd, size_bytes)
            except OSError:
                if created:
                    os.unlink(name, dir_fd=dfd)
                raise
            st = os.fstat(fd)
        finally:
            os.close(fd)
    finally:
        os.close(dfd)
    return {'file': _stat_dict(name, st), 'created': created}


@privsep.sys_admin_pctxt.entrypoint
@_typed
def remove_extent_file(directory, name):
    """Remove ``directory/name``; True if it was there. tmpfs frees the
    pages as soon as nobody holds the file open."""
    _check_name(name)
    dfd = _open_dir(directory)
    try:
        try:
            st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
        except FileNotFoundError:
            return False
        if stat.S_ISDIR(st.st_mode):
            raise MemoryNodeError(ErrorCode.WRONG_TYPE,
                                  '%s/%s is a directory' % (directory, name))
        try:
            os.unlink(name, dir_fd=dfd)
        except FileNotFoundError:
            return False
        return True
    finally:
        os.close(dfd)


@privsep.sys_admin_pctxt.entrypoint
@_typed
def stat_extent_file(directory, name):
    """The stat dict of ``directory/name``, or None if it is absent."""
    _check_name(name)
    dfd = _open_dir(directory)
    try:
        try:
            st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
        except FileNotFoundError:
            return None
        return _stat_dict(name, st)
    finally:
        os.close(dfd)


@privsep.sys_admin_pctxt.entrypoint
@_typed
def list_extent_files(directory, prefix):
    """Stat dicts of the regular files in ``directory`` whose names start
    with ``prefix``."""
    dfd = _open_dir(directory)
    try:
        found = []
        for name in sorted(os.listdir(dfd)):
            if not name.startswith(prefix) or not _NAME.fullmatch(name):
                continue
            try:
                st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
            except FileNotFoundError:
                continue
            if stat.S_ISREG(st.st_mode):
                found.append(_stat_dict(name, st))
        return found
    finally:
        os.close(dfd)


def _lio(call, *args):
    """``call(LioConfig over rtslib_fb, *args)``: a method of
    composable.privsep.lio.LioConfig; LioError for any failure."""
    rtslib = priv_lio.load_rtslib()
    try:
        return call(priv_lio.LioConfig(rtslib), *args)
    except rtslib.RTSLibError as exc:
        # rtslib's exceptions may not exist on the other side of the
        # privsep channel, and their text never carries CHAP secrets.
        raise priv_lio.LioError(ErrorCode.REFUSED, 'LIO: %s' % exc)


@privsep.sys_admin_pctxt.entrypoint
@_lio_typed
def lio_export(iqn, path, size_bytes, initiator_iqn, user, password, ip,
               port, iser):
    """Create or update the LIO target of an extent (see
    composable.privsep.lio.LioConfig.export)."""
    _lio(priv_lio.LioConfig.export, iqn, path, size_bytes, initiator_iqn,
         user, password, ip, port, iser)


@privsep.sys_admin_pctxt.entrypoint
@_lio_typed
def lio_unexport(iqn):
    """Remove the LIO target and backstore of an extent."""
    return _lio(priv_lio.LioConfig.unexport, iqn)


@privsep.sys_admin_pctxt.entrypoint
@_lio_typed
def lio_holders(path):
    """Names of the LIO backstores serving ``path``."""
    return _lio(priv_lio.LioConfig.holders, path)


@privsep.sys_admin_pctxt.entrypoint
@_lio_typed
def lio_target_names():
    """The IQNs of every LIO iSCSI target."""
    return _lio(priv_lio.LioConfig.target_names)
