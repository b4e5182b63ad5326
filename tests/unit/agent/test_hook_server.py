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

"""The agent's side of the libvirt hook (composable.agent.hook_server),
with a real AgentManager and GuestMemoryAttacher over the fake libvirt
connection of the compute-node tests, and a recording conductor."""

import os
import socket
import stat
import threading

import oslo_messaging as messaging
import pytest

from composable.agent.compute_node import libvirt_guest
from composable.agent import hook_server
from composable.agent import manager as agent_manager
from composable.common import context as ctx_mod
from composable.common import exception
from composable import conf
from composable.hooks import libvirt as hook
from tests.unit.agent.compute_node import fakes

CONF = conf.CONF
INSTANCE = '0a6f4b1c-9e2d-4c3b-8a7f-6e5d4c3b2a10'
LEASE = '5b5b0c33-7d1e-4f0a-b2c3-d4e5f6a7b8c9'
EXTENT = '00000000-0000-0000-0000-00000000e001'
HOST = 'compute-0'


def _extent():
    return {'uuid': EXTENT, 'index': 0, 'size_mb': 128,
            'target_iqn': 'iqn.2010-10.org.openstack.composable:e1',
            'lun': 1, 'portal': '192.0.2.10:3260',
            'chap_username': 'composable-u1', 'chap_secret': 's3cret-xyz'}


def _lease():
    return {'uuid': LEASE, 'attach_mode': 'guest', 'instance_uuid': INSTANCE}


def _summary(**kwargs):
    summary = {'uuid': LEASE, 'status': 'bound', 'attach_mode': 'guest',
               'host': HOST, 'instance_uuid': INSTANCE, 'memory_mb': 128,
               'device_count': 0, 'extents': [EXTENT], 'fault': None}
    summary.update(kwargs)
    return summary


class FakeConductor(object):
    """Records the agent's calls; ``on_prepare``/``on_release`` run
    inside the call, as the conductor's flows would call the agent back
    while the hook waits."""

    def __init__(self):
        self.calls = []
        self.mapping = {}
        self.status = []
        self.prepare_result = {'ok': True, 'message': '',
                               'leases': [_summary()]}
        self.release_result = {'ok': True, 'message': '',
                               'leases': [_summary(status='reserved',
                                                   host=None)]}
        self.prepare_error = None
        self.on_prepare = None
        self.on_release = None
        self.loads = 0

    def instance_leases(self, context, host):
        self.loads += 1
        self.calls.append(('instance_leases', host, {}))
        return self.mapping

    def instance_status(self, context, instance_uuid, host=None):
        self.calls.append(('instance_status', instance_uuid, {}))
        return self.status

    def prepare_instance(self, context, instance_uuid, host, **kwargs):
        self.calls.append(('prepare_instance', instance_uuid, kwargs))
        if self.on_prepare is not None:
            self.on_prepare()
        if self.prepare_error is not None:
            raise self.prepare_error
        return self.prepare_result

    def release_instance(self, context, instance_uuid, host, **kwargs):
        self.calls.append(('release_instance', instance_uuid, kwargs))
        if self.on_release is not None:
            self.on_release()
        return self.release_result

    def names(self):
        return [c[0] for c in self.calls if c[0] != 'instance_leases']


@pytest.fixture
def conn():
    return fakes.FakeConnection()


@pytest.fixture
def agent(conn):
    attacher = libvirt_guest.GuestMemoryAttacher(
        uri='test:///', connect=lambda uri: conn, attach_timeout=5,
        detach_timeout=2, poll_interval=0.01, detach_retry_interval=0.05)
    return agent_manager.AgentManager(HOST, ['compute_node'],
                                      guest_attacher=attacher,
                                      host_swap=object(), simulate=False)


@pytest.fixture
def conductor():
    return FakeConductor()


@pytest.fixture
def server(agent, conductor, tmp_path, monkeypatch):
    monkeypatch.setattr(hook_server, 'ATTACH_RETRY_DELAY', 0.01)
    monkeypatch.setattr(hook_server, 'FIRST_LOAD_WAIT', 0.01)
    srv = hook_server.HookServer(agent.parts, path=str(tmp_path / 'hook.sock'),
                                 group='', conductor=conductor,
                                 refresh_interval=0)
    agent.hook_server = srv
    yield srv
    srv.stop()
    for name, group in (('hook_failure', 'compute_node'),):
        CONF.clear_override(name, group)


def _request(op, **kwargs):
    request = {'v': 1, 'op': op, 'instance': INSTANCE,
               'domain': 'instance-1', 'nova': True, 'project_id': 'p1',
               'specs': {}, 'flavor_resources': False}
    request.update(kwargs)
    return request


def _has_lease(server, conductor):
    conductor.mapping = {INSTANCE: [LEASE]}
    server.refresh()


def _join(server):
    for thread in list(server._threads):
        thread.join(10)
        assert not thread.is_alive()


# ------------------------------------------------------------- the cache

def test_cache_is_unknown_until_loaded():
    cache = hook_server.LeaseCache()
    assert cache.leases_of(INSTANCE) is None
    cache.set(INSTANCE, [])
    assert cache.leases_of(INSTANCE) == []
    cache.replace({}, since=0)
    assert cache.leases_of('another') == []


def test_a_snapshot_does_not_undo_newer_news(monkeypatch):
    cache = hook_server.LeaseCache()
    clock = [100.0]
    monkeypatch.setattr(hook_server.time, 'monotonic', lambda: clock[0])
    cache.set('pushed-after', ['l1'])           # at 100
    cache.set('dropped-after', [])              # at 100
    cache.replace({'dropped-after': ['l2'], 'old': ['l3']}, since=99)
    assert cache.leases_of('pushed-after') == ['l1']
    assert cache.leases_of('dropped-after') == []
    assert cache.leases_of('old') == ['l3']
    # News older than a snapshot give way to it.
    cache.replace({'pushed-after': ['l9']}, since=101)
    assert cache.leases_of('pushed-after') == ['l9']
    assert cache.leases_of('old') == []


# ------------------------------------------------------------- prepare

def test_prepare_of_an_instance_without_lease_asks_nobody(server,
                                                          conductor):
    server.refresh()
    reply = server.handle(_request('prepare'))
    assert reply['ok'] is True
    assert reply['leases'] == 0
    assert conductor.names() == []


def test_prepare_before_the_first_load_goes_on(server, conductor):
    reply = server.handle(_request('prepare'))
    assert reply['ok'] is True
    assert conductor.calls == []


def test_prepare_binds_through_the_conductor(server, conductor):
    _has_lease(server, conductor)
    seen = {}
    conductor.on_prepare = lambda: seen.update(
        busy=server.domain_busy(INSTANCE))
    reply = server.handle(_request('prepare'))
    assert reply == {'v': 1, 'ok': True, 'leases': 1, 'message': ''}
    [(name, instance, kwargs)] = [c for c in conductor.calls
                                  if c[0] == 'prepare_instance']
    assert instance == INSTANCE
    assert kwargs['wait'] == CONF.compute_node.hook_prepare_timeout
    assert kwargs['rpc_timeout'] > kwargs['wait']
    assert kwargs['incoming'] is False
    # libvirtd holds the domain while its hook waits.
    assert seen == {'busy': True}
    assert not server.domain_busy(INSTANCE)


def test_a_flavor_with_resources_is_prepared_even_without_lease(
        server, conductor):
    server.refresh()
    reply = server.handle(_request(
        'prepare', flavor_resources=True, user_id='u1',
        specs={'resources:CUSTOM_COMPOSABLE_MEMORY_MB': '1024',
               'composable:attach_mode': 'guest'}))
    assert reply['ok']
    [(_, _, kwargs)] = conductor.calls[1:]
    assert kwargs['flavor_resources'] is True
    assert kwargs['project_id'] == 'p1'
    assert kwargs['user_id'] == 'u1'
    assert kwargs['extra_specs'] == {'composable:attach_mode': 'guest'}


@pytest.mark.parametrize('policy,specs,abort', [
    ('abort', {}, True),
    ('continue', {}, False),
    ('continue', {'composable:on_bind_failure': 'fail'}, True),
    ('abort', {'composable:on_bind_failure': 'ignore'}, False),
])
def test_failed_prepare_follows_the_policy(server, conductor, policy, specs,
                                           abort):
    CONF.set_override('hook_failure', policy, 'compute_node')
    _has_lease(server, conductor)
    conductor.prepare_result = {
        'ok': False, 'message': 'lease %s: it holds no resources' % LEASE,
        'leases': [_summary(status='alloc_failed', host=None)]}
    reply = server.handle(_request('prepare', specs=specs))
    assert reply['ok'] is False
    assert reply['abort'] is abort
    assert 'it holds no resources' in reply['message']
    assert INSTANCE in reply['message'] and HOST in reply['message']
    if not abort:
        assert 'starts without them' in reply['message']


def test_a_conductor_that_does_not_answer(server, conductor):
    _has_lease(server, conductor)
    conductor.prepare_error = messaging.MessagingTimeout('slow')
    reply = server.handle(_request('prepare'))
    assert reply['abort'] is True
    assert 'did not answer' in reply['message']


def test_a_refusal_of_the_conductor(server, conductor):
    _has_lease(server, conductor)
    conductor.prepare_error = exception.Invalid(reason='host x is not '
                                                       'registered')
    reply = server.handle(_request('prepare'))
    assert reply['abort'] is True
    assert 'host x is not registered' in reply['message']


# ----------------------------------------------- guest memory at started

def _bind_flow_attaches(agent):
    """What the bind flow does while the hook waits: attach_memory."""
    results = []

    def attach():
        results.append(agent.compute.attach_memory(
            ctx_mod.get_admin_context(), _lease(), [_extent()], 'guest',
            instance_uuid=INSTANCE))
    return attach, results


def test_guest_memory_is_plugged_once_the_guest_runs(server, conductor,
                                                     agent, conn):
    _has_lease(server, conductor)
    conductor.on_prepare, results = _bind_flow_attaches(agent)
    # QEMU does not run during prepare: no domain in libvirt yet.
    reply = server.handle(_request('prepare'))
    assert reply['ok']
    [details] = results
    assert details[EXTENT]['deferred'] == 'started'
    assert conn.secrets == {}
    domain = conn.add_domain(fakes.FakeDomain(INSTANCE))
    reply = server.handle(_request('started'))
    assert reply['ok']
    _join(server)
    assert domain.disk_aliases() == ['virtio-disk0',
                                     libvirt_guest.disk_alias(EXTENT)]
    assert agent.memory_attachments[LEASE][EXTENT]['target_dev'] == 'vdb'
    assert list(conn.secrets) == [libvirt_guest.secret_usage(EXTENT)]
    assert conductor.names() == ['prepare_instance']


def test_outside_prepare_guest_memory_is_plugged_at_once(server, agent,
                                                         conn):
    domain = conn.add_domain(fakes.FakeDomain(INSTANCE))
    agent.compute.attach_memory(ctx_mod.get_admin_context(), _lease(),
                                [_extent()], 'guest', instance_uuid=INSTANCE)
    assert libvirt_guest.disk_alias(EXTENT) in domain.disk_aliases()
    # And the agent now knows the instance has a lease.
    assert server.cache.leases_of(INSTANCE) == [LEASE]


def test_a_failed_plug_unbinds_the_lease_with_a_fault(server, conductor,
                                                      agent, conn,
                                                      monkeypatch):
    monkeypatch.setattr(hook_server, 'ATTACH_ATTEMPTS', 2)
    _has_lease(server, conductor)
    conductor.on_prepare, _ = _bind_flow_attaches(agent)
    server.handle(_request('prepare'))
    domain = conn.add_domain(fakes.FakeDomain(INSTANCE))
    calls = []

    def refuse(xml, flags):
        calls.append(xml)
        raise fakes.FakeLibvirtError('iSCSI: Authentication failure', 1)
    domain.attachDeviceFlags = refuse
    server.handle(_request('started'))
    _join(server)
    assert len(calls) == 2
    [(name, _, kwargs)] = [c for c in conductor.calls
                           if c[0] == 'release_instance']
    assert kwargs['leases'] == [LEASE]
    assert 'CHAP' in kwargs['fault'] and INSTANCE in kwargs['fault']
    assert 's3cret' not in kwargs['fault']


def test_a_stop_before_started_drops_what_waited(server, conductor, agent,
                                                 conn):
    _has_lease(server, conductor)
    conductor.on_prepare, _ = _bind_flow_attaches(agent)
    server.handle(_request('prepare'))
    server.handle(_request('stopped'))
    domain = conn.add_domain(fakes.FakeDomain(INSTANCE))
    server.handle(_request('started'))
    _join(server)
    assert domain.attach_calls == []


# ------------------------------------------------------------- stopping

def test_stop_unbinds_once(server, conductor):
    _has_lease(server, conductor)
    seen = []
    conductor.on_release = lambda: seen.append(server.domain_busy(INSTANCE))
    assert server.handle(_request('stopped'))['ok']
    assert server.handle(_request('release'))['ok']
    assert conductor.names() == ['release_instance']
    assert seen == [True]
    # The leases stay the instance's.
    assert server.cache.leases_of(INSTANCE) == [LEASE]


def test_release_unbinds_when_stopped_could_not(server, conductor):
    _has_lease(server, conductor)
    conductor.release_result = {'ok': False, 'message': 'lease L: timeout',
                                'leases': [_summary()]}
    reply = server.handle(_request('stopped'))
    assert reply['ok'] is False and 'timeout' in reply['message']
    server.handle(_request('release'))
    assert conductor.names() == ['release_instance', 'release_instance']


def test_stop_of_an_instance_without_lease(server, conductor):
    server.refresh()
    assert server.handle(_request('stopped'))['ok']
    assert server.handle(_request('release'))['ok']
    assert conductor.names() == []


def test_guest_detach_while_the_hook_holds_the_domain(server, conductor,
                                                      agent, conn):
    """The unbind flow's detach_memory arrives while libvirtd runs the
    stop hook: it must not touch the domain (deadlock), only the
    secrets."""
    _has_lease(server, conductor)
    conn.secretDefineXML(libvirt_guest.secret_xml(EXTENT)).setValue(b'x')

    def no_domain_calls(uuid):
        raise AssertionError('libvirt domain call during the hook')
    conn.lookupByUUIDString = no_domain_calls
    conductor.on_release = lambda: agent.compute.detach_memory(
        ctx_mod.get_admin_context(), _lease(), [_extent()], 'guest',
        instance_uuid=INSTANCE)
    assert server.handle(_request('stopped'))['ok']
    assert conn.secrets == {}
    # Outside a hook the domain is looked at as before.
    with pytest.raises(AssertionError):
        agent.compute.detach_memory(ctx_mod.get_admin_context(), _lease(),
                                    [_extent()], 'guest',
                                    instance_uuid=INSTANCE)


# ------------------------------------------------- migrate and reconnect

@pytest.mark.parametrize('lease,refused', [
    (_summary(device_count=1, attach_mode='host', memory_mb=0), True),
    (_summary(), True),
    (_summary(attach_mode='host'), False),
    (_summary(status='reserved', host=None), False),
])
def test_live_migration_in(server, conductor, lease, refused):
    _has_lease(server, conductor)
    conductor.status = [lease]
    reply = server.handle(_request('migrate'))
    assert reply['ok'] is not refused
    if refused:
        assert reply['abort'] is True
        assert 'refuses the live migration' in reply['message']
        assert 'Cold migrate' in reply['message']
    else:
        # The prepare that follows does not take the leases from the
        # source host.
        server.handle(_request('prepare'))
        assert conductor.calls[-1][2]['incoming'] is True


def test_live_migration_of_an_instance_without_lease(server, conductor):
    server.refresh()
    assert server.handle(_request('migrate'))['ok']
    # Asked anyway: a lease on another fabric is not in this host's cache.
    assert conductor.names() == ['instance_status']


def test_reconnect_binds_again_what_the_guest_lost(server, conductor, conn):
    _has_lease(server, conductor)
    conn.add_domain(fakes.FakeDomain(INSTANCE))
    conductor.status = [_summary(), _summary(uuid='other', extents=[])]
    assert server.handle(_request('reconnect'))['ok']
    _join(server)
    assert conductor.names() == ['instance_status', 'release_instance',
                                 'prepare_instance']
    assert conductor.calls[-2][2]['leases'] == [LEASE]
    assert conductor.calls[-1][2]['leases'] == [LEASE]


def test_reconnect_leaves_a_complete_guest_alone(server, conductor, conn):
    _has_lease(server, conductor)
    domain = conn.add_domain(fakes.FakeDomain(INSTANCE))
    domain.attachDeviceFlags(libvirt_guest.disk_xml(
        _extent(), 'iqn.x:y', 'vdb'), 1)
    conductor.status = [_summary()]
    server.handle(_request('reconnect'))
    _join(server)
    assert conductor.names() == ['instance_status']


def test_pushes_reach_the_cache(server, agent):
    server.refresh()
    agent.compute.instance_leases_changed(ctx_mod.get_admin_context(),
                                          INSTANCE, [LEASE])
    assert server.cache.leases_of(INSTANCE) == [LEASE]


# ------------------------------------------------------------- the socket

def test_the_socket(server, conductor):
    server.start()
    mode = os.stat(server.path).st_mode
    assert stat.S_ISSOCK(mode)
    assert mode & 0o777 == 0o600
    reply = hook.ask_agent(server.path, _request('prepare'), timeout=10)
    assert reply['ok'] is True
    # One line that is not JSON gets a refusal, not a dropped connection.
    with socket.socket(socket.AF_UNIX) as sock:
        sock.connect(server.path)
        sock.sendall(b'not json\n')
        assert b'not a JSON line' in sock.makefile('rb').readline()
    assert server.handle({'op': 'prepare'})['ok'] is False
    # Another agent cannot take the path over.
    other = hook_server.HookServer(server.node, path=server.path,
                                   group='', conductor=conductor,
                                   refresh_interval=0)
    with pytest.raises(exception.DriverError):
        other.start()
    server.stop()
    assert not os.path.exists(server.path)


def test_a_stale_socket_is_replaced(server, tmp_path):
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(server.path)
    stale.close()
    server.start()
    assert hook.ask_agent(server.path, _request('started'), 10)['ok']


def test_many_hooks_at_once(server, conductor):
    server.start()
    server.refresh()
    replies = []

    def ask():
        replies.append(hook.ask_agent(server.path, _request('prepare'), 10))
    threads = [threading.Thread(target=ask) for _ in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(20)
    assert len(replies) == 20 and all(r['ok'] for r in replies)


class _Peer(object):
    def __init__(self, uid, gid):
        self.cred = hook_server._UCRED.pack(1234, uid, gid)

    def getsockopt(self, *args):
        return self.cred


def test_peers_are_checked(server):
    assert server.peer_allowed(_Peer(0, 0))
    assert server.peer_allowed(_Peer(os.geteuid(), 12345))
    assert not server.peer_allowed(_Peer(4242, 4242))
    server._gid = 4242
    assert server.peer_allowed(_Peer(4242, 4242))


def _second_extent():
    return dict(_extent(), uuid='00000000-0000-0000-0000-00000000e002',
                index=1, target_iqn='iqn.2010-10.org.openstack.composable:e2',
                chap_username='composable-u2', chap_secret='s3cret-abc')


def test_a_lease_growing_while_the_domain_starts_gets_every_extent(
        server, conductor, agent, conn):
    _has_lease(server, conductor)
    second = _second_extent()

    def bind_then_grow():
        ctx = ctx_mod.get_admin_context()
        agent.compute.attach_memory(ctx, _lease(), [_extent()], 'guest',
                                    instance_uuid=INSTANCE)
        # The elastic task grows the lease before QEMU runs.
        agent.compute.attach_memory(ctx, _lease(), [second], 'guest',
                                    instance_uuid=INSTANCE)
    conductor.on_prepare = bind_then_grow
    assert server.handle(_request('prepare'))['ok']
    assert set(agent.memory_attachments[LEASE]) == {EXTENT, second['uuid']}

    domain = conn.add_domain(fakes.FakeDomain(INSTANCE))
    assert server.handle(_request('started'))['ok']
    _join(server)

    assert domain.disk_aliases() == [
        'virtio-disk0', libvirt_guest.disk_alias(EXTENT),
        libvirt_guest.disk_alias(second['uuid'])]


def test_a_lease_shrinking_while_the_domain_starts_keeps_the_rest(
        server, conductor, agent, conn):
    _has_lease(server, conductor)
    second = _second_extent()

    def bind_then_shrink():
        ctx = ctx_mod.get_admin_context()
        agent.compute.attach_memory(ctx, _lease(), [_extent(), second],
                                    'guest', instance_uuid=INSTANCE)
        agent.compute.detach_memory(ctx, _lease(), [second], 'guest',
                                    instance_uuid=INSTANCE)
    conductor.on_prepare = bind_then_shrink
    assert server.handle(_request('prepare'))['ok']
    assert set(agent.memory_attachments[LEASE]) == {EXTENT}

    domain = conn.add_domain(fakes.FakeDomain(INSTANCE))
    assert server.handle(_request('started'))['ok']
    _join(server)

    assert domain.disk_aliases() == ['virtio-disk0',
                                     libvirt_guest.disk_alias(EXTENT)]
