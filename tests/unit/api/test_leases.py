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

"""Leases through the API, with a real conductor (and agents) serving
RPC in this process."""

import datetime
import threading
import time

import pytest

from composable.common import states
from composable.common import utils as common_utils


def _wait(client, lease_uuid, statuses, timeout=20):
    deadline = time.time() + timeout
    while True:
        lease = client.get('/v1/leases/%s' % lease_uuid).json
        if lease['status'] in statuses:
            return lease
        if time.time() > deadline:
            raise AssertionError('lease stayed %s' % lease['status'])
        time.sleep(0.05)


def _iso(delta_seconds):
    return common_utils.isotime(common_utils.utcnow() +
                                datetime.timedelta(seconds=delta_seconds))


@pytest.fixture
def member(client):
    return client.as_('member')


def test_create_memory_lease(client, inventory, conductor, member):
    resp = member.post('/v1/leases', {'name': 'l1', 'memory_mb': 2048,
                                      'description': 'swap'})
    assert resp.status == 201, resp
    lease = resp.json
    assert resp.headers['Location'] == lease['links'][0]['href']
    assert lease['status'] == 'reserved'
    assert lease['project_id'] == 'project-a'
    assert lease['user_id'] == 'user-member'
    assert lease['memory_pool_uuid'] == inventory['memory_pool']['uuid']
    assert sum(e['size_mb'] for e in lease['extents']) == 2048
    for extent in lease['extents']:
        assert 'target_iqn' not in extent and 'lun' not in extent
        assert extent['memory_node'] in ('mn1', 'mn2')
    assert 'chap' not in resp.text
    admin_view = client.get('/v1/leases/%s' % lease['uuid']).json
    assert all('target_iqn' in e and 'lun' in e
               for e in admin_view['extents'])
    assert 'chap_secret' not in client.get(
        '/v1/leases/%s' % lease['uuid']).text
    assert member.get('/v1/leases/l1').json['uuid'] == lease['uuid']
    assert client.get('/v1/pools/mem1').json['used'] == 2048


@pytest.mark.parametrize('who', ['member', 'admin'])
@pytest.mark.parametrize('body', [
    {'memory_mb': 2048, 'device_count': 1, 'name': 'both'},
    {'memory_mb': 999999, 'name': 'too-big-for-free'},
], ids=['reserved', 'alloc_failed'])
def test_create_answer_is_what_get_shows(client, inventory, conductor,
                                         member, who, body):
    # The create answer is built by the conductor from the rows it wrote,
    # not read back: it must be exactly what a read shows afterwards.
    caller = member if who == 'member' else client
    if body['memory_mb'] > 4096:
        # The whole pool, once part of it is taken: allowed, not placed.
        total = client.get('/v1/pools/mem1').json['total']
        body = dict(body, memory_mb=total)
        assert caller.post('/v1/leases', {'memory_mb': 1024}).status == 201
    resp = caller.post('/v1/leases', body)
    assert resp.status == 201, resp
    created = resp.json
    shown = caller.get('/v1/leases/%s' % created['uuid']).json
    assert created == shown
    assert created['status'] == ('reserved' if body['name'] == 'both'
                                 else 'alloc_failed')
    if created['status'] == 'reserved':
        assert created['extents'] and created['devices']
        assert created['devices'][0]['state'] == 'reserved'
        assert ('address' in created['devices'][0]) == (who == 'admin')
        assert ('target_iqn' in created['extents'][0]) == (who == 'admin')


def test_create_device_lease(client, inventory, conductor, member):
    resp = member.post('/v1/leases', {'device_count': 1})
    assert resp.status == 201, resp
    lease = resp.json
    assert lease['status'] == 'reserved'
    assert lease['device_kind'] == 'gpu'
    assert lease['device_pool_uuid'] == inventory['gpu_pool']['uuid']
    assert len(lease['devices']) == 1
    assert 'address' not in lease['devices'][0]
    admin_view = client.get('/v1/leases/%s' % lease['uuid']).json
    assert admin_view['devices'][0]['address'].startswith('slot-')
    device = client.get('/v1/devices/%s' % lease['devices'][0]['uuid']).json
    assert device['lease_uuid'] == lease['uuid']


def test_device_already_leased(client, inventory, conductor, member):
    device = inventory['devices'][0]['uuid']
    resp = member.post('/v1/leases', {'device_uuids': [device]})
    assert resp.status == 201, resp
    assert resp.json['devices'][0]['uuid'] == device
    resp = member.post('/v1/leases', {'device_uuids': [device]})
    assert resp.status == 409
    assert resp.error['code'] == 'composable.device.leased'
    assert len(member.get('/v1/leases').json['leases']) == 1
    other = client.as_('other_member').post('/v1/leases',
                                            {'device_uuids': [device]})
    assert other.status == 409
    # Another project's lease uuid is not revealed.
    assert resp.json['errors'][0]['detail'] != other.error['detail']
    assert 'another project' in other.error['detail']


def test_not_enough_free_capacity(client, inventory, conductor, member):
    assert member.post('/v1/leases', {'memory_mb': 8192}).status == 201
    resp = member.post('/v1/leases', {'memory_mb': 16384})
    assert resp.status == 201, resp
    assert resp.json['status'] == 'alloc_failed'
    assert resp.json['fault']


def test_future_start_is_requested(client, inventory, conductor, member):
    resp = member.post('/v1/leases', {'memory_mb': 1024,
                                      'start_at': _iso(3600),
                                      'end_at': _iso(7200)})
    assert resp.status == 201, resp
    assert resp.json['status'] == 'requested'
    assert resp.json['start_at'].endswith('Z')


@pytest.mark.parametrize('body, expected', [
    ({}, 'at least one of memory_mb'),
    ({'memory_mb': -1},
     "Invalid input for field 'memory_mb': -1 is less than the minimum of "
     "1"),
    ({'memory_mb': 2 ** 41}, "Invalid input for field 'memory_mb': "),
    ({'memory_mb': 1000}, 'multiple'),
    ({'memory_mb': 32768}, 'largest memory pool'),
    ({'memory_mb': 1024, 'pools': ['nope']},
     "Invalid input for field 'pools': Pool 'nope' not found"),
    ({'memory_mb': 1024, 'pools': ['gpu1']}, "'pools'"),
    ({'device_count': 1, 'pools': ['mem1']}, "'pools'"),
    ({'device_count': 3}, 'largest gpu pool'),
    ({'device_count': 4097}, "'device_count'"),
    ({'device_count': 1, 'device_kind': 'fpga'}, "'device_kind'"),
    ({'device_uuids': ['9d5a1a5e-0e9b-4c3c-9b4e-2b1f2a1d2c3b']},
     "Device '9d5a1a5e-0e9b-4c3c-9b4e-2b1f2a1d2c3b' not found"),
    ({'device_uuids': ['not-a-uuid']}, "'device_uuids/0'"),
    ({'memory_mb': 1024, 'end_at': '2001-01-01T00:00:00Z'}, "'end_at'"),
    ({'memory_mb': 1024, 'start_at': '2100-01-02T00:00:00Z',
      'end_at': '2100-01-01T00:00:00Z'}, 'after start_at'),
    ({'memory_mb': 1024, 'start_at': 'tomorrow'}, "'start_at'"),
    ({'memory_mb': 1024, 'attach_mode': 'both'}, "'attach_mode'"),
    ({'memory_mb': 1024, 'size': 1}, "'size'"),
    ({'memory_mb': 1024, 'device_traits': ['CUSTOM_']}, "'device_traits'"),
])
def test_create_validation(client, inventory, conductor, body, expected):
    # Shape and references are checked by the API, the fit in the pools
    # by the conductor: either way, nothing is created.
    resp = client.as_('member').post('/v1/leases', body)
    assert resp.status == 400, resp
    assert resp.error['code'] == 'composable.invalid'
    assert expected in resp.error['detail']
    # Nothing was created, nothing claimed.
    assert client.get('/v1/leases?all_projects=true&status=%s' % ','.join(
        sorted(states.ALL_STATES))).json['leases'] == []
    assert all(p['used'] == 0 for p in client.get('/v1/pools').json['pools'])


@pytest.mark.parametrize('body, expected', [
    ({'memory_mb': 1000}, 'multiple'),
    ({'memory_mb': 32768}, 'largest memory pool'),
    ({'device_count': 3}, 'largest gpu pool'),
    ({'device_count': 1, 'device_kind': 'fpga'}, "'device_kind'"),
    ({'memory_mb': 1024, 'device_count': 3}, 'largest gpu pool'),
    ({'memory_mb': 1024, 'device_count': 1, 'device_kind': 'fpga'},
     "'device_kind'"),
])
@pytest.mark.parametrize('start', ['now', 'later'])
def test_create_checked_by_the_conductor(client, inventory, conductor, body,
                                         expected, start):
    """The conductor refuses a request no pool could ever hold, for
    leases that start now or later, and creates nothing."""
    if start == 'later':
        body = dict(body, start_at=_iso(3600))
    resp = client.as_('member').post('/v1/leases', body)
    assert resp.status == 400, resp
    assert expected in resp.error['detail']
    assert client.get('/v1/leases?all_projects=true&status=%s' % ','.join(
        sorted(states.ALL_STATES))).json['leases'] == []
    assert all(p['used'] == 0 for p in client.get('/v1/pools').json['pools'])


def test_update_lease(client, inventory, conductor, member):
    lease = member.post('/v1/leases', {'memory_mb': 1024}).json
    end = _iso(3600)
    resp = member.patch('/v1/leases/%s' % lease['uuid'], {
        'name': 'renamed', 'description': 'd', 'end_at': end})
    assert resp.status == 200, resp
    assert resp.json['name'] == 'renamed'
    assert resp.json['end_at'] == end
    resp = member.patch('/v1/leases/renamed', {'end_at': _iso(-10)})
    assert resp.status == 400
    resp = member.patch('/v1/leases/renamed', {'status': 'bound'})
    assert resp.status == 400
    assert "'status'" in resp.error['detail']


def test_patches_at_once_of_different_fields_all_land(client, inventory,
                                                      conductor, member):
    # Each PATCH is one conductor call under the lease's reservation: the
    # others wait for it, none is refused or lost.
    lease = member.post('/v1/leases', {'memory_mb': 1024}).json
    url = '/v1/leases/%s' % lease['uuid']
    end = _iso(3600)
    bodies = [{'name': 'raced'}, {'description': 'both'}, {'end_at': end}]
    answers = []
    barrier = threading.Barrier(len(bodies))

    def patch(body):
        barrier.wait()
        answers.append(member.patch(url, body).status)

    threads = [threading.Thread(target=patch, args=(body,))
               for body in bodies]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
        assert not thread.is_alive()
    assert answers == [200] * len(bodies)
    after = member.get(url).json
    assert (after['name'], after['description'], after['end_at']) == (
        'raced', 'both', end)


def test_patch_lands_whole_or_not_at_all(client, inventory, conductor,
                                         member):
    member.post('/v1/leases', {'memory_mb': 1024, 'name': 'taken'})
    lease = member.post('/v1/leases', {'memory_mb': 1024, 'name': 'mine',
                                       'description': 'before'}).json
    url = '/v1/leases/%s' % lease['uuid']
    # The name is refused: the end and the description stay as they were.
    resp = member.patch(url, {'name': 'taken', 'description': 'after',
                              'end_at': _iso(3600)})
    assert resp.status == 409, resp
    assert resp.error['code'] == 'composable.lease.name_in_use'
    # The end is refused: so is the name given with it.
    resp = member.patch(url, {'name': 'other', 'end_at': _iso(-10)})
    assert resp.status == 400, resp
    assert "'end_at'" in resp.error['detail']
    assert 'is not in the future' in resp.error['detail']
    after = member.get(url).json
    assert (after['name'], after['description'], after['end_at']) == (
        'mine', 'before', None)


def test_delete_lease(client, inventory, conductor, member):
    lease = member.post('/v1/leases', {'memory_mb': 2048}).json
    resp = member.delete('/v1/leases/%s' % lease['uuid'])
    assert resp.status == 204, resp
    assert resp.text == ''
    done = _wait(member, lease['uuid'], ['released'])
    assert done['status'] == 'released'
    assert member.get('/v1/leases').json['leases'] == []
    released = member.get('/v1/leases?status=released').json['leases']
    assert [x['uuid'] for x in released] == [lease['uuid']]
    resp = member.delete('/v1/leases/%s' % lease['uuid'])
    assert resp.status == 409
    assert resp.error['code'] == 'composable.lease.invalid_state'
    assert 'released already' in resp.error['detail']
    assert client.get('/v1/pools/mem1').json['used'] == 0
    actions = member.get('/v1/leases/%s/actions' % lease['uuid']).json
    assert [a['action'] for a in actions['actions']] == ['create', 'delete']
    assert actions['actions'][0]['result'] == 'success'
    assert actions['actions'][0]['start_time'].endswith('Z')


def test_bind_and_unbind(client, inventory, conductor, member):
    lease = member.post('/v1/leases', {'device_count': 1}).json
    url = '/v1/leases/%s' % lease['uuid']
    resp = member.post(url + '/bind', {})
    assert resp.status == 400
    assert "'host'" in resp.error['detail']
    # A server without a host: where it runs is Nova's to say, and this
    # composable has no [nova] section to ask.
    resp = member.post(url + '/bind', {
        'server': '9d5a1a5e-0e9b-4c3c-9b4e-2b1f2a1d2c3b'})
    assert resp.status == 400
    assert 'give the host to bind to' in resp.error['detail']
    assert '[nova]' in resp.error['detail']
    assert member.get(url).json['status'] == 'reserved'
    resp = member.post(url + '/bind', {'host': 'nope'})
    assert resp.status == 400
    assert resp.error['detail'] == (
        "Invalid input for field 'host': Host 'nope' not found")
    resp = member.post(url + '/unbind')
    assert resp.status == 409
    assert 'not bound' in resp.error['detail']

    resp = member.post(url + '/bind', {'host': 'compute-1'})
    assert resp.status == 202, resp
    assert resp.json['status'] in ('binding', 'bound')
    assert resp.json['host'] == 'compute-1'
    bound = _wait(member, lease['uuid'], ['bound', 'bind_failed'])
    assert bound['status'] == 'bound', bound['fault']
    resp = member.post(url + '/bind', {'host': 'compute-1'})
    assert resp.status == 409
    assert 'unbind it first' in resp.error['detail']

    resp = member.post(url + '/unbind', raw=b'')
    assert resp.status == 202, resp
    assert resp.json['status'] in ('unbinding', 'reserved')
    _wait(member, lease['uuid'], ['reserved'])


def test_bind_host_of_other_fabric(client, inventory, conductor, member):
    assert client.post('/v1/fabrics', {'name': 'fab2', 'driver': 'fake'}
                       ).status == 201
    assert client.post('/v1/hosts', {'name': 'far', 'fabric': 'fab2'}
                       ).status == 201
    lease = member.post('/v1/leases', {'device_count': 1}).json
    resp = member.post('/v1/leases/%s/bind' % lease['uuid'],
                       {'host': 'far'})
    assert resp.status == 409
    # The conductor's refusal, checked under the lease's reservation.
    assert resp.error['code'] == 'composable.conflict'
    assert ("host far is on fabric fab2, but the resources of lease %s "
            "are on fabric fab1; bind it to a host of that fabric"
            % lease['uuid']) in resp.error['detail']
    _assert_not_bound(member, lease['uuid'])


def _assert_not_bound(member, uuid):
    after = member.get('/v1/leases/%s' % uuid).json
    assert (after['status'], after['host']) == ('reserved', None)
    actions = member.get('/v1/leases/%s/actions' % uuid).json['actions']
    assert 'bind' not in [a['action'] for a in actions]


@pytest.mark.parametrize('where', ['body', 'lease'])
def test_bind_in_guest_mode_needs_a_server(client, inventory, conductor,
                                           member, where):
    body = {'memory_mb': 1024}
    if where == 'lease':
        body['attach_mode'] = 'guest'
    lease = member.post('/v1/leases', body).json
    bind = {'host': 'compute-1'}
    if where == 'body':
        bind['attach_mode'] = 'guest'
    resp = member.post('/v1/leases/%s/bind' % lease['uuid'], bind)
    assert resp.status == 400, resp
    assert resp.error['code'] == 'composable.invalid'
    assert ("Invalid input for field 'server': attach_mode guest attaches "
            "to a server; give its UUID") in resp.error['detail']
    _assert_not_bound(member, lease['uuid'])


def _race(fn, count=2):
    results = []
    barrier = threading.Barrier(count)

    def run():
        barrier.wait()
        results.append(fn().status)

    threads = [threading.Thread(target=run) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sorted(results)


def test_concurrent_deletes(client, inventory, conductor, member):
    lease = member.post('/v1/leases', {'memory_mb': 1024}).json
    statuses = _race(lambda: member.delete('/v1/leases/%s' % lease['uuid']))
    assert statuses == [204, 409]
    _wait(member, lease['uuid'], ['released'])


def test_concurrent_binds(client, inventory, conductor, member):
    lease = member.post('/v1/leases', {'device_count': 1}).json
    statuses = _race(lambda: member.post(
        '/v1/leases/%s/bind' % lease['uuid'], {'host': 'compute-1'}))
    assert statuses == [202, 409]
    _wait(member, lease['uuid'], ['bound', 'bind_failed'])


def test_service_reads_any_project_and_writes_none(client, inventory,
                                                   conductor):
    member = client.as_('member')
    lease = member.post('/v1/leases', {'device_count': 1}).json
    _wait(member, lease['uuid'], ['reserved'])
    service = client.as_('service')
    url = '/v1/leases/%s' % lease['uuid']
    assert service.get(url).status == 200
    assert service.get(url + '/actions').status == 200
    for resp in (service.post(url + '/bind', {'host': 'compute-1'}),
                 service.post(url + '/unbind'),
                 service.patch(url, {'name': 'taken'}),
                 service.delete(url)):
        assert resp.status == 403, resp
    after = member.get(url).json
    assert (after['status'], after['name']) == ('reserved', lease['name'])
    actions = member.get(url + '/actions').json['actions']
    assert [a['project_id'] for a in actions] == [lease['project_id']]


def test_create_from_named_pools(client, inventory, conductor, member):
    resp = member.post('/v1/leases', {
        'memory_mb': 1024, 'device_count': 1, 'pools': ['mem1', 'gpu1'],
        'attach_mode': 'host', 'device_model': 'A100'})
    assert resp.status == 201, resp
    lease = resp.json
    assert lease['status'] == 'reserved', lease['fault']
    assert lease['memory_pool_uuid'] == inventory['memory_pool']['uuid']
    assert lease['device_pool_uuid'] == inventory['gpu_pool']['uuid']
    by_pool = member.get('/v1/leases?pool=gpu1').json['leases']
    assert [x['uuid'] for x in by_pool] == [lease['uuid']]
    assert member.get('/v1/leases?kind=gpu').json['leases'][0]['uuid'] == (
        lease['uuid'])
