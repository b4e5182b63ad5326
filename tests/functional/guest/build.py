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

"""A tiny guest for the data-plane tests, and a helper to boot it.

The guest is the host's Debian cloud kernel plus an initramfs built here
from busybox-static, the kernel's virtio modules and the host's QEMU guest
agent (Debian's qemu-guest-agent, with the shared libraries it needs);
nothing is downloaded. Its ``/init`` mounts proc, sys and dev, loads the
virtio modules (virtio_ring -> virtio -> virtio_pci_modern_dev /
virtio_pci_legacy_dev -> virtio_pci -> virtio_blk, virtio_console),
starts ``qemu-ga`` on the domain's ``org.qemu.guest_agent.0`` port when
the domain has one (``agent=True``, the default), prints ``booted`` on
the serial console and then, once a second, prints the virtio disks it
sees with their sizes in bytes. A disk that appears is made swap
(``mkswap`` + ``swapon``; not with ``autoswap=False``, the kernel
argument ``composable_autoswap=0``, where the composable agent does it
through the guest agent) and ``/proc/swaps`` is printed; a disk that
goes away is reported too. Every line the guest prints starts with
``MARKER`` so a test can read the serial log (a plain file: the domain
has ``<serial type='file'>``) and assert on what the guest saw::

    COMPOSABLE-GUEST agent vport1p1
    COMPOSABLE-GUEST booted
    COMPOSABLE-GUEST new-disk vda bytes=67108864 serial=4c98a3b0dfe44cb7a067
    COMPOSABLE-GUEST swap-on vda ok
    COMPOSABLE-GUEST swaps /dev/vda partition 65532 0 -2
    COMPOSABLE-GUEST disks vda=67108864
    COMPOSABLE-GUEST disk-gone vda

The guest has no disk of its own, and it names virtio disks in the order
they appear (vda, vdb...), whatever target dev libvirt was given: match a
disk by its serial.

Built images are cached under ``$COMPOSABLE_GUEST_CACHE`` (default
``/var/tmp/composable-guest``), keyed by the kernel, busybox and the init
script. The cache directory and the files in it are world-readable on
purpose: QEMU runs as an unprivileged user under the system libvirtd.

Run ``python -m tests.functional.guest.build`` to build (or find) the
image and print its paths.
"""

import contextlib
import glob
import gzip
import hashlib
import io
import lzma
import os
import re
import shutil
import stat
import subprocess
import tempfile
import time
import uuid

MARKER = 'COMPOSABLE-GUEST'
BOOT_MARKER = MARKER + ' booted'
DEFAULT_CACHE = '/var/tmp/composable-guest'
BUSYBOX = '/bin/busybox'
QEMU_GA = '/usr/sbin/qemu-ga'
AGENT_PORT = 'org.qemu.guest_agent.0'
# Load order matters: a module is loaded after the ones it depends on.
# The *_dev modules only exist in newer kernels; missing ones are skipped.
VIRTIO_MODULES = ('virtio_ring', 'virtio', 'virtio_pci_modern_dev',
                  'virtio_pci_legacy_dev', 'virtio_pci', 'virtio_blk',
                  'virtio_console')
KERNEL_CMDLINE = 'console=ttyS0 loglevel=4 panic=-1 rdinit=/init'

INIT_SCRIPT = r'''#!/bin/sh
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
say() { echo "@MARKER@ $*"; }
say init
for m in @MODULES@; do
    if [ ! -f /lib/modules/$m.ko ]; then
        say module $m absent
    elif insmod /lib/modules/$m.ko; then
        say module $m loaded
    else
        say module $m failed
    fi
done
agent_port() {
    for p in /sys/class/virtio-ports/*; do
        [ "$(cat $p/name 2>/dev/null)" = @AGENT_PORT@ ] || continue
        [ -e /dev/${p##*/} ] && echo ${p##*/} && return 0
    done
    return 1
}
# The agent port appears once virtio_console has probed the device,
# which may be after insmod returns (slowly, under TCG on a busy host):
# wait for it when the domain has one (composable_agent=1).
case " $(cat /proc/cmdline) " in
*" composable_agent=1 "*)
    tries=0
    until port=$(agent_port); do
        tries=$((tries + 1))
        if [ $tries -gt 600 ]; then
            say agent-missing
            break
        fi
        sleep 0.2
    done
    if [ -n "$port" ]; then
        qemu-ga -m virtio-serial -p /dev/$port -t /tmp \
            -f /tmp/qemu-ga.pid -l /tmp/qemu-ga.log &
        say agent $port
    fi
    ;;
esac
# New disks become swap here unless the agent does it through the
# guest agent (composable_autoswap=0).
autoswap=1
case " $(cat /proc/cmdline) " in
*" composable_autoswap=0 "*) autoswap=0 ;;
esac
is_swap() { grep -q "^/dev/$1 " /proc/swaps; }
say booted
known=""
while true; do
    now=""
    line=""
    for d in /sys/block/vd*; do
        n=${d##*/}
        # A disk unplugged between the listing and the read leaves no
        # size: skip it. (An empty operand would be an arithmetic error,
        # which ends this shell, the guest's init, and so the guest.)
        size=$(cat $d/size 2>/dev/null)
        case "$size" in ''|*[!0-9]*) continue ;; esac
        bytes=$((size * 512))
        now="$now $n"
        line="$line $n=$bytes"
        case " $known " in
        *" $n "*) ;;
        *)
            serial=$(cat $d/serial 2>/dev/null)
            say new-disk $n bytes=$bytes serial=$serial
            if [ $autoswap = 1 ]; then
                # The agent may make the disk swap at the same moment.
                if is_swap $n || { mkswap /dev/$n >/dev/null 2>&1 &&
                        swapon /dev/$n 2>/dev/null; } || is_swap $n; then
                    say swap-on $n ok
                else
                    say swap-on $n failed
                fi
            fi
            tail -n +2 /proc/swaps | while read -r l; do say swaps $l; done
            ;;
        esac
    done
    for n in $known; do
        case " $now " in
        *" $n "*) ;;
        *)
            say disk-gone $n
            tail -n +2 /proc/swaps | while read -r l; do say swaps $l; done
            ;;
        esac
    done
    known="$now"
    say disks$line
    sleep 1
done
'''


class GuestImage(object):
    def __init__(self, kernel, initrd, cmdline=KERNEL_CMDLINE):
        self.kernel = kernel
        self.initrd = initrd
        self.cmdline = cmdline

    def __repr__(self):
        return 'GuestImage(kernel=%r, initrd=%r)' % (self.kernel,
                                                     self.initrd)


class GuestUnavailable(Exception):
    """The tiny guest cannot be built or booted on this machine."""


def find_kernel():
    """(vmlinuz path, modules dir) of the newest installed cloud kernel."""
    kernels = sorted(glob.glob('/boot/vmlinuz-*-cloud-amd64'))
    for vmlinuz in reversed(kernels):
        release = os.path.basename(vmlinuz)[len('vmlinuz-'):]
        moddir = os.path.join('/lib/modules', release)
        if os.path.isdir(moddir):
            return vmlinuz, moddir
    raise GuestUnavailable(
        'no Debian cloud kernel with modules found (/boot/vmlinuz-*-cloud-'
        'amd64 and /lib/modules/<release>); install linux-image-cloud-amd64')


def _find_module(moddir, name):
    for suffix in ('.ko', '.ko.xz', '.ko.zst', '.ko.gz'):
        found = glob.glob(os.path.join(moddir, 'kernel', '**',
                                       name + suffix), recursive=True)
        if found:
            return found[0]
    return None


def _module_bytes(path):
    """The plain .ko contents: busybox insmod reads no compressed ones."""
    if path.endswith('.xz'):
        with lzma.open(path) as f:
            return f.read()
    if path.endswith('.gz'):
        with gzip.open(path) as f:
            return f.read()
    if path.endswith('.zst'):
        return subprocess.run(['zstd', '-d', '-c', '-q', path],
                              check=True, capture_output=True).stdout
    with open(path, 'rb') as f:
        return f.read()


class _Cpio(object):
    """A minimal writer of the "newc" cpio format the kernel unpacks."""

    def __init__(self):
        self._buf = io.BytesIO()
        self._ino = 1

    def _entry(self, name, mode, data=b'', rdev=(0, 0)):
        name_b = name.encode() + b'\0'
        fields = (self._ino, mode, 0, 0, 1, 0, len(data), 0, 0,
                  rdev[0], rdev[1], len(name_b), 0)
        self._ino += 1
        header = b'070701' + b''.join(b'%08X' % f for f in fields)
        self._buf.write(header + name_b)
        self._pad()
        self._buf.write(data)
        self._pad()

    def _pad(self):
        self._buf.write(b'\0' * (-self._buf.tell() % 4))

    def directory(self, name):
        self._entry(name, stat.S_IFDIR | 0o755)

    def file(self, name, data, perm=0o644):
        self._entry(name, stat.S_IFREG | perm, data)

    def symlink(self, name, target):
        self._entry(name, stat.S_IFLNK | 0o777, target.encode())

    def chardev(self, name, major, minor):
        self._entry(name, stat.S_IFCHR | 0o600, rdev=(major, minor))

    def finish(self):
        self._entry('TRAILER!!!', 0)
        return self._buf.getvalue()


def _init_script(modules):
    return (INIT_SCRIPT.replace('@MARKER@', MARKER)
            .replace('@MODULES@', ' '.join(modules))
            .replace('@AGENT_PORT@', AGENT_PORT))


def _shared_libraries(binary):
    """The absolute paths ldd gives for what ``binary`` loads (the
    dynamic loader included)."""
    out = subprocess.run(['ldd', binary], check=True, capture_output=True,
                         text=True).stdout
    return [m.group(1) for m in re.finditer(r'(/\S+) \(0x', out)]


def _initramfs(moddir, extra_modules=()):
    """gzip'ed newc cpio: busybox, /init, the virtio modules (and
    ``extra_modules``, loaded after them), qemu-ga and its libraries."""
    archive = _Cpio()
    made = set()
    for d in ('bin', 'dev', 'proc', 'sys', 'lib', 'lib/modules', 'tmp'):
        archive.directory(d)
        made.add(d)
    with open(QEMU_GA, 'rb') as f:
        archive.file('bin/qemu-ga', f.read(), 0o755)
    for lib in _shared_libraries(QEMU_GA):
        parts = lib.strip('/').split('/')
        for i in range(1, len(parts)):
            d = '/'.join(parts[:i])
            if d not in made:
                archive.directory(d)
                made.add(d)
        with open(os.path.realpath(lib), 'rb') as f:
            archive.file(lib.strip('/'), f.read(), 0o755)
    # The kernel opens /dev/console for init before devtmpfs is mounted.
    archive.chardev('dev/console', 5, 1)
    with open(BUSYBOX, 'rb') as f:
        archive.file('bin/busybox', f.read(), 0o755)
    archive.symlink('bin/sh', 'busybox')
    present = []
    for name in VIRTIO_MODULES + tuple(extra_modules):
        path = _find_module(moddir, name)
        if path is None:
            if name in extra_modules:
                raise GuestUnavailable('the kernel modules under %s lack '
                                       '%s' % (moddir, name))
            continue
        archive.file('lib/modules/%s.ko' % name, _module_bytes(path))
        present.append(name)
    if not {'virtio_blk', 'virtio_pci', 'virtio_console'} <= set(present):
        raise GuestUnavailable('the kernel modules under %s lack virtio_pci, '
                               'virtio_blk or virtio_console' % moddir)
    archive.file('init', _init_script(present).encode(), 0o755)
    return gzip.compress(archive.finish(), mtime=0)


def _cache_key(vmlinuz, extra_modules=()):
    digest = hashlib.sha256()
    digest.update(INIT_SCRIPT.encode())
    digest.update(' '.join(VIRTIO_MODULES + tuple(extra_modules)).encode())
    for path in (vmlinuz, BUSYBOX, QEMU_GA):
        st = os.stat(path)
        digest.update(('%s %d %d' % (path, st.st_size, st.st_mtime_ns))
                      .encode())
    return digest.hexdigest()[:16]


def _world_readable_dir(path):
    os.makedirs(path, exist_ok=True)
    os.chmod(path, 0o755)


def _prune(cache, keep, pattern='[0-9a-f]{16}'):
    """Drop images built from other inputs (another kernel, busybox or
    init script): the directories whose name matches ``pattern``, but
    ``keep``."""
    for name in os.listdir(cache):
        path = os.path.join(cache, name)
        if (name != keep and re.fullmatch(pattern, name)
                and os.path.isdir(path)):
            shutil.rmtree(path, ignore_errors=True)


def cached_image(cache, key, vmlinuz, make_initramfs,
                 stale='[0-9a-f]{16}'):
    """(kernel, initrd) paths of the image ``key`` in ``cache``; when it
    is not there, it is built from ``vmlinuz`` and ``make_initramfs()``
    (its bytes), and older images whose names match ``stale`` go."""
    target = os.path.join(cache, key)
    kernel = os.path.join(target, 'vmlinuz')
    initrd = os.path.join(target, 'initramfs.gz')
    if os.path.exists(kernel) and os.path.exists(initrd):
        return kernel, initrd
    _world_readable_dir(cache)
    _prune(cache, keep=key, pattern=stale)
    # Build aside and rename, so that concurrent builders never see half
    # an image.
    work = tempfile.mkdtemp(prefix='build-', dir=cache)
    try:
        # A copy, so the kernel under /boot is never relabelled by
        # libvirt's DAC driver.
        shutil.copyfile(vmlinuz, os.path.join(work, 'vmlinuz'))
        with open(os.path.join(work, 'initramfs.gz'), 'wb') as f:
            f.write(make_initramfs())
        for name in ('vmlinuz', 'initramfs.gz'):
            os.chmod(os.path.join(work, name), 0o644)
        os.chmod(work, 0o755)
        try:
            os.rename(work, target)
        except OSError:
            if not os.path.exists(initrd):
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return kernel, initrd


def cache_dir():
    return os.environ.get('COMPOSABLE_GUEST_CACHE', DEFAULT_CACHE)


def build(cache=None, extra_modules=(), cmdline=KERNEL_CMDLINE):
    """Build the tiny guest, or return the cached one. ``extra_modules``
    (kernel module names, loaded in that order after the virtio ones)
    go into its initramfs too; ``cmdline`` is its kernel command line."""
    if not os.access(BUSYBOX, os.X_OK):
        raise GuestUnavailable('%s not found: install busybox-static'
                               % BUSYBOX)
    if not os.access(QEMU_GA, os.X_OK):
        raise GuestUnavailable('%s not found: install qemu-guest-agent'
                               % QEMU_GA)
    vmlinuz, moddir = find_kernel()
    # Images with other modules are kept beside the plain one (their
    # keys are prefixed): tests of both kinds run in one session.
    extra_modules = tuple(extra_modules)
    key = _cache_key(vmlinuz, extra_modules)
    stale = '[0-9a-f]{16}'
    if extra_modules:
        prefix = '-'.join(extra_modules) + '-'
        key = prefix + key
        stale = re.escape(prefix) + stale
    kernel, initrd = cached_image(
        cache or cache_dir(), key, vmlinuz,
        lambda: _initramfs(moddir, extra_modules), stale=stale)
    return GuestImage(kernel, initrd, cmdline=cmdline)


# ------------------------------------------------------------- booting


def domain_xml(name, image, serial_log, memory_mib=256, domain_uuid=None,
               agent=True, autoswap=True, max_memory_mib=None,
               memory_slots=2):
    """A TCG domain booting the tiny guest with its console in a file,
    and a guest agent channel unless ``agent`` is False (libvirt picks the
    host side socket).

    With ``max_memory_mib`` the domain can take memory devices (virtio-mem,
    DIMMs) up to that much memory in all, ``memory_slots`` of them:
    ``<maxMemory slots=...>`` and
    one guest NUMA cell holding its CPU and boot memory, both of which
    QEMU needs for memory devices.

    Domain type 'qemu' (TCG), so /dev/kvm is never touched. Machine 'pc'
    with ACPI: virtio disks are hot-plugged on the PCI root bus through
    ACPI hotplug, which the cloud kernel has built in.
    """
    return '''<domain type='qemu'>
  <name>%(name)s</name>
  <uuid>%(uuid)s</uuid>
  %(max_memory)s<memory unit='MiB'>%(memory)d</memory>
  <vcpu>1</vcpu>
  <os>
    <type arch='x86_64' machine='pc'>hvm</type>
    <kernel>%(kernel)s</kernel>
    <initrd>%(initrd)s</initrd>
    <cmdline>%(cmdline)s</cmdline>
  </os>
  <features><acpi/></features>
  <cpu mode='custom' match='exact'>
    <model fallback='allow'>qemu64</model>%(numa)s
  </cpu>
  <clock offset='utc'/>
  <on_poweroff>destroy</on_poweroff>
  <on_reboot>destroy</on_reboot>
  <on_crash>destroy</on_crash>
  <devices>
    <emulator>/usr/bin/qemu-system-x86_64</emulator>
    <controller type='usb' model='none'/>
    <serial type='file'>
      <source path='%(log)s'/>
      <target port='0'/>
    </serial>
    %(agent)s
    <memballoon model='none'/>
  </devices>
</domain>
''' % {'name': name, 'uuid': domain_uuid or str(uuid.uuid4()),
       'agent': ("<channel type='unix'><target type='virtio' name='%s'/>"
                 "</channel>" % AGENT_PORT) if agent else '',
       'memory': memory_mib, 'kernel': image.kernel,
       'max_memory': ("<maxMemory slots='%d' unit='MiB'>%d</maxMemory>\n  "
                      % (memory_slots, max_memory_mib))
       if max_memory_mib else '',
       'numa': ("\n    <numa><cell id='0' cpus='0' memory='%d' unit='MiB'/>"
                "</numa>" % memory_mib) if max_memory_mib else '',
       'initrd': image.initrd,
       'cmdline': image.cmdline + (' composable_agent=1' if agent else '') +
       ('' if autoswap else ' composable_autoswap=0'),
       'log': serial_log}


def read_log(path):
    try:
        with open(path, 'rb') as f:
            return f.read().decode('utf-8', 'replace')
    except FileNotFoundError:
        return ''


def marker_lines(path):
    """The guest's own lines of the serial log, without the marker."""
    prefix = MARKER + ' '
    lines = []
    for line in read_log(path).splitlines():
        idx = line.find(prefix)
        if idx >= 0:
            lines.append(line[idx + len(prefix):].strip())
    return lines


def wait_for(path, predicate, timeout, what, interval=0.5, since=0):
    """Wait until predicate(marker_lines[since:]) is truthy; return it."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate(marker_lines(path)[since:])
        if value:
            return value
        if time.monotonic() > deadline:
            tail = '\n'.join(read_log(path).splitlines()[-25:])
            raise AssertionError(
                'guest did not show %s within %ss; serial log %s ends '
                'with:\n%s' % (what, timeout, path, tail))
        time.sleep(interval)


def wait_for_line(path, pattern, timeout, what=None, since=0):
    """Wait for a marker line matching the regex; return the match.

    Only the guest's lines from index ``since`` on are searched (see
    RunningGuest.mark()).
    """
    regex = re.compile(pattern)

    def _match(lines):
        for line in lines:
            m = regex.search(line)
            if m:
                return m
        return None
    return wait_for(path, _match, timeout, what or repr(pattern),
                    since=since)


class RunningGuest(object):
    def __init__(self, conn, domain, serial_log, run_dir):
        self.conn = conn
        self.domain = domain
        self.serial_log = serial_log
        self.run_dir = run_dir

    @property
    def uuid(self):
        return self.domain.UUIDString()

    @property
    def name(self):
        return self.domain.name()

    def marker_lines(self):
        return marker_lines(self.serial_log)

    def mark(self):
        """An index for wait_for_line(since=...): what comes next."""
        return len(self.marker_lines())

    def wait_for_line(self, pattern, timeout, what=None, since=0):
        return wait_for_line(self.serial_log, pattern, timeout, what,
                             since=since)

    def destroy(self):
        import libvirt
        try:
            if self.domain.isActive():
                self.domain.destroy()
        except libvirt.libvirtError:
            pass
        try:
            self.domain.undefine()
        except libvirt.libvirtError:
            pass


def wait_guest_agent(domain, timeout):
    """Wait until the guest agent of ``domain`` answers guest-ping."""
    import libvirt
    import libvirt_qemu
    deadline = time.monotonic() + timeout
    while True:
        try:
            libvirt_qemu.qemuAgentCommand(
                domain, '{"execute": "guest-ping"}', 5, 0)
            return
        except libvirt.libvirtError as exc:
            if time.monotonic() > deadline:
                raise AssertionError(
                    'the guest agent of %s did not answer within %d s: %s'
                    % (domain.name(), timeout, exc))
        time.sleep(0.2)


@contextlib.contextmanager
def running_guest(conn, image=None, memory_mib=256, boot_timeout=300,
                  name=None, agent=True, autoswap=True, max_memory_mib=None,
                  memory_slots=2):
    """Define and start the tiny guest, wait for it to boot, yield a
    RunningGuest; destroy and undefine it afterwards.

    ``conn`` is an open libvirt connection (qemu:///system).
    """
    image = image or build()
    from tests.functional import leftovers
    name = name or 'composable-test-%s-%s' % (leftovers.run_tag(),
                                              uuid.uuid4().hex[:6])
    _world_readable_dir(cache_dir())
    run_dir = tempfile.mkdtemp(prefix='run-%s-' % name, dir=cache_dir())
    os.chmod(run_dir, 0o755)
    serial_log = os.path.join(run_dir, 'serial.log')
    domain = conn.defineXML(domain_xml(name, image, serial_log,
                                       memory_mib=memory_mib, agent=agent,
                                       autoswap=autoswap,
                                       max_memory_mib=max_memory_mib,
                                       memory_slots=memory_slots))
    guest = RunningGuest(conn, domain, serial_log, run_dir)
    try:
        deadline = time.monotonic() + boot_timeout
        domain.create()
        guest.wait_for_line('^booted$', boot_timeout, 'its boot marker')
        if agent:
            # qemu-ga starts in the background just before the marker;
            # a test that unplugs a disk needs it answering.
            wait_guest_agent(domain, max(1, deadline - time.monotonic()))
        yield guest
    finally:
        guest.destroy()
        if not os.environ.get('COMPOSABLE_KEEP_GUEST_LOGS'):
            shutil.rmtree(run_dir, ignore_errors=True)


def main():
    image = build()
    print('kernel: %s' % image.kernel)
    print('initrd: %s' % image.initrd)
    print('cmdline: %s' % image.cmdline)


if __name__ == '__main__':
    main()
