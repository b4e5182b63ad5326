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

"""Server lookups through the real python-novaclient against a fake Nova
compute API (a WSGI application behind wsgi-intercept that answers
GET /servers/{id} the way Nova's policy and microversions do), and the
conductor's bind of a lease to a server without a host."""

import collections
import json
import threading

from keystoneauth1 import loading as ks_loading
import pytest
from wsgi_intercept import interceptor

from composable.common import context as ctx_mod
from composable.common import exception
from composable.common import states
from composable.conductor.nova import client as nova_api
from composable import conf
from tests.unit.conductor import harness as h_mod

CONF = conf.CONF

ENDPOINT = 'http://nova.example.test:8774/v2.1'
ADMIN_TOKEN = 'composable-admin-token'
SERVICE_TOKEN = 'composable-service-token'
USER_TOKEN = 'user-token-of-p1'
SERVER = '6c1e2a9e-0f7d-4b51-9a47-5a3d2f1b8c01'
OTHER = '0d9b7c5e-1f2a-4e3b-8c6d-7e8f9a0b1c2d'
HOSTLESS = '3a4b5c6d-7e8f-4a0b-9c1d-2e3f4a5b6c7d'


class FakeNova(object):
    """GET /servers/{id} of Nova's compute API.

    Tokens: ADMIN_TOKEN sees every server with its host; a user token
    (``tokens`` maps it to a project) sees its project's servers, without
    the admin-only host. ``max_version`` is the highest microversion
    served (406 above it, as Nova answers)."""

    def __init__(self):
        self.servers = {}
        self.tokens = {USER_TOKEN: h_mod.PROJECT}
        self.max_version = (2, 104)
        self.fail = None
        self.requests = []
        self.lock = threading.Lock()

    def add(self, uuid, project, host, vm_state='active', hints=None):
        self.servers[uuid] = {'project': project, 'host': host,
                              'vm_state': vm_state, 'hints': hints or {}}

    def __call__(self, environ, start_response):
        headers = {'token': environ.get('HTTP_X_AUTH_TOKEN'),
                   'service_token': environ.get('HTTP_X_SERVICE_TOKEN'),
                   'version': environ.get('HTTP_OPENSTACK_API_VERSION'),
                   'legacy_version': environ.get(
                       'HTTP_X_OPENSTACK_NOVA_API_VERSION'),
                   'path': environ['PATH_INFO']}
        with self.lock:
            self.requests.append(headers)
        if self.fail:
            return self._reply(start_response, self.fail,
                               {'computeFault': {'message': 'boom'}})
        token = headers['token']
        if token != ADMIN_TOKEN and token not in self.tokens:
            return self._reply(start_response, 401, {'error': {
                'message': 'The request you have made requires '
                           'authentication.', 'code': 401,
                'title': 'Unauthorized'}})
        version = self._version(headers)
        if version > self.max_version:
            return self._reply(start_response, 406, {'computeFault': {
                'message': 'Version not supported', 'code': 406}})
        # wsgi-intercept puts the endpoint's path (/v2.1) in SCRIPT_NAME.
        parts = environ['PATH_INFO'].strip('/').split('/')
        if len(parts) != 2 or parts[0] != 'servers':
            return self._reply(start_response, 404, {})
        server = self.servers.get(parts[1])
        admin = token == ADMIN_TOKEN
        if server is None or not admin and (
                server['project'] != self.tokens[token]):
            return self._reply(start_response, 404, {
                'itemNotFound': {'message': 'Instance could not be found'}})
        body = {'id': parts[1], 'tenant_id': server['project'],
                'user_id': 'u1', 'status': server['vm_state'].upper(),
                'OS-EXT-STS:vm_state': server['vm_state'],
                'OS-EXT-STS:task_state': None}
        if admin:
            body['OS-EXT-SRV-ATTR:host'] = server['host']
        if version >= (2, 100):
            body['scheduler_hints'] = server['hints']
        return self._reply(start_response, 200, {'server': body})

    @staticmethod
    def _version(headers):
        value = headers['version']
        if value:
            value = value.split()[-1]
        else:
            value = headers['legacy_version'] or '2.1'
        major, minor = value.split('.')
        return int(major), int(minor)

    @staticmethod
    def _reply(start_response, status, body):
        data = json.dumps(body).encode()
        start_response('%d X' % status,
                       [('Content-Type', 'application/json'),
                        ('Content-Length', str(len(data)))])
        return [data]

    def versions_asked(self):
        return collections.Counter(r['version'] or r['legacy_version']
                                   for r in self.requests)


def configure_nova(service_user=False):
    """[nova] (and [service_user]) as an operator writes them, with
    keystoneauth's admin_token plugin (a fixed token and endpoint) in
    place of a Keystone."""
    groups = [('nova', ADMIN_TOKEN)]
    if service_user:
        groups.append(('service_user', SERVICE_TOKEN))
    for group, token in groups:
        CONF.register_opts(
            ks_loading.get_auth_plugin_conf_options('admin_token'),
            group=group)
        CONF.set_override('auth_type', 'admin_token', group)
        CONF.set_override('endpoint', ENDPOINT, group)
        CONF.set_override('token', token, group)
    if service_user:
        CONF.set_override('send_service_user_token', True, 'service_user')
    nova_api.reset()


def unconfigure_nova():
    for group in ('nova', 'service_user'):
        for name in ('auth_type', 'endpoint', 'token'):
            try:
                CONF.clear_override(name, group)
            except Exception:
                pass
    CONF.clear_override('send_service_user_token', 'service_user')
    nova_api.reset()


@pytest.fixture
def nova():
    fake = FakeNova()
    intercept = interceptor.RequestsInterceptor(lambda: fake,
                                                url=ENDPOINT)
    intercept.install_intercept()
    try:
        yield fake
    finally:
        intercept.uninstall_intercept()


@pytest.fixture
def nova_conf():
    CONF([], project='composable', default_config_files=[],
         default_config_dirs=[])
    configure_nova()
    yield
    unconfigure_nova()


def new_lease(harness, **values):
    """A lease made through the conductor API; its uuid (the API may
    answer with the lease's document)."""
    made = harness.create(**values)
    return made['uuid'] if isinstance(made, dict) else made


def user_context(project=h_mod.PROJECT, token=USER_TOKEN):
    return ctx_mod.RequestContext(user_id='u1', project_id=project,
                                  roles=['member'], auth_token=token)


# ---------------------------------------------------------------- lookups

def test_not_configured_without_auth_type():
    CONF([], project='composable', default_config_files=[],
         default_config_dirs=[])
    assert not nova_api.configured()
    configure_nova()
    try:
        assert nova_api.configured()
    finally:
        unconfigure_nova()


def test_server_host_state_project(nova, nova_conf):
    nova.add(SERVER, 'p1', 'compute-1', vm_state='active')
    ctx = ctx_mod.get_admin_context()
    server = nova_api.get_server(ctx, SERVER)
    assert server.host == 'compute-1'
    assert server.project_id == 'p1'
    assert server.vm_state == 'active'
    assert nova_api.server_host(ctx, SERVER) == 'compute-1'
    assert nova_api.server_project(ctx, SERVER) == 'p1'
    assert nova_api.server_state(ctx, SERVER) == ('active', None)
    # novaclient at the base microversion, with composable's own token.
    assert {r['token'] for r in nova.requests} == {ADMIN_TOKEN}
    assert set(nova.versions_asked()) == {'2.1'}


def test_unknown_server_is_not_found(nova, nova_conf):
    with pytest.raises(exception.NotFound) as err:
        nova_api.get_server(ctx_mod.get_admin_context(), SERVER)
    assert SERVER in err.value.message


def test_nova_errors_are_service_unavailable(nova, nova_conf):
    nova.add(SERVER, 'p1', 'compute-1')
    nova.fail = 500
    with pytest.raises(exception.ServiceUnavailable):
        nova_api.get_server(ctx_mod.get_admin_context(), SERVER)
    nova.fail = None
    CONF.set_override('token', 'wrong', 'nova')
    nova_api.reset()
    with pytest.raises(exception.ServiceUnavailable) as err:
        nova_api.get_server(ctx_mod.get_admin_context(), SERVER)
    assert 'credentials' in err.value.message


def test_scheduler_hints_at_2_100(nova, nova_conf):
    nova.add(SERVER, 'p1', 'compute-1',
             hints={'composable_lease': ['lease-1']})
    hints = nova_api.scheduler_hints(ctx_mod.get_admin_context(), SERVER)
    assert hints == {'composable_lease': ['lease-1']}
    assert nova.versions_asked() == {'compute 2.100': 1}


def test_scheduler_hints_unknown_on_an_older_nova(nova, nova_conf):
    nova.add(SERVER, 'p1', 'compute-1', hints={'a': 'b'})
    nova.max_version = (2, 96)
    assert nova_api.scheduler_hints(ctx_mod.get_admin_context(),
                                    SERVER) is None
    nova.max_version = (2, 104)
    with pytest.raises(exception.NotFound):
        nova_api.scheduler_hints(ctx_mod.get_admin_context(), OTHER)


def test_user_token_with_service_token(nova):
    CONF([], project='composable', default_config_files=[],
         default_config_dirs=[])
    configure_nova(service_user=True)
    try:
        nova.add(SERVER, 'p1', 'compute-1')
        nova.add(OTHER, 'p2', 'compute-0')
        server = nova_api.get_server(user_context(), SERVER)
        assert server.host == 'compute-1'
        first, second = nova.requests
        # As the user, with composable's service token; then the
        # admin-only host with composable's own account.
        assert first['token'] == USER_TOKEN
        assert first['service_token'] == SERVICE_TOKEN
        assert second['token'] == ADMIN_TOKEN
        # Nova hides another project's server from the user.
        with pytest.raises(exception.NotFound):
            nova_api.get_server(user_context(), OTHER)
        assert nova.requests[-1]['token'] == USER_TOKEN
        # No user token: composable's account only.
        nova.requests.clear()
        nova_api.get_server(ctx_mod.get_admin_context(), OTHER)
        assert [r['token'] for r in nova.requests] == [ADMIN_TOKEN]
    finally:
        unconfigure_nova()


# ---------------------------------------------------------------- bind

@pytest.fixture
def nova_harness(harness, nova):
    configure_nova()
    yield harness
    unconfigure_nova()


def test_bind_to_a_server_finds_its_host(nova_harness, nova):
    h = nova_harness
    nova.add(SERVER, h_mod.PROJECT, 'compute-0')
    uuid = new_lease(h, memory_mb=1024)
    h.api.bind_lease(h_mod.user_context(), uuid, None, instance_uuid=SERVER)
    lease = h.wait(uuid, states.BOUND)
    assert lease.host.name == 'compute-0'
    assert lease.instance_uuid == SERVER


def test_bind_to_a_server_of_another_project_is_not_found(
        nova_harness, nova):
    h = nova_harness
    nova.add(OTHER, 'p2', 'compute-0')
    uuid = new_lease(h, memory_mb=1024)
    with pytest.raises(exception.NotFound) as err:
        h.api.bind_lease(h_mod.user_context(), uuid, None,
                         instance_uuid=OTHER)
    assert OTHER in err.value.message
    # Not with a host named either.
    with pytest.raises(exception.NotFound):
        h.api.bind_lease(h_mod.user_context(), uuid,
                         h.hosts['compute-0'].uuid, instance_uuid=OTHER)
    assert h.lease(uuid).status == states.RESERVED


def test_bind_refusals(nova_harness, nova):
    h = nova_harness
    nova.add(SERVER, h_mod.PROJECT, 'compute-0')
    nova.add(HOSTLESS, h_mod.PROJECT, None, vm_state='shelved_offloaded')
    nova.add(OTHER, h_mod.PROJECT, 'compute-9')
    uuid = new_lease(h, memory_mb=1024)
    ctx = h_mod.user_context()
    with pytest.raises(exception.Conflict) as err:
        h.api.bind_lease(ctx, uuid, None, instance_uuid=HOSTLESS)
    assert 'shelved_offloaded' in err.value.message
    with pytest.raises(exception.Conflict) as err:
        h.api.bind_lease(ctx, uuid, h.hosts['compute-1'].uuid,
                         instance_uuid=SERVER)
    assert 'runs on host compute-0, not on compute-1' in err.value.message
    with pytest.raises(exception.Invalid) as err:
        h.api.bind_lease(ctx, uuid, None, instance_uuid=OTHER)
    assert 'compute-9' in err.value.message
    assert h.lease(uuid).status == states.RESERVED
    # The server's own host, named: fine.
    h.api.bind_lease(ctx, uuid, h.hosts['compute-0'].uuid,
                     instance_uuid=SERVER)
    assert h.wait(uuid, states.BOUND).host.name == 'compute-0'


def test_bind_without_host_and_without_nova_is_invalid(harness):
    uuid = new_lease(harness, memory_mb=1024)
    with pytest.raises(exception.Invalid) as err:
        harness.api.bind_lease(h_mod.user_context(), uuid, None,
                               instance_uuid=SERVER)
    assert 'give the host' in err.value.message
