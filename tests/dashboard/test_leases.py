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

"""Project -> Composable -> Leases, with Horizon's unit-test helpers.

The composable API module and Nova are stubbed with mocks (Horizon's
helpers refuse real connections); the views, tables, forms, tabs and
templates are the real ones, rendered by Django.
"""

from unittest import mock

from django.urls import reverse
from openstack_dashboard import api as dashboard_api

from composable.dashboard.api import composable as api
from tests.dashboard import helpers

INDEX_URL = reverse('horizon:project:composable_leases:index')
CREATE_URL = reverse('horizon:project:composable_leases:create')


def detail_url(lease_id):
    return reverse('horizon:project:composable_leases:detail',
                   args=[lease_id])


class LeasesIndexTests(helpers.TestCase):

    def setUp(self):
        super().setUp()
        # Nova knows no server of the project: their IDs are shown
        # (test_names has the names).
        mock.patch.object(dashboard_api.nova, 'server_list',
                          return_value=([], False)).start()

    @mock.patch.object(api, 'pool_list')
    @mock.patch.object(api, 'lease_list')
    def test_index_lists_the_leases(self, lease_list, pool_list):
        lease_list.return_value = helpers.leases(
            helpers.LEASE_BOUND, helpers.LEASE_BINDING, helpers.LEASE_FAILED)
        pool_list.return_value = helpers.pools()

        res = self.client.get(INDEX_URL)

        self.assertTemplateUsed(res, 'project/composable_leases/index.html')
        lease_list.assert_called_once_with(helpers.IsHttpRequest())
        self.assertNoMessages(res)
        table = res.context['table']
        self.assertEqual(['big-swap', 'gpu-lease', 'too-big'],
                         [row.datum.name for row in table.get_rows()])
        content = res.content.decode()
        # Memory in human units, devices, pool names, host or server.
        self.assertIn('2GB', content)
        self.assertIn('1 \u00d7 gpu A100', content)
        self.assertIn('memory-pool', content)
        self.assertIn('gpu-pool', content)
        self.assertIn('compute-1', content)
        self.assertIn(helpers.LEASE_BINDING['instance_uuid'], content)
        # The fault of a failed lease is shown with its status.
        self.assertIn('Allocation failed', content)
        self.assertIn('65536 MiB asked', content)
        # Binding to a host is an administrator's.
        self.assertNotIn('Bind to Host', content)

    @mock.patch.object(api, 'pool_list')
    @mock.patch.object(api, 'lease_list')
    def test_leases_in_transition_are_refreshed_by_ajax(self, lease_list,
                                                        pool_list):
        lease_list.return_value = helpers.leases(
            helpers.LEASE_BOUND, helpers.LEASE_BINDING)
        pool_list.return_value = helpers.pools()

        res = self.client.get(INDEX_URL)

        rows = {row.datum.name: row for row in res.context['table'].get_rows()}
        # A binding lease has no resting status: Horizon's JavaScript
        # polls its row; a bound one is left alone.
        self.assertIsNone(rows['gpu-lease'].status)
        self.assertTrue(rows['big-swap'].status)
        # Horizon's JavaScript polls the rows of class "warning".
        self.assertIn('warning', rows['gpu-lease'].classes)
        self.assertNotIn('warning', rows['big-swap'].classes)
        self.assertIn('data-update-url', rows['gpu-lease'].render())

    @mock.patch.object(api, 'pool_list')
    @mock.patch.object(api, 'lease_get')
    def test_row_update_returns_the_new_status(self, lease_get, pool_list):
        lease = helpers.leases(helpers.LEASE_BINDING)[0]
        lease._apidict['status'] = 'bound'
        lease_get.return_value = lease
        pool_list.return_value = helpers.pools()

        res = self.client.get(
            INDEX_URL, {'action': 'row_update', 'table': 'leases',
                        'obj_id': lease.uuid},
            HTTP_X_REQUESTED_WITH='XMLHttpRequest')

        self.assertEqual(200, res.status_code)
        lease_get.assert_called_once_with(helpers.IsHttpRequest(),
                                          lease.uuid)
        row = res.content.decode()
        self.assertIn('Bound', row)
        self.assertIn('status_up', row)
        self.assertNotIn('warning', row)
        self.assertIn(lease.uuid, row)
        # The pool by its name, as the full table shows it.
        self.assertIn('gpu-pool', row)
        self.assertNotIn(lease.device_pool_uuid, row)

    @mock.patch.object(api, 'pool_list')
    @mock.patch.object(api, 'lease_list')
    def test_filter_is_passed_to_the_api(self, lease_list, pool_list):
        lease_list.return_value = helpers.leases(helpers.LEASE_BOUND)
        pool_list.return_value = helpers.pools()

        res = self.client.post(INDEX_URL, {
            'leases__filter__q_field': 'status',
            'leases__filter__q': 'bound',
        }, follow=True)

        self.assertEqual(200, res.status_code)
        lease_list.assert_called_once_with(helpers.IsHttpRequest(),
                                           status='bound')

    @mock.patch.object(api, 'pool_list')
    @mock.patch.object(api, 'lease_list')
    def test_api_failure_is_shown(self, lease_list, pool_list):
        lease_list.side_effect = helpers.api_error(
            'The composable API is down for maintenance', status=503)

        res = self.client.get(INDEX_URL)

        self.assertEqual(200, res.status_code)
        errors = self.messages_of('error', res)
        self.assertEqual(1, len(errors), errors)
        self.assertIn('Unable to retrieve the leases.', errors[0])
        self.assertIn('down for maintenance', errors[0])
        self.assertEqual([], list(res.context['table'].data))
        pool_list.assert_not_called()


class LeaseDetailTests(helpers.TestCase):

    def setUp(self):
        super().setUp()
        mock.patch.object(dashboard_api.nova, 'server_get',
                          side_effect=Exception('not stubbed')).start()

    @mock.patch.object(api, 'pool_list')
    @mock.patch.object(api, 'lease_action_list')
    @mock.patch.object(api, 'lease_get')
    def test_detail_has_extents_devices_and_actions(self, lease_get,
                                                    action_list, pool_list):
        pool_list.return_value = helpers.pools()
        lease = helpers.leases(helpers.LEASE_BOUND)[0]
        lease._apidict['extents'][0]['chap_secret'] = 'never-shown'
        lease_get.return_value = lease
        action_list.return_value = [dashboard_api.base.APIDictWrapper(a)
                                    for a in helpers.ACTIONS]

        res = self.client.get(detail_url(lease.uuid))

        self.assertTemplateUsed(res, 'horizon/common/_detail.html')
        lease_get.assert_called_once_with(helpers.IsHttpRequest(),
                                          lease.uuid)
        tabs = res.context['tab_group']
        self.assertEqual(['overview', 'extents', 'devices', 'actions',
                          'usage'],
                         [tab.slug for tab in tabs.get_tabs()])
        content = res.content.decode()
        self.assertIn('big-swap', content)
        self.assertIn('for the batch run', content)
        # The pool by its name; a lease of fixed size has no elastic part.
        overview = tabs.get_tab('overview').render()
        self.assertIn('memory-pool', overview)
        self.assertNotIn(helpers.POOL_MEMORY['uuid'], overview)
        self.assertNotIn('Observation window', overview)
        extents = tabs.get_tab('extents').render()
        self.assertIn('memory-node-7', extents)
        self.assertNotIn('never-shown', content)
        # The action log is fetched only when its tab is opened.
        action_list.assert_not_called()

        res = self.client.get(detail_url(lease.uuid),
                              {'tab': 'lease_details__actions'})

        actions = res.context['tab_group'].get_tab('actions').render()
        self.assertIn('iSCSI login to memory-node-7 timed out', actions)
        action_list.assert_called_once_with(helpers.IsHttpRequest(),
                                            lease.uuid)

    @mock.patch.object(api, 'pool_list')
    @mock.patch.object(api, 'lease_action_list')
    @mock.patch.object(api, 'lease_get')
    def test_detail_devices_tab(self, lease_get, action_list, pool_list):
        pool_list.return_value = helpers.pools()
        lease_get.return_value = helpers.leases(helpers.LEASE_BINDING)[0]
        action_list.return_value = []

        res = self.client.get(detail_url(helpers.LEASE_BINDING['uuid']))

        devices = res.context['tab_group'].get_tab('devices').render()
        self.assertIn('d0000000-0000-4000-8000-000000000001', devices)
        self.assertIn('A100', devices)

    @mock.patch.object(api, 'lease_get')
    def test_detail_of_an_unknown_lease_redirects_with_the_message(
            self, lease_get):
        lease_get.side_effect = helpers.api_error(
            'Lease 0000 could not be found.', status=404,
            cls=api.ComposableNotFound)

        res = self.client.get(detail_url('0000'))

        self.assertRedirectsNoFollow(res, INDEX_URL)
        errors = self.messages_of('error')
        self.assertEqual(1, len(errors), errors)
        self.assertIn('Unable to retrieve the lease.', errors[0])
        self.assertIn('Lease 0000 could not be found.', errors[0])


ELASTIC = {'min_mb': 1024, 'max_mb': 8192, 'observation_window': 300,
           'prediction_window': 60, 'headroom': 0.25}


class ElasticLeaseDetailTests(helpers.TestCase):

    @mock.patch.object(api, 'pool_list')
    @mock.patch.object(api, 'lease_get')
    def test_overview_shows_the_elastic_limits(self, lease_get, pool_list):
        lease_get.return_value = helpers.leases(
            dict(helpers.LEASE_BOUND, elastic=ELASTIC))[0]
        pool_list.return_value = helpers.pools()

        res = self.client.get(detail_url(helpers.LEASE_BOUND['uuid']))

        overview = res.context['tab_group'].get_tab('overview').render()
        self.assertIn('Resized with its use, between 1GB and 8GB',
                      overview)
        self.assertIn('300 s', overview)
        self.assertIn('60 s', overview)
        self.assertIn('25%', overview)

    @mock.patch.object(api, 'pool_list')
    @mock.patch.object(api, 'lease_get')
    def test_pools_not_listed_show_their_uuid(self, lease_get, pool_list):
        lease_get.return_value = helpers.leases(helpers.LEASE_BOUND)[0]
        pool_list.side_effect = helpers.api_error('Service Unavailable',
                                                  status=503)

        res = self.client.get(detail_url(helpers.LEASE_BOUND['uuid']))

        overview = res.context['tab_group'].get_tab('overview').render()
        self.assertIn(helpers.POOL_MEMORY['uuid'], overview)

    @mock.patch.object(api, 'pool_list')
    @mock.patch.object(api, 'lease_usage')
    @mock.patch.object(api, 'lease_get')
    def test_usage_plot_draws_the_limits(self, lease_get, lease_usage,
                                         pool_list):
        lease_get.return_value = helpers.leases(
            dict(helpers.LEASE_BOUND, elastic=ELASTIC))[0]
        pool_list.return_value = helpers.pools()
        lease_usage.return_value = [
            {'id': 1, 'taken_at': '2026-11-25T10:00:00Z', 'used_mb': 512,
             'size_mb': 2048},
            {'id': 2, 'taken_at': '2026-11-25T10:00:10Z', 'used_mb': 3072,
             'size_mb': 4096}]

        res = self.client.get(detail_url(helpers.LEASE_BOUND['uuid']),
                              {'tab': 'lease_details__usage'})

        content = res.context['tab_group'].get_tab('usage').render()
        # The top of the plot is the largest size, 8192 MiB: the limits
        # are at 7/8 and at 0 of the height (160).
        self.assertIn('y1="140.0" y2="140.0"', content)
        self.assertIn('y1="0.0" y2="0.0"', content)
        self.assertIn('points="0.0,150.0 600.0,100.0"', content)
        self.assertIn("elastic lease's limits, 1024 and 8192 MiB", content)


class BindHostActionTests(helpers.BaseAdminViewTests):

    @mock.patch.object(api, 'pool_list')
    @mock.patch.object(api, 'lease_list')
    def test_an_administrator_may_bind_to_a_host(self, lease_list,
                                                 pool_list):
        lease_list.return_value = helpers.leases(helpers.LEASE_RESERVED,
                                                 helpers.LEASE_BOUND)
        pool_list.return_value = helpers.pools()

        res = self.client.get(INDEX_URL)

        rows = {r.datum.name: r.render()
                for r in res.context['table'].get_rows()}
        self.assertIn('Bind to Host', rows['waiting'])
        # A bound lease is unbound first.
        self.assertNotIn('Bind to Host', rows['big-swap'])


class LeaseUsageTabTests(helpers.TestCase):

    def setUp(self):
        super().setUp()
        # The overview, rendered with the usage tab, names the pools.
        mock.patch.object(api, 'pool_list',
                          return_value=helpers.pools()).start()

    @mock.patch.object(api, 'lease_usage')
    @mock.patch.object(api, 'lease_get')
    def test_usage_tab_plots_the_samples(self, lease_get, lease_usage):
        lease_get.return_value = helpers.leases(helpers.LEASE_BOUND)[0]
        lease_usage.return_value = [
            {'id': 1, 'taken_at': '2026-11-25T10:00:00Z', 'used_mb': 0,
             'size_mb': 2048},
            {'id': 2, 'taken_at': '2026-11-25T10:00:10Z', 'used_mb': 1024,
             'size_mb': 2048},
            {'id': 3, 'taken_at': '2026-11-25T10:00:20Z', 'used_mb': 2048,
             'size_mb': 4096}]
        uuid = helpers.LEASE_BOUND['uuid']

        res = self.client.get(detail_url(uuid),
                              {'tab': 'lease_details__usage'})

        content = res.context['tab_group'].get_tab('usage').render()
        lease_usage.assert_called_once_with(
            helpers.IsHttpRequest(), uuid, since=mock.ANY, limit=5000)
        self.assertIn('3 samples from 2026-11-25T10:00:00Z', content)
        # x across the 20 s, y from the top of the plot (4096 MiB).
        self.assertIn('points="0.0,160.0 300.0,120.0 600.0,80.0"', content)
        self.assertIn('points="0.0,80.0 300.0,80.0 600.0,0.0"', content)

    @mock.patch.object(api, 'lease_usage')
    @mock.patch.object(api, 'lease_get')
    def test_usage_tab_without_samples(self, lease_get, lease_usage):
        lease_get.return_value = helpers.leases(helpers.LEASE_BOUND)[0]
        lease_usage.return_value = []

        res = self.client.get(detail_url(helpers.LEASE_BOUND['uuid']),
                              {'tab': 'lease_details__usage'})

        content = res.context['tab_group'].get_tab('usage').render()
        self.assertIn('No usage was reported for this lease', content)
