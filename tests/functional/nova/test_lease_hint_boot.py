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

"""Lease-first boot: ``--hint composable_lease=<lease>`` through Nova's
real scheduler with ComposableFilter enabled; and a flavor's composable
GPU going to a host the fabric can connect a free GPU to.

The composable API is a fake behind wsgi-intercept (reached by the filter
over keystoneauth, configured in nova.conf [composable] as in
production); Nova and Placement are real and in process.
"""

import nova.conf
from oslo_utils import uuidutils

from tests.functional.nova import base
from tests.functional.nova import test_flavor_boot
from tests.unit.nova import fake_api

CONF = nova.conf.CONF
LEASE = uuidutils.generate_uuid()
POOL = uuidutils.generate_uuid()
FABRIC = uuidutils.generate_uuid()


class ComposableFilterTestCase(base.ProviderUsageTestCase):
    """Three compute hosts, Nova's scheduler with ComposableFilter, and
    the fake composable API the filter reaches over keystoneauth."""

    def setUp(self):
        self.composable = fake_api.FakeComposableAPI()
        intercept = self.composable.install()
        self.addCleanup(intercept.uninstall_intercept)
        self.flags(auth_type='none', endpoint_override=fake_api.ENDPOINT,
                   timeout=5, group='composable')
        # The filter must be configured before the scheduler starts.
        self.flags(available_filters=[
            'nova.scheduler.filters.all_filters',
            'composable.nova.scheduler.ComposableFilter'],
            enabled_filters=(
                list(CONF.filter_scheduler.enabled_filters) +
                ['ComposableFilter']),
            group='filter_scheduler')
        super().setUp()
        for host in ('host1', 'host2', 'host3'):
            self._start_compute(host)


class LeaseHintBootTest(ComposableFilterTestCase):

    def setUp(self):
        super().setUp()
        aggregate = self.admin_api.post_aggregate(
            {'aggregate': {'name': 'composable-fabric'}})
        for host in ('host1', 'host2'):
            self.admin_api.add_host_to_aggregate(aggregate['id'], host)
        self.composable.fabrics[FABRIC] = {
            'uuid': FABRIC, 'aggregate_uuid': aggregate['uuid']}
        self.composable.pools[POOL] = {'uuid': POOL, 'fabric_uuid': FABRIC}
        self.composable.leases[LEASE] = {
            'uuid': LEASE, 'project_id': self.api.project_id,
            'status': 'reserved', 'instance_uuid': None,
            'memory_pool_uuid': POOL, 'device_pool_uuid': None}
        self.flavor_id = self._create_flavor(vcpu=1, memory_mb=512, disk=1,
                                             ephemeral=0)

    def _boot(self, hint=LEASE, expected_state='ACTIVE'):
        body = {'server': self._build_server(flavor_id=self.flavor_id,
                                             networks='none')}
        if hint:
            body['os:scheduler_hints'] = {'composable_lease': hint}
        server = self.api.post_server(body)
        return self._wait_for_state_change(server, expected_state)

    def test_hint_keeps_the_hosts_of_the_lease_fabric(self):
        hosts = {self._boot()['OS-EXT-SRV-ATTR:host'] for _ in range(5)}
        self.assertTrue(hosts <= {'host1', 'host2'}, hosts)
        # One read of the lease per scheduling request, none per host.
        self.assertEqual(5, self.composable.calls['/v1/leases/%s' % LEASE])

    def test_no_hint_no_call(self):
        for _ in range(3):
            self._boot(hint=None)
        self.assertEqual(0, self.composable.total)

    def test_lease_of_another_project_finds_no_host(self):
        self.composable.leases[LEASE]['project_id'] = 'someone-else'
        server = self._boot(expected_state='ERROR')
        self.assertIn('No valid host', server['fault']['message'])

    def test_unknown_lease_finds_no_host(self):
        server = self._boot(hint=uuidutils.generate_uuid(),
                            expected_state='ERROR')
        self.assertIn('No valid host', server['fault']['message'])


class ReachableDevicesBootTest(ComposableFilterTestCase):
    """A flavor asking for a composable GPU: Placement finds the pool's
    capacity through the aggregate of host1 and host2, and the filter
    keeps the host the fabric can connect a free GPU to."""

    def setUp(self):
        super().setUp()
        aggregate, _, client = test_flavor_boot.fabric_with_pool(
            self, ['host1', 'host2'])
        pool = test_flavor_boot.gpu_pool(self, aggregate, client, total=2)
        self.composable.fabrics[FABRIC] = {
            'uuid': FABRIC, 'aggregate_uuid': aggregate['uuid']}
        self.composable.pools[pool.uuid] = {
            'uuid': pool.uuid, 'fabric_uuid': FABRIC, 'kind': 'gpu',
            'resource_class': test_flavor_boot.GPU}
        for _ in range(2):
            uuid = uuidutils.generate_uuid()
            self.composable.devices[uuid] = {
                'uuid': uuid, 'pool_uuid': pool.uuid, 'state': 'available',
                'lease_uuid': None, 'reachable_hosts': ['host2']}
        self.flavor_id = self._create_flavor(
            vcpu=1, memory_mb=512, disk=1, ephemeral=0,
            extra_spec={'resources:%s' % test_flavor_boot.GPU: '1'})

    def test_the_host_reaching_the_free_gpus_is_chosen(self):
        # (No host reaching any: tests/unit/nova/test_scheduler.py.)
        hosts = set()
        for _ in range(2):
            server = self.api.post_server({'server': self._build_server(
                flavor_id=self.flavor_id, networks='none')})
            server = self._wait_for_state_change(server, 'ACTIVE')
            hosts.add(server['OS-EXT-SRV-ATTR:host'])
        self.assertEqual({'host2'}, hosts)
        # One read of the free devices per scheduling request.
        self.assertEqual(2, self.composable.calls['/v1/devices'])
