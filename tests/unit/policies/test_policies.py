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

"""The policy defaults, rule by rule and through the API, for every
persona."""

import pytest

from composable.common import context as composable_context
from composable.db import api as db_api
from composable import policies
from tests.unit.api import base

ALL = frozenset(base.PERSONAS)
ADMIN = frozenset(['admin'])
ADMIN_SERVICE = frozenset(['admin', 'service'])
# Project A's own personas plus the cross-project ones.
LEASE_READERS = frozenset(['admin', 'service', 'member', 'reader'])
# The service persona (Nova's side) reads leases and never writes them.
LEASE_MEMBERS = frozenset(['admin', 'member'])

EXPECTED = {}
for _resource in ('fabric', 'memory_node', 'device'):
    for _action in ('create', 'get', 'list', 'update', 'delete'):
        EXPECTED['composable:%s:%s' % (_resource, _action)] = ADMIN
# Nova's scheduler filter reads a pool's fabric for its aggregate.
EXPECTED['composable:fabric:get'] = ADMIN_SERVICE
# ... and which free devices each host can reach.
EXPECTED['composable:device:get'] = ADMIN_SERVICE
EXPECTED['composable:device:list'] = ADMIN_SERVICE
for _action in ('create', 'update', 'delete'):
    EXPECTED['composable:host:%s' % _action] = ADMIN
    EXPECTED['composable:pool:%s' % _action] = ADMIN
EXPECTED['composable:host:get'] = ADMIN_SERVICE
EXPECTED['composable:host:list'] = ADMIN_SERVICE
EXPECTED['composable:pool:get'] = ALL
EXPECTED['composable:pool:list'] = ALL
EXPECTED['composable:lease:create'] = LEASE_MEMBERS
EXPECTED['composable:lease:get'] = LEASE_READERS
EXPECTED['composable:lease:list'] = LEASE_READERS
EXPECTED['composable:lease:action:list'] = LEASE_READERS
for _action in ('update', 'delete', 'bind', 'unbind'):
    EXPECTED['composable:lease:%s' % _action] = LEASE_MEMBERS
EXPECTED['composable:lease:list:all_projects'] = ADMIN_SERVICE


def _context(persona):
    project, roles = base.PERSONAS[persona]
    return composable_context.RequestContext(
        user_id='u', project_id=project, roles=roles.split(','))


def test_rules_documented(api_env):
    rules = {rule.name: rule for rule in policies.list_rules()}
    for name in EXPECTED:
        rule = rules[name]
        assert rule.scope_types == ['project'], name
        assert rule.operations, name
        assert rule.description, name
    documented = {name for name, rule in rules.items()
                  if name.startswith('composable:')}
    assert documented == set(EXPECTED)


def test_enforcer_for_tools(api_env):
    enforcer = policies.get_enforcer()
    assert 'composable:lease:create' in enforcer.registered_rules
    assert api_env.oslo_policy.enforce_new_defaults is True
    # oslo.policy 6 always enforces scope and dropped the option.
    if 'enforce_scope' in api_env.oslo_policy:
        assert api_env.oslo_policy.enforce_scope is True


def test_system_scope_refused(api_env):
    ctx = composable_context.RequestContext(
        user_id='u', system_scope='all', roles=['admin'])
    assert not policies.check('composable:fabric:list', ctx)


# Rules checked against the caller's own project rather than project A's
# lease: there, members and readers of project B act in their own project.
OWN_PROJECT_RULES = {
    'composable:lease:create': {'other_member'},
    'composable:lease:list': {'other_member', 'other_reader'},
}


@pytest.mark.parametrize('rule', sorted(EXPECTED))
def test_rule_matrix(api_env, rule):
    allowed = set()
    for persona in base.PERSONAS:
        ctx = _context(persona)
        if rule.startswith('composable:lease:') and \
                rule not in OWN_PROJECT_RULES:
            target = {'project_id': base.PROJECT_A}
        else:
            target = {'project_id': ctx.project_id}
        if policies.check(rule, ctx, target):
            allowed.add(persona)
    assert allowed == EXPECTED[rule] | OWN_PROJECT_RULES.get(rule, set())


def test_authorize_raises_forbidden(api_env):
    from composable.common import exception
    with pytest.raises(exception.Forbidden) as info:
        policies.authorize('composable:fabric:create', _context('member'))
    assert info.value.code == 403


ADMIN_RESOURCES = {
    'fabrics': ('fabric', {'name': 'fx', 'driver': 'fake'}, 'fab1'),
    'hosts': ('host', {'name': 'hx', 'fabric': 'fab1'}, 'compute-1'),
    'pools': ('pool', {'name': 'px', 'kind': 'gpu', 'fabric': 'fab1'},
              'gpu1'),
    'memory_nodes': ('memory_node', {'name': 'nx', 'pool': 'mem1',
                                     'capacity_mb': 1024}, 'mn1'),
    'devices': ('device', {'pool': 'gpu1', 'address': 'sx'}, None),
}


@pytest.mark.parametrize('persona', sorted(base.PERSONAS))
def test_admin_resources_through_api(client, inventory, persona):
    as_persona = client.as_(persona)
    for plural, (resource, body, ident) in sorted(ADMIN_RESOURCES.items()):
        if ident is None:
            ident = inventory['devices'][1]['uuid']
        url = '/v1/%s/%s' % (plural, ident)
        calls = {
            'list': lambda: as_persona.get('/v1/%s' % plural),
            'get': lambda: as_persona.get(url),
            'create': lambda: as_persona.post('/v1/%s' % plural, body),
            'update': lambda: as_persona.patch(url, {}),
        }
        for action, call in sorted(calls.items()):
            rule = 'composable:%s:%s' % (resource, action)
            resp = call()
            if persona in EXPECTED[rule]:
                assert resp.status in (200, 201), (rule, persona, resp)
            else:
                assert resp.status == 403, (rule, persona, resp)
                assert resp.error['code'] == 'composable.forbidden'
        if persona != 'admin':
            resp = as_persona.delete(url)
            assert resp.status == 403, (plural, persona, resp)


def _lease(project, name='a-lease', status='reserved'):
    ctx = composable_context.get_admin_context()
    return db_api.lease_create(ctx, {'project_id': project, 'name': name,
                                     'user_id': 'someone',
                                     'status': status, 'memory_mb': 1024})


LEASE_CALLS = {
    'get': lambda c, u: c.get('/v1/leases/%s' % u),
    'actions': lambda c, u: c.get('/v1/leases/%s/actions' % u),
    'update': lambda c, u: c.patch('/v1/leases/%s' % u,
                                   {'description': 'x'}),
    'delete': lambda c, u: c.delete('/v1/leases/%s' % u),
    'bind': lambda c, u: c.post('/v1/leases/%s/bind' % u,
                                {'host': 'compute-1'}),
    'unbind': lambda c, u: c.post('/v1/leases/%s/unbind' % u),
}


@pytest.mark.parametrize('persona', ['other_member', 'other_reader'])
def test_other_project_sees_404(client, inventory, conductor, persona):
    # With a conductor: a member's delete goes to the conductor, which
    # looks the lease up in the caller's project only.
    lease = _lease(base.PROJECT_A)
    other = client.as_(persona)
    for call in ('get', 'actions', 'update', 'delete', 'bind', 'unbind'):
        for ident in (lease.uuid, lease.name):
            resp = LEASE_CALLS[call](other, ident)
            assert resp.status == 404, (call, ident, resp)
            assert resp.error['code'] == 'composable.lease.not_found'
    assert other.get('/v1/leases').json['leases'] == []
    assert other.get('/v1/leases?all_projects=true').status == 403
    assert other.get('/v1/leases?project_id=%s' % base.PROJECT_A
                     ).status == 403
    # Nothing changed.
    fresh = client.get('/v1/leases/%s' % lease.uuid).json
    assert fresh['status'] == 'reserved'
    assert fresh['description'] is None


def test_reader_reads_but_cannot_change(client, inventory):
    lease = _lease(base.PROJECT_A)
    reader = client.as_('reader')
    assert reader.get('/v1/leases/%s' % lease.uuid).status == 200
    assert reader.get('/v1/leases/a-lease').status == 200
    assert reader.get('/v1/leases/%s/actions' % lease.uuid).status == 200
    listed = reader.get('/v1/leases').json['leases']
    assert [x['uuid'] for x in listed] == [lease.uuid]
    for call in ('update', 'delete', 'bind', 'unbind'):
        resp = LEASE_CALLS[call](reader, lease.uuid)
        assert resp.status == 403, (call, resp)
    resp = reader.post('/v1/leases', {'memory_mb': 1024})
    assert resp.status == 403
    assert client.get('/v1/leases/%s' % lease.uuid).json['status'] == (
        'reserved')


def test_member_updates_own_lease(client, inventory, conductor):
    lease = _lease(base.PROJECT_A)
    resp = client.as_('member').patch('/v1/leases/%s' % lease.uuid,
                                      {'description': 'mine'})
    assert resp.status == 200, resp
    assert resp.json['description'] == 'mine'
    assert resp.json['fault'] is None


def test_lease_list_scoping(client, inventory):
    a = _lease(base.PROJECT_A, 'a')
    b = _lease(base.PROJECT_B, 'b')
    mine = _lease('admin-project', 'mine')

    def uuids(resp):
        assert resp.status == 200, resp
        return sorted(x['uuid'] for x in resp.json['leases'])

    admin = client
    assert uuids(admin.get('/v1/leases')) == [mine.uuid]
    assert uuids(admin.get('/v1/leases?all_projects=true')) == sorted(
        [a.uuid, b.uuid, mine.uuid])
    assert uuids(admin.get('/v1/leases?project_id=%s' % base.PROJECT_B)
                 ) == [b.uuid]
    assert uuids(admin.get('/v1/leases?all_projects=yes&name=a')) == [
        a.uuid]
    assert admin.get('/v1/leases?all_projects=maybe').status == 400
    member = client.as_('member')
    assert uuids(member.get('/v1/leases')) == [a.uuid]
    assert uuids(member.get('/v1/leases?project_id=%s' % base.PROJECT_A)
                 ) == [a.uuid]
    service = client.as_('service')
    assert uuids(service.get('/v1/leases?all_projects=true')) == sorted(
        [a.uuid, b.uuid, mine.uuid])
    assert service.get('/v1/leases/%s' % a.uuid).status == 200
    assert admin.get('/v1/leases/%s' % b.uuid).status == 200


def test_lease_list_filters(client, inventory):
    a = _lease(base.PROJECT_A, 'a')
    _lease(base.PROJECT_A, 'gone', status='released')
    member = client.as_('member')
    listed = member.get('/v1/leases?status=reserved,bound').json['leases']
    assert [x['uuid'] for x in listed] == [a.uuid]
    assert member.get('/v1/leases?status=sleeping').status == 400
    assert member.get('/v1/leases?kind=memory').json['leases'][0][
        'uuid'] == a.uuid
    assert member.get('/v1/leases?kind=gpu').json['leases'] == []
    assert member.get('/v1/leases?pool=nope').status == 400
    assert member.get('/v1/leases?host=compute-1').json['leases'] == []
    assert member.get('/v1/leases?colour=red').status == 400
    released = member.get('/v1/leases?status=released').json['leases']
    assert [x['name'] for x in released] == ['gone']


def test_admin_and_service_reach_any_lease(client, inventory,
                                           conductor):
    lease = _lease(base.PROJECT_A)
    for persona in ('admin', 'service'):
        resp = client.as_(persona).get('/v1/leases/%s' % lease.uuid)
        assert resp.status == 200, (persona, resp)
    resp = client.as_('admin').patch('/v1/leases/%s' % lease.uuid,
                                     {'description': 'admin'})
    assert resp.status == 200, resp
    # The service persona reads; changing a project's lease is not Nova's.
    resp = client.as_('service').patch('/v1/leases/%s' % lease.uuid,
                                       {'description': 'service'})
    assert resp.status == 403, resp
    assert client.as_('admin').get('/v1/leases/%s' % lease.uuid).json[
        'description'] == 'admin'
