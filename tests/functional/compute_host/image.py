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

"""A TCG guest standing in for a compute host that receives PCIe devices.

It is the tiny guest of tests/functional/guest/build.py grown into a host
the fabric can compose devices into:

* machine q35 with ``<features><acpi/></features>`` (without ACPI, q35
  hot-plug breaks and the guest hangs) and an emulated Intel IOMMU
  (``<iommu model='intel'/>``, ``intel_iommu=on`` on the kernel command
  line: the cloud kernel has the driver built in), so every function gets
  an IOMMU group;
* spare ``pcie-root-port`` controllers to hot-plug functions into, and
  QEMU ``nvme-subsys`` devices made at start (QEMU cannot hot-add them,
  and its NVMe controller needs one for SR-IOV);
* in the initramfs: busybox, the virtio modules and qemu-ga of the tiny
  guest, the vfio modules (irqbypass, vfio, vfio_virqfd,
  vfio_iommu_type1, vfio-pci-core, vfio-pci; NVMe is built into the
  kernel), and the host's Python (``/usr/bin/python3.11``, Debian's
  python3.11-minimal) with its shared libraries and only the standard
  library modules the agent's PCI module imports, so that
  ``composable/privsep/pci_sysfs.py`` runs in the guest unchanged.

Its ``/init`` prints ``COMPOSABLE-GUEST iommu-groups N`` and then
``COMPOSABLE-GUEST booted`` on the serial console once the guest agent
runs, and then only idles: the tests drive it through the agent.

Images are cached beside the tiny guest's (``$COMPOSABLE_GUEST_CACHE``),
keyed by everything that goes into them.
"""

import contextlib
import gzip
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
import uuid

from tests.functional.guest import build

PYTHON = '/usr/bin/python3.11'
PCI_MODULE = os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))))),
    'composable', 'privsep', 'pci_sysfs.py')
# Load order matters: each module after the ones it needs (modules.dep).
HOST_MODULES = ('virtio_ring', 'virtio', 'virtio_pci_modern_dev',
                'virtio_pci_legacy_dev', 'virtio_pci', 'virtio_console',
                'irqbypass', 'vfio', 'vfio_virqfd', 'vfio_iommu_type1',
                'vfio-pci-core', 'vfio-pci')
REQUIRED_MODULES = ('virtio_pci', 'virtio_console', 'vfio',
                    'vfio_iommu_type1', 'vfio-pci')
# no_timer_check: under TCG on a busy machine the kernel's check that the
# timer interrupt arrives through the IO-APIC can time out, and with
# interrupt remapping on it then panics ("timer doesn't work through
# Interrupt-remapped IO-APIC"); virtual machines skip that check.
KERNEL_CMDLINE = build.KERNEL_CMDLINE + ' intel_iommu=on no_timer_check'
# Root ports the tests may hot-plug into; the guest agent's
# virtio-serial controller takes one more.
SPARE_ROOT_PORTS = 6
NVME_SUBSYSTEMS = 3
NVME_SUBSYSTEM_ID = 'composable-nvme-subsys%d'
# Behind a conventional PCI bridge, functions share one IOMMU group: the
# host keeps an NVMe controller there (on the nvme driver) beside an
# ``edu`` function that passthrough must refuse.
HOST_NVME_SERIAL = 'COMPOSABLE-HOST-NVME'
SHARED_GROUP_SLOTS = {'nvme': 1, 'edu': 2}
MEMORY_MIB = 384

INIT_SCRIPT = r'''#!/bin/sh
/bin/busybox --install -s /bin
export PATH=/bin:/usr/bin
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
say iommu-groups $(ls /sys/kernel/iommu_groups | wc -l)
agent_port() {
    for p in /sys/class/virtio-ports/*; do
        [ "$(cat $p/name 2>/dev/null)" = @AGENT_PORT@ ] || continue
        [ -e /dev/${p##*/} ] && echo ${p##*/} && return 0
    done
    return 1
}
# The port appears once virtio_console has probed the device, which may
# be after insmod returns (slowly, under TCG on a busy host).
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
say booted
while true; do
    sleep 3600
done
'''

# Run by the host's Python with -I -S, as the guest runs pci.py: the
# files of the modules pci.py (and the interpreter's start) load.
_PROBE = r'''
import io, json, sys
sys.path.insert(0, sys.argv[1])
import pci
pci.main(['functions', '{}'], out=io.StringIO())
pci.main(['no-such-command'], out=io.StringIO())
files = set()
for module in list(sys.modules.values()):
    path = getattr(module, '__file__', None)
    if path and path.startswith(sys.argv[2]):
        files.add(path)
print(json.dumps(sorted(files)))
'''


class HostImage(build.GuestImage):
    """The compute host guest's kernel and initramfs."""


def stdlib_dir():
    return '/usr/lib/python3.11'


def stdlib_files(python=PYTHON, pci_module=PCI_MODULE):
    """The standard library files (sources and extension modules) that
    running ``pci_module`` with ``python -I -S`` loads."""
    # The guest holds the module as pci.py; beside it in the tree stands
    # the privsep module of that name, so probe a copy alone.
    with tempfile.TemporaryDirectory(prefix='composable-pci-') as where:
        shutil.copy(pci_module, os.path.join(where, 'pci.py'))
        out = subprocess.run(
            [python, '-I', '-S', '-c', _PROBE, where, stdlib_dir() + '/'],
            check=True, capture_output=True, text=True,
            timeout=120).stdout
    return with_landmark(json.loads(out))


class _Tree(object):
    """A newc archive and the directories already in it."""

    def __init__(self):
        self.archive = build._Cpio()
        self._made = set()

    def directory(self, path):
        path = path.strip('/')
        parts = path.split('/')
        for i in range(1, len(parts) + 1):
            d = '/'.join(parts[:i])
            if d not in self._made:
                self.archive.directory(d)
                self._made.add(d)

    def file(self, path, data, perm=0o644):
        path = path.strip('/')
        if '/' in path:
            self.directory(path.rsplit('/', 1)[0])
        self.archive.file(path, data, perm)

    def host_file(self, path, perm=0o644):
        with open(os.path.realpath(path), 'rb') as f:
            self.file(path, f.read(), perm)


def _init_script(modules):
    return (INIT_SCRIPT.replace('@MARKER@', build.MARKER)
            .replace('@MODULES@', ' '.join(modules))
            .replace('@AGENT_PORT@', build.AGENT_PORT))


def busybox_tree():
    """The start of a guest's initramfs: its directories, the console
    and busybox as /bin/sh."""
    tree = _Tree()
    for d in ('bin', 'dev', 'proc', 'sys', 'lib/modules', 'tmp'):
        tree.directory(d)
    tree.archive.chardev('dev/console', 5, 1)
    tree.host_file(build.BUSYBOX, 0o755)
    tree.archive.symlink('bin/sh', 'busybox')
    return tree


def add_python(tree, python_files, binaries=()):
    """The host's Python and ``python_files`` (from stdlib_files), then
    the shared libraries they and ``binaries`` (already in the tree)
    load."""
    tree.host_file(PYTHON, 0o755)
    libraries = set()
    for binary in tuple(binaries) + (PYTHON,):
        libraries.update(build._shared_libraries(binary))
    for path in python_files:
        if path.endswith('.so'):
            libraries.update(build._shared_libraries(path))
            tree.host_file(path, 0o755)
        else:
            tree.host_file(path)
    for lib in sorted(libraries):
        tree.host_file(lib, 0o755)


def with_landmark(files):
    """``files`` (standard library paths), sorted, with the file by
    which the interpreter finds its prefix."""
    landmark = os.path.join(stdlib_dir(), 'os.py')
    return sorted(set(files) | {landmark})


def _initramfs(moddir, python_files):
    tree = busybox_tree()
    tree.host_file(build.QEMU_GA, 0o755)
    tree.archive.symlink('bin/qemu-ga', build.QEMU_GA)
    add_python(tree, python_files, binaries=[build.QEMU_GA])
    present = []
    for name in HOST_MODULES:
        path = build._find_module(moddir, name)
        if path is None:
            continue
        tree.file('lib/modules/%s.ko' % name, build._module_bytes(path))
        present.append(name)
    missing = set(REQUIRED_MODULES) - set(present)
    if missing:
        raise build.GuestUnavailable(
            'the kernel modules under %s lack %s' % (
                moddir, ', '.join(sorted(missing))))
    tree.file('init', _init_script(present).encode(), 0o755)
    return gzip.compress(tree.archive.finish(), mtime=0)


def _cache_key(vmlinuz, python_files):
    digest = hashlib.sha256()
    digest.update(b'compute-host\0')
    digest.update(INIT_SCRIPT.encode())
    digest.update(' '.join(HOST_MODULES).encode())
    for path in [vmlinuz, build.BUSYBOX, build.QEMU_GA, PYTHON] + list(
            python_files):
        st = os.stat(path)
        digest.update(('%s %d %d\n' % (path, st.st_size, st.st_mtime_ns))
                      .encode())
    return 'host-' + digest.hexdigest()[:16]


def build_image(cache=None):
    """Build the compute host guest's image, or return the cached one."""
    for binary, package in ((build.BUSYBOX, 'busybox-static'),
                            (build.QEMU_GA, 'qemu-guest-agent'),
                            (PYTHON, 'python3.11-minimal')):
        if not os.access(binary, os.X_OK):
            raise build.GuestUnavailable('%s not found: install %s'
                                         % (binary, package))
    vmlinuz, moddir = build.find_kernel()
    python_files = stdlib_files()
    kernel, initrd = build.cached_image(
        cache or build.cache_dir(), _cache_key(vmlinuz, python_files),
        vmlinuz, lambda: _initramfs(moddir, python_files),
        stale='host-[0-9a-f]{16}')
    return HostImage(kernel, initrd, KERNEL_CMDLINE)


# ------------------------------------------------------------- booting


def domain_xml(name, image, serial_log, memory_mib=MEMORY_MIB,
               root_ports=SPARE_ROOT_PORTS, nvme_subsystems=NVME_SUBSYSTEMS,
               shared_group=True, domain_uuid=None, on_reboot='destroy'):
    """The compute host's domain: q35 + ACPI + Intel IOMMU under TCG,
    ``on_reboot`` ``destroy`` (a guest that resets is gone: QEMU runs
    with -no-reboot) or ``restart`` (it boots again, keeping the
    functions plugged into it), ``root_ports`` spare pcie-root-ports
    (index 1...), NVMe subsystems
    ``composable-nvme-subsys0...``, a guest agent channel and, with
    ``shared_group``, a pcie-to-pci-bridge holding the host's NVMe
    controller and an ``edu`` function (SHARED_GROUP_SLOTS)."""
    ports = ["    <controller type='pci' index='%d' model='pcie-root-port'/>"
             % (i + 1) for i in range(root_ports)]
    # In JSON, as libvirt gives its own devices: QEMU creates the devices
    # given in its older syntax before all JSON ones, before the bridge.
    devices = [{'driver': 'nvme-subsys', 'id': NVME_SUBSYSTEM_ID % i,
                'nqn': '%s-%d' % (name, i)} for i in range(nvme_subsystems)]
    if shared_group:
        bridge = root_ports + 1
        ports.append("    <controller type='pci' index='%d' "
                     "model='pcie-to-pci-bridge'/>" % bridge)
        devices += [
            {'driver': 'nvme', 'serial': HOST_NVME_SERIAL,
             'bus': 'pci.%d' % bridge,
             'addr': '0x%x' % SHARED_GROUP_SLOTS['nvme']},
            {'driver': 'edu', 'bus': 'pci.%d' % bridge,
             'addr': '0x%x' % SHARED_GROUP_SLOTS['edu']}]
    ports = '\n'.join(ports)
    qemu_args = '\n'.join(
        "    <qemu:arg value='-device'/>\n    <qemu:arg value='%s'/>"
        % json.dumps(d, sort_keys=True) for d in devices)
    return '''<domain type='qemu'
        xmlns:qemu='http://libvirt.org/schemas/domain/qemu/1.0'>
  <name>%(name)s</name>
  <uuid>%(uuid)s</uuid>
  <memory unit='MiB'>%(memory)d</memory>
  <vcpu>1</vcpu>
  <os>
    <type arch='x86_64' machine='q35'>hvm</type>
    <kernel>%(kernel)s</kernel>
    <initrd>%(initrd)s</initrd>
    <cmdline>%(cmdline)s composable_agent=1</cmdline>
  </os>
  <features><acpi/></features>
  <cpu mode='custom' match='exact'>
    <model fallback='allow'>qemu64</model>
  </cpu>
  <clock offset='utc'/>
  <on_poweroff>destroy</on_poweroff>
  <on_reboot>%(on_reboot)s</on_reboot>
  <on_crash>destroy</on_crash>
  <devices>
    <emulator>/usr/bin/qemu-system-x86_64</emulator>
    <controller type='usb' model='none'/>
    <controller type='pci' index='0' model='pcie-root'/>
%(ports)s
    <serial type='file'>
      <source path='%(log)s' append='on'/>
      <target port='0'/>
    </serial>
    <channel type='unix'>
      <target type='virtio' name='%(agent_port)s'/>
    </channel>
    <memballoon model='none'/>
    <iommu model='intel'/>
  </devices>
  <qemu:commandline>
%(qemu_args)s
  </qemu:commandline>
</domain>
''' % {'name': name, 'uuid': domain_uuid or str(uuid.uuid4()),
       'memory': memory_mib, 'kernel': image.kernel, 'initrd': image.initrd,
       'cmdline': image.cmdline, 'ports': ports, 'log': serial_log,
       'agent_port': build.AGENT_PORT, 'qemu_args': qemu_args,
       'on_reboot': on_reboot}


class RunningHost(build.RunningGuest):
    """The compute host guest, running; ``boot_seconds`` from start to
    the guest agent's first answer."""

    boot_seconds = None


@contextlib.contextmanager
def running_host(conn, image=None, boot_timeout=300, name=None, **xml):
    """Define and start the compute host guest, wait until its agent
    answers, yield a RunningHost; destroy and undefine it afterwards,
    whatever happened."""
    image = image or build_image()
    from tests.functional import leftovers
    name = name or 'composable-test-%s-host-%s' % (leftovers.run_tag(),
                                                   uuid.uuid4().hex[:6])
    build._world_readable_dir(build.cache_dir())
    run_dir = tempfile.mkdtemp(prefix='run-%s-' % name,
                               dir=build.cache_dir())
    os.chmod(run_dir, 0o755)
    serial_log = os.path.join(run_dir, 'serial.log')
    domain = conn.defineXML(domain_xml(name, image, serial_log, **xml))
    host = RunningHost(conn, domain, serial_log, run_dir)
    try:
        started = time.monotonic()
        domain.create()
        host.wait_for_line('^booted$', boot_timeout, 'its boot marker')
        build.wait_guest_agent(
            domain, max(1, boot_timeout - (time.monotonic() - started)))
        host.boot_seconds = time.monotonic() - started
        yield host
    finally:
        host.destroy()
        if not os.environ.get('COMPOSABLE_KEEP_GUEST_LOGS'):
            shutil.rmtree(run_dir, ignore_errors=True)


def main():
    started = time.monotonic()
    image = build_image()
    print('kernel: %s' % image.kernel)
    print('initrd: %s (%d bytes)' % (image.initrd,
                                     os.path.getsize(image.initrd)))
    print('cmdline: %s' % image.cmdline)
    print('seconds: %.1f' % (time.monotonic() - started))


if __name__ == '__main__':
    main()
