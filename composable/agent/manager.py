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

"""The composable-agent RPC endpoint.

One agent runs per memory node and per compute node, with the roles its
node has (``[agent]roles``). Every method is idempotent, because the
conductor repeats calls after timeouts and when it resumes work.

memory_node role
    The exporter named by ``[agent]memory_exporter`` (``tgt``, ``lio``,
    or ``noop``) serves the extents of this node, each a file in the
    node's tmpfs area (composable.memory.tmpfs). start() mounts or checks
    the area, so a node whose tmpfs is missing says so when the agent
    starts, not at the first bind. The capacity and usage of the area are
    logged every ``[agent]report_interval`` seconds and answered by
    ``get_memory_report``, which also lists the extents the exporter
    serves a target for (the conductor's reconciler removes the targets
    no lease holds).

compute_node role
    attach_memory/detach_memory go, by the lease's attach mode, to
    GuestMemoryAttacher (``guest``: the extents are hot-plugged into the
    libvirt domain whose UUID is ``instance_uuid`` and made swap there
    through its guest agent) or to HostSwap (``host``: iSCSI login and
    swap on this host). One of each per process, made when first needed.
    Both act on the extents they are given only: attach_memory with the
    new extents of a lease attached already grows it (one more swap
    device, or one more disk), detach_memory with some of its extents
    shrinks it, and refuses (nothing changed) when the pages on them
    would not fit back into free memory.

    Every ``[compute_node]usage_report_interval`` seconds the use of
    each memory lease attached here (swap used on its extents) goes to
    the conductor (composable.agent.compute_node.usage).

    The chunks of a CXL memory lease (extents with ``medium`` cxl, host
    mode only) go to CxlHostMemory
    (composable.agent.compute_node.cxl_memory): a RAM region per device,
    onlined movable as a NUMA node without CPUs, and erased and destroyed
    at detach. start() checks the kernel for it and finishes or undoes
    what a previous run began; ``[compute_node]cxl_backend = noop``
    simulates it.

    attach_devices/detach_devices go to HostPciDevices
    (composable.agent.compute_node.host_pci): the function the fabric
    composed is found on the PCI bus, checked and bound to vfio-pci, and
    taken off the bus again before the fabric unbinds it. A device of a
    lease bound to an instance goes into its guest as a PCI hostdev
    (GuestDeviceAttacher, composable.agent.compute_node.hostdev) once the
    host bound it, and leaves the guest before the host releases it.
    set_sriov_vfs gives a physical function its virtual functions;
    ``[compute_node]sriov_numvfs`` creates them when the agent starts.

With ``[agent]memory_exporter = noop`` the whole memory data plane is
simulated, on both roles: nothing is exported or attached, and the log
says so. Devices are simulated the same way by ``[compute_node]
pci_backend = noop``, which is what an unset pci_backend means when the
memory exporter is noop.

CHAP credentials arrive in ``extent`` dicts and in export_extent's
arguments; they are never logged.
"""

import threading

from oslo_log import log as logging
import oslo_messaging as messaging

from composable.agent.compute_node import cxl_memory as cxl_memory_mod
from composable.agent.compute_node import host_pci as host_pci_mod
from composable.agent.compute_node import host_swap as host_swap_mod
from composable.agent import hook_server as hook_server_mod
from composable.agent.compute_node import hostdev
from composable.agent.compute_node import libvirt_guest
from composable.agent.compute_node import memory_tuning
from composable.agent.compute_node import usage as usage_mod
from composable.common import context as composable_context
from composable.common import exception
from composable.common import media
from composable.common import states
from composable import conf
from composable.conf import compute_cxl as cxl_conf
from composable.conf import compute_pci as pci_conf
from composable.memory import exporters

CONF = conf.CONF
LOG = logging.getLogger(__name__)

MEMORY_NODE = 'memory_node'
COMPUTE_NODE = 'compute_node'
# The machine's SMBIOS system UUID, as the kernel shows it (readable by
# root only on most distributions).
DMI_UUID_PATH = '/sys/class/dmi/id/product_uuid'
ROLES = (MEMORY_NODE, COMPUTE_NODE)

NOOP = 'noop'
NOOP_ATTACH = 'noop attach: nothing is attached on this host'

# Swap devices of leased memory all get the same priority so Linux
# round-robins pages over the extents of a lease (simulated attaches
# report it; real ones use [compute_node]swap_priority).
SWAP_PRIORITY = 10


def pci_backend():
    """The PCI backend in effect: [compute_node]pci_backend, or when it is
    unset, noop with the noop memory exporter and sysfs otherwise."""
    backend = CONF.compute_node.pci_backend
    if backend:
        return backend
    return (pci_conf.NOOP if CONF.agent.memory_exporter == NOOP
            else pci_conf.SYSFS)


def cxl_backend():
    """The CXL backend in effect: [compute_node]cxl_backend, or when it is
    unset, noop with the noop memory exporter and sysfs otherwise."""
    backend = CONF.compute_node.cxl_backend
    if backend:
        return backend
    return (cxl_conf.NOOP if CONF.agent.memory_exporter == NOOP
            else cxl_conf.SYSFS)


def is_cxl(extents):
    """True for the chunks of a CXL memory lease."""
    return any(e.get('medium') == media.CXL for e in extents or ())


def _public(extent):
    """An extent dict without its CHAP credentials, for logs."""
    return {k: v for k, v in extent.items()
            if k not in ('chap_username', 'chap_secret')}


class AgentManager(object):

    # 1.1: set_sriov_vfs
    # 1.2: attach_devices / detach_devices take SR-IOV virtual functions
    target = messaging.Target(version='1.2')

    def __init__(self, host, roles=None, exporter=None, guest_attacher=None,
                 host_swap=None, simulate=None, memory_tuner=None,
                 host_pci=None, device_attacher=None, conductor_api=None,
                 cxl_memory=None):
        self.host = host
        self._conductor = conductor_api
        self.roles = tuple(roles if roles is not None else CONF.agent.roles)
        unknown = set(self.roles) - set(ROLES)
        if unknown:
            raise exception.Invalid(
                reason='unknown agent roles %s' % ', '.join(sorted(unknown)))
        self._exporter = exporter
        self._guest = guest_attacher
        self._host_swap = host_swap
        self._tuner = memory_tuner
        self._devices = device_attacher
        if simulate is None:
            simulate = (CONF.agent.memory_exporter == NOOP and
                        guest_attacher is None and host_swap is None)
        # Simulated compute side: attach_memory/detach_memory only log.
        self.simulate = simulate
        self._host_pci = host_pci
        self._cxl = cxl_memory
        # Simulated CXL memory: its attaches and detaches only log.
        self.simulate_cxl = (cxl_memory is None and
                             cxl_backend() == cxl_conf.NOOP)
        # Simulated devices: attach_devices/detach_devices only log.
        self.simulate_devices = (host_pci is None and
                                 pci_backend() == pci_conf.NOOP)
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._reporter = None
        # The libvirt hook's socket (compute_node role, started by start()).
        self.hook_server = None
        # What this node has live, by lease uuid; kept so repeated calls
        # answer the same and tests can check nothing is left over.
        # memory_attachments: {lease uuid: {extent uuid: details}}.
        self.memory_attachments = {}
        # {lease uuid: {'uuid', 'attach_mode', 'instance_uuid'}} of the
        # memory leases attached here, for the usage reports.
        self._memory_leases = {}
        self._usage = None
        self.device_attachments = {}

    # ------------------------------------------------------------ drivers

    @property
    def exporter(self):
        if self._exporter is None:
            with self._lock:
                if self._exporter is None:
                    self._exporter = exporters.get_exporter(
                        CONF.agent.memory_exporter, self.host)
        return self._exporter

    @property
    def area(self):
        """The tmpfs area of the exporter, or None (noop)."""
        return getattr(self.exporter, 'area', None)

    @property
    def guest_attacher(self):
        if self._guest is None:
            with self._lock:
                if self._guest is None:
                    self._guest = libvirt_guest.GuestMemoryAttacher()
        return self._guest

    @property
    def memory_tuner(self):
        if self._tuner is None:
            with self._lock:
                if self._tuner is None:
                    self._tuner = memory_tuning.GuestMemoryTuner(
                        self.guest_attacher)
        return self._tuner

    @property
    def device_attacher(self):
        """Passes leased PCI functions through into guests."""
        if self._devices is None:
            with self._lock:
                if self._devices is None:
                    self._devices = hostdev.GuestDeviceAttacher()
        return self._devices

    @property
    def host_swap(self):
        if self._host_swap is None:
            with self._lock:
                if self._host_swap is None:
                    self._host_swap = host_swap_mod.HostSwap()
        return self._host_swap

    @property
    def cxl_memory(self):
        """CXL memory of host-mode leases (regions onlined as NUMA
        nodes)."""
        if self._cxl is None:
            with self._lock:
                if self._cxl is None:
                    self._cxl = cxl_memory_mod.CxlHostMemory()
        return self._cxl

    @property
    def host_pci(self):
        if self._host_pci is None:
            with self._lock:
                if self._host_pci is None:
                    self._host_pci = host_pci_mod.HostPciDevices()
        return self._host_pci

    # ------------------------------------------------------------ life

    def start(self):
        """Get the node ready before the first request: the tmpfs area
        of a memory node is mounted (or checked) now."""
        self._stopping.clear()
        if MEMORY_NODE in self.roles:
            area = self.area
            if area is not None:
                area.ensure_ready()
            self.report()
            self._reporter = threading.Thread(
                target=self._report_loop, name='agent-report', daemon=True)
            self._reporter.start()
        if COMPUTE_NODE in self.roles:
            if self.simulate:
                LOG.warning('%s: [agent]memory_exporter is noop, so leased '
                            'memory is simulated on %s', NOOP_ATTACH,
                            self.host)
            else:
                LOG.info('Compute node %(host)s attaches leased memory as '
                         'initiator %(iqn)s',
                         {'host': self.host,
                          'iqn': CONF.compute_node.initiator_iqn})
            self._start_devices()
            self._start_cxl()
            self.report_host_facts()
            self.start_usage()
            if CONF.compute_node.hook_socket:
                self._start_hook_server()
            else:
                LOG.warning('[compute_node]hook_socket is empty: the libvirt '
                            'hook gets no answer, and domains start without '
                            'their leases')

    def _start_devices(self):
        """Check the host for device passthrough, and create the SR-IOV
        virtual functions the configuration asks for. A host that fails
        the checks keeps doing memory work; its device attaches fail with
        the reason."""
        if self.simulate_devices:
            LOG.warning('%s: [compute_node]pci_backend is noop, so leased '
                        'PCI devices are simulated on %s', NOOP_ATTACH,
                        self.host)
            return
        try:
            self.host_pci.start()
        except exception.ComposableException as exc:
            self.host_pci.refusal = exc.message
            LOG.error('Leased PCI devices cannot be used on %(host)s: '
                      '%(reason)s', {'host': self.host,
                                     'reason': exc.message})
            return
        self.host_pci.create_configured_vfs()
        self.report_restored(self.host_pci.restore())

    def _start_cxl(self):
        """Check the kernel for CXL memory and finish or undo the region
        work a previous run left. A host that fails the check keeps doing
        its other work; its CXL binds fail with the reason."""
        if self.simulate_cxl:
            return
        try:
            self.cxl_memory.start()
        except exception.ComposableException as exc:
            LOG.warning('Leased CXL memory cannot be bound on %(host)s: '
                        '%(reason)s', {'host': self.host,
                                       'reason': exc.message})

    @property
    def conductor(self):
        if self._conductor is None:
            from composable.conductor import rpcapi as conductor_rpcapi
            self._conductor = conductor_rpcapi.ConductorAPI()
        return self._conductor

    def report_host_facts(self):
        """Tell the conductor the machine's DMI UUID, by which a fabric
        driver can match this host to the fabric's system (a Redfish
        ComputerSystem's UUID). Nothing is sent when it cannot be read;
        the agent goes on starting either way."""
        try:
            with open(DMI_UUID_PATH) as f:
                dmi_uuid = f.read(64).strip()
        except OSError as exc:
            LOG.info('The DMI UUID of %(host)s cannot be read from %(path)s '
                     '(%(exc)s); fabrics match this host by name or by '
                     'their system_map', {'host': self.host,
                                          'path': DMI_UUID_PATH,
                                          'exc': exc.strerror or exc})
            return False
        if not dmi_uuid:
            return False
        try:
            self.conductor.report_host_facts(
                composable_context.get_admin_context(), self.host,
                {'dmi_uuid': dmi_uuid})
        except Exception as exc:
            LOG.error('Could not tell the conductor the DMI UUID of '
                      '%(host)s: %(exc)s', {'host': self.host, 'exc': exc})
            return False
        return True

    def report_restored(self, results):
        """Tell the conductor what the start did to the devices of the
        leases bound here (bound to vfio-pci again, or why not), so that
        the leases say it. The agent goes on starting if it cannot: the
        log says it too."""
        if not results:
            return False
        try:
            self.conductor.report_devices_restored(
                composable_context.get_admin_context(), self.host,
                list(results))
        except Exception as exc:
            LOG.error('Could not tell the conductor which devices of '
                      'leases bound on %(host)s were bound to vfio-pci '
                      'again: %(exc)s', {'host': self.host, 'exc': exc})
            return False
        return True

    def start_usage(self):
        """Report how much of each memory lease attached here is in use
        (composable.agent.compute_node.usage); simulated memory has no
        use to measure, so it reports a simulated one only when
        [compute_node]simulated_usage asks for it (the demo).
        composable-all calls it alone (its agents share the process, so
        they do not take the hook socket); stop() ends it."""
        if self.simulate:
            if not CONF.compute_node.simulated_usage:
                return
            sampler = usage_mod.SimulatedUsageSampler(self)
        else:
            sampler = usage_mod.UsageSampler(self)
        if sampler.start():
            self._usage = sampler

    def memory_leases(self):
        """{lease uuid: (lease, {extent uuid: details})} of the memory
        leases attached here: a snapshot."""
        with self._lock:
            return {uuid: (dict(self._memory_leases.get(uuid) or
                                {'uuid': uuid}), dict(details))
                    for uuid, details in self.memory_attachments.items()}

    def recover_memory_leases(self, conductor):
        """Learn from the conductor the memory leases attached here that
        this process did not attach (it restarted; the host's swap and
        the guests' disks are still there), so that their use is reported
        again: the host-mode leases bound to this host whose swap is still
        on, and the guest-mode leases bound to the running guests of this
        host. The number of leases learnt."""
        if self.simulate:
            return 0
        ctx = composable_context.get_admin_context()
        learnt = self._recover_host_memory_leases(conductor, ctx)
        for instance in sorted(conductor.instance_leases(ctx, self.host)):
            domain = self.guest_attacher.domain(instance, missing_ok=True)
            if domain is None or not domain.isActive():
                continue
            for lease in conductor.instance_status(ctx, instance,
                                                   self.host):
                if lease.get('status') != states.BOUND or \
                        lease.get('host') != self.host or \
                        lease.get('attach_mode') != states.ATTACH_GUEST or \
                        not lease.get('extents'):
                    continue
                with self._lock:
                    if lease['uuid'] in self.memory_attachments:
                        continue
                    self.memory_attachments[lease['uuid']] = {
                        extent: {'mode': states.ATTACH_GUEST,
                                 'instance_uuid': instance,
                                 'recovered': True}
                        for extent in lease['extents']}
                    self._memory_leases[lease['uuid']] = {
                        'uuid': lease['uuid'],
                        'attach_mode': states.ATTACH_GUEST,
                        'instance_uuid': instance}
                learnt += 1
        if learnt:
            LOG.info('Learnt %(n)d memory lease(s) attached on %(host)s '
                     'from the conductor', {'n': learnt, 'host': self.host})
        return learnt

    def _recover_host_memory_leases(self, conductor, ctx):
        """The host-mode part of recover_memory_leases: each extent the
        conductor says this agent attached, whose device is still swap
        on this host, is recorded again with those details."""
        learnt = 0
        for lease in conductor.host_memory_leases(ctx, self.host):
            if lease.get('status') != states.BOUND or \
                    lease.get('host') != self.host or \
                    lease.get('attach_mode') != states.ATTACH_HOST:
                continue
            attached = lease.get('memory') or {}
            live = {}
            for extent in lease.get('extents') or []:
                details = attached.get(extent) or {}
                device = details.get('device') or details.get('swap_device')
                if not device or self.host_swap.swap_entry(device) is None:
                    # Not swap here any more (the host restarted, say):
                    # nothing of it to report.
                    continue
                live[extent] = dict(details, mode=states.ATTACH_HOST,
                                    recovered=True)
            if not live:
                continue
            with self._lock:
                if lease['uuid'] in self.memory_attachments:
                    continue
                self.memory_attachments[lease['uuid']] = live
                self._memory_leases[lease['uuid']] = {
                    'uuid': lease['uuid'],
                    'attach_mode': states.ATTACH_HOST,
                    'instance_uuid': lease.get('instance_uuid')}
            learnt += 1
        return learnt

    def _start_hook_server(self):
        server = hook_server_mod.HookServer(self)
        try:
            server.start()
        except Exception as exc:
            # The agent's RPC work goes on; domains start without leases.
            LOG.error('Cannot answer the libvirt hook on %(path)s: %(exc)s',
                      {'path': server.path,
                       'exc': getattr(exc, 'message', None) or exc})
            return
        self.hook_server = server

    def stop(self):
        self._stopping.set()
        if self.hook_server is not None:
            self.hook_server.stop()
            self.hook_server = None
        if self._reporter is not None:
            self._reporter.join(5)
            self._reporter = None
        if self._usage is not None:
            self._usage.stop()
            self._usage = None

    def _report_loop(self):
        while not self._stopping.wait(CONF.agent.report_interval):
            try:
                self.report()
            except Exception:
                LOG.exception('Could not report the memory of %s',
                              self.host)

    def memory_report(self, targets=False):
        """Capacity and usage of this memory node, in MiB; with
        ``targets``, also the extents the exporter serves a target for
        (``exported_extent_uuids``, None when it cannot tell)."""
        self._require(MEMORY_NODE, 'report memory')
        report = {'node': self.host,
                  'exporter': CONF.agent.memory_exporter}
        area = self.area
        if area is None:
            backed = sorted(getattr(self.exporter, 'backed', ()))
            report.update({'simulated': True, 'extents': len(backed),
                           'extent_uuids': backed, 'total_mb': None,
                           'used_mb': None, 'free_mb': None})
        else:
            report.update(area.usage())
            report['extent_uuids'] = sorted(f['uuid'] for f in area.list())
            report['simulated'] = False
        if targets:
            exported = getattr(self.exporter, 'exported', None)
            try:
                report['exported_extent_uuids'] = (
                    exported() if exported is not None else None)
            except exception.ComposableException as exc:
                # Unknown, not empty: the conductor then leaves every
                # target alone.
                report['exported_extent_uuids'] = None
                report['exporter_problem'] = exc.message
        return report

    def report(self):
        report = self.memory_report()
        LOG.info('Memory node %(node)s: %(extents)s extent(s), tmpfs '
                 '%(used)s of %(total)s MiB used, %(free)s MiB free '
                 '(exporter %(exporter)s)',
                 {'node': report['node'], 'extents': report['extents'],
                  'used': report.get('used_mb'),
                  'total': report.get('total_mb'),
                  'free': report.get('free_mb'),
                  'exporter': report['exporter']})
        return report

    def _require(self, role, what):
        if role not in self.roles:
            raise exception.DriverError(
                reason='composable-agent on %s does not have the %s role '
                       '([agent]roles = %s), so it cannot %s; check that '
                       'the node is registered as the right kind' %
                       (self.host, role, ','.join(self.roles) or '(none)',
                        what))

    # ------------------------------------------------------- memory_node

    def export_extent(self, context, extent, initiator_iqn, chap_username,
                      chap_secret):
        self._require(MEMORY_NODE, 'export memory')
        LOG.info('Exporting extent %(extent)s of lease %(lease)s to '
                 '%(initiator)s', {'extent': extent['uuid'],
                                   'lease': extent.get('lease_uuid'),
                                   'initiator': initiator_iqn})
        return self.exporter.export(extent, initiator_iqn, chap_username,
                                    chap_secret)

    def unexport_extent(self, context, extent):
        self._require(MEMORY_NODE, 'unexport memory')
        LOG.info('Unexporting extent %s', extent['uuid'])
        self.exporter.unexport(extent)

    def scrub_extent(self, context, extent):
        self._require(MEMORY_NODE, 'scrub memory')
        LOG.info('Scrubbing extent %s', extent['uuid'])
        self.exporter.scrub(extent)

    def get_memory_report(self, context):
        return self.memory_report(targets=True)

    # ------------------------------------------------------ compute_node

    @staticmethod
    def _mode(mode):
        mode = mode or states.ATTACH_HOST
        if mode not in states.ATTACH_MODES:
            raise exception.DriverError(
                reason='unknown attach mode %r; use host or guest' % mode)
        return mode

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
                       (self.host, registered, mine))
        return mine

    def attach_memory(self, context, lease, extents, mode,
                      instance_uuid=None):
        self._require(COMPUTE_NODE, 'attach memory')
        mode = self._mode(mode)
        LOG.info('Attaching %(n)d extent(s) of lease %(lease)s in %(mode)s '
                 'mode%(to)s', {'n': len(extents), 'lease': lease['uuid'],
                                'mode': mode,
                                'to': (' to instance %s' % instance_uuid
                                       if mode == states.ATTACH_GUEST
                                       else '')})
        if is_cxl(extents):
            details = self._attach_cxl(lease, extents, mode)
        elif self.simulate:
            details = self._simulated_attach(extents, mode, instance_uuid)
        else:
            initiator = self._check_initiator(lease)
            if mode == states.ATTACH_GUEST:
                if not instance_uuid:
                    raise exception.DriverError(
                        reason='guest-mode memory of lease %s needs the '
                               'server (libvirt domain) to attach to' %
                               lease['uuid'])
                # While the domain is being prepared (libvirt hook) QEMU
                # does not run yet: the hook's started step plugs it.
                details = None
                if self.hook_server is not None:
                    details = self.hook_server.defer_guest_attach(
                        lease, extents, initiator, instance_uuid)
                if details is None:
                    details = self.guest_attacher.attach(
                        instance_uuid, extents, initiator)
            else:
                details = self.host_swap.attach(extents, initiator)
                if instance_uuid:
                    self.memory_tuner.apply(instance_uuid, lease['uuid'],
                                            lease.get('memory_mb') or 0)
        if instance_uuid and self.hook_server is not None:
            self.hook_server.cache.add(instance_uuid, lease['uuid'])
        self.memory_attached(lease['uuid'], details,
                             dict(lease, attach_mode=mode,
                                  instance_uuid=instance_uuid))
        return details

    def _attach_cxl(self, lease, extents, mode):
        if mode != states.ATTACH_HOST:
            raise exception.DriverError(
                reason='CXL memory of lease %s is onlined on the host as a '
                       'NUMA node; it cannot be attached in %s mode' % (
                           lease['uuid'], mode))
        if not self.simulate_cxl:
            return self.cxl_memory.attach(lease, extents)
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

    def memory_attached(self, lease_uuid, details, lease=None):
        """Record extents of a lease as live here ({extent uuid:
        details}); extents attached before stay recorded (a lease grows
        by attaching its new extents only)."""
        with self._lock:
            held = self.memory_attachments.setdefault(lease_uuid, {})
            held.update(details or {})
            if lease is not None:
                self._memory_leases[lease_uuid] = {
                    'uuid': lease_uuid,
                    'attach_mode': lease.get('attach_mode'),
                    'instance_uuid': lease.get('instance_uuid')}

    def memory_detached(self, lease_uuid, extents):
        """Forget the extents of a lease detached here; the lease once
        none is left."""
        with self._lock:
            held = self.memory_attachments.get(lease_uuid)
            if held is None:
                return
            for extent in extents:
                held.pop(extent['uuid'], None)
            if not held:
                self.memory_attachments.pop(lease_uuid, None)
                self._memory_leases.pop(lease_uuid, None)

    def detach_memory(self, context, lease, extents, mode,
                      instance_uuid=None):
        self._require(COMPUTE_NODE, 'detach memory')
        mode = self._mode(mode)
        if is_cxl(extents):
            if not self.simulate_cxl:
                self.cxl_memory.detach(lease, extents)
        elif self.simulate:
            for extent in extents:
                LOG.debug('%(noop)s: would swapoff and log out of target '
                          '%(iqn)s (lease %(lease)s)',
                          {'noop': NOOP_ATTACH,
                           'iqn': extent.get('target_iqn'),
                           'lease': lease['uuid']})
        elif mode == states.ATTACH_GUEST:
            # forget_guest: while the libvirt hook of the domain runs, no
            # libvirt call may touch the domain; QEMU is gone anyway.
            if instance_uuid and not (
                    self.hook_server is not None and
                    self.hook_server.forget_guest(instance_uuid,
                                                  lease['uuid'], extents)):
                self.guest_attacher.detach(instance_uuid, extents)
            else:
                LOG.warning('Guest-mode memory of lease %s names no '
                            'server; nothing to detach', lease['uuid'])
        else:
            # An extent with no target was never exported, so never
            # logged in to.
            known = [e for e in extents if e.get('target_iqn') and
                     e.get('lun') is not None]
            if instance_uuid:
                # Lift the guest's limit first: its pages come back to RAM
                # before swapoff needs the room.
                self.memory_tuner.clear(instance_uuid, lease['uuid'])
            if known:
                self.host_swap.detach(known)
        self.memory_detached(lease['uuid'], extents)

    @staticmethod
    def _simulated_attach(extents, mode, instance_uuid):
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

    def attach_devices(self, context, lease, devices):
        self._require(COMPUTE_NODE, 'attach devices')
        if not self.simulate_devices:
            result = self.host_pci.attach(lease, devices)
            with self._lock:
                self.device_attachments.setdefault(lease['uuid'], {}).update(
                    result)
            self.devices_into_guest(lease, result)
            return result
        result = {}
        for device in devices:
            # What the fabric told about where the device will appear: a
            # bus address only where it knows one.
            found = device.get('locator') or {}
            where = device.get('pci_address') or '%s:%s serial %s' % (
                found.get('vendor_id'), found.get('product_id'),
                found.get('serial'))
            LOG.debug('%(noop)s: would rescan PCI and bind device '
                      '%(dev)s found at %(where)s (lease %(lease)s)',
                      {'noop': NOOP_ATTACH, 'dev': device['uuid'],
                       'where': where, 'lease': lease['uuid']})
            result[device['uuid']] = device.get('pci_address')
        with self._lock:
            self.device_attachments.setdefault(lease['uuid'], {}).update(
                result)
        self.devices_into_guest(lease, result)
        return result

    def detach_devices(self, context, lease, devices):
        self._require(COMPUTE_NODE, 'detach devices')
        # The guest lets go first: the host side then releases functions
        # no guest drives any more, and the fabric unbinds them last.
        self.devices_out_of_guest(lease, devices)
        if not self.simulate_devices:
            self.host_pci.detach(lease, devices)
        with self._lock:
            held = self.device_attachments.get(lease['uuid'], {})
            for device in devices:
                if self.simulate_devices:
                    LOG.debug('%(noop)s: would remove device %(dev)s from '
                              'PCI (lease %(lease)s)',
                              {'noop': NOOP_ATTACH, 'dev': device['uuid'],
                               'lease': lease['uuid']})
                held.pop(device['uuid'], None)
            if not held:
                self.device_attachments.pop(lease['uuid'], None)

    def set_sriov_vfs(self, context, pf_address, count):
        """Give the physical function ``pf_address`` ``count`` virtual
        functions (through 0 when changing); returns ``{'pf_address',
        'vfs': [{'address', 'vendor_id', 'product_id', 'iommu_group'}]}``.
        Refused while one of its VFs that would go is leased."""
        self._require(COMPUTE_NODE, 'set up SR-IOV virtual functions')
        if self.simulate_devices:
            LOG.debug('%(noop)s: would give %(pf)s %(n)s virtual '
                      'function(s)', {'noop': NOOP_ATTACH,
                                      'pf': pf_address, 'n': count})
            return {'pf_address': pf_address, 'vfs': [], 'simulated': True}
        return self.host_pci.set_virtual_functions(pf_address, count)

    # ----------------------------------------------------- guest devices

    def devices_into_guest(self, lease, addresses):
        """Pass the lease's functions ({device uuid: host PCI address},
        bound to vfio-pci on this host) through to its instance, if it
        has one. While the instance's domain is being prepared (libvirt
        hook) QEMU does not run yet: the hook's started step plugs
        them."""
        instance = lease.get('instance_uuid')
        if not instance or not addresses:
            return
        if self.simulate_devices:
            LOG.debug('%(noop)s: would hot-plug device(s) %(devices)s of '
                      'lease %(lease)s into instance %(instance)s',
                      {'noop': NOOP_ATTACH,
                       'devices': ', '.join(sorted(addresses)),
                       'lease': lease['uuid'], 'instance': instance})
            return
        if self.hook_server is not None and \
                self.hook_server.defer_guest_devices(lease, addresses,
                                                     instance):
            return
        self.device_attacher.attach(instance, lease['uuid'], addresses)

    def devices_out_of_guest(self, lease, devices):
        """Unplug the lease's devices from its instance and wait until
        the guest let go of them; raises DriverError (the lease's fault)
        when it does not."""
        instance = lease.get('instance_uuid')
        if not instance or not devices or self.simulate_devices:
            return
        if self.hook_server is not None and \
                self.hook_server.forget_guest_devices(instance,
                                                      lease['uuid']):
            # The domain is held by its libvirt hook: QEMU has not started
            # yet or has exited, and no libvirt call may touch it now.
            return
        self.device_attacher.detach(instance, lease['uuid'],
                                    [d['uuid'] for d in devices])

    # ------------------------------------------------------ libvirt hook

    def instance_leases_changed(self, context, instance_uuid, lease_uuids):
        """The conductor's push (fanout): the leases of an instance
        changed; the libvirt hook's answers follow it at once."""
        if self.hook_server is not None:
            self.hook_server.leases_changed(instance_uuid, lease_uuids)
