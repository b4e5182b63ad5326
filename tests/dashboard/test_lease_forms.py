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

"""The lease forms and actions: create, bind, unbind, extend, delete.

Horizon's unit-test helpers drive the real forms and tables; the
composable API module and Nova's server list are stubbed with mocks.
"""

from unittest import mock

from django.urls import reverse
from openstack_dashboard.api import nova

from composable.dashboard.api import composable as api
from tests.dashboard import helpers

INDEX_URL = reverse('horizon:project:composable_leases:index')
CREATE_URL = reverse('horizon:project:composable_leases:create')
LEASE_ID = helpers.LEASE_RESERVED['uuid']


def lease_url(view, lease_id=LEASE_ID):
    return reverse('horizon:project:composable_leases:%s' % view,
                   args=[lease_id])


class CreateLeaseTests(helpers.TestCase):

    def setUp(self):
        super().setUp()
        pool_list = mock.patch.object(api, 'pool_list').start()
        pool_list.return_value = helpers.pools()
        self.lease_create = mock.patch.object(api, 'lease_create').start()

    def test_form_offers_the_pools(self):
        res = self.client.get(CREATE_URL)

        self.assertTemplateUsed(res, 'project/composable_leases/create.html')
        self.assertContains(res, 'memory-pool (memory)')
        self.assertContains(res, 'gpu-pool (gpu)')

    def test_create_memory_and_gpu_lease(self):
        self.lease_create.return_value = helpers.leases(
            helpers.LEASE_RESERVED)[0]

        res = self.client.post(CREATE_URL, {
            'name': 'train', 'memory': '4GiB', 'device_count': 2,
            'device_kind': 'gpu', 'device_model': 'A100',
            'pool': 'memory-pool', 'attach_mode': 'guest',
            'start_at': '2030-06-27T18:00', 'end_at': '2030-06-30T18:00',
        })

        self.assertNoFormErrors(res)
        self.assertRedirectsNoFollow(res, INDEX_URL)
        self.lease_create.assert_called_once_with(
            helpers.IsHttpRequest(), name='train', attach_mode='guest',
            memory_mb=4096, device_count=2, device_kind='gpu',
            device_model='A100', pools=['memory-pool'],
            start_at='2030-06-27T18:00:00Z', end_at='2030-06-30T18:00:00Z')
        self.assertEqual(['Lease "train" was created.'],
                         self.messages_of('success'))

    def test_device_kind_left_empty_is_the_pools(self):
        # The API takes the kind of the pool named (an SR-IOV NIC pool's
        # is nic); the form must not say gpu on the user's behalf.
        self.lease_create.return_value = helpers.leases(
            helpers.LEASE_RESERVED)[0]

        res = self.client.post(CREATE_URL, {
            'name': 'vf', 'device_count': 1, 'pool': 'gpu-pool',
            'attach_mode': 'guest',
        })

        self.assertNoFormErrors(res)
        self.lease_create.assert_called_once_with(
            helpers.IsHttpRequest(), name='vf', attach_mode='guest',
            device_count=1, pools=['gpu-pool'])

    def test_create_elastic_lease(self):
        self.lease_create.return_value = helpers.leases(
            helpers.LEASE_RESERVED)[0]

        res = self.client.post(CREATE_URL, {
            'name': 'grow', 'memory': '2GiB', 'attach_mode': 'host',
            'elastic_min': '1GiB', 'elastic_max': '8GiB',
            'observation_window': 600, 'prediction_window': 60,
            'headroom': '0.5'})

        self.assertNoFormErrors(res)
        self.lease_create.assert_called_once_with(
            helpers.IsHttpRequest(), name='grow', attach_mode='host',
            memory_mb=2048, elastic={
                'min_mb': 1024, 'max_mb': 8192, 'observation_window': 600,
                'prediction_window': 60, 'headroom': 0.5})

    def test_elastic_needs_both_limits_and_memory(self):
        for data, error in (
                ({'memory': '2GiB', 'elastic_min': '1GiB'},
                 'needs both its smallest and its largest size'),
                ({'device_count': 1, 'elastic_min': '1GiB',
                  'elastic_max': '2GiB'}, 'give the memory size it starts'),
                ({'memory': '2GiB', 'elastic_min': '1GiB',
                  'elastic_max': '2GiB', 'observation_window': 5},
                 'greater than or equal to 10')):
            data.update(name='e', attach_mode='host')
            res = self.client.post(CREATE_URL, data)
            self.assertEqual(200, res.status_code, data)
            self.assertContains(res, error)
        self.lease_create.assert_not_called()

    def test_memory_units(self):
        self.lease_create.return_value = helpers.leases(
            helpers.LEASE_RESERVED)[0]
        for given, mib in (('512', 512), ('512MiB', 512), ('1.5T', 1572864),
                           ('2 GB', 2048)):
            self.lease_create.reset_mock()
            self.client.post(CREATE_URL, {'name': 'm', 'memory': given,
                                          'attach_mode': 'host'})
            self.assertEqual(mib,
                             self.lease_create.call_args[1]['memory_mb'],
                             given)

    def test_bad_input_is_refused_before_the_api(self):
        cases = [
            ({'name': 'x', 'memory': 'lots'}, 'Enter a size such as'),
            ({'name': 'x', 'memory': '0.5MiB'}, 'Enter a size such as'),
            ({'name': 'x'}, 'Nothing to lease'),
            ({'name': 'x', 'memory': '1GiB', 'start_at': '2030-06-27T18:00',
              'end_at': '2030-06-27T17:00'}, 'The end must be after'),
        ]
        for data, error in cases:
            data['attach_mode'] = 'host'
            res = self.client.post(CREATE_URL, data)
            self.assertEqual(200, res.status_code, data)
            self.assertContains(res, error)
        self.lease_create.assert_not_called()

    def test_api_refusal_is_shown_with_its_message(self):
        self.lease_create.side_effect = helpers.api_error(
            'Pool memory-pool has 3584 MiB free, 65536 MiB asked',
            status=409, cls=api.ComposableConflict)

        res = self.client.post(CREATE_URL, {'name': 'big', 'memory': '64G',
                                            'attach_mode': 'host'})

        # The form stays open so the user can ask for less.
        self.assertEqual(200, res.status_code)
        self.assertTemplateUsed(res, 'project/composable_leases/create.html')
        errors = self.messages_of('error', res)
        self.assertEqual(1, len(errors), errors)
        self.assertIn('Unable to create lease "big".', errors[0])
        self.assertIn('3584 MiB free, 65536 MiB asked', errors[0])
        self.assertIn('req-42', errors[0])


class BindLeaseTests(helpers.TestCase):

    def setUp(self):
        super().setUp()
        self.servers = self.servers.list()
        server_list = mock.patch.object(nova, 'server_list').start()
        server_list.return_value = (self.servers, False)
        self.server_list = server_list
        self.lease_bind = mock.patch.object(api, 'lease_bind').start()

    def test_form_offers_the_project_servers(self):
        res = self.client.get(lease_url('bind'))

        self.assertEqual(200, res.status_code)
        self.server_list.assert_called_once_with(helpers.IsHttpRequest())
        for server in self.servers:
            self.assertContains(res, server.id)

    def test_bind_to_a_server(self):
        server = self.servers[0]
        self.lease_bind.return_value = helpers.leases(
            helpers.LEASE_BINDING)[0]

        res = self.client.post(lease_url('bind'), {
            'lease_id': LEASE_ID, 'server': server.id, 'attach_mode': ''})

        self.assertNoFormErrors(res)
        self.assertRedirectsNoFollow(res, INDEX_URL)
        self.lease_bind.assert_called_once_with(
            helpers.IsHttpRequest(), LEASE_ID, server=server.id, host=None,
            attach_mode=None)

    def test_a_server_not_listed_is_refused(self):
        res = self.client.post(lease_url('bind'), {
            'lease_id': LEASE_ID,
            'server': '99999999-9999-4999-8999-999999999999'})

        self.assertFormErrors(res, 1)
        self.lease_bind.assert_not_called()

    def test_bind_refused_by_the_api(self):
        self.lease_bind.side_effect = helpers.api_error(
            'Lease waiting cannot bind in status binding', status=409,
            cls=api.ComposableConflict)

        res = self.client.post(lease_url('bind'), {
            'lease_id': LEASE_ID, 'server': self.servers[0].id})

        errors = self.messages_of('error', res)
        self.assertEqual(1, len(errors), errors)
        self.assertIn('Unable to bind the lease.', errors[0])
        self.assertIn('cannot bind in status binding', errors[0])


HOSTS = [api.Resource({'uuid': 'f0000000-0000-4000-8000-00000000000%d' % i,
                       'name': 'compute-%d' % i,
                       'fabric_uuid': helpers.POOL_MEMORY['fabric_uuid']})
         for i in (1, 0)]


class BindHostLeaseTests(helpers.BaseAdminViewTests):
    """An administrator binds a lease to a compute host."""

    def setUp(self):
        super().setUp()
        self.host_list = mock.patch.object(api, 'host_list').start()
        self.host_list.return_value = HOSTS
        server_list = mock.patch.object(nova, 'server_list').start()
        server_list.return_value = (self.servers.list(), False)
        self.lease_bind = mock.patch.object(api, 'lease_bind').start()

    def test_form_offers_the_hosts_in_host_mode(self):
        res = self.client.get(lease_url('bind_host'))

        self.assertEqual(200, res.status_code)
        self.assertTemplateUsed(res,
                                'project/composable_leases/bind_host.html')
        form = res.context['form']
        self.assertEqual(['', 'compute-0', 'compute-1'],
                         [value for value, _label
                          in form.fields['host'].choices])
        self.assertEqual('host', form.fields['attach_mode'].initial)

    def test_bind_to_a_host(self):
        self.lease_bind.return_value = helpers.leases(
            helpers.LEASE_BINDING)[0]

        res = self.client.post(lease_url('bind_host'), {
            'lease_id': LEASE_ID, 'host': 'compute-1',
            'attach_mode': 'host', 'server': ''})

        self.assertNoFormErrors(res)
        self.assertRedirectsNoFollow(res, INDEX_URL)
        self.lease_bind.assert_called_once_with(
            helpers.IsHttpRequest(), LEASE_ID, server=None, host='compute-1',
            attach_mode='host')

    def test_bind_to_a_server_on_a_host(self):
        server = self.servers.first()

        res = self.client.post(lease_url('bind_host'), {
            'lease_id': LEASE_ID, 'host': 'compute-0',
            'attach_mode': 'guest', 'server': server.id})

        self.assertNoFormErrors(res)
        self.lease_bind.assert_called_once_with(
            helpers.IsHttpRequest(), LEASE_ID, server=server.id,
            host='compute-0', attach_mode='guest')

    def test_a_host_is_required(self):
        res = self.client.post(lease_url('bind_host'), {
            'lease_id': LEASE_ID, 'host': '', 'attach_mode': 'host'})

        self.assertFormErrors(res, 1)
        self.lease_bind.assert_not_called()

    def test_bind_refused_by_the_api(self):
        self.lease_bind.side_effect = helpers.api_error(
            'Host compute-1 is on fabric other, not on the fabric of the '
            "lease's pools", status=409, cls=api.ComposableConflict)

        res = self.client.post(lease_url('bind_host'), {
            'lease_id': LEASE_ID, 'host': 'compute-1',
            'attach_mode': 'host'})

        # The form stays open, with the API's reason.
        self.assertEqual(200, res.status_code)
        errors = self.messages_of('error', res)
        self.assertEqual(1, len(errors), errors)
        self.assertIn('Unable to bind the lease.', errors[0])
        self.assertIn("not on the fabric of the lease's pools", errors[0])

    def test_hosts_not_listed_are_said(self):
        self.host_list.side_effect = helpers.api_error(
            'Service Unavailable', status=503)

        res = self.client.get(lease_url('bind_host'))

        errors = self.messages_of('error', res)
        self.assertEqual(1, len(errors), errors)
        self.assertIn('Unable to retrieve the hosts.', errors[0])


class BindHostIsForAdministratorsTests(helpers.TestCase):

    @mock.patch.object(api, 'host_list')
    def test_a_member_is_not_authorized(self, host_list):
        res = self.client.get(lease_url('bind_host'))

        self.assertEqual(403, res.status_code)
        host_list.assert_not_called()


class ExtendLeaseTests(helpers.TestCase):

    @mock.patch.object(api, 'lease_update')
    def test_extend(self, lease_update):
        lease_update.return_value = helpers.leases(helpers.LEASE_RESERVED)[0]

        res = self.client.post(lease_url('extend'), {
            'lease_id': LEASE_ID, 'end_at': '2031-01-02T03:04'})

        self.assertNoFormErrors(res)
        self.assertRedirectsNoFollow(res, INDEX_URL)
        lease_update.assert_called_once_with(
            helpers.IsHttpRequest(), LEASE_ID, end_at='2031-01-02T03:04:00Z')

    @mock.patch.object(api, 'lease_update')
    def test_an_end_in_the_past_is_refused(self, lease_update):
        res = self.client.post(lease_url('extend'), {
            'lease_id': LEASE_ID, 'end_at': '2001-01-01T00:00'})

        self.assertFormErrors(res, 1, 'The new end must be in the future.')
        lease_update.assert_not_called()

    @mock.patch.object(api, 'lease_update')
    def test_extension_refused_by_the_api(self, lease_update):
        lease_update.side_effect = helpers.api_error(
            'end_at is beyond the longest lease allowed (30 days)',
            status=400)

        res = self.client.post(lease_url('extend'), {
            'lease_id': LEASE_ID, 'end_at': '2031-01-02T03:04'})

        errors = self.messages_of('error', res)
        self.assertEqual(1, len(errors), errors)
        self.assertIn('longest lease allowed', errors[0])


class TableActionTests(helpers.TestCase):
    """Unbind and delete are table actions posted to the index."""

    def setUp(self):
        super().setUp()
        mock.patch.object(api, 'pool_list',
                          return_value=helpers.pools()).start()
        self.lease_list = mock.patch.object(api, 'lease_list').start()

    @mock.patch.object(api, 'lease_unbind')
    def test_unbind(self, lease_unbind):
        lease = helpers.LEASE_BOUND
        self.lease_list.return_value = helpers.leases(lease)

        res = self.client.post(INDEX_URL, {
            'action': 'leases__unbind__%s' % lease['uuid']})

        self.assertRedirectsNoFollow(res, INDEX_URL)
        lease_unbind.assert_called_once_with(helpers.IsHttpRequest(),
                                             lease['uuid'])

    @mock.patch.object(api, 'lease_unbind')
    def test_unbind_is_not_offered_for_a_reserved_lease(self, lease_unbind):
        lease = helpers.LEASE_RESERVED
        self.lease_list.return_value = helpers.leases(lease)

        res = self.client.post(INDEX_URL, {
            'action': 'leases__unbind__%s' % lease['uuid']})

        self.assertRedirectsNoFollow(res, INDEX_URL)
        lease_unbind.assert_not_called()
        self.assertEqual(['You are not allowed to unbind lease: waiting'],
                         self.messages_of('error'))

    @mock.patch.object(api, 'lease_delete')
    def test_delete(self, lease_delete):
        lease = helpers.LEASE_FAILED
        self.lease_list.return_value = helpers.leases(lease)

        res = self.client.post(INDEX_URL, {
            'action': 'leases__delete__%s' % lease['uuid']})

        self.assertRedirectsNoFollow(res, INDEX_URL)
        lease_delete.assert_called_once_with(helpers.IsHttpRequest(),
                                             lease['uuid'])
        self.assertEqual(['Deletion of lease requested: too-big'],
                         self.messages_of('success'))

    @mock.patch.object(api, 'lease_unbind')
    def test_unbind_refused_by_the_api(self, lease_unbind):
        lease = helpers.LEASE_BOUND
        self.lease_list.return_value = helpers.leases(lease)
        lease_unbind.side_effect = helpers.api_error(
            'Lease big-swap is releasing', status=409,
            cls=api.ComposableConflict)

        res = self.client.post(INDEX_URL, {
            'action': 'leases__unbind__%s' % lease['uuid']})

        self.assertRedirectsNoFollow(res, INDEX_URL)
        self.assertEqual(
            ['Unable to unbind lease big-swap: Lease big-swap is releasing '
             '(Request-ID: req-42)'],
            self.messages_of('error'))

    @mock.patch.object(api, 'lease_delete')
    def test_delete_refused_by_the_api(self, lease_delete):
        lease = helpers.LEASE_BOUND
        self.lease_list.return_value = helpers.leases(lease)
        lease_delete.side_effect = helpers.api_error(
            'Lease big-swap is locked by conductor c-2', status=409,
            cls=api.ComposableConflict)

        res = self.client.post(INDEX_URL, {
            'action': 'leases__delete__%s' % lease['uuid']})

        self.assertRedirectsNoFollow(res, INDEX_URL)
        self.assertEqual(
            ['Unable to delete lease big-swap: Lease big-swap is locked by '
             'conductor c-2 (Request-ID: req-42)'],
            self.messages_of('error'))
