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

"""A flavor asking for an SR-IOV pool's virtual function, from Nova's
scheduler to the lease bound on the physical function's host.

What runs for real, in this process: Nova (API, conductor, scheduler,
two computes with the fake virt driver) and Placement, as in
test_sriov_boot; composable's conductor and agents on MariaDB and a
RabbitMQ virtual host of the test's own, as in test_nova_events; the
libvirt hook (composable.hooks.libvirt.run, what libvirtd runs) talking
to host1's agent on its unix socket (composable.agent.hook_server); the
agent's PCI work (making the VFs, binding one to vfio-pci) on the fake
sysfs of tests/unit/privsep/test_pci_sysfs, the same code a real kernel's
sysfs gets.

Where it stops: the fake virt driver starts no libvirt domain, so the
hook is run by the test with the domain XML Nova's libvirt driver writes
(tests/functional/hooks/nova_domain.py), and VFIO into a guest cannot
run here: the test ends at the agent's command contract, the VF it keeps
for the ``started`` hook to hot-plug into the domain
(HookServer.defer_guest_devices).

Nova's versioned notifications are not bridged here: the hook's
``prepare`` is what makes the instance's lease from Nova's allocation
(composable.conductor.nova.flavor_leases, consumer = the instance) and
binds it.
"""

import io
import os
import pathlib
import uuid

import fixtures

from composable.agent.compute_node import host_pci as host_pci_mod
from composable.agent import hook_server as hook_server_mod
from composable.agent import manager as agent_manager
from composable.common import sriov
from composable.common import states
from composable.conductor.nova import flavor_leases
from composable.conductor.placement import claims as placement_claims
from composable.conductor.placement import sync
from composable.conductor import rpcapi
from composable.db import api as db_api
from composable.hooks import libvirt as hook
from composable import privsep
from composable.privsep import pci as priv_pci
from composable.privsep import pci_sysfs as pci
from tests.functional.hooks import nova_domain
from tests.functional.nova import base
from tests.functional.nova import test_nova_events as events
from tests.unit.privsep import test_pci_sysfs as test_pci

NIC = 'CUSTOM_COMPOSABLE_PCI_NIC'
PF = '0000:41:00.0'
VFS = 2


class FakePciHost(fixtures.Fixture):
    """The fake sysfs of one host with one physical function offering
    SR-IOV virtual functions; composable's privileged PCI functions run
    in this process on it (no privsep daemon), as in
    tests/unit/conductor/sriov_harness."""

    def __init__(self, root):
        self.root = root

    def _setUp(self):
        self.fs = test_pci.FakeSysfs(self.root / 'host')
        self.fs.add_driver(pci.VFIO_DRIVER)
        self.fs.add(PF, vendor='0x15b3', device='0x1017', cls='0x020000',
                    driver='mlx5_core', group=20, totalvfs=8)
        saved = (priv_pci.ROOT, priv_pci.WRITER)
        privsep.sys_admin_pctxt.set_client_mode(False)
        self.addCleanup(privsep.sys_admin_pctxt.set_client_mode, True)
        priv_pci.ROOT, priv_pci.WRITER = self.fs.root, self.fs.write
        self.addCleanup(setattr, priv_pci, 'WRITER', saved[1])
        self.addCleanup(setattr, priv_pci, 'ROOT', saved[0])
        self.host_pci = host_pci_mod.HostPciDevices(
            ops=priv_pci, root=self.fs.root, find_timeout=30,
            nova_config_files=[str(self.root / 'nova.conf')],
            state_file=str(self.root / 'state' / 'pci-devices.json'),
            kernel_release='6.1.0-test')
        assert self.host_pci.start() == []

    def vfs(self):
        return pci.virtual_functions(PF, self.fs.root)

    def on_vfio(self):
        return sorted(a for a in self.vfs()
                      if self.fs.driver_of(a) == pci.VFIO_DRIVER)


class SriovComposable(events.Composable):
    """composable as in test_nova_events, with an SR-IOV pool of host1's
    physical function, host1's agent doing its PCI work on the fake
    sysfs and answering the libvirt hook, and no Nova notifications."""

    def __init__(self, test, aggregate_uuid, transport_url, pci_host,
                 socket_path):
        super().__init__(test, aggregate_uuid, transport_url)
        self.pci_host = pci_host
        self.socket_path = socket_path

    def _agent(self, name, roles):
        if name != 'host1':
            return super()._agent(name, roles)
        return agent_manager.AgentManager(name, roles,
                                          host_pci=self.pci_host.host_pci)

    def _overrides(self):
        return [item for item in super()._overrides()
                if item[:2] != ('nova', 'notifications_enabled')] + [
            ('nova', 'notifications_enabled', False),
            ('compute_node', 'hook_prepare_timeout', 120)]

    def _setUp(self):
        super()._setUp()
        ctx = events.admin()
        host1 = self.hosts['host1']
        pool = db_api.sriov_pool_create(ctx, {
            'name': 'nic-vfs', 'kind': 'pci', 'fabric_id': host1.fabric_id,
            'resource_class': NIC, 'sriov_host_id': host1.id,
            'sriov_pf_address': PF, 'sriov_vf_count': VFS,
            'sriov_vf_mode': sriov.ON_DEMAND}, 'nic',
            vf_values={'vendor_id': '15b3', 'product_id': '101e'})
        pool = db_api.pool_get(ctx, pool.uuid)
        # composable's own sync: a child of host1's compute node.
        sync.sync_pool(pool, placement_claims.get_client(), ctx)
        self.sriov_pool = db_api.pool_get(ctx, pool.uuid)
        agent = self.agents['host1']
        agent.hook_server = hook_server_mod.HookServer(
            agent.parts, path=self.socket_path,
            conductor=rpcapi.ConductorAPI(),
            refresh_interval=3600)
        agent.hook_server.start()
        self.addCleanup(setattr, agent, 'hook_server', None)
        self.addCleanup(agent.hook_server.stop)

    def run_hook(self, server, op, sub_op='begin', extra_specs=None):
        """The libvirt hook, as libvirtd runs it for the server's domain;
        (exit status, what it wrote to stderr)."""
        xml = nova_domain.realistic_domain(
            server['id'], name='instance-%s' % server['id'][:8],
            extra_specs=extra_specs, project_id=server['tenant_id'],
            user_id=server['user_id'])
        stderr = io.StringIO()
        status = hook.run(
            ['instance-%s' % server['id'][:8], op, sub_op, '-'],
            io.BytesIO(xml.encode()), stderr,
            env={hook.ENV_SOCKET: self.socket_path,
                 hook.ENV_CONFIG: os.devnull})
        return status, stderr.getvalue()


class SriovFlavorLeaseTest(base.ProviderUsageTestCase):

    def setUp(self):
        super().setUp()
        for host in ('host1', 'host2'):
            self._start_compute(host)
        aggregate = self.admin_api.post_aggregate(
            {'aggregate': {'name': 'composable-fabric'}})
        for host in events.COMPOSABLE_HOSTS:
            self.admin_api.add_host_to_aggregate(aggregate['id'], host)
        tmp = self.useFixture(fixtures.TempDir()).path
        self.pci_host = self.useFixture(FakePciHost(pathlib.Path(tmp)))
        vhost = self.useFixture(events.RabbitVhost())
        self.composable = self.useFixture(SriovComposable(
            self, aggregate['uuid'], vhost.url, self.pci_host,
            os.path.join(tmp, 'hook-%s.sock' % uuid.uuid4().hex[:6])))
        self.extra_specs = {'resources:%s' % NIC: '1',
                            'composable:attach_mode': 'guest'}
        self.flavor_id = self._create_flavor(
            vcpu=1, memory_mb=512, disk=1, ephemeral=0,
            extra_spec=self.extra_specs)

    def test_the_vf_lease_is_bound_on_the_pf_host(self):
        c = self.composable
        pool = c.sriov_pool
        host1 = self._get_provider_uuid_by_host('host1')
        self.assertEqual(host1, placement_claims.get_client().get_provider(
            pool.provider_uuid)['parent_provider_uuid'])

        server = self._create_server(flavor_id=self.flavor_id,
                                     networks='none')
        # Nova's scheduler: the PF's host, a VF of its pool.
        self.assertEqual('host1', server['OS-EXT-SRV-ATTR:host'])
        self.assertEqual({NIC: 1}, self._get_allocations_by_server_uuid(
            server['id'])[pool.provider_uuid]['resources'])
        # No lease before the domain starts (no notification here).
        self.assertEqual([], c.leases(server['id']))
        self.assertEqual([], self.pci_host.vfs())

        # libvirtd starts the domain on host1: the hook's prepare makes
        # the lease from Nova's allocation and binds it there.
        status, said = c.run_hook(server, 'prepare',
                                  extra_specs=self.extra_specs)
        self.assertEqual(hook.EXIT_OK, status, said)
        [lease] = c.leases(server['id'])
        self.assertEqual(states.BOUND, lease.status, lease.fault)
        self.assertEqual('host1', lease.host.name)
        self.assertEqual(server['id'], lease.placement_consumer)
        self.assertEqual(server['id'], lease.instance_uuid)
        self.assertEqual(flavor_leases.lease_uuid(server['id'], pool.uuid),
                         lease.uuid)
        self.assertEqual((1, 'nic', states.ATTACH_GUEST),
                         (lease.device_count, lease.device_kind,
                          lease.attach_mode))
        self.assertEqual(pool.id, lease.device_pool_id)
        # Nova's allocation is the only Placement claim.
        self.assertEqual({}, placement_claims.get_client().get_allocations(
            lease.uuid)['allocations'])
        self.assertEqual({NIC: 1},
                         self._get_provider_usages(pool.provider_uuid))

        # The agent made the PF's VFs and bound the lease's to vfio-pci on
        # the fake sysfs ...
        [device] = lease.devices
        vfs = self.pci_host.vfs()
        self.assertEqual(VFS, len(vfs))
        vf = vfs[sriov.vf_index(device.address)]
        self.assertEqual(vf, device.pci_address)
        self.assertEqual([vf], self.pci_host.on_vfio())
        # ... and keeps it for the started hook to plug into the guest:
        # the agent's command contract, where this test stops (VFIO into
        # a guest cannot run here).
        hook_server = c.agents['host1'].hook_server
        lease_dict, addresses = hook_server._pending_devices[
            server['id']][lease.uuid]
        self.assertEqual({device.uuid: vf}, addresses)
        self.assertEqual(server['id'], lease_dict['instance_uuid'])

        # A second prepare (libvirtd restarted the domain) finds the
        # lease made: one lease per instance and pool.
        self.assertEqual(1, len(flavor_leases.ensure_instance_leases(
            events.admin(), server['id'], 'host1',
            server['tenant_id'])))
        self.assertEqual(1, len(c.leases(server['id'])))

        # The domain stops: unbound, still the instance's, VF let go.
        status, said = c.run_hook(server, 'release', sub_op='end')
        self.assertEqual(hook.EXIT_OK, status, said)
        lease = c.wait('the lease to be unbound', lambda: (
            lambda found: found if found.status == states.RESERVED and
            found.reservation is None else None)(
                db_api.lease_get(events.admin(), lease.uuid)))
        self.assertEqual(server['id'], lease.instance_uuid)
        self.assertEqual([], self.pci_host.on_vfio())
