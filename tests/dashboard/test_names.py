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

"""Names where the pages showed UUIDs: a fabric's Nova host aggregate,
the lease holding a device, the server a lease is bound to; the UUID
where the name cannot be had, and no error for the page.

The composable API module and Nova (its client for the aggregates, its
server calls) are stubbed with mocks, as Horizon's helpers expect.
"""

import re
from unittest import mock

from django.urls import reverse
from novaclient import exceptions as nova_exceptions
from openstack_dashboard.api import _nova
from openstack_dashboard.api import nova

from composable.dashboard.api import composable as api
from composable.dashboard import utils
from tests.dashboard import helpers
from tests.dashboard import test_pools_and_inventory as inventory

AGGREGATE_UUID = 'a0000000-0000-4000-8000-00000000a001'
FABRIC = dict(inventory.FABRIC, aggregate_uuid=AGGREGATE_UUID)
SERVER_ID = helpers.LEASE_BINDING['instance_uuid']


def aggregate(uuid, name, ident=1):
    """What python-novaclient gives for an aggregate at 2.41 and later."""
    found = mock.Mock(id=ident, uuid=uuid, hosts=['compute-1'])
    found.name = name  # Mock(name=...) names the mock itself
    return found


def server(ident, name):
    found = mock.Mock(id=ident)
    found.name = name
    return found


def cells(html):
    """The texts of the cells of a rendered table."""
    return [text.strip() for text in
            re.findall(r'<td[^>]*>(.*?)</td>', html, re.S)]


def lease_detail_url(lease_id):
    return reverse('horizon:project:composable_leases:detail',
                   args=[lease_id])


class FabricAggregateNameTests(helpers.BaseAdminViewTests):

    def setUp(self):
        super().setUp()
        mock.patch.object(api, 'fabric_list',
                          return_value=inventory.wrap(FABRIC)).start()
        self.novaclient = mock.patch.object(_nova, 'novaclient').start()

    def test_the_aggregate_by_its_name(self):
        self.novaclient.return_value.aggregates.list.return_value = [
            aggregate('a0000000-0000-4000-8000-00000000a002', 'other', 2),
            aggregate(AGGREGATE_UUID, 'rack-1-hosts')]

        res = self.client.get(inventory.admin_url('fabrics'))

        row = res.context['table'].get_rows()[0].render()
        self.assertIn('rack-1-hosts', row)
        self.assertNotIn(AGGREGATE_UUID, row)
        self.assertNotIn('other', row)
        # Aggregates show their UUID from compute API 2.41 on.
        self.novaclient.assert_called_once_with(helpers.IsHttpRequest(),
                                                version='2.41')
        self.assertNoMessages(res)

    def test_the_uuid_when_nova_cannot_be_read(self):
        self.novaclient.return_value.aggregates.list.side_effect = (
            nova_exceptions.ClientException(503, 'Service Unavailable'))

        res = self.client.get(inventory.admin_url('fabrics'))

        self.assertEqual(200, res.status_code)
        row = res.context['table'].get_rows()[0].render()
        self.assertIn(AGGREGATE_UUID, row)
        # A name is a courtesy: no error for the page.
        self.assertNoMessages(res)

    def test_the_uuid_of_an_aggregate_nova_does_not_know(self):
        self.novaclient.return_value.aggregates.list.return_value = []

        res = self.client.get(inventory.admin_url('fabrics'))

        row = res.context['table'].get_rows()[0].render()
        self.assertIn(AGGREGATE_UUID, row)

    def test_nova_is_not_asked_without_an_aggregate(self):
        api.fabric_list.return_value = inventory.wrap(inventory.FABRIC)

        res = self.client.get(inventory.admin_url('fabrics'))

        self.assertEqual('-', res.context['table'].get_rows()[0].cells[
            'aggregate'].value)
        self.novaclient.assert_not_called()


class FabricFormAggregateTests(helpers.BaseAdminViewTests):

    def setUp(self):
        super().setUp()
        self.novaclient = mock.patch.object(_nova, 'novaclient').start()
        self.fabric_create = mock.patch.object(api, 'fabric_create').start()
        self.fabric_create.return_value = api.Resource(dict(FABRIC))

    def test_the_aggregates_by_their_names(self):
        self.novaclient.return_value.aggregates.list.return_value = [
            aggregate(AGGREGATE_UUID, 'rack-1-hosts')]

        form = self.client.get(inventory.admin_url(
            'fabrics', 'create')).context['form']

        self.assertEqual(
            [('', 'None'), (AGGREGATE_UUID,
                            'rack-1-hosts (%s)' % AGGREGATE_UUID)],
            [(v, str(label))
             for v, label in form.fields['aggregate_uuid'].choices])

        res = self.client.post(inventory.admin_url('fabrics', 'create'), {
            'name': 'rack-1-pcie', 'driver': 'fake',
            'aggregate_uuid': AGGREGATE_UUID})

        self.assertNoFormErrors(res)
        self.fabric_create.assert_called_once_with(
            helpers.IsHttpRequest(), name='rack-1-pcie', driver='fake',
            aggregate_uuid=AGGREGATE_UUID)

    @mock.patch.object(api, 'fabric_get')
    def test_editing_keeps_an_aggregate_nova_does_not_list(self, fabric_get):
        fabric_get.return_value = api.Resource(dict(FABRIC))
        self.novaclient.return_value.aggregates.list.return_value = [
            aggregate('a0000000-0000-4000-8000-00000000a002', 'other', 2)]

        form = self.client.get(inventory.admin_url(
            'fabrics', 'update', FABRIC['uuid'])).context['form']

        self.assertEqual(AGGREGATE_UUID, form.initial['aggregate_uuid'])
        self.assertIn((AGGREGATE_UUID, AGGREGATE_UUID),
                      form.fields['aggregate_uuid'].choices)

    def test_a_uuid_to_type_when_nova_cannot_say(self):
        self.novaclient.side_effect = Exception('no compute endpoint')

        res = self.client.get(inventory.admin_url('fabrics', 'create'))

        field = res.context['form'].fields['aggregate_uuid']
        self.assertFalse(hasattr(field, 'choices'))
        self.assertNoMessages(res)


class DeviceLeaseNameTests(helpers.BaseAdminViewTests):

    def setUp(self):
        super().setUp()
        mock.patch.object(api, 'pool_list',
                          return_value=helpers.pools()).start()
        mock.patch.object(api, 'device_list', return_value=inventory.wrap(
            inventory.DEVICE_HELD, inventory.DEVICE_FAULTY)).start()
        self.lease_list = mock.patch.object(api, 'lease_list').start()

    def _rows(self):
        res = self.client.get(inventory.admin_url('devices'))
        self.assertEqual(200, res.status_code)
        return res, {r.datum.name: r for r in res.context['table'].get_rows()}

    def test_the_holding_lease_by_its_name_with_a_link(self):
        self.lease_list.return_value = helpers.leases(
            helpers.LEASE_BOUND, helpers.LEASE_BINDING)

        res, rows = self._rows()

        held = rows['gpu-0'].render()
        self.assertIn('gpu-lease', held)
        self.assertNotIn(helpers.LEASE_BINDING['uuid'] + '<', held)
        self.assertIn('href="%s"' % lease_detail_url(
            helpers.LEASE_BINDING['uuid']), held)
        # A lease of any project may hold a device.
        self.lease_list.assert_called_once_with(helpers.IsHttpRequest(),
                                                all_projects=True)
        # A device held by no lease: no link.
        self.assertEqual('-', rows['gpu-1'].cells['lease'].value)
        self.assertNotIn('composable_leases', rows['gpu-1'].render())
        self.assertNoMessages(res)

    def test_a_lease_without_a_name_by_its_uuid(self):
        self.lease_list.return_value = helpers.leases(
            dict(helpers.LEASE_BINDING, name=None))

        _res, rows = self._rows()

        held = rows['gpu-0'].render()
        self.assertIn('>%s<' % helpers.LEASE_BINDING['uuid'], held)
        self.assertIn('href="%s"' % lease_detail_url(
            helpers.LEASE_BINDING['uuid']), held)

    def test_the_uuid_when_the_leases_cannot_be_listed(self):
        self.lease_list.side_effect = helpers.api_error(
            'Service Unavailable', status=503)

        res, rows = self._rows()

        self.assertIn(helpers.LEASE_BINDING['uuid'], rows['gpu-0'].render())
        self.assertNoMessages(res)

    def test_no_lease_list_when_no_device_is_held(self):
        api.device_list.return_value = inventory.wrap(
            inventory.DEVICE_FAULTY)

        self._rows()

        self.lease_list.assert_not_called()


class LeaseServerNameTests(helpers.TestCase):

    def setUp(self):
        super().setUp()
        mock.patch.object(api, 'pool_list',
                          return_value=helpers.pools()).start()
        self.server_list = mock.patch.object(nova, 'server_list').start()
        self.server_get = mock.patch.object(nova, 'server_get').start()

    @mock.patch.object(api, 'lease_list')
    def test_the_table_names_the_server(self, lease_list):
        lease_list.return_value = helpers.leases(helpers.LEASE_BOUND,
                                                 helpers.LEASE_BINDING)
        self.server_list.return_value = (
            [server(SERVER_ID, 'batch-worker-3'), server('x', 'other')],
            False)

        res = self.client.get(reverse(
            'horizon:project:composable_leases:index'))

        rows = {r.datum.name: r for r in res.context['table'].get_rows()}
        self.assertEqual('batch-worker-3',
                         rows['gpu-lease'].cells['consumer'].data)
        self.assertNotIn(SERVER_ID, rows['gpu-lease'].render().replace(
            'id="leases__row__%s' % helpers.LEASE_BINDING['uuid'], ''))
        # A host-mode lease names its host.
        self.assertEqual('compute-1', rows['big-swap'].cells['consumer'].data)
        self.server_list.assert_called_once_with(helpers.IsHttpRequest())
        self.assertNoMessages(res)

    @mock.patch.object(api, 'lease_list')
    def test_the_server_id_when_nova_cannot_say(self, lease_list):
        lease_list.return_value = helpers.leases(helpers.LEASE_BINDING)
        self.server_list.side_effect = nova_exceptions.ClientException(
            503, 'Service Unavailable')

        res = self.client.get(reverse(
            'horizon:project:composable_leases:index'))

        [row] = res.context['table'].get_rows()
        self.assertEqual(SERVER_ID, row.cells['consumer'].data)
        self.assertNoMessages(res)

    @mock.patch.object(api, 'lease_list')
    def test_nova_is_not_asked_without_a_server(self, lease_list):
        lease_list.return_value = helpers.leases(helpers.LEASE_BOUND)

        self.client.get(reverse('horizon:project:composable_leases:index'))

        self.server_list.assert_not_called()

    @mock.patch.object(api, 'lease_get')
    def test_the_detail_links_the_server_by_its_name(self, lease_get):
        lease_get.return_value = helpers.leases(helpers.LEASE_BINDING)[0]
        self.server_get.return_value = server(SERVER_ID, 'batch-worker-3')

        res = self.client.get(lease_detail_url(
            helpers.LEASE_BINDING['uuid']))

        overview = res.context['tab_group'].get_tab('overview').render()
        self.assertIn('>batch-worker-3</a>', overview)
        self.assertIn('href="%s"' % reverse(
            'horizon:project:instances:detail', args=[SERVER_ID]), overview)
        self.server_get.assert_called_once_with(helpers.IsHttpRequest(),
                                                SERVER_ID)

    @mock.patch.object(api, 'lease_get')
    def test_the_detail_shows_the_server_id_when_nova_cannot_say(
            self, lease_get):
        lease_get.return_value = helpers.leases(helpers.LEASE_BINDING)[0]
        self.server_get.side_effect = nova_exceptions.NotFound(404)

        res = self.client.get(lease_detail_url(
            helpers.LEASE_BINDING['uuid']))

        overview = res.context['tab_group'].get_tab('overview').render()
        self.assertIn('>%s</a>' % SERVER_ID, overview)
        self.assertNoMessages(res)


class HostChoicesTests(helpers.BaseAdminViewTests):
    """The one list of hosts both forms offer (the SR-IOV pool's host,
    the host a lease is bound to)."""

    @mock.patch.object(api, 'host_list')
    def test_sorted_by_name_after_the_empty_choice(self, host_list):
        host_list.return_value = [api.Resource({'uuid': 'u2',
                                                'name': 'compute-1'}),
                                  api.Resource({'uuid': 'u1',
                                                'name': 'compute-0'})]

        choices = utils.host_choices(self.request, 'Pick one')

        self.assertEqual([('', 'Pick one'), ('compute-0', 'compute-0'),
                          ('compute-1', 'compute-1')], choices)

    @mock.patch.object(api, 'host_list')
    def test_both_forms_use_it(self, host_list):
        host_list.return_value = [api.Resource({'uuid': 'u1',
                                                'name': 'compute-0'})]
        mock.patch.object(nova, 'server_list',
                          return_value=([], False)).start()
        with mock.patch.object(utils, 'host_choices',
                               wraps=utils.host_choices) as helper:
            pool_form = self.client.get(inventory.admin_url(
                'pools', 'create')).context['form']
            bind_form = self.client.get(reverse(
                'horizon:project:composable_leases:bind_host',
                args=[helpers.LEASE_RESERVED['uuid']])).context['form']

        self.assertEqual(2, helper.call_count)
        self.assertEqual(
            ['', 'compute-0'],
            [v for v, _l in pool_form.fields['sriov_host'].choices])
        self.assertEqual(['', 'compute-0'],
                         [v for v, _l in bind_form.fields['host'].choices])


class LeaseDetailTabNameTests(helpers.BaseAdminViewTests):

    def setUp(self):
        super().setUp()
        mock.patch.object(api, 'pool_list',
                          return_value=helpers.pools()).start()
        mock.patch.object(nova, 'server_get',
                          return_value=server(SERVER_ID, 'vm')).start()
        mock.patch.object(api, 'lease_get', return_value=helpers.leases(
            helpers.LEASE_BINDING)[0]).start()
        self.device_get = mock.patch.object(api, 'device_get').start()
        self.action_list = mock.patch.object(api,
                                             'lease_action_list').start()

    def _tab(self, slug):
        res = self.client.get(
            lease_detail_url(helpers.LEASE_BINDING['uuid']),
            {'tab': 'lease_details__%s' % slug})
        return res, res.context['tab_group'].get_tab(slug).render()

    def test_an_administrator_sees_the_devices_by_name(self):
        self.device_get.return_value = api.Resource(
            dict(inventory.DEVICE_HELD,
                 uuid=helpers.LEASE_BINDING['devices'][0]['uuid']))

        _res, devices = self._tab('devices')

        self.assertIn('gpu-0', cells(devices))
        self.assertNotIn(helpers.LEASE_BINDING['devices'][0]['uuid'],
                         cells(devices))
        self.device_get.assert_called_once_with(
            helpers.IsHttpRequest(),
            helpers.LEASE_BINDING['devices'][0]['uuid'])

    def test_the_device_id_when_the_inventory_cannot_be_read(self):
        self.device_get.side_effect = helpers.api_error('Service Unavailable',
                                                        status=503)

        _res, devices = self._tab('devices')

        self.assertIn(helpers.LEASE_BINDING['devices'][0]['uuid'],
                      cells(devices))

    def test_the_users_own_actions_by_name(self):
        mine = dict(helpers.ACTIONS[0], user_id=self.user.id)
        theirs = dict(helpers.ACTIONS[1], user_id='0ther0000user')
        self.action_list.return_value = [
            api.base.APIDictWrapper(a) for a in (mine, theirs)]

        _res, actions = self._tab('actions')

        self.assertIn(self.user.name, cells(actions))
        self.assertNotIn(self.user.id, cells(actions))
        self.assertIn('0ther0000user', cells(actions))


class MemberLeaseDevicesTests(helpers.TestCase):

    @mock.patch.object(api, 'device_get')
    @mock.patch.object(api, 'pool_list')
    @mock.patch.object(api, 'lease_get')
    def test_a_member_is_not_asked_for_the_inventory(
            self, lease_get, pool_list, device_get):
        lease_get.return_value = helpers.leases(helpers.LEASE_BINDING)[0]
        pool_list.return_value = helpers.pools()
        mock.patch.object(nova, 'server_get',
                          return_value=server(SERVER_ID, 'vm')).start()

        res = self.client.get(
            lease_detail_url(helpers.LEASE_BINDING['uuid']),
            {'tab': 'lease_details__devices'})

        devices = res.context['tab_group'].get_tab('devices').render()
        self.assertIn(helpers.LEASE_BINDING['devices'][0]['uuid'],
                      cells(devices))
        device_get.assert_not_called()
