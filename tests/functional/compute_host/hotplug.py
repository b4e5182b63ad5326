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

"""The Redfish emulator's backend for a system that is a libvirt domain.

Given to :meth:`Emulator.set_backend`, a ``DomainHotplug`` makes
``AddResourceBlock`` hot-plug an emulated PCIe function into a free
``pcie-root-port`` of the domain (QMP ``device_add``: libvirt has no XML
for QEMU's emulated NVMe controller or ``edu`` device), and
``RemoveResourceBlock`` unplug it (``device_del``) and wait for QEMU's
``DEVICE_DELETED`` event, which libvirt hands over through
``qemuMonitorEventRegister``.

The emulated functions, by block kind:

* ``gpu``: QEMU's ``edu`` device, ids 1234:11e8;
* ``nvme``: QEMU's NVMe controller, ids 1b36:0010, with the block's serial
  as its NVMe serial and SR-IOV (``sriov_max_vfs``) on one of the
  domain's NVMe subsystems.

A block may name a ``companion``: a second function (only ``nvme``) in
the same slot, plugged as function 1 of a multi-function device. The host
drives it (the guest's nvme driver), and without ACS both functions share
one IOMMU group: the composed "GPU" then cannot be passed through safely,
as with a real card whose other function the host uses. Unplugging the
slot removes both.

A block whose ids are not those of its function is refused: a locator
must lead the host to the very function the fabric composed.
"""

import json
import threading
import time
import xml.etree.ElementTree as ElementTree

from tests.functional.compute_host import image as image_mod

# kind -> (QEMU device, vendor id, device id)
MODELS = {
    'gpu': ('edu', '1234', '11e8'),
    'nvme': ('nvme', '1b36', '0010'),
}
NVME_SERIAL_MAX = 20

_loop_lock = threading.Lock()
_loop_thread = None


class HotplugError(Exception):
    """The domain did not take or give back a function."""


def _start_event_loop():
    """libvirt's default event loop in a daemon thread, once: events
    reach only connections opened after it is registered."""
    global _loop_thread
    import libvirt
    with _loop_lock:
        if _loop_thread is not None:
            return
        libvirt.virEventRegisterDefaultImpl()

        def run():
            while True:
                libvirt.virEventRunDefaultImpl()

        _loop_thread = threading.Thread(target=run, daemon=True,
                                        name='libvirt-events')
        _loop_thread.start()


def _hex_id(value):
    text = str(value or '').strip().lower()
    if text.startswith('0x'):
        text = text[2:]
    try:
        return '%04x' % int(text, 16)
    except ValueError:
        return text


class DomainHotplug(object):
    """Hot-plugs the emulator's blocks into one libvirt domain."""

    def __init__(self, domain_uuid, uri=None, unplug_timeout=60,
                 sriov_vfs=2, nvme_subsystems=image_mod.NVME_SUBSYSTEMS):
        import libvirt
        import libvirt_qemu
        from tests.functional.compute_node import dataplane
        _start_event_loop()
        self.conn = libvirt.open(uri or dataplane.LIBVIRT_URI)
        self.domain = self.conn.lookupByUUIDString(domain_uuid)
        self.unplug_timeout = unplug_timeout
        self.sriov_vfs = sriov_vfs
        self.lock = threading.Lock()
        # block id -> {'id', 'port', 'subsys', 'driver'}
        self.plugged = {}
        # (device id, monotonic time) of every DEVICE_DELETED seen
        self.deleted = []
        self._waiting = {}
        self._subsystems = [image_mod.NVME_SUBSYSTEM_ID % i
                            for i in range(nvme_subsystems)]
        self._subsystem_of = {}
        self._callback = libvirt_qemu.qemuMonitorEventRegister(
            self.conn, self.domain, 'DEVICE_DELETED', self._on_deleted,
            None, 0)

    def close(self):
        import libvirt
        import libvirt_qemu
        try:
            libvirt_qemu.qemuMonitorEventDeregister(self.conn,
                                                    self._callback)
        except libvirt.libvirtError:
            pass
        try:
            self.conn.close()
        except libvirt.libvirtError:
            pass

    def _on_deleted(self, conn, dom, event, seconds, micros, details,
                    opaque):
        if isinstance(details, str):
            try:
                details = json.loads(details)
            except ValueError:
                details = {}
        device = (details or {}).get('device')
        if not device:
            return  # a child object of a device, named by path only
        with self.lock:
            self.deleted.append((device, time.monotonic()))
            waiter = self._waiting.pop(device, None)
        if waiter is not None:
            waiter.set()

    def qmp(self, execute, **arguments):
        import libvirt
        import libvirt_qemu
        request = {'execute': execute}
        if arguments:
            request['arguments'] = arguments
        try:
            answer = json.loads(libvirt_qemu.qemuMonitorCommand(
                self.domain, json.dumps(request), 0))
        except libvirt.libvirtError as exc:
            raise HotplugError('%s on %s failed: %s'
                               % (execute, self.domain.name(), exc))
        if 'error' in answer:
            raise HotplugError('%s on %s: %s' % (
                execute, self.domain.name(), answer['error'].get('desc')))
        return answer.get('return')

    def device_present(self, device_id):
        """Whether QEMU still has the device (QOM)."""
        members = self.qmp('qom-list', path='/machine/peripheral')
        return any(m['name'] == device_id for m in members)

    def root_ports(self):
        """Aliases of the domain's pcie-root-ports without a device: the
        ones libvirt placed nothing on and this backend did not fill."""
        tree = ElementTree.fromstring(self.domain.XMLDesc(0))
        ports = {}
        for ctl in tree.iter('controller'):
            if (ctl.get('type') == 'pci'
                    and ctl.get('model') == 'pcie-root-port'):
                alias = ctl.find('alias')
                ports[int(ctl.get('index'))] = (
                    alias.get('name') if alias is not None
                    else 'pci.%s' % ctl.get('index'))
        used = set()
        for address in tree.iter('address'):
            if address.get('type') == 'pci' and address.get('bus'):
                used.add(int(address.get('bus'), 0))
        taken = {entry['port'] for entry in self.plugged.values()}
        return [alias for index, alias in sorted(ports.items())
                if index not in used and alias not in taken]

    def _subsystem(self, serial):
        """The NVMe subsystem for a controller with ``serial``: QEMU's
        subsystem keeps the serial of its first controller and refuses
        any other, even after that one is unplugged."""
        if serial in self._subsystem_of:
            return self._subsystem_of[serial]
        if len(self._subsystem_of) >= len(self._subsystems):
            raise HotplugError('domain %s has no NVMe subsystem left for '
                               'a controller with serial %s'
                               % (self.domain.name(), serial))
        subsystem = self._subsystems[len(self._subsystem_of)]
        self._subsystem_of[serial] = subsystem
        return subsystem

    # --------------------------------------------- the emulator's calls

    def compose(self, block_id, block):
        kind = block.get('kind')
        if kind not in MODELS:
            raise HotplugError('no emulated PCIe function stands for a %s '
                               'block' % kind)
        driver, vendor, product = MODELS[kind]
        if (_hex_id(block.get('vendor_id')), _hex_id(
                block.get('device_id'))) != (vendor, product):
            raise HotplugError(
                'block %s says %s:%s but its function (QEMU %s) is %s:%s'
                % (block_id, block.get('vendor_id'), block.get('device_id'),
                   driver, vendor, product))
        with self.lock:
            if block_id in self.plugged:
                return self.plugged[block_id]
            free = self.root_ports()
            if not free:
                raise HotplugError('domain %s has no free PCIe hot-plug '
                                   'slot (pcie-root-port)'
                                   % self.domain.name())
            entry = {'id': 'composable-%s' % block_id, 'port': free[0],
                     'driver': driver, 'subsys': None, 'companion': None}
            arguments = {'driver': driver, 'id': entry['id'],
                         'bus': entry['port']}
            companion = block.get('companion')
            if companion:
                if companion != 'nvme':
                    raise HotplugError('no companion function %s'
                                       % companion)
                entry['companion'] = entry['id'] + '-companion'
                # Functions other than 0 wait in the slot; plugging
                # function 0 last announces the whole device.
                # multifunction on every function: Linux groups a
                # function with its siblings only when its own header
                # says it is part of a multi-function device.
                self.qmp('device_add', driver='nvme',
                         id=entry['companion'], bus=entry['port'],
                         addr='0.1', multifunction='on',
                         serial=('C-' + block_id)[:NVME_SERIAL_MAX])
                arguments.update(addr='0.0', multifunction='on')
            if driver == 'nvme':
                serial = str(block.get('serial') or block_id)[
                    :NVME_SERIAL_MAX]
                entry['subsys'] = self._subsystem(serial)
                vfs = self.sriov_vfs
                arguments.update({
                    'serial': serial,
                    'subsys': entry['subsys'],
                    'sriov_max_vfs': vfs,
                    # QEMU's floor: two queues and one interrupt a VF.
                    'sriov_vq_flexible': 2 * vfs,
                    'sriov_vi_flexible': vfs})
            try:
                self.qmp('device_add', **arguments)
            except HotplugError:
                if entry['companion']:
                    self._drop_waiting_companion(entry)
                raise
            self.plugged[block_id] = entry
            return entry

    def _drop_waiting_companion(self, entry):
        """A companion whose function 0 never came: not announced to the
        guest, so it goes at once."""
        try:
            self.qmp('device_del', id=entry['companion'])
        except HotplugError:
            pass

    def decompose(self, block_id, block=None):
        """Unplug the block's function and wait for DEVICE_DELETED;
        HotplugError when it does not come in time (the function then
        stays plugged)."""
        with self.lock:
            entry = self.plugged.get(block_id)
            if entry is None:
                return None
            done = threading.Event()
            self._waiting[entry['id']] = done
            companion_done = None
            if entry.get('companion'):
                companion_done = threading.Event()
                self._waiting[entry['companion']] = companion_done
        try:
            self.qmp('device_del', id=entry['id'])
        except HotplugError:
            with self.lock:
                self._waiting.pop(entry['id'], None)
            raise
        if not done.wait(self.unplug_timeout):
            with self.lock:
                self._waiting.pop(entry['id'], None)
            raise HotplugError('%s did not let go of %s: no DEVICE_DELETED '
                               'within %s s' % (self.domain.name(),
                                                entry['id'],
                                                self.unplug_timeout))
        if companion_done is not None and not companion_done.wait(
                self.unplug_timeout):
            with self.lock:
                self._waiting.pop(entry['companion'], None)
            raise HotplugError('%s did not let go of %s: no DEVICE_DELETED '
                               'within %s s' % (self.domain.name(),
                                                entry['companion'],
                                                self.unplug_timeout))
        with self.lock:
            self.plugged.pop(block_id, None)
        return entry
