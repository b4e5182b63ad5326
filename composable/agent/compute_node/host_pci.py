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

"""Leased PCI devices on a compute node: from a fabric locator to a
function on vfio-pci, and back off the bus before the fabric unbinds it.

Attach, per device: rescan and find the function (by the fabric's
address, else by its ids among the functions that are not the host's own
and not another lease's, confirmed by serial when readable), within
``[compute_node]pci_find_timeout``; check that no ``[pci] device_spec``
of Nova on this host matches it; check that its IOMMU group holds nothing
the host still drives; bind it to vfio-pci and check ``/dev/vfio/<group>``.
The address is recorded (``[compute_node]pci_state_file``) as soon as
the function is found, so a detach after a refused or interrupted attach
still takes it off the bus. Detach, per device: release from vfio-pci,
then remove the function from the bus. Both are idempotent: the conductor
repeats calls after timeouts.

The host's own functions are those on the bus when the agent starts,
less those its records say are leased devices; a function that appears
later and matches a locator's ids is a composed one.

Nova's device_spec: Nova re-reads the host's PCI devices about every
minute and would hand a composed device matched by its device_spec to an
instance of its own. The agent cannot know every device the fabric may
compose into this host, so it checks in two places:

* at start, a spec entry that matches any device (no vendor, product or
  address restriction, or no readable JSON), or the locator of a device
  it holds, makes it refuse all device work until the spec is changed
  and the agent restarted;
* at each attach, the device's locator and found address are checked
  against every entry; a match refuses that attach, naming the entry.

A nova.conf that exists but cannot be read counts as a conflict: nothing
says what it would match.

SR-IOV virtual functions (a device with an ``sriov`` entry, see
composable.common.sriov): the agent finds VF ``vf_index`` under the
physical function, creating the pool's VFs first when the pool makes
them on demand and the PF has none (or too few, none of them leased), and
binds it to vfio-pci as any device. At detach a VF is released from
vfio-pci but stays on the bus (it belongs to its PF); when the pool makes
VFs on demand and no VF of the PF is held any more, the PF goes back to 0
VFs. Every decision on one PF's VFs is taken under that PF's lock, so a
lease being bound never loses its VF to another's unbind. The PF is never
handed out.

Writes to sysfs (and the serial-confirmed search) run as root through
composable.privsep.pci; reads of sysfs run in the agent. An attach is one
privileged call per device (pci.attach_function: find, Nova's
device_spec, IOMMU group, vfio-pci, /dev/vfio), and so is a detach
(pci.detach_function); all the PCI work goes through one ``bus`` object
(SysfsPci), which a host running the PCI module elsewhere replaces.
"""

import collections
import errno
import json
import os
import threading
import time

from oslo_log import log as logging

from composable.common import exception
from composable.common import locator as locator_mod
from composable.common import sriov
from composable import conf
from composable.privsep import pci as priv_pci
from composable.privsep import pci_sysfs as pci

CONF = conf.CONF
LOG = logging.getLogger(__name__)

_WILDCARD_CHARS = set('*:. ')
# Seconds a restore waits for a held function: it was enumerated at boot
# or it is gone.
RESTORE_FIND_TIMEOUT = 1


def _error(what, code, message, device=None, address=None):
    """The agent's error for a failed PCI step: the one place where a
    pci_sysfs.ErrorCode becomes an exception of the agent, with the
    kernel's or the module's message and what an operator can do about
    it where known. ``device`` (a uuid) and ``address``: the device being
    attached and where it was found, when it was."""
    code = pci.ErrorCode.parse(code)
    if code is pci.ErrorCode.NOT_FOUND and device and not address:
        reason = ('%s. The fabric bound it, but it did not show up on the '
                  'PCI bus: check the fabric link to this host and the '
                  'kernel log (dmesg)' % message)
    elif code is pci.ErrorCode.NOT_PERMITTED_BY_DEVICE_SPEC and device:
        reason = ('device %s at %s is claimed by Nova: %s. Change that entry '
                  'of the nova-compute configuration so that it matches only '
                  'the host\'s own devices (by address), restart '
                  'nova-compute and bind again' % (device, address, message))
    elif code is pci.ErrorCode.IOMMU_GROUP_SHARED and device:
        reason = ('device %s cannot be passed through: %s. Put that device '
                  'on vfio-pci or move the fabric device to another slot'
                  % (device, message))
    elif code is pci.ErrorCode.NOT_PERMITTED:
        reason = ('%s: %s (this needs root: check the agent\'s '
                  '[composable_sys_admin] helper_command)' % (what, message))
    else:
        reason = '%s: %s' % (what, message)
    return exception.DriverError(reason=reason)


def _fail(what, exc, device=None):
    """_error for an exception a PCI step raised."""
    if isinstance(exc, OSError) and exc.errno in (errno.EACCES,
                                                  errno.EPERM):
        # The kernel's own words, as the agent read them itself.
        return _error(what, pci.ErrorCode.NOT_PERMITTED, exc)
    error = pci.as_pci_error(exc)
    return _error(what, error.code, error.message, device)


def device_locator(device):
    """The device's locator (locator.Locator): as the fabric gave it,
    with what the device's own view says where the fabric said nothing
    (a teardown, or a conductor that sends no locator)."""
    try:
        found = locator_mod.Locator.from_primitive(
            device.get('locator') or {})
        return found.filled_from(
            vendor_id=device.get('vendor_id'),
            product_id=device.get('product_id'),
            pci_address=device.get('pci_address'))
    except locator_mod.InvalidLocator as exc:
        raise exception.DriverError(
            reason='device %s: %s' % (device.get('uuid'), exc))


def _model(locator):
    return (locator.vendor_id, locator.product_id,
            pci.normalize_serial(locator.serial))


def _recorded_locator(record):
    """The locator a device record holds (older agents wrote the same
    primitive); an empty one when it is unreadable."""
    try:
        return locator_mod.Locator.from_primitive(
            record.get('locator') or {})
    except locator_mod.InvalidLocator as exc:
        LOG.warning('A PCI device record holds a locator that cannot be '
                    'read (%s); the device is found by its address only',
                    exc)
        return locator_mod.Locator()


def _wildcard(value):
    return value is None or str(value).strip() in ('', '*', '.*')


def matches_any_device(entry):
    """Whether a device_spec entry (parsed JSON) matches devices whatever
    their ids and address: it would take every composed device."""
    if not isinstance(entry, dict):
        return True
    if 'devname' in entry:
        return False
    if not (_wildcard(entry.get('vendor_id')) and
            _wildcard(entry.get('product_id'))):
        return False
    address = entry.get('address')
    if address is None:
        return True
    if isinstance(address, dict):
        return all(_wildcard(address.get(k))
                   for k in ('domain', 'bus', 'slot', 'function'))
    return set(str(address)) <= _WILDCARD_CHARS


class DeviceRecords(object):
    """Which function each leased device became, kept in a JSON file so
    that a restarted agent knows them. Not thread-safe: the caller
    locks."""

    def __init__(self, path):
        self.path = path
        self.devices = {}
        # The host's own functions and the boot they were seen in.
        self.baseline = None
        self.boot_id = None

    def load(self):
        try:
            with open(self.path) as f:
                data = json.load(f)
        except FileNotFoundError:
            data = {}
        except (OSError, ValueError) as exc:
            raise exception.DriverError(
                reason='cannot read the PCI device records %s: %s; fix or '
                       'remove the file' % (self.path, exc))
        self.devices = dict(data.get('devices') or {})
        self.baseline = data.get('baseline')
        self.boot_id = data.get('boot_id')
        return self

    def save(self):
        directory = os.path.dirname(self.path) or '.'
        os.makedirs(directory, exist_ok=True)
        tmp = self.path + '.tmp'
        with open(tmp, 'w') as f:
            json.dump({'devices': self.devices, 'baseline': self.baseline,
                       'boot_id': self.boot_id}, f, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)

    def addresses(self, but=None):
        return {r['address'] for u, r in self.devices.items() if u != but}


class SysfsPci(object):
    """This host's PCI bus: sysfs read in the agent, written as root
    through the privileged functions ``ops`` (composable.privsep.pci).

    HostPciDevices does all its PCI work through such an object; each
    method is one call of composable.privsep.pci_sysfs (the attach
    and the detach are one each, see pci.attach_function), so a host
    whose PCI module runs elsewhere can stand in with the same methods.
    Locators come in as locator.Locator and go out as their primitive;
    an attach answers a locator.AttachResult. Errors are
    pci_sysfs.PciError (by code), ValueError or OSError.
    """

    def __init__(self, ops, root='/'):
        self.ops = ops
        self.root = root

    def functions(self):
        return pci.functions(self.root)

    def boot_id(self):
        return pci.boot_id(self.root)

    def host_checks(self, kernel_release=None):
        return pci.host_checks(self.root, kernel_release)

    def attach_function(self, locator, known, timeout, interchangeable,
                        recorded=None, nova_conf_text=None):
        """``locator``: a locator.Locator; a locator.AttachResult."""
        return locator_mod.AttachResult.from_primitive(
            self.ops.attach_function(
                locator.to_primitive(), known, timeout=timeout,
                interchangeable=interchangeable, recorded=recorded,
                nova_conf_text=nova_conf_text))

    def detach_function(self, address, vendor_id, product_id):
        return self.ops.detach_function(address, vendor_id, product_id)

    def exists(self, address):
        return pci.exists(address, self.root)

    def is_virtual_function(self, address):
        return pci.is_virtual_function(address, self.root)

    def release(self, address):
        return self.ops.release(address)

    def detach_unrecorded_function(self, locator, known, interchangeable):
        return self.ops.detach_unrecorded_function(
            locator.to_primitive(), known, interchangeable=interchangeable)

    def virtual_functions(self, pf_address):
        return pci.virtual_functions(pf_address, self.root)

    def set_num_vfs(self, pf_address, count):
        return self.ops.set_num_vfs(pf_address, count)

    def describe_functions(self, addresses):
        return pci.describe_functions(addresses, self.root)


class HostPciDevices(object):
    """The PCI side of the compute_node role (see the module's doc)."""

    def __init__(self, ops=None, root='/', find_timeout=None,
                 nova_config_files=None, state_file=None,
                 kernel_release=None, bus=None):
        # ops: the privileged functions (composable.privsep.pci); root:
        # where sysfs is read. Tests give a fake tree for both. bus: the
        # PCI bus worked on, SysfsPci(ops, root) unless given.
        self.ops = ops if ops is not None else priv_pci
        self.root = root
        self.bus = bus if bus is not None else SysfsPci(self.ops, root)
        self.find_timeout = (find_timeout if find_timeout is not None
                             else CONF.compute_node.pci_find_timeout)
        self.nova_config_files = list(
            nova_config_files if nova_config_files is not None
            else CONF.compute_node.nova_config_files)
        self.records = DeviceRecords(
            state_file or CONF.compute_node.pci_state_file)
        self.kernel_release = kernel_release
        self._lock = threading.Lock()
        self._device_locks = collections.defaultdict(threading.Lock)
        self._pf_locks = collections.defaultdict(threading.Lock)
        # Held while a function is searched for: two devices of one model
        # searched at once would both find the first new function; one
        # after the other, the second knows the first's.
        self._search_lock = threading.Lock()
        self.baseline = None
        # Why device work is refused on this host, or None.
        self.refusal = None

    # ------------------------------------------------------------ start

    def start(self):
        """Load the records, note the host's own functions, and check the
        host; returns the problems that make it refuse device work."""
        with self._lock:
            self.records.load()
            held = self.records.addresses()
            try:
                functions = self.bus.functions()
                boot = self.bus.boot_id()
            except (pci.PciError, OSError) as exc:
                raise _fail('listing the PCI functions of this host', exc)
            if boot and boot == self.records.boot_id and \
                    self.records.baseline is not None:
                # Restarted within one boot of the host: a function that
                # appeared since the first start was composed (perhaps
                # while the agent was down), not the host's own.
                own = set(self.records.baseline) & set(functions)
            else:
                own = set(functions)
            self.baseline = sorted(own - held)
            if boot:
                self.records.baseline = self.baseline
                self.records.boot_id = boot
                self._save()
        try:
            problems = self.bus.host_checks(self.kernel_release)
        except (pci.PciError, OSError) as exc:
            raise _fail('checking this host for PCI passthrough', exc)
        problems += self._start_spec_problems()
        if problems:
            self.refusal = ('device work is refused on this host: %s'
                            % '; '.join(problems))
            LOG.error('Leased PCI devices cannot be used on this host: '
                      '%s', '; '.join(problems))
        else:
            self.refusal = None
            LOG.info('Leased PCI devices are bound to vfio-pci on this '
                     'host (%(n)d held, %(own)d functions of its own)',
                     {'n': len(held), 'own': len(self.baseline)})
        return problems

    def restore(self):
        """Bind the devices the records hold to vfio-pci again, where
        their functions still are: after the host restarted, its kernel
        enumerated them again with no driver override (the fabric kept
        them composed).

        Returns what the conductor is told (ConductorAPI.
        report_devices_restored): one ``{'lease_uuid', 'device_uuid',
        'address', 'ok', 'message'}`` per device bound again (ok) or that
        could not be (not ok, the message says why). Devices already on
        vfio-pci (the agent restarted, the host did not) are not listed.
        Those that failed stay recorded, so an unbind still removes
        them."""
        if self.refusal:
            return []
        with self._lock:
            held = dict(self.records.devices)
        results = []
        for uuid, record in sorted(held.items()):
            result = {'lease_uuid': record.get('lease'), 'device_uuid': uuid,
                      'address': record['address']}
            with self._device_lock(uuid):
                with self._lock:
                    known = sorted(set(self.baseline) |
                                   self.records.addresses(but=uuid))
                try:
                    # Not waited for: a function that is not there now
                    # went with the fabric while the agent was away.
                    answer = self.bus.attach_function(
                        _recorded_locator(record), known,
                        timeout=RESTORE_FIND_TIMEOUT, interchangeable=1,
                        recorded=record['address'])
                except (pci.PciError, ValueError, OSError) as exc:
                    results.append(dict(result, ok=False, message=str(exc)))
                    continue
                result['address'] = answer.address
                if not answer.ok:
                    results.append(dict(result, ok=False,
                                        message=answer.message))
                elif answer.address != record['address']:
                    with self._lock:
                        self.records.devices[uuid] = dict(
                            record, address=answer.address)
                        self._save()
                if answer.ok and answer.bound:
                    LOG.info('Device %(dev)s of lease %(lease)s at '
                             '%(addr)s is on vfio-pci again',
                             {'dev': uuid, 'lease': record.get('lease'),
                              'addr': answer.address})
                    results.append(dict(
                        result, ok=True,
                        message='%s is bound to vfio-pci again after the '
                                'host restarted' % answer.address))
        for result in results:
            if not result['ok']:
                LOG.error('Device %(dev)s of lease %(lease)s, held on this '
                          'host, cannot be bound to vfio-pci again: '
                          '%(problem)s', {'dev': result['device_uuid'],
                                          'lease': result['lease_uuid'],
                                          'problem': result['message']})
        return results

    def _nova_conf_text(self):
        """The text of Nova's configuration files on this host; an
        unreadable one raises DriverError."""
        texts = []
        for path in self.nova_config_files:
            try:
                with open(path) as f:
                    texts.append(f.read())
            except FileNotFoundError:
                continue
            except OSError as exc:
                raise exception.DriverError(
                    reason='cannot read Nova\'s configuration %s (%s), so '
                           'cannot tell whether its [pci] device_spec '
                           'claims fabric devices: let the agent\'s user '
                           'read it, or take it off [compute_node]'
                           'nova_config_files' % (path, exc.strerror))
        return '\n'.join(texts)

    def _start_spec_problems(self):
        try:
            text = self._nova_conf_text()
        except exception.DriverError as exc:
            return [exc.message]
        problems = []
        for option, value in pci.nova_pci_specs(text):
            try:
                parsed = json.loads(value)
            except ValueError:
                problems.append('%s = %s is not JSON, so nothing says which '
                                'devices Nova takes; fix it' % (option,
                                                                value))
                continue
            for entry in parsed if isinstance(parsed, list) else [parsed]:
                if matches_any_device(entry):
                    problems.append(
                        '%s entry %s matches every PCI device, so Nova would '
                        'hand composed devices to its own instances; '
                        'restrict it with vendor_id/product_id or address '
                        'to the host\'s own devices' % (
                            option, json.dumps(entry, sort_keys=True)))
        with self._lock:
            locators = [_recorded_locator(r).to_primitive()
                        for r in self.records.devices.values()]
        for conflict in pci.nova_device_spec_conflicts(text, locators):
            if conflict['locator'] is not None:
                problems.append(conflict['message'])
        return problems

    # ------------------------------------------------------------ attach

    def attach(self, lease, devices):
        """``{device uuid: host PCI address}``, each function on
        vfio-pci; DriverError for the first device that cannot be."""
        if self.baseline is None:
            self.start()
        if self.refusal:
            raise exception.DriverError(reason=self.refusal)
        # Debug-level marks of the attach's phases (tools/bench/
        # device_bind.py reads them); nothing at the default level.
        LOG.debug('Lease %(lease)s: attaching %(n)d device(s)',
                  {'lease': lease['uuid'], 'n': len(devices)})
        result = {}
        for device in devices:
            if device.get('sriov'):
                result[device['uuid']] = self._attach_vf(lease, device)
        devices = [d for d in devices if not d.get('sriov')]
        # Devices of one model still to be found for this lease: any new
        # function of that model up to their number is one of them.
        locators = {d['uuid']: device_locator(d) for d in devices}
        with self._lock:
            recorded = set(self.records.devices)
        pending = collections.Counter(
            _model(locators[d['uuid']]) for d in devices
            if not locators[d['uuid']].pci_address and
            d['uuid'] not in recorded)
        for device in devices:
            locator = locators[device['uuid']]
            model = _model(locator)
            with self._device_lock(device['uuid']):
                result[device['uuid']], found = self._attach_one(
                    lease, device, locator, max(1, pending[model]))
            if found and not locator.pci_address:
                pending[model] -= 1
        return result

    def _device_lock(self, uuid):
        with self._lock:
            return self._device_locks[uuid]

    def _save(self):
        try:
            self.records.save()
        except OSError as exc:
            raise exception.DriverError(
                reason='cannot write the PCI device records %s: %s; make '
                       'its directory writable by the agent' %
                       (self.records.path, exc.strerror))

    def _attach_one(self, lease, device, locator, interchangeable):
        """The device's address, and whether it was searched for now;
        ``locator``: a locator.Locator."""
        device = dict(device, lease_uuid=lease['uuid'])
        nova_conf_text = self._nova_conf_text()
        what = 'finding device %s on this host' % device['uuid']
        with self._search_lock:
            with self._lock:
                record = self.records.devices.get(device['uuid'])
                known = sorted(set(self.baseline) |
                               self.records.addresses(but=device['uuid']))
            started = time.monotonic()
            try:
                answer = self.bus.attach_function(
                    locator, known, timeout=self.find_timeout,
                    interchangeable=interchangeable,
                    recorded=record['address'] if record else None,
                    nova_conf_text=nova_conf_text or None)
            except (pci.PciError, ValueError, OSError) as exc:
                raise _fail(what, exc, device=device['uuid'])
            address = answer.address
            if answer.find_ms is not None and answer.bind_ms is not None:
                LOG.debug('Device %(dev)s of lease %(lease)s: found at '
                          '%(addr)s in %(find).0f ms, IOMMU group and '
                          'vfio-pci in %(bind).0f ms (the PCI call took '
                          '%(call).0f ms)',
                          {'dev': device['uuid'], 'lease': lease['uuid'],
                           'addr': address, 'find': answer.find_ms,
                           'bind': answer.bind_ms, 'call': (
                               time.monotonic() - started) * 1000.0})
            # Noted before anything else is said about it: a detach after
            # a refused attach still takes the function off the bus.
            with self._lock:
                self.records.devices[device['uuid']] = {
                    'address': address, 'lease': lease_uuid(device),
                    'locator': locator.to_primitive()}
                self._save()
        if not answer.ok:
            raise _error('binding device %s at %s to vfio-pci'
                         % (device['uuid'], address), answer.error,
                         answer.message, device=device['uuid'],
                         address=address)
        if answer.bound:
            LOG.info('Device %(dev)s of lease %(lease)s at %(addr)s is on '
                     'vfio-pci (%(node)s)', {'dev': device['uuid'],
                                             'lease': lease['uuid'],
                                             'addr': address,
                                             'node': answer.vfio_node})
        return address, answer.found

    # ------------------------------------------------------------ detach

    def detach(self, lease, devices):
        """Release every device's function from vfio-pci and remove it
        from the bus; a function already gone is fine. Virtual functions
        stay on the bus (see the module's doc)."""
        # How many of this lease's devices of one model have no record
        # here: any function of that model that is no one else's is one
        # of them (see _detach_unrecorded).
        locators = {d['uuid']: device_locator(d) for d in devices
                    if not d.get('sriov')}
        with self._lock:
            unrecorded = collections.Counter(
                _model(locators[d['uuid']])[:2] for d in devices
                if not d.get('sriov') and
                d['uuid'] not in self.records.devices and
                not d.get('pci_address'))
        for device in devices:
            if device.get('sriov'):
                self._detach_vf(lease, device)
                continue
            with self._device_lock(device['uuid']):
                self._detach_one(lease, device, locators[device['uuid']],
                                 unrecorded)

    def _detach_one(self, lease, device, locator, unrecorded=None):
        with self._lock:
            record = self.records.devices.get(device['uuid'])
            baseline = set(self.baseline or ())
        address = record['address'] if record else device.get('pci_address')
        if record and record.get('locator'):
            # What this agent searched for, rather than what the
            # conductor says now.
            locator = _recorded_locator(record)
        if not address:
            self._detach_unrecorded(lease, device, locator, unrecorded or {})
            return
        try:
            address = pci.normalize_address(address)
            if address in baseline and not record:
                # Known only from the conductor, and a function the host
                # had before: never take the host's own device away.
                done = 'other'
            else:
                vendor, product, _serial = _model(locator)
                done = self.bus.detach_function(address, vendor, product)
        except (pci.PciError, ValueError, OSError) as exc:
            raise _fail('removing device %s at %s from this host'
                        % (device['uuid'], address), exc)
        if done == 'other':
            LOG.warning('Not removing %(addr)s for device %(dev)s of lease '
                        '%(lease)s: the function there is not that device',
                        {'addr': address, 'dev': device['uuid'],
                         'lease': lease['uuid']})
        elif done == 'removed':
            LOG.info('Device %(dev)s of lease %(lease)s: %(addr)s is off '
                     'the host\'s bus', {'dev': device['uuid'],
                                         'lease': lease['uuid'],
                                         'addr': address})
        with self._lock:
            if self.records.devices.pop(device['uuid'], None) is not None:
                self._save()

    def _detach_unrecorded(self, lease, device, locator, unrecorded):
        """Remove from the bus the function of a device this agent holds
        no record of, before the fabric unbinds it.

        The agent died after the fabric composed the device and before it
        noted the function (or never got to look for it): the function
        may have appeared meanwhile, and a fabric unbind under a function
        the host still has is a surprise removal. It is searched for by
        the locator (ids, serial where readable) among the functions that
        are neither the host's own nor another device's, without waiting:
        one that is not there now was never enumerated.

        Limit: a device of the same model composed for another lease and
        not yet found by that lease's attach is not told apart from this
        one. When this device was never composed (the fabric bind of the
        lease failed before it), that other function is the only match
        and is removed; that lease's attach then fails with "did not show
        up" and can be bound again.
        """
        vendor, product, _serial = _model(locator)
        with self._lock:
            started = self.baseline is not None
        if not (vendor and product) or not started:
            # Without ids any function would do, and without the list of
            # the host's own any of those could be one: take nothing.
            LOG.info('Device %(dev)s of lease %(lease)s was never found on '
                     'this host; nothing to remove',
                     {'dev': device['uuid'], 'lease': lease['uuid']})
            return
        with self._search_lock:
            with self._lock:
                known = sorted(set(self.baseline) |
                               self.records.addresses(but=device['uuid']))
            try:
                answer = self.bus.detach_unrecorded_function(
                    locator, known,
                    interchangeable=max(1, unrecorded.get((vendor, product),
                                                          1)))
            except pci.PciError as exc:
                if exc.code is not pci.ErrorCode.AMBIGUOUS:
                    raise _fail('removing device %s (no record on this '
                                'host) from this host' % device['uuid'],
                                exc)
                # Taking the wrong one would pull a device from another
                # lease: leave it to the fabric's unbind.
                LOG.warning('Device %(dev)s of lease %(lease)s has no '
                            'record on this host and cannot be told apart: '
                            '%(exc)s; not removing any function before the '
                            'fabric unbinds it',
                            {'dev': device['uuid'], 'lease': lease['uuid'],
                             'exc': exc})
                return
            except (pci.PciError, ValueError, OSError) as exc:
                raise _fail('removing device %s (no record on this host) '
                            'from this host' % device['uuid'], exc)
        if answer.get('done') == 'removed':
            LOG.info('Device %(dev)s of lease %(lease)s: %(addr)s, which '
                     'appeared with no record on this host, is off the '
                     'host\'s bus', {'dev': device['uuid'],
                                     'lease': lease['uuid'],
                                     'addr': answer['address']})
        else:
            LOG.info('Device %(dev)s of lease %(lease)s was never found on '
                     'this host; nothing to remove',
                     {'dev': device['uuid'], 'lease': lease['uuid']})

    # ------------------------------------------------------------ SR-IOV

    def _pf_lock(self, pf_address):
        with self._lock:
            return self._pf_locks[pf_address]

    @staticmethod
    def _sriov_info(device):
        info = device['sriov']
        try:
            pf = pci.normalize_address(info['pf_address'])
            index = int(info['vf_index'])
            count = int(info['vf_count'])
        except (KeyError, TypeError, ValueError) as exc:
            raise exception.DriverError(
                reason='device %s: not a usable virtual function (%s)'
                       % (device['uuid'], exc))
        if not 0 <= index < count:
            raise exception.DriverError(
                reason='device %s is virtual function %d of a pool of %d'
                       % (device['uuid'], index, count))
        return pf, index, count, info.get('vf_mode') or sriov.ON_DEMAND

    def _virtual_function(self, device, pf, index, count, mode):
        """The address of VF ``index`` of ``pf``, created first when the
        pool makes its VFs on demand. The caller holds the PF's lock."""
        if not self.bus.exists(pf):
            raise exception.DriverError(
                reason='the physical function %s of device %s is not on '
                       'this host: check the pool\'s pf_address against '
                       '"lspci -D" on this host' % (pf, device['uuid']))
        if self.bus.is_virtual_function(pf):
            raise exception.DriverError(
                reason='%s is itself a virtual function, not a physical '
                       'function: fix the pool\'s pf_address' % pf)
        try:
            current = self.bus.virtual_functions(pf)
        except (pci.PciError, OSError) as exc:
            raise _fail('reading the virtual functions of %s' % pf, exc)
        if index >= len(current):
            if mode == sriov.PRECREATED:
                raise exception.DriverError(
                    reason='%s has %d virtual function(s), so device %s '
                           '(virtual function %d) does not exist: the pool '
                           'expects them pre-created; set [compute_node]'
                           'sriov_numvfs = %s:%d on this host and restart '
                           'the agent' % (pf, len(current), device['uuid'],
                                          index, pf, count))
            # The kernel changes the count only through 0, which would
            # destroy held VFs: set_virtual_functions refuses that.
            made = self.set_virtual_functions(pf, count)
            current = [vf['address'] for vf in made['vfs']]
            LOG.info('Created %(n)d virtual functions on %(pf)s for the '
                     'leases of its pool', {'n': len(current), 'pf': pf})
            if index >= len(current):
                raise exception.DriverError(
                    reason='%s made %d virtual functions, not %d'
                           % (pf, len(current), count))
        address = current[index]
        if address == pf:
            raise exception.DriverError(
                reason='refusing to hand out the physical function %s'
                       % pf)
        with self._lock:
            holders = [u for u, r in self.records.devices.items()
                       if r['address'] == address and u != device['uuid']]
        if holders:
            raise exception.DriverError(
                reason='virtual function %s (%s of %s) is held by device '
                       '%s on this host; unbind that lease first' % (
                           address, index, pf, holders[0]))
        return address

    def _attach_vf(self, lease, device):
        pf, index, count, mode = self._sriov_info(device)
        with self._pf_lock(pf):
            address = self._virtual_function(device, pf, index, count,
                                             mode)
            locator = device_locator(device).with_address(address)
            device = dict(device, locator=locator.to_primitive(),
                          pci_address=address)
            with self._device_lock(device['uuid']):
                address, _found = self._attach_one(lease, device, locator,
                                                   1)
                with self._lock:
                    record = self.records.devices.get(device['uuid'])
                    if record is not None and record.get('pf') != pf:
                        record['pf'] = pf
                        self._save()
        return address

    def _detach_vf(self, lease, device):
        """Release the VF from vfio-pci (it stays on the bus); on demand,
        the PF's VFs go once none is held."""
        pf, _index, _count, mode = self._sriov_info(device)
        with self._pf_lock(pf):
            with self._device_lock(device['uuid']):
                with self._lock:
                    record = self.records.devices.get(device['uuid'])
                address = record['address'] if record else None
                try:
                    if address and self.bus.exists(address) and \
                            self.bus.release(address):
                        LOG.info('Device %(dev)s of lease %(lease)s: '
                                 'virtual function %(addr)s is off '
                                 'vfio-pci', {'dev': device['uuid'],
                                              'lease': lease['uuid'],
                                              'addr': address})
                except (pci.PciError, ValueError, OSError) as exc:
                    raise _fail('releasing virtual function %s of device '
                                '%s' % (address, device['uuid']), exc)
                with self._lock:
                    if self.records.devices.pop(device['uuid'],
                                                None) is not None:
                        self._save()
            if mode != sriov.ON_DEMAND or not self.bus.exists(pf):
                return
            try:
                current = self.bus.virtual_functions(pf)
            except (pci.PciError, OSError) as exc:
                raise _fail('reading the virtual functions of %s' % pf, exc)
            with self._lock:
                held = set(current) & self.records.addresses()
            if current and not held:
                self.set_virtual_functions(pf, 0)
                LOG.info('Removed the virtual functions of %(pf)s: no lease '
                         'holds one any more', {'pf': pf})

    def set_virtual_functions(self, pf_address, count):
        """Give the physical function ``count`` virtual functions; returns
        ``{'pf_address', 'vfs': [{'address', 'vendor_id', 'product_id',
        'iommu_group'}]}``. Refused while a VF that would go is leased."""
        try:
            address = pci.normalize_address(pf_address)
        except ValueError as exc:
            raise exception.DriverError(reason=str(exc))
        if isinstance(count, bool) or not isinstance(count, int) or \
                count < 0:
            raise exception.DriverError(
                reason='the number of virtual functions must be an '
                       'integer of at least 0, not %r' % (count,))
        with self._lock:
            try:
                current = self.bus.virtual_functions(address)
            except (pci.PciError, OSError) as exc:
                raise _fail('reading the virtual functions of %s' % address,
                            exc)
            leased = sorted(set(current) & self.records.addresses())
            if leased and count != len(current):
                raise exception.DriverError(
                    reason='%s cannot change from %d to %d virtual '
                           'functions: %s %s leased; unbind those leases '
                           'first' % (address, len(current), count,
                                      ', '.join(leased),
                                      'is' if len(leased) == 1 else 'are'))
            try:
                vfs = self.bus.set_num_vfs(address, count)
            except (pci.PciError, ValueError, OSError) as exc:
                raise _fail('setting %d virtual functions on %s'
                            % (count, address), exc)
            try:
                described = self.bus.describe_functions(vfs)
            except (pci.PciError, ValueError, OSError) as exc:
                raise _fail('reading the virtual functions of %s' % address,
                            exc)
        LOG.info('%(pf)s has %(n)d virtual function(s)',
                 {'pf': address, 'n': len(described)})
        return {'pf_address': address, 'vfs': described}

    def create_configured_vfs(self, items=None):
        """Apply ``[compute_node]sriov_numvfs``; the problems, logged."""
        problems = []
        for item in (CONF.compute_node.sriov_numvfs if items is None
                     else items):
            address, sep, count = str(item).strip().rpartition(':')
            try:
                if not sep:
                    raise ValueError('no count')
                count = int(count)
                self.set_virtual_functions(address, count)
            except ValueError:
                problems.append('[compute_node]sriov_numvfs item %r is not '
                                '<PF PCI address>:<count>' % (item,))
            except exception.DriverError as exc:
                problems.append(exc.message)
        for problem in problems:
            LOG.error('SR-IOV: %s', problem)
        return problems


def lease_uuid(device):
    return device.get('lease_uuid')
