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

"""The agent RPC API (composable.agent.rpcapi), one endpoint per role.

Every agent serves both endpoints on topic ``composable-agent``, server
= its node name: the methods of a role the node does not have refuse
with the reason (the node is registered as the wrong kind), rather than
oslo.messaging's bare "no such method". Both carry the same target
version, so the interface is the one a single endpoint served before:
the method names, arguments and version history are those of rpcapi.
Only the methods below are reachable over RPC.

Every method is idempotent, because the conductor repeats calls after
timeouts and when it resumes work. CHAP credentials arrive in ``extent``
dicts and in export_extent's arguments; they are never logged.
"""

from oslo_log import log as logging
import oslo_messaging as messaging

from composable.common import exception
from composable.common import media
from composable.common import states

LOG = logging.getLogger(__name__)

MEMORY_NODE = 'memory_node'
COMPUTE_NODE = 'compute_node'
ROLES = (MEMORY_NODE, COMPUTE_NODE)

# 1.1: set_sriov_vfs
# 1.2: attach_devices / detach_devices take SR-IOV virtual functions
# 1.3: attach_memory / detach_memory take mode virtio-mem; resize_memory
# 1.4: attach_memory / detach_memory of part of a virtio-mem lease grow /
#      shrink its device (partial=True)
RPC_API_VERSION = '1.4'


def is_cxl(extents):
    """True for the chunks of a CXL memory lease."""
    return any(e.get('medium') == media.CXL for e in extents or ())


class _RoleEndpoint(object):

    role = None
    target = messaging.Target(version=RPC_API_VERSION)

    def __init__(self, host, roles):
        self._host = host
        self._roles = tuple(roles)

    def _require(self, what):
        if self.role not in self._roles:
            raise exception.DriverError(
                reason='composable-agent on %s does not have the %s role '
                       '([agent]roles = %s), so it cannot %s; check that '
                       'the node is registered as the right kind' %
                       (self._host, self.role,
                        ','.join(self._roles) or '(none)', what))


class MemoryNodeEndpoint(_RoleEndpoint):
    """export/unexport/scrub an extent and report the node's memory,
    delegated to the node's MemoryNode (its exporter and tmpfs area)."""

    role = MEMORY_NODE

    def __init__(self, host, roles, node):
        super(MemoryNodeEndpoint, self).__init__(host, roles)
        self._node = node

    def export_extent(self, context, extent, initiator_iqn, chap_username,
                      chap_secret):
        self._require('export memory')
        LOG.info('Exporting extent %(extent)s of lease %(lease)s to '
                 '%(initiator)s', {'extent': extent['uuid'],
                                   'lease': extent.get('lease_uuid'),
                                   'initiator': initiator_iqn})
        return self._node.exporter.export(extent, initiator_iqn,
                                          chap_username, chap_secret)

    def unexport_extent(self, context, extent):
        self._require('unexport memory')
        LOG.info('Unexporting extent %s', extent['uuid'])
        self._node.exporter.unexport(extent)

    def scrub_extent(self, context, extent):
        self._require('scrub memory')
        LOG.info('Scrubbing extent %s', extent['uuid'])
        self._node.exporter.scrub(extent)

    def get_memory_report(self, context):
        self._require('report memory')
        return self._node.memory_report(targets=True)


class ComputeNodeEndpoint(_RoleEndpoint):
    """attach/detach memory and devices, SR-IOV functions and the
    conductor's push of an instance's leases, delegated to the back ends
    of ComputeNodeParts (each real or simulated, as configured) and to
    the libvirt hook server once it runs (``hook_server``)."""

    role = COMPUTE_NODE

    def __init__(self, host, roles, parts):
        super(ComputeNodeEndpoint, self).__init__(host, roles)
        self._parts = parts
        # The libvirt hook's socket, set by the agent when it serves it:
        # a domain being prepared by its hook defers its guest attaches.
        self.hook_server = None

    @staticmethod
    def _mode(mode):
        mode = mode or states.ATTACH_HOST
        if mode not in states.ATTACH_MODES:
            raise exception.DriverError(
                reason='unknown attach mode %r; use %s' % (
                    mode, ', '.join(states.ATTACH_MODES)))
        return mode

    # ------------------------------------------------------------ memory

    def attach_memory(self, context, lease, extents, mode,
                      instance_uuid=None, partial=False):
        """Attach the lease's ``extents``. In virtio-mem mode, when the
        lease's device is already in the guest (or waits for its start)
        and the agent holds regions of the lease, ``extents`` are new
        chunks that grow it (``partial`` says so; the agent's records
        decide): only their regions are made, and only their details
        are returned."""
        self._require('attach memory')
        mode = self._mode(mode)
        LOG.info('Attaching %(n)d extent(s) of lease %(lease)s in %(mode)s '
                 'mode%(to)s', {'n': len(extents), 'lease': lease['uuid'],
                                'mode': mode,
                                'to': (' to instance %s' % instance_uuid
                                       if mode in states.SERVER_ATTACH_MODES
                                       else '')})
        hook = self.hook_server
        if is_cxl(extents):
            if mode == states.ATTACH_GUEST:
                raise exception.DriverError(
                    reason='CXL memory of lease %s is onlined on the host '
                           'as a NUMA node; it cannot be attached in %s '
                           'mode (use host or virtio-mem)' % (
                               lease['uuid'], mode))
            if mode == states.ATTACH_VIRTIO_MEM and instance_uuid and \
                    self._grows(lease, instance_uuid, partial, hook):
                details = self._grow(lease, extents, instance_uuid, hook)
            else:
                details = self._parts.cxl.attach(lease, extents)
                if mode == states.ATTACH_VIRTIO_MEM:
                    details = self._into_guest(lease, extents, details,
                                               instance_uuid, hook)
        elif mode == states.ATTACH_VIRTIO_MEM:
            raise exception.DriverError(
                reason='lease %s holds network memory; virtio-mem mode '
                       'needs host memory (a CXL pool)' % lease['uuid'])
        else:
            details = self._parts.memory.attach(lease, extents, mode,
                                                instance_uuid, hook)
        if instance_uuid and hook is not None:
            hook.cache.add(instance_uuid, lease['uuid'])
        self._parts.attachments.memory_attached(
            lease['uuid'], details,
            dict(lease, attach_mode=mode, instance_uuid=instance_uuid))
        return details

    def _held_extents(self, lease_uuid):
        """The uuids of the chunks of a CXL lease this agent holds: those
        recorded as attached, and those the CXL back end has regions of
        (its records outlive a restart)."""
        held = set(self._parts.attachments.memory.get(lease_uuid) or ())
        held.update(self._parts.cxl.extents_of(lease_uuid))
        return held

    def _grows(self, lease, instance_uuid, partial, hook):
        """virtio-mem: whether an attach adds to the lease's device
        rather than plugging it."""
        if partial:
            return True
        return bool(self._held_extents(lease['uuid'])) and \
            self._parts.virtio_mem.has_device(lease, instance_uuid, hook)

    def _grow(self, lease, extents, instance_uuid, hook):
        """virtio-mem: new chunks of an elastic lease. Chunks that have
        their region already were counted in the device by the call that
        made it (a repeated call): they are only reported. The others get
        their regions, then the device asks for their size more; if it
        cannot, their regions are given back (erased)."""
        held = self._held_extents(lease['uuid'])
        recorded = self._parts.attachments.memory.get(lease['uuid']) or {}

        def released(extent):
            # Its size was given back by a shrink whose region could not
            # go: it counts again.
            return (recorded.get(extent['uuid']) or {}).get('released')
        old = [e for e in extents if e['uuid'] in held and not released(e)]
        again = [e for e in extents if e['uuid'] in held and released(e)]
        new = [e for e in extents if e['uuid'] not in held]
        details = {}
        if old:
            for uuid, d in self._parts.cxl.attach(lease, old).items():
                details[uuid] = dict(
                    d, mode=states.ATTACH_VIRTIO_MEM,
                    instance_uuid=instance_uuid)
                details[uuid].update(recorded.get(uuid) or {})
        if not new and not again:
            return details
        host_details = self._parts.cxl.attach(lease, new + again)
        try:
            details.update(self._parts.virtio_mem.grow(
                lease, host_details, instance_uuid, hook))
        except Exception as exc:
            # Only the regions this call made go back.
            if new:
                self._give_back(lease, new)
            if isinstance(exc, exception.DriverError):
                raise
            raise exception.DriverError(
                reason='growing the virtio-mem device of lease %s in '
                       'instance %s failed: %s' % (lease['uuid'],
                                                   instance_uuid, exc))
        LOG.info('Lease %(lease)s grew by %(n)d chunk(s) in instance '
                 '%(inst)s', {'lease': lease['uuid'], 'n': len(new),
                              'inst': instance_uuid})
        return details

    def _give_back(self, lease, extents):
        try:
            self._parts.cxl.detach(lease, extents)
        except exception.DriverError as undo:
            LOG.error('Lease %(lease)s: the CXL region made for the '
                      'guest could not be given back: %(reason)s',
                      {'lease': lease['uuid'], 'reason': undo.message})

    def _into_guest(self, lease, extents, host_details, instance_uuid,
                    hook):
        """virtio-mem: the NUMA node just onlined goes into the guest; if
        it cannot, the host gives the region back (erased) and the bind
        fails with the reason."""
        if not instance_uuid:
            self._parts.cxl.detach(lease, extents)
            raise exception.DriverError(
                reason='lease %s is bound in virtio-mem mode, which plugs '
                       'memory into a server; give its UUID' % lease['uuid'])
        try:
            return self._parts.virtio_mem.attach(lease, host_details,
                                                 instance_uuid, hook)
        except Exception as exc:
            self._give_back(lease, extents)
            if isinstance(exc, exception.DriverError):
                raise
            raise exception.DriverError(
                reason='plugging the CXL memory of lease %s into instance '
                       '%s failed: %s' % (lease['uuid'], instance_uuid, exc))

    def detach_memory(self, context, lease, extents, mode,
                      instance_uuid=None, partial=False):
        """Detach the lease's ``extents``. In virtio-mem mode, when they
        are some only of the chunks the agent holds for the lease (or
        ``partial`` says so), the device stays and gives back their size
        first: see _shrink."""
        self._require('detach memory')
        mode = self._mode(mode)
        if is_cxl(extents):
            held = self._held_extents(lease['uuid'])
            if mode == states.ATTACH_VIRTIO_MEM and (
                    partial or held - {e['uuid'] for e in extents}):
                self._shrink(lease, extents, held, instance_uuid)
                self._parts.attachments.memory_detached(lease['uuid'],
                                                        extents)
                return
            if mode == states.ATTACH_VIRTIO_MEM:
                # The guest gives the memory back first; a guest that
                # does not keeps it, and the host keeps the region.
                self._parts.virtio_mem.detach(lease, instance_uuid,
                                              self.hook_server)
            self._parts.cxl.detach(lease, extents)
        else:
            self._parts.memory.detach(lease, extents, mode, instance_uuid,
                                      self.hook_server)
        self._parts.attachments.memory_detached(lease['uuid'], extents)

    def _shrink(self, lease, extents, held, instance_uuid):
        """virtio-mem: some chunks of an elastic lease go. The device asks
        for their size less and the guest gives it back (bounded wait);
        a guest that does not keeps everything: its size, and the host
        regions. Then only their regions go. Chunks already gone are
        done; chunks whose size the device already gave back (a repeated
        call after their region could not go) are not counted again."""
        going = [e for e in extents if e['uuid'] in held]
        if not going:
            return
        # A region holding chunks not named would be refused after the
        # guest shrank: refuse first.
        self._parts.cxl.check_detach(lease, going)
        recorded = self._parts.attachments.memory.get(lease['uuid']) or {}
        uncounted = [e for e in going
                     if not (recorded.get(e['uuid']) or {}).get('released')]
        remove_mb = sum(int(e.get('size_mb') or
                            (recorded.get(e['uuid']) or {}).get('size_mb') or
                            0) for e in uncounted)
        self._parts.virtio_mem.shrink(lease, remove_mb, instance_uuid,
                                      self.hook_server)
        if uncounted:
            self._parts.attachments.memory_attached(
                lease['uuid'], {e['uuid']: dict(recorded.get(e['uuid']) or
                                                {}, released=True)
                                for e in uncounted})
        self._parts.cxl.detach(lease, going)
        LOG.info('Lease %(lease)s shrank by %(n)d chunk(s) (%(mb)d MiB) in '
                 'instance %(inst)s', {'lease': lease['uuid'],
                                       'n': len(going), 'mb': remove_mb,
                                       'inst': instance_uuid})

    def resize_memory(self, context, lease, instance_uuid, requested_mb):
        """virtio-mem mode: ask the guest of ``instance_uuid`` for
        ``requested_mb`` of the lease's device (up to the lease's size).
        A shrink returns once the guest gave the memory back, and fails
        (the guest keeps its former size) when it does not in time.
        Returns the MiB the guest then has of it."""
        self._require('resize memory')
        return self._parts.virtio_mem.resize(lease, instance_uuid,
                                             requested_mb)

    # ----------------------------------------------------------- devices

    def attach_devices(self, context, lease, devices):
        self._require('attach devices')
        backend = self._parts.devices
        result = backend.attach(lease, devices)
        self._parts.attachments.devices_attached(lease['uuid'], result)
        backend.into_guest(lease, result, self.hook_server)
        return result

    def detach_devices(self, context, lease, devices):
        self._require('detach devices')
        backend = self._parts.devices
        # The guest lets go first: the host side then releases functions
        # no guest drives any more, and the fabric unbinds them last.
        backend.out_of_guest(lease, devices, self.hook_server)
        backend.detach(lease, devices)
        self._parts.attachments.devices_detached(lease['uuid'], devices)

    def set_sriov_vfs(self, context, pf_address, count):
        """Give the physical function ``pf_address`` ``count`` virtual
        functions (through 0 when changing); returns ``{'pf_address',
        'vfs': [{'address', 'vendor_id', 'product_id', 'iommu_group'}]}``.
        Refused while one of its VFs that would go is leased."""
        self._require('set up SR-IOV virtual functions')
        return self._parts.devices.set_virtual_functions(pf_address, count)

    # ------------------------------------------------------ libvirt hook

    def instance_leases_changed(self, context, instance_uuid, lease_uuids):
        """The conductor's push (fanout, to memory nodes too): the leases
        of an instance changed; the libvirt hook's answers follow it at
        once."""
        if self.hook_server is not None:
            self.hook_server.leases_changed(instance_uuid, lease_uuids)
