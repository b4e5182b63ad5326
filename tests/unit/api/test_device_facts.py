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

"""What the fabric says of a device through the API (microversion 1.4):
serial, health and the hosts that can reach it; and binds that honour
the last, with a real conductor serving RPC in this process."""

import json
import os
import threading
import time

import jsonschema
import pytest
import yaml

from composable.common import context as composable_context
from composable.db import api as db_api
from tests.unit.api import test_openapi

V13 = {'OpenStack-API-Version': 'composable 1.3'}
V14 = {'OpenStack-API-Version': 'composable 1.4'}
FACTS = ('serial', 'health', 'health_reason', 'reachable_hosts')


def _set(device_uuid, **values):
    ctx = composable_context.get_admin_context()
    device = db_api.device_get(ctx, device_uuid)
    db_api.device_set_facts(ctx, device.id, values)


@pytest.fixture
def doc():
    with open(test_openapi.DOC_PATH) as f:
        return yaml.safe_load(f)


def test_facts_are_shown_from_1_4_on(client, inventory, doc):
    first, second = (d['uuid'] for d in inventory['devices'])
    _set(first, serial='GPU-SN-1', health='warning',
         health_reason='the fabric reports its health as warning',
         reachable_hosts=['compute-1'])
    check = test_openapi.Checker(doc)
    for headers in ({}, V13):
        shown = client.get('/v1/devices/%s' % first, headers=headers).json
        assert not set(FACTS) & set(shown)
    shown = check(client.get('/v1/devices/%s' % first, headers=V14),
                  '/v1/devices/{device_ident}', 'GET').json
    assert {k: shown[k] for k in FACTS} == {
        'serial': 'GPU-SN-1', 'health': 'warning',
        'health_reason': 'the fabric reports its health as warning',
        'reachable_hosts': ['compute-1']}
    listed = check(client.get('/v1/devices', headers=V14), '/v1/devices',
                   'GET').json['devices']
    # Never reported by a fabric inventory: null everywhere, and null
    # reachable hosts is every host of the fabric.
    other, = [d for d in listed if d['uuid'] == second]
    assert {k: other[k] for k in FACTS} == dict.fromkeys(FACTS)


def test_api_ref_samples_show_the_facts(doc):
    samples = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir,
                           os.pardir, 'api-ref', 'source', 'samples')
    schema = test_openapi.to_json_schema(
        doc, doc['components']['schemas']['Device'])
    for name in ('device-show-resp.json', 'device-create-resp.json',
                 'device-update-resp.json', 'devices-list-resp.json'):
        with open(os.path.join(samples, name)) as f:
            body = json.load(f)
        for device in body.get('devices', [body]):
            jsonschema.Draft7Validator(schema).validate(device)
            assert set(FACTS) <= set(device), name


def _wait(client, lease_uuid, statuses, timeout=30):
    deadline = time.monotonic() + timeout
    while True:
        lease = client.get('/v1/leases/%s' % lease_uuid).json
        if lease['status'] in statuses:
            return lease
        assert time.monotonic() < deadline, lease
        time.sleep(0.05)


def test_binds_racing_for_the_last_device_the_host_reaches(
        client, inventory, conductor):
    """Two leases hold devices compute-1 cannot reach; one free device
    reaches it. Both bind to compute-1 at once: one is traded that
    device and bound, the other is refused with 409 and keeps its
    device."""
    member = client.as_('member')
    assert client.post('/v1/hosts', {'name': 'compute-2',
                                     'fabric': 'fab1'}).status == 201
    third = client.post('/v1/devices', {
        'pool': 'gpu1', 'address': 'slot-3', 'name': 'g3', 'model': 'A100',
        'vendor_id': '10de', 'product_id': '20b0'}).json
    leases = [member.post('/v1/leases', {'device_count': 1}).json
              for _ in range(2)]
    held = {lease['devices'][0]['uuid'] for lease in leases}
    assert held == {d['uuid'] for d in inventory['devices']}
    for uuid in held:
        _set(uuid, reachable_hosts=['compute-2'])
    _set(third['uuid'], reachable_hosts=['compute-1'])

    results = {}
    barrier = threading.Barrier(2)

    def bind(lease):
        barrier.wait()
        results[lease['uuid']] = member.post(
            '/v1/leases/%s/bind' % lease['uuid'], {'host': 'compute-1'})

    threads = [threading.Thread(target=bind, args=(lease,))
               for lease in leases]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    statuses = sorted(r.status for r in results.values())
    assert statuses == [202, 409], results
    won, = [u for u, r in results.items() if r.status == 202]
    lost, = [u for u, r in results.items() if r.status == 409]
    detail = results[lost].error['detail']
    assert 'host compute-1 cannot reach device' in detail
    assert 'pool gpu1 has no free device that host can reach' in detail
    bound = _wait(member, won, ['bound', 'bind_failed'])
    assert bound['status'] == 'bound', bound['fault']
    assert [d['uuid'] for d in bound['devices']] == [third['uuid']]
    refused = member.get('/v1/leases/%s' % lost).json
    assert refused['status'] == 'reserved'
    assert refused['devices'][0]['uuid'] in held
    assert client.get('/v1/pools/gpu1').json['used'] == 2
