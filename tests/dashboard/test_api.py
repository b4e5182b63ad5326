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

"""composable.dashboard.api.composable against a real HTTP server.

The server (stdlib, on 127.0.0.1) answers as the composable API does;
the request is a plain object carrying what Horizon's request carries
(the user's token and service catalog). These tests check what the
module sends and how it reports the API's errors.
"""

import http.server
import json
import threading
import types
import unittest

from django.test import utils as test_utils
from horizon import exceptions as horizon_exceptions

from composable.dashboard.api import composable as api

LEASE = {'uuid': '0f1e2d3c-4b5a-4c6d-8e7f-000000000001', 'name': 'a',
         'status': 'bound'}

POOL_SRIOV = {'uuid': '5b0c9a0e-2f6f-4d0a-9d61-0a4a4b1f0003',
              'name': 'vf-pool', 'kind': 'pci',
              'sriov': {'host_uuid': '5b0c9a0e-2f6f-4d0a-9d61-0a4a4b1f0009',
                        'host': 'compute-1', 'pf_address': '0000:41:00.0',
                        'vf_count': 4, 'vf_mode': 'on_demand'}}


class _Handler(http.server.BaseHTTPRequestHandler):

    def log_message(self, *args):
        pass

    def _answer(self):
        if self.path.startswith('/v1/devices'):
            # A hung API: answer only once the test is over.
            self.server.release.wait(60)
        self.server.seen.append({'method': self.command, 'path': self.path,
                                 'headers': dict(self.headers)})
        length = int(self.headers.get('Content-Length') or 0)
        self.server.bodies.append(
            json.loads(self.rfile.read(length)) if length else None)
        status, body = self.server.answers.get(
            (self.command, self.path.split('?')[0]), (404, {'errors': [{
                'status': 404, 'code': 'composable.not_found',
                'title': 'Not Found', 'detail': 'No such thing',
                'request_id': 'req-404'}]}))
        if self.headers.get('OpenStack-API-Version') in \
                self.server.not_acceptable:
            # A server older than the version asked for.
            status, body = 406, {'errors': [{
                'status': 406, 'code': 'composable.not_acceptable',
                'title': 'Not Acceptable', 'detail': 'Version not supported',
                'request_id': 'req-406'}]}
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header('Content-Type', 'application/json')
        self.send_header('Content-Length', str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PATCH = do_DELETE = _answer


def _request(url):
    catalog = [{'type': 'composable', 'name': 'composable', 'endpoints': [
        {'region': 'RegionOne', 'interface': interface, 'url': url}
        for interface in ('public', 'internal', 'admin')]}]
    user = types.SimpleNamespace(
        token=types.SimpleNamespace(id='user-token-1'),
        service_catalog=catalog, services_region='RegionOne')
    return types.SimpleNamespace(user=user)


class ApiModuleTests(unittest.TestCase):

    def setUp(self):
        self.server = http.server.ThreadingHTTPServer(('127.0.0.1', 0),
                                                      _Handler)
        self.server.seen, self.server.bodies, self.server.answers = [], [], {}
        self.server.not_acceptable = ()
        self.server.release = threading.Event()
        thread = threading.Thread(target=self.server.serve_forever,
                                  daemon=True)
        thread.start()
        self.addCleanup(thread.join, 10)
        self.addCleanup(self.server.server_close)
        self.addCleanup(self.server.shutdown)
        self.addCleanup(self.server.release.set)
        self.request = _request('http://127.0.0.1:%d'
                                % self.server.server_address[1])

    def test_lists_with_the_user_token_and_the_catalog_endpoint(self):
        self.server.answers[('GET', '/v1/leases')] = (
            200, {'leases': [LEASE], 'links': []})

        leases = api.lease_list(self.request, status='bound')

        self.assertEqual([LEASE['uuid']], [lease.id for lease in leases])
        self.assertIsInstance(leases[0], api.Lease)
        self.assertEqual('bound', leases[0].status)
        seen = self.server.seen[0]
        self.assertEqual('/v1/leases?status=bound', seen['path'])
        self.assertEqual('user-token-1', seen['headers']['X-Auth-Token'])
        self.assertEqual('composable 1.0',
                         seen['headers']['OpenStack-API-Version'])

    def test_bind_posts_the_server(self):
        self.server.answers[('POST', '/v1/leases/%s/bind' % LEASE['uuid'])] \
            = (202, dict(LEASE, status='binding'))
        server = '7a7a7a7a-1111-4222-8333-444444444444'

        lease = api.lease_bind(self.request, LEASE['uuid'], server=server)

        self.assertEqual('binding', lease.status)
        self.assertEqual([{'server': server}], self.server.bodies)

    def test_bind_posts_the_host(self):
        self.server.answers[('POST', '/v1/leases/%s/bind' % LEASE['uuid'])] \
            = (202, dict(LEASE, status='binding'))

        api.lease_bind(self.request, LEASE['uuid'], host='compute-1',
                       attach_mode='host')

        self.assertEqual([{'host': 'compute-1', 'attach_mode': 'host'}],
                         self.server.bodies)

    def test_sriov_pool_is_created_at_1_3(self):
        self.server.answers[('POST', '/v1/pools')] = (201, POOL_SRIOV)
        sriov = {'host': 'compute-1', 'pf_address': '0000:41:00.0',
                 'vf_count': 4}

        pool = api.pool_create(self.request, name='vf-pool', kind='pci',
                               fabric='f', device_class='NIC', sriov=sriov)

        self.assertEqual('compute-1', pool.sriov['host'])
        self.assertEqual('composable 1.3',
                         self.server.seen[0]['headers'][
                             'OpenStack-API-Version'])
        self.assertEqual(sriov, self.server.bodies[0]['sriov'])

    def test_other_pools_are_created_at_the_configured_version(self):
        self.server.answers[('POST', '/v1/pools')] = (201, POOL_SRIOV)

        api.pool_create(self.request, name='gpus', kind='gpu', fabric='f')

        self.assertEqual('composable 1.0',
                         self.server.seen[0]['headers'][
                             'OpenStack-API-Version'])

    def test_pools_are_listed_with_their_sriov_fields(self):
        self.server.answers[('GET', '/v1/pools')] = (
            200, {'pools': [POOL_SRIOV], 'links': []})

        pools = api.pool_list(self.request)

        self.assertEqual('0000:41:00.0', pools[0].sriov['pf_address'])
        self.assertEqual(['composable 1.3'],
                         [seen['headers']['OpenStack-API-Version']
                          for seen in self.server.seen])

    def test_a_server_before_1_3_is_asked_again(self):
        self.server.not_acceptable = ('composable 1.3',)
        self.server.answers[('GET', '/v1/pools')] = (
            200, {'pools': [dict(POOL_SRIOV, sriov=None)], 'links': []})

        pools = api.pool_list(self.request)

        self.assertEqual(['vf-pool'], [pool.name for pool in pools])
        self.assertEqual(['composable 1.3', 'composable 1.0'],
                         [seen['headers']['OpenStack-API-Version']
                          for seen in self.server.seen])

    def test_conflict_carries_the_api_message(self):
        self.server.answers[('DELETE', '/v1/leases/%s' % LEASE['uuid'])] = (
            409, {'errors': [{'status': 409, 'code': 'composable.conflict',
                              'title': 'Conflict',
                              'detail': 'Lease a is releasing',
                              'request_id': 'req-9'}]})

        with self.assertRaises(api.ComposableConflict) as caught:
            api.lease_delete(self.request, LEASE['uuid'])

        self.assertEqual(409, caught.exception.status_code)
        self.assertIn('Lease a is releasing', str(caught.exception))
        self.assertIn('req-9', str(caught.exception))

    def test_not_found(self):
        with self.assertRaises(api.ComposableNotFound) as caught:
            api.pool_get(self.request, 'nope')
        self.assertIn('No such thing', caught.exception.message)

    def test_refused_token_logs_the_user_out(self):
        self.server.answers[('GET', '/v1/pools')] = (
            401, {'error': {'code': 401, 'title': 'Unauthorized',
                            'message': 'The request you have made '
                                       'requires authentication.'}})

        with self.assertRaises(api.ComposableUnauthorized) as caught:
            api.pool_list(self.request)

        # Horizon's error handler logs the user out on NotAuthorized.
        self.assertIsInstance(caught.exception,
                              horizon_exceptions.NotAuthorized)

    def test_unreachable_api(self):
        self.server.shutdown()
        self.server.server_close()

        with self.assertRaises(api.ComposableAPIError) as caught:
            api.fabric_list(self.request)

        self.assertIn('Unable to reach the composable API',
                      caught.exception.message)

    def test_hung_api_times_out_with_an_error(self):
        with test_utils.override_settings(COMPOSABLE_API_TIMEOUT=1):
            with self.assertRaises(api.ComposableAPIError) as caught:
                api.device_list(self.request)

        self.assertIn('Unable to reach the composable API',
                      caught.exception.message)

    def test_no_endpoint_in_the_catalog(self):
        self.request.user.service_catalog = []

        with self.assertRaises(horizon_exceptions.ServiceCatalogException):
            api.lease_list(self.request)
