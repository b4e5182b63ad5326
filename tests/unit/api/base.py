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

"""Fixtures and a small WSGI client for the API tests.

The application runs with auth_strategy=noauth: X-Project-Id and X-Roles
act as the persona's token. The database is a SQLite file in a temporary
directory, the messaging transport is the in-process fake one, and, for
lease operations, a real ConductorManager (and agents) serve RPC in
threads of the test process.
"""

import importlib
import json
import os

from oslo_messaging import conffixture
import pytest
import webob

from composable.api import app as api_app
from composable.common import rpc
from composable import conf
from composable.db import api as db_api
from composable import policies

CONF = conf.CONF

PROJECT_A = 'project-a'
PROJECT_B = 'project-b'

# name: (project, roles), as keystone would present them (implied roles
# included).
PERSONAS = {
    'admin': ('admin-project', 'admin,member,reader'),
    'member': (PROJECT_A, 'member,reader'),
    'reader': (PROJECT_A, 'reader'),
    'other_member': (PROJECT_B, 'member,reader'),
    'other_reader': (PROJECT_B, 'reader'),
    'service': ('service', 'service'),
}

COMPUTE_HOST = 'compute-1'
MEMORY_NODES = ('mn1', 'mn2')


def _parse_config():
    # Policy needs a parsed configuration (it looks for policy files), and
    # the messaging fixture's cleanUp resets it.
    CONF([], project='composable', default_config_files=[])


class Response(object):
    """The parts of a webob response a test looks at."""

    def __init__(self, response):
        self.raw = response
        self.status = response.status_int
        self.headers = response.headers
        self.text = response.text if response.body else ''

    @property
    def json(self):
        return json.loads(self.text)

    @property
    def error(self):
        return self.json['errors'][0]

    def __repr__(self):
        return '<Response %s %s>' % (self.status, self.text[:500])


class Client(object):
    """Requests to a WSGI app, as one persona."""

    def __init__(self, app, persona='admin'):
        self.app = app
        self.persona = persona

    def as_(self, persona):
        return Client(self.app, persona)

    def request(self, method, path, body=None, raw=None, headers=None,
                content_type='application/json'):
        project, roles = PERSONAS[self.persona]
        all_headers = {'X-Project-Id': project, 'X-Roles': roles,
                       'X-User-Id': 'user-%s' % self.persona}
        all_headers.update(headers or {})
        req = webob.Request.blank(path, method=method, headers=all_headers)
        if body is not None:
            raw = json.dumps(body).encode('utf-8')
        if raw is not None:
            req.body = raw
            req.content_type = content_type
        return Response(req.get_response(self.app))

    def get(self, path, **kwargs):
        return self.request('GET', path, **kwargs)

    def post(self, path, body=None, **kwargs):
        return self.request('POST', path, body=body, **kwargs)

    def patch(self, path, body=None, **kwargs):
        return self.request('PATCH', path, body=body, **kwargs)

    def delete(self, path, **kwargs):
        return self.request('DELETE', path, **kwargs)


@pytest.fixture
def api_env(tmp_path):
    _parse_config()
    messaging = conffixture.ConfFixture(CONF, transport_url='fake:/')
    messaging.setUp()
    CONF.set_override('connection', 'sqlite:///%s' % os.path.join(
        str(tmp_path), 't.sqlite'), 'database')
    CONF.set_override('host', 'test-host')
    CONF.set_override('rpc_response_timeout_bind', 5)
    db_api.reset_facade()
    db_api.create_schema_for_tests()
    rpc.cleanup()
    rpc.init(CONF)
    policies.reset()
    try:
        yield CONF
    finally:
        rpc.cleanup()
        db_api.reset_facade()
        policies.reset()
        CONF.clear_override('connection', 'database')
        CONF.clear_override('host')
        CONF.clear_override('rpc_response_timeout_bind')
        messaging.cleanUp()


@pytest.fixture
def app(api_env):
    return api_app.setup_app('noauth')


@pytest.fixture
def client(app):
    return Client(app, 'admin')


def conductor_manager_class():
    try:
        module = importlib.import_module('composable.conductor.manager')
    except ImportError:
        return None
    return getattr(module, 'ConductorManager', None)


def agent_manager_class():
    try:
        module = importlib.import_module('composable.agent.manager')
    except ImportError:
        return None
    return getattr(module, 'AgentManager', None)


@pytest.fixture
def conductor(api_env):
    """A conductor (and agents for the test inventory) serving RPC on the
    fake transport. Skips while the conductor is not written yet."""
    manager_class = conductor_manager_class()
    if manager_class is None:
        pytest.skip('composable.conductor.manager.ConductorManager does '
                    'not exist yet: lease operations need a conductor')
    manager = manager_class('test-host')
    servers = [rpc.get_server(rpc.CONDUCTOR_TOPIC, 'test-host', [manager])]
    agent_class = agent_manager_class()
    if agent_class is not None:
        servers.append(rpc.get_server(
            rpc.AGENT_TOPIC, COMPUTE_HOST,
            agent_class(COMPUTE_HOST, roles=['compute_node']).endpoints))
        for name in MEMORY_NODES:
            servers.append(rpc.get_server(
                rpc.AGENT_TOPIC, name,
                agent_class(name, roles=['memory_node']).endpoints))
    manager.start()
    for server in servers:
        server.start()
    try:
        yield manager
    finally:
        for server in servers:
            server.stop()
        for server in servers:
            server.wait()
        manager.stop()


def make_inventory(client):
    """A fake fabric, a host, a memory pool with two 8 GiB nodes and a GPU
    pool with two GPUs."""
    def ok(response, status=201):
        assert response.status == status, response
        return response.json

    inv = {}
    inv['fabric'] = ok(client.post('/v1/fabrics', {
        'name': 'fab1', 'driver': 'fake',
        'driver_info': {'url': 'http://redfish.example',
                        'password': 's3cret'}}))
    inv['host'] = ok(client.post('/v1/hosts', {
        'name': COMPUTE_HOST, 'fabric': 'fab1',
        'initiator_iqn': 'iqn.2026-11.example:compute-1'}))
    inv['memory_pool'] = ok(client.post('/v1/pools', {
        'name': 'mem1', 'kind': 'memory', 'fabric': 'fab1',
        'step_size': 1024}))
    inv['nodes'] = [ok(client.post('/v1/memory_nodes', {
        'name': name, 'pool': 'mem1', 'capacity_mb': 8192,
        'portal': '192.0.2.%d:3260' % i}))
        for i, name in enumerate(MEMORY_NODES, 1)]
    inv['gpu_pool'] = ok(client.post('/v1/pools', {
        'name': 'gpu1', 'kind': 'gpu', 'fabric': 'fab1'}))
    inv['devices'] = [ok(client.post('/v1/devices', {
        'pool': 'gpu1', 'address': 'slot-%d' % i, 'name': 'g%d' % i,
        'model': 'A100', 'vendor_id': '10de', 'product_id': '20b0'}))
        for i in (1, 2)]
    return inv


@pytest.fixture
def inventory(client):
    return make_inventory(client)
