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

import json

from keystoneauth1 import session as ks_session
from osc_lib import exceptions
import pytest
import requests

from composable.cli import client as cli_client
from tests.unit.cli import fakes


def _response(status, body=None, text=None, headers=None):
    response = requests.Response()
    response.status_code = status
    response.reason = 'Reason'
    response.headers.update(headers or {})
    if body is not None:
        response._content = json.dumps(body).encode()
        response.headers['Content-Type'] = 'application/json'
    else:
        response._content = (text or '').encode()
    return response


def test_error_rendering_from_api_sig_body():
    body = fakes.error_body(404, 'Not Found', 'Lease foo could not be found.',
                            code='composable.lease.not_found')
    exc = cli_client.error_from_response(_response(404, body))
    assert isinstance(exc, exceptions.NotFound)
    assert exc.code == 404
    assert exc.details == 'composable.lease.not_found'
    assert str(exc) == ('Lease foo could not be found. '
                        '(Request-ID: req-00000000-test) (HTTP 404)')


@pytest.mark.parametrize('status, cls', [
    (400, exceptions.BadRequest),
    (401, exceptions.Unauthorized),
    (403, exceptions.Forbidden),
    (409, exceptions.Conflict),
    (406, exceptions.ClientException),
    (500, exceptions.ClientException),
])
def test_error_classes(status, cls):
    exc = cli_client.error_from_response(
        _response(status, fakes.error_body(status, 'T', 'the detail')))
    assert type(exc) is cls
    assert 'the detail' in str(exc)
    assert '(HTTP %d)' % status in str(exc)


def test_error_rendering_joins_several_errors():
    body = {'errors': [{'status': 400, 'detail': 'first'},
                       {'status': 400, 'title': 'second'}]}
    exc = cli_client.error_from_response(_response(400, body))
    assert exc.message == 'first; second'


def test_error_rendering_without_api_sig_body():
    exc = cli_client.error_from_response(
        _response(502, text='<html>Bad Gateway</html>'))
    assert exc.message == '<html>Bad Gateway</html>'
    exc = cli_client.error_from_response(_response(503))
    assert exc.message == 'Reason'
    exc = cli_client.error_from_response(
        _response(401, {'error': {'code': 401, 'title': 'Unauthorized',
                                  'message': 'The request you have made '
                                             'requires authentication.'}}))
    assert exc.message.startswith('The request you have made')


@pytest.mark.parametrize('endpoint', [
    'http://h:6590', 'http://h:6590/', 'http://h:6590/v1',
    'http://h:6590/v1/'])
def test_normalize_endpoint(endpoint):
    assert cli_client.normalize_endpoint(endpoint) == 'http://h:6590/v1'


def test_normalize_endpoint_missing():
    with pytest.raises(exceptions.CommandError):
        cli_client.normalize_endpoint(None)


@pytest.fixture
def api():
    scripted = fakes.ScriptedAPI()
    server = fakes.WSGIServer(scripted).start()
    scripted.url = server.url
    yield scripted
    server.stop()


def _client(api, version='1.0'):
    return cli_client.Client(ks_session.Session(), api.url,
                             api_version=version)


def test_headers_and_body(api):
    api.add('POST', '/v1/pools', lambda req: (201, dict(req.body,
                                                        uuid='u1')))
    pool = _client(api).pools.create(name='p', kind='gpu', fabric='f')
    assert pool == {'name': 'p', 'kind': 'gpu', 'fabric': 'f', 'uuid': 'u1'}
    request = api.requests[-1]
    assert request.headers['openstack-api-version'] == 'composable 1.0'
    assert request.headers['content-type'] == 'application/json'
    assert request.headers['accept'] == 'application/json'


def test_api_version_header(api):
    api.add('GET', '/v1/pools/p', (200, {'uuid': 'u'}))
    _client(api, version='1.7').pools.get('p')
    assert api.requests[-1].headers['openstack-api-version'] == (
        'composable 1.7')


def test_identifiers_are_quoted(api):
    api.add('GET', '/v1/leases/a b/c', (200, {'uuid': 'u'}))
    _client(api).leases.get('a b/c')
    # PATH_INFO is decoded by the server; the client sent %20 and %2F.
    assert api.requests[-1].path == '/v1/leases/a b/c'


def test_delete_returns_none_on_204(api):
    api.add('DELETE', '/v1/fabrics/f', (204, None))
    assert _client(api).fabrics.delete('f') is None


def test_error_raised_with_detail(api):
    api.add('GET', '/v1/leases/nope', (404, fakes.error_body(
        404, 'Not Found', 'Lease nope could not be found.')))
    with pytest.raises(exceptions.NotFound) as info:
        _client(api).leases.get('nope')
    assert 'Lease nope could not be found.' in str(info.value)


def test_connection_refused_is_a_command_error():
    server = fakes.WSGIServer(fakes.ScriptedAPI())
    url = server.url
    server.httpd.server_close()
    client = cli_client.Client(ks_session.Session(), url)
    with pytest.raises(exceptions.CommandError) as info:
        client.pools.list()
    assert 'Unable to reach the composable API' in str(info.value)


def _paged(items, key, page_size=2, base='http://elsewhere.example/v1'):
    """A handler serving ``items`` in pages with absolute next links."""
    def handler(request):
        limit = int(request.query.get('limit', page_size))
        limit = min(limit, page_size)
        start = 0
        marker = request.query.get('marker')
        if marker:
            start = [i['uuid'] for i in items].index(marker) + 1
        page = items[start:start + limit]
        body = {key: page}
        if len(page) == limit:
            body['links'] = [{'rel': 'next',
                              'href': '%s/%s?limit=%d&marker=%s' % (
                                  base, key, limit, page[-1]['uuid'])}]
        return 200, body
    return handler


def test_list_follows_next_links(api):
    items = [{'uuid': 'u%d' % i} for i in range(5)]
    api.add('GET', '/v1/leases', _paged(items, 'leases'))
    result = _client(api).leases.list(status='reserved')
    assert result == items
    # 3 pages; the last one is short and carries no next link.
    assert len(api.requests) == 3
    assert [r.query.get('marker') for r in api.requests] == [
        None, 'u1', 'u3']
    # Filters are kept on every page.
    assert all(r.query['status'] == 'reserved' for r in api.requests)


def test_list_stops_after_last_full_page(api):
    items = [{'uuid': 'u%d' % i} for i in range(4)]
    api.add('GET', '/v1/pools', _paged(items, 'pools'))
    assert _client(api).pools.list() == items
    # The page after u3 is empty: it ends the listing.
    assert len(api.requests) == 3


def test_list_with_limit_fetches_only_what_is_needed(api):
    items = [{'uuid': 'u%d' % i} for i in range(10)]
    api.add('GET', '/v1/devices', _paged(items, 'devices'))
    assert _client(api).devices.list(limit=3) == items[:3]
    assert [r.query.get('limit') for r in api.requests] == ['3', '1']


def test_list_with_marker(api):
    items = [{'uuid': 'u%d' % i} for i in range(3)]
    api.add('GET', '/v1/hosts', _paged(items, 'hosts', page_size=10))
    assert _client(api).hosts.list(marker='u0') == items[1:]


def test_list_does_not_loop_on_a_repeated_marker(api):
    api.add('GET', '/v1/fabrics', (200, {
        'fabrics': [{'uuid': 'a'}],
        'links': [{'rel': 'next', 'href': '/v1/fabrics?marker=a'}]}))
    assert _client(api).fabrics.list() == [{'uuid': 'a'}, {'uuid': 'a'}]
    assert len(api.requests) == 2


def test_lease_helpers(api):
    api.add('POST', '/v1/leases/l1/bind',
            lambda req: (202, {'uuid': 'l1', 'status': 'binding',
                               'sent': req.body}))
    api.add('POST', '/v1/leases/l1/unbind',
            lambda req: (202, {'uuid': 'l1', 'status': 'unbinding',
                               'sent': req.body}))
    api.add('GET', '/v1/leases/l1/actions',
            (200, {'actions': [{'action': 'create'}]}))
    client = _client(api)
    assert client.leases.bind('l1', host='h1')['sent'] == {'host': 'h1'}
    assert client.leases.bind('l1', server='s', attach_mode='guest')[
        'sent'] == {'server': 's', 'attach_mode': 'guest'}
    assert client.leases.unbind('l1')['sent'] == {}
    assert client.leases.actions('l1') == [{'action': 'create'}]


def test_root_version_document(api):
    versions = {'versions': [{'id': 'v1', 'status': 'CURRENT',
                              'min_version': '1.0', 'max_version': '1.0'}]}
    api.add('GET', '/', (200, versions))
    assert _client(api).root() == versions


def test_lease_show_asks_for_elastic_and_falls_back_on_old_servers(api):
    answers = []

    def show(req):
        answers.append(req.headers['openstack-api-version'])
        if req.headers['openstack-api-version'] == 'composable 1.2':
            return 406, {'errors': [{'detail': 'Version 1.2 is not '
                                               'supported by the API.'}]}
        return 200, {'uuid': 'l1'}
    api.add('GET', '/v1/leases/l1', show)
    assert _client(api).leases.get('l1') == {'uuid': 'l1'}
    assert answers == ['composable 1.2', 'composable 1.0']
    # Asked for a newer version, the client keeps it.
    api.add('GET', '/v1/leases/l2', (200, {'uuid': 'l2'}))
    _client(api, version='1.7').leases.get('l2')
    assert api.requests[-1].headers['openstack-api-version'] == (
        'composable 1.7')


def test_lease_usage_follows_pages_at_1_1(api):
    pages = {None: {'usage': [{'id': 1}, {'id': 2}], 'links': [
        {'rel': 'next', 'href': 'http://x/v1/leases/l1/usage?marker=2'}]},
        '2': {'usage': [{'id': 3}]}}
    api.add('GET', '/v1/leases/l1/usage',
            lambda req: (200, pages[req.query.get('marker')]))
    assert [s['id'] for s in _client(api).leases.usage('l1')] == [1, 2, 3]
    assert api.requests[-1].headers['openstack-api-version'] == (
        'composable 1.1')
    assert api.requests[-1].query == {'marker': '2'}
    assert _client(api).leases.usage('l1', limit=1) == [{'id': 1}]
    assert api.requests[-1].query == {'limit': '1'}


def test_virtio_mem_mode_asks_for_1_6(api):
    api.add('POST', '/v1/leases', (201, {'uuid': 'l1'}))
    api.add('POST', '/v1/leases/l1/bind', (202, {'uuid': 'l1'}))
    client = _client(api)
    client.leases.create(memory_mb=256, pools=['cxl'],
                         attach_mode='virtio-mem')
    assert api.requests[-1].headers['openstack-api-version'] == (
        'composable 1.6')
    client.leases.bind('l1', server='s1', attach_mode='virtio-mem')
    assert api.requests[-1].headers['openstack-api-version'] == (
        'composable 1.6')
    # Other modes keep the configured version.
    client.leases.bind('l1', server='s1', attach_mode='guest')
    assert api.requests[-1].headers['openstack-api-version'] == (
        'composable 1.0')
    # An elastic virtio-mem lease (of a CXL pool) needs 1.7.
    client.leases.create(memory_mb=256, pools=['cxl'],
                         attach_mode='virtio-mem',
                         elastic={'min_mb': 256, 'max_mb': 1024})
    assert api.requests[-1].headers['openstack-api-version'] == (
        'composable 1.7')
