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

"""Bad input: every one is refused with 400 (or 413/415) and a message a
user can act on, never a 500, never a traceback in the log, and never an
echo of more than a short prefix of what was sent."""

import json
import logging

import pytest

from composable.api import validation

V12 = {'OpenStack-API-Version': 'composable 1.2'}
V13 = {'OpenStack-API-Version': 'composable 1.3'}


@pytest.fixture
def no_tracebacks(caplog):
    """Fails the test when anything logged an error or a traceback."""
    caplog.set_level(logging.WARNING)
    yield caplog
    bad = [r for r in caplog.records
           if r.levelno >= logging.ERROR or r.exc_info]
    assert not bad, [r.getMessage() for r in bad]


def _refused(resp, status=400, *words):
    assert resp.status == status, resp
    error = resp.error
    assert error['status'] == status
    for word in words:
        assert word in error['detail'], (word, error['detail'])
    return error['detail']


@pytest.mark.parametrize('path, body, headers, field', [
    ('/v1/leases', {'memory_mb': 1024.0}, None, 'memory_mb'),
    ('/v1/leases', {'device_count': 1.0}, None, 'device_count'),
    ('/v1/leases', {'memory_mb': 1024, 'elastic': {
        'min_mb': 1024.0, 'max_mb': 2048, 'observation_window': 60,
        'prediction_window': 60}}, V12, 'elastic/min_mb'),
    ('/v1/leases', {'memory_mb': 1e3}, None, 'memory_mb'),
    ('/v1/pools', {'name': 'vfs', 'kind': 'pci', 'fabric': 'fab1',
                   'device_class': 'NIC', 'sriov': {
                       'host': 'compute-1', 'pf_address': '0000:41:00.0',
                       'vf_count': 2.0}}, V13, 'sriov/vf_count'),
    ('/v1/pools', {'name': 'm2', 'kind': 'memory', 'fabric': 'fab1',
                   'step_size': 1024.0}, None, 'step_size'),
])
def test_integral_floats_are_not_integers(client, inventory, conductor,
                                          no_tracebacks,
                                          path, body, headers, field):
    detail = _refused(client.post(path, body, headers=headers), 400,
                      "'%s'" % field, 'is not an integer')
    assert 'whole number' in detail


def test_number_fields_refuse_nan_and_infinity(client, inventory,
                                               no_tracebacks):
    for constant in ('NaN', 'Infinity', '-Infinity'):
        raw = ('{"memory_mb": 1024, "elastic": {"min_mb": 1024, '
               '"max_mb": 2048, "observation_window": 60, '
               '"prediction_window": 60, "headroom": %s}}' % constant)
        _refused(client.post('/v1/leases', raw=raw.encode(), headers=V12),
                 400, constant, 'not a JSON number')
    assert client.get('/v1/leases').json['leases'] == []


def test_lone_surrogate_is_refused(client, inventory, no_tracebacks):
    raw = b'{"name": "\\ud800", "memory_mb": 1024}'
    _refused(client.post('/v1/leases', raw=raw), 400, "'name'",
             'surrogate')
    raw = b'{"name": "p\\udfffx", "kind": "gpu", "fabric": "fab1"}'
    _refused(client.post('/v1/pools', raw=raw), 400, "'name'", 'surrogate')
    raw = b'{"name": "ok", "driver": "fake", "driver_info": {"\\ud800": 1}}'
    _refused(client.post('/v1/fabrics', raw=raw), 400, 'surrogate')
    assert client.get('/v1/leases').json['leases'] == []


def test_invalid_utf8_is_refused(client, inventory, conductor,
                                 no_tracebacks):
    raw = b'{"name": "caf\xe9", "memory_mb": 1024}'
    detail = _refused(client.post('/v1/leases', raw=raw), 400,
                      'not valid UTF-8')
    assert '0xe9' in detail and 'offset 13' in detail
    raw = '{"name": "café", "memory_mb": 1024}'.encode('latin-1')
    _refused(client.post('/v1/leases', raw=raw,
                         content_type='application/json; charset=latin-1'),
             415, 'latin-1', 'UTF-8')
    assert client.get('/v1/leases').json['leases'] == []
    resp = client.post('/v1/leases', raw=b'{"name": "x", "memory_mb": 1024}',
                       content_type='application/json; charset=UTF-8')
    assert resp.status == 201, resp


def test_deep_nesting_is_refused(client, no_tracebacks):
    raw = b'{"name": "f", "driver": "fake", "driver_info": {"a": ' + \
        b'[' * 5000 + b']' * 5000 + b'}}'
    _refused(client.post('/v1/fabrics', raw=raw), 400, 'nests deeper')
    raw = b'[' * 100000 + b']' * 100000
    _refused(client.post('/v1/fabrics', raw=raw), 400)


@pytest.mark.parametrize('name', [
    'a/b', '   ', '', 'a\u0000b', 'a\nb', 'a\n', ' lead', 'trail ', '\t',
    'a\u2028b', 'bell\u0007'])
def test_names_that_cannot_be_looked_up_are_refused(client, inventory,
                                                    conductor, no_tracebacks,
                                                    name):
    for path, body in (
            ('/v1/leases', {'name': name, 'memory_mb': 1024}),
            ('/v1/pools', {'name': name, 'kind': 'gpu', 'fabric': 'fab1'}),
            ('/v1/fabrics', {'name': name, 'driver': 'fake'})):
        resp = client.post(path, body)
        assert resp.status == 400, (path, resp)
        assert "'name'" in resp.error['detail']
        if name:
            assert 'not a usable name' in resp.error['detail']
    lease = client.post('/v1/leases', {'name': 'fine', 'memory_mb': 1024})
    assert lease.status == 201, lease
    _refused(client.patch('/v1/leases/fine', {'name': name}), 400, "'name'")
    assert client.get('/v1/leases/fine').status == 200


@pytest.mark.parametrize('name', ['my lease', 'GPU #1', 'é-ü', 'a.b_c-1'])
def test_usual_names_still_work(client, inventory, name):
    resp = client.post('/v1/pools', {'name': name, 'kind': 'gpu',
                                     'fabric': 'fab1'})
    assert resp.status == 201, resp
    from urllib import parse
    assert client.get('/v1/pools/%s' % parse.quote(name)).status == 200


def test_errors_echo_only_a_prefix(client, inventory, no_tracebacks):
    long_name = 'n' * 100000
    resp = client.post('/v1/leases', {'name': long_name, 'memory_mb': 1})
    detail = _refused(resp, 400, "'name'", 'more characters')
    assert len(resp.text) < 1000, len(resp.text)
    assert 'n' * (validation.SHOWN_CHARS + 1) not in detail
    resp = client.post('/v1/leases', {'x' * 100000: 1, 'memory_mb': 1})
    _refused(resp, 400, 'unknown field')
    assert len(resp.text) < 1000, len(resp.text)
    resp = client.post('/v1/leases', {'memory_mb': 1,
                                      'pools': ['p'] * 5000})
    _refused(resp, 400, "'pools'")
    assert len(resp.text) < 1000, len(resp.text)
    resp = client.post('/v1/leases', raw=b'{"memory_mb": ' + b'1' * 50000)
    _refused(resp, 400, 'Malformed JSON')
    assert len(resp.text) < 1000, len(resp.text)


def test_messages_name_the_field_and_value(client, inventory, conductor):
    detail = _refused(client.post('/v1/leases', {'memory_mb': 1.5}), 400)
    assert detail == ("Invalid input for field 'memory_mb': 1.5 is not an "
                      "integer; give a whole number without a decimal "
                      "point or exponent")
    detail = _refused(client.post('/v1/leases', {'memory_mb': 'x'}), 400)
    assert detail == ("Invalid input for field 'memory_mb': 'x' is not of "
                      "type 'integer'")
    assert json.loads(client.post('/v1/leases', {'memory_mb': 1024}).text)[
        'memory_mb'] == 1024


def _too_large(resp, limit):
    detail = _refused(resp, 413, str(limit), 'max_request_body_size')
    assert resp.error['code'] == 'composable.too_large'
    assert resp.error['request_id'].startswith('req-')
    assert len(resp.text) < 1000
    return detail


def test_request_body_size_limit(client, api_env, no_tracebacks):
    limit = api_env.api.max_request_body_size
    assert 128 * 1024 <= limit <= 1024 * 1024
    big = {'name': 'f', 'driver': 'fake',
           'driver_info': {'blob': 'x' * (50 * 1024 * 1024)}}
    _too_large(client.post('/v1/fabrics', big), limit)
    # Just over the limit: refused; a body that fits gets validated.
    raw = b'{"name": "f", "driver": "fake", "description": "%s"}'
    over = raw % (b'd' * (limit + 1 - len(raw % b'')))
    assert len(over) == limit + 1
    _too_large(client.post('/v1/fabrics', raw=over), limit)
    fits = raw % (b'd' * (limit - len(raw % b'')))
    _refused(client.post('/v1/fabrics', raw=fits), 400, "'description'",
             'is too long')
    assert client.get('/v1/fabrics').json['fabrics'] == []


def test_request_body_size_limit_is_configurable(client, api_env,
                                                 no_tracebacks):
    api_env.set_override('max_request_body_size', 2048, 'api')
    try:
        body = {'name': 'f', 'driver': 'fake',
                'driver_info': {'blob': 'x' * 2100}}
        _too_large(client.post('/v1/fabrics', body), 2048)
        body['driver_info']['blob'] = 'x' * 1900
        assert client.post('/v1/fabrics', body).status == 201
    finally:
        api_env.clear_override('max_request_body_size', 'api')


def _chunked(app, raw):
    import io
    import webob
    req = webob.Request.blank('/v1/fabrics', method='POST', headers={
        'X-Project-Id': 'admin-project', 'X-Roles': 'admin,member,reader',
        'Content-Type': 'application/json',
        'Transfer-Encoding': 'chunked'})
    req.environ.pop('CONTENT_LENGTH', None)
    req.environ['wsgi.input'] = io.BytesIO(raw)
    from tests.unit.api import base
    return base.Response(req.get_response(app))


def test_chunked_body_is_limited_too(app, api_env, client, no_tracebacks):
    limit = api_env.api.max_request_body_size
    raw = json.dumps({'name': 'f', 'driver': 'fake', 'driver_info': {
        'blob': 'x' * (2 * limit)}}).encode()
    _too_large(_chunked(app, raw), limit)
    resp = _chunked(app, json.dumps({'name': 'f', 'driver': 'fake'}).encode())
    assert resp.status == 201, resp
    assert client.get('/v1/fabrics/f').status == 200


@pytest.mark.parametrize('url', [
    '/v1/leases/%ff', '/v1/leases?name=%ff', '/v1/pools/%ED%A0%80',
    '/v1/leases?%ff=1', '/v1/leases/a%00b', '/v1/leases?name=a%00b',
    '/v1/pools/a%0Ab', '/v1/leases?name=a%0d'])
def test_urls_that_are_not_text_are_refused(client, no_tracebacks, url):
    resp = client.get(url)
    detail = _refused(resp, 400)
    assert 'UTF-8' in detail or 'control characters' in detail
    assert '\x00' not in resp.text


def test_urls_with_text_still_work(client, inventory):
    assert client.get('/v1/leases?name=caf%C3%A9').status == 200
    assert client.get('/v1/pools/caf%C3%A9').status == 404
    assert client.get('/v1/leases?name=a+b').status == 200


def test_413_is_a_valid_wsgi_response(client, api_env):
    # wsgiref (the standalone service's server) answers 500 when an
    # application sends a hop-by-hop header such as Connection.
    from wsgiref import util as wsgi_util
    limit = api_env.api.max_request_body_size
    resp = client.post('/v1/fabrics', raw=b'x' * (limit + 1))
    assert resp.status == 413, resp
    assert not [name for name in resp.headers
                if wsgi_util.is_hop_by_hop(name)], resp.headers
