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

"""The policy matrix with real Keystone tokens: every persona makes every
call of the API against composable-all behind keystonemiddleware, and
gets what the matrix below says.

The matrix (``INTENT``) is written out by hand, one row per rule
registered in code; a rule without a row fails the run, as does a row
that the rules themselves (composable.policies.matrix, rendered into the
security guide) do not give. Every call's method and path come from its
rule's documented operations. An allowed call must succeed and do what it
says; a refused one must answer 403 (404 for another project's lease) and
change nothing.
"""

import time
import uuid

import pytest
import requests

from composable.policies import matrix

HEADERS = {'OpenStack-API-Version': 'composable 1.0',
           'Accept': 'application/json'}
# Persona of composable.policies.matrix -> Keystone user of the fixture.
USERS = {
    'admin': 'alpha-admin',
    'manager': 'alpha-manager',
    'member': 'alpha-member',
    'reader': 'alpha-reader',
    'other_member': 'beta-member',
    'other_reader': 'beta-reader',
    'service': 'composable',
}
PERSONAS = tuple(p.name for p in matrix.PERSONAS)
MEMORY_MB = 1024
# Seconds a lease may take to reach a state on a busy machine.
LEASE_TIMEOUT = 120

# Columns: admin, manager, member, reader, another project's member,
# another project's reader, service.
INTENT = {
    'composable:fabric:create': 'yes 403 403 403 403 403 403',
    'composable:fabric:get': 'yes 403 403 403 403 403 yes',
    'composable:fabric:list': 'yes 403 403 403 403 403 403',
    'composable:fabric:update': 'yes 403 403 403 403 403 403',
    'composable:fabric:delete': 'yes 403 403 403 403 403 403',
    'composable:host:create': 'yes 403 403 403 403 403 403',
    'composable:host:get': 'yes 403 403 403 403 403 yes',
    'composable:host:list': 'yes 403 403 403 403 403 yes',
    'composable:host:update': 'yes 403 403 403 403 403 403',
    'composable:host:delete': 'yes 403 403 403 403 403 403',
    'composable:memory_node:create': 'yes 403 403 403 403 403 403',
    'composable:memory_node:get': 'yes 403 403 403 403 403 403',
    'composable:memory_node:list': 'yes 403 403 403 403 403 403',
    'composable:memory_node:update': 'yes 403 403 403 403 403 403',
    'composable:memory_node:delete': 'yes 403 403 403 403 403 403',
    'composable:pool:create': 'yes 403 403 403 403 403 403',
    'composable:pool:get': 'yes yes yes yes yes yes yes',
    'composable:pool:list': 'yes yes yes yes yes yes yes',
    'composable:pool:update': 'yes 403 403 403 403 403 403',
    'composable:pool:delete': 'yes 403 403 403 403 403 403',
    'composable:device:create': 'yes 403 403 403 403 403 403',
    'composable:device:get': 'yes 403 403 403 403 403 yes',
    'composable:device:list': 'yes 403 403 403 403 403 yes',
    'composable:device:update': 'yes 403 403 403 403 403 403',
    'composable:device:delete': 'yes 403 403 403 403 403 403',
    'composable:lease:create': 'yes yes yes 403 yes 403 403',
    'composable:lease:get': 'yes yes yes yes 404 404 yes',
    'composable:lease:list': 'yes yes yes yes yes yes yes',
    'composable:lease:list:all_projects': 'yes 403 403 403 403 403 yes',
    'composable:lease:update': 'yes yes yes 403 404 404 403',
    'composable:lease:delete': 'yes yes yes 403 404 404 403',
    'composable:lease:bind': 'yes yes yes 403 404 404 403',
    'composable:lease:unbind': 'yes yes yes 403 404 404 403',
    'composable:lease:action:list': 'yes yes yes yes 404 404 yes',
}


def _intent(rule):
    return dict(zip(PERSONAS, INTENT[rule].split()))


class API(object):
    """The composable API as each persona calls it, with its token."""

    def __init__(self, keystone, composable):
        self.keystone = keystone
        self.endpoint = composable.endpoint

    def call(self, persona, method, path, body=None, query=None):
        headers = dict(HEADERS, **{
            'X-Auth-Token': self.keystone.user_token(USERS[persona])})
        url = self.endpoint + path + (query or '')
        return requests.request(method, url, json=body, headers=headers,
                                timeout=120)

    def ok(self, persona, method, path, body=None, query=None):
        resp = self.call(persona, method, path, body, query)
        assert resp.status_code < 300, (persona, method, path,
                                        resp.status_code, resp.text)
        return resp.json() if resp.content else None

    def wait_lease(self, uuid_, statuses):
        deadline = time.monotonic() + LEASE_TIMEOUT
        while True:
            lease = self.ok('admin', 'GET', '/v1/leases/%s' % uuid_)
            if lease['status'] in statuses:
                return lease
            assert time.monotonic() < deadline, (
                'lease %s stayed %s (wanted %s): %s' % (
                    uuid_, lease['status'], statuses, lease.get('fault')))
            time.sleep(0.2)

    def new_lease(self, status='reserved'):
        """A lease of project alpha, made by its member, in ``status``."""
        lease = self.ok('member', 'POST', '/v1/leases', {
            'name': 'matrix-%s' % uuid.uuid4().hex[:8],
            'memory_mb': MEMORY_MB})
        lease = self.wait_lease(lease['uuid'], ['reserved'])
        if status == 'bound':
            self.ok('member', 'POST', '/v1/leases/%s/bind' % lease['uuid'],
                    {'host': 'compute-0'})
            lease = self.wait_lease(lease['uuid'], ['bound'])
        return lease

    def release(self, uuid_):
        lease = self.ok('admin', 'GET', '/v1/leases/%s' % uuid_)
        if lease['status'] == 'released':
            return
        if lease['status'] in ('binding', 'unbinding', 'allocating',
                               'releasing'):
            lease = self.wait_lease(uuid_, ['reserved', 'bound',
                                            'bind_failed', 'released'])
        if lease['status'] == 'bound':
            self.ok('admin', 'POST', '/v1/leases/%s/unbind' % uuid_)
            self.wait_lease(uuid_, ['reserved'])
        if lease['status'] != 'released':
            self.ok('admin', 'DELETE', '/v1/leases/%s' % uuid_)
            self.wait_lease(uuid_, ['released'])


@pytest.fixture(scope='module')
def api(keystone, composable):
    api = API(keystone, composable)
    # Memory nodes made by the tests go to a pool of their own, with no
    # agent behind them: no lease of the tests may land on them.
    api.ok('admin', 'POST', '/v1/pools', {
        'name': 'matrix-memory', 'kind': 'memory', 'fabric': 'demo-fabric'})
    return api


def _operation(rule):
    for default in matrix.documented_rules():
        if default.name == rule:
            (operation,) = default.operations
            return operation['method'], operation['path']
    raise AssertionError('no documented rule %s' % rule)


def _expect(resp, want, success, what):
    if want == matrix.ALLOWED:
        assert resp.status_code == success, (what, resp.status_code,
                                             resp.text)
    else:
        assert resp.status_code == int(want), (what, resp.status_code,
                                               resp.text)
        if resp.status_code == 403:
            assert 'composable:' in resp.text or 'olicy' in resp.text, (
                what, resp.text)


# --------------------------------------------------------- the inventory

# resource -> (collection, body of a new one, existing one,
#              update body, how to read the updated value)
INVENTORY = {
    'fabric': ('fabrics', lambda n: {'name': n, 'driver': 'fake'},
               'demo-fabric', lambda v: {'description': v},
               lambda doc: doc['description']),
    'host': ('hosts', lambda n: {'name': n, 'fabric': 'demo-fabric'},
             'compute-1', lambda v: {'properties': {'note': v}},
             lambda doc: doc['properties'].get('note')),
    'pool': ('pools', lambda n: {'name': n, 'kind': 'gpu',
                                 'fabric': 'demo-fabric'},
             'gpu-pool', lambda v: {'description': v},
             lambda doc: doc['description']),
    'memory_node': ('memory_nodes',
                    lambda n: {'name': n, 'pool': 'matrix-memory',
                               'capacity_mb': 1024},
                    'memory-0', lambda v: {'portal': v},
                    lambda doc: doc['portal']),
    'device': ('devices', lambda n: {'pool': 'gpu-pool', 'address': n,
                                     'name': n},
               'gpu-0', lambda v: {'model': v}, lambda doc: doc['model']),
}


def _name(persona):
    return 'mx-%s-%s' % (persona.replace('_', '-'), uuid.uuid4().hex[:6])


def _inventory_call(api, rule):
    _, resource, action = rule.split(':')
    collection, new_body, existing, update_body, updated = \
        INVENTORY[resource]
    method, template = _operation(rule)
    ident_key = '{%s_ident}' % resource
    for persona, want in _intent(rule).items():
        what = (rule, persona)
        if action == 'create':
            name = _name(persona)
            resp = api.call(persona, method, template, new_body(name))
            _expect(resp, want, 201, what)
            made = [x for x in api.ok('admin', 'GET', '/v1/' + collection)[
                collection] if x.get('name') == name]
            assert len(made) == (1 if want == matrix.ALLOWED else 0), what
            for item in made:
                api.ok('admin', 'DELETE', '/v1/%s/%s' % (collection,
                                                         item['uuid']))
        elif action == 'get':
            resp = api.call(persona, method,
                            template.replace(ident_key, existing))
            _expect(resp, want, 200, what)
            if want == matrix.ALLOWED:
                assert existing in (resp.json().get('name'),
                                    resp.json().get('uuid')), what
        elif action == 'list':
            resp = api.call(persona, method, template)
            _expect(resp, want, 200, what)
            if want == matrix.ALLOWED:
                assert resp.json()[collection], what
        elif action == 'update':
            target = api.ok('admin', 'POST', '/v1/' + collection,
                            new_body(_name('target')))
            path = template.replace(ident_key, target['uuid'])
            before = updated(api.ok('admin', 'GET', path))
            value = 'set-by-%s' % persona
            resp = api.call(persona, method, path, update_body(value))
            _expect(resp, want, 200, what)
            after = updated(api.ok('admin', 'GET', path))
            assert after == (value if want == matrix.ALLOWED else before), \
                what
            api.ok('admin', 'DELETE', path)
        elif action == 'delete':
            target = api.ok('admin', 'POST', '/v1/' + collection,
                            new_body(_name('target')))
            path = template.replace(ident_key, target['uuid'])
            resp = api.call(persona, method, path)
            _expect(resp, want, 204, what)
            still = api.call('admin', 'GET', path)
            if want == matrix.ALLOWED:
                assert still.status_code == 404, what
            else:
                assert still.status_code == 200, what
                api.ok('admin', 'DELETE', path)
        else:
            raise AssertionError('no call written for %s' % rule)


# ----------------------------------------------------------------- leases

def _lease_call(api, rule):
    method, template = _operation(rule)
    action = rule[len('composable:lease:'):]
    shared = None
    if action in ('get', 'list', 'list:all_projects', 'update',
                  'action:list'):
        shared = api.new_lease()
    try:
        for persona, want in _intent(rule).items():
            _lease_call_one(api, rule, action, method, template, persona,
                            want, shared)
    finally:
        if shared is not None:
            api.release(shared['uuid'])


def _lease_call_one(api, rule, action, method, template, persona, want,
                    shared):
    what = (rule, persona)
    if action == 'create':
        resp = api.call(persona, method, template, {
            'name': _name(persona), 'memory_mb': MEMORY_MB})
        _expect(resp, want, 201, what)
        if want == matrix.ALLOWED:
            api.wait_lease(resp.json()['uuid'], ['reserved'])
            api.release(resp.json()['uuid'])
        return
    if action in ('list', 'list:all_projects'):
        query = '?all_projects=true' if action == 'list:all_projects' \
            else ''
        resp = api.call(persona, method, template, query=query)
        _expect(resp, want, 200, what)
        if want == matrix.ALLOWED:
            seen = {x['uuid'] for x in resp.json()['leases']}
            own = matrix.PERSONAS[PERSONAS.index(persona)].project == \
                matrix.OWN_PROJECT
            # Another project's leases are invisible in a plain list.
            assert (shared['uuid'] in seen) == (
                own or action == 'list:all_projects'), (what, seen)
        return
    if action in ('get', 'action:list', 'update'):
        path = template.replace('{lease_ident}', shared['uuid'])
        if action == 'update':
            value = 'set by %s' % persona
            resp = api.call(persona, method, path, {'description': value})
            _expect(resp, want, 200, what)
            after = api.ok('admin', 'GET', path)['description']
            assert (after == value) == (want == matrix.ALLOWED), what
        else:
            resp = api.call(persona, method, path)
            _expect(resp, want, 200, what)
            if want == matrix.ALLOWED and action == 'get':
                assert resp.json()['uuid'] == shared['uuid'], what
            if want == matrix.ALLOWED and action == 'action:list':
                assert [a['action'] for a in resp.json()['actions']], what
        return
    start, success, end = {
        'delete': ('reserved', 204, 'released'),
        'bind': ('reserved', 202, 'bound'),
        'unbind': ('bound', 202, 'reserved'),
    }[action]
    lease = api.new_lease(start)
    try:
        path = template.replace('{lease_ident}', lease['uuid'])
        body = {'host': 'compute-0'} if action == 'bind' else None
        resp = api.call(persona, method, path, body)
        _expect(resp, want, success, what)
        if want == matrix.ALLOWED:
            api.wait_lease(lease['uuid'], [end])
        else:
            assert api.ok('admin', 'GET', '/v1/leases/%s' % lease[
                'uuid'])['status'] == start, what
    finally:
        api.release(lease['uuid'])


# ------------------------------------------------------------------ tests

def test_every_rule_has_an_expectation():
    rules = {r.name for r in matrix.documented_rules()}
    assert set(INTENT) == rules, (
        'rules without a row here: %s; rows without a rule: %s' % (
            sorted(rules - set(INTENT)), sorted(set(INTENT) - rules)))


def test_the_rules_give_the_matrix():
    for row in matrix.rows():
        assert row.outcomes == _intent(row.rule), row


@pytest.mark.parametrize('rule', sorted(INTENT))
def test_persona_calls(api, rule):
    if rule.startswith('composable:lease:'):
        _lease_call(api, rule)
    else:
        _inventory_call(api, rule)


def test_export_details_are_admin_only(api):
    lease = api.new_lease('bound')
    path = '/v1/leases/%s' % lease['uuid']
    try:
        shown = {p: api.ok(p, 'GET', path)
                 for p in ('admin', 'member', 'reader', 'service')}
        assert shown['admin']['extents'], shown['admin']
        for extent in shown['admin']['extents']:
            assert extent['target_iqn'], extent
        for persona in ('member', 'reader', 'service'):
            for extent in shown[persona]['extents']:
                assert 'target_iqn' not in extent, (persona, extent)
                assert 'lun' not in extent, (persona, extent)
        for persona, doc in shown.items():
            assert 'chap' not in repr(doc).lower(), (persona, doc)
    finally:
        api.release(lease['uuid'])
