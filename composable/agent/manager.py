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

"""The composable-agent of one node: its pieces, its RPC endpoints and
their life.

One agent runs per memory node and per compute node, with the roles its
node has (``[agent]roles``). AgentManager builds what the roles need and
starts and stops it; it answers no RPC itself. Its ``endpoints`` (one per
role, composable.agent.endpoints) are what the RPC server serves:

memory_node role
    MemoryNodeEndpoint -> MemoryNode (composable.agent.memory_node): the
    exporter named by ``[agent]memory_exporter`` (``tgt``, ``lio``, or
    ``noop``) serves the extents of this node from its tmpfs area;
    start() mounts or checks the area, and its capacity and usage are
    logged every ``[agent]report_interval`` seconds and answered by
    ``get_memory_report``, which also lists the extents the exporter
    serves a target for (the conductor's reconciler removes the targets
    no lease holds).

compute_node role
    ComputeNodeEndpoint -> the back ends of ComputeNodeParts
    (composable.agent.compute_node.parts and .backends), each real or
    simulated as the configuration says:

    * memory: by the lease's attach mode, hot-plugged into the libvirt
      domain whose UUID is ``instance_uuid`` and made swap there through
      its guest agent (``guest``), or iSCSI login and swap on this host
      (``host``). Both act on the extents they are given only: attach
      with the new extents of a lease attached already grows it, detach
      with some of its extents shrinks it, and refuses (nothing changed)
      when the pages on them would not fit back into free memory.
    * CXL memory (extents with ``medium`` cxl, host mode only): a RAM
      region per device, onlined movable as a NUMA node without CPUs, and
      erased and destroyed at detach. start() checks the kernel for it
      and finishes or undoes what a previous run began.
    * PCI devices: the function the fabric composed is found on the PCI
      bus, checked and bound to vfio-pci, and taken off the bus again
      before the fabric unbinds it; a device of a lease bound to an
      instance goes into its guest as a PCI hostdev once the host bound
      it, and leaves the guest before the host releases it.
      ``[compute_node]sriov_numvfs`` creates virtual functions at start.

    The libvirt hook's socket (composable.agent.hook_server) is served
    from start(); the endpoint hands it the guest attaches of a domain
    being prepared. Every ``[compute_node]usage_report_interval`` seconds
    the use of each memory lease attached here goes to the conductor
    (composable.agent.compute_node.usage).

With ``[agent]memory_exporter = noop`` the whole memory data plane is
simulated, on both roles: nothing is exported or attached, and the log
says so. Devices are simulated the same way by ``[compute_node]
pci_backend = noop``, and CXL memory by ``[compute_node]cxl_backend =
noop``, which is what unset ones mean when the memory exporter is noop.
"""

from oslo_log import log as logging

from composable.agent.compute_node import backends
from composable.agent.compute_node import parts as parts_mod
from composable.agent.compute_node import usage as usage_mod
from composable.agent import endpoints as endpoints_mod
from composable.agent import hook_server as hook_server_mod
from composable.agent import memory_node as memory_node_mod
from composable.common import context as composable_context
from composable.common import exception
from composable.common import states
from composable import conf

CONF = conf.CONF
LOG = logging.getLogger(__name__)

MEMORY_NODE = endpoints_mod.MEMORY_NODE
COMPUTE_NODE = endpoints_mod.COMPUTE_NODE
ROLES = endpoints_mod.ROLES
# The machine's SMBIOS system UUID, as the kernel shows it (readable by
# root only on most distributions).
DMI_UUID_PATH = '/sys/class/dmi/id/product_uuid'


class AgentManager(object):
    """The agent of node ``host`` with ``roles``. The other arguments
    inject pieces (tests, composable-all): the memory node's exporter,
    the compute node's workers (see ComputeNodeParts; ``simulate`` forces
    the memory back end simulated or real) and the conductor's API."""

    def __init__(self, host, roles=None, exporter=None, guest_attacher=None,
                 host_swap=None, simulate=None, memory_tuner=None,
                 host_pci=None, device_attacher=None, conductor_api=None,
                 cxl_memory=None, virtio_mem_attacher=None):
        self.host = host
        self._conductor = conductor_api
        self.roles = tuple(roles if roles is not None else CONF.agent.roles)
        unknown = set(self.roles) - set(ROLES)
        if unknown:
            raise exception.Invalid(
                reason='unknown agent roles %s' % ', '.join(sorted(unknown)))
        self.memory_node = memory_node_mod.MemoryNode(host, exporter)
        self.parts = parts_mod.ComputeNodeParts(
            host, guest_attacher=guest_attacher, host_swap=host_swap,
            simulate=simulate, memory_tuner=memory_tuner,
            host_pci=host_pci, device_attacher=device_attacher,
            cxl_memory=cxl_memory, virtio_mem_attacher=virtio_mem_attacher)
        self.parts.swap_reporter = self.report_guest_swap
        self.memory = endpoints_mod.MemoryNodeEndpoint(
            host, self.roles, self.memory_node)
        self.compute = endpoints_mod.ComputeNodeEndpoint(
            host, self.roles, self.parts)
        self._usage = None

    @property
    def endpoints(self):
        """What the agent's RPC server serves: one endpoint per role
        (each refuses when its role is not this node's)."""
        return [self.memory, self.compute]

    # ------------------------------------------------------------ pieces
    # Read by the entry points, composable-all, the usage sampler and
    # tests: the pieces themselves live in memory_node and parts.

    @property
    def exporter(self):
        return self.memory_node.exporter

    @property
    def area(self):
        """The tmpfs area of the exporter, or None (noop)."""
        return self.memory_node.area

    @property
    def guest_attacher(self):
        return self.parts.guest_attacher

    @property
    def memory_tuner(self):
        return self.parts.memory_tuner

    @property
    def device_attacher(self):
        return self.parts.device_attacher

    @property
    def host_swap(self):
        return self.parts.host_swap

    @property
    def cxl_memory(self):
        return self.parts.cxl_memory

    @property
    def host_pci(self):
        return self.parts.host_pci

    @property
    def simulate(self):
        """Whether leased iSCSI memory is simulated on this node."""
        return self.parts.memory_simulated

    @property
    def simulate_devices(self):
        return self.parts.devices_simulated

    @property
    def simulate_cxl(self):
        return self.parts.cxl_simulated

    @property
    def memory_attachments(self):
        """{lease uuid: {extent uuid: details}} live here."""
        return self.parts.attachments.memory

    @property
    def device_attachments(self):
        """{lease uuid: {device uuid: host PCI address}} live here."""
        return self.parts.attachments.devices

    def memory_leases(self):
        """{lease uuid: (lease, {extent uuid: details})} of the memory
        leases attached here: a snapshot (the usage sampler's)."""
        return self.parts.attachments.memory_leases()

    @property
    def hook_server(self):
        """The libvirt hook's server while it runs (compute_node role),
        else None."""
        return self.compute.hook_server

    @hook_server.setter
    def hook_server(self, server):
        self.compute.hook_server = server

    # ------------------------------------------------------------ life

    def start(self):
        """Get the node ready before the first request: the tmpfs area
        of a memory node is mounted (or checked) now."""
        if MEMORY_NODE in self.roles:
            self.memory_node.start()
        if COMPUTE_NODE in self.roles:
            if self.simulate:
                LOG.warning('%s: [agent]memory_exporter is noop, so leased '
                            'memory is simulated on %s',
                            backends.NOOP_ATTACH, self.host)
            else:
                LOG.info('Compute node %(host)s attaches leased memory as '
                         'initiator %(iqn)s',
                         {'host': self.host,
                          'iqn': CONF.compute_node.initiator_iqn})
            self.parts.devices.start(self.report_restored)
            self._start_cxl()
            self.report_host_facts()
            self.start_usage()
            if CONF.compute_node.hook_socket:
                self._start_hook_server()
            else:
                LOG.warning('[compute_node]hook_socket is empty: the libvirt '
                            'hook gets no answer, and domains start without '
                            'their leases')

    def _start_cxl(self):
        """Check the kernel for CXL memory and finish or undo the region
        work a previous run left. A host that fails the check keeps doing
        its other work; its CXL binds fail with the reason."""
        try:
            restored = self.parts.cxl.start()
        except exception.ComposableException as exc:
            LOG.warning('Leased CXL memory cannot be bound on %(host)s: '
                        '%(reason)s', {'host': self.host,
                                       'reason': exc.message})
            return
        self.report_memory_restored(restored)

    def report_memory_restored(self, results):
        """Tell the conductor which CXL regions of leases bound here the
        start made again after the host restarted (and on which NUMA
        node), so that the leases say it."""
        return self._report_after_restart(
            lambda *args: self.conductor.report_memory_restored(*args),
            results, 'which CXL memory of leases bound on %s was put '
                     'online again' % self.host)

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
        the leases say it."""
        return self._report_after_restart(
            lambda *args: self.conductor.report_devices_restored(*args),
            results, 'which devices of leases bound on %s were bound to '
                     'vfio-pci again' % self.host)

    def report_guest_swap(self, lease_uuid, instance_uuid, outcome):
        """Tell the conductor how the guest of ``instance_uuid`` made the
        disks of a guest-mode lease swap after the bind answered
        (GuestMemoryAttacher.swapon_later), so that the lease says it.
        A conductor too old to understand it is not told (logged)."""
        try:
            sent = self.conductor.report_guest_swap(
                composable_context.get_admin_context(), self.host,
                lease_uuid, instance_uuid, outcome)
        except Exception as exc:
            LOG.error('Could not tell the conductor how the guest of '
                      'instance %(instance)s made the disks of lease '
                      '%(lease)s swap (%(outcome)s): %(exc)s',
                      {'instance': instance_uuid, 'lease': lease_uuid,
                       'outcome': outcome, 'exc': exc})
            return False
        if sent is False:
            LOG.info('The guest of instance %(instance)s made the disks of '
                     'lease %(lease)s swap: %(outcome)s (not recorded: the '
                     'conductor is older)',
                     {'instance': instance_uuid, 'lease': lease_uuid,
                      'outcome': outcome})
        return sent is not False

    def _report_after_restart(self, cast, results, what):
        """Cast ``results`` to the conductor with ``cast`` (called with
        a context, this host and the results); False when
        there is nothing to say or it cannot be said. The agent goes on
        starting either way: the log says what could not be told."""
        if not results:
            return False
        try:
            cast(composable_context.get_admin_context(), self.host,
                 list(results))
        except Exception as exc:
            LOG.error('Could not tell the conductor %(what)s: %(exc)s',
                      {'what': what, 'exc': exc})
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

    def recover_memory_leases(self, conductor):
        """Learn from the conductor the memory leases attached here that
        this process did not attach (it restarted; the host's swap and
        the guests' disks and virtio-mem devices are still there), so
        that their use is reported again: the host-mode leases bound to
        this host whose swap is still on, and the guest-mode and
        virtio-mem leases bound to the running guests of this host. The
        number of leases learnt."""
        if self.simulate:
            return 0
        ctx = composable_context.get_admin_context()
        attachments = self.parts.attachments
        learnt = self._recover_host_memory_leases(conductor, ctx)
        for instance in sorted(conductor.instance_leases(ctx, self.host)):
            domain = self.guest_attacher.domain(instance, missing_ok=True)
            if domain is None or not domain.isActive():
                continue
            for lease in conductor.instance_status(ctx, instance,
                                                   self.host):
                mode = lease.get('attach_mode')
                if lease.get('status') != states.BOUND or \
                        lease.get('host') != self.host or \
                        mode not in (states.ATTACH_GUEST,
                                     states.ATTACH_VIRTIO_MEM) or \
                        not lease.get('extents'):
                    continue
                if attachments.memory_recovered(
                        lease['uuid'],
                        {extent: {'mode': mode,
                                  'instance_uuid': instance,
                                  'recovered': True}
                         for extent in lease['extents']},
                        mode, instance):
                    learnt += 1
                    if CONF.compute_node.guest_swapon == 'best_effort':
                        # A swap-on the previous process left running (or
                        # never reported): the script is idempotent, so
                        # it runs again and its outcome is reported.
                        self.guest_attacher.swapon_later(
                            instance, lease['extents'], lease['uuid'])
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
            if self.parts.attachments.memory_recovered(
                    lease['uuid'], live, states.ATTACH_HOST,
                    lease.get('instance_uuid')):
                learnt += 1
        return learnt

    def _start_hook_server(self):
        server = hook_server_mod.HookServer(self.parts)
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
        self.memory_node.stop()
        if self.hook_server is not None:
            self.hook_server.stop()
            self.hook_server = None
        if self._usage is not None:
            self._usage.stop()
            self._usage = None
