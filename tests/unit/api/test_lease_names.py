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

"""Lease names: one live lease of a project per name; a released lease
keeps its name as history, reachable by UUID only, and the name is free
for a new lease."""

import pytest

from tests import concurrency
from tests.unit.api.test_leases import _wait


@pytest.fixture
def member(client):
    return client.as_('member')


def _name_in_use(resp, name):
    assert resp.status == 409, resp
    assert resp.error['code'] == 'composable.lease.name_in_use'
    assert 'A lease named %s already exists' % name in resp.error['detail']


def test_a_live_name_is_unique_in_its_project(client, inventory, conductor,
                                              member):
    first = member.post('/v1/leases', {'name': 'my-memory',
                                       'memory_mb': 1024})
    assert first.status == 201, first
    _name_in_use(member.post('/v1/leases', {'name': 'my-memory',
                                            'memory_mb': 1024}),
                 'my-memory')
    # Nothing was made, nothing claimed.
    assert len(member.get('/v1/leases').json['leases']) == 1
    assert client.get('/v1/pools/mem1').json['used'] == 1024
    # Another project has names of its own.
    other = client.as_('other_member').post(
        '/v1/leases', {'name': 'my-memory', 'memory_mb': 1024})
    assert other.status == 201, other
    assert member.get('/v1/leases/my-memory').json['uuid'] == \
        first.json['uuid']
    # A deferred lease (created without claiming) holds its name too.
    _name_in_use(member.post('/v1/leases', {
        'name': 'my-memory', 'memory_mb': 1024,
        'start_at': '2099-01-01T00:00:00Z'}), 'my-memory')
    # A rename to a live name is refused the same way; unnamed leases
    # never collide.
    second = member.post('/v1/leases', {'memory_mb': 1024}).json
    assert member.post('/v1/leases', {'memory_mb': 1024}).status == 201
    _name_in_use(member.patch('/v1/leases/%s' % second['uuid'],
                              {'name': 'my-memory'}), 'my-memory')
    assert member.get('/v1/leases/%s' % second['uuid']).json['name'] is None
    resp = member.patch('/v1/leases/%s' % second['uuid'], {'name': 'm2'})
    assert resp.status == 200, resp
    assert member.get('/v1/leases/m2').json['uuid'] == second['uuid']


@pytest.mark.parametrize('bind', [False, True])
def test_a_released_lease_frees_its_name(client, inventory, conductor,
                                         member, bind):
    old = member.post('/v1/leases', {'name': 'my-memory',
                                     'memory_mb': 1024}).json
    if bind:
        # Released through the conductor's flows rather than the short
        # release of an unbound lease.
        resp = member.post('/v1/leases/my-memory/bind', {'host': 'compute-1'})
        assert resp.status == 202, resp
        assert _wait(member, old['uuid'], ['bound', 'bind_failed'])[
            'status'] == 'bound'
    assert member.delete('/v1/leases/my-memory').status == 204
    assert _wait(member, old['uuid'], ['released'])['status'] == 'released'
    resp = member.get('/v1/leases/my-memory')
    assert resp.status == 404, resp
    new = member.post('/v1/leases', {'name': 'my-memory', 'memory_mb': 1024})
    assert new.status == 201, new
    new = new.json
    # By name: the live lease, for show and delete; by UUID: either.
    assert member.get('/v1/leases/my-memory').json['uuid'] == new['uuid']
    assert member.get('/v1/leases/%s' % old['uuid']).json['status'] == \
        'released'
    assert member.get('/v1/leases/my-memory/actions').status == 200
    assert member.delete('/v1/leases/my-memory').status == 204
    assert _wait(member, new['uuid'], ['released'])['status'] == 'released'
    assert member.get('/v1/leases/my-memory').status == 404
    # Both are history, listed when asked for.
    released = member.get('/v1/leases?status=released').json['leases']
    assert sorted(x['uuid'] for x in released) == sorted(
        [old['uuid'], new['uuid']])
    assert {x['name'] for x in released} == {'my-memory'}
    # A released lease may be renamed (history), without taking a name.
    resp = member.patch('/v1/leases/%s' % old['uuid'], {'name': 'again'})
    assert resp.status == 200, resp
    assert member.post('/v1/leases', {'name': 'again',
                                      'memory_mb': 1024}).status == 201


def test_two_creates_of_one_name_at_once(client, inventory, conductor,
                                         member):
    def create(i):
        return member.post('/v1/leases', {'name': 'race', 'memory_mb': 1024})

    for attempt in range(3):
        results = concurrency.run_concurrently(4, create)
        statuses = sorted(r.status for r in results)
        assert statuses == [201, 409, 409, 409], results
        for resp in results:
            if resp.status == 409:
                _name_in_use(resp, 'race')
        live = member.get('/v1/leases?name=race').json['leases']
        assert len(live) == 1
        assert member.delete('/v1/leases/race').status == 204
        _wait(member, live[0]['uuid'], ['released'])
    assert client.get('/v1/pools/mem1').json['used'] == 0
