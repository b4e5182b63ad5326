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

"""CXL memory of host-mode leases on this compute node.

A lease of a cxl pool holds chunks of CXL memory devices
(composable.common.media). On attach, for each device holding chunks of
the lease, the agent finds the device by the serial the fabric's locator
names, makes one RAM region of those chunks, moves its DAX device to
kmem and onlines its memory movable: the host gets a NUMA node without
CPUs (reported per chunk, ``numa_node``). On detach it offlines the
memory (a few attempts, the kernel migrating pages meanwhile; when they
cannot all move, the memory is onlined again and the detach fails naming
the processes that hold pages on the node), erases the region (the
device's sanitize when it has one and no other region maps it, else
zeros written through the DAX device) and destroys it. Memory is erased
before its capacity can go to anyone else.

Every step is recorded before it is taken, in ``[compute_node]
cxl_state_file`` (one record per region, by lease and device), so an
agent killed in the middle finishes or undoes at its next start
(``recover``): a region whose attach had not finished is erased and
destroyed (the conductor's resumed or repeated bind makes it again); a
detach that had begun is finished. A region the kernel holds on a leased
device but no record names was made by an attach cut short before the
record got its name: it is erased and destroyed too.

A record also names the boot of the host it was made in (the kernel's
boot id). After the host restarts, the kernel has forgotten every region,
decoder and DAX device, but a pooled device keeps what its memory held:
the regions of the earlier boot are made again on each device in the
order they were first made (the device hands out its capacity in that
order, so each covers what it covered before) and erased; the ones whose
lease is still bound here go online again (the lease gets its memory
back, on a NUMA node whose number may have changed), the others are
destroyed. A device no longer on the host's bus keeps its records, and
the next start (or the lease's next bind or unbind) tries again.

The privileged side is composable.privsep.cxl.
"""

import json
import os
import threading
import time

from oslo_log import log as logging

from composable.common import exception
from composable.common import locator as locator_mod
from composable.common import states
from composable import conf
from composable.privsep import cxl as priv_cxl

CONF = conf.CONF
LOG = logging.getLogger(__name__)

MIB = 1 << 20

# The steps of a record, in order. An attach records MAKING before the
# region exists, MADE once it is made, ONLINING before its memory goes
# online and ONLINE when the host has it; a detach records DETACHING
# first, SCRUBBED once the memory is erased.
MAKING = 'making'
MADE = 'made'
ONLINING = 'onlining'
ONLINE = 'online'
DETACHING = 'detaching'
SCRUBBED = 'scrubbed'


def _error(reason):
    return exception.DriverError(reason=reason)


class RegionRecords(object):
    """The state file: {key: record}, written whole and atomically."""

    def __init__(self, path):
        self.path = path
        self.regions = {}

    def load(self):
        try:
            with open(self.path) as f:
                data = json.load(f)
        except FileNotFoundError:
            data = {}
        except (OSError, ValueError) as exc:
            raise _error('cannot read the CXL region records %s: %s; fix '
                         'or remove the file' % (self.path, exc))
        self.regions = dict(data.get('regions') or {})
        return self

    def save(self):
        directory = os.path.dirname(self.path) or '.'
        os.makedirs(directory, exist_ok=True)
        tmp = self.path + '.tmp'
        with open(tmp, 'w') as f:
            json.dump({'regions': self.regions}, f, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)

    def put(self, key, record):
        self.regions[key] = record
        self.save()

    def drop(self, key):
        if self.regions.pop(key, None) is not None:
            self.save()


def record_key(lease_uuid, device):
    return '%s/%s' % (lease_uuid, device)


class CxlHostMemory(object):

    def __init__(self, ops=None, state_file=None, offline_attempts=None,
                 offline_interval=None, sanitize_timeout=None,
                 offline_block_timeout=None):
        self.ops = ops or priv_cxl
        self.records = RegionRecords(state_file or
                                     CONF.compute_node.cxl_state_file)
        self.offline_attempts = (offline_attempts or
                                 CONF.compute_node.cxl_offline_attempts)
        self.offline_interval = (
            CONF.compute_node.cxl_offline_interval
            if offline_interval is None else offline_interval)
        self.sanitize_timeout = (sanitize_timeout or
                                 CONF.compute_node.cxl_sanitize_timeout)
        self.offline_block_timeout = (
            offline_block_timeout or
            CONF.compute_node.cxl_offline_block_timeout)
        self._lock = threading.RLock()
        # Why this host cannot take CXL memory (set by start), or None.
        self.refusal = None
        # The kernel's boot id, read at start: records of another boot
        # name regions that no longer exist.
        self.boot = None
        # What the last rebuild did to the regions of leases bound here,
        # for the conductor (ConductorAPI.report_memory_restored).
        self.restored = []

    # ------------------------------------------------------------ life

    def start(self):
        """Check the kernel, then finish or undo what a previous run
        began. Raises DriverError naming what the host lacks."""
        missing = self.ops.probe()
        if missing:
            self.refusal = ('this host cannot take CXL memory: the kernel '
                            'lacks %s' % '; '.join(missing))
            raise _error(self.refusal)
        self.refusal = None
        self.boot = self.ops.boot_id()
        with self._lock:
            self.records.load()
            rebuilt = self.rebuild_after_restart()
            outcome = self.recover()
            outcome.update(rebuilt)
            return outcome

    def _stale(self, record):
        """Whether ``record`` was made in an earlier boot of the host (a
        record of an older agent, without a boot, is taken as this
        boot's)."""
        made_in = record.get('boot')
        return bool(made_in and self.boot and made_in != self.boot)

    def recover(self):
        """Finish or undo every record a previous run of this boot left
        unfinished; {key: 'kept' | 'undone' | 'detached' | error text}."""
        outcome = {}
        with self._lock:
            for key, record in sorted(self.records.regions.items()):
                if self._stale(record):
                    # Its region names mean nothing in this boot; the
                    # rebuild could not settle it (it said why).
                    continue
                if record['step'] == ONLINE:
                    outcome[key] = 'kept'
                    continue
                try:
                    self._teardown(key, record)
                    outcome[key] = ('detached' if record['step'] in
                                    (DETACHING, SCRUBBED) else 'undone')
                except exception.DriverError as exc:
                    outcome[key] = exc.message
                    LOG.error('CXL region of %(key)s: could not finish '
                              'what the previous run began: %(reason)s',
                              {'key': key, 'reason': exc.message})
        if outcome:
            LOG.info('CXL regions after restart: %s', outcome)
        return outcome

    # ------------------------------------------------------------ restart

    @staticmethod
    def _made_order(record):
        """Where the region of ``record`` came in its device's order: the
        index of its endpoint decoder (decoderP.N), which Linux commits,
        and gives capacity to, in turn."""
        decoder = record.get('decoder') or ''
        try:
            return int(decoder.rsplit('.', 1)[1])
        except (IndexError, ValueError):
            return -1

    def rebuild_after_restart(self, serial=None):
        """Settle the records of an earlier boot (of device ``serial``
        only, when given); {key: what became of it}."""
        outcome = {}
        with self._lock:
            devices = {}
            for key, record in self.records.regions.items():
                if self._stale(record) and serial in (None,
                                                      record['serial']):
                    devices.setdefault(record['serial'], []).append(
                        (key, record))
            for device_serial, found in sorted(devices.items()):
                found.sort(key=lambda item: self._made_order(item[1]))
                outcome.update(self._rebuild_device(device_serial, found))
        if outcome:
            LOG.info('CXL regions of the host\'s previous boot: %s',
                     outcome)
        return outcome

    def _rebuild_device(self, serial, found):
        outcome = {}
        memdev = self.ops.memdev_by_serial(serial)
        if memdev is None:
            reason = ('CXL memory device %s is not on this host\'s CXL bus '
                      'since the host restarted: what its regions held can '
                      'be neither erased nor put back from here' % serial)
            LOG.error('%s (leases %s)', reason,
                      ', '.join(r['lease'] for _, r in found))
            self._note_restored(found, reason)
            return {key: reason for key, _ in found}
        freed = []
        for position, (key, record) in enumerate(found):
            if record.get('decoder') is None:
                # The region never got its decoder recorded: nothing of
                # it went online, so nothing was written to erase.
                self.records.drop(key)
                outcome[key] = 'dropped'
                continue
            restore = record['step'] == ONLINE
            try:
                made = self.ops.make_region(memdev, record['size'])
            except priv_cxl.CxlError as exc:
                reason = ('making region %d of %d again on CXL memory device '
                          '%s (%s) after the host restarted failed: %s' % (
                              position + 1, len(found), record['device'],
                              memdev, exc.message))
                LOG.error(reason)
                # The order decides what memory each region covers: the
                # later ones wait for the next try.
                for later, _ in found[position:]:
                    outcome[later] = reason
                self._note_restored(found[position:], reason)
                break
            record.update(made, memdev=memdev, boot=self.boot, dax=None,
                          numa_node=None,
                          step=ONLINING if restore else DETACHING)
            self.records.put(key, record)
            # Erased in either case: another boot's kernel, or a region
            # made first by someone else, may have moved what this
            # capacity holds.
            self._erase(key, record)
            if restore:
                online = self.ops.online_region(record['region'])
                record.update(step=ONLINE, numa_node=online.get('numa_node'),
                              dax=online['dax'])
                self.records.put(key, record)
                outcome[key] = ('online again as NUMA node %s' %
                                record['numa_node'])
                self._note_restored([(key, record)])
            else:
                record['step'] = SCRUBBED
                self.records.put(key, record)
                freed.append((key, record))
        # Given back last-made first, as the kernel frees decoders.
        for key, record in reversed(freed):
            try:
                self._teardown(key, record)
                outcome[key] = 'erased and given back'
            except exception.DriverError as exc:
                outcome[key] = exc.message
        return outcome

    def _note_restored(self, found, reason=None):
        """Note, for the conductor, what became of the regions of bound
        leases among ``found`` ((key, record) pairs): online again, or
        not, for ``reason``."""
        for _, record in found:
            if reason is not None and record['step'] != ONLINE:
                # Not a bound lease's: its unbind was cut short.
                continue
            self.restored.append({
                'lease_uuid': record['lease'], 'device': record['device'],
                'ok': reason is None,
                'numa_node': None if reason else record.get('numa_node'),
                'extents': list(record.get('extents') or ()),
                'message': reason})

    def _erase(self, key, record):
        """Overwrite a region that is not in use: its memory offline (the
        kernel may have onlined it), its DAX device with device_dax."""
        region = record['region']
        if self.ops.offline_region(region, self.offline_block_timeout):
            raise _error('CXL region %s, made again after the host '
                         'restarted, could not be taken offline to be '
                         'erased' % region)
        self.ops.release_dax(region)
        self.ops.overwrite(region)

    def _device_has_stale(self, serial):
        return any(self._stale(r) and r['serial'] == serial
                   for r in self.records.regions.values())

    def _settle_stale(self, key):
        """The record of ``key`` as this boot knows it: an earlier boot's
        is rebuilt first (with the rest of its device's); raises
        DriverError when it cannot be."""
        record = self.records.regions.get(key)
        if record is None or not self._stale(record):
            return record
        outcome = self.rebuild_after_restart(record['serial'])
        record = self.records.regions.get(key)
        if record is not None and self._stale(record):
            raise _error(outcome.get(key) or 'the CXL region of %s was made '
                         'before the host restarted and could not be made '
                         'again' % key)
        return record

    def _check_ready(self):
        if self.refusal:
            raise _error(self.refusal)

    # ------------------------------------------------------------ attach

    @staticmethod
    def _groups(extents):
        """{device: [extent, ...]} in device order."""
        groups = {}
        for extent in extents:
            if extent.get('medium') != 'cxl' or not extent.get('device'):
                raise _error('extent %s is not a chunk of a CXL memory '
                             'device' % extent.get('uuid'))
            groups.setdefault(extent['device'], []).append(extent)
        return dict(sorted(groups.items()))

    def attach(self, lease, extents):
        """Make the lease's chunks a NUMA node of this host; {extent uuid:
        details}. Chunks that already have an online region of the lease
        keep it (a repeated call); the others on a device get one new
        region (a lease that grows by chunks gets one region per device
        and per attach)."""
        self._check_ready()
        details = {}
        with self._lock:
            for device, chunks in self._groups(extents).items():
                for record, held in self._attach_device(lease['uuid'],
                                                        device, chunks):
                    for extent in held:
                        details[extent['uuid']] = {
                            'mode': states.ATTACH_HOST, 'medium': 'cxl',
                            'cxl_device': device,
                            'region': record['region'],
                            'numa_node': record['numa_node'],
                            'size_mb': extent.get('size_mb')}
        return details

    def lease_records(self, lease_uuid, device=None):
        """{key: record} of the lease's regions (on ``device`` only when
        given), this boot's or not."""
        with self._lock:
            return {key: record for key, record in
                    self.records.regions.items()
                    if record.get('lease') == lease_uuid and
                    device in (None, record.get('device'))}

    def extents_of(self, lease_uuid):
        """The uuids of the chunks the lease has regions of here (made, or
        being made or given back)."""
        return sorted({uuid for record in
                       self.lease_records(lease_uuid).values()
                       for uuid in record.get('extents') or ()})

    def _free_key(self, lease_uuid, device):
        key = record_key(lease_uuid, device)
        n = 1
        while key in self.records.regions:
            n += 1
            key = '%s/%d' % (record_key(lease_uuid, device), n)
        return key

    def _attach_device(self, lease_uuid, device, chunks):
        """[(record, [chunk, ...])]: the online regions of the lease that
        already hold some of ``chunks``, and one new region for the
        rest."""
        wanted = {e['uuid']: e for e in chunks}
        found = []
        for key in sorted(self.lease_records(lease_uuid, device)):
            record = self._settle_stale(key)
            if record is None:
                continue
            mine = [wanted[u] for u in record['extents'] if u in wanted]
            if not mine:
                continue
            if record['step'] == ONLINE:
                found.append((record, mine))
                for extent in mine:
                    del wanted[extent['uuid']]
            else:
                # Begun and not finished (or a detach cut short): start
                # over from nothing, erasing what may have been written.
                self._teardown(key, record)
        if wanted:
            fresh = [e for e in chunks if e['uuid'] in wanted]
            found.append((self._make_region(
                lease_uuid, device, fresh,
                self._free_key(lease_uuid, device)), fresh))
        return found

    def _make_region(self, lease_uuid, device, chunks, key):
        uuids = sorted(e['uuid'] for e in chunks)
        try:
            serial = locator_mod.Locator.from_primitive(
                chunks[0].get('locator') or {}).serial
        except locator_mod.InvalidLocator as exc:
            raise _error('CXL memory device %s: %s' % (device, exc))
        if not serial:
            raise _error('the fabric gave no serial number for CXL memory '
                         'device %s' % device)
        if self._device_has_stale(serial):
            # A new region would take the capacity an old one covered
            # before that one is erased.
            self.rebuild_after_restart(serial)
            if self._device_has_stale(serial):
                raise _error('CXL memory device %s (serial %s) still holds '
                             'regions of the host\'s previous boot that '
                             'could not be made again and erased (the '
                             'agent\'s log says why); nothing new is made '
                             'on it until they are' % (device, serial))
        memdev = self.ops.memdev_by_serial(serial)
        if memdev is None:
            raise _error('CXL memory device %s (serial %s) is not on this '
                         'host\'s CXL bus; check that the host is wired to '
                         'it and that cxl_pci and cxl_mem are loaded' % (
                             device, serial))
        size = sum(int(e['size_mb']) for e in chunks) * MIB
        record = {'step': MAKING, 'lease': lease_uuid, 'device': device,
                  'serial': serial, 'memdev': memdev, 'size': size,
                  'boot': self.boot,
                  'extents': uuids, 'region': None, 'decoder': None,
                  'root_decoder': None, 'numa_node': None,
                  'known_regions': sorted(
                      set(self.ops.regions_of(memdev)) |
                      set(self.ops.untargeted_regions()))}
        self.records.put(key, record)
        try:
            made = self.ops.make_region(memdev, size)
            record.update(made, step=MADE)
            self.records.put(key, record)
            record['step'] = ONLINING
            self.records.put(key, record)
            online = self.ops.online_region(record['region'])
            node = online.get('numa_node')
            record.update(step=ONLINE, numa_node=node, dax=online['dax'])
            self.records.put(key, record)
        except (priv_cxl.CxlError, OSError, exception.DriverError) as exc:
            # OSError: the region records' file could not be written.
            reason = getattr(exc, 'message', None) or str(exc)
            LOG.error('Making a region of %(size)d MiB on CXL memory device '
                      '%(device)s (%(memdev)s) failed: %(reason)s',
                      {'size': size // MIB, 'device': device,
                       'memdev': memdev, 'reason': reason})
            try:
                self._teardown(key, record)
            except exception.DriverError as undo:
                reason += '; undoing it failed too: %s' % undo.message
            raise _error('making a region of %d MiB on CXL memory device %s '
                         '(%s) failed: %s' % (size // MIB, device, memdev,
                                              reason))
        cpus = self.ops.node_cpus(node) if node is not None else ''
        LOG.info('Lease %(lease)s: %(size)d MiB of CXL memory device '
                 '%(device)s online as NUMA node %(node)s (region '
                 '%(region)s%(cpus)s)',
                 {'lease': lease_uuid, 'size': size // MIB,
                  'device': device, 'node': node,
                  'region': record['region'],
                  'cpus': ', with CPUs %s!' % cpus if cpus else ''})
        return record

    # ------------------------------------------------------------ detach

    def detach(self, lease, extents):
        """Offline, erase and destroy the regions of the lease's chunks,
        the last made first. A region is given back whole: chunks that
        share one with chunks not named are refused before anything is
        changed. Raises DriverError (the memory stays online) when the
        kernel cannot move the pages off the node."""
        with self._lock:
            gone = self._going(lease, extents)
            # A device's decoders are freed last-made first.
            gone.sort(key=lambda item: self._made_order(item[1]),
                      reverse=True)
            for key, record in gone:
                self._teardown(key, record)

    def check_detach(self, lease, extents):
        """Raise DriverError, changing nothing, when detach(lease,
        extents) would be refused because chunks named share a region
        with chunks not named."""
        with self._lock:
            self._going(lease, extents)

    def _going(self, lease, extents):
        """[(key, record)] of the regions holding ``extents``."""
        gone = []
        for device, chunks in self._groups(extents).items():
            wanted = {e['uuid'] for e in chunks}
            for key in sorted(self.lease_records(lease['uuid'],
                                                 device)):
                record = self._settle_stale(key)
                if record is None:
                    continue
                held = set(record['extents'])
                if not held & wanted:
                    continue
                if record['step'] == ONLINE and not held <= wanted:
                    raise _error(
                        'the region of lease %s on CXL memory device '
                        '%s holds chunks %s; it is given back whole, '
                        'so detach them together' % (
                            lease['uuid'], device,
                            ', '.join(record['extents'])))
                gone.append((key, record))
        return gone

    def _offline(self, key, record):
        region = record['region']
        busy = []
        for attempt in range(self.offline_attempts):
            busy = self.ops.offline_region(region,
                                           self.offline_block_timeout)
            if not busy:
                return
            if attempt + 1 < self.offline_attempts:
                time.sleep(self.offline_interval)
        # Give back what was taken, so the host does not lose a part of
        # the node, and say who holds the pages.
        try:
            self.ops.online_blocks(busy)
        except priv_cxl.CxlError:
            pass
        self.ops.online_region(region)
        node = record.get('numa_node')
        holders = []
        if node is not None:
            holders = ['%s (pid %d, %d MiB)' % (comm, pid, pages * 4096 //
                                                MIB or 1)
                       for pid, comm, pages in self.ops.page_holders(node)]
        record['step'] = ONLINE
        self.records.put(key, record)
        raise _error(
            'the memory of CXL region %s (NUMA node %s) could not be '
            'offlined after %d attempts: %d memory block(s) hold pages the '
            'kernel cannot move (%s; refused, or still migrating after '
            '%s seconds each); %s. The memory stays online; stop or '
            'move those processes and unbind again' % (
                region, node, self.offline_attempts, len(busy),
                ', '.join(busy[:8]), self.offline_block_timeout,
                'pages on the node are held by ' + ', '.join(holders)
                if holders else 'no process shows pages on the node, so '
                'the kernel itself holds them (e.g. pinned or unmovable '
                'allocations)'))

    def _teardown(self, key, record):
        """Give the region of ``record`` back: offline (when it went
        online), erase, destroy; the record goes once it is all done."""
        try:
            self._teardown_steps(key, record)
        except priv_cxl.CxlError as exc:
            if exc.code is priv_cxl.ErrorCode.BUSY and \
                    record['step'] == SCRUBBED:
                # Linux resets a device's HDM decoders in the reverse of
                # the order they were committed: a region made before
                # another on the same device can only go after it.
                raise _error(
                    'CXL region %s of device %s is offline and erased, but '
                    'the kernel frees a device\'s decoders last-made '
                    'first: it stays until the regions made after it on '
                    'that device are given back; unbind again then (%s)'
                    % (record.get('region'), record['device'], exc.message))
            raise _error('giving back CXL region %s of device %s failed: %s'
                         % (record.get('region'), record['device'],
                            exc.message))
        except OSError as exc:
            # The region records' file could not be written.
            raise _error('giving back CXL region %s of device %s failed: %s'
                         % (record.get('region'), record['device'],
                            exc.strerror or exc))

    def _teardown_steps(self, key, record):
        memdev = record['memdev']
        if record['step'] == MAKING:
            # Killed before the region's name was recorded: a region on
            # the device that no record names, and that was not there
            # before this one began, is the one it made.
            named = {r.get('region') for k, r in
                     self.records.regions.items()
                     if k != key and not self._stale(r)}
            before = set(record.get('known_regions') or ())
            for region in (self.ops.regions_of(memdev) +
                           self.ops.untargeted_regions()):
                if region in named or region in before:
                    continue
                info = self.ops.region_info(region) or {}
                record.update(region=region,
                              decoder=(info.get('targets') or [None])[0],
                              root_decoder=self.ops.root_decoders()[0])
                break
        region = record.get('region')
        if region is None:
            # Nothing was made, or only an endpoint decoder was given
            # capacity: free it.
            self.ops.release_idle_decoders(memdev)
            self.records.drop(key)
            return
        if record['step'] != SCRUBBED:
            if record['step'] == ONLINE:
                record['step'] = DETACHING
                self.records.put(key, record)
            self._offline(key, record)
            self.ops.release_dax(region)
            sanitize = self._sanitize_after_destroy(record)
            if not sanitize and self.ops.region_info(region) is not None \
                    and self.ops.dax_of(region) is not None:
                self.ops.overwrite(region)
                record['step'] = SCRUBBED
                self.records.put(key, record)
        else:
            sanitize = False
        self.ops.destroy_region(region, record['decoder'] or
                                self._decoder_of(region),
                                record['root_decoder'])
        self.ops.release_idle_decoders(memdev)
        if sanitize:
            self.ops.sanitize(memdev, self.sanitize_timeout)
        LOG.info('CXL region %(region)s of device %(device)s (lease '
                 '%(lease)s) erased and destroyed',
                 {'region': region, 'device': record['device'],
                  'lease': record['lease']})
        self.records.drop(key)

    def _decoder_of(self, region):
        info = self.ops.region_info(region) or {}
        return (info.get('targets') or [None])[0]

    def _sanitize_after_destroy(self, record):
        """The device's sanitize erases all of it: used only when it has
        one and no other region maps it."""
        memdev = record['memdev']
        if not self.ops.can_sanitize(memdev):
            return False
        return set(self.ops.regions_of(memdev)) <= {record['region']}
