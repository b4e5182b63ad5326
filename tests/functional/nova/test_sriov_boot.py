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

"""A flavor asking for the virtual functions of an SR-IOV pool lands on
the physical function's host, or nowhere.

Nova (API, conductor, scheduler, two computes with the fake virt driver)
and a real Placement run in process. Both hosts are in the fabric's
aggregate; the pool's VFs are host1's. composable's own sync code makes
the pool's provider (a child of host1's compute node provider).
"""

import types

from oslo_utils import uuidutils

from composable.conductor.placement import sync
from tests.functional.nova import base
from tests.functional.nova import test_flavor_boot

NIC = 'CUSTOM_COMPOSABLE_PCI_NIC'
VFS = 2


class SriovFlavorBootTest(base.ProviderUsageTestCase):

    def setUp(self):
        super().setUp()
        for host in ('host1', 'host2'):
            self._start_compute(host)
        aggregate = self.admin_api.post_aggregate(
            {'aggregate': {'name': 'composable-fabric'}})
        for host in ('host1', 'host2'):
            self.admin_api.add_host_to_aggregate(aggregate['id'], host)
        self.pool = types.SimpleNamespace(
            name='nic-vfs', uuid=uuidutils.generate_uuid(),
            provider_uuid=uuidutils.generate_uuid(), resource_class=NIC,
            traits=[], total=VFS, reserved=0, used=0, step_size=1,
            sriov_host_id=1,
            sriov_host=types.SimpleNamespace(name='host1', properties={}),
            fabric=types.SimpleNamespace(aggregate_uuid=aggregate['uuid']))
        self.client = test_flavor_boot.placement_client(self)
        sync.sync_pool(self.pool, self.client)
        self.flavor_id = self._create_flavor(
            vcpu=1, memory_mb=512, disk=1, ephemeral=0,
            extra_spec={'resources:%s' % NIC: '1'})

    def _boot(self, expected_state='ACTIVE'):
        return self._create_server(flavor_id=self.flavor_id,
                                   networks='none',
                                   expected_state=expected_state)

    def _refused(self):
        server = self._boot(expected_state='ERROR')
        self.assertIn('No valid host', server['fault']['message'])
        self.assertEqual({}, self._get_allocations_by_server_uuid(
            server['id']))

    def test_vfs_land_on_the_pf_host_or_nowhere(self):
        host1 = self._get_provider_uuid_by_host('host1')
        # nova-compute reads its whole tree again (the pool's provider
        # included) and writes it back: the pool's provider survives.
        self.computes['host1'].manager.reportclient.clear_provider_cache()
        self._run_periodics()
        provider = self.client.get_provider(self.pool.provider_uuid)
        self.assertEqual(host1, provider['parent_provider_uuid'])
        self.assertEqual(VFS, self.client.get_inventories(
            self.pool.provider_uuid)[1][NIC]['total'])

        # The weighers would spread these over both hosts; every one
        # lands on host1, with a VF of host1's pool.
        servers = [self._boot() for _ in range(VFS)]
        for server in servers:
            self.assertEqual('host1', server['OS-EXT-SRV-ATTR:host'])
            allocations = self._get_allocations_by_server_uuid(server['id'])
            self.assertEqual({NIC: 1}, allocations[
                self.pool.provider_uuid]['resources'])
            self.assertEqual(1, allocations[host1]['resources']['VCPU'])
        self.assertEqual({NIC: VFS},
                         self._get_provider_usages(self.pool.provider_uuid))

        # Every VF taken: host2 has room, but no VF.
        self._refused()

        # One more VF (the pool grew), but host1 disabled: still not host2.
        self.pool.total = VFS + 1
        sync.sync_pool(self.pool, self.client)
        # nova-compute's cached copy of the tree holds the old total; its
        # next pass must not write that back.
        self._run_periodics()
        self.assertEqual(VFS + 1, self.client.get_inventories(
            self.pool.provider_uuid)[1][NIC]['total'])
        service = self.admin_api.get_services(binary='nova-compute',
                                              host='host1')[0]
        self.admin_api.put_service(service['id'], {'status': 'disabled'})
        self._refused()

        # Enabled again: host1 takes it.
        self.admin_api.put_service(service['id'], {'status': 'enabled'})
        self.assertEqual('host1', self._boot()['OS-EXT-SRV-ATTR:host'])
        self.assertEqual({NIC: VFS + 1},
                         self._get_provider_usages(self.pool.provider_uuid))
