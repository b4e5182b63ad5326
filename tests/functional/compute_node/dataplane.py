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

"""Real data-plane pieces for the compute-node tests: libvirtd and a
private tgtd.

The tests start a tgtd of their own (its own management socket, ``-C``,
and its own portal on 127.0.0.1), so they never touch a tgtd that
something else on the machine runs. Targets are set up directly with
tgtadm: a LUN backed by a file on tmpfs, restricted by initiator name and
CHAP, as a memory node's tgt exporter does.

Whatever cannot run here makes the tests skip with the reason, or fail
when COMPOSABLE_REQUIRE_DATAPLANE=1 (the CI machine).
"""

import os
import shutil
import socket
import subprocess
import time
import uuid

import pytest

LIBVIRT_URI = os.environ.get('COMPOSABLE_TEST_LIBVIRT_URI', 'qemu:///system')
TMPFS_DIR = '/dev/shm'
MiB = 1024 * 1024


def required():
    return os.environ.get('COMPOSABLE_REQUIRE_DATAPLANE') == '1'


def unavailable(reason):
    """Skip, or fail on a machine that must run the data plane."""
    if required():
        pytest.fail('COMPOSABLE_REQUIRE_DATAPLANE=1 but %s' % reason)
    pytest.skip(reason)


def _run(*cmd, check=True, timeout=30):
    return subprocess.run(cmd, check=check, capture_output=True, text=True,
                          timeout=timeout)


def _pid_of(name):
    out = _run('pgrep', '-x', name, check=False).stdout.split()
    return int(out[0]) if out else None


def libvirt_connection():
    """An open connection to the system libvirtd, started if need be.

    libvirtd (and virtlogd) started here are left running: other tests
    and services on the machine may use them.
    """
    try:
        import libvirt
    except ImportError:
        unavailable('the libvirt Python binding is not installed '
                    '(pip install libvirt-python)')
    if not shutil.which('qemu-system-x86_64'):
        unavailable('qemu-system-x86_64 is not installed')

    errors = []
    libvirt.registerErrorHandler(lambda ctx, err: None, None)

    def _open():
        try:
            return libvirt.open(LIBVIRT_URI)
        except libvirt.libvirtError as exc:
            errors.append(str(exc))
            return None

    conn = _open()
    if conn is None:
        started = False
        for daemon in ('virtlogd', 'libvirtd'):
            binary = shutil.which(daemon) or '/usr/sbin/' + daemon
            if _pid_of(daemon) is None and os.path.exists(binary):
                _run(binary, '-d', check=False)
                started = True
        deadline = time.monotonic() + (20 if started else 0)
        while conn is None and time.monotonic() < deadline:
            time.sleep(0.5)
            conn = _open()
    if conn is None:
        unavailable('libvirtd does not answer at %s and could not be '
                    'started (%s)' % (LIBVIRT_URI, errors[-1]))
    return conn


def _free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def _free_control_port():
    used = set(os.listdir('/var/run/tgtd')) if os.path.isdir(
        '/var/run/tgtd') else set()
    for port in range(3300, 3400):
        if 'socket.%d' % port not in used:
            return port
    raise RuntimeError('no free tgtd control port')


class TgtDaemon(object):
    """A private tgtd: ``tgtd -f -C N --iscsi portal=127.0.0.1:P``."""

    def __init__(self):
        if not shutil.which('tgtd') or not shutil.which('tgtadm'):
            unavailable('tgtd/tgtadm are not installed (package tgt)')
        self.control_port = _free_control_port()
        self.port = _free_port()
        self.portal = '127.0.0.1:%d' % self.port
        self._next_tid = 1
        self.log_path = '/tmp/composable-test-tgtd-%d.log' % self.port
        self._log = open(self.log_path, 'wb')
        self.proc = subprocess.Popen(
            ['tgtd', '-f', '-C', str(self.control_port),
             '--iscsi', 'portal=%s' % self.portal],
            stdout=self._log, stderr=subprocess.STDOUT)
        self.files = []
        deadline = time.monotonic() + 15
        while True:
            if self.proc.poll() is not None:
                self._log.close()
                with open(self.log_path) as f:
                    unavailable('tgtd exited at start: %s' % f.read()[-500:])
            ok = self.tgtadm('--op', 'show', '--mode', 'target',
                             check=False).returncode == 0
            if ok and self._listening():
                break
            if time.monotonic() > deadline:
                self.stop()
                unavailable('tgtd did not start listening on %s'
                            % self.portal)
            time.sleep(0.2)

    def _listening(self):
        with socket.socket() as s:
            s.settimeout(1)
            return s.connect_ex(('127.0.0.1', self.port)) == 0

    def tgtadm(self, *args, check=True):
        result = _run('tgtadm', '-C', str(self.control_port), '--lld',
                      'iscsi', *args, check=False)
        if check and result.returncode:
            raise RuntimeError('tgtadm %s failed (%d): %s' % (
                ' '.join(args), result.returncode, result.stderr.strip()))
        return result

    def export(self, size_mb, initiator_iqn, chap_username, chap_secret):
        """A target with one tmpfs-backed LUN (lun 1), restricted to the
        initiator name and the CHAP account. Returns (target_iqn, lun)."""
        tid = self._next_tid
        self._next_tid += 1
        target_iqn = ('iqn.2010-10.org.openstack.composable.test:'
                      'extent-%s' % uuid.uuid4().hex[:12])
        backing = os.path.join(TMPFS_DIR, 'composable-test-%s.img'
                               % uuid.uuid4().hex[:12])
        with open(backing, 'wb') as f:
            f.truncate(size_mb * MiB)
        self.files.append(backing)
        self.tgtadm('--op', 'new', '--mode', 'target', '--tid', str(tid),
                    '-T', target_iqn)
        self.tgtadm('--op', 'new', '--mode', 'logicalunit', '--tid',
                    str(tid), '--lun', '1', '-b', backing)
        # Initiator NAME ACL (-I would be an address ACL).
        self.tgtadm('--op', 'bind', '--mode', 'target', '--tid', str(tid),
                    '--initiator-name', initiator_iqn)
        if chap_username:
            self.tgtadm('--op', 'new', '--mode', 'account', '--user',
                        chap_username, '--password', chap_secret)
            self.tgtadm('--op', 'bind', '--mode', 'account', '--tid',
                        str(tid), '--user', chap_username)
        return target_iqn, 1

    def stop(self):
        if self.proc.poll() is None:
            # tgtd refuses to stop while it has targets.
            for tid in range(1, self._next_tid):
                self.tgtadm('--op', 'delete', '--mode', 'target', '--force',
                            '--tid', str(tid), check=False)
            self.tgtadm('--op', 'delete', '--mode', 'system', check=False)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self._log.close()
        for path in self.files + [self.log_path]:
            try:
                os.unlink(path)
            except OSError:
                pass


def domblklist(domain_uuid):
    """Target devs of the live domain, as virsh lists them."""
    out = _run('virsh', '-c', LIBVIRT_URI, 'domblklist', domain_uuid).stdout
    devs = []
    for line in out.splitlines()[2:]:
        parts = line.split()
        if parts:
            devs.append(parts[0])
    return devs


def secret_usages():
    """The usage ids of the libvirt secrets, as virsh lists them
    ("iscsi composable-extent-<uuid>" for an extent)."""
    out = _run('virsh', '-c', LIBVIRT_URI, 'secret-list').stdout
    usages = []
    for line in out.splitlines()[2:]:
        parts = line.split(None, 1)
        if len(parts) == 2:
            usages.append(parts[1].strip())
    return usages


def running_tiny_guest(conn, **kwargs):
    """Generator for module fixtures: the tiny guest the tests build,
    running under libvirt (TCG), destroyed afterwards; ``kwargs`` go to
    build.running_guest. Skips (or fails) where it cannot run."""
    from tests.functional.guest import build
    import libvirt
    try:
        image = build.build()
    except build.GuestUnavailable as exc:
        unavailable(str(exc))
    guest_cm = build.running_guest(conn, image=image, **kwargs)
    try:
        running = guest_cm.__enter__()
    except libvirt.libvirtError as exc:
        unavailable('QEMU (TCG) could not start the tiny guest: %s' % exc)
    try:
        yield running
    finally:
        guest_cm.__exit__(None, None, None)
