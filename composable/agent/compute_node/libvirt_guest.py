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

"""Guest-mode memory: leased extents hot-plugged into a running guest.

Each extent of a lease is an iSCSI LUN on a memory node. In guest mode
QEMU's own iSCSI initiator (libiscsi) logs in to it: the extent becomes a
``<disk type='network'>`` with ``protocol='iscsi'`` hot-plugged into the
running domain, and the guest turns the new virtio disk into swap. The
host's kernel initiator is not involved.

- The CHAP secret of an extent goes into a libvirt secret of its own
  (usage ``composable-extent-<extent uuid>``), ephemeral and private, so
  it is neither written to disk by libvirtd nor readable back through the
  libvirt API. It is never logged.
- Disks are plugged into the live domain only, never into its persistent
  definition: Nova owns the domain XML and regenerates it on hard reboot,
  resize, migration...; the libvirt hook plugs the disks again at every
  start.
- A disk carries the user alias ``ua-composable-<extent uuid>`` (how it is
  found again) and the serial ``<extent uuid without dashes>[:20]`` (how
  the guest can tell which extent a disk is, /sys/block/vdX/serial).
- attach() and detach() are idempotent: a disk already there, or already
  gone, is fine. A failed attach removes what it added.
- detach() is a PCI hot-unplug the guest acknowledges (ACPI eject); the
  guest kernel lets go of the disk even if it still swaps to it, and the
  pages on it are then lost to the guest. So before it unplugs a disk of
  a running guest, detach() asks the QEMU guest agent to run swapoff on
  it in the guest (``guest-exec`` of ``/bin/sh`` with GUEST_SWAPOFF_SCRIPT,
  which finds the disk by its serial). ``[compute_node] guest_swapoff``
  says what happens without an agent: ``required`` (default) keeps the
  disk and fails the detach with what to do, ``best_effort`` unplugs
  anyway, ``disabled`` never asks. A swapoff the guest refuses always
  keeps the disk.
- Before that swapoff, the guest's swap and MemAvailable are read the same
  way (GUEST_SWAPS_SCRIPT), and the whole detach is refused, nothing
  changed, when the pages on the disks would not fit back into the
  guest's memory (GuestSwapoffWouldNotFit). A detach of some of a lease's
  disks (a shrink) touches only those.
- After a hot-plug, the guest agent makes the new disk swap
  (GUEST_SWAPON_SCRIPT: mkswap + swapon, unless it is swap already);
  ``[compute_node] guest_swapon`` says when and what a failure means.
  With ``required`` attach() waits for it and a failure unplugs the
  disks again. With ``best_effort`` (default) attach() returns once the
  disks are plugged (like a volume attach, done when the device is
  there, not when the guest formatted it): a small pool of named
  threads (``guest-swapon-N``) runs the script afterwards and hands the
  outcome, {extent uuid: {'guest_device': '/dev/vdb'} or {'error':
  message}}, to ``swap_reporter`` (the agent casts it to the conductor,
  which records it on the lease). A detach of extents whose swap-on is
  still running waits for it (never unplugs under a running mkswap),
  and one not yet started is skipped. An attach of more extents of a
  lease (a grow) plugs only the new ones.
- guest_swaps() reads a guest's swap for the usage reports
  (composable.agent.compute_node.usage).
"""

import base64
import collections
from concurrent import futures
import threading
import time
from xml.etree import ElementTree

from oslo_concurrency import lockutils
from oslo_log import log as logging
from oslo_serialization import jsonutils
from oslo_utils import importutils

from composable.agent.compute_node import libvirt_connection
from composable.agent.compute_node import portal as iscsi_portal
from composable.common import exception
from composable.common import states
from composable.common import utils
from composable import conf

libvirt = importutils.try_import('libvirt')
libvirt_qemu = importutils.try_import('libvirt_qemu')

CONF = conf.CONF
LOG = logging.getLogger(__name__)

SECRET_USAGE_PREFIX = 'composable-extent-'
ALIAS_PREFIX = 'ua-composable-'
VIRTIO_SERIAL_LEN = 20
# How often the live XML is read while waiting for a disk to go away, and
# how often the unplug request is repeated: a guest that is still booting
# can miss the first ACPI eject request.
POLL_INTERVAL = 0.5
DETACH_RETRY_INTERVAL = 10.0

# libvirt error codes (virErrorNumber), so that this module can be
# imported, and tested, without the libvirt binding.
VIR_ERR_OPERATION_FAILED = 9
VIR_ERR_NO_DOMAIN = 42
VIR_ERR_OPERATION_INVALID = 55
VIR_ERR_NO_SECRET = 66
VIR_ERR_DEVICE_MISSING = 99
VIR_ERR_AGENT_UNRESPONSIVE = 86
VIR_DOMAIN_AFFECT_LIVE = 1
VIR_SECRET_USAGE_TYPE_ISCSI = 3

# Seconds libvirt waits for one answer of the guest agent.
GUEST_AGENT_TIMEOUT = 10
# Seconds between the first two guest-exec-status polls of a command run
# in the guest; the wait doubles after each poll, up to poll_interval / 5.
# A bind waits for the swapon in the guest, which takes tens of ms: a
# fixed 100 ms poll added up to 100 ms to every bind.
GUEST_EXEC_FIRST_POLL = 0.005
# Run by the guest agent in the guest, with the disk's serial as $1 (POSIX
# sh, busybox included): swapoff of the virtio disk with that serial when
# it is swap. Prints what it did; exits with swapoff's status.
GUEST_SWAPOFF_SCRIPT = r'''for d in /sys/block/*; do
  [ "$(cat "$d/serial" 2>/dev/null)" = "$1" ] || continue
  dev=/dev/${d##*/}
  if grep -q "^$dev " /proc/swaps; then
    swapoff "$dev" || exit $?
    echo "swapoff $dev"
  else
    echo "not-swap $dev"
  fi
  exit 0
done
echo "no-disk"
'''


# Run by the guest agent in the guest once a disk was hot-plugged, with
# the disk's serial as $1, the swap priority as $2 and how many tenths of
# a second to wait for the disk to show up as $3: mkswap and swapon of the
# virtio disk with that serial unless it is swap already (the image may
# turn new disks into swap itself, even at the same moment). Prints what
# it did: "swapon DEV", "already-swap DEV"; exits 3 with "no-disk" when
# the disk did not show up. A bind waits for it, and the guest sees the
# disk some time after the hot-plug returns: it looks every 20 ms for the
# first 200 ms, then every 100 ms (a guest slow to see the disk is not
# kept busier by the looking), and reads the serials and /proc/swaps with
# the shell's own read (no process per disk and per look, which costs a
# guest under TCG milliseconds of its CPU each).
GUEST_SWAPON_SCRIPT = r"""is_swap() {
  while read -r name rest; do [ "$name" = "$1" ] && return 0; done \
    < /proc/swaps
  return 1
}
waited=0
while :; do
  for d in /sys/block/*; do
    s=
    read -r s 2>/dev/null < "$d/serial"
    [ "$s" = "$1" ] || continue
    dev=/dev/${d##*/}
    [ -b "$dev" ] || break
    if is_swap "$dev"; then echo "already-swap $dev"; exit 0; fi
    if mkswap "$dev" >/dev/null 2>&1; then
      swapon -p "$2" "$dev" 2>/dev/null || swapon "$dev"
    fi
    if is_swap "$dev"; then echo "swapon $dev"; exit 0; fi
    echo "mkswap/swapon of $dev failed" >&2
    exit 1
  done
  if [ "$waited" -ge "$(($3 * 10))" ]; then echo "no-disk"; exit 3; fi
  if [ "$waited" -lt 20 ]; then
    sleep 0.02; waited=$((waited + 2))
  else
    sleep 0.1; waited=$((waited + 10))
  fi
done
"""
# Run by the guest agent in the guest to read its swap: the virtio disks
# with their serials, MemAvailable, and /proc/swaps.
GUEST_SWAPS_SCRIPT = r"""for d in /sys/block/*; do
  s=$(cat "$d/serial" 2>/dev/null) || continue
  [ -n "$s" ] && echo "disk ${d##*/} $s"
done
grep -E '^(MemTotal|MemAvailable):' /proc/meminfo
echo "swaps"
cat /proc/swaps
"""
# Exit status of the swapon script when the disk never showed up.
NO_DISK_EXIT = 3
# Threads that run the swap-on of plugged disks in the background
# (guest_swapon = best_effort): each waits on one guest at a time, mostly
# idle (polling its guest agent).
SWAPON_WORKERS = 4


# The background swap-ons of this process, shared by its attachers (the
# agent has one; tests and tools may make several): the (instance,
# extent) pairs whose script runs in a guest now, and those a detach is
# taking away (a swap-on of theirs that has not started is skipped).
_SWAP_COND = threading.Condition()
_SWAP_RUNNING = collections.Counter()
_SWAP_BLOCKED = collections.Counter()


def _drop_zeros(counter):
    for key in [k for k, n in counter.items() if n <= 0]:
        del counter[key]


class _Cancelled(Exception):
    """A background swap-on given up before it started in the guest: its
    disk is being detached."""


def _still_active(domain):
    try:
        return bool(domain.isActive())
    except Exception:
        return False


class GuestSwaps(object):
    """What a guest said about its swap: ``disks`` {serial: device name},
    ``swaps`` [host_swap.SwapEntry-like tuples], ``mem_available_kb``
    and ``mem_total_kb`` (None if it did not say)."""

    def __init__(self, disks, swaps, mem_available_kb, mem_total_kb=None):
        self.disks = disks
        self.swaps = swaps
        self.mem_available_kb = mem_available_kb
        self.mem_total_kb = mem_total_kb

    def entry_of(self, serial):
        """The swap area of the disk with ``serial``, or None."""
        name = self.disks.get(serial)
        if name is None:
            return None
        for entry in self.swaps:
            if entry[0] == '/dev/' + name:
                return entry
        return None

    @classmethod
    def parse(cls, text):
        disks = {}
        swaps = []
        available = None
        total = None
        in_swaps = False
        for line in text.splitlines():
            parts = line.split()
            if not parts:
                continue
            if in_swaps:
                if parts[0] == 'Filename' or len(parts) < 5:
                    continue
                try:
                    swaps.append((parts[0], parts[1], int(parts[2]),
                                  int(parts[3]), int(parts[4])))
                except ValueError:
                    continue
            elif parts[0] == 'disk' and len(parts) == 3:
                disks[parts[2]] = parts[1]
            elif parts[0] == 'MemAvailable:' and len(parts) >= 2:
                available = int(parts[1])
            elif parts[0] == 'MemTotal:' and len(parts) >= 2:
                total = int(parts[1])
            elif parts == ['swaps']:
                in_swaps = True
        if available is None or not in_swaps:
            raise ValueError('no MemAvailable or /proc/swaps in %r'
                             % text[:200])
        return cls(disks, swaps, available, total)


class GuestSwapoffWouldNotFit(exception.DriverError):
    """swapoff in the guest would bring back more pages than its free
    memory can hold."""
    code = 409
    error_code = 'composable.swap.would_not_fit'


class GuestAgentUnavailable(Exception):
    """The guest agent of a domain cannot be asked (none configured,
    not connected, guest-exec disabled...).

    ``transient``: the domain has an agent channel but nothing answers on
    it yet (the guest is still booting, or qemu-ga is restarting): worth
    waiting for, unlike a domain that has no agent channel at all."""

    def __init__(self, message, transient=False):
        super(GuestAgentUnavailable, self).__init__(message)
        self.transient = transient


# What QEMU's initiator (libiscsi) reports when a login is refused: tgt
# answers "Authentication failure" to wrong CHAP credentials and "Target
# not found" to an initiator the export is not bound to.
AUTH_FAILURE_HINTS = ('authentication failure', 'authorization failure')
NOT_EXPORTED_HINTS = ('target not found', 'not found(515)')


def secret_usage(extent_uuid):
    return SECRET_USAGE_PREFIX + extent_uuid


def disk_alias(extent_uuid):
    return ALIAS_PREFIX + extent_uuid


def disk_serial(extent_uuid):
    return extent_uuid.replace('-', '')[:VIRTIO_SERIAL_LEN]


def target_devs():
    """vdb, vdc, ... vdz, vdaa, vdab, ... (vda is the root disk)."""
    letters = 'abcdefghijklmnopqrstuvwxyz'
    for c in letters[1:]:
        yield 'vd' + c
    for c1 in letters:
        for c2 in letters:
            yield 'vd' + c1 + c2


def disk_xml(extent, initiator_iqn, target_dev):
    """The <disk> element that hot-plugs one extent."""
    host, port = iscsi_portal.parse_portal(extent.get('portal'))
    disk = ElementTree.Element('disk', type='network', device='disk')
    ElementTree.SubElement(disk, 'driver', name='qemu', type='raw',
                           cache='none')
    source = ElementTree.SubElement(
        disk, 'source', protocol='iscsi',
        name='%s/%s' % (extent['target_iqn'], extent['lun']))
    ElementTree.SubElement(source, 'host', name=host, port=str(port))
    if initiator_iqn:
        initiator = ElementTree.SubElement(source, 'initiator')
        ElementTree.SubElement(initiator, 'iqn', name=initiator_iqn)
    if extent.get('chap_username'):
        auth = ElementTree.SubElement(source, 'auth',
                                      username=extent['chap_username'])
        ElementTree.SubElement(auth, 'secret', type='iscsi',
                               usage=secret_usage(extent['uuid']))
    ElementTree.SubElement(disk, 'target', dev=target_dev, bus='virtio')
    ElementTree.SubElement(disk, 'serial').text = disk_serial(extent['uuid'])
    ElementTree.SubElement(disk, 'alias', name=disk_alias(extent['uuid']))
    return ElementTree.tostring(disk, encoding='unicode')


def secret_xml(extent_uuid):
    secret = ElementTree.Element('secret', ephemeral='yes', private='yes')
    ElementTree.SubElement(secret, 'description').text = (
        'CHAP secret of composable memory extent %s' % extent_uuid)
    usage = ElementTree.SubElement(secret, 'usage', type='iscsi')
    ElementTree.SubElement(usage, 'target').text = secret_usage(extent_uuid)
    return ElementTree.tostring(secret, encoding='unicode')


class LiveDisk(object):
    """A disk of the live domain XML."""

    def __init__(self, element):
        self.element = element
        target = element.find('target')
        self.target_dev = target.get('dev') if target is not None else None
        alias = element.find('alias')
        self.alias = alias.get('name') if alias is not None else None
        source = element.find('source')
        self.protocol = source.get('protocol') if source is not None \
            else None
        self.source_name = source.get('name') if source is not None \
            else None

    def xml(self):
        return ElementTree.tostring(self.element, encoding='unicode')


def live_disks(domain_xml):
    root = ElementTree.fromstring(domain_xml)
    return [LiveDisk(d) for d in root.findall('./devices/disk')]


def find_disk(disks, extent):
    """The live disk of an extent: by its alias, else by its LUN."""
    alias = disk_alias(extent['uuid'])
    for disk in disks:
        if disk.alias == alias:
            return disk
    if extent.get('target_iqn') is not None and extent.get('lun') is not None:
        name = '%s/%s' % (extent['target_iqn'], extent['lun'])
        for disk in disks:
            if disk.protocol == 'iscsi' and disk.source_name == name:
                return disk
    return None


def _error_code(exc):
    try:
        return exc.get_error_code()
    except Exception:
        return None


def _scrub(text, secrets):
    text = str(text)
    for secret in secrets:
        if secret:
            text = text.replace(secret, '***')
    return text


class GuestMemoryAttacher(object):
    """Hot-plugs memory extents into running libvirt domains.

    ``connection`` is the agent's LibvirtConnection (libvirt_connection),
    shared with the device attacher; without it one is made from ``uri``
    and ``connect`` (a callable taking the URI and returning a libvirt
    connection). The timeouts can be injected; by default they come from
    the [compute_node] options. ``swap_reporter``, when set, is called
    with (lease uuid, instance uuid, outcome) when a background swap-on
    ends (see swapon_later).
    """

    def __init__(self, uri=None, connect=None, attach_timeout=None,
                 detach_timeout=None, poll_interval=POLL_INTERVAL,
                 detach_retry_interval=DETACH_RETRY_INTERVAL,
                 connection=None, swap_reporter=None):
        if connection is None:
            connection = libvirt_connection.LibvirtConnection(
                uri, connect=connect)
        self.connection = connection
        self.uri = connection.uri
        self.attach_timeout = (attach_timeout if attach_timeout is not None
                               else CONF.compute_node.attach_timeout)
        self.detach_timeout = (detach_timeout if detach_timeout is not None
                               else CONF.compute_node.detach_timeout)
        self.poll_interval = poll_interval
        self.detach_retry_interval = detach_retry_interval
        self.swap_reporter = swap_reporter
        # Background swap-ons: the pool (made when first needed), this
        # attacher's jobs queued or running, and the process's running
        # and blocked (instance, extent) pairs.
        self._swap_pool = None
        self._swap_jobs = 0
        self._swap_cond = _SWAP_COND
        self._swap_running = _SWAP_RUNNING
        self._swap_blocked = _SWAP_BLOCKED

    # ---------------------------------------------------------- libvirt

    def _connection(self):
        return self.connection.get(
            'guest-mode memory cannot be attached on this host')

    def domain(self, instance_uuid, missing_ok=False):
        """The live domain of an instance (None when it has none and
        ``missing_ok``)."""
        return self._domain(instance_uuid, missing_ok=missing_ok)

    def _domain(self, instance_uuid, missing_ok=False):
        conn = self._connection()
        try:
            return conn.lookupByUUIDString(instance_uuid)
        except Exception as exc:
            if _error_code(exc) == VIR_ERR_NO_DOMAIN:
                if missing_ok:
                    return None
                raise exception.DriverError(
                    reason='instance %s has no libvirt domain on this host '
                           '(%s); guest-mode memory goes to a running guest '
                           'on the host the lease is bound to' %
                           (instance_uuid, self.uri))
            raise

    def _live_disks(self, domain):
        return live_disks(domain.XMLDesc(0))

    # ---------------------------------------------------------- secrets

    def _lookup_secret(self, extent_uuid):
        conn = self._connection()
        try:
            return conn.secretLookupByUsage(VIR_SECRET_USAGE_TYPE_ISCSI,
                                            secret_usage(extent_uuid))
        except Exception as exc:
            if _error_code(exc) == VIR_ERR_NO_SECRET:
                return None
            raise

    def _ensure_secret(self, extent):
        """Define (or refresh) the extent's secret; True if defined now."""
        secret = self._lookup_secret(extent['uuid'])
        created = secret is None
        if created:
            secret = self._connection().secretDefineXML(
                secret_xml(extent['uuid']), 0)
        try:
            secret.setValue(extent['chap_secret'].encode('utf-8'), 0)
        except Exception:
            if created:
                self._undefine_secret(extent['uuid'])
            raise
        return created

    def remove_secret(self, extent_uuid):
        """Remove the libvirt secret of an extent; True when there was
        one. Secrets are libvirt objects of their own: this takes no
        domain, so it may run while the libvirt hook holds the domain."""
        return self._undefine_secret(extent_uuid)

    def _undefine_secret(self, extent_uuid):
        secret = self._lookup_secret(extent_uuid)
        if secret is None:
            return False
        try:
            secret.undefine()
        except Exception as exc:
            if _error_code(exc) != VIR_ERR_NO_SECRET:
                raise
        return True

    # ----------------------------------------------------------- attach

    def attach(self, instance_uuid, extents, initiator_iqn=None,
               lease_uuid=None):
        """Hot-plug the extents into the running domain instance_uuid.

        Returns {extent_uuid: {"target_dev": "vdb", ...}}. Extents whose
        disk is already there are reported as they are. If one extent
        fails, the disks and secrets this call added are removed and
        DriverError (DriverTimeout) is raised.

        The guest then makes the disks swap: with guest_swapon =
        required before this returns (the details say ``guest_device``;
        a failure unplugs the disks again and raises), with best_effort
        afterwards in the background (swapon_later: the outcome goes to
        ``swap_reporter`` with ``lease_uuid``).
        """
        initiator_iqn = initiator_iqn or CONF.compute_node.initiator_iqn
        with lockutils.lock('composable-guest-%s' % instance_uuid):
            details = self._attach(instance_uuid, extents, initiator_iqn)
            if CONF.compute_node.guest_swapon == 'best_effort':
                # Queued under the lock: a detach that comes next sees it.
                self.swapon_later(instance_uuid,
                                  [e['uuid'] for e in extents], lease_uuid)
            return details

    def _attach(self, instance_uuid, extents, initiator_iqn):
        domain = self._domain(instance_uuid)
        if not domain.isActive():
            raise exception.DriverError(
                reason='instance %s is not running; guest-mode memory is '
                       'hot-plugged into running guests only (the libvirt '
                       'hook attaches it when the guest starts)' %
                       instance_uuid)
        disks = self._live_disks(domain)
        used = {d.target_dev for d in disks if d.target_dev}
        details = {}
        added = []    # extents this call plugged in
        touched = []  # extents this call defined or refreshed a secret for
        secrets = [e.get('chap_secret') for e in extents]
        try:
            for extent in extents:
                existing = find_disk(disks, extent)
                if existing is not None:
                    LOG.info('Extent %(extent)s is already plugged into '
                             'instance %(instance)s as %(dev)s',
                             {'extent': extent['uuid'],
                              'instance': instance_uuid,
                              'dev': existing.target_dev})
                    details[extent['uuid']] = self._details(
                        extent, instance_uuid, existing.target_dev)
                    continue
                dev = next(d for d in target_devs() if d not in used)
                if extent.get('chap_username'):
                    touched.append(extent)
                    self._ensure_secret(extent)
                xml = disk_xml(extent, initiator_iqn, dev)
                self._plug(domain, instance_uuid, extent, xml, dev,
                           initiator_iqn, secrets)
                added.append(extent)
                used.add(dev)
                details[extent['uuid']] = self._details(extent,
                                                        instance_uuid, dev)
            if CONF.compute_node.guest_swapon == 'required':
                self._swapon_in_guest(domain, instance_uuid, extents,
                                      details)
        except Exception:
            self._roll_back(domain, instance_uuid, added, touched)
            raise
        return details

    @staticmethod
    def _details(extent, instance_uuid, dev):
        return {'mode': states.ATTACH_GUEST,
                'instance_uuid': instance_uuid,
                'target_dev': dev, 'alias': disk_alias(extent['uuid']),
                'target_iqn': extent.get('target_iqn'),
                'lun': extent.get('lun')}

    def _plug(self, domain, instance_uuid, extent, xml, dev, initiator_iqn,
              secrets):
        what = ('memory extent %s (target %s lun %s at %s) as %s of '
                'instance %s' % (extent['uuid'], extent.get('target_iqn'),
                                 extent.get('lun'), extent.get('portal'),
                                 dev, instance_uuid))
        LOG.info('Hot-plugging %s', what)
        start = time.monotonic()
        try:
            utils.call_with_timeout(
                lambda: domain.attachDeviceFlags(xml,
                                                 VIR_DOMAIN_AFFECT_LIVE),
                self.attach_timeout, 'hot-plug of ' + what)
        except exception.DriverTimeout:
            raise
        except Exception as exc:
            msg = _scrub(exc, secrets)
            lower = msg.lower()
            if any(h in lower for h in AUTH_FAILURE_HINTS):
                hint = ('the target refused the CHAP login: the CHAP '
                        'credentials of the extent do not match its export')
            elif any(h in lower for h in NOT_EXPORTED_HINTS):
                hint = ('the memory node does not export this target to '
                        'initiator %s (not exported, or exported to another '
                        'initiator: [compute_node]initiator_iqn must be the '
                        'initiator_iqn registered for this host)' %
                        initiator_iqn)
            else:
                hint = ('check that the memory node exports the extent to '
                        'initiator %s with the CHAP credentials of the '
                        'lease, and that this host reaches the portal' %
                        initiator_iqn)
            raise exception.DriverError(
                reason='could not hot-plug %s: %s; %s' % (what, msg, hint))
        LOG.info('Hot-plugged extent %(extent)s into instance %(instance)s '
                 'as %(dev)s in %(secs).1fs',
                 {'extent': extent['uuid'], 'instance': instance_uuid,
                  'dev': dev, 'secs': time.monotonic() - start})

    def _roll_back(self, domain, instance_uuid, added, touched):
        still_plugged = set()
        if added:
            try:
                # Disks the guest has not made swap may go without its
                # agent; those it did are turned off first when it answers.
                self._unplug(domain, instance_uuid, added,
                             swapoff_mode='best_effort')
            except Exception:
                LOG.exception('Could not remove the disks of instance %s '
                              'added by a failed attach; detach the lease '
                              'to retry', instance_uuid)
                # Their secrets stay with them, for the retry.
                still_plugged = {e['uuid'] for e in added}
        for extent in touched:
            if extent['uuid'] in still_plugged:
                continue
            try:
                self._undefine_secret(extent['uuid'])
            except Exception:
                LOG.exception('Could not remove the libvirt secret of '
                              'extent %s', extent['uuid'])

    # ----------------------------------------------------------- detach

    def detach(self, instance_uuid, extents):
        """Unplug the extents' disks, wait for them to go, drop secrets.

        A domain that does not exist, is not running, or goes away
        meanwhile has no live disks: only the secrets are removed. The
        secrets are removed whatever happens to the unplug: QEMU got its
        own copy of the credentials when the disk was plugged, so a disk
        still plugged needs no secret in libvirt, and a retry of the
        detach needs none either. Raises DriverTimeout if the guest does
        not release a disk within the detach timeout, and DriverError if
        a secret could not be removed (a retry removes it).
        """
        keys = [(instance_uuid, e['uuid']) for e in extents]
        with lockutils.lock('composable-guest-%s' % instance_uuid):
            # A swap-on of these disks not started yet is skipped from
            # now on; one running in the guest is waited for.
            with self._swap_cond:
                self._swap_blocked.update(keys)
            try:
                try:
                    self._wait_for_swapons(instance_uuid, keys)
                    self._unplug_from(instance_uuid, extents)
                finally:
                    failed = self._drop_secrets(extents)
            finally:
                with self._swap_cond:
                    self._swap_blocked.subtract(keys)
                    _drop_zeros(self._swap_blocked)
            if failed:
                raise exception.DriverError(
                    reason='could not remove the libvirt secret of extent '
                           '%s on %s: %s' % (
                               ', '.join(sorted(failed)), self.uri,
                               '; '.join(sorted(set(failed.values())))))

    def _unplug_from(self, instance_uuid, extents):
        try:
            domain = self._domain(instance_uuid, missing_ok=True)
            if domain is not None and domain.isActive():
                self._unplug(domain, instance_uuid, extents)
        except Exception as exc:
            if _error_code(exc) != VIR_ERR_NO_DOMAIN:
                raise
            # Destroyed (and gone, if it was transient) while unplugging:
            # a domain that is not there has no disks.
            LOG.info('Instance %s went away during the detach; its disks '
                     'went with it', instance_uuid)

    def _drop_secrets(self, extents):
        """Undefine each extent's secret; {extent uuid: error} of those
        that could not be removed."""
        failed = {}
        for extent in extents:
            try:
                if self._undefine_secret(extent['uuid']):
                    LOG.info('Removed the libvirt secret of extent %s',
                             extent['uuid'])
            except Exception as exc:
                # The error of a secret call never carries its value.
                LOG.warning('Could not remove the libvirt secret of extent '
                            '%(extent)s: %(exc)s',
                            {'extent': extent['uuid'], 'exc': exc})
                failed[extent['uuid']] = str(exc) or type(exc).__name__
        return failed

    def _request_unplug(self, domain, disk):
        try:
            if disk.alias and disk.alias.startswith('ua-'):
                domain.detachDeviceAlias(disk.alias, VIR_DOMAIN_AFFECT_LIVE)
            else:
                domain.detachDeviceFlags(disk.xml(), VIR_DOMAIN_AFFECT_LIVE)
        except Exception as exc:
            code = _error_code(exc)
            if code == VIR_ERR_DEVICE_MISSING:
                return
            if code in (VIR_ERR_OPERATION_FAILED, VIR_ERR_OPERATION_INVALID):
                # e.g. an unplug already in progress: keep waiting.
                LOG.debug('Unplug request for %s: %s', disk.target_dev, exc)
                return
            raise

    def _unplug(self, domain, instance_uuid, extents, swapoff_mode=None):
        live = self._live_disks(domain)
        pending = {}
        for extent in extents:
            disk = find_disk(live, extent)
            if disk is not None:
                pending[extent['uuid']] = (extent, disk)
        if not pending:
            return
        self._swapoff_in_guest(domain, instance_uuid, pending,
                               mode=swapoff_mode)
        for extent_uuid, (extent, disk) in pending.items():
            LOG.info('Unplugging extent %(extent)s (%(dev)s) from instance '
                     '%(instance)s', {'extent': extent_uuid,
                                      'dev': disk.target_dev,
                                      'instance': instance_uuid})
            self._request_unplug(domain, disk)
        start = time.monotonic()
        deadline = start + self.detach_timeout
        last_request = start
        while True:
            if not domain.isActive():
                return
            live = self._live_disks(domain)
            pending = {uuid: (extent, disk)
                       for uuid, (extent, disk) in pending.items()
                       if find_disk(live, extent) is not None}
            if not pending:
                LOG.info('Instance %(instance)s released its leased disks '
                         'in %(secs).1fs', {'instance': instance_uuid,
                                            'secs': time.monotonic() - start})
                return
            now = time.monotonic()
            if now >= deadline:
                raise exception.DriverTimeout(
                    what='Instance %s releasing the hot-unplugged disks %s '
                         '(extents %s)' % (
                             instance_uuid,
                             ', '.join(d.target_dev or '?'
                                       for _e, d in pending.values()),
                             ', '.join(sorted(pending))),
                    timeout=self.detach_timeout)
            if now - last_request >= self.detach_retry_interval:
                last_request = now
                for _extent, disk in pending.values():
                    self._request_unplug(domain, disk)
            time.sleep(self.poll_interval)

    # ------------------------------------------------------ guest agent

    def _agent_unavailable(self, mode, instance_uuid, exc, doing, keeps,
                           going_on):
        """What a guest agent that cannot be asked means for ``doing``:
        DriverError when ``mode`` is required, else a warning (and the
        caller goes on without the guest, as ``going_on`` says)."""
        if mode == 'required':
            raise exception.DriverError(
                reason='the guest of instance %s could not be asked to %s: '
                       'its QEMU guest agent %s. %s Run qemu-guest-agent in '
                       'the guest (image property hw_qemu_guest_agent=yes), '
                       'or stop the server, and try again.' % (
                           instance_uuid, doing, exc, keeps))
        LOG.warning('The guest of instance %(instance)s was not asked to '
                    '%(doing)s: its QEMU guest agent %(exc)s. %(going_on)s',
                    {'instance': instance_uuid, 'exc': exc,
                     'doing': doing, 'going_on': going_on})

    def _swapoff_in_guest(self, domain, instance_uuid, pending, mode=None):
        """Have the guest stop swapping to the disks about to be
        unplugged ({extent uuid: (extent, disk)}); see guest_swapoff.

        First the guest's swap is read, and the whole detach is refused
        (GuestSwapoffWouldNotFit, nothing changed) when the pages on
        these disks would not fit into the guest's MemAvailable with
        [compute_node]swapoff_headroom_mb to spare: the guest kernel
        would otherwise kill processes to make room. If one swapoff
        fails, the disks already turned off are made swap again."""
        mode = mode or CONF.compute_node.guest_swapoff
        if mode == 'disabled':
            return
        deadline = time.monotonic() + self.detach_timeout
        names = ', '.join(d.target_dev or '?' for _e, d in pending.values())
        try:
            self._check_swapoff_fits(domain, instance_uuid, pending,
                                     deadline)
        except GuestAgentUnavailable as exc:
            if not domain.isActive():
                return  # stopped meanwhile: its disks went with it
            self._agent_unavailable(
                mode, instance_uuid, exc,
                'stop swapping to the leased disk(s) %s (extent(s) %s)' % (
                    names, ', '.join(sorted(pending))),
                'The disks stay plugged, so that the guest loses no '
                'memory.',
                'Unplugging anyway (guest_swapoff = best_effort).')
            return
        done = []
        try:
            for extent_uuid, (extent, disk) in sorted(pending.items()):
                self._swapoff_one(domain, instance_uuid, extent_uuid, disk,
                                  deadline)
                done.append(extent_uuid)
        except Exception:
            if done:
                self._swapon_again(domain, instance_uuid, done)
            raise

    def _check_swapoff_fits(self, domain, instance_uuid, pending, deadline):
        swaps = self._read_guest_swaps(domain, instance_uuid, deadline)
        entries = [swaps.entry_of(disk_serial(uuid)) for uuid in pending]
        used_kb = sum(e[3] for e in entries if e is not None)
        headroom_kb = CONF.compute_node.swapoff_headroom_mb * 1024
        if used_kb and used_kb + headroom_kb > swaps.mem_available_kb:
            raise GuestSwapoffWouldNotFit(
                reason='Refusing to take the leased disk(s) %(disks)s '
                       '(extent(s) %(extents)s) from instance %(instance)s: '
                       'its guest keeps %(used)d MiB of swapped-out pages '
                       'on them but has only %(avail)d MiB available '
                       '(MemAvailable), and %(head)d MiB are kept spare '
                       '([compute_node]swapoff_headroom_mb). Nothing was '
                       'changed. Free memory in the guest, then detach '
                       'again.' % {
                           'disks': ', '.join(d.target_dev or '?'
                                              for _e, d in pending.values()),
                           'extents': ', '.join(sorted(pending)),
                           'instance': instance_uuid,
                           'used': (used_kb + 1023) // 1024,
                           'avail': swaps.mem_available_kb // 1024,
                           'head': headroom_kb // 1024})

    def _swapoff_one(self, domain, instance_uuid, extent_uuid, disk,
                     deadline):
        serial = disk_serial(extent_uuid)
        status, out, err = self._guest_exec_when_connected(
            domain, instance_uuid, '/bin/sh',
            ['-c', GUEST_SWAPOFF_SCRIPT, 'composable-swapoff', serial],
            deadline, what='swapoff in the guest')
        if status != 0:
            raise exception.DriverError(
                reason='the guest of instance %s refused to stop '
                       'swapping to the leased disk %s (extent %s): '
                       'swapoff exited with %s (%s). The disk stays '
                       'plugged; free memory in the guest, then unbind '
                       'or delete the lease again.' % (
                           instance_uuid, disk.target_dev or '?',
                           extent_uuid, status,
                           (err or out).strip() or 'no message'))
        LOG.info('Instance %(instance)s: %(out)s (extent %(extent)s, '
                 'serial %(serial)s)',
                 {'instance': instance_uuid, 'out': out.strip(),
                  'extent': extent_uuid, 'serial': serial})

    def _swapon_again(self, domain, instance_uuid, extent_uuids):
        """Undo the swapoffs of a detach that failed halfway: the disks
        stay plugged, so they go back to being swap."""
        deadline = time.monotonic() + self.attach_timeout
        for extent_uuid in extent_uuids:
            try:
                self._swapon_one(domain, instance_uuid, extent_uuid,
                                 deadline)
            except Exception as exc:
                LOG.warning('Instance %(instance)s: could not make the disk '
                            'of extent %(extent)s swap again: %(exc)s',
                            {'instance': instance_uuid,
                             'extent': extent_uuid, 'exc': exc})

    def _swapon_in_guest(self, domain, instance_uuid, extents, details):
        """Have the guest make the plugged disks swap; see
        guest_swapon. Idempotent: a disk that is swap already stays as
        it is."""
        mode = CONF.compute_node.guest_swapon
        if mode == 'disabled' or not extents:
            return
        deadline = time.monotonic() + self.attach_timeout
        for extent in extents:
            try:
                dev = self._swapon_one(domain, instance_uuid,
                                       extent['uuid'], deadline)
            except GuestAgentUnavailable as exc:
                self._agent_unavailable(
                    mode, instance_uuid, exc,
                    'make the leased disk(s) %s swap' % ', '.join(
                        d.get('target_dev') or '?'
                        for d in details.values()),
                    'The disks this attach plugged are unplugged again.',
                    'The disks stay plugged; unless the image makes them '
                    'swap itself the guest does not use them '
                    '(guest_swapon = best_effort).')
                return
            details[extent['uuid']]['guest_device'] = dev

    # ------------------------------------------- swap-on in background

    def swapon_later(self, instance_uuid, extent_uuids, lease_uuid=None):
        """Have the guest of ``instance_uuid`` make the disks of
        ``extent_uuids`` swap, in the background (guest_swapon =
        best_effort): one job of the pool, the extents one after the
        other within one attach_timeout. When it ends, ``swap_reporter``
        gets (lease_uuid, instance_uuid, {extent uuid: {'guest_device':
        '/dev/vdX'} or {'error': why}}); extents a detach took away
        meanwhile are left out. The script is idempotent (a disk that is
        swap already stays as it is), so running it again, after an agent
        restart say, is harmless. The job's future."""
        extent_uuids = list(extent_uuids)
        if not extent_uuids:
            return None
        with self._swap_cond:
            if self._swap_pool is None:
                self._swap_pool = futures.ThreadPoolExecutor(
                    max_workers=SWAPON_WORKERS,
                    thread_name_prefix='guest-swapon')
            self._swap_jobs += 1
        try:
            return self._swap_pool.submit(self._swapon_job, instance_uuid,
                                          extent_uuids, lease_uuid)
        except Exception:
            self._swapon_job_done()
            raise

    def _swapon_job_done(self):
        with self._swap_cond:
            self._swap_jobs -= 1
            self._swap_cond.notify_all()

    def wait_for_swapons(self, timeout):
        """Wait until no background swap-on is queued or running; False
        when some still are after ``timeout`` seconds."""
        with self._swap_cond:
            return self._swap_cond.wait_for(lambda: self._swap_jobs == 0,
                                            timeout)

    def _swapon_job(self, instance_uuid, extent_uuids, lease_uuid):
        try:
            outcome = self._swapon_background(instance_uuid, extent_uuids)
            if outcome and lease_uuid and self.swap_reporter is not None:
                try:
                    self.swap_reporter(lease_uuid, instance_uuid, outcome)
                except Exception:
                    LOG.exception('Could not report the swap-on of lease '
                                  '%(lease)s in instance %(instance)s',
                                  {'lease': lease_uuid,
                                   'instance': instance_uuid})
            return outcome
        except Exception:
            LOG.exception('The swap-on of extent(s) %(extents)s in instance '
                          '%(instance)s failed',
                          {'extents': ', '.join(extent_uuids),
                           'instance': instance_uuid})
            return None
        finally:
            self._swapon_job_done()

    def _swapon_background(self, instance_uuid, extent_uuids):
        """The swap-on of one job; its outcome."""
        stopped = ('instance %s stopped before its guest made the disk '
                   'swap; the disk is plugged again, and made swap, when '
                   'it starts' % instance_uuid)
        try:
            domain = self._domain(instance_uuid, missing_ok=True)
        except Exception as exc:
            reason = getattr(exc, 'message', None) or str(exc)
            return {u: {'error': reason} for u in extent_uuids}
        if domain is None or not _still_active(domain):
            return {u: {'error': stopped} for u in extent_uuids}
        deadline = time.monotonic() + self.attach_timeout
        outcome = {}
        for i, extent_uuid in enumerate(extent_uuids):
            key = (instance_uuid, extent_uuid)
            if not self._still_plugged(domain, extent_uuid):
                # A detach that came while the job was queued took it.
                LOG.info('Instance %(instance)s: the disk of extent '
                         '%(extent)s is no longer plugged; not made swap',
                         {'instance': instance_uuid, 'extent': extent_uuid})
                continue
            with self._swap_cond:
                if self._swap_blocked[key]:
                    LOG.info('Instance %(instance)s: extent %(extent)s is '
                             'being detached; its disk is not made swap',
                             {'instance': instance_uuid,
                              'extent': extent_uuid})
                    continue
                self._swap_running[key] += 1
            try:
                outcome[extent_uuid] = {'guest_device': self._swapon_one(
                    domain, instance_uuid, extent_uuid, deadline,
                    cancelled=lambda key=key: self._swap_blocked[key] > 0)}
            except _Cancelled:
                LOG.info('Instance %(instance)s: extent %(extent)s is '
                         'being detached; its disk is not made swap',
                         {'instance': instance_uuid, 'extent': extent_uuid})
            except Exception as exc:
                if not _still_active(domain):
                    error = stopped
                elif isinstance(exc, GuestAgentUnavailable):
                    self._agent_unavailable(
                        'best_effort', instance_uuid, exc,
                        'make the leased disk(s) of extent(s) %s swap' %
                        ', '.join(extent_uuids[i:]), '',
                        'The disks stay plugged; unless the image makes '
                        'them swap itself the guest does not use them '
                        '(guest_swapon = best_effort).')
                    error = ('the guest was not asked to make the disk '
                             'swap: its QEMU guest agent %s. The disk stays '
                             'plugged; unless the image makes it swap '
                             'itself, the guest does not use it' % exc)
                else:
                    error = getattr(exc, 'message', None) or str(exc)
                    LOG.warning('Instance %(instance)s: %(error)s',
                                {'instance': instance_uuid,
                                 'error': error})
                    outcome[extent_uuid] = {'error': error}
                    continue
                for rest in extent_uuids[i:]:
                    if not self._swap_blocked[(instance_uuid, rest)]:
                        outcome[rest] = {'error': error}
                break
            finally:
                with self._swap_cond:
                    self._swap_running[key] -= 1
                    _drop_zeros(self._swap_running)
                    self._swap_cond.notify_all()
        return outcome

    def _still_plugged(self, domain, extent_uuid):
        try:
            disks = self._live_disks(domain)
        except Exception:
            return True  # the swap-on says what is wrong
        return find_disk(disks, {'uuid': extent_uuid}) is not None

    def _wait_for_swapons(self, instance_uuid, keys):
        """Wait for the background swap-ons running on the disks of
        ``keys`` ((instance, extent) pairs) to end: a disk is never
        unplugged while mkswap runs on it. They end within their
        attach_timeout; DriverError, nothing unplugged, if one has not
        after that."""
        keys = set(keys)
        with self._swap_cond:
            busy = sorted(e for i, e in keys if self._swap_running[(i, e)])
            if not busy:
                return
            LOG.info('Instance %(instance)s: waiting for the swap-on of '
                     'extent(s) %(extents)s to end before unplugging',
                     {'instance': instance_uuid,
                      'extents': ', '.join(busy)})
            timeout = self.attach_timeout + GUEST_AGENT_TIMEOUT
            if self._swap_cond.wait_for(
                    lambda: not any(self._swap_running[k] for k in keys),
                    timeout):
                return
        raise exception.DriverError(
            reason='the guest of instance %s is still making the leased '
                   'disk(s) of extent(s) %s swap (mkswap and swapon through '
                   'its guest agent) after %d s; the disks stay plugged. '
                   'Try again.' % (instance_uuid, ', '.join(busy), timeout))

    def _swapon_one(self, domain, instance_uuid, extent_uuid, deadline,
                    cancelled=None):
        """mkswap + swapon of the extent's disk in the guest; the guest's
        name of the device. ``cancelled()`` true before the script
        started: _Cancelled."""
        serial = disk_serial(extent_uuid)
        wait_tenths = max(1, int((deadline - time.monotonic()) * 10))
        status, out, err = self._guest_exec_when_connected(
            domain, instance_uuid, '/bin/sh',
            ['-c', GUEST_SWAPON_SCRIPT, 'composable-swapon', serial,
             str(CONF.compute_node.swap_priority), str(wait_tenths)],
            deadline, what='swapon in the guest', cancelled=cancelled)
        if status != 0:
            if status == NO_DISK_EXIT:
                problem = ('the guest does not see a disk with serial %s '
                           '(does its kernel have virtio_blk and PCI '
                           'hot-plug?)' % serial)
            else:
                problem = 'mkswap/swapon exited with %s (%s)' % (
                    status, (err or out).strip() or 'no message')
            raise exception.DriverError(
                reason='the guest of instance %s could not make the leased '
                       'disk of extent %s swap: %s' % (
                           instance_uuid, extent_uuid, problem))
        out = out.strip()
        LOG.info('Instance %(instance)s: %(out)s (extent %(extent)s)',
                 {'instance': instance_uuid, 'out': out,
                  'extent': extent_uuid})
        return out.split()[-1] if out else None

    def _read_guest_swaps(self, domain, instance_uuid, deadline):
        status, out, err = self._guest_exec_when_connected(
            domain, instance_uuid, '/bin/sh',
            ['-c', GUEST_SWAPS_SCRIPT, 'composable-swaps'], deadline,
            what='reading the swap of the guest')
        try:
            return GuestSwaps.parse(out)
        except ValueError:
            raise GuestAgentUnavailable(
                'gave no usable answer about its swap (exit status %s: %s)'
                % (status, (err or out).strip()[:200] or 'no output'))

    def guest_swaps(self, instance_uuid, timeout):
        """The swap of the running guest of ``instance_uuid`` as its
        guest agent reads it (GuestSwaps); None when the domain is not
        running here. Raises GuestAgentUnavailable, DriverTimeout."""
        domain = self._domain(instance_uuid, missing_ok=True)
        if domain is None or not domain.isActive():
            return None
        deadline = time.monotonic() + timeout
        return self._read_guest_swaps(domain, instance_uuid, deadline)

    def _guest_exec_when_connected(self, domain, instance_uuid, path, args,
                                   deadline, what='swapoff in the guest',
                                   cancelled=None):
        """_guest_exec, waiting until ``deadline`` for a guest agent that
        is configured but not connected: a guest that has just booted
        opens its agent port a moment after its disks are usable, and
        qemu-ga may be restarting. The script is idempotent, so running
        it again after a lost answer is harmless."""
        waited = False
        while True:
            if cancelled is not None and cancelled():
                raise _Cancelled()
            try:
                return self._guest_exec(domain, path, args, deadline,
                                        what=what)
            except GuestAgentUnavailable as exc:
                if not exc.transient or time.monotonic() >= deadline or \
                        not domain.isActive():
                    raise
                if not waited:
                    waited = True
                    LOG.info('Instance %(instance)s: waiting up to %(left)d '
                             's for its guest agent: %(exc)s',
                             {'instance': instance_uuid, 'exc': exc,
                              'left': max(0, deadline - time.monotonic())})
            time.sleep(self.poll_interval)

    def _agent(self, domain, command, arguments):
        """One guest agent command; its ``return``."""
        if libvirt_qemu is None:
            raise GuestAgentUnavailable(
                'cannot be reached: the libvirt_qemu binding is missing')
        request = jsonutils.dumps({'execute': command,
                                   'arguments': arguments})
        try:
            answer = libvirt_qemu.qemuAgentCommand(
                domain, request, GUEST_AGENT_TIMEOUT, 0)
        except Exception as exc:
            code = _error_code(exc)
            if code in (VIR_ERR_NO_DOMAIN,):
                raise
            # libvirt says "not connected" (or reports an agent error or
            # time-out) with this code when the domain has an agent
            # channel; "not configured" comes with another code.
            raise GuestAgentUnavailable(
                'did not answer %s (%s)' % (command, exc),
                transient=code == VIR_ERR_AGENT_UNRESPONSIVE)
        try:
            return jsonutils.loads(answer)['return']
        except (ValueError, TypeError, KeyError):
            raise GuestAgentUnavailable(
                'gave no usable answer to %s' % command)

    def _guest_exec(self, domain, path, args, deadline,
                    what='swapoff in the guest'):
        """Run ``path args`` in the guest through its agent; (exit
        status, stdout, stderr)."""
        started_at = time.monotonic()
        started = self._agent(domain, 'guest-exec', {
            'path': path, 'arg': list(args), 'capture-output': True})
        pid = started['pid']
        wait = min(GUEST_EXEC_FIRST_POLL, self.poll_interval / 5)
        while True:
            status = self._agent(domain, 'guest-exec-status', {'pid': pid})
            if status.get('exited'):
                return (status.get('exitcode', status.get('signal', -1)),
                        _b64(status.get('out-data')),
                        _b64(status.get('err-data')))
            if time.monotonic() >= deadline:
                raise exception.DriverTimeout(
                    what='%s (pid %s)' % (what, pid),
                    timeout=max(1, int(deadline - started_at)))
            time.sleep(wait)
            wait = min(wait * 2, self.poll_interval / 5)


def _b64(data):
    if not data:
        return ''
    return base64.b64decode(data).decode('utf-8', 'replace')
