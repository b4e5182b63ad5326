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

"""The commands run through the OpenStack client's machinery against a
scripted API: argument handling, the requests they make, their output."""

import json

import pytest

from tests.unit.cli import fakes

LEASE = {
    'uuid': '6b2c3d4e-0000-4000-8000-000000000001', 'name': 'l1',
    'description': None, 'project_id': 'demo', 'user_id': 'admin',
    'status': 'reserved', 'fault': None, 'memory_mb': 1024,
    'device_count': 0, 'device_kind': None, 'device_model': None,
    'device_traits': [], 'attach_mode': 'host', 'start_at': None,
    'end_at': None, 'host': None, 'instance_uuid': None,
    'memory_pool_uuid': 'p1', 'device_pool_uuid': None,
    'extents': [{'uuid': 'e1', 'index': 0, 'memory_node': 'mn1',
                 'size_mb': 1024, 'export_state': 'none'}],
    'devices': [], 'created_at': '2026-11-22T10:00:00Z',
    'updated_at': None,
    'links': [{'rel': 'self', 'href': 'http://x/v1/leases/l1'}],
}


@pytest.fixture
def api():
    scripted = fakes.ScriptedAPI()
    server = fakes.WSGIServer(scripted).start()
    scripted.url = server.url
    yield scripted
    server.stop()


def _echo_lease(status=201):
    def handler(request):
        lease = dict(LEASE)
        lease.update(request.body or {})
        return status, lease
    return handler


def run(api, *args):
    return fakes.run_openstack(api.url, *args)


# -- lease bind: --server, --host, or both (as the API takes them) --------

def test_bind_requires_server_or_host(api):
    code, out, err = run(api, 'lease', 'bind', 'l1')
    assert code == 2
    assert 'give --host, --server, or both' in err
    assert api.requests == []


def test_bind_to_server_on_host(api):
    api.add('POST', '/v1/leases/l1/bind', _echo_lease(202))
    fakes.run_json(api.url, 'lease', 'bind', 'l1', '--server', 'srv-1',
                   '--host', 'compute-1', '--attach-mode', 'guest')
    assert api.requests[-1].body == {'server': 'srv-1', 'host': 'compute-1',
                                     'attach_mode': 'guest'}


def test_bind_to_host(api):
    api.add('POST', '/v1/leases/l1/bind', _echo_lease(202))
    result = fakes.run_json(api.url, 'lease', 'bind', 'l1', '--host',
                            'compute-1', '--attach-mode', 'guest')
    assert api.requests[-1].body == {'host': 'compute-1',
                                     'attach_mode': 'guest'}
    assert result['uuid'] == LEASE['uuid']


def test_bind_to_server(api):
    api.add('POST', '/v1/leases/l1/bind', _echo_lease(202))
    fakes.run_json(api.url, 'lease', 'bind', 'l1', '--server', 'srv-1')
    assert api.requests[-1].body == {'server': 'srv-1'}


def test_unbind(api):
    api.add('POST', '/v1/leases/l1/unbind', _echo_lease(202))
    fakes.run_json(api.url, 'lease', 'unbind', 'l1')
    assert api.requests[-1].body == {}


# -- lease create ----------------------------------------------------------

def test_lease_create_memory_and_options(api):
    api.add('POST', '/v1/leases', _echo_lease())
    result = fakes.run_json(
        api.url, 'lease', 'create', 'l1', '--memory', '2GiB',
        '--pool', 'pool-a', '--pool', 'pool-b', '--attach-mode', 'guest',
        '--start', '2026-11-22T11:00:00+01:00', '--end',
        '2026-11-23T10:00:00', '--description', 'd')
    assert api.requests[-1].body == {
        'name': 'l1', 'memory_mb': 2048, 'pools': ['pool-a', 'pool-b'],
        'attach_mode': 'guest', 'start_at': '2026-11-22T10:00:00Z',
        'end_at': '2026-11-23T10:00:00Z', 'description': 'd'}
    # JSON keys are the API's field names; links are not shown.
    assert result['memory_mb'] == 2048
    assert 'links' not in result
    assert result['extents'][0]['memory_node'] == 'mn1'
    assert set(LEASE) - {'links'} <= set(result)


@pytest.mark.parametrize('size, expected', [
    ('512MiB', 512), ('1G', 1024), ('1024', 1024), ('1.5GiB', 1536)])
def test_lease_create_sizes(api, size, expected):
    api.add('POST', '/v1/leases', _echo_lease())
    fakes.run_json(api.url, 'lease', 'create', 'l1', '--memory', size)
    assert api.requests[-1].body['memory_mb'] == expected


@pytest.mark.parametrize('size', ['lots', '0', '-1G', '1.5', '1X'])
def test_lease_create_bad_size(api, size):
    code, out, err = run(api, 'lease', 'create', 'l1', '--memory=' + size)
    assert code == 2
    assert 'Invalid size' in err
    assert api.requests == []


def test_lease_create_gpu(api):
    api.add('POST', '/v1/leases', _echo_lease())
    fakes.run_json(api.url, 'lease', 'create', 'l1', '--gpu', '2',
                   '--gpu-model', 'A100', '--trait', 'CUSTOM_NVLINK',
                   '--trait', 'CUSTOM_X')
    assert api.requests[-1].body == {
        'name': 'l1', 'device_count': 2, 'device_kind': 'gpu',
        'device_model': 'A100',
        'device_traits': ['CUSTOM_NVLINK', 'CUSTOM_X']}


def test_lease_create_devices(api):
    api.add('POST', '/v1/leases', _echo_lease())
    fakes.run_json(api.url, 'lease', 'create', 'l1', '--device', 'd1',
                   '--device', 'd2', '--device-kind', 'nvme')
    assert api.requests[-1].body == {
        'name': 'l1', 'device_uuids': ['d1', 'd2'], 'device_kind': 'nvme'}
    fakes.run_json(api.url, 'lease', 'create', 'l2', '--device-count', '3',
                   '--device-kind', 'nvme')
    assert api.requests[-1].body == {
        'name': 'l2', 'device_count': 3, 'device_kind': 'nvme'}


@pytest.mark.parametrize('args, message', [
    ([], 'Nothing to lease'),
    (['--gpu', '2', '--device-count', '3'], 'disagree'),
    (['--gpu', '2', '--device-kind', 'nvme'], '--device-kind is nvme'),
    (['--memory', '1G', '--start', '2026-11-22T10:00:00Z', '--end',
      '2026-11-22T09:00:00Z'], '--end must be after --start'),
])
def test_lease_create_invalid(api, args, message):
    code, out, err = run(api, 'lease', 'create', 'l1', *args)
    assert code == 1
    assert message in err
    assert api.requests == []


def test_lease_create_bad_time(api):
    code, out, err = run(api, 'lease', 'create', 'l1', '--memory', '1G',
                         '--end', 'next tuesday')
    assert code == 2
    assert 'Invalid time' in err


def test_lease_create_bad_gpu_count(api):
    code, out, err = run(api, 'lease', 'create', 'l1', '--gpu', '0')
    assert code == 2


# -- errors ----------------------------------------------------------------

def test_api_error_detail_is_shown(api):
    api.add('GET', '/v1/leases/nope', (404, fakes.error_body(
        404, 'Not Found', 'Lease nope could not be found.',
        code='composable.lease.not_found')))
    code, out, err = run(api, 'lease', 'show', 'nope')
    assert code == 1
    assert 'Lease nope could not be found.' in err
    assert '(HTTP 404)' in err
    assert out == ''


def test_validation_error_detail_is_shown(api):
    api.add('POST', '/v1/leases', (400, fakes.error_body(
        400, 'Bad Request', "Invalid input for field 'memory_mb': 3 is not "
        "a multiple of the pool's step size 1024")))
    code, out, err = run(api, 'lease', 'create', 'l1', '--memory', '3')
    assert code == 1
    assert "Invalid input for field 'memory_mb'" in err


def test_delete_reports_each_failure(api):
    api.add('DELETE', '/v1/leases/a', (204, None))
    api.add('DELETE', '/v1/leases/b', (409, fakes.error_body(
        409, 'Conflict', 'Lease b is locked by conductor c1.')))
    api.add('DELETE', '/v1/leases/c', (204, None))
    code, out, err = run(api, 'lease', 'delete', 'a', 'b', 'c', 'd')
    assert code == 1
    assert [r.path for r in api.requests] == [
        '/v1/leases/a', '/v1/leases/b', '/v1/leases/c', '/v1/leases/d']
    assert 'Failed to delete lease b: Lease b is locked' in err
    assert 'Failed to delete lease d' in err
    assert '2 of 4 leases failed to delete' in err


def test_delete_success(api):
    for name in ('a', 'b'):
        api.add('DELETE', '/v1/pools/%s' % name, (204, None))
    code, out, err = run(api, 'pool', 'delete', 'a', 'b')
    assert code == 0, err
    assert out == ''


def test_unsupported_api_version(api):
    code, out, err = fakes.run_openstack(api.url, 'pool', 'list',
                                         api_version='2.0')
    assert code != 0
    assert api.requests == []


def test_api_version_option_is_sent(api):
    api.add('GET', '/v1/pools', (200, {'pools': []}))
    code, out, err = fakes.run_openstack(api.url, 'pool', 'list',
                                         api_version='1')
    assert code == 0, err
    assert api.requests[-1].headers['openstack-api-version'] == (
        'composable 1.0')


def test_endpoint_with_v1_suffix(api):
    api.add('GET', '/v1/pools', (200, {'pools': []}))
    code, out, err = fakes.run_openstack(api.url + '/v1/', 'pool', 'list')
    assert code == 0, err
    assert api.requests[-1].path == '/v1/pools'


# -- lists -----------------------------------------------------------------

def test_pool_list_columns_and_pages(api):
    pools = [{'uuid': 'u%d' % i, 'name': 'p%d' % i, 'kind': 'memory',
              'resource_class': 'CUSTOM_COMPOSABLE_MEMORY_MB',
              'total': 4096, 'reserved': 0, 'used': 1024, 'free': 3072,
              'fabric_uuid': 'f', 'traits': ['CUSTOM_A'], 'step_size': 1024,
              'provider_uuid': None, 'description': None}
             for i in range(3)]

    def handler(request):
        if request.query.get('marker') == 'u1':
            return 200, {'pools': pools[2:]}
        return 200, {'pools': pools[:2], 'links': [
            {'rel': 'next', 'href': 'http://public.example:6590/v1/pools'
                                    '?limit=2&marker=u1'}]}
    api.add('GET', '/v1/pools', handler)
    result = fakes.run_json(api.url, 'pool', 'list', '--kind', 'memory')
    assert [p['name'] for p in result] == ['p0', 'p1', 'p2']
    assert list(result[0]) == ['uuid', 'name', 'kind', 'resource_class',
                               'total', 'reserved', 'used', 'free']
    assert api.requests[0].query == {'kind': 'memory'}
    assert api.requests[1].query == {'kind': 'memory', 'limit': '2',
                                     'marker': 'u1'}
    result = fakes.run_json(api.url, 'pool', 'list', '--long')
    assert result[0]['traits'] == ['CUSTOM_A']
    assert 'step_size' in result[0]
    code, out, err = run(api, 'pool', 'list')
    assert code == 0
    assert 'CUSTOM_COMPOSABLE_MEMORY_MB' in out


def test_lease_list_filters(api):
    api.add('GET', '/v1/leases', (200, {'leases': [LEASE]}))
    result = fakes.run_json(api.url, 'lease', 'list', '--all-projects',
                            '--status', 'bound', '--pool', 'p',
                            '--kind', 'gpu', '--host', 'h', '--limit', '5',
                            '--marker', 'm')
    assert api.requests[-1].query == {
        'all_projects': 'true', 'status': 'bound', 'pool': 'p',
        'kind': 'gpu', 'host': 'h', 'limit': '5', 'marker': 'm'}
    assert list(result[0]) == ['uuid', 'name', 'status', 'memory_mb',
                               'device_count', 'device_kind', 'host',
                               'end_at']
    fakes.run_json(api.url, 'lease', 'list', '--project', 'p2', '--long')
    assert api.requests[-1].query == {'project_id': 'p2'}
    server = '0b6e1c52-7d3a-4f0e-9c1d-2a5b8e4f6a70'
    fakes.run_json(api.url, 'lease', 'list', '--server', server,
                   '--name', 'l1')
    assert api.requests[-1].query == {'instance_uuid': server,
                                      'name': 'l1'}


def test_lease_usage_show_from_a_marker(api):
    sample = {'id': 7, 'taken_at': '2026-11-22T10:00:00Z', 'used_mb': 10,
              'size_mb': 1024}
    api.add('GET', '/v1/leases/l1/usage', (200, {'usage': [sample]}))
    result = fakes.run_json(api.url, 'lease', 'usage', 'show', 'l1',
                            '--marker', '6', '--limit', '1', '--long')
    assert result == [sample]
    assert api.requests[-1].query == {'marker': '6', 'limit': '1'}
    assert fakes.run_json(api.url, 'lease', 'usage', 'show', 'l1') == [
        {k: v for k, v in sample.items() if k != 'id'}]
    assert api.requests[-1].query == {}


def test_lease_action_list(api):
    action = {'action': 'create', 'request_id': 'req-1', 'user_id': 'u',
              'project_id': 'p', 'start_time': '2026-11-22T10:00:00Z',
              'finish_time': '2026-11-22T10:00:01Z', 'result': 'success',
              'message': None}
    api.add('GET', '/v1/leases/l1/actions', (200, {'actions': [action]}))
    assert fakes.run_json(api.url, 'lease', 'action', 'list', 'l1') == [
        action]


def test_lease_set(api):
    api.add('PATCH', '/v1/leases/l1', _echo_lease(200))
    fakes.run_json(api.url, 'lease', 'set', 'l1', '--name', 'l2',
                   '--description', 'x', '--end', '2026-12-01T00:00:00Z')
    assert api.requests[-1].body == {'name': 'l2', 'description': 'x',
                                     'end_at': '2026-12-01T00:00:00Z'}


# -- inventory commands ----------------------------------------------------

def _echo(status=201, **extra):
    def handler(request):
        body = dict(request.body or {}, uuid='u1',
                    links=[{'rel': 'self', 'href': 'x'}])
        body.update(extra)
        return status, body
    return handler


def test_fabric_create(api):
    api.add('POST', '/v1/fabrics', _echo())
    result = fakes.run_json(api.url, 'fabric', 'create', 'f1', '--driver',
                            'fake', '--driver-info', 'url=http://r/?a=b',
                            '--driver-info', 'password=s',
                            '--aggregate-uuid', 'agg', '--description', 'd')
    assert api.requests[-1].body == {
        'name': 'f1', 'driver': 'fake', 'aggregate_uuid': 'agg',
        'driver_info': {'url': 'http://r/?a=b', 'password': 's'},
        'description': 'd'}
    assert result['driver_info'] == {'url': 'http://r/?a=b',
                                     'password': 's'}


def test_fabric_set_driver_info_merges(api):
    api.add('GET', '/v1/fabrics/f1', (200, {'uuid': 'u1', 'driver_info': {
        'url': 'http://old', 'password': '***'}}))
    api.add('PATCH', '/v1/fabrics/f1', _echo(200))
    fakes.run_json(api.url, 'fabric', 'set', 'f1', '--driver-info',
                   'url=http://new')
    # The mask goes back: the API keeps the stored secret for it.
    assert api.requests[-1].body == {'driver_info': {
        'url': 'http://new', 'password': '***'}}
    fakes.run_json(api.url, 'fabric', 'set', 'f1', '--no-driver-info',
                   '--driver-info', 'a=b')
    assert api.requests[-1].method == 'PATCH'
    assert api.requests[-1].body == {'driver_info': {'a': 'b'}}


def test_fabric_create_requires_driver(api):
    code, out, err = run(api, 'fabric', 'create', 'f1')
    assert code == 2
    assert '--driver' in err


def test_host_create_and_set(api):
    api.add('POST', '/v1/hosts', _echo())
    fakes.run_json(api.url, 'host', 'create', 'h1', '--fabric', 'f1',
                   '--initiator-iqn', 'iqn.x', '--partition-id', '3',
                   '--property', 'rack=r1')
    assert api.requests[-1].body == {
        'name': 'h1', 'fabric': 'f1', 'initiator_iqn': 'iqn.x',
        'partition_id': '3', 'properties': {'rack': 'r1'}}
    api.add('GET', '/v1/hosts/h1', (200, {'uuid': 'u1', 'properties': {
        'rack': 'r1', 'row': '2'}}))
    api.add('PATCH', '/v1/hosts/h1', _echo(200))
    fakes.run_json(api.url, 'host', 'set', 'h1', '--property', 'rack=r9')
    assert api.requests[-1].body == {'properties': {'rack': 'r9',
                                                    'row': '2'}}
    fakes.run_json(api.url, 'host', 'set', 'h1', '--no-property')
    assert api.requests[-1].body == {'properties': {}}


def test_pool_create(api):
    api.add('POST', '/v1/pools', _echo())
    fakes.run_json(api.url, 'pool', 'create', 'mem', '--kind', 'memory',
                   '--fabric', 'f1', '--trait', 'CUSTOM_A', '--reserved',
                   '0', '--step-size', '1GiB')
    assert api.requests[-1].body == {
        'name': 'mem', 'kind': 'memory', 'fabric': 'f1',
        'traits': ['CUSTOM_A'], 'reserved': 0, 'step_size': 1024}
    fakes.run_json(api.url, 'pool', 'create', 'nvme', '--kind', 'pci',
                   '--fabric', 'f1', '--device-class', 'NVME')
    assert api.requests[-1].body == {
        'name': 'nvme', 'kind': 'pci', 'fabric': 'f1',
        'device_class': 'NVME'}
    code, out, err = run(api, 'pool', 'create', 'x', '--kind', 'disk',
                         '--fabric', 'f1')
    assert code == 2


def test_pool_set_traits(api):
    api.add('GET', '/v1/pools/p', (200, {'uuid': 'u', 'traits': ['A']}))
    api.add('PATCH', '/v1/pools/p', _echo(200))
    fakes.run_json(api.url, 'pool', 'set', 'p', '--trait', 'B',
                   '--reserved', '2')
    assert api.requests[-1].body == {'reserved': 2, 'traits': ['A', 'B']}
    fakes.run_json(api.url, 'pool', 'set', 'p', '--no-trait',
                   '--trait', 'C')
    assert api.requests[-1].body == {'traits': ['C']}


def test_memory_node_create_and_set(api):
    api.add('POST', '/v1/memory_nodes', _echo())
    fakes.run_json(api.url, 'memory', 'node', 'create', 'mn1', '--pool',
                   'mem', '--capacity', '64GiB', '--reserved', '0',
                   '--exporter', 'noop', '--portal', '10.0.0.1:3260',
                   '--transport', 'iser', '--disable')
    assert api.requests[-1].body == {
        'name': 'mn1', 'pool': 'mem', 'capacity_mb': 65536,
        'reserved_mb': 0, 'exporter': 'noop', 'portal': '10.0.0.1:3260',
        'transport': 'iser', 'enabled': False}
    code, out, err = run(api, 'memory', 'node', 'create', 'mn2', '--pool',
                         'mem', '--capacity', 'big')
    assert code == 2
    assert 'Invalid size' in err
    api.add('PATCH', '/v1/memory_nodes/mn1', _echo(200))
    fakes.run_json(api.url, 'memory', 'node', 'set', 'mn1', '--enable',
                   '--capacity', '32G')
    assert api.requests[-1].body == {'capacity_mb': 32768, 'enabled': True}


def test_device_create_and_set(api):
    api.add('POST', '/v1/devices', _echo())
    fakes.run_json(api.url, 'device', 'create', '--pool', 'gpus',
                   '--address', 'slot-1', '--kind', 'gpu', '--name', 'g1',
                   '--vendor-id', '10de', '--product-id', '20b0',
                   '--model', 'A100', '--trait', 'CUSTOM_NVLINK')
    assert api.requests[-1].body == {
        'pool': 'gpus', 'address': 'slot-1', 'kind': 'gpu', 'name': 'g1',
        'vendor_id': '10de', 'product_id': '20b0', 'model': 'A100',
        'traits': ['CUSTOM_NVLINK']}
    api.add('PATCH', '/v1/devices/g1', _echo(200))
    fakes.run_json(api.url, 'device', 'set', 'g1', '--state',
                   'maintenance')
    assert api.requests[-1].body == {'state': 'maintenance'}
    code, out, err = run(api, 'device', 'set', 'g1', '--state', 'broken')
    assert code == 2


def test_table_output(api):
    api.add('GET', '/v1/leases/l1', (200, LEASE))
    code, out, err = run(api, 'lease', 'show', 'l1')
    assert code == 0, err
    assert 'memory_node' in out and 'mn1' in out
    code, out, err = run(api, 'lease', 'show', 'l1', '-f', 'yaml')
    assert code == 0, err
    code, out, err = run(api, 'lease', 'show', 'l1', '-f', 'json')
    assert json.loads(out)['extents'] == LEASE['extents']


def test_pool_create_cxl(api):
    api.add('POST', '/v1/pools', _echo())
    code, out, err = fakes.run_openstack(
        api.url, 'pool', 'create', 'cxl-mem', '--kind', 'memory',
        '--fabric', 'cxl1', '--medium', 'cxl', '--step-size', '512',
        '-f', 'json', api_version='1.5')
    assert code == 0, err
    assert api.requests[-1].body == {
        'name': 'cxl-mem', 'kind': 'memory', 'fabric': 'cxl1',
        'medium': 'cxl', 'step_size': 512}
    assert api.requests[-1].headers['openstack-api-version'] == (
        'composable 1.5')
    sent = len(api.requests)
    code, out, err = run(api, 'pool', 'create', 'cxl-mem', '--kind',
                         'memory', '--fabric', 'cxl1', '--medium', 'cxl')
    assert code == 1
    assert 'add --os-composable-api-version 1.5' in err
    code, out, err = run(api, 'pool', 'create', 'cxl-mem', '--kind',
                         'memory', '--fabric', 'cxl1', '--medium', 'tape')
    assert code == 2
    assert len(api.requests) == sent


def test_pool_create_sriov(api):
    api.add('POST', '/v1/pools', _echo())
    code, out, err = fakes.run_openstack(
        api.url, 'pool', 'create', 'vfs', '--kind', 'pci', '--fabric', 'f1',
        '--device-class', 'NIC', '--sriov-host', 'compute-1', '--sriov-pf',
        '0000:41:00.0', '--sriov-vfs', '4', '--sriov-vf-mode', 'precreated',
        '--sriov-vendor-id', '15b3', '-f', 'json', api_version='1.3')
    assert code == 0, err
    assert api.requests[-1].body == {
        'name': 'vfs', 'kind': 'pci', 'fabric': 'f1',
        'device_class': 'NIC',
        'sriov': {'host': 'compute-1', 'pf_address': '0000:41:00.0',
                  'vf_count': 4, 'vf_mode': 'precreated',
                  'vendor_id': '15b3'}}
    assert api.requests[-1].headers['openstack-api-version'] == (
        'composable 1.3')
    sent = len(api.requests)
    code, out, err = run(api, 'pool', 'create', 'vfs', '--kind', 'pci',
                         '--fabric', 'f1', '--device-class', 'NIC',
                         '--sriov-host', 'compute-1', '--sriov-vfs', '4')
    assert code == 1
    assert 'needs --sriov-pf too' in err
    code, out, err = run(api, 'pool', 'create', 'vfs', '--kind', 'pci',
                         '--fabric', 'f1', '--device-class', 'NIC',
                         '--sriov-host', 'compute-1', '--sriov-pf',
                         '0000:41:00.0', '--sriov-vfs', '4')
    assert code == 1
    assert 'add --os-composable-api-version 1.3' in err
    assert len(api.requests) == sent


DEVICE = {'uuid': 'd1', 'name': 'g1', 'pool_uuid': 'p1', 'kind': 'gpu',
          'model': 'A100', 'address': 'slot-1', 'state': 'available',
          'lease_uuid': None, 'links': []}
DEVICE_FACTS = dict(DEVICE, serial='SN-1', health='warning',
                    health_reason='the fabric reports its health as warning',
                    reachable_hosts=['compute-1', 'compute-2'])


def test_device_list_and_show_ask_for_the_device_facts(api):
    every = dict(DEVICE_FACTS, uuid='d2', health='ok', health_reason=None,
                 reachable_hosts=None)
    api.add('GET', '/v1/devices', (200, {'devices': [DEVICE_FACTS, every],
                                         'links': []}))
    code, out, err = run(api, 'device', 'list', '--long')
    assert code == 0, err
    assert api.requests[-1].headers['openstack-api-version'] == (
        'composable 1.4')
    header = out.splitlines()[1]
    for column in ('health', 'serial', 'health_reason', 'reachable_hosts'):
        assert ' %s ' % column in header, header
    assert 'compute-1, compute-2' in out and '(every host)' in out
    listed = fakes.run_json(api.url, 'device', 'list')
    assert [d['health'] for d in listed] == ['warning', 'ok']
    api.add('GET', '/v1/devices/d1', (200, DEVICE_FACTS))
    shown = fakes.run_json(api.url, 'device', 'show', 'd1')
    assert shown['reachable_hosts'] == ['compute-1', 'compute-2']
    assert shown['serial'] == 'SN-1'


def test_device_show_against_a_server_older_than_1_4(api):
    def older(request):
        if request.headers['openstack-api-version'] != 'composable 1.0':
            return 406, {'errors': [{'status': 406}]}
        return 200, DEVICE
    api.add('GET', '/v1/devices/d1', older)
    shown = fakes.run_json(api.url, 'device', 'show', 'd1')
    assert shown['model'] == 'A100' and 'health' not in shown
    assert [r.headers['openstack-api-version'] for r in api.requests] == [
        'composable 1.4', 'composable 1.0']
