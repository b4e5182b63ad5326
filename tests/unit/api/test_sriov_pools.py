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

"""Pools of SR-IOV virtual functions through the API (microversion 1.3):
declared with the host and physical function, validated, shown; their
devices are their VFs; their leases take one VF and bind to their host
only."""

import json
import os

import jsonschema
import pytest
import yaml

from composable.api.schemas import pool as pool_schema
from tests.unit.api import test_openapi

V13 = {'OpenStack-API-Version': 'composable 1.3'}


def _pool(**sriov):
    body = {'host': 'compute-1', 'pf_address': '0000:41:00.0',
            'vf_count': 4}
    body.update(sriov)
    return {'name': 'nic-vfs', 'kind': 'pci', 'fabric': 'fab1',
            'device_class': 'NIC', 'sriov': body}


@pytest.fixture
def member(client):
    return client.as_('member')


def test_create_show_list_and_delete(client, inventory):
    resp = client.post('/v1/pools', _pool(vendor_id='0x15B3',
                                          product_id='101e'), headers=V13)
    assert resp.status == 201, resp
    pool = resp.json
    assert pool['sriov'] == {
        'host_uuid': inventory['host']['uuid'], 'host': 'compute-1',
        'pf_address': '0000:41:00.0', 'vf_count': 4,
        'vf_mode': 'on_demand'}
    assert pool['total'] == 4 and pool['used'] == 0
    assert pool['resource_class'] == 'CUSTOM_COMPOSABLE_PCI_NIC'
    devices = client.get('/v1/devices?pool=nic-vfs').json['devices']
    assert sorted(d['address'] for d in devices) == [
        '0000:41:00.0/virtfn%d' % i for i in range(4)]
    assert {(d['kind'], d['vendor_id'], d['product_id'], d['state'])
            for d in devices} == {('nic', '15b3', '101e', 'available')}
    # Shown from 1.3 on; a 1.0 client sees the pool as it always did.
    assert client.get('/v1/pools/nic-vfs', headers=V13).json[
        'sriov']['pf_address'] == '0000:41:00.0'
    assert 'sriov' not in client.get('/v1/pools/nic-vfs').json
    listed = client.get('/v1/pools?kind=pci', headers=V13).json['pools']
    assert [p['sriov']['vf_count'] for p in listed] == [4]
    assert client.get('/v1/pools/gpu1', headers=V13).json['sriov'] is None
    # The pool takes its VFs with it.
    assert client.delete('/v1/pools/nic-vfs').status == 204
    assert client.get('/v1/devices?pool=%s' % pool['uuid']).status == 400
    assert [d['pool_uuid'] for d in client.get('/v1/devices').json[
        'devices']] == [inventory['gpu_pool']['uuid']] * 2


def test_short_pf_address_and_precreated(client, inventory):
    resp = client.post('/v1/pools', _pool(pf_address='41:00.1',
                                          vf_mode='precreated',
                                          vf_count=1), headers=V13)
    assert resp.status == 201, resp
    assert resp.json['sriov']['pf_address'] == '0000:41:00.1'
    assert resp.json['sriov']['vf_mode'] == 'precreated'


@pytest.mark.parametrize('change, status, words', [
    ({'sriov': {'host': 'compute-1', 'pf_address': '0000:41:00.0'}}, 400,
     "Invalid input for field 'sriov/vf_count': the field is required"),
    ({'sriov': dict(_pool()['sriov'], vf_count=0)}, 400, 'vf_count'),
    ({'sriov': dict(_pool()['sriov'], vf_count=257)}, 400, 'vf_count'),
    ({'sriov': dict(_pool()['sriov'], pf_address='41:00')}, 400,
     'pf_address'),
    ({'sriov': dict(_pool()['sriov'], pf_address='../../x')}, 400,
     'pf_address'),
    ({'sriov': dict(_pool()['sriov'], vf_mode='sometimes')}, 400,
     'vf_mode'),
    ({'sriov': dict(_pool()['sriov'], colour='red')}, 400, 'colour'),
    ({'sriov': dict(_pool()['sriov'], host='nope')}, 400,
     "Invalid input for field 'sriov/host': Host 'nope' not found"),
    ({'kind': 'gpu', 'device_class': None}, 400,
     'only pci pools can be made of SR-IOV virtual functions'),
])
def test_bad_input_is_refused_and_creates_nothing(client, inventory,
                                                  change, status, words):
    body = _pool()
    body.update(change)
    body = {k: v for k, v in body.items() if v is not None}
    resp = client.post('/v1/pools', body, headers=V13)
    assert resp.status == status, resp
    assert words in resp.error['detail']
    assert client.get('/v1/pools/nic-vfs').status == 404
    assert len(client.get('/v1/devices').json['devices']) == 2


def test_sriov_needs_microversion_1_3(client, inventory):
    resp = client.post('/v1/pools', _pool())
    assert resp.status == 400
    assert ("Invalid input for field 'sriov': unknown field"
            in resp.error['detail'])
    assert ('need API version 1.3 or later (header OpenStack-API-Version: '
            'composable 1.3)' in resp.error['detail'])
    assert client.get('/v1/pools/nic-vfs').status == 404


def test_host_on_another_fabric_is_refused(client, inventory):
    assert client.post('/v1/fabrics', {'name': 'fab2', 'driver': 'fake'}
                       ).status == 201
    resp = client.post('/v1/pools', dict(_pool(), fabric='fab2'),
                       headers=V13)
    assert resp.status == 400
    assert ('host compute-1 is on fabric fab1, not on the pool\'s fabric '
            'fab2') in resp.error['detail']


def test_a_pf_serves_one_pool(client, inventory):
    assert client.post('/v1/pools', _pool(), headers=V13).status == 201
    again = dict(_pool(), name='nic-vfs-2')
    resp = client.post('/v1/pools', again, headers=V13)
    assert resp.status == 409
    assert ('pool nic-vfs is already made of the virtual functions of '
            '0000:41:00.0 on host compute-1') in resp.error['detail']
    # Another PF of the same host is fine.
    again['sriov'] = dict(again['sriov'], pf_address='0000:41:00.1')
    assert client.post('/v1/pools', again, headers=V13).status == 201


def test_only_admins_make_them(client, inventory, member):
    resp = member.post('/v1/pools', _pool(), headers=V13)
    assert resp.status == 403
    assert client.get('/v1/pools/nic-vfs').status == 404


def test_their_devices_are_their_vfs(client, inventory):
    assert client.post('/v1/pools', _pool(), headers=V13).status == 201
    resp = client.post('/v1/devices', {'pool': 'nic-vfs', 'address': 'x'})
    assert resp.status == 400
    assert ('the devices of pool nic-vfs are the virtual functions of '
            '0000:41:00.0 on host compute-1') in resp.error['detail']
    vf = client.get('/v1/devices?pool=nic-vfs').json['devices'][0]
    resp = client.delete('/v1/devices/%s' % vf['uuid'])
    assert resp.status == 409
    assert 'take it out of service with state maintenance' in resp.error[
        'detail']
    resp = client.patch('/v1/devices/%s' % vf['uuid'],
                        {'state': 'maintenance'})
    assert resp.status == 200, resp
    assert client.get('/v1/pools/nic-vfs').json['total'] == 3
    # The host cannot go while its PF serves a pool.
    resp = client.delete('/v1/hosts/compute-1')
    assert resp.status == 409
    assert 'nic-vfs' in resp.error['detail']


def test_leases_take_one_vf_and_bind_to_its_host(client, inventory,
                                                 conductor, member):
    assert client.post('/v1/pools', _pool(), headers=V13).status == 201
    resp = member.post('/v1/leases', {'device_count': 2,
                                      'device_kind': 'nic'})
    assert resp.status == 400
    assert ('the nic pools give one SR-IOV virtual function per lease, '
            'not 2') in resp.error['detail']
    lease = member.post('/v1/leases', {'device_count': 1,
                                       'device_kind': 'nic'})
    assert lease.status == 201, lease
    assert lease.json['status'] == 'reserved'
    assert client.post('/v1/hosts', {'name': 'compute-2', 'fabric': 'fab1'}
                       ).status == 201
    url = '/v1/leases/%s' % lease.json['uuid']
    resp = member.post(url + '/bind', {'host': 'compute-2'})
    assert resp.status == 409
    assert ('holds a virtual function of 0000:41:00.0 on host compute-1 '
            '(pool nic-vfs); it can be bound to that host only'
            in resp.error['detail'])
    assert member.get(url).json['status'] == 'reserved'
    # A pool with a leased VF stays.
    resp = client.delete('/v1/pools/nic-vfs')
    assert resp.status == 409
    assert '1 of its virtual functions are leased' in resp.error['detail']


def test_a_lease_of_the_pool_takes_its_kind(client, inventory, conductor,
                                            member):
    """A lease naming the pool and no device_kind asks for what the
    pool holds (nic), not the gpu a lease naming no pool gets."""
    assert client.post('/v1/pools', _pool(), headers=V13).status == 201
    lease = member.post('/v1/leases', {'device_count': 1,
                                       'pools': ['nic-vfs']})
    assert lease.status == 201, lease
    assert lease.json['device_kind'] == 'nic'
    assert lease.json['status'] == 'reserved'
    assert client.get('/v1/pools/nic-vfs').json['used'] == 1
    # Without a pool the default is still gpu.
    gpu = member.post('/v1/leases', {'device_count': 1})
    assert gpu.status == 201 and gpu.json['device_kind'] == 'gpu'
    # A kind the pool does not hold, said explicitly, is refused.
    resp = member.post('/v1/leases', {'device_count': 1,
                                      'device_kind': 'gpu',
                                      'pools': ['nic-vfs']})
    assert resp.status == 400
    assert 'pool nic-vfs holds nic devices, not gpu' in resp.error['detail']
    # Pools of two kinds and no kind: the user says which.
    before = len(member.get('/v1/leases').json['leases'])
    resp = member.post('/v1/leases', {'device_count': 1,
                                      'pools': ['nic-vfs', 'gpu1']})
    assert resp.status == 400
    assert ("Invalid input for field 'device_kind': the pools named hold "
            "devices of several kinds (gpu, nic); say which one the lease "
            "asks for") in resp.error['detail']
    assert len(member.get('/v1/leases').json['leases']) == before


def test_responses_match_the_document(client, inventory):
    with open(test_openapi.DOC_PATH) as f:
        doc = yaml.safe_load(f)
    check = test_openapi.Checker(doc)
    check(client.post('/v1/pools', _pool(), headers=V13), '/v1/pools',
          'POST')
    check(client.post('/v1/pools', _pool(), headers=V13), '/v1/pools',
          'POST')
    check(client.get('/v1/pools/nic-vfs', headers=V13),
          '/v1/pools/{pool_ident}', 'GET')
    check(client.get('/v1/pools', headers=V13), '/v1/pools', 'GET')
    assert ('/v1/pools', 'POST', '409') in check.seen


def test_api_ref_samples_are_valid():
    samples = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir,
                           os.pardir, 'api-ref', 'source', 'samples')
    with open(os.path.join(samples, 'pool-create-sriov-req.json')) as f:
        jsonschema.validate(json.load(f), pool_schema.CREATE['1.3'])
    with open(test_openapi.DOC_PATH) as f:
        doc = yaml.safe_load(f)
    with open(os.path.join(samples, 'pool-create-sriov-resp.json')) as f:
        jsonschema.Draft7Validator(test_openapi.to_json_schema(
            doc, doc['components']['schemas']['Pool'])).validate(json.load(f))
