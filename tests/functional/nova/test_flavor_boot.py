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

"""Flavor-driven pool capacity: Nova's real scheduler takes pool memory
from composable's sharing resource provider.

Nova (API, conductor, scheduler, three computes with the fake virt
driver) and a real Placement run in process. The memory pool's sharing
provider is made by composable's own sync code, in the aggregate of two
of the three computes (the hosts that reach the pool's fabric).
"""

import types

from keystoneauth1 import adapter as ks_adapter
from keystoneauth1 import session as ks_session
from keystoneauth1 import token_endpoint
from oslo_utils import uuidutils

from composable.conductor.placement import client as pclient
from composable.conductor.placement import sync
from tests.functional.nova import base

MEM = 'CUSTOM_COMPOSABLE_MEMORY_MB'
GPU = 'CUSTOM_COMPOSABLE_GPU'


def placement_client(test):
    endpoint = test.placement.fixture.endpoint
    adapter = ks_adapter.Adapter(
        ks_session.Session(auth=token_endpoint.Token(endpoint, 'admin')),
        service_type='placement')
    return pclient.ReportClient(adapter, retry_delay=0)


def fabric_with_pool(test, hosts, total=16384, step=1024):
    """A Nova aggregate of ``hosts`` (mirrored into Placement by Nova)
    and a memory pool's sharing provider in it."""
    aggregate = test.admin_api.post_aggregate(
        {'aggregate': {'name': 'composable-fabric'}})
    for host in hosts:
        test.admin_api.add_host_to_aggregate(aggregate['id'], host)
    pool = types.SimpleNamespace(
        name='mem', uuid=uuidutils.generate_uuid(),
        provider_uuid=uuidutils.generate_uuid(), resource_class=MEM,
        traits=[], total=total, reserved=0, used=0, step_size=step,
        fabric=types.SimpleNamespace(aggregate_uuid=aggregate['uuid']))
    client = placement_client(test)
    sync.sync_pool(pool, client)
    return aggregate, pool, client


def gpu_pool(test, aggregate, client, total=2):
    """A GPU pool's sharing provider in the same aggregate, with a model
    trait, as composable's sync makes it."""
    pool = types.SimpleNamespace(
        name='gpu', uuid=uuidutils.generate_uuid(),
        provider_uuid=uuidutils.generate_uuid(), resource_class=GPU,
        traits=['CUSTOM_GPU_A100'], total=total, reserved=0, used=0,
        step_size=1,
        fabric=types.SimpleNamespace(aggregate_uuid=aggregate['uuid']))
    sync.sync_pool(pool, client)
    return pool


class FlavorBootTest(base.ProviderUsageTestCase):

    def setUp(self):
        super().setUp()
        for host in ('host1', 'host2', 'host3'):
            self._start_compute(host)
        self.aggregate, self.pool, self.client = fabric_with_pool(
            self, ['host1', 'host2'])
        self.flavor_id = self._create_flavor(
            vcpu=1, memory_mb=512, disk=1, ephemeral=0,
            extra_spec={'resources:%s' % MEM: '4096',
                        'composable:attach_mode': 'host'})

    def test_pool_memory_lands_only_on_hosts_of_the_fabric(self):
        # Placement's view: the compute nodes of host1 and host2 are in
        # the pool's aggregate, host3's is not.
        for host, member in (('host1', True), ('host2', True),
                             ('host3', False)):
            rp = self._get_provider_uuid_by_host(host)
            _, aggregates = self.client.get_aggregates(rp)
            self.assertEqual(member, self.aggregate['uuid'] in aggregates)
        _, traits = self.client.get_traits(self.pool.provider_uuid)
        self.assertIn('MISC_SHARES_VIA_AGGREGATE', traits)

        servers = [self._create_server(flavor_id=self.flavor_id,
                                       networks='none')
                   for _ in range(4)]
        for server in servers:
            self.assertIn(server['OS-EXT-SRV-ATTR:host'],
                          ('host1', 'host2'))
            allocations = self._get_allocations_by_server_uuid(server['id'])
            self.assertEqual({MEM: 4096},
                             allocations[self.pool.provider_uuid][
                                 'resources'])
            compute_rp = self._get_provider_uuid_by_host(
                server['OS-EXT-SRV-ATTR:host'])
            self.assertEqual(1, allocations[compute_rp]['resources']['VCPU'])
        self.assertEqual({MEM: 4 * 4096},
                         self._get_provider_usages(self.pool.provider_uuid))

        for server in servers:
            self._delete_server(server)
        self.assertEqual({MEM: 0},
                         self._get_provider_usages(self.pool.provider_uuid))

    def test_pool_too_small_means_no_valid_host(self):
        servers = [self._create_server(flavor_id=self.flavor_id,
                                       networks='none')
                   for _ in range(4)]
        # 16 GiB in the pool: a fifth 4 GiB server finds no host.
        server = self._create_server(flavor_id=self.flavor_id,
                                     networks='none',
                                     expected_state='ERROR')
        self.assertIn('No valid host', server['fault']['message'])
        self.assertEqual({MEM: 4 * 4096},
                         self._get_provider_usages(self.pool.provider_uuid))
        for server in servers:
            self._delete_server(server)

    def test_pool_gpu_lands_only_on_hosts_of_the_fabric(self):
        gpus = gpu_pool(self, self.aggregate, self.client, total=2)
        flavor = self._create_flavor(
            vcpu=1, memory_mb=512, disk=1, ephemeral=0,
            extra_spec={'resources:%s' % GPU: '1',
                        'trait:CUSTOM_GPU_A100': 'required',
                        'composable:gpu_model': 'A100'})
        servers = [self._create_server(flavor_id=flavor, networks='none')
                   for _ in range(2)]
        for server in servers:
            self.assertIn(server['OS-EXT-SRV-ATTR:host'],
                          ('host1', 'host2'))
            allocations = self._get_allocations_by_server_uuid(server['id'])
            self.assertEqual({GPU: 1},
                             allocations[gpus.provider_uuid]['resources'])
        self.assertEqual({GPU: 2},
                         self._get_provider_usages(gpus.provider_uuid))
        # Both GPUs taken: a third server finds no host.
        refused = self._create_server(flavor_id=flavor, networks='none',
                                      expected_state='ERROR')
        self.assertIn('No valid host', refused['fault']['message'])
        for server in servers:
            self._delete_server(server)
        self.assertEqual({GPU: 0},
                         self._get_provider_usages(gpus.provider_uuid))
