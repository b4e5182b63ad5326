#    Licensed under the Apache License, Version 2.0 (the "License"); you may
#    not use this file except in compliance with the License. You may obtain
#    a copy of the License at
#
#         http://www.apache.org/licenses/LICENSE-2.0
#
#    Unless required by applicable law or agreed to in writing, software
#    distributed under the License is distributed on an "AS IS" BASIS, WITHOUT
#    WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied. See the
#    License for the specific language governing permissions and limitations
#    under the License.

"""Project -> Composable -> Pools and the Admin -> Composable panels.

Horizon's unit-test helpers render the real views; the composable API
module is stubbed with mocks.
"""

from unittest import mock

from django.urls import reverse

from composable.dashboard.api import composable as api
from tests.dashboard import helpers

FABRIC = {'uuid': 'f0000000-0000-4000-8000-000000000001',
          'name': 'rack-1-pcie', 'driver': 'switchtec',
          'driver_info': {'device': '/dev/switchtec0'},
          'aggregate_uuid': None, 'description': 'rack 1',
          'created_at': '2026-11-01T10:00:00+00:00', 'updated_at': None}
HOST = {'uuid': 'f0000000-0000-4000-8000-000000000002', 'name': 'compute-1',
        'fabric_uuid': FABRIC['uuid'],
        'initiator_iqn': 'iqn.2026-11.org.example:compute-1',
        'partition_id': '3', 'properties': {},
        'created_at': '2026-11-01T10:00:00+00:00', 'updated_at': None}
MEMORY_NODE = {'uuid': 'f0000000-0000-4000-8000-000000000003',
               'name': 'memory-node-7', 'pool_uuid': helpers.POOL_MEMORY[
                   'uuid'], 'fabric_uuid': FABRIC['uuid'],
               'capacity_mb': 65536, 'reserved_mb': 1024,
               'allocated_mb': 2048, 'exporter': 'tgt',
               'portal': '192.0.2.7:3260', 'transport': 'iser',
               'enabled': True,
               'created_at': '2026-11-01T10:00:00+00:00', 'updated_at': None}
DEVICE_HELD = {'uuid': 'f0000000-0000-4000-8000-000000000004',
               'name': 'gpu-0', 'pool_uuid': helpers.POOL_GPU['uuid'],
               'fabric_uuid': FABRIC['uuid'], 'address': 'pdfid-0x0100',
               'kind': 'gpu', 'vendor_id': '10de', 'product_id': '20b0',
               'model': 'A100', 'traits': [], 'state': 'attached',
               'lease_uuid': helpers.LEASE_BINDING['uuid'],
               'pci_address': '0000:41:00.0',
               'created_at': '2026-11-01T10:00:00+00:00', 'updated_at': None,
               'serial': 'GPU-SN-0', 'health': 'ok', 'health_reason': None,
               'reachable_hosts': None}
DEVICE_FAULTY = dict(DEVICE_HELD, uuid='f0000000-0000-4000-8000-000000000005',
                     name='gpu-1', state='faulty', lease_uuid=None,
                     pci_address=None, health='critical',
                     health_reason='the fabric reports its health as '
                                   'critical',
                     reachable_hosts=['compute-1', 'compute-2'])

POOL_SRIOV = dict(
    helpers.POOL_GPU, uuid='5b0c9a0e-2f6f-4d0a-9d61-0a4a4b1f0003',
    name='vf-pool', kind='pci', resource_class='CUSTOM_COMPOSABLE_PCI_NIC',
    fabric_uuid=FABRIC['uuid'], traits=[], total=4, used=0, free=4,
    sriov={'host_uuid': HOST['uuid'], 'host': 'compute-1',
           'pf_address': '0000:41:00.0', 'vf_count': 4,
           'vf_mode': 'on_demand'})


def wrap(*dicts):
    return [api.Resource(dict(d)) for d in dicts]


def admin_url(panel, view='index', *args):
    return reverse('horizon:admin:composable_admin_%s:%s' % (panel, view),
                   args=args)


class ProjectPoolsTests(helpers.TestCase):

    @mock.patch.object(api, 'pool_list')
    def test_capacity_used_free_and_usage_bar(self, pool_list):
        pool_list.return_value = helpers.pools()

        res = self.client.get(reverse('horizon:project:composable_pools:'
                                      'index'))

        self.assertTemplateUsed(res, 'project/composable_pools/index.html')
        rows = {r.datum.name: r for r in res.context['table'].get_rows()}
        memory = rows['memory-pool'].render()
        # 8192 MiB less 1024 reserved can be lent; 3584 of it is used.
        self.assertIn('7168 MiB', memory)
        self.assertIn('3584 MiB', memory)
        self.assertIn('style="width: 50%;"', memory)
        gpu = rows['gpu-pool'].render()
        self.assertIn('4 devices', gpu)
        self.assertIn('style="width: 25%;"', gpu)

    @mock.patch.object(api, 'pool_list')
    def test_api_failure_is_shown(self, pool_list):
        pool_list.side_effect = helpers.api_error('Service Unavailable',
                                                  status=503)

        res = self.client.get(reverse('horizon:project:composable_pools:'
                                      'index'))

        errors = self.messages_of('error', res)
        self.assertEqual(1, len(errors), errors)
        self.assertIn('Service Unavailable', errors[0])

    def test_panels_need_the_service_in_the_catalog(self):
        self.service_catalog[:] = [s for s in self.service_catalog
                                   if s['type'] != 'composable']
        self.setActiveUser(id=self.user.id, token=self.token,
                           username=self.user.name,
                           tenant_id=self.tenant.id,
                           service_catalog=self.service_catalog,
                           authorized_tenants=self.tenants.list(),
                           roles=[{'id': '2', 'name': 'member'}])

        res = self.client.get(reverse('horizon:project:composable_pools:'
                                      'index'))

        self.assertEqual(403, res.status_code)

    def test_admin_panels_are_not_for_project_members(self):
        # The test user is a member and a reader of its project.
        for panel in ('fabrics', 'hosts', 'memory_nodes', 'pools',
                      'devices'):
            res = self.client.get(admin_url(panel))
            self.assertEqual(403, res.status_code, panel)


class AdminInventoryTests(helpers.BaseAdminViewTests):

    def setUp(self):
        super().setUp()
        # The devices table names the leases holding devices
        # (test_names has the rest of it).
        mock.patch.object(api, 'lease_list', return_value=helpers.leases(
            helpers.LEASE_BINDING)).start()

    @mock.patch.object(api, 'fabric_list')
    def test_fabrics(self, fabric_list):
        fabric_list.return_value = wrap(FABRIC)

        res = self.client.get(admin_url('fabrics'))

        self.assertTemplateUsed(res, 'composable_dashboard/index.html')
        self.assertContains(res, 'rack-1-pcie')
        self.assertContains(res, 'switchtec')
        # Driver settings (which may hold credentials) are not shown.
        self.assertNotContains(res, '/dev/switchtec0')

    @mock.patch.object(api, 'fabric_list')
    @mock.patch.object(api, 'host_list')
    def test_hosts_show_their_fabric_by_name(self, host_list, fabric_list):
        host_list.return_value = wrap(HOST)
        fabric_list.return_value = wrap(FABRIC)

        res = self.client.get(admin_url('hosts'))

        self.assertContains(res, 'iqn.2026-11.org.example:compute-1')
        row = res.context['table'].get_rows()[0].render()
        self.assertIn('rack-1-pcie', row)
        self.assertNotIn(FABRIC['uuid'], row)

    @mock.patch.object(api, 'fabric_list')
    @mock.patch.object(api, 'host_list')
    def test_hosts_show_the_uuid_when_fabrics_cannot_be_listed(
            self, host_list, fabric_list):
        host_list.return_value = wrap(HOST)
        fabric_list.side_effect = helpers.api_error('Service Unavailable',
                                                    status=503)

        res = self.client.get(admin_url('hosts'))

        self.assertContains(res, FABRIC['uuid'])

    @mock.patch.object(api, 'pool_list')
    @mock.patch.object(api, 'memory_node_list')
    def test_memory_nodes(self, memory_node_list, pool_list):
        memory_node_list.return_value = wrap(MEMORY_NODE)
        pool_list.return_value = helpers.pools()

        res = self.client.get(admin_url('memory_nodes'))

        self.assertContains(res, 'memory-node-7')
        self.assertContains(res, '192.0.2.7:3260')
        self.assertContains(res, '65536')
        row = res.context['table'].get_rows()[0].render()
        self.assertIn('memory-pool', row)
        self.assertNotIn(helpers.POOL_MEMORY['uuid'], row)

    @mock.patch.object(api, 'fabric_list')
    @mock.patch.object(api, 'pool_list')
    def test_pools(self, pool_list, fabric_list):
        pool_list.return_value = helpers.pools() + [
            api.Pool(dict(POOL_SRIOV))]
        fabric_list.return_value = wrap(
            dict(FABRIC, uuid=helpers.POOL_MEMORY['fabric_uuid']))

        res = self.client.get(admin_url('pools'))

        self.assertContains(res, 'CUSTOM_COMPOSABLE_MEMORY_MB')
        self.assertContains(res, 'style="width: 50%;"')
        rows = {r.datum.name: r.render()
                for r in res.context['table'].get_rows()}
        self.assertIn('rack-1-pcie', rows['memory-pool'])
        self.assertNotIn(helpers.POOL_MEMORY['fabric_uuid'],
                         rows['memory-pool'])
        self.assertIn('compute-1 0000:41:00.0: 4 VFs, on_demand',
                      rows['vf-pool'])

    @mock.patch.object(api, 'pool_list')
    @mock.patch.object(api, 'device_list')
    def test_devices_state_and_holding_lease(self, device_list, pool_list):
        device_list.return_value = wrap(DEVICE_HELD, DEVICE_FAULTY)
        pool_list.return_value = helpers.pools()

        res = self.client.get(admin_url('devices'))

        rows = {r.datum.name: r for r in res.context['table'].get_rows()}
        held = rows['gpu-0'].render()
        self.assertIn(helpers.LEASE_BINDING['name'], held)
        self.assertIn('gpu-pool', held)
        self.assertNotIn(helpers.POOL_GPU['uuid'], held)
        self.assertIn('Attached', held)
        self.assertIn('status_up', held)
        faulty = rows['gpu-1'].render()
        self.assertIn('Faulty', faulty)
        self.assertIn('status_down', faulty)
        # What the fabric reports: health, why, and who can reach it.
        self.assertIn('Every host', held)
        self.assertIn('OK', held)
        self.assertIn('Critical', faulty)
        self.assertIn('reports its health as critical', faulty)
        self.assertIn('compute-1, compute-2', faulty)

    @mock.patch.object(api, 'pool_list')
    @mock.patch.object(api, 'device_list')
    def test_devices_of_an_api_older_than_1_4(self, device_list, pool_list):
        old = {k: v for k, v in DEVICE_HELD.items()
               if k not in ('serial', 'health', 'health_reason',
                            'reachable_hosts')}
        device_list.return_value = wrap(old)
        pool_list.return_value = helpers.pools()

        res = self.client.get(admin_url('devices'))

        row = res.context['table'].get_rows()[0]
        self.assertIn('Attached', row.render())
        self.assertNotIn('Every host', row.render())
        self.assertEqual('-', row.cells['health'].data)
        self.assertEqual('-', row.cells['reachable_hosts'].data)
        self.assertEqual('-', row.cells['serial'].data)

    @mock.patch.object(api, 'pool_list')
    @mock.patch.object(api, 'device_list')
    def test_devices_health_and_reachable_hosts(self, device_list,
                                                pool_list):
        # What the API reports from 1.4 on; the dashboard does not ask
        # for 1.4 itself but shows the fields when the answer has them.
        device_list.return_value = wrap(
            dict(DEVICE_HELD, serial='SN-0042', health='ok',
                 health_reason=None, reachable_hosts=None),
            dict(DEVICE_FAULTY, serial='SN-0043', health='critical',
                 health_reason='uncorrectable ECC errors',
                 reachable_hosts=['compute-1', 'compute-2']),
            dict(DEVICE_FAULTY, uuid='f0000000-0000-4000-8000-000000000006',
                 name='gpu-2', health='warning', health_reason='hot',
                 reachable_hosts=[]))
        pool_list.return_value = helpers.pools()

        res = self.client.get(admin_url('devices'))

        rows = {r.datum.name: r.render()
                for r in res.context['table'].get_rows()}
        self.assertIn('SN-0042', rows['gpu-0'])
        self.assertIn('OK', rows['gpu-0'])
        self.assertIn('Every host of the fabric', rows['gpu-0'])
        self.assertIn('Critical: uncorrectable ECC errors', rows['gpu-1'])
        self.assertIn('compute-1, compute-2', rows['gpu-1'])
        self.assertIn('Warning: hot', rows['gpu-2'])
        cells = {r.datum.name: r.cells
                 for r in res.context['table'].get_rows()}
        self.assertEqual('None', str(cells['gpu-2']['reachable_hosts'].data))

    @mock.patch.object(api, 'host_list')
    @mock.patch.object(api, 'pool_create')
    def test_create_pool(self, pool_create, host_list):
        host_list.return_value = wrap(HOST)
        pool_create.return_value = api.Pool(dict(helpers.POOL_GPU))

        res = self.client.post(admin_url('pools', 'create'), {
            'name': 'gpu-pool', 'kind': 'gpu', 'fabric': 'rack-1-pcie',
            'traits': 'custom_gpu_a100, CUSTOM_NVLINK', 'reserved': 0})

        self.assertNoFormErrors(res)
        self.assertRedirectsNoFollow(res, admin_url('pools'))
        pool_create.assert_called_once_with(
            helpers.IsHttpRequest(), name='gpu-pool', kind='gpu',
            fabric='rack-1-pcie', traits=['CUSTOM_GPU_A100', 'CUSTOM_NVLINK'],
            reserved=0)

    @mock.patch.object(api, 'host_list')
    @mock.patch.object(api, 'pool_create')
    def test_create_sriov_pool(self, pool_create, host_list):
        host_list.return_value = wrap(HOST)
        pool_create.return_value = api.Pool(dict(POOL_SRIOV))

        res = self.client.get(admin_url('pools', 'create'))
        self.assertEqual(['', 'compute-1'],
                         [value for value, _label in res.context[
                             'form'].fields['sriov_host'].choices])

        res = self.client.post(admin_url('pools', 'create'), {
            'name': 'vf-pool', 'kind': 'pci', 'fabric': 'rack-1-pcie',
            'device_class': 'NIC', 'sriov_host': 'compute-1',
            'sriov_pf_address': '0000:41:00.0', 'sriov_vf_count': 4,
            'sriov_vf_mode': 'precreated', 'sriov_vendor_id': '8086',
            'sriov_product_id': '154c'})

        self.assertNoFormErrors(res)
        self.assertRedirectsNoFollow(res, admin_url('pools'))
        pool_create.assert_called_once_with(
            helpers.IsHttpRequest(), name='vf-pool', kind='pci',
            fabric='rack-1-pcie', device_class='NIC',
            sriov={'host': 'compute-1', 'pf_address': '0000:41:00.0',
                   'vf_count': 4, 'vf_mode': 'precreated',
                   'vendor_id': '8086', 'product_id': '154c'})

    @mock.patch.object(api, 'host_list')
    @mock.patch.object(api, 'pool_create')
    def test_sriov_pool_needs_host_pf_and_count(self, pool_create,
                                                host_list):
        host_list.return_value = wrap(HOST)

        res = self.client.post(admin_url('pools', 'create'), {
            'name': 'vf-pool', 'kind': 'pci', 'fabric': 'rack-1-pcie',
            'device_class': 'NIC', 'sriov_host': 'compute-1'})

        self.assertFormErrors(res, 1)
        self.assertContains(res, 'needs SR-IOV: physical function, '
                                 'SR-IOV: virtual functions too.')
        pool_create.assert_not_called()

    @mock.patch.object(api, 'host_list')
    @mock.patch.object(api, 'pool_create')
    def test_sriov_pool_refused_by_the_api(self, pool_create, host_list):
        host_list.return_value = wrap(HOST)
        pool_create.side_effect = helpers.api_error(
            'pool vf-pool is already made of the virtual functions of '
            '0000:41:00.0 on host compute-1; a physical function serves '
            'one pool', status=409, cls=api.ComposableConflict)

        res = self.client.post(admin_url('pools', 'create'), {
            'name': 'vf-pool-2', 'kind': 'pci', 'fabric': 'rack-1-pcie',
            'device_class': 'NIC', 'sriov_host': 'compute-1',
            'sriov_pf_address': '41:00.0', 'sriov_vf_count': 2})

        errors = self.messages_of('error', res)
        self.assertEqual(1, len(errors), errors)
        self.assertIn('Unable to create the pool.', errors[0])
        self.assertIn('a physical function serves one pool', errors[0])

    @mock.patch.object(api, 'host_list')
    @mock.patch.object(api, 'pool_create')
    def test_create_refused_by_the_api(self, pool_create, host_list):
        host_list.return_value = wrap(HOST)
        pool_create.side_effect = helpers.api_error(
            'A pool named gpu-pool exists already', status=409,
            cls=api.ComposableConflict)

        res = self.client.post(admin_url('pools', 'create'), {
            'name': 'gpu-pool', 'kind': 'gpu', 'fabric': 'rack-1-pcie'})

        errors = self.messages_of('error', res)
        self.assertEqual(1, len(errors), errors)
        self.assertIn('Unable to create the pool.', errors[0])
        self.assertIn('exists already', errors[0])

    @mock.patch.object(api, 'device_update')
    @mock.patch.object(api, 'device_get')
    def test_put_a_device_in_maintenance(self, device_get, device_update):
        device_get.return_value = api.Resource(dict(DEVICE_FAULTY))
        device_update.return_value = api.Resource(
            dict(DEVICE_FAULTY, state='maintenance'))
        url = admin_url('devices', 'update', DEVICE_FAULTY['uuid'])

        res = self.client.get(url)
        self.assertContains(res, 'value="faulty" selected')

        res = self.client.post(url, {'uuid': DEVICE_FAULTY['uuid'],
                                     'name': 'gpu-1', 'model': 'A100',
                                     'state': 'maintenance'})

        self.assertNoFormErrors(res)
        device_update.assert_called_once_with(
            helpers.IsHttpRequest(), DEVICE_FAULTY['uuid'], name='gpu-1',
            model='A100', state='maintenance')

    @mock.patch.object(api, 'device_update')
    @mock.patch.object(api, 'device_get')
    def test_a_device_cannot_be_set_attached_by_hand(self, device_get,
                                                     device_update):
        device_get.return_value = api.Resource(dict(DEVICE_FAULTY))

        res = self.client.post(
            admin_url('devices', 'update', DEVICE_FAULTY['uuid']),
            {'uuid': DEVICE_FAULTY['uuid'], 'state': 'attached'})

        self.assertFormErrors(res, 1)
        device_update.assert_not_called()

    @mock.patch.object(api, 'memory_node_update')
    @mock.patch.object(api, 'memory_node_get')
    def test_disable_a_memory_node(self, memory_node_get,
                                   memory_node_update):
        memory_node_get.return_value = api.Resource(dict(MEMORY_NODE))
        memory_node_update.return_value = api.Resource(
            dict(MEMORY_NODE, enabled=False))

        res = self.client.post(
            admin_url('memory_nodes', 'update', MEMORY_NODE['uuid']),
            {'uuid': MEMORY_NODE['uuid'], 'capacity_mb': 65536,
             'reserved_mb': 1024, 'transport': 'iser'})

        self.assertNoFormErrors(res)
        memory_node_update.assert_called_once_with(
            helpers.IsHttpRequest(), MEMORY_NODE['uuid'], capacity_mb=65536,
            reserved_mb=1024, transport='iser', enabled=False)

    @mock.patch.object(api, 'fabric_list')
    @mock.patch.object(api, 'host_delete')
    @mock.patch.object(api, 'host_list')
    def test_delete_host_refused_shows_why(self, host_list, host_delete,
                                           fabric_list):
        host_list.return_value = wrap(HOST)
        fabric_list.return_value = wrap(FABRIC)
        host_delete.side_effect = helpers.api_error(
            'Host compute-1 has bound leases', status=409,
            cls=api.ComposableConflict)

        res = self.client.post(admin_url('hosts'), {
            'action': 'hosts__delete__%s' % HOST['uuid']})

        self.assertRedirectsNoFollow(res, admin_url('hosts'))
        errors = self.messages_of('error')
        self.assertEqual(1, len(errors), errors)
        self.assertIn('Host compute-1 has bound leases', errors[0])
