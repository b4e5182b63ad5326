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

"""virtio-mem mode: the CXL memory of a lease grows a running guest.

The lease's chunks are first made a NUMA node of this host, as in host
mode (cxl_memory). Then one ``<memory model='virtio-mem'>`` device is
hot-plugged into the lease's domain: its backend is pinned to that host
node (``<source><nodemask>``), its ``<target><size>`` is the lease's
size, its ``<block>`` 2 MiB, and its ``<requested>`` size is what the
guest should have of it. The guest's virtio_mem driver plugs memory
blocks until it has the requested size; libvirt shows what it has as the
device's ``<current>`` in the live XML.

- The device's ``<target><size>`` is the most the lease may grow to:
  the lease's ``max_mb`` when it has one (an elastic lease), else its
  size, rounded up to the 2 MiB block. That only reserves guest address
  space (it must fit in the domain's ``<maxMemory>``): the host node's
  pages back what the guest plugs and touches, never more than
  ``<requested>``, which starts at the size of the lease's chunks.
- An elastic lease grows by chunks (attach_memory of new chunks): their
  regions go online on the host first, then ``<requested>`` goes up by
  their size; it shrinks the other way round (detach_memory of some of
  its chunks): ``<requested>`` goes down by their size, waited for as
  below, and only then do their regions go. The device, pinned to its
  host node(s), never moves: chunks whose memory comes online on another
  node cannot grow it.
- Grow and shrink change ``<requested>`` (updateDeviceFlags, what
  ``virsh update-memory-device --requested-size`` does). A shrink waits,
  up to ``[compute_node]virtio_mem_shrink_timeout`` seconds, for the
  guest to give the memory back (``<current>`` down to the request).
  A guest that does not (its memory is in use and cannot move, or its
  virtio_mem driver is gone) gets its former size back and the shrink
  fails naming both sizes: nothing is ever unplugged by force.
- Unbind is a shrink to 0; only then is the device unplugged, and only
  then does the host region go (cxl_memory). QEMU 7.2 (Debian 12) cannot
  unplug a virtio-mem device at all ("virtio based memory devices cannot
  be unplugged"): the device then stays in the running domain with
  nothing plugged and no host memory behind it, until the domain stops.
  A later bind of the same lease reuses it.
- A domain can take memory devices only when it has ``<maxMemory
  slots=...>``; one without is refused (NoMaxMemory), naming it. Nova
  writes ``<maxMemory>`` only for virtual persistent memory (see the
  admin guide, CXL memory).
- Devices are plugged into the live domain only, like guest-mode disks:
  Nova owns the persistent definition. The libvirt hook plugs them again
  at every start (composable.agent.hook_server).
- A device carries the user alias ``ua-composable-vmem-<lease uuid>``,
  how it is found again.
"""

import time
from xml.etree import ElementTree

from oslo_concurrency import lockutils
from oslo_log import log as logging

from composable.agent.compute_node import libvirt_connection
from composable.common import exception
from composable.common import states
from composable import conf

CONF = conf.CONF
LOG = logging.getLogger(__name__)

ALIAS_PREFIX = 'ua-composable-vmem-'
# The granularity the guest plugs and unplugs in: 2 MiB, the smallest
# virtio-mem block on x86 (a transparent huge page), so a shrink can take
# back memory in small pieces wherever the guest has free ones.
BLOCK_KIB = 2048
KIB_PER_MIB = 1024
POLL_INTERVAL = 0.2

VIR_DOMAIN_AFFECT_LIVE = 1
VIR_CONNECT_LIST_DOMAINS_ACTIVE = 1
VIR_ERR_NO_DOMAIN = 42
VIR_ERR_DEVICE_MISSING = 99
# What QEMU answers an unplug of a virtio-mem device when it cannot
# unplug them at all (QEMU 7.2).
NOT_UNPLUGGABLE_HINT = 'cannot be unplugged'


class NoMaxMemory(exception.DriverError):
    """The domain cannot take memory devices."""
    code = 409


class ShrinkRefused(exception.DriverError):
    """The guest did not give the memory back in time."""
    code = 409


def device_alias(lease_uuid):
    return ALIAS_PREFIX + lease_uuid


def _to_kib(text, unit, name):
    value = int(text.strip())
    unit = (unit or 'KiB').lower()
    factor = {'b': 1.0 / 1024, 'bytes': 1.0 / 1024, 'k': 1, 'kib': 1,
              'm': 1024, 'mib': 1024, 'g': 1 << 20, 'gib': 1 << 20}.get(unit)
    if factor is None:
        raise ValueError('unknown memory unit %r in <%s>' % (unit, name))
    return int(value * factor)


def _kib(element, name):
    child = element.find(name)
    if child is None or child.text is None:
        return None
    return _to_kib(child.text, child.get('unit'), name)


def device_size_mib(size_mb, max_mb=None):
    """The ``<target><size>`` of a lease's device, in MiB: the larger of
    its chunks' size and its ``max_mb``, rounded up to the block."""
    block_mib = BLOCK_KIB // KIB_PER_MIB
    mib = max(int(size_mb or 0), int(max_mb or 0))
    return -(-mib // block_mib) * block_mib


def parse_nodemask(text):
    """The set of NUMA nodes of a libvirt nodemask ("0", "1,3", "0-2",
    "0-3,^2")."""
    nodes = set()
    excluded = set()
    for part in (text or '').split(','):
        part = part.strip()
        if not part:
            continue
        into = nodes
        if part.startswith('^'):
            into, part = excluded, part[1:]
        low, _, high = part.partition('-')
        into.update(range(int(low), int(high or low) + 1))
    return nodes - excluded


def device_xml(lease_uuid, nodes, size_mib, requested_mib, guest_node=0,
               pagesize_kib=None):
    """The <memory model='virtio-mem'> element of a lease: its backend on
    host NUMA node(s) ``nodes``, ``size_mib`` in all, ``requested_mib``
    of it plugged into guest NUMA node ``guest_node``."""
    if not nodes:
        raise ValueError('a virtio-mem device needs the host NUMA node '
                         'of its memory')
    memory = ElementTree.Element('memory', model='virtio-mem')
    source = ElementTree.SubElement(memory, 'source')
    ElementTree.SubElement(source, 'nodemask').text = ','.join(
        str(n) for n in sorted(set(int(n) for n in nodes)))
    if pagesize_kib:
        ElementTree.SubElement(source, 'pagesize',
                               unit='KiB').text = str(int(pagesize_kib))
    target = ElementTree.SubElement(memory, 'target')
    ElementTree.SubElement(target, 'size', unit='KiB').text = str(
        int(size_mib) * KIB_PER_MIB)
    ElementTree.SubElement(target, 'node').text = str(int(guest_node))
    ElementTree.SubElement(target, 'block', unit='KiB').text = str(BLOCK_KIB)
    ElementTree.SubElement(target, 'requested', unit='KiB').text = str(
        int(requested_mib) * KIB_PER_MIB)
    ElementTree.SubElement(memory, 'alias', name=device_alias(lease_uuid))
    return ElementTree.tostring(memory, encoding='unicode')


class LiveDevice(object):
    """A virtio-mem device of a live domain XML (sizes in KiB)."""

    def __init__(self, element):
        self.element = element
        alias = element.find('alias')
        self.alias = alias.get('name') if alias is not None else None
        target = element.find('target')
        self.size_kib = _kib(target, 'size') if target is not None else None
        self.requested_kib = (_kib(target, 'requested')
                              if target is not None else None)
        self.current_kib = (_kib(target, 'current')
                            if target is not None else None)
        nodemask = element.find('source/nodemask')
        self.nodemask = (nodemask.text.strip() if nodemask is not None and
                         nodemask.text else None)

    def with_requested(self, requested_kib):
        """This device's XML asking for ``requested_kib``: what
        updateDeviceFlags takes (the device is found by its alias)."""
        element = ElementTree.fromstring(
            ElementTree.tostring(self.element, encoding='unicode'))
        target = element.find('target')
        current = target.find('current')
        if current is not None:
            target.remove(current)
        requested = target.find('requested')
        if requested is None:
            requested = ElementTree.SubElement(target, 'requested')
        requested.set('unit', 'KiB')
        requested.text = str(int(requested_kib))
        return ElementTree.tostring(element, encoding='unicode')


class DomainMemory(object):
    """What a domain XML says about memory devices."""

    def __init__(self, domain_xml):
        root = ElementTree.fromstring(domain_xml)
        self.name = root.findtext('name')
        max_memory = root.find('maxMemory')
        self.max_memory_kib = (_kib(root, 'maxMemory')
                               if max_memory is not None else None)
        self.slots = (int(max_memory.get('slots') or 0)
                      if max_memory is not None else 0)
        self.memory_kib = _kib(root, 'memory')
        cells = root.findall('./cpu/numa/cell')
        self.numa_cells = [int(c.get('id')) for c in cells
                           if c.get('id') is not None]
        cells_kib = sum(_to_kib(c.get('memory') or '0', c.get('unit'),
                                'cell') for c in cells)
        self.devices = {}
        devices_kib = 0
        for element in root.findall("./devices/memory"):
            target = element.find('target')
            devices_kib += (_kib(target, 'size') or 0
                            if target is not None else 0)
            if element.get('model') != 'virtio-mem':
                continue
            device = LiveDevice(element)
            if device.alias:
                self.devices[device.alias] = device
        # What counts against <maxMemory>: the boot memory (the guest
        # NUMA cells') and every memory device's size, plugged or not.
        self.used_kib = max(self.memory_kib or 0, cells_kib + devices_kib)

    @property
    def room_kib(self):
        """How much more device memory <maxMemory> takes (None: no
        <maxMemory>)."""
        if self.max_memory_kib is None:
            return None
        return max(0, self.max_memory_kib - self.used_kib)


def no_max_memory_reason(name, instance_uuid):
    return ('domain %s (instance %s) has no <maxMemory slots=...>, so it '
            'cannot take a virtio-mem device; Nova does not write one for '
            'ordinary flavors (only for virtual persistent memory, see the '
            'admin guide, "CXL memory": virtio-mem mode), so bind a Nova '
            'instance in guest mode (swap disks) from a network pool, or '
            'give the domain <maxMemory> and a guest NUMA cell'
            % (name, instance_uuid))


def max_memory_too_small_reason(name, instance_uuid, lease_uuid, size_mib,
                                room_kib, max_memory_kib):
    return ('domain %s (instance %s) cannot take the %d MiB virtio-mem '
            'device of lease %s: its <maxMemory> of %d MiB leaves room for '
            '%d MiB more of memory devices (the device reserves guest '
            'address space for the most the lease may grow to: its max_mb '
            'or, without one, its size). Give the domain a <maxMemory> at '
            'least %d MiB larger, or give the lease a smaller max_mb' % (
                name, instance_uuid, size_mib, lease_uuid,
                max_memory_kib // KIB_PER_MIB, room_kib // KIB_PER_MIB,
                size_mib - room_kib // KIB_PER_MIB))


def _error_code(exc):
    try:
        return exc.get_error_code()
    except Exception:
        return None


class VirtioMemAttacher(object):
    """Plugs, resizes and empties the virtio-mem devices of leases in
    running libvirt domains, through the agent's LibvirtConnection."""

    def __init__(self, uri=None, connect=None, connection=None,
                 shrink_timeout=None, poll_interval=POLL_INTERVAL):
        if connection is None:
            connection = libvirt_connection.LibvirtConnection(
                uri, connect=connect)
        self.connection = connection
        self.shrink_timeout = (
            shrink_timeout if shrink_timeout is not None
            else CONF.compute_node.virtio_mem_shrink_timeout)
        self.poll_interval = poll_interval

    # ---------------------------------------------------------- libvirt

    def _domain(self, instance_uuid, missing_ok=False):
        conn = self.connection.get(
            'virtio-mem memory cannot be plugged into guests on this host')
        try:
            return conn.lookupByUUIDString(instance_uuid)
        except Exception as exc:
            if _error_code(exc) == VIR_ERR_NO_DOMAIN:
                if missing_ok:
                    return None
                raise exception.DriverError(
                    reason='instance %s has no libvirt domain on this host '
                           '(%s); virtio-mem memory goes to a running guest '
                           'on the host the lease is bound to' %
                           (instance_uuid, self.connection.uri))
            raise

    @staticmethod
    def _memory(domain):
        return DomainMemory(domain.XMLDesc(0))

    def device(self, instance_uuid, lease_uuid):
        """The lease's LiveDevice in the running domain, or None."""
        domain = self._domain(instance_uuid, missing_ok=True)
        if domain is None or not domain.isActive():
            return None
        return self._memory(domain).devices.get(device_alias(lease_uuid))

    def holders(self, lease_uuid):
        """The uuids of the running domains that have the lease's device
        (for a detach that was not told the instance: the host region
        must not go from under a guest)."""
        conn = self.connection.get(
            'virtio-mem memory cannot be plugged into guests on this host')
        alias = device_alias(lease_uuid)
        found = []
        for domain in conn.listAllDomains(VIR_CONNECT_LIST_DOMAINS_ACTIVE):
            try:
                if alias in self._memory(domain).devices:
                    found.append(domain.UUIDString())
            except Exception as exc:
                if _error_code(exc) != VIR_ERR_NO_DOMAIN:
                    raise
        return found

    def present(self, instance_uuid, lease_uuid):
        """False only when the domain runs and lacks the lease's device
        (what the libvirt hook checks after a start)."""
        domain = self._domain(instance_uuid, missing_ok=True)
        if domain is None or not domain.isActive():
            return True
        return device_alias(lease_uuid) in self._memory(domain).devices

    # ----------------------------------------------------------- attach

    def attach(self, instance_uuid, lease_uuid, nodes, size_mib,
               requested_mib=None):
        """Plug the lease's device (or grow the one already there) so
        that the guest gets ``requested_mib`` (default: all of it).
        Returns the details of the attachment."""
        requested_mib = size_mib if requested_mib is None else requested_mib
        with lockutils.lock('composable-guest-%s' % instance_uuid):
            domain = self._domain(instance_uuid)
            if not domain.isActive():
                raise exception.DriverError(
                    reason='instance %s is not running; virtio-mem memory '
                           'is plugged into running guests only (the '
                           'libvirt hook plugs it when the guest starts)'
                           % instance_uuid)
            memory = self._memory(domain)
            alias = device_alias(lease_uuid)
            nodemask = ','.join(str(n) for n in sorted(set(nodes)))
            existing = memory.devices.get(alias)
            if existing is not None:
                if existing.nodemask != nodemask:
                    raise exception.DriverError(
                        reason='instance %s still has the emptied '
                               'virtio-mem device of lease %s on host NUMA '
                               'node(s) %s, and the lease\'s memory is now '
                               'on node(s) %s; QEMU cannot move it. Stop '
                               'and start the instance, then bind again'
                               % (instance_uuid, lease_uuid,
                                  existing.nodemask, nodemask))
                self._set_requested(domain, instance_uuid, lease_uuid,
                                    existing, requested_mib)
            else:
                if not memory.max_memory_kib or not memory.slots:
                    raise NoMaxMemory(reason=no_max_memory_reason(
                        memory.name, instance_uuid))
                if memory.room_kib < int(size_mib) * KIB_PER_MIB:
                    raise NoMaxMemory(reason=max_memory_too_small_reason(
                        memory.name, instance_uuid, lease_uuid, size_mib,
                        memory.room_kib, memory.max_memory_kib))
                if not memory.numa_cells:
                    raise NoMaxMemory(
                        reason='domain %s (instance %s) has no guest NUMA '
                               'cell (<cpu><numa><cell>), which QEMU needs '
                               'for a virtio-mem device' % (
                                   memory.name, instance_uuid))
                xml = device_xml(lease_uuid, nodes, size_mib, requested_mib,
                                 guest_node=memory.numa_cells[0])
                start = time.monotonic()
                try:
                    domain.attachDeviceFlags(xml, VIR_DOMAIN_AFFECT_LIVE)
                except Exception as exc:
                    raise exception.DriverError(
                        reason='could not plug the virtio-mem device of '
                               'lease %s (%d MiB on host NUMA node(s) %s) '
                               'into instance %s: %s' % (
                                   lease_uuid, size_mib, nodemask,
                                   instance_uuid, exc))
                LOG.info('Plugged the virtio-mem device of lease %(lease)s '
                         '(%(size)d MiB on host NUMA node(s) %(nodes)s, '
                         '%(req)d MiB requested) into instance %(inst)s in '
                         '%(secs).2fs',
                         {'lease': lease_uuid, 'size': size_mib,
                          'nodes': nodemask, 'req': requested_mib,
                          'inst': instance_uuid,
                          'secs': time.monotonic() - start})
        return {'mode': states.ATTACH_VIRTIO_MEM,
                'instance_uuid': instance_uuid, 'alias': alias,
                'numa_nodes': sorted(set(nodes)), 'size_mb': size_mib,
                'requested_mb': requested_mib}

    # ------------------------------------------------------ grow/shrink

    def _live_device(self, instance_uuid, lease_uuid, what):
        """(domain, the lease's device in the running domain); DriverError
        when the domain is not running or has no such device. Called
        under the guest's lock."""
        domain = self._domain(instance_uuid)
        device = self._memory(domain).devices.get(
            device_alias(lease_uuid)) if domain.isActive() else None
        if device is None:
            raise exception.DriverError(
                reason='instance %s has no virtio-mem device of lease %s '
                       'to %s (is it running, and is the lease bound to '
                       'it?)' % (instance_uuid, lease_uuid, what))
        return domain, device

    def grow(self, instance_uuid, lease_uuid, nodes, add_mib):
        """An elastic lease got chunks (online on host NUMA node(s)
        ``nodes``): the guest is asked for ``add_mib`` more of its
        device. Raises DriverError, changing nothing, when the device is
        not there, is pinned to other nodes, or is too small."""
        with lockutils.lock('composable-guest-%s' % instance_uuid):
            domain, device = self._live_device(instance_uuid, lease_uuid,
                                               'grow')
            pinned = parse_nodemask(device.nodemask)
            for node in sorted(set(int(n) for n in nodes)):
                if node not in pinned:
                    raise exception.DriverError(
                        reason='the new CXL memory of lease %s is online '
                               'on host NUMA node %d, but its virtio-mem '
                               'device in instance %s is pinned to host '
                               'node(s) %s (<nodemask>), and a device\'s '
                               'backend cannot move; the lease cannot '
                               'grow there' % (lease_uuid, node,
                                               instance_uuid,
                                               device.nodemask))
            before_mib = (device.requested_kib or 0) // KIB_PER_MIB
            size_mib = (device.size_kib or 0) // KIB_PER_MIB
            wanted_mib = before_mib + int(add_mib)
            if wanted_mib > size_mib:
                raise exception.DriverError(
                    reason='the virtio-mem device of lease %s in instance '
                           '%s is %d MiB (the lease\'s max_mb when it was '
                           'plugged) and %d MiB of it are requested; it '
                           'cannot take %d MiB more. Unbind and bind the '
                           'lease again to plug a larger device' % (
                               lease_uuid, instance_uuid, size_mib,
                               before_mib, add_mib))
            self._set_requested(domain, instance_uuid, lease_uuid, device,
                                wanted_mib)
        return {'mode': states.ATTACH_VIRTIO_MEM,
                'instance_uuid': instance_uuid, 'alias': device.alias,
                'requested_mb': wanted_mib}

    def shrink(self, instance_uuid, lease_uuid, remove_mib):
        """Some of an elastic lease's chunks go: the guest is asked for
        ``remove_mib`` less of its device and gives it back (the bounded
        wait of resize). Returns the device's requested MiB afterwards;
        raises ShrinkRefused (nothing changed) when the guest keeps it.
        A domain that is not running, or has no device, has nothing to
        give back (None)."""
        with lockutils.lock('composable-guest-%s' % instance_uuid):
            domain = self._domain(instance_uuid, missing_ok=True)
            if domain is None or not domain.isActive():
                return None
            device = self._memory(domain).devices.get(
                device_alias(lease_uuid))
            if device is None:
                return None
            wanted_mib = max(0, (device.requested_kib or 0) // KIB_PER_MIB -
                             int(remove_mib))
            self._set_requested(domain, instance_uuid, lease_uuid, device,
                                wanted_mib)
            return wanted_mib

    # ----------------------------------------------------------- resize

    def resize(self, instance_uuid, lease_uuid, requested_mib):
        """Ask the guest for ``requested_mib`` of the lease's device. A
        shrink waits for the guest to give the memory back (see the
        module's doc); a grow returns at once. Returns the MiB the guest
        has of the device afterwards."""
        with lockutils.lock('composable-guest-%s' % instance_uuid):
            domain, device = self._live_device(instance_uuid, lease_uuid,
                                               'resize')
            return self._set_requested(domain, instance_uuid, lease_uuid,
                                       device, requested_mib)

    def _update(self, domain, device, requested_kib):
        domain.updateDeviceFlags(device.with_requested(requested_kib),
                                 VIR_DOMAIN_AFFECT_LIVE)

    def _set_requested(self, domain, instance_uuid, lease_uuid, device,
                       requested_mib):
        requested_kib = int(requested_mib) * KIB_PER_MIB
        if device.size_kib is not None and requested_kib > device.size_kib:
            raise exception.Invalid(
                reason='lease %s has %d MiB in its virtio-mem device; %d '
                       'MiB cannot be requested' % (
                           lease_uuid, device.size_kib // KIB_PER_MIB,
                           requested_mib))
        before_kib = device.requested_kib or 0
        if requested_kib != before_kib:
            self._update(domain, device, requested_kib)
            LOG.info('Instance %(inst)s: virtio-mem device of lease '
                     '%(lease)s requested %(old)d -> %(new)d MiB',
                     {'inst': instance_uuid, 'lease': lease_uuid,
                      'old': before_kib // KIB_PER_MIB,
                      'new': requested_mib})
        if requested_kib >= (device.current_kib or 0):
            return (device.current_kib or 0) // KIB_PER_MIB
        return self._wait_shrunk(domain, instance_uuid, lease_uuid,
                                 device, requested_kib, before_kib)

    def _wait_shrunk(self, domain, instance_uuid, lease_uuid, device,
                     requested_kib, before_kib):
        """Wait for ``<current>`` to come down to ``requested_kib``; on
        time-out ask for ``before_kib`` again and raise ShrinkRefused."""
        alias = device.alias
        start = time.monotonic()
        deadline = start + self.shrink_timeout
        current_kib = device.current_kib or 0
        while True:
            if not domain.isActive():
                return 0  # stopped meanwhile: QEMU's memory went with it
            live = self._memory(domain).devices.get(alias)
            if live is None:
                return 0
            current_kib = live.current_kib or 0
            if current_kib <= requested_kib:
                LOG.info('Instance %(inst)s gave back virtio-mem memory '
                         'of lease %(lease)s down to %(cur)d MiB in '
                         '%(secs).2fs', {'inst': instance_uuid,
                                         'lease': lease_uuid,
                                         'cur': current_kib // KIB_PER_MIB,
                                         'secs': time.monotonic() - start})
                return current_kib // KIB_PER_MIB
            if time.monotonic() >= deadline:
                break
            time.sleep(self.poll_interval)
        # Not a forced unplug: the guest keeps what it has and is asked
        # for what it had, so it does not go on freeing memory for a
        # shrink that has failed.
        try:
            self._update(domain, live, before_kib)
        except Exception as exc:
            LOG.warning('Instance %(inst)s: could not ask again for the '
                        '%(mib)d MiB of the virtio-mem device of lease '
                        '%(lease)s: %(exc)s',
                        {'inst': instance_uuid, 'lease': lease_uuid,
                         'mib': before_kib // KIB_PER_MIB, 'exc': exc})
        raise ShrinkRefused(
            reason='the guest of instance %s did not give back the '
                   'virtio-mem memory of lease %s within %g s ([compute_'
                   'node]virtio_mem_shrink_timeout): it still has %d MiB '
                   'of it, %d MiB were requested. Nothing was unplugged by '
                   'force: the guest was asked for its %d MiB again and '
                   'the host keeps the memory. Free memory in the guest '
                   '(its virtio_mem driver must be loaded and the memory '
                   'onlined movable), then try again' % (
                       instance_uuid, lease_uuid, self.shrink_timeout,
                       current_kib // KIB_PER_MIB,
                       requested_kib // KIB_PER_MIB,
                       before_kib // KIB_PER_MIB))

    # ----------------------------------------------------------- detach

    def detach(self, instance_uuid, lease_uuid):
        """Empty the lease's device (a shrink to 0, waited for) and
        unplug it where QEMU can. A domain that is not running has no
        device. Raises ShrinkRefused (the device keeps its memory, the
        host region must stay) when the guest does not give it back."""
        with lockutils.lock('composable-guest-%s' % instance_uuid):
            domain = self._domain(instance_uuid, missing_ok=True)
            if domain is None or not domain.isActive():
                return
            device = self._memory(domain).devices.get(
                device_alias(lease_uuid))
            if device is None:
                return
            self._set_requested(domain, instance_uuid, lease_uuid, device,
                                0)
            try:
                domain.detachDeviceAlias(device.alias,
                                         VIR_DOMAIN_AFFECT_LIVE)
            except Exception as exc:
                if _error_code(exc) == VIR_ERR_DEVICE_MISSING or \
                        not domain.isActive():
                    return  # gone with the device, or with its domain
                if NOT_UNPLUGGABLE_HINT in str(exc):
                    LOG.info('Instance %(inst)s: QEMU cannot unplug '
                             'virtio-mem devices; the emptied device of '
                             'lease %(lease)s stays in the domain, holding '
                             'no memory, until it stops',
                             {'inst': instance_uuid, 'lease': lease_uuid})
                    return
                raise exception.DriverError(
                    reason='instance %s gave back the virtio-mem memory of '
                           'lease %s, but its device could not be '
                           'unplugged: %s' % (instance_uuid, lease_uuid,
                                              exc))
            # The unplug is the guest's to acknowledge; the device holds
            # nothing any more, so a slow guest only delays the unbind.
            deadline = time.monotonic() + self.shrink_timeout
            while domain.isActive() and device.alias in \
                    self._memory(domain).devices:
                if time.monotonic() >= deadline:
                    LOG.warning('Instance %(inst)s has not released the '
                                'emptied virtio-mem device of lease '
                                '%(lease)s yet', {'inst': instance_uuid,
                                                  'lease': lease_uuid})
                    return
                time.sleep(self.poll_interval)
