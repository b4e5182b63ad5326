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

"""Lease usage (microversion 1.1) and elastic leases (1.2) through the
API, with a real conductor and agents serving RPC in this process."""

import datetime
import time

import pytest

from composable.common import context as ctx_mod
from composable.common import utils as common_utils
from composable.conductor import rpcapi
from composable.db import api as db_api

V10 = {'OpenStack-API-Version': 'composable 1.0'}
V11 = {'OpenStack-API-Version': 'composable 1.1'}
V12 = {'OpenStack-API-Version': 'composable 1.2'}

ELASTIC = {'min_mb': 1024, 'max_mb': 4096, 'observation_window': 300,
           'prediction_window': 60}


@pytest.fixture
def member(client):
    return client.as_('member')


def _bound_lease(member, memory_mb=2048):
    lease = member.post('/v1/leases', {'memory_mb': memory_mb}).json
    url = '/v1/leases/%s' % lease['uuid']
    assert member.post(url + '/bind', {'host': 'compute-1'}).status == 202
    deadline = time.monotonic() + 30
    while member.get(url).json['status'] != 'bound':
        assert time.monotonic() < deadline, member.get(url).json
        time.sleep(0.05)
    return lease['uuid']


def _report(host, samples):
    rpcapi.ConductorAPI().report_lease_usage(
        ctx_mod.get_admin_context(), host, samples)


def _stored(lease_uuid):
    lease = db_api.lease_get(ctx_mod.get_admin_context(), lease_uuid)
    return db_api.usage_list(ctx_mod.get_admin_context(), lease.id)


def _wait_stored(lease_uuid, count, timeout=30):
    deadline = time.monotonic() + timeout
    while len(_stored(lease_uuid)) < count:
        assert time.monotonic() < deadline, _stored(lease_uuid)
        time.sleep(0.05)


def _at(seconds_ago):
    return common_utils.isotime(common_utils.utcnow() -
                                datetime.timedelta(seconds=seconds_ago))


def test_usage_reported_and_shown(client, inventory, conductor, member):
    uuid = _bound_lease(member)
    samples = [{'lease_uuid': uuid, 'taken_at': _at(50 - i * 10),
                'used_mb': 100 * i, 'size_mb': 2048} for i in range(5)]
    _report('compute-1', samples)
    _wait_stored(uuid, 5)
    url = '/v1/leases/%s/usage' % uuid

    # Not in 1.0: the route is there but not for that version.
    resp = member.get(url, headers=V10)
    assert resp.status == 404
    assert resp.error['code'] == 'composable.microversion.not_available'
    assert 'composable 1.1' in resp.error['detail']

    resp = member.get(url, headers=V11)
    assert resp.status == 200, resp
    assert resp.json['lease_uuid'] == uuid
    assert [s['used_mb'] for s in resp.json['usage']] == [
        0, 100, 200, 300, 400]
    assert all(s['size_mb'] == 2048 for s in resp.json['usage'])
    assert 'links' not in resp.json

    # Pages follow each other without gap or overlap.
    seen = []
    page = member.get(url + '?limit=2', headers=V11).json
    while True:
        seen.extend(s['used_mb'] for s in page['usage'])
        if 'links' not in page:
            break
        href = page['links'][0]['href'].replace('http://localhost', '')
        page = member.get(href, headers=V11).json
    assert seen == [0, 100, 200, 300, 400]

    since = member.get(url + '?since=%s' % _at(25), headers=V11).json
    assert [s['used_mb'] for s in since['usage']] == [300, 400]


def test_usage_visibility_and_bad_queries(client, inventory, conductor,
                                          member):
    uuid = _bound_lease(member)
    url = '/v1/leases/%s/usage' % uuid
    # Another project's lease does not exist for the caller.
    resp = client.as_('other_member').get(url, headers=V11)
    assert resp.status == 404
    assert resp.error['code'] == 'composable.lease.not_found'
    assert client.as_('reader').get(url, headers=V11).status == 200
    assert client.get(url, headers=V11).status == 200
    for query, field in (('limit=0', 'limit'), ('limit=x', 'limit'),
                         ('marker=abc', 'marker'),
                         ('since=yesterday', 'since'),
                         ('colour=red', 'colour')):
        resp = member.get(url + '?' + query, headers=V11)
        assert resp.status == 400, (query, resp)
        assert field in resp.error['detail'], (query, resp)
    resp = member.get(url + '?marker=999999', headers=V11)
    assert resp.status == 400
    assert 'not a sample of this lease' in resp.error['detail']


def test_samples_of_other_hosts_and_malformed_ones_are_dropped(
        client, inventory, conductor, member):
    uuid = _bound_lease(member)
    unbound = member.post('/v1/leases', {'memory_mb': 1024}).json['uuid']
    good = {'lease_uuid': uuid, 'taken_at': _at(5), 'used_mb': 10,
            'size_mb': 2048}
    _report('compute-2', [dict(good, used_mb=1)])
    _report('compute-1', [
        dict(good, lease_uuid=unbound, used_mb=2),
        dict(good, lease_uuid='6f0c8a5e-0000-4000-8000-000000000000',
             used_mb=3),
        dict(good, used_mb=-1), dict(good, used_mb=4096),
        dict(good, taken_at='not a time'), {'lease_uuid': uuid},
        dict(good, used_mb='7'), 'junk', good])
    _wait_stored(uuid, 1)
    # The good sample came last in the last cast: once it is stored,
    # every earlier one was seen and dropped.
    assert [s.used_mb for s in _stored(uuid)] == [10]
    assert _stored(unbound) == []


def test_create_elastic_lease(client, inventory, conductor, member):
    body = {'memory_mb': 2048, 'elastic': ELASTIC}
    # Before 1.2 the field is unknown.
    resp = member.post('/v1/leases', body, headers=V11)
    assert resp.status == 400
    assert "'elastic'" in resp.error['detail']
    resp = member.post('/v1/leases', body, headers=V12)
    assert resp.status == 201, resp
    lease = resp.json
    assert lease['elastic'] == dict(ELASTIC, headroom=0.2)
    url = '/v1/leases/%s' % lease['uuid']
    assert member.get(url, headers=V12).json['elastic'] == lease['elastic']
    assert 'elastic' not in member.get(url, headers=V11).json
    plain = member.post('/v1/leases', {'memory_mb': 1024},
                        headers=V12).json
    assert plain['elastic'] is None


@pytest.mark.parametrize('body, expected', [
    ({'memory_mb': 2048, 'elastic': dict(ELASTIC, min_mb=4096,
                                         max_mb=2048)},
     "'elastic/min_mb': 4096 is more than max_mb 2048"),
    ({'memory_mb': 8192, 'elastic': ELASTIC},
     "an elastic lease starts within [min_mb, max_mb] = [1024, 4096]"),
    ({'memory_mb': 2048, 'elastic': dict(ELASTIC, observation_window=0)},
     "'elastic/observation_window': 0 is less than the minimum of 10"),
    ({'memory_mb': 2048, 'elastic': dict(ELASTIC,
                                         prediction_window=10 ** 7)},
     "'elastic/prediction_window': 10000000 is greater than the maximum"),
    ({'memory_mb': 2048, 'elastic': dict(ELASTIC, headroom=-0.5)},
     "'elastic/headroom'"),
    ({'memory_mb': 2048, 'elastic': {'min_mb': 1024}},
     "the field is required"),
    ({'device_count': 1, 'elastic': ELASTIC},
     "only a memory lease can be elastic"),
    ({'memory_mb': 2048, 'device_count': 1, 'elastic': ELASTIC},
     "an elastic lease holds memory only"),
    ({'memory_mb': 2048, 'pools': ['mem1'],
      'elastic': dict(ELASTIC, max_mb=4000)},
     "'elastic/max_mb': 4000 is not a whole number of the 1024 MiB "
     "extents of pool mem1"),
    # Checked by the conductor: no pool named, none fits.
    ({'memory_mb': 2048, 'elastic': dict(ELASTIC, min_mb=1000)},
     "no memory pool can hold an elastic lease of 1000 to 4096 MiB"),
])
def test_create_elastic_refused(client, inventory, conductor, member, body,
                                expected):
    before = member.get('/v1/leases').json['leases']
    resp = member.post('/v1/leases', body, headers=V12)
    assert resp.status == 400, resp
    assert expected in resp.error['detail'], resp.error['detail']
    # Nothing was created.
    assert member.get('/v1/leases').json['leases'] == before


def test_responses_match_the_openapi_document(client, inventory, conductor,
                                              member):
    import yaml

    from tests.unit.api import test_openapi

    with open(test_openapi.DOC_PATH) as f:
        doc = yaml.safe_load(f)
    check = test_openapi.Checker(doc)
    usage = '/v1/leases/{lease_ident}/usage'
    uuid = _bound_lease(member)
    _report('compute-1', [{'lease_uuid': uuid, 'taken_at': _at(i),
                           'used_mb': i, 'size_mb': 2048}
                          for i in (3, 2, 1)])
    _wait_stored(uuid, 3)
    url = '/v1/leases/%s/usage' % uuid
    page = check(member.get(url + '?limit=2', headers=V11), usage,
                 'GET').json
    assert len(page['usage']) == 2 and page['links']
    check(member.get(url, headers=V10), usage, 'GET')
    check(member.get(url + '?limit=0', headers=V11), usage, 'GET')
    check(client.as_('other_member').get(url, headers=V11), usage, 'GET')
    # Leases with and without an elastic policy, in 1.2.
    created = check(member.post('/v1/leases', {
        'memory_mb': 1024, 'elastic': ELASTIC}, headers=V12),
        '/v1/leases', 'POST').json
    check(member.get('/v1/leases/%s' % created['uuid'], headers=V12),
          '/v1/leases/{lease_ident}', 'GET')
    check(member.get('/v1/leases/%s' % uuid, headers=V12),
          '/v1/leases/{lease_ident}', 'GET')
    assert {(usage, 'GET', status) for status in ('200', '400', '404')} <= \
        check.seen


def test_api_reference_sample_is_valid():
    import json
    import os

    from composable.api import microversion
    from composable.api.schemas import lease as schema
    from composable.api import validation

    path = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir,
                        os.pardir, 'api-ref', 'source', 'samples',
                        'lease-create-elastic-req.json')
    with open(path) as f:
        validation.validate(microversion.select((1, 2), schema.CREATE),
                            json.load(f))
