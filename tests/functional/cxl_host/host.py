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

"""A TCG guest standing in for a compute host wired to CXL memory.

QEMU 10 and a Linux 6.12 kernel from Debian's bookworm-backports,
unpacked by ``tools/cxl-host-prefix.sh`` into a private prefix (Debian
12's QEMU 7.2 and kernel 6.1 cannot make CXL RAM regions; the machine's
own QEMU and libvirt are not touched). QEMU runs directly, not under
libvirt: libvirt 9 has no CXL devices in its domain XML.

The machine: q35 with ``cxl=on``, one CXL host bridge (``pxb-cxl``)
with two root ports, a volatile CXL Type-3 memory device behind each
(``DEVICE_MIB`` each, serial numbers ``SERIALS``), one fixed memory
window over the bridge; ``-cpu qemu64,-hypervisor`` (TCG; ``/dev/kvm``
plays no part).

In the initramfs: busybox, the kernel's CXL and DAX modules (cxl_acpi,
cxl_pci, cxl_mem, device_dax, dax_cxl, kmem), the host's Python with the
standard library files the runner needs, ``composable/privsep/cxl.py``
and ``errors.py`` as they are in this tree and ``guest_runner.py``,
which serves that module's calls on the second serial port. The host side is
``CxlGuest.ops``: an object with the module's functions that run in the
guest, given to the agent's ``CxlHostMemory`` in place of the privsep
module, so the agent's own code drives the guest's real kernel.
"""

import contextlib
import gzip
import hashlib
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid

from composable.privsep import cxl as priv_cxl
from tests.functional.compute_host import image as host_image
from tests.functional.guest import build

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
CXL_MODULE = os.path.join(REPO, 'composable', 'privsep', 'cxl.py')
# Its error type's base (standard library only, as cxl.py).
ERRORS_MODULE = os.path.join(REPO, 'composable', 'privsep', 'errors.py')
RUNNER = os.path.join(HERE, 'guest_runner.py')
PREFIX_TOOL = os.path.join(REPO, 'tools', 'cxl-host-prefix.sh')
DEFAULT_PREFIX = '/var/tmp/composable-cxl-host'
PYTHON = host_image.PYTHON
MIB = 1 << 20
DEVICE_MIB = 512
SERIALS = (0x5a5a0001, 0x5a5a0002)
MEMORY_MIB = 512
# Load order: each after what it needs (the CXL core, port and region
# code are built in).
MODULES = ('cxl_acpi', 'cxl_pci', 'cxl_mem', 'device_dax', 'dax_cxl',
           'kmem')
MARKER = 'COMPOSABLE-CXL-HOST'
# Debian's kernel onlines hot-added memory by itself (into ZONE_NORMAL):
# the agent must re-online it movable, so the guest keeps that default.
# no_timer_check: see tests/functional/compute_host/image.py.
KERNEL_CMDLINE = ('console=ttyS0 loglevel=4 panic=-1 rdinit=/init '
                  'no_timer_check')

# A stand-in for composable/privsep/__init__.py in the guest: there the
# runner is root already, as the privsep daemon is on a host.
PRIVSEP_STAND_IN = '''
class _Context(object):
    def entrypoint(self, function):
        return function


sys_admin_pctxt = _Context()


def timeout_seconds(timeout, default):
    return default if timeout is None else float(timeout)
'''

INIT_SCRIPT = r'''#!/bin/sh
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
say() { echo "@MARKER@ $*"; }
for m in @MODULES@; do
    insmod /lib/modules/$m.ko || say module $m failed
done
# The memory devices probe asynchronously after insmod returns.
tries=0
until [ "$(ls -d /sys/bus/cxl/devices/endpoint* 2>/dev/null | wc -l)" \
        -ge @DEVICES@ ] || [ $tries -gt 600 ]; do
    tries=$((tries + 1))
    sleep 0.2
done
say memdevs $(ls /sys/bus/cxl/devices | grep '^mem' | tr '\n' ' ')
say booted
/usr/bin/python3.11 -I -S /opt/composable/guest_runner.py /dev/ttyS1
say runner-exited $?
poweroff -f
'''


class CxlHostUnavailable(build.GuestUnavailable):
    """The CXL host guest cannot be built or booted on this machine."""


def prefix_dir():
    return os.environ.get('COMPOSABLE_CXL_HOST_PREFIX', DEFAULT_PREFIX)


def find_prefix():
    """(qemu binary, data dirs, vmlinuz, modules dir) of the prefix."""
    prefix = prefix_dir()
    try:
        with open(os.path.join(prefix, 'complete')) as f:
            release = f.read().strip()
    except OSError:
        raise CxlHostUnavailable(
            'no QEMU 10 / Linux 6.12 prefix at %s: run %s (or set '
            'COMPOSABLE_CXL_HOST_PREFIX)' % (prefix, PREFIX_TOOL))
    root = os.path.join(prefix, 'root')
    return (os.path.join(root, 'usr', 'bin', 'qemu-system-x86_64'),
            [os.path.join(root, 'usr', 'share', 'qemu'),
             os.path.join(root, 'usr', 'share', 'seabios')],
            os.path.join(root, 'boot', 'vmlinuz-' + release),
            os.path.join(root, 'lib', 'modules', release))


def _stage(where):
    """The guest's /opt/composable, laid out under ``where``."""
    privsep = os.path.join(where, 'composable', 'privsep')
    os.makedirs(privsep)
    with open(os.path.join(where, 'composable', '__init__.py'), 'w'):
        pass
    with open(os.path.join(privsep, '__init__.py'), 'w') as f:
        f.write(PRIVSEP_STAND_IN)
    shutil.copy(CXL_MODULE, os.path.join(privsep, 'cxl.py'))
    shutil.copy(ERRORS_MODULE, os.path.join(privsep, 'errors.py'))
    shutil.copy(RUNNER, os.path.join(where, 'guest_runner.py'))


def _python_files():
    """The standard library files the runner loads with ``-I -S``."""
    with tempfile.TemporaryDirectory(prefix='composable-cxl-') as where:
        _stage(where)
        out = subprocess.run(
            [PYTHON, '-I', '-S', os.path.join(where, 'guest_runner.py'),
             '--probe'], check=True, capture_output=True, text=True,
            timeout=120).stdout
    stdlib = os.path.join(host_image.stdlib_dir(), '')
    return host_image.with_landmark(
        p for p in json.loads(out) if p.startswith(stdlib))


def _initramfs(moddir, python_files):
    tree = host_image.busybox_tree()
    host_image.add_python(tree, python_files)
    for name in MODULES:
        path = build._find_module(moddir, name)
        if path is None:
            raise CxlHostUnavailable('the kernel modules under %s lack %s'
                                     % (moddir, name))
        tree.file('lib/modules/%s.ko' % name, build._module_bytes(path))
    with tempfile.TemporaryDirectory(prefix='composable-cxl-') as where:
        _stage(where)
        for folder, _, names in os.walk(where):
            for name in names:
                source = os.path.join(folder, name)
                with open(source, 'rb') as f:
                    tree.file('opt/composable/' +
                              os.path.relpath(source, where), f.read())
    init = (INIT_SCRIPT.replace('@MARKER@', MARKER)
            .replace('@MODULES@', ' '.join(MODULES))
            .replace('@DEVICES@', str(len(SERIALS))))
    tree.file('init', init.encode(), 0o755)
    return gzip.compress(tree.archive.finish(), mtime=0)


def _cache_key(vmlinuz, python_files):
    digest = hashlib.sha256(b'cxl-host\0')
    digest.update(INIT_SCRIPT.encode() + PRIVSEP_STAND_IN.encode())
    for path in (CXL_MODULE, ERRORS_MODULE, RUNNER):
        with open(path, 'rb') as f:
            digest.update(f.read())
    for path in [vmlinuz, build.BUSYBOX, PYTHON] + list(python_files):
        st = os.stat(path)
        digest.update(('%s %d %d\n' % (path, st.st_size, st.st_mtime_ns))
                      .encode())
    return 'cxl-host-' + digest.hexdigest()[:16]


class Image(object):
    def __init__(self, qemu, data_dirs, kernel, initrd):
        self.qemu = qemu
        self.data_dirs = data_dirs
        self.kernel = kernel
        self.initrd = initrd


def build_image(cache=None):
    for binary, package in ((build.BUSYBOX, 'busybox-static'),
                            (PYTHON, 'python3.11-minimal')):
        if not os.access(binary, os.X_OK):
            raise CxlHostUnavailable('%s not found: install %s'
                                     % (binary, package))
    qemu, data_dirs, vmlinuz, moddir = find_prefix()
    python_files = _python_files()
    kernel, initrd = build.cached_image(
        cache or build.cache_dir(), _cache_key(vmlinuz, python_files),
        vmlinuz, lambda: _initramfs(moddir, python_files),
        stale='cxl-host-[0-9a-f]{16}')
    return Image(qemu, data_dirs, kernel, initrd)


def qemu_command(image, name, console_log, control_socket,
                 device_memory_dir=None):
    """QEMU's command line. With ``device_memory_dir`` the memory devices
    keep their bytes in files there, shared, so that a guest started
    again on the same directory finds them as the last one left them:
    a pooled device stays powered while its host restarts."""
    command = [image.qemu]
    for d in image.data_dirs:
        command += ['-L', d]
    command += [
        '-name', name, '-machine', 'q35,cxl=on', '-accel', 'tcg',
        '-cpu', 'qemu64,-hypervisor', '-smp', '1',
        '-m', '%dM,maxmem=%dM,slots=4' % (MEMORY_MIB, 4 * MEMORY_MIB +
                                          len(SERIALS) * DEVICE_MIB),
        '-display', 'none', '-monitor', 'none', '-no-reboot',
        '-kernel', image.kernel, '-initrd', image.initrd,
        '-append', KERNEL_CMDLINE,
        '-serial', 'file:%s' % console_log,
        '-serial', 'unix:%s,server=on,wait=off' % control_socket,
        '-device', 'pxb-cxl,bus_nr=12,bus=pcie.0,id=cxl.1']
    for i, serial in enumerate(SERIALS):
        if device_memory_dir:
            backend = ('memory-backend-file,id=cxlmem%d,size=%dM,share=on,'
                       'mem-path=%s' % (i, DEVICE_MIB, os.path.join(
                           device_memory_dir, 'cxl-device-%d' % i)))
        else:
            backend = 'memory-backend-ram,id=cxlmem%d,size=%dM' % (
                i, DEVICE_MIB)
        command += [
            '-object', backend,
            '-device', 'cxl-rp,port=%d,bus=cxl.1,id=cxlrp%d,chassis=0,'
            'slot=%d' % (i, i, i + 2),
            '-device', 'cxl-type3,bus=cxlrp%d,volatile-memdev=cxlmem%d,'
            'id=cxl-mem%d,sn=%d' % (i, i, i, serial)]
    command += ['-machine', 'cxl-fmw.0.targets.0=cxl.1,cxl-fmw.0.size=4G']
    return command


class GuestCallFailed(Exception):
    pass


class GuestOps(object):
    """``composable.privsep.cxl`` as the agent uses it, each function run
    in the guest. Constants are the module's own."""

    def __init__(self, guest):
        self._guest = guest

    def __getattr__(self, name):
        value = getattr(priv_cxl, name)
        if not callable(value):
            return value

        def call(*args):
            return self._guest.call(name, *args)
        call.__name__ = name
        return call


class CxlGuest(object):
    """The running guest; ``call(name, *args)`` runs one function of the
    module (or of the runner) in it."""

    def __init__(self, process, sock, console_log, run_dir):
        self.process = process
        self.sock = sock
        self.console_log = console_log
        self.run_dir = run_dir
        self.ops = GuestOps(self)
        self._buffer = b''
        self._next = 0
        self.boot_seconds = None

    def _line(self, deadline):
        while b'\n' not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError('the CXL host guest did not answer; its '
                                   'console:\n%s' % self.console()[-3000:])
            self.sock.settimeout(min(left, 5))
            try:
                chunk = self.sock.recv(65536)
            except socket.timeout:
                continue
            if not chunk:
                raise ConnectionError('the CXL host guest went away; its '
                                      'console:\n%s' % self.console()[-3000:])
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b'\n', 1)
        return json.loads(line)

    def wait_ready(self, timeout):
        deadline = time.monotonic() + timeout
        while True:
            message = self._line(deadline)
            if message.get('ready'):
                return

    def call(self, name, *args, timeout=300):
        self._next += 1
        self.sock.sendall((json.dumps({'id': self._next, 'call': name,
                                       'args': list(args)}) + '\n').encode())
        deadline = time.monotonic() + timeout
        while True:
            answer = self._line(deadline)
            if answer.get('id') == self._next:
                break
        if 'error' in answer:
            error = answer['error']
            if error.get('code') is not None:
                # The module's own error: its code, as the privsep
                # client raises it on a host.
                raise priv_cxl.CxlError(error['code'], error['message'])
            if error['type'] == 'OSError':
                raise OSError(error['errno'], error['message'])
            if error['type'] == 'ValueError':
                raise ValueError(error['message'])
            raise GuestCallFailed('%s: %s' % (error['type'],
                                              error['message']))
        return answer['result']

    def console(self):
        try:
            with open(self.console_log, errors='replace') as f:
                return f.read()
        except OSError:
            return ''

    def stop(self):
        try:
            self.sock.close()
        finally:
            if self.process.poll() is None:
                self.process.kill()
            self.process.wait(timeout=60)


@contextlib.contextmanager
def running_guest(image=None, boot_timeout=300, device_memory_dir=None):
    """Start the CXL host guest, wait until its runner answers, yield a
    CxlGuest; QEMU is killed afterwards, whatever happened. See
    qemu_command for ``device_memory_dir``."""
    image = image or build_image()
    from tests.functional import leftovers
    name = 'composable-test-%s-cxlhost-%s' % (leftovers.run_tag(),
                                              uuid.uuid4().hex[:6])
    run_dir = tempfile.mkdtemp(prefix='run-%s-' % name,
                               dir=build.cache_dir())
    console_log = os.path.join(run_dir, 'console.log')
    control = os.path.join(run_dir, 'control.sock')
    started = time.monotonic()
    with open(os.path.join(run_dir, 'qemu.log'), 'wb') as qemu_log:
        process = subprocess.Popen(
            qemu_command(image, name, console_log, control,
                         device_memory_dir),
            stdin=subprocess.DEVNULL, stdout=qemu_log, stderr=qemu_log)
    guest = None
    try:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        deadline = started + boot_timeout
        while True:
            if process.poll() is not None:
                with open(os.path.join(run_dir, 'qemu.log'),
                          errors='replace') as f:
                    raise CxlHostUnavailable(
                        'QEMU ended (status %s): %s' % (process.returncode,
                                                        f.read()[-2000:]))
            try:
                sock.connect(control)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise TimeoutError('QEMU made no control socket')
                time.sleep(0.1)
        guest = CxlGuest(process, sock, console_log, run_dir)
        guest.wait_ready(max(1, deadline - time.monotonic()))
        guest.boot_seconds = time.monotonic() - started
        yield guest
    finally:
        if guest is not None:
            guest.stop()
        elif process.poll() is None:
            process.kill()
            process.wait(timeout=60)
        if not os.environ.get('COMPOSABLE_KEEP_GUEST_LOGS'):
            shutil.rmtree(run_dir, ignore_errors=True)
