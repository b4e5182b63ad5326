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

"""The HTTP plumbing: microversions, error bodies, content types, routing,
authentication wrappers."""

import json
import threading
import urllib.error
import urllib.request

from keystoneauth1 import exceptions as ks_exceptions
from keystonemiddleware.auth_token import _identity as ksm_identity
import pytest
import webob

from composable.api import app as api_app
from composable.api import errors
from composable.api import microversion
from composable.common import exception
from composable.common import wsgi_server
from tests.unit.api import base

HEADER = 'OpenStack-API-Version'


def _assert_error(resp, status, code=None):
    assert resp.status == status, resp
    assert resp.headers['Content-Type'].startswith('application/json')
    body = resp.json
    assert list(body) == ['errors']
    error = body['errors'][0]
    assert set(error) == {'status', 'code', 'title', 'detail',
                          'request_id'}
    assert error['status'] == status
    assert error['request_id'].startswith('req-')
    assert error['request_id'] == resp.headers['X-OpenStack-Request-Id']
    if code:
        assert error['code'] == code
    return error


@pytest.mark.parametrize('value, status, version', [
    (None, 200, '1.0'),
    ('composable 1.0', 200, '1.0'),
    ('composable latest', 200, microversion.MAX_VERSION_STRING),
    ('compute 2.90, composable 1.0', 200, '1.0'),
    ('compute 2.90', 200, '1.0'),
])
def test_microversion_accepted(client, value, status, version):
    headers = {HEADER: value} if value else {}
    resp = client.get('/v1/fabrics', headers=headers)
    assert resp.status == status
    assert resp.headers[HEADER] == 'composable %s' % version
    assert HEADER in resp.headers['Vary']


def test_microversion_out_of_range(client):
    resp = client.get('/v1/fabrics', headers={HEADER: 'composable 1.99'})
    error = _assert_error(resp, 406, 'composable.microversion.unsupported')
    assert '1.99' in error['detail'] and '1.0' in error['detail']
    resp = client.get('/v1/fabrics', headers={HEADER: 'composable 0.9'})
    _assert_error(resp, 406)


@pytest.mark.parametrize('value', ['composable garbage', 'composable 1',
                                   'composable 1.x', 'composable 1.0.1'])
def test_microversion_malformed(client, value):
    resp = client.get('/v1/fabrics', headers={HEADER: value})
    _assert_error(resp, 400, 'composable.microversion.invalid')


def test_select_by_version():
    choices = {'1.0': 'a', '1.3': 'b'}
    v = microversion.parse_version_string
    assert microversion.select(v('1.0'), choices) == 'a'
    assert microversion.select(v('1.2'), choices) == 'a'
    assert microversion.select(v('1.3'), choices) == 'b'
    assert microversion.select(v('1.9'), choices) == 'b'
    with pytest.raises(KeyError):
        microversion.select(v('0.9'), choices)


def test_unknown_url(client):
    error = _assert_error(client.get('/v1/nothing'), 404,
                          'composable.not_found')
    assert '/v1/nothing' in error['detail']
    _assert_error(client.get('/v2/'), 404)
    _assert_error(client.get('/v1/leases/x/y/z'), 404)


def test_method_not_allowed(client):
    resp = client.request('PUT', '/v1/fabrics/x', body={})
    _assert_error(resp, 405, 'composable.method_not_allowed')
    assert resp.headers['Allow'] == 'DELETE, GET, PATCH'
    resp = client.request('DELETE', '/v1/leases')
    _assert_error(resp, 405)
    assert resp.headers['Allow'] == 'GET, POST'


def test_not_acceptable(client):
    resp = client.get('/v1/fabrics', headers={'Accept': 'text/html'})
    _assert_error(resp, 406, 'composable.not_acceptable')
    resp = client.get('/v1/fabrics',
                      headers={'Accept': 'text/html,*/*;q=0.8'})
    assert resp.status == 200


def test_unsupported_media_type(client):
    resp = client.post('/v1/fabrics', raw=b'name=x',
                       content_type='application/x-www-form-urlencoded')
    _assert_error(resp, 415, 'composable.unsupported_media_type')


@pytest.mark.parametrize('method, path', [
    ('DELETE', '/v1/hosts/0'),
    ('POST', '/v1/leases'),
    ('PATCH', '/v1/fabrics/nope'),
    ('POST', '/v1/leases/nope/bind'),
])
@pytest.mark.parametrize('content_type', [
    'multipart/form-data',
    'multipart/form-data; boundary=x',
    'application/x-www-form-urlencoded',
])
def test_form_bodies_are_refused_before_routing(client, method, path,
                                                content_type):
    # A multipart body without a boundary made WebOb fail while Pecan
    # read the request's parameters for routing: a 500 and a traceback.
    req_headers = {'Content-Type': content_type}
    resp = client.request(method, path, headers=req_headers)
    error = _assert_error(resp, 415, 'composable.unsupported_media_type')
    assert content_type.split(';')[0] in error['detail']
    assert 'application/json' in error['detail']
    resp = client.request(method, path, raw=b'--x\r\n\r\n',
                          content_type=content_type)
    _assert_error(resp, 415, 'composable.unsupported_media_type')


def test_a_form_content_type_on_a_get_is_ignored(client):
    resp = client.get('/v1/fabrics',
                      headers={'Content-Type': 'multipart/form-data'})
    assert resp.status == 200


def test_malformed_json(client):
    resp = client.post('/v1/fabrics', raw=b'{"name": ')
    error = _assert_error(resp, 400, 'composable.invalid')
    assert error['detail'].startswith('Malformed JSON in request body: ')
    assert 'line 1 column 10' in error['detail']


def test_body_must_be_object(client):
    resp = client.post('/v1/fabrics', body=['x'])
    error = _assert_error(resp, 400)
    assert 'is not of type' in error['detail']


def test_missing_body(client):
    error = _assert_error(client.post('/v1/fabrics'), 400)
    assert 'JSON body' in error['detail']


def test_body_on_delete_refused(client, inventory):
    resp = client.request('DELETE', '/v1/devices/%s' %
                          inventory['devices'][0]['uuid'], body={'x': 1})
    _assert_error(resp, 400)


def test_query_on_show_refused(client, inventory):
    _assert_error(client.get('/v1/fabrics/fab1?verbose=1'), 400)


def test_not_found_body(client):
    error = _assert_error(
        client.get('/v1/leases/5e1ba2b5-8f3e-4b4c-9a4a-0d7d5f3c6e11'), 404,
        'composable.lease.not_found')
    assert error['title'] == 'Not Found'
    assert error['detail'] == (
        'Lease 5e1ba2b5-8f3e-4b4c-9a4a-0d7d5f3c6e11 could not be found.')


def test_unexpected_error_is_generic(client, monkeypatch, caplog):
    from composable.db import api as db_api

    def boom(*args, **kwargs):
        raise RuntimeError('password=hunter2 leaked')

    monkeypatch.setattr(db_api, 'fabric_list', boom)
    resp = client.get('/v1/fabrics')
    error = _assert_error(resp, 500, 'composable.error')
    assert 'hunter2' not in resp.text
    assert error['detail'] == errors.GENERIC_500
    assert 'Traceback' in caplog.text or 'RuntimeError' in caplog.text


def test_remote_exception_uses_message_only(api_env):
    request = webob.Request.blank('/')
    request.environ['openstack.request_id'] = 'req-1'

    class Remote(exception.LeaseLocked):
        def __str__(self):
            return 'message\nTraceback (most recent call last): ...'

    resp = errors.to_response(request, Remote(lease='l1'))
    body = json.loads(resp.text)
    assert resp.status_int == 409
    assert 'Traceback' not in body['errors'][0]['detail']
    assert body['errors'][0]['code'] == 'composable.lease.locked'


def test_unsafe_500_hidden(api_env):
    request = webob.Request.blank('/')
    resp = errors.to_response(request, exception.ComposableException(
        'db password is x'))
    assert 'password' not in resp.text
    assert resp.status_int == 500


def test_noauth_defaults(app):
    # No headers at all: admin of project "demo".
    resp = webob.Request.blank('/v1/fabrics').get_response(app)
    assert resp.status_int == 200


def test_request_id_header(client):
    resp = client.get('/v1/fabrics')
    assert resp.headers['X-OpenStack-Request-Id'].startswith('req-')


def test_keystone_wraps_all_but_versions(api_env):
    api_app.register_auth_opts(api_env)
    api_env.set_override('www_authenticate_uri', 'http://keystone.example',
                         'keystone_authtoken')
    try:
        _check_keystone_wrapping(api_app.setup_app('keystone'))
    finally:
        api_env.clear_override('www_authenticate_uri', 'keystone_authtoken')


def _check_keystone_wrapping(app):
    assert isinstance(app.application.application,
                      api_app.AuthTokenExceptVersions)
    # Version discovery needs no token.
    resp = webob.Request.blank('/').get_response(app)
    assert resp.status_int == 200
    resp = webob.Request.blank('/v1/').get_response(app)
    assert resp.status_int == 200
    # Anything else goes through auth_token, which refuses a request
    # without a token (and never reaches the database).
    resp = webob.Request.blank('/v1/fabrics').get_response(app)
    assert resp.status_int == 401


def _auth_error(resp, status, code):
    """The API-SIG error of a webob response refused by auth_token."""
    assert resp.status_int == status, resp.text
    assert resp.content_type == 'application/json'
    error, = resp.json['errors']
    assert error['status'] == status
    assert error['code'] == code
    assert error['request_id'] == resp.headers['X-OpenStack-Request-Id']
    return error


def test_no_token_is_an_api_error_with_where_to_authenticate(api_env):
    api_app.register_auth_opts(api_env)
    api_env.set_override('www_authenticate_uri', 'http://keystone.example',
                         'keystone_authtoken')
    try:
        app = api_app.setup_app('keystone')
        resp = webob.Request.blank('/v1/leases').get_response(app)
    finally:
        api_env.clear_override('www_authenticate_uri', 'keystone_authtoken')
    error = _auth_error(resp, 401, 'composable.unauthorized')
    assert 'Get a new token from Keystone' in error['detail']
    assert 'http://keystone.example' in resp.headers['WWW-Authenticate']


def test_unreachable_keystone_is_503_with_what_to_do(api_env, monkeypatch):
    # Keystone down, as keystonemiddleware meets it when it validates a
    # token (tests/functional/keystone stops a real one).
    def refused(self, token, **kwargs):
        raise ks_exceptions.ConnectFailure('Unable to establish connection '
                                           'to http://127.0.0.1:1/v3')
    monkeypatch.setattr(ksm_identity.IdentityServer, 'verify_token',
                        refused)
    api_app.register_auth_opts(api_env)
    api_env.set_override('www_authenticate_uri', 'http://keystone.example',
                         'keystone_authtoken')
    try:
        app = api_app.setup_app('keystone')
        req = webob.Request.blank('/v1/leases', headers={
            'X-Auth-Token': 'gAAAAA-a-token-nobody-can-check'})
        resp = req.get_response(app)
    finally:
        api_env.clear_override('www_authenticate_uri', 'keystone_authtoken')
    error = _auth_error(resp, 503, 'composable.identity.unavailable')
    assert 'Keystone' in error['detail']
    assert 'Traceback' not in resp.text


def test_keystone_context(api_env, monkeypatch):
    # Behind auth_token the context comes from its headers.
    app = api_app.setup_app('keystone')
    inner = app.application.application.public_app
    req = webob.Request.blank('/v1/pools', headers={
        'X-Identity-Status': 'Confirmed', 'X-User-Id': 'u1',
        'X-Project-Id': 'p1', 'X-Roles': 'reader'})
    resp = req.get_response(inner)
    assert resp.status_int == 200
    req = webob.Request.blank('/v1/fabrics', headers={
        'X-Identity-Status': 'Confirmed', 'X-User-Id': 'u1',
        'X-Project-Id': 'p1', 'X-Roles': 'reader'})
    assert req.get_response(inner).status_int == 403


def test_proxy_headers(api_env):
    api_env.set_override('enable_proxy_headers_parsing', True,
                         'oslo_middleware')
    try:
        app = api_app.setup_app('noauth')
        req = webob.Request.blank('/', headers={
            'X-Forwarded-Proto': 'https',
            'X-Forwarded-Host': 'api.example.com'})
        body = json.loads(req.get_response(app).text)
        assert body['versions'][0]['links'][0]['href'] == (
            'https://api.example.com/v1/')
    finally:
        api_env.clear_override('enable_proxy_headers_parsing',
                               'oslo_middleware')


def test_public_endpoint(client, api_env):
    api_env.set_override('public_endpoint', 'https://c.example/api/', 'api')
    try:
        body = client.get('/').json
        assert body['versions'][0]['links'][0]['href'] == (
            'https://c.example/api/v1/')
    finally:
        api_env.clear_override('public_endpoint', 'api')


def test_threaded_server(app):
    server = wsgi_server.make_server(app, '127.0.0.1', 0, threads=2)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        port = server.server_port
        url = 'http://127.0.0.1:%d/v1/pools' % port
        results = []

        def fetch():
            with urllib.request.urlopen(url, timeout=10) as resp:
                results.append(resp.status)

        fetchers = [threading.Thread(target=fetch) for _ in range(6)]
        for fetcher in fetchers:
            fetcher.start()
        for fetcher in fetchers:
            fetcher.join()
        assert results == [200] * 6
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(
                'http://127.0.0.1:%d/v1/nothing' % port, timeout=10)
        assert info.value.code == 404
        body = json.loads(info.value.read())
        assert body['errors'][0]['status'] == 404
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_personas_are_complete():
    assert set(base.PERSONAS) >= {'admin', 'member', 'reader', 'service'}
