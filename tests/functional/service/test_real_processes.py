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

"""composable as it runs in production: composable-api, composable-conductor
and composable-agent as separate processes, over RabbitMQ, on MariaDB.

What happens when a process dies is part of the contract: a conductor killed
while binding leaves its lease to another conductor, which takes it over
after the dead one's heartbeat expires; an agent that does not answer fails
the bind with a fault that names it, and nothing stays held.
"""

import os
import time
import uuid

import pytest

from tests.functional import leftovers
from tests.functional import stack as stack_mod

RABBIT = os.environ.get('COMPOSABLE_TRANSPORT_URL',
                        'rabbit://guest:guest@127.0.0.1:5672/')


def _rabbit_up():
    import socket
    try:
        socket.create_connection(('127.0.0.1', 5672), timeout=2).close()
        return True
    except OSError:
        return False


@pytest.fixture
def mariadb_url():
    try:
        import pymysql
        conn = pymysql.connect(host='127.0.0.1', user='root', password='')
    except Exception as exc:
        if os.environ.get('COMPOSABLE_REQUIRE_DBS') == '1':
            pytest.fail('MariaDB is required but unreachable: %s' % exc)
        pytest.skip('MariaDB unreachable: %s' % exc)
    name = 'composable_proc_%s_%s' % (leftovers.run_tag(),
                                      uuid.uuid4().hex[:6])
    conn.cursor().execute('CREATE DATABASE %s CHARACTER SET utf8mb4' % name)
    yield 'mysql+pymysql://root@127.0.0.1/%s?charset=utf8mb4' % name
    conn.cursor().execute('DROP DATABASE IF EXISTS %s' % name)
    conn.close()


@pytest.fixture
def stack(request, tmp_path, mariadb_url):
    """The stack, its API served by composable-api or (param "uwsgi") by
    uWSGI running composable.wsgi.api, as deployments do."""
    if not _rabbit_up():
        if os.environ.get('COMPOSABLE_REQUIRE_DBS') == '1':
            pytest.fail('RabbitMQ is required but not running on :5672')
        pytest.skip('RabbitMQ is not running on 127.0.0.1:5672')
    s = stack_mod.Stack(tmp_path, mariadb_url, RABBIT)
    s.dbsync()
    s.start_conductor('conductor-0')
    s.wait_conductor('conductor-0')
    s.start_agent('compute-0', roles='compute_node')
    s.start_agent('memory-0', roles='memory_node')
    if getattr(request, 'param', 'standalone') == 'uwsgi':
        if stack_mod.uwsgi_binary() is None:
            pytest.fail('uwsgi is not installed (test-requirements.txt '
                        'has pyuwsgi)')
        s.start_api_uwsgi(processes=2, threads=4)
    else:
        s.start_api()
    admin = stack_mod.Client(s.endpoint, project='admin')
    stack_mod.demo_inventory(admin)
    yield s
    s.stop()
    for name in ('conductor-0', 'conductor-1', 'api-0'):
        for text in s.log(name):
            # Secrets must never reach a log, whatever happened above.
            assert 'chap_secret' not in text.lower() or \
                '***' in text, 'a CHAP secret was logged by %s' % name


def _pools(client):
    return {p['name']: p for p in client.get('/pools').json()['pools']}


@pytest.mark.parametrize('stack', ['standalone', 'uwsgi'], indirect=True)
def test_lease_life_cycle_across_processes(stack):
    user = stack_mod.Client(stack.endpoint, project='project-a',
                            roles='member,reader')
    lease = user.post('/leases', {'name': 'job', 'memory_mb': 2048,
                                  'device_count': 1, 'device_kind': 'gpu'},
                      expect=201).json()
    assert lease['status'] == 'reserved', lease
    pools = _pools(user)
    assert pools['memory-pool']['used'] == 2048
    assert pools['gpu-pool']['used'] == 1

    user.post('/leases/%s/bind' % lease['uuid'], {'host': 'compute-0'},
              expect=202)
    bound = user.wait_lease(lease['uuid'], ('bound', 'bind_failed'))
    assert bound['status'] == 'bound', bound['fault']
    assert bound['host'] == 'compute-0'
    assert all(e['export_state'] == 'exported' for e in bound['extents'])
    assert bound['devices'][0]['pci_address']

    # Another project neither sees nor touches it.
    other = stack_mod.Client(stack.endpoint, project='project-b',
                             roles='member,reader')
    other.get('/leases/%s' % lease['uuid'], expect=404)
    other.request('DELETE', '/leases/%s' % lease['uuid'], expect=404)

    user.post('/leases/%s/unbind' % lease['uuid'], {}, expect=202)
    assert user.wait_lease(lease['uuid'], ('reserved', 'error'))[
        'status'] == 'reserved'
    user.delete('/leases/%s' % lease['uuid'])
    user.wait_lease(lease['uuid'], ('released',))
    pools = _pools(user)
    assert pools['memory-pool']['used'] == 0
    assert pools['gpu-pool']['used'] == 0
    actions = [a['action'] for a in user.get(
        '/leases/%s/actions' % lease['uuid']).json()['actions']]
    assert actions[:1] == ['create'] and 'bind' in actions and \
        'unbind' in actions and 'delete' in actions
    assert all(a['result'] == 'success' for a in user.get(
        '/leases/%s/actions' % lease['uuid']).json()['actions'])


def test_agent_that_does_not_answer_fails_the_bind_cleanly(stack):
    # No agent runs for compute-1.
    user = stack_mod.Client(stack.endpoint, project='project-a',
                            roles='member,reader')
    lease = user.post('/leases', {'memory_mb': 1024}, expect=201).json()
    user.post('/leases/%s/bind' % lease['uuid'], {'host': 'compute-1'},
              expect=202)
    failed = user.wait_lease(lease['uuid'], ('bind_failed', 'bound'),
                             timeout=300)
    assert failed['status'] == 'bind_failed'
    assert 'compute-1' in failed['fault']
    user.delete('/leases/%s' % lease['uuid'])
    done = user.wait_lease(lease['uuid'], ('released', 'error'), timeout=300)
    assert done['status'] == 'released', done['fault']
    assert _pools(user)['memory-pool']['used'] == 0


def test_conductor_killed_while_binding_is_taken_over(stack):
    admin = stack_mod.Client(stack.endpoint, project='admin')
    # Make fabric operations slow so the kill lands mid-bind.
    admin.request('PATCH', '/fabrics/fabric-0',
                  json={'driver_info': {'simulate_delay': 10}}, expect=200)
    user = stack_mod.Client(stack.endpoint, project='project-a',
                            roles='member,reader')
    lease = user.post('/leases', {'device_count': 2, 'device_kind': 'gpu'},
                      expect=201).json()
    user.post('/leases/%s/bind' % lease['uuid'], {'host': 'compute-0'},
              expect=202)
    # The first of the slow fabric binds is under way.
    deadline = time.monotonic() + 300
    while user.get('/leases/%s' % lease['uuid']).json()['status'] != \
            'binding':
        assert time.monotonic() < deadline, 'the bind never started'
        time.sleep(0.1)
    stack.kill('conductor-0')
    stack.start_conductor('conductor-1')
    # conductor-0's heartbeat expires after 6 s; conductor-1 breaks its
    # reservation and binds the lease again from where it was.
    done = user.wait_lease(lease['uuid'], ('bound', 'bind_failed'),
                           timeout=300)
    assert done['status'] == 'bound', done['fault']
    actions = user.get('/leases/%s/actions' % lease['uuid']).json()[
        'actions']
    assert actions[-1]['result'] == 'success'
    user.delete('/leases/%s' % lease['uuid'])
    user.wait_lease(lease['uuid'], ('released',), timeout=300)
    pools = _pools(user)
    assert pools['gpu-pool']['used'] == 0
