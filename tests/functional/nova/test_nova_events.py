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

"""Nova's versioned notifications end and move an instance's leases.

Nova (API, conductor, scheduler, three computes with the fake virt
driver) and a real Placement run in process, as in test_flavor_boot.
composable runs in the same process: its conductor (with the Nova
notification listener), the agents of two compute hosts and a memory
node, on the machine's MariaDB and on a RabbitMQ virtual host of the
test's own.

Nova's functional fixtures replace its notifier with a fake that keeps
the versioned notifications in a list (nova.tests.fixtures.notifications.
FakeVersionedNotifier); nothing of Nova's reaches a message bus. A bridge
thread takes each notification Nova emits, as Nova serialized it, and
publishes it unchanged with oslo.messaging on the RabbitMQ vhost, on
Nova's exchange (``nova``) and topic (``versioned_notifications``): from
there on it is the production path (the conductor's listener pool, the
handlers, the lease flows, the agents).

The conductor also asks the in-process Nova API where a server runs and
which scheduler hints it was booted with (python-novaclient and
microversion 2.100), with an auth plugin that speaks the fixture's fake
authentication (X-Auth-User, X-Roles) instead of Keystone.
"""

import contextlib
import os
import socket
import subprocess
import threading
import time
import urllib.parse
import uuid

import fixtures
from keystoneauth1 import loading as ks_loading
from keystoneauth1 import plugin as ks_plugin
from keystoneauth1 import session as ks_session
from oslo_config import cfg
import oslo_messaging as messaging
from oslo_messaging import conffixture
import pytest

from composable.agent import manager as agent_manager
from composable.common import context as ctx_mod
from composable.common import rpc
from composable.common import service
from composable.common import states
from composable.conductor import manager as conductor_manager
from composable.conductor.nova import client as nova_api
from composable.conductor.placement import claims as placement_claims
from composable.conductor.placement import sync
from composable.conductor import reservations
from composable import conf
from composable.db import api as db_api
from composable.fabric import fake as fake_fabric
from tests.functional import fixtures as db_fixtures
from tests.functional.nova import base

CONF = conf.CONF
MEM = 'CUSTOM_COMPOSABLE_MEMORY_MB'
CONDUCTOR = 'cond-nova'
COMPOSABLE_HOSTS = ('host1', 'host2')


def admin():
    return ctx_mod.get_admin_context()


def rabbit_url():
    url = os.environ.get('COMPOSABLE_TRANSPORT_URL')
    if not url:
        pytest.skip('needs RabbitMQ: set COMPOSABLE_TRANSPORT_URL')
    parsed = urllib.parse.urlsplit(url)
    try:
        socket.create_connection((parsed.hostname or '127.0.0.1',
                                  parsed.port or 5672), timeout=5).close()
    except OSError as exc:
        pytest.fail('RabbitMQ at %s does not answer: %s' % (
            parsed.hostname, exc), pytrace=False)
    return url


class RabbitVhost(fixtures.Fixture):
    """A RabbitMQ virtual host of the test's own (queues are named after
    topics: another test on the same vhost would share them)."""

    def _setUp(self):
        url = rabbit_url()
        self.name = 'composable-nova-%s' % uuid.uuid4().hex[:8]
        parsed = urllib.parse.urlsplit(url)
        subprocess.run(['rabbitmqctl', '-q', 'add_vhost', self.name],
                       check=True, capture_output=True, timeout=60)
        self.addCleanup(subprocess.run,
                        ['rabbitmqctl', '-q', 'delete_vhost', self.name],
                        capture_output=True, timeout=60)
        subprocess.run(['rabbitmqctl', '-q', 'set_permissions', '-p',
                        self.name, parsed.username or 'guest', '.*', '.*',
                        '.*'], check=True, capture_output=True, timeout=60)
        self.url = urllib.parse.urlunsplit(
            parsed._replace(path='/' + self.name))


class NovaBridge(fixtures.Fixture):
    """Publishes every versioned notification Nova's fake notifier keeps
    onto RabbitMQ, unchanged, on Nova's exchange and topic, in order."""

    def __init__(self, notifier, url):
        self.notifier = notifier
        self.url = url

    def _setUp(self):
        nova_conf = cfg.ConfigOpts()
        nova_conf([], default_config_files=[], default_config_dirs=[])
        # The first transport registers the options; a driver takes its
        # default exchange when it is made.
        messaging.get_notification_transport(nova_conf, url=self.url).cleanup()
        nova_conf.set_override('control_exchange', 'nova')
        self.transport = messaging.get_notification_transport(nova_conf,
                                                              url=self.url)
        self.addCleanup(self.transport.cleanup)
        self.publisher = messaging.Notifier(
            self.transport, driver='messagingv2',
            topics=['versioned_notifications'])
        self.sent = []
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True,
                                       name='nova-notification-bridge')
        self.thread.start()
        self.addCleanup(self._stop)

    def _stop(self):
        self.stopping.set()
        self.thread.join(30)

    def _run(self):
        while not self.stopping.wait(0.05):
            captured = self.notifier.versioned_notifications
            for notification in list(captured[len(self.sent):]):
                notifier = self.publisher.prepare(
                    publisher_id=notification['publisher_id'])
                getattr(notifier, notification['priority'].lower())(
                    {}, notification['event_type'], notification['payload'])
                self.sent.append(notification['event_type'])


class NovaTestAuth(ks_plugin.BaseAuthPlugin):
    """What Nova's OSAPIFixture takes for authentication (its fake
    keystone context reads X-Auth-User, X-Auth-Project-Id, X-Roles), and
    its endpoint in place of a service catalog."""

    def __init__(self, endpoint, project_id):
        super().__init__()
        self.endpoint = endpoint
        self.project_id = project_id

    def get_headers(self, session, **kwargs):
        return {'X-Auth-Token': 'admin', 'X-Auth-User': 'admin',
                'X-Auth-Project-Id': self.project_id,
                'X-Roles': 'admin,member,reader'}

    def get_endpoint(self, session, **kwargs):
        return self.endpoint


class Composable(fixtures.Fixture):
    """composable in this process: MariaDB, the RabbitMQ vhost, a
    conductor listening to Nova, agents for host1, host2 (the hosts of
    the fabric's aggregate) and memory-0, the memory pool reported to
    Placement in that aggregate."""

    def __init__(self, test, aggregate_uuid, transport_url):
        self.test = test
        self.aggregate_uuid = aggregate_uuid
        self.transport_url = transport_url

    def _setUp(self):
        CONF([], project='composable', default_config_files=[],
             default_config_dirs=[])
        stack = contextlib.ExitStack()
        self.addCleanup(stack.close)
        # oslo.db's engine facade reads the connection from the global
        # cfg.CONF when it starts, and while a Nova test runs that is
        # Nova's configuration (tests/unit/nova/novaenv.py): start
        # composable's facade under composable's own.
        saved, cfg.CONF = cfg.CONF, CONF
        try:
            stack.enter_context(db_fixtures.database(
                'mysql', tmpdir=self.useFixture(fixtures.TempDir()).path))
            engine = db_api.get_engine()
        finally:
            cfg.CONF = saved
        assert engine.url.get_backend_name() == 'mysql', engine.url
        self.useFixture(conffixture.ConfFixture(
            CONF, transport_url=self.transport_url))
        for group, name, value in self._overrides():
            CONF.set_override(name, value, group)
            self.addCleanup(CONF.clear_override, name, group)
        placement_claims.set_client(None)
        self.addCleanup(placement_claims.set_client, None)
        rpc.cleanup()
        rpc.init(CONF)
        self.addCleanup(rpc.cleanup)
        self.addCleanup(self._forget_reservations)
        fake_fabric.FakeFabricDriver.reset()
        self.addCleanup(fake_fabric.FakeFabricDriver.reset)
        self._inventory()
        nova_api.reset(nova_api.NovaAPI(
            session=ks_session.Session(),
            auth=NovaTestAuth(self.test.api_fixture.base_url,
                              self.test.api.project_id)))
        self.addCleanup(nova_api.reset)
        self.services = []
        self.agents = {}
        for name, roles in (('memory-0', ['memory_node']),
                            ('host1', ['compute_node']),
                            ('host2', ['compute_node'])):
            self.agents[name] = self._serve_agent(name, roles)
        self.conductor = conductor_manager.ConductorManager(CONDUCTOR)
        self._serve(rpc.CONDUCTOR_TOPIC, CONDUCTOR, [self.conductor],
                    manager=self.conductor)

    def _agent(self, name, roles):
        """The agent of one host (simulated data plane)."""
        return agent_manager.AgentManager(name, roles)

    def _overrides(self):
        endpoint = self.test.placement.fixture.endpoint
        CONF.register_opts(
            ks_loading.get_auth_plugin_conf_options('admin_token'),
            group='placement')
        return [
            (None, 'rpc_response_timeout_bind', 30),
            ('conductor', 'periodic_interval', 3600),
            ('conductor', 'heartbeat_interval', 3600),
            ('conductor', 'reconcile_interval', 0),
            ('conductor', 'node_check_interval', 0),
            ('conductor', 'reservation_wait', 5),
            ('nova', 'notifications_enabled', True),
            ('nova', 'notifications_busy_wait', 5),
            ('placement', 'auth_type', 'admin_token'),
            ('placement', 'endpoint', endpoint),
            ('placement', 'token', 'admin'),
            ('placement', 'composable_reconcile_interval', 0),
        ]

    def _serve_agent(self, name, roles):
        agent = self._agent(name, roles)
        self._serve(rpc.AGENT_TOPIC, name, agent.endpoints)
        return agent

    def _serve(self, topic, name, endpoints, manager=None):
        svc = service.RPCService(topic, name, endpoints, manager=manager)
        svc.start()
        self.addCleanup(svc.wait)
        self.addCleanup(svc.stop)

    @staticmethod
    def _forget_reservations():
        with reservations._HELD_LOCK:
            reservations._HELD.clear()

    def _inventory(self):
        ctx = admin()
        fabric = db_api.fabric_create(ctx, {
            'name': 'fabric', 'driver': 'fake',
            'aggregate_uuid': self.aggregate_uuid})
        self.hosts = {name: db_api.host_create(ctx, {
            'name': name, 'fabric_id': fabric.id,
            'initiator_iqn': 'iqn.2026-11.org.openstack:%s' % name})
            for name in COMPOSABLE_HOSTS}
        pool = db_api.pool_create(ctx, {
            'name': 'memory', 'kind': 'memory', 'fabric_id': fabric.id,
            'step_size': 1024, 'resource_class': MEM})
        db_api.memory_node_create(ctx, {
            'name': 'memory-0', 'pool_id': pool.id, 'capacity_mb': 8192,
            'portal': '127.0.0.1:3260'})
        pool = db_api.pool_get(ctx, pool.uuid)
        sync.sync_pool(pool, placement_claims.get_client(), ctx)
        self.pool = db_api.pool_get(ctx, pool.uuid)

    # ------------------------------------------------------------ reading

    def used(self):
        return db_api.pool_get(admin(), self.pool.uuid).used

    def leases(self, instance):
        return db_api.lease_list_for_instance(
            admin(), instance, include_released=True)

    def wait(self, what, condition, timeout=300):
        deadline = time.monotonic() + timeout
        while True:
            value = condition()
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError('timed out waiting for %s' % what)
            time.sleep(0.1)

    def wait_lease(self, instance, status, host=None):
        def check():
            leases = [lease for lease in self.leases(instance)
                      if lease.reservation is None]
            for lease in leases:
                if lease.status == status and (
                        host is None or
                        lease.host is not None and lease.host.name == host):
                    return lease
            return None
        return self.wait('a lease of %s %s on %s' % (instance, status, host),
                         check)


class NovaEventsTest(base.ProviderUsageTestCase):

    def setUp(self):
        super().setUp()
        for host in ('host1', 'host2', 'host3'):
            self._start_compute(host)
        aggregate = self.admin_api.post_aggregate(
            {'aggregate': {'name': 'composable-fabric'}})
        for host in COMPOSABLE_HOSTS:
            self.admin_api.add_host_to_aggregate(aggregate['id'], host)
        vhost = self.useFixture(RabbitVhost())
        self.composable = self.useFixture(
            Composable(self, aggregate['uuid'], vhost.url))
        self.bridge = self.useFixture(NovaBridge(self.notifier, vhost.url))
        self.flavor_id = self._create_flavor(
            vcpu=1, memory_mb=512, disk=1, ephemeral=0,
            extra_spec={'resources:%s' % MEM: '2048',
                        'composable:attach_mode': 'host'})

    def pool_usage(self):
        return self._get_provider_usages(self.composable.pool.provider_uuid)

    def test_flavor_lease_follows_the_instance_and_ends_with_it(self):
        c = self.composable
        server = self._create_server(flavor_id=self.flavor_id,
                                     networks='none')
        source = server['OS-EXT-SRV-ATTR:host']
        self.assertIn(source, COMPOSABLE_HOSTS)
        # instance.create.end: the lease made from Nova's allocation,
        # bound on the instance's host.
        lease = c.wait_lease(server['id'], states.BOUND, source)
        self.assertEqual(2048, lease.memory_mb)
        self.assertEqual(server['id'], lease.placement_consumer)
        self.assertEqual(self.api.project_id, lease.project_id)
        self.assertEqual(2048, c.used())
        # Nova's allocation is the only Placement claim.
        self.assertEqual({MEM: 2048}, self.pool_usage())
        self.assertEqual(
            {}, placement_claims.get_client().get_allocations(
                lease.uuid)['allocations'])

        # Cold migration: the scheduler finds the other host of the
        # fabric. (Not with a target host: Nova then asks Placement for
        # candidates in_tree of that compute node, which leaves the
        # sharing provider out, and finds no valid host.)
        target = [h for h in COMPOSABLE_HOSTS if h != source][0]
        server = self._migrate_server(server)
        self.assertEqual(target, server['OS-EXT-SRV-ATTR:host'])
        moved = c.wait_lease(server['id'], states.BOUND, target)
        self.assertEqual(lease.uuid, moved.uuid)
        self.assertEqual(server['id'], moved.instance_uuid)
        # Until the confirm, Nova holds the pool memory twice (the
        # migration's allocation on the source and the instance's on the
        # destination): the pool needs that headroom. composable holds
        # it once.
        self.assertEqual({MEM: 4096}, self.pool_usage())
        self.assertEqual(2048, c.used())
        self._confirm_resize(server)
        self.notifier.wait_for_versioned_notifications(
            'instance.resize_confirm.end')
        self.assertEqual({MEM: 2048}, self.pool_usage())
        c.wait('the confirm to reach composable',
               lambda: 'instance.resize_confirm.end' in self.bridge.sent)
        lease = c.wait_lease(server['id'], states.BOUND, target)
        actions = [a.action for a in db_api.action_list(admin(), lease.id)]
        self.assertEqual(['create', 'bind', 'move', 'bind'], actions)

        # instance.delete.end: the lease ends, the capacity returns.
        self._delete_server(server)
        c.wait_lease(server['id'], states.RELEASED)
        self.assertEqual(0, c.used())
        self.assertEqual({MEM: 0}, self.pool_usage())

    def test_resize_replaces_the_flavor_lease_and_revert_restores_it(self):
        c = self.composable
        bigger = self._create_flavor(
            vcpu=1, memory_mb=512, disk=1, ephemeral=0,
            extra_spec={'resources:%s' % MEM: '4096',
                        'composable:attach_mode': 'host'})
        server = self._create_server(flavor_id=self.flavor_id,
                                     networks='none')
        source = server['OS-EXT-SRV-ATTR:host']
        first = c.wait_lease(server['id'], states.BOUND, source)

        def bound(memory_mb, host):
            def check():
                for lease in c.leases(server['id']):
                    if (lease.status == states.BOUND and
                            lease.reservation is None and
                            lease.memory_mb == memory_mb and
                            lease.host.name == host):
                        return lease
                return None
            return c.wait('a %d MiB lease bound on %s' % (memory_mb, host),
                          check)

        # instance.resize_finish.end: the guest runs with the new flavor,
        # whose capacity Nova claimed under the instance; the old lease
        # is released and the new flavor's bound where the guest runs.
        server = self._resize_server(server, bigger)
        target = server['OS-EXT-SRV-ATTR:host']
        self.assertNotEqual(source, target)
        resized = bound(4096, target)
        self.assertNotEqual(first.uuid, resized.uuid)
        self.assertEqual(server['id'], resized.placement_consumer)
        c.wait_lease(server['id'], states.RELEASED)
        self.assertEqual(4096, c.used())
        # Placement holds both flavors (instance and migration) until the
        # confirm or the revert; composable the running one only.
        self.assertEqual({MEM: 6144}, self.pool_usage())

        # instance.resize_revert.end: the old flavor again, on the source.
        server = self._revert_resize(server)
        self.assertEqual(source, server['OS-EXT-SRV-ATTR:host'])
        back = bound(2048, source)
        self.assertNotIn(back.uuid, (first.uuid, resized.uuid))
        c.wait('the resized lease to be released', lambda: (
            db_api.lease_get(admin(), resized.uuid).status ==
            states.RELEASED))
        self.assertEqual(2048, c.used())
        self.assertEqual({MEM: 2048}, self.pool_usage())
        self.assertEqual(
            [states.RELEASED, states.RELEASED, states.BOUND],
            [lease.status for lease in c.leases(server['id'])])

    def test_hinted_lease_is_bound_with_the_instance(self):
        c = self.composable
        ctx = ctx_mod.RequestContext(user_id='u1',
                                     project_id=self.api.project_id,
                                     roles=['member'])
        made = c.conductor.create_lease(ctx, {'memory_mb': 1024})
        lease_uuid = made['uuid'] if isinstance(made, dict) else made
        flavor = self._create_flavor(vcpu=1, memory_mb=512, disk=1,
                                     ephemeral=0)
        body = {'server': self._build_server(
            flavor_id=flavor, networks='none', az='nova:host2')}
        body['os:scheduler_hints'] = {'composable_lease': lease_uuid}
        server = self._wait_for_state_change(
            self.admin_api.post_server(body), 'ACTIVE')
        # The conductor asks the real Nova API (novaclient; 2.100 for
        # the hints).
        found = nova_api.get_server(admin(), server['id'])
        self.assertEqual('host2', found.host)
        self.assertEqual(self.api.project_id, found.project_id)
        self.assertEqual('active', found.vm_state)
        self.assertEqual(
            {'composable_lease': [lease_uuid]},
            nova_api.scheduler_hints(admin(), server['id']))
        lease = c.wait_lease(server['id'], states.BOUND, 'host2')
        self.assertEqual(lease_uuid, lease.uuid)
        # Deleting the server gives the lease back to its owner.
        self._delete_server(server)
        lease = c.wait('the lease to be unbound', lambda: (
            lambda lease: lease if lease.status == states.RESERVED and
            lease.reservation is None else None)(
                db_api.lease_get(admin(), lease_uuid)))
        self.assertIsNone(lease.instance_uuid)
        self.assertEqual(1024, c.used())
