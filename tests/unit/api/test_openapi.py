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

"""Keep composable/api/openapi.yaml true.

The document must be a valid OpenAPI 3.0 document, list exactly the routes
the application serves, document the request schemas the code enforces,
and describe the responses the application really returns.
"""

import copy
import os
import uuid

import jsonschema
from openapi_spec_validator import validate as validate_spec
import pytest
import yaml

from composable.api.controllers import root
from composable.api import microversion
from composable.api.schemas import device
from composable.api.schemas import fabric
from composable.api.schemas import host
from composable.api.schemas import lease
from composable.api.schemas import memory_node
from composable.api.schemas import pool

DOC_PATH = os.path.join(os.path.dirname(root.__file__), os.pardir,
                        'openapi.yaml')
METHODS = ('get', 'put', 'post', 'delete', 'patch', 'head', 'options')


@pytest.fixture(scope='module')
def doc():
    with open(DOC_PATH) as f:
        return yaml.safe_load(f)


def _lookup(doc, ref):
    assert ref.startswith('#/'), ref
    node = doc
    for part in ref[2:].split('/'):
        node = node[part]
    return node


def to_json_schema(doc, schema):
    """An OpenAPI 3.0 schema as plain JSON schema: references inlined,
    ``nullable`` turned into a "null" type."""
    if isinstance(schema, list):
        return [to_json_schema(doc, item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    if '$ref' in schema:
        return to_json_schema(doc, _lookup(doc, schema['$ref']))
    result = {}
    for key, value in schema.items():
        if key == 'properties':
            result[key] = {name: to_json_schema(doc, sub)
                           for name, sub in value.items()}
        elif key in ('nullable', 'example'):
            continue
        else:
            result[key] = to_json_schema(doc, value)
    if schema.get('nullable') and 'type' not in result:
        # A nullable reference (allOf: [$ref]).
        return {'anyOf': [result, {'type': 'null'}]}
    if schema.get('nullable'):
        result['type'] = [result['type'], 'null']
        if 'enum' in result:
            result['enum'] = list(result['enum']) + [None]
    return result


def documented_routes(doc):
    routes = set()
    for path, item in doc['paths'].items():
        for method in item:
            if method in METHODS:
                routes.add((path, method.upper()))
    return routes


def served_routes():
    return {(path, method) for path, methods in root.ROUTES
            for method in methods}


def _fill(path):
    parts = []
    for part in path.split('/'):
        parts.append('no-such-thing' if part.startswith('{') else part)
    return '/'.join(parts)


def test_document_is_valid(doc):
    validate_spec(doc)
    assert doc['openapi'].startswith('3.0')


def test_every_authenticated_call_documents_keystone_refusals(doc):
    # keystonemiddleware answers any call that needs a token with 401
    # (no valid token) or 503 (Keystone unreachable), before routing.
    for path, methods in doc['paths'].items():
        for method, operation in methods.items():
            codes = set(operation.get('responses', {}))
            if path in ('/', '/v1/'):
                assert '401' not in codes, (method, path)
                continue
            assert {'401', '503'} <= codes, (method, path)


def test_routes_match(doc):
    assert documented_routes(doc) == served_routes()


def test_documented_routes_are_served(client, doc):
    for path, method in sorted(documented_routes(doc)):
        resp = client.request(method, _fill(path))
        # Routed: anything but the router's own 404 and 405.
        assert resp.status != 405, (path, method, resp)
        if resp.status == 404:
            assert resp.error['code'] != 'composable.not_found', (
                path, method, resp)


def test_undocumented_methods_refused(client, doc):
    for path, item in doc['paths'].items():
        for method in ('GET', 'POST', 'PUT', 'PATCH', 'DELETE'):
            if method.lower() in item:
                continue
            resp = client.request(method, _fill(path))
            assert resp.status == 405, (path, method, resp)
            allowed = sorted(m.upper() for m in item if m in METHODS)
            assert resp.headers['Allow'] == ', '.join(allowed)


@pytest.mark.parametrize('name, module', [
    ('Fabric', fabric), ('Host', host), ('Pool', pool),
    ('MemoryNode', memory_node), ('Device', device), ('Lease', lease)])
def test_request_schemas_match_code(doc, name, module):
    schemas = doc['components']['schemas']
    # The document describes the latest microversion (fields of later
    # versions say since when in their description).
    for suffix, attr in (('Create', 'CREATE'), ('Update', 'UPDATE')):
        documented = to_json_schema(doc, schemas[name + suffix])
        # The document describes the newest version of each body.
        newest = microversion.select(microversion.MAX_VERSION,
                                     getattr(module, attr))
        assert documented == _normalize(newest), (name + suffix)
    if module is lease:
        assert to_json_schema(doc, schemas['LeaseBind']) == _normalize(
            microversion.select(microversion.MAX_VERSION, lease.BIND))
        assert to_json_schema(doc, schemas['LeaseUnbind']) == _normalize(
            lease.UNBIND['1.0'])


def _normalize(schema):
    """A code schema with "null" last in its type lists, as the document
    conversion produces them."""
    schema = copy.deepcopy(schema)

    def walk(node):
        if isinstance(node, dict):
            if isinstance(node.get('type'), list):
                types = [t for t in node['type'] if t != 'null']
                node['type'] = types + ['null'] if 'null' in node[
                    'type'] else types
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)
    walk(schema)
    return schema


class Checker(object):
    """Validates responses against the documented operation."""

    def __init__(self, doc):
        self.doc = doc
        self.seen = set()

    def __call__(self, resp, path, method):
        operation = self.doc['paths'][path][method.lower()]
        status = str(resp.status)
        assert status in operation['responses'], (path, method, resp)
        response = operation['responses'][status]
        if '$ref' in response:
            response = _lookup(self.doc, response['$ref'])
        content = response.get('content')
        if content is None:
            assert resp.text == '', (path, method, resp)
        else:
            schema = to_json_schema(
                self.doc, content['application/json']['schema'])
            jsonschema.Draft7Validator(schema).validate(resp.json)
        self.seen.add((path, method.upper(), status))
        return resp


def test_responses_match_document(client, doc, inventory, conductor):
    check = Checker(doc)
    member = client.as_('member')
    check(client.get('/'), '/', 'GET')
    check(client.get('/v1/'), '/v1/', 'GET')
    check(client.get('/v1/fabrics/nope'), '/v1/fabrics/{fabric_ident}',
          'GET')
    check(client.get('/v1/fabrics?colour=red'), '/v1/fabrics', 'GET')
    check(client.get('/v1/fabrics', headers={
        'OpenStack-API-Version': 'composable 9.9'}), '/v1/fabrics', 'GET')
    check(member.post('/v1/fabrics', {'name': 'x', 'driver': 'fake'}),
          '/v1/fabrics', 'POST')

    for plural, single, ident in (
            ('fabrics', 'fabric', 'fab1'), ('hosts', 'host', 'compute-1'),
            ('pools', 'pool', 'mem1'), ('memory_nodes', 'memory_node',
                                        'mn1'),
            ('devices', 'device', inventory['devices'][0]['uuid'])):
        collection = '/v1/%s' % plural
        item = '/v1/%s/{%s_ident}' % (plural, single)
        check(client.get('%s/%s' % (collection, ident)), item, 'GET')
        check(client.get(collection + '?limit=1'), collection, 'GET')
        check(client.patch('%s/%s' % (collection, ident), {}), item,
              'PATCH')
    # Creates (the inventory fixture made them; make one more each).
    check(client.post('/v1/fabrics', {'name': 'f2', 'driver': 'fake',
                                      'driver_info': {'password': 'p'}}),
          '/v1/fabrics', 'POST')
    check(client.post('/v1/hosts', {'name': 'h2', 'fabric': 'f2'}),
          '/v1/hosts', 'POST')
    check(client.post('/v1/pools', {'name': 'nvme', 'kind': 'pci',
                                    'fabric': 'f2', 'device_class': 'NVME',
                                    'traits': ['CUSTOM_X']}),
          '/v1/pools', 'POST')
    check(client.post('/v1/pools', {'name': 'm2', 'kind': 'memory',
                                    'fabric': 'f2'}),
          '/v1/pools', 'POST')
    check(client.post('/v1/memory_nodes', {'name': 'n9', 'pool': 'm2',
                                           'capacity_mb': 4096}),
          '/v1/memory_nodes', 'POST')
    new_device = check(client.post('/v1/devices', {
        'pool': 'nvme', 'address': 'n1', 'vendor_id': '144d'}),
        '/v1/devices', 'POST').json
    check(client.post('/v1/devices', {'pool': 'nvme', 'address': 'n1'}),
          '/v1/devices', 'POST')
    check(client.delete('/v1/devices/%s' % new_device['uuid']),
          '/v1/devices/{device_ident}', 'DELETE')
    check(client.delete('/v1/pools/mem1'), '/v1/pools/{pool_ident}',
          'DELETE')
    check(client.post('/v1/pools', raw=b'x', content_type='text/plain'),
          '/v1/pools', 'POST')

    # Leases, as a project member and as an admin (admin-only fields).
    lease_item = '/v1/leases/{lease_ident}'
    created = check(member.post('/v1/leases', {
        'memory_mb': 2048, 'device_count': 1, 'name': 'both'}),
        '/v1/leases', 'POST').json
    url = '/v1/leases/%s' % created['uuid']
    check(client.get(url), lease_item, 'GET')
    check(member.get(url), lease_item, 'GET')
    check(member.get('/v1/leases'), '/v1/leases', 'GET')
    check(client.get('/v1/leases?all_projects=true'), '/v1/leases', 'GET')
    check(member.patch(url, {'description': 'x'}), lease_item, 'PATCH')
    check(member.get(url + '/actions'), lease_item + '/actions', 'GET')
    check(member.post(url + '/unbind'), lease_item + '/unbind', 'POST')
    check(member.post(url + '/bind', {'host': 'compute-1'}),
          lease_item + '/bind', 'POST')
    check(member.post(url + '/bind', {'host': 'nope'}),
          lease_item + '/bind', 'POST')
    check(client.as_('other_member').get(url), lease_item, 'GET')
    check(client.as_('reader').post('/v1/leases', {'memory_mb': 1024}),
          '/v1/leases', 'POST')
    check(member.post('/v1/leases', {'memory_mb': 2 ** 50}), '/v1/leases',
          'POST')
    failed = check(member.post('/v1/leases', {'memory_mb': 16384}),
                   '/v1/leases', 'POST').json
    assert failed['status'] == 'alloc_failed'
    check(member.delete('/v1/leases/%s' % failed['uuid']), lease_item,
          'DELETE')
    check(member.delete('/v1/leases/%s' % uuid.uuid4()), lease_item,
          'DELETE')

    # Every resource was created, shown and listed.
    for plural in ('fabrics', 'hosts', 'pools', 'memory_nodes', 'devices',
                   'leases'):
        assert ('/v1/%s' % plural, 'POST', '201') in check.seen
        assert ('/v1/%s' % plural, 'GET', '200') in check.seen


def test_request_examples_are_valid(doc):
    # The fuzzer (tox -e fuzz) starts from these examples to make the
    # objects the other operations need: they must pass validation.
    schemas = doc['components']['schemas']
    with_example = [name for name, schema in schemas.items()
                    if 'example' in schema]
    assert len(with_example) >= 6
    for name in with_example:
        jsonschema.validate(schemas[name]['example'],
                            to_json_schema(doc, schemas[name]))
