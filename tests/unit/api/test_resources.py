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

"""CRUD of the admin-managed resources: fabrics, hosts, pools, memory
nodes and devices."""

import uuid

from composable.common import utils as common_utils


def test_versions(client):
    resp = client.get('/')
    assert resp.status == 200
    version = resp.json['versions'][0]
    assert version['id'] == 'v1'
    assert version['min_version'] == '1.0'
    assert version['max_version'] == '1.7'
    assert version['links'][0]['href'] == 'http://localhost/v1/'
    resp = client.get('/v1/')
    assert resp.json['version'] == version
    assert client.get('/v1').json['version'] == version


def test_fabric_crud(client):
    resp = client.post('/v1/fabrics', {
        'name': 'f1', 'driver': 'fake', 'description': 'rack 1',
        'driver_info': {'url': 'http://x', 'password': 'pw',
                        'nested': {'api_key': 'k', 'user': 'u'}}})
    assert resp.status == 201, resp
    fabric = resp.json
    assert resp.headers['Location'] == fabric['links'][0]['href']
    assert fabric['driver_info'] == {
        'url': 'http://x', 'password': common_utils.MASK,
        'nested': {'api_key': common_utils.MASK, 'user': 'u'}}
    assert 'pw' not in resp.text
    assert fabric['created_at'].endswith('Z')

    shown = client.get('/v1/fabrics/f1').json
    assert shown == fabric
    assert client.get('/v1/fabrics/%s' % fabric['uuid']).json == fabric

    # Sending back the masked value keeps the stored secret.
    resp = client.patch('/v1/fabrics/f1', {
        'driver_info': {'url': 'http://y', 'password': common_utils.MASK},
        'description': None})
    assert resp.status == 200, resp
    assert resp.json['driver_info'] == {'url': 'http://y',
                                        'password': common_utils.MASK}
    assert resp.json['description'] is None
    from composable.common import context
    from composable.db import api as db_api
    stored = db_api.fabric_get(context.get_admin_context(), 'f1')
    assert stored.driver_info['password'] == 'pw'

    listed = client.get('/v1/fabrics?driver=fake').json['fabrics']
    assert [f['name'] for f in listed] == ['f1']
    assert client.get('/v1/fabrics?driver=other').json == {'fabrics': []}

    assert client.delete('/v1/fabrics/f1').status == 204
    resp = client.get('/v1/fabrics/f1')
    assert resp.status == 404
    assert resp.error['code'] == 'composable.fabric.not_found'


def test_fabric_driver_must_be_enabled(client):
    resp = client.post('/v1/fabrics', {'name': 'f', 'driver': 'redfish'})
    assert resp.status == 400
    assert "'driver'" in resp.error['detail']


def test_fabric_duplicate_name(client):
    assert client.post('/v1/fabrics', {'name': 'f', 'driver': 'fake'}
                       ).status == 201
    resp = client.post('/v1/fabrics', {'name': 'f', 'driver': 'fake'})
    assert resp.status == 409
    assert resp.error['code'] == 'composable.duplicate_name'


def test_name_may_not_be_a_uuid(client):
    resp = client.post('/v1/fabrics', {'name': str(uuid.uuid4()),
                                       'driver': 'fake'})
    assert resp.status == 400
    assert "'name'" in resp.error['detail']


def test_fabric_in_use_cannot_be_deleted(client, inventory):
    resp = client.delete('/v1/fabrics/fab1')
    assert resp.status == 409
    assert resp.error['code'] == 'composable.in_use'


def test_host_crud(client, inventory):
    host = inventory['host']
    assert host['fabric_uuid'] == inventory['fabric']['uuid']
    resp = client.patch('/v1/hosts/%s' % host['name'], {
        'partition_id': 'p7', 'properties': {'rack': 'r1'}})
    assert resp.status == 200, resp
    assert resp.json['partition_id'] == 'p7'
    assert resp.json['properties'] == {'rack': 'r1'}
    listed = client.get('/v1/hosts?fabric=fab1').json['hosts']
    assert [h['uuid'] for h in listed] == [host['uuid']]
    resp = client.get('/v1/hosts?fabric=nope')
    assert resp.status == 400
    assert resp.error['detail'] == (
        "Invalid input for field 'fabric': Fabric 'nope' not found")
    assert client.delete('/v1/hosts/%s' % host['uuid']).status == 204
    assert client.get('/v1/hosts/%s' % host['uuid']).status == 404


def test_host_unknown_fabric(client):
    resp = client.post('/v1/hosts', {'name': 'h', 'fabric': 'nope'})
    assert resp.status == 400
    assert resp.error['detail'] == (
        "Invalid input for field 'fabric': Fabric 'nope' not found")


def test_pool_crud(client, inventory):
    pool = inventory['memory_pool']
    assert pool['resource_class'] == 'CUSTOM_COMPOSABLE_MEMORY_MB'
    shown = client.get('/v1/pools/mem1').json
    assert shown['total'] == 16384
    assert shown['free'] == 16384
    assert shown['step_size'] == 1024
    gpu = client.get('/v1/pools/gpu1').json
    assert gpu['resource_class'] == 'CUSTOM_COMPOSABLE_GPU'
    assert gpu['total'] == 2
    assert gpu['step_size'] == 1

    resp = client.patch('/v1/pools/mem1', {
        'reserved': 1024, 'traits': ['CUSTOM_FAST'],
        'description': 'fast'})
    assert resp.status == 200, resp
    assert resp.json['reserved'] == 1024
    assert resp.json['free'] == 15360
    assert resp.json['traits'] == ['CUSTOM_FAST']

    resp = client.patch('/v1/pools/mem1', {'reserved': 16385})
    assert resp.status == 409

    kinds = {p['name'] for p in
             client.get('/v1/pools?kind=gpu').json['pools']}
    assert kinds == {'gpu1'}
    assert client.get('/v1/pools?kind=disk').status == 400

    resp = client.delete('/v1/pools/mem1')
    assert resp.status == 409
    assert resp.error['code'] == 'composable.in_use'


def test_pci_pool(client, inventory):
    resp = client.post('/v1/pools', {'name': 'nvme', 'kind': 'pci',
                                     'fabric': 'fab1'})
    assert resp.status == 400
    assert "'device_class'" in resp.error['detail']
    resp = client.post('/v1/pools', {'name': 'nvme', 'kind': 'pci',
                                     'fabric': 'fab1',
                                     'device_class': 'NVME'})
    assert resp.status == 201, resp
    assert resp.json['resource_class'] == 'CUSTOM_COMPOSABLE_PCI_NVME'
    resp = client.post('/v1/devices', {'pool': 'nvme', 'address': 'n1'})
    assert resp.status == 201, resp
    assert resp.json['kind'] == 'nvme'
    resp = client.post('/v1/devices', {'pool': 'nvme', 'address': 'n2',
                                       'kind': 'gpu'})
    assert resp.status == 400


def test_pool_validation(client, inventory):
    cases = [
        ({'name': 'p', 'kind': 'disk', 'fabric': 'fab1'}, "'kind'"),
        ({'name': 'p', 'kind': 'gpu', 'fabric': 'fab1', 'step_size': 8},
         "'step_size'"),
        ({'name': 'p', 'kind': 'memory', 'fabric': 'fab1',
          'device_class': 'X'}, "'device_class'"),
        ({'name': 'p', 'kind': 'gpu', 'fabric': 'fab1',
          'traits': ['NOT_A_TRAIT']}, "'traits'"),
        ({'name': 'p', 'kind': 'gpu', 'fabric': 'fab1',
          'traits': ['lower']}, "'traits/0'"),
        ({'name': 'p', 'kind': 'memory', 'fabric': 'fab1',
          'reserved': -1}, "'reserved'"),
        ({'name': 'p', 'kind': 'memory', 'fabric': 'nope'},
         "Fabric 'nope' not found"),
    ]
    for body, expected in cases:
        resp = client.post('/v1/pools', body)
        assert resp.status == 400, (body, resp)
        assert expected in resp.error['detail'], (body, resp)
    resp = client.post('/v1/pools', {'name': 'p', 'kind': 'gpu',
                                     'fabric': 'fab1',
                                     'traits': ['HW_GPU_API_VULKAN',
                                                'CUSTOM_A100']})
    assert resp.status == 201, resp


def test_memory_node_crud(client, inventory):
    node = inventory['nodes'][0]
    assert node['pool_uuid'] == inventory['memory_pool']['uuid']
    assert node['fabric_uuid'] == inventory['fabric']['uuid']
    assert node['exporter'] == 'noop'
    assert node['transport'] == 'tcp'
    assert node['enabled'] is True
    resp = client.patch('/v1/memory_nodes/mn1', {'reserved_mb': 1024,
                                                 'transport': 'iser'})
    assert resp.status == 200, resp
    assert resp.json['reserved_mb'] == 1024
    assert resp.json['transport'] == 'iser'
    assert client.get('/v1/pools/mem1').json['total'] == 15360
    resp = client.patch('/v1/memory_nodes/mn1', {'reserved_mb': 9000})
    assert resp.status == 400
    listed = client.get('/v1/memory_nodes?pool=mem1').json['memory_nodes']
    assert {n['name'] for n in listed} == {'mn1', 'mn2'}
    assert client.delete('/v1/memory_nodes/mn2').status == 204
    assert client.get('/v1/pools/mem1').json['total'] == 7168


def test_memory_node_validation(client, inventory):
    cases = [
        ({'name': 'n', 'pool': 'mem1', 'capacity_mb': -1},
         "Invalid input for field 'capacity_mb': -1 is less than the "
         "minimum of 1"),
        ({'name': 'n', 'pool': 'mem1', 'capacity_mb': 2 ** 41},
         "Invalid input for field 'capacity_mb': %d is greater than the "
         "maximum of %d" % (2 ** 41, 2 ** 40)),
        ({'name': 'n', 'pool': 'mem1', 'capacity_mb': 'lots'},
         "Invalid input for field 'capacity_mb': 'lots' is not of type "
         "'integer'"),
        ({'name': 'n', 'pool': 'gpu1', 'capacity_mb': 1},
         "Invalid input for field 'pool': pool gpu1 is a gpu pool"),
        ({'name': 'n', 'pool': 'nope', 'capacity_mb': 1},
         "Invalid input for field 'pool': Pool 'nope' not found"),
        ({'name': 'n', 'pool': 'mem1', 'capacity_mb': 1,
          'exporter': 'magic'}, "Invalid input for field 'exporter'"),
        ({'name': 'n', 'pool': 'mem1'},
         "Invalid input for field 'capacity_mb': the field is required"),
        ({'name': 'n', 'pool': 'mem1', 'capacity_mb': 1, 'colour': 'red'},
         "Invalid input for field 'colour': unknown field"),
        ({'name': 'x' * 256, 'pool': 'mem1', 'capacity_mb': 1},
         "Invalid input for field 'name'"),
    ]
    for body, expected in cases:
        resp = client.post('/v1/memory_nodes', body)
        assert resp.status == 400, (body, resp)
        assert resp.error['detail'].startswith(expected), (body, resp)


def test_device_crud(client, inventory):
    device = inventory['devices'][0]
    assert device['kind'] == 'gpu'
    assert device['state'] == 'available'
    assert device['lease_uuid'] is None
    assert device['fabric_uuid'] == inventory['fabric']['uuid']
    resp = client.patch('/v1/devices/%s' % device['uuid'],
                        {'state': 'maintenance', 'model': 'H100'})
    assert resp.status == 200, resp
    assert resp.json['state'] == 'maintenance'
    assert client.get('/v1/pools/gpu1').json['total'] == 1
    resp = client.patch('/v1/devices/%s' % device['uuid'],
                        {'state': 'attached'})
    assert resp.status == 400
    listed = client.get('/v1/devices?state=available').json['devices']
    assert [d['name'] for d in listed] == ['g2']
    assert client.get('/v1/devices?state=gone').status == 400
    listed = client.get('/v1/devices?pool=gpu1&model=H100').json
    assert [d['name'] for d in listed['devices']] == ['g1']
    assert client.delete('/v1/devices/%s' % device['uuid']).status == 204
    assert client.get('/v1/devices/%s' % device['uuid']).status == 404


def test_device_validation(client, inventory):
    resp = client.post('/v1/devices', {'pool': 'mem1', 'address': 'x'})
    assert resp.status == 400
    resp = client.post('/v1/devices', {'pool': 'gpu1', 'address': 'x',
                                       'vendor_id': '10ded'})
    assert resp.status == 400
    assert "'vendor_id'" in resp.error['detail']
    resp = client.post('/v1/devices', {'pool': 'gpu1', 'address': 'slot-1'})
    assert resp.status == 409


def test_pagination(client):
    names = ['f%02d' % i for i in range(5)]
    for name in names:
        assert client.post('/v1/fabrics', {'name': name, 'driver': 'fake'}
                           ).status == 201
    seen = []
    url = '/v1/fabrics?limit=2&sort_key=name&sort_dir=desc'
    while url:
        body = client.get(url).json
        seen.extend(f['name'] for f in body['fabrics'])
        links = body.get('links')
        if links:
            assert links[0]['rel'] == 'next'
            href = links[0]['href']
            assert 'sort_key=name' in href and 'limit=2' in href
            url = href[len('http://localhost'):]
        else:
            url = None
    assert seen == sorted(names, reverse=True)
    body = client.get('/v1/fabrics?limit=5').json
    assert 'links' in body
    body = client.get('/v1/fabrics?limit=6').json
    assert 'links' not in body and len(body['fabrics']) == 5
    first = client.get('/v1/fabrics?limit=1&sort_key=name').json
    marker = first['fabrics'][0]['uuid']
    rest = client.get('/v1/fabrics?marker=%s&sort_key=name' % marker).json
    assert [f['name'] for f in rest['fabrics']] == names[1:]


def test_pagination_errors(client):
    for query, field in (('limit=0', 'limit'), ('limit=x', 'limit'),
                         ('marker=nope', 'marker'),
                         ('sort_key=driver_info', 'sort_key'),
                         ('sort_dir=up', 'sort_dir')):
        resp = client.get('/v1/fabrics?' + query)
        assert resp.status == 400, query
        assert "'%s'" % field in resp.error['detail']
    resp = client.get('/v1/fabrics?marker=%s' % uuid.uuid4())
    assert resp.status == 400


def test_max_limit(client, api_env):
    api_env.set_override('max_limit', 2, 'api')
    try:
        for i in range(3):
            client.post('/v1/fabrics', {'name': 'f%d' % i, 'driver': 'fake'})
        body = client.get('/v1/fabrics?limit=100').json
        assert len(body['fabrics']) == 2
        assert 'limit=2' in body['links'][0]['href']
    finally:
        api_env.clear_override('max_limit', 'api')
