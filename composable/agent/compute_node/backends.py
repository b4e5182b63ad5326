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

"""The data-plane back ends of a compute node, real or simulated, as the
configuration chooses.

Three kinds of lease reach a compute node, each through one back end:

memory (iSCSI extents)
    IscsiMemory: guest mode hot-plugs the extents into the libvirt domain
    of the instance (GuestMemoryAttacher, deferred to the ``started`` hook
    while the domain is being prepared); host mode logs in and makes them
    swap (HostSwap), with the instance's limit (GuestMemoryTuner).
    SimulatedMemory when ``[agent]memory_exporter = noop``.
CXL memory
    CxlHostMemory (cxl_memory) regions onlined as NUMA nodes;
    SimulatedCxlMemory when ``[compute_node]cxl_backend`` is noop (what an
    unset one means with the noop memory exporter). In virtio-mem mode
    VirtioMemGuests then plugs the node's memory into the instance
    (VirtioMemAttacher, deferred to the ``started`` hook while the domain
    is being prepared); with simulated CXL memory it plugs nothing.
PCI devices
    HostDevices: bound to vfio-pci on the host (HostPciDevices) and
    passed through into the instance (GuestDeviceAttacher);
    SimulatedDevices when ``[compute_node]pci_backend`` is noop (what an
    unset one means with the noop memory exporter).

A simulated back end changes nothing on the host: it logs what it would
do (at DEBUG, prefixed NOOP_ATTACH) and answers what the real one would.
Every back end has ``simulated``; the libvirt hook reads it to know
whether there is anything to look for in a guest.

The back ends take the hook server (or None) as an argument where a
domain being prepared by its libvirt hook changes what they do; they
never hold it.
"""

from oslo_log import log as logging

from composable.agent.compute_node import virtio_mem as virtio_mem_mod
from composable.common import exception
from composable.common import locator as locator_mod
from composable.common import media
from composable.common import states
from composable import conf
from composable.conf import compute_cxl as cxl_conf
from composable.conf import compute_pci as pci_conf

CONF = conf.CONF
LOG = logging.getLogger(__name__)

NOOP = 'noop'
NOOP_ATTACH = 'noop attach: nothing is attached on this host'

# Swap devices of leased memory all get the same priority so Linux
# round-robins pages over the extents of a lease (simulated attaches
# report it; real ones use [compute_node]swap_priority).
SWAP_PRIORITY = 10


def memory_simulated():
    """Whether leased iSCSI memory is simulated on this node: the noop
    memory exporter simulates the whole memory data plane, both roles."""
    return CONF.agent.memory_exporter == NOOP


def pci_backend():
    """The PCI backend in effect: [compute_node]pci_backend, or when it is
    unset, noop with the noop memory exporter and sysfs otherwise."""
    backend = CONF.compute_node.pci_backend
    if backend:
        return backend
    return pci_conf.NOOP if memory_simulated() else pci_conf.SYSFS


def cxl_backend():
    """The CXL backend in effect: [compute_node]cxl_backend, or when it is
    unset, noop with the noop memory exporter and sysfs otherwise."""
    backend = CONF.compute_node.cxl_backend
    if backend:
        return backend
    return cxl_conf.NOOP if memory_simulated() else cxl_conf.SYSFS


def _public(extent):
    """An extent dict without its CHAP credentials, for logs."""
    return {k: v for k, v in extent.items()
            if k not in ('chap_username', 'chap_secret')}


# ---------------------------------------------------------------- memory


class IscsiMemory(object):
    """Leased memory exported by memory nodes over iSCSI, attached for
    real. ``parts`` (ComputeNodeParts) makes the attachers when first
    needed."""

    simulated = False

    def __init__(self, parts):
        self.parts = parts

    def _check_initiator(self, lease):
        """The exports are restricted to the initiator registered for the
        host; this node must log in with that very name."""
        registered = lease.get('initiator_iqn')
        mine = CONF.compute_node.initiator_iqn
        if registered and registered != mine:
            raise exception.DriverError(
                reason='host %s is registered with initiator_iqn %s but '
                       'its composable-agent logs in as %s ([compute_node]'
                       'initiator_iqn); make them the same' %
                       (self.parts.host, registered, mine))
        return mine

    def attach(self, lease, extents, mode, instance_uuid, hook=None):
        initiator = self._check_initiator(lease)
        if mode == states.ATTACH_GUEST:
            if not instance_uuid:
                raise exception.DriverError(
                    reason='guest-mode memory of lease %s needs the server '
                           '(libvirt domain) to attach to' % lease['uuid'])
            # While the domain is being prepared (libvirt hook) QEMU does
            # not run yet: the hook's started step plugs it.
            details = None
            if hook is not None:
                details = hook.defer_guest_attach(lease, extents, initiator,
                                                  instance_uuid)
            if details is None:
                details = self.parts.guest_attacher.attach(
                    instance_uuid, extents, initiator,
                    lease_uuid=lease['uuid'])
            return details
        details = self.parts.host_swap.attach(extents, initiator)
        if instance_uuid:
            self.parts.memory_tuner.apply(instance_uuid, lease['uuid'],
                                          lease.get('memory_mb') or 0)
        return details

    def detach(self, lease, extents, mode, instance_uuid, hook=None):
        if mode == states.ATTACH_GUEST:
            # forget_guest: while the libvirt hook of the domain runs, no
            # libvirt call may touch the domain; QEMU is gone anyway.
            if instance_uuid and not (
                    hook is not None and
                    hook.forget_guest(instance_uuid, lease['uuid'],
                                      extents)):
                self.parts.guest_attacher.detach(instance_uuid, extents)
            else:
                LOG.warning('Guest-mode memory of lease %s names no '
                            'server; nothing to detach', lease['uuid'])
            return
        # An extent with no target was never exported, so never logged
        # in to.
        known = [e for e in extents if e.get('target_iqn') and
                 e.get('lun') is not None]
        if instance_uuid:
            # Lift the guest's limit first: its pages come back to RAM
            # before swapoff needs the room.
            self.parts.memory_tuner.clear(instance_uuid, lease['uuid'])
        if known:
            self.parts.host_swap.detach(known)


class SimulatedMemory(object):
    """Leased iSCSI memory simulated: nothing is logged in to or
    hot-plugged; the details are those a real attach would report."""

    simulated = True

    def attach(self, lease, extents, mode, instance_uuid, hook=None):
        details = {}
        for extent in extents:
            public = _public(extent)
            if mode == states.ATTACH_GUEST:
                LOG.debug('%(noop)s: would hot-plug an iSCSI disk for '
                          'target %(iqn)s lun %(lun)s at %(portal)s into '
                          'instance %(instance)s',
                          {'noop': NOOP_ATTACH,
                           'iqn': public.get('target_iqn'),
                           'lun': public.get('lun'),
                           'portal': public.get('portal'),
                           'instance': instance_uuid})
                details[extent['uuid']] = {
                    'mode': states.ATTACH_GUEST,
                    'instance_uuid': instance_uuid,
                    'target_iqn': public.get('target_iqn'),
                    'lun': public.get('lun')}
            else:
                path = ('/dev/disk/by-path/ip-%s-iscsi-%s-lun-%s' %
                        (public.get('portal'), public.get('target_iqn'),
                         public.get('lun')))
                LOG.debug('%(noop)s: would log in to target %(iqn)s at '
                          '%(portal)s and swapon -p %(prio)d %(path)s',
                          {'noop': NOOP_ATTACH,
                           'iqn': public.get('target_iqn'),
                           'portal': public.get('portal'),
                           'prio': SWAP_PRIORITY, 'path': path})
                details[extent['uuid']] = {'mode': states.ATTACH_HOST,
                                           'device': path,
                                           'swap_priority': SWAP_PRIORITY}
            # What the simulated usage (usage.SimulatedUsageSampler)
            # takes as the lease's size.
            details[extent['uuid']]['size_mb'] = extent.get('size_mb')
        return details

    def detach(self, lease, extents, mode, instance_uuid, hook=None):
        for extent in extents:
            LOG.debug('%(noop)s: would swapoff and log out of target '
                      '%(iqn)s (lease %(lease)s)',
                      {'noop': NOOP_ATTACH, 'iqn': extent.get('target_iqn'),
                       'lease': lease['uuid']})


# ------------------------------------------------------------------- CXL


class CxlMemory(object):
    """CXL memory for real: CxlHostMemory (cxl_memory), made when first
    used."""

    simulated = False

    def __init__(self, parts):
        self.parts = parts

    def start(self):
        """Check the kernel and settle what earlier runs (and boots)
        left; what the start put online again for leases bound here
        (CxlHostMemory.restored)."""
        memory = self.parts.cxl_memory
        memory.start()
        return list(memory.restored)

    def attach(self, lease, extents):
        return self.parts.cxl_memory.attach(lease, extents)

    def detach(self, lease, extents):
        self.parts.cxl_memory.detach(lease, extents)

    def check_detach(self, lease, extents):
        """Raise DriverError, changing nothing, when ``extents`` share a
        region with chunks of the lease not among them."""
        self.parts.cxl_memory.check_detach(lease, extents)

    def extents_of(self, lease_uuid):
        """The chunks of the lease that have regions here (the agent's
        records, kept across restarts)."""
        return self.parts.cxl_memory.extents_of(lease_uuid)


class VirtioMemGuests(object):
    """virtio-mem mode: the lease's CXL memory, onlined on the host by
    the CXL back end, goes into the instance as one virtio-mem device
    (virtio_mem.VirtioMemAttacher)."""

    def __init__(self, parts):
        self.parts = parts

    @property
    def simulated(self):
        return self.parts.cxl.simulated

    @staticmethod
    def _shape(host_details):
        nodes = sorted({d['numa_node'] for d in host_details.values()
                        if d.get('numa_node') is not None})
        size_mb = sum(int(d.get('size_mb') or 0)
                      for d in host_details.values())
        return nodes, size_mb

    @staticmethod
    def _details(host_details, instance_uuid):
        return {uuid: dict(d, mode=states.ATTACH_VIRTIO_MEM,
                           instance_uuid=instance_uuid)
                for uuid, d in host_details.items()}

    def attach(self, lease, host_details, instance_uuid, hook):
        """``host_details``: what the CXL back end reported per chunk.
        Returns the details per chunk, now of virtio-mem mode. The device
        is as large as the lease may grow (its ``max_mb``, when larger
        than its chunks); the guest is asked for the chunks' size."""
        nodes, size_mb = self._shape(host_details)
        device_mb = virtio_mem_mod.device_size_mib(size_mb,
                                                   lease.get('max_mb'))
        details = self._details(host_details, instance_uuid)
        if self.simulated or not nodes:
            LOG.debug('%(noop)s: would plug %(size)d MiB of lease '
                      '%(lease)s into instance %(inst)s as a virtio-mem '
                      'device of %(device)d MiB',
                      {'noop': NOOP_ATTACH, 'size': size_mb,
                       'device': device_mb, 'lease': lease['uuid'],
                       'inst': instance_uuid})
            return details
        spec = {'nodes': nodes, 'size_mb': device_mb,
                'requested_mb': size_mb}
        if hook is not None and hook.defer_virtio_mem(lease, spec,
                                                      instance_uuid):
            for d in details.values():
                d.update(deferred='started', requested_mb=size_mb)
            return details
        plugged = self.parts.virtio_mem_attacher.attach(
            instance_uuid, lease['uuid'], nodes, device_mb,
            requested_mib=size_mb)
        for d in details.values():
            d.update(alias=plugged['alias'],
                     requested_mb=plugged['requested_mb'])
        return details

    def has_device(self, lease, instance_uuid, hook):
        """Whether the lease's device is in the running guest, or waits
        in the libvirt hook for the domain's ``started``."""
        if self.simulated:
            return True
        if hook is not None:
            if hook.virtio_mem_pending(instance_uuid, lease['uuid']):
                return True
            if hook.domain_busy(instance_uuid):
                # Its hook holds the domain (no libvirt call on it may be
                # made): QEMU is not running, so neither is a device.
                return False
        return self.parts.virtio_mem_attacher.device(
            instance_uuid, lease['uuid']) is not None

    def grow(self, lease, host_details, instance_uuid, hook):
        """An elastic lease got the chunks of ``host_details`` (online on
        the host): its device's requested size goes up by their size.
        Returns their details. Raises DriverError (nothing changed in
        the guest) when the device cannot take them."""
        nodes, add_mb = self._shape(host_details)
        details = self._details(host_details, instance_uuid)
        if self.simulated or not nodes:
            LOG.debug('%(noop)s: would ask instance %(inst)s for %(size)d '
                      'MiB more of the virtio-mem device of lease '
                      '%(lease)s', {'noop': NOOP_ATTACH, 'size': add_mb,
                                    'lease': lease['uuid'],
                                    'inst': instance_uuid})
            return details
        if hook is not None:
            spec = hook.grow_virtio_mem(lease['uuid'], nodes, add_mb,
                                        instance_uuid)
            if spec is not None:
                for d in details.values():
                    d.update(deferred='started',
                             requested_mb=spec['requested_mb'])
                return details
            if hook.domain_busy(instance_uuid):
                raise exception.DriverError(
                    reason='instance %s is being started or stopped and '
                           'has no virtio-mem device of lease %s waiting '
                           'to be plugged; it cannot grow now' % (
                               instance_uuid, lease['uuid']))
        grown = self.parts.virtio_mem_attacher.grow(
            instance_uuid, lease['uuid'], nodes, add_mb)
        for d in details.values():
            d.update(alias=grown['alias'], requested_mb=grown['requested_mb'])
        return details

    def shrink(self, lease, remove_mb, instance_uuid, hook):
        """Some chunks of an elastic lease go: its device's requested
        size goes down by ``remove_mb`` and the guest gives the memory
        back. Raises ShrinkRefused (the guest keeps its size, the host
        regions must stay) when it does not."""
        if self.simulated or not remove_mb:
            return
        attacher = self.parts.virtio_mem_attacher
        if not instance_uuid:
            for holder in attacher.holders(lease['uuid']):
                self.shrink(lease, remove_mb, holder, hook)
            return
        if hook is not None and hook.shrink_virtio_mem(
                instance_uuid, lease['uuid'], remove_mb):
            return
        attacher.shrink(instance_uuid, lease['uuid'], remove_mb)

    def detach(self, lease, instance_uuid, hook):
        """Empty (and unplug) the lease's device; raises when the guest
        does not give the memory back: the host region must then stay."""
        if self.simulated:
            return
        attacher = self.parts.virtio_mem_attacher
        if not instance_uuid:
            # Not told which guest: every running one that has the
            # device gives the memory back before the region can go.
            for holder in attacher.holders(lease['uuid']):
                self.detach(lease, holder, hook)
            return
        if hook is not None and hook.forget_virtio_mem(instance_uuid,
                                                       lease['uuid']):
            # The libvirt hook holds the domain: QEMU, and the memory it
            # had of the host node, are gone.
            return
        attacher.detach(instance_uuid, lease['uuid'])

    def resize(self, lease, instance_uuid, requested_mb):
        if self.simulated:
            return requested_mb
        return self.parts.virtio_mem_attacher.resize(
            instance_uuid, lease['uuid'], requested_mb)


class SimulatedCxlMemory(object):
    """CXL memory simulated: no region is made or onlined."""

    simulated = True

    def start(self):
        return []

    def attach(self, lease, extents):
        details = {}
        for extent in extents:
            LOG.debug('%(noop)s: would make a region of chunk %(chunk)s of '
                      'CXL memory device %(device)s and online it movable '
                      '(lease %(lease)s)',
                      {'noop': NOOP_ATTACH, 'chunk': extent['uuid'],
                       'device': extent.get('device'),
                       'lease': lease['uuid']})
            details[extent['uuid']] = {
                'mode': states.ATTACH_HOST, 'medium': media.CXL,
                'cxl_device': extent.get('device'), 'region': None,
                'numa_node': None, 'size_mb': extent.get('size_mb')}
        return details

    def detach(self, lease, extents):
        pass

    def check_detach(self, lease, extents):
        pass

    def extents_of(self, lease_uuid):
        # Nothing is recorded: the agent's record of attachments is all.
        return []


# ------------------------------------------------------------ PCI devices


class HostDevices(object):
    """Leased PCI functions bound to vfio-pci on this host
    (HostPciDevices) and passed through into the lease's instance
    (GuestDeviceAttacher)."""

    simulated = False

    def __init__(self, parts):
        self.parts = parts

    def start(self, reporter):
        """Check the host for device passthrough, create the SR-IOV
        virtual functions the configuration asks for, and bind again the
        devices of the leases bound here; ``reporter(results)`` tells the
        conductor. A host that fails the checks keeps doing memory work;
        its device attaches fail with the reason."""
        host_pci = self.parts.host_pci
        try:
            host_pci.start()
        except exception.ComposableException as exc:
            host_pci.refusal = exc.message
            LOG.error('Leased PCI devices cannot be used on %(host)s: '
                      '%(reason)s', {'host': self.parts.host,
                                     'reason': exc.message})
            return
        host_pci.create_configured_vfs()
        reporter(host_pci.restore())

    def attach(self, lease, devices):
        return self.parts.host_pci.attach(lease, devices)

    def detach(self, lease, devices):
        self.parts.host_pci.detach(lease, devices)

    def set_virtual_functions(self, pf_address, count):
        return self.parts.host_pci.set_virtual_functions(pf_address, count)

    def into_guest(self, lease, addresses, hook=None):
        """Pass the lease's functions ({device uuid: host PCI address},
        bound to vfio-pci on this host) through to its instance, if it
        has one. While the instance's domain is being prepared (libvirt
        hook) QEMU does not run yet: the hook's started step plugs
        them."""
        instance = lease.get('instance_uuid')
        if not instance or not addresses:
            return
        if hook is not None and hook.defer_guest_devices(lease, addresses,
                                                         instance):
            return
        self.parts.device_attacher.attach(instance, lease['uuid'],
                                          addresses)

    def out_of_guest(self, lease, devices, hook=None):
        """Unplug the lease's devices from its instance and wait until
        the guest let go of them; raises DriverError (the lease's fault)
        when it does not."""
        instance = lease.get('instance_uuid')
        if not instance or not devices:
            return
        if hook is not None and hook.forget_guest_devices(instance,
                                                          lease['uuid']):
            # The domain is held by its libvirt hook: QEMU has not started
            # yet or has exited, and no libvirt call may touch it now.
            return
        self.parts.device_attacher.detach(instance, lease['uuid'],
                                          [d['uuid'] for d in devices])


class SimulatedDevices(object):
    """Leased PCI devices simulated: nothing is bound or passed through;
    a device is reported where the fabric said it appears."""

    simulated = True

    def __init__(self, host):
        self.host = host

    def start(self, reporter):
        LOG.warning('%s: [compute_node]pci_backend is noop, so leased PCI '
                    'devices are simulated on %s', NOOP_ATTACH, self.host)

    def attach(self, lease, devices):
        result = {}
        for device in devices:
            # What the fabric told about where the device will appear: a
            # bus address only where it knows one.
            try:
                where = locator_mod.Locator.from_primitive(
                    device.get('locator') or {}).filled_from(
                        pci_address=device.get('pci_address')).describe()
            except locator_mod.InvalidLocator as exc:
                raise exception.DriverError(
                    reason='device %s: %s' % (device['uuid'], exc))
            LOG.debug('%(noop)s: would rescan PCI and bind device '
                      '%(dev)s found at %(where)s (lease %(lease)s)',
                      {'noop': NOOP_ATTACH, 'dev': device['uuid'],
                       'where': where, 'lease': lease['uuid']})
            result[device['uuid']] = device.get('pci_address')
        return result

    def detach(self, lease, devices):
        for device in devices:
            LOG.debug('%(noop)s: would remove device %(dev)s from PCI '
                      '(lease %(lease)s)',
                      {'noop': NOOP_ATTACH, 'dev': device['uuid'],
                       'lease': lease['uuid']})

    def set_virtual_functions(self, pf_address, count):
        LOG.debug('%(noop)s: would give %(pf)s %(n)s virtual function(s)',
                  {'noop': NOOP_ATTACH, 'pf': pf_address, 'n': count})
        return {'pf_address': pf_address, 'vfs': [], 'simulated': True}

    def into_guest(self, lease, addresses, hook=None):
        instance = lease.get('instance_uuid')
        if not instance or not addresses:
            return
        LOG.debug('%(noop)s: would hot-plug device(s) %(devices)s of lease '
                  '%(lease)s into instance %(instance)s',
                  {'noop': NOOP_ATTACH,
                   'devices': ', '.join(sorted(addresses)),
                   'lease': lease['uuid'], 'instance': instance})

    def out_of_guest(self, lease, devices, hook=None):
        pass
