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

"""GPU boots: a flavor asking for ``resources:CUSTOM_COMPOSABLE_GPU=1``
and ``composable:gpu_model``, and a GPU lease booted with the
``composable_lease`` hint, end with a GPU lease bound to the instance on
the host it runs on.

The same stack as test_nova_events (Nova and Placement in process, a
composable conductor listening to Nova's notifications over RabbitMQ,
agents for the hosts of the fabric), with a GPU pool of two devices of
different models on the fake fabric. The agents' host side is the
simulated one: a GPU cannot be passed through on this machine (the
libvirt side is tested at its API contract, tests/unit/hooks/
test_hook_devices.py).
"""

from composable.common import context as ctx_mod
from composable.common import states
from composable.conductor.placement import claims as placement_claims
from composable.conductor.placement import sync
from composable.db import api as db_api
from tests.functional.nova import test_nova_events as events_test

GPU = 'CUSTOM_COMPOSABLE_GPU'
COMPOSABLE_HOSTS = events_test.COMPOSABLE_HOSTS
admin = events_test.admin


class ComposableWithGpus(events_test.Composable):
    """The Composable fixture plus a GPU pool (an H100 and an A100 on
    the fake fabric, trait CUSTOM_GPU), reported to Placement in the
    fabric's aggregate; the agents are kept to look at."""

    def _serve_agent(self, name, roles):
        if not hasattr(self, 'agents'):
            self.agents = {}
        agent = super()._serve_agent(name, roles)
        self.agents[name] = agent
        return agent

    def _inventory(self):
        super()._inventory()
        ctx = admin()
        fabric = db_api.fabric_get(ctx, 'fabric')
        pool = db_api.pool_create(ctx, {
            'name': 'gpus', 'kind': 'gpu', 'fabric_id': fabric.id,
            'resource_class': GPU, 'traits': ['CUSTOM_GPU']})
        self.gpus = {model: db_api.device_create(ctx, {
            'pool_id': pool.id, 'address': 'fake-gpu-%s' % model.lower(),
            'kind': 'gpu', 'model': model, 'vendor_id': '10de',
            'product_id': product})
            for model, product in (('H100', '2330'), ('A100', '20b0'))}
        pool = db_api.pool_get(ctx, pool.uuid)
        sync.sync_pool(pool, placement_claims.get_client(), ctx)
        self.gpu_pool = db_api.pool_get(ctx, pool.uuid)


class GpuBootTest(events_test.base.ProviderUsageTestCase):

    def setUp(self):
        super().setUp()
        for host in ('host1', 'host2', 'host3'):
            self._start_compute(host)
        aggregate = self.admin_api.post_aggregate(
            {'aggregate': {'name': 'composable-fabric'}})
        for host in COMPOSABLE_HOSTS:
            self.admin_api.add_host_to_aggregate(aggregate['id'], host)
        vhost = self.useFixture(events_test.RabbitVhost())
        self.composable = self.useFixture(
            ComposableWithGpus(self, aggregate['uuid'], vhost.url))
        self.bridge = self.useFixture(
            events_test.NovaBridge(self.notifier, vhost.url))

    def _bound_gpu_lease(self, server, model):
        c = self.composable
        host = server['OS-EXT-SRV-ATTR:host']
        self.assertIn(host, COMPOSABLE_HOSTS)
        lease = c.wait_lease(server['id'], states.BOUND, host)
        self.assertEqual(server['id'], lease.instance_uuid)
        self.assertEqual(host, lease.host.name)
        [device] = lease.devices
        self.assertEqual(model, device.model)
        self.assertEqual(states.DEVICE_ATTACHED, device.state)
        self.assertIsNotNone(device.pci_address)
        # The agent of that host (and only that one) holds the device.
        self.assertEqual(
            {device.uuid: device.pci_address},
            c.agents[host].device_attachments[lease.uuid])
        for other in COMPOSABLE_HOSTS:
            if other != host:
                self.assertNotIn(lease.uuid,
                                 c.agents[other].device_attachments)
        return lease, device

    def test_flavor_gpu_boot_binds_a_gpu_lease_on_the_instance_host(self):
        c = self.composable
        flavor = self._create_flavor(
            vcpu=1, memory_mb=512, disk=1, ephemeral=0,
            extra_spec={'resources:%s' % GPU: '1',
                        'trait:CUSTOM_GPU': 'required',
                        'composable:gpu_model': 'A100'})
        server = self._create_server(flavor_id=flavor, networks='none')
        allocations = self._get_allocations_by_server_uuid(server['id'])
        self.assertEqual(
            {GPU: 1}, allocations[c.gpu_pool.provider_uuid]['resources'])
        lease, device = self._bound_gpu_lease(server, 'A100')
        self.assertEqual(server['id'], lease.placement_consumer)
        self.assertEqual(c.gpus['A100'].uuid, device.uuid)
        # Deleting the server releases the lease and the GPU.
        self._delete_server(server)
        c.wait_lease(server['id'], states.RELEASED)
        self.assertEqual(
            states.DEVICE_AVAILABLE,
            c.wait('the GPU to be free', lambda: (
                lambda d: d.state if d.state == states.DEVICE_AVAILABLE
                else None)(db_api.device_get(admin(), device.uuid))))
        for agent in c.agents.values():
            self.assertNotIn(lease.uuid, agent.device_attachments)
        self.assertEqual({GPU: 0},
                         self._get_provider_usages(c.gpu_pool.provider_uuid))

    def test_lease_first_gpu_boot(self):
        c = self.composable
        ctx = ctx_mod.RequestContext(user_id='u1',
                                     project_id=self.api.project_id,
                                     roles=['member'])
        made = c.conductor.create_lease(ctx, {'device_count': 1,
                                              'device_kind': 'gpu',
                                              'device_model': 'H100'})
        lease_uuid = made['uuid'] if isinstance(made, dict) else made
        flavor = self._create_flavor(vcpu=1, memory_mb=512, disk=1,
                                     ephemeral=0)
        body = {'server': self._build_server(
            flavor_id=flavor, networks='none', az='nova:host2')}
        body['os:scheduler_hints'] = {'composable_lease': lease_uuid}
        server = self._wait_for_state_change(
            self.admin_api.post_server(body), 'ACTIVE')
        lease, device = self._bound_gpu_lease(server, 'H100')
        self.assertEqual(lease_uuid, lease.uuid)
        self._delete_server(server)
        c.wait('the lease to be unbound', lambda: (
            lambda lease: lease if lease.status == states.RESERVED and
            lease.reservation is None else None)(
                db_api.lease_get(admin(), lease_uuid)))
        self.assertNotIn(lease_uuid,
                         c.agents['host2'].device_attachments)
