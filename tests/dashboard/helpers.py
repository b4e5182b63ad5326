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

"""Horizon's own test helpers, with a composable endpoint in the test
user's service catalog and sample API objects.

The tests built on these stub ``composable.dashboard.api.composable`` (and
Nova) with mocks: Horizon's helpers are made for that, and refuse any real
HTTP connection a test forgets to stub. What the client module itself
sends is tested against a real HTTP server in test_api.py.
"""

import copy

from django.contrib.messages.storage import default_storage
from django.utils.encoding import force_str
from openstack_dashboard.test import helpers

from composable.dashboard.api import composable as api

COMPOSABLE_SERVICE = {
    'type': 'composable',
    'name': 'composable',
    'endpoints_links': [],
    'endpoints': [
        {'region': 'RegionOne', 'interface': interface,
         'url': 'http://%s.composable.example.com:6590' % interface}
        for interface in ('admin', 'internal', 'public')
    ],
}

POOL_MEMORY = {
    'uuid': '5b0c9a0e-2f6f-4d0a-9d61-0a4a4b1f0001', 'name': 'memory-pool',
    'kind': 'memory', 'resource_class': 'CUSTOM_COMPOSABLE_MEMORY_MB',
    'fabric_uuid': '5b0c9a0e-2f6f-4d0a-9d61-0a4a4b1ff001', 'traits': [],
    'total': 8192, 'reserved': 1024, 'used': 3584, 'free': 3584,
    'step_size': 512, 'provider_uuid': None, 'description': None,
    'created_at': '2026-11-01T10:00:00+00:00', 'updated_at': None,
}
POOL_GPU = dict(
    POOL_MEMORY, uuid='5b0c9a0e-2f6f-4d0a-9d61-0a4a4b1f0002',
    name='gpu-pool', kind='gpu', resource_class='CUSTOM_COMPOSABLE_GPU',
    traits=['CUSTOM_GPU_A100'], total=4, reserved=0, used=1, free=3,
    step_size=1)

LEASE_BOUND = {
    'uuid': '0f1e2d3c-4b5a-4c6d-8e7f-000000000001', 'name': 'big-swap',
    'description': 'for the batch run', 'project_id': 'p1', 'user_id': 'u1',
    'status': 'bound', 'fault': None, 'memory_mb': 2048, 'device_count': 0,
    'device_kind': None, 'device_model': None, 'device_traits': [],
    'attach_mode': 'host', 'start_at': None,
    'end_at': '2026-12-01T00:00:00+00:00', 'host': 'compute-1',
    'instance_uuid': None, 'memory_pool_uuid': POOL_MEMORY['uuid'],
    'device_pool_uuid': None,
    'extents': [{'uuid': 'e0000000-0000-4000-8000-000000000001',
                 'index': 0, 'memory_node': 'memory-node-7',
                 'size_mb': 2048, 'export_state': 'exported'}],
    'devices': [], 'created_at': '2026-11-20T10:00:00+00:00',
    'updated_at': None,
}
LEASE_BINDING = dict(
    LEASE_BOUND, uuid='0f1e2d3c-4b5a-4c6d-8e7f-000000000002',
    name='gpu-lease', status='binding', memory_mb=0, device_count=1,
    device_kind='gpu', device_model='A100', host=None,
    instance_uuid='7a7a7a7a-1111-4222-8333-444444444444',
    memory_pool_uuid=None, device_pool_uuid=POOL_GPU['uuid'], extents=[],
    devices=[{'uuid': 'd0000000-0000-4000-8000-000000000001',
              'kind': 'gpu', 'model': 'A100', 'state': 'reserved',
              'pci_address': None}])
LEASE_FAILED = dict(
    LEASE_BOUND, uuid='0f1e2d3c-4b5a-4c6d-8e7f-000000000003',
    name='too-big', status='alloc_failed', memory_mb=65536, host=None,
    fault='Pool memory-pool has 3584 MiB free, 65536 MiB asked',
    extents=[])
LEASE_RESERVED = dict(
    LEASE_BOUND, uuid='0f1e2d3c-4b5a-4c6d-8e7f-000000000004',
    name='waiting', status='reserved', host=None)

ACTIONS = [
    {'action': 'create', 'request_id': 'req-1', 'user_id': 'u1',
     'project_id': 'p1', 'start_time': '2026-11-20T10:00:00+00:00',
     'finish_time': '2026-11-20T10:00:01+00:00', 'result': 'success',
     'message': None},
    {'action': 'bind', 'request_id': 'req-2', 'user_id': 'u1',
     'project_id': 'p1', 'start_time': '2026-11-20T10:01:00+00:00',
     'finish_time': None, 'result': 'error',
     'message': 'iSCSI login to memory-node-7 timed out'},
]


def leases(*dicts):
    return [api.Lease(copy.deepcopy(d)) for d in dicts]


def pools():
    return [api.Pool(copy.deepcopy(d)) for d in (POOL_MEMORY, POOL_GPU)]


def api_error(message, status=409, cls=api.ComposableAPIError):
    return cls(message + ' (Request-ID: req-42)', status_code=status)


IsHttpRequest = helpers.IsHttpRequest


class _CatalogMixin(object):

    def _setup_test_data(self):
        super()._setup_test_data()
        # The panels show only where the catalog has the service.
        self.service_catalog.append(copy.deepcopy(COMPOSABLE_SERVICE))

    def messages_of(self, level, response=None):
        """The texts of the messages of one level (error, success...).

        Without a response, those a redirect left in the test client's
        cookie; with one, those of the rendered page.
        """
        if response is None:
            storage = default_storage(self.request)
            cookie = self.client.cookies.get('messages')
            found = storage._decode(cookie.value) if cookie else []
        elif response.context and 'messages' in response.context:
            found = response.context['messages']
        else:
            found = response._request._messages._queued_messages
        return [force_str(m.message) for m in found or []
                if level in m.tags]


class TestCase(_CatalogMixin, helpers.TestCase):
    """A project member's request; the composable API module is stubbed."""


class BaseAdminViewTests(_CatalogMixin, helpers.BaseAdminViewTests):
    """An admin's request; the composable API module is stubbed."""
