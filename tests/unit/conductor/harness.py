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

"""A conductor, real agent RPC servers and a small inventory, in this
process: the in-process ``fake:/`` message transport, and whatever database
``[database]connection`` names (a SQLite file in unit tests; MariaDB or
PostgreSQL in the functional tests, which reuse this harness)."""

import datetime
import queue
import time

import oslo_messaging
from oslo_messaging._drivers import impl_fake
from oslo_messaging import conffixture

from composable.agent import manager as agent_manager
from composable.common import context as ctx_mod
from composable.common import rpc
from composable.common import service
from composable import conf
from composable.conductor import manager as conductor_manager
from composable.conductor import reservations
from composable.conductor import rpcapi
from composable.conductor import task as lease_task
from composable.db import api as db_api
from composable.db import models
from composable import fabric as fabric_drivers
from composable.fabric import fake as fake_fabric

CONF = conf.CONF

PROJECT = 'p1'
CONDUCTOR = 'cond-0'
HOSTS = ('compute-0', 'compute-1')
MEMORY_NODES = ('memory-0', 'memory-1')


def user_context(project=PROJECT):
    return ctx_mod.RequestContext(user_id='u1', project_id=project,
                                  roles=['member', 'reader'],
                                  request_id='req-test')


def admin():
    return ctx_mod.get_admin_context()


def task_on(lease_id, context=None, host=CONDUCTOR):
    """A task on the lease, as a conductor's worker is given one: its
    reservation (taken now, for ``host``) and the lease read under it.
    For calling a flow or a resizer step directly; a context manager that
    releases the reservation at its end."""
    return lease_task.acquire(context or admin(), lease_id, host, wait=0)


class Harness(object):
    """Start with start(); stop() undoes everything."""

    def __init__(self, rpc_timeout=2, fabric_timeout=2):
        self.rpc_timeout = rpc_timeout
        self.fabric_timeout = fabric_timeout
        self.agents = {}
        self.agent_services = {}
        self.conductor = None
        self.conductor_service = None
        self.api = None
        self.messaging = conffixture.ConfFixture(CONF,
                                                 transport_url='fake:/')

    # ------------------------------------------------------------ set-up

    def _answer_for_the_dead(self):
        """A call to an agent that is not running is delivered to its
        queue, as on a real broker, and times out at once rather than
        after ``rpc_timeout``: nothing can answer it before the test
        starts the agent again, so the caller sees what it would see
        after the wait, without the wait."""
        original = impl_fake.FakeDriver._send
        harness = self

        def _send(driver, target, ctxt, message, wait_for_reply=None,
                  timeout=None, transport_options=None):
            if wait_for_reply and target.topic == rpc.AGENT_TOPIC and \
                    target.server and \
                    target.server not in harness.agent_services:
                exchange = driver._exchange_manager.get_exchange(
                    target.exchange)
                exchange.deliver_message(target.topic, ctxt, message,
                                         server=target.server,
                                         fanout=target.fanout,
                                         reply_q=queue.Queue())
                raise oslo_messaging.MessagingTimeout(
                    'No reply on topic %s' % target.topic)
            return original(driver, target, ctxt, message, wait_for_reply,
                            timeout, transport_options)

        impl_fake.FakeDriver._send = _send
        self._original_send = original

    def start(self, agents=HOSTS[:1] + MEMORY_NODES):
        CONF([], project='composable', default_config_files=[],
             default_config_dirs=[])
        self.messaging.setUp()
        self._answer_for_the_dead()
        CONF.set_override('rpc_response_timeout_bind', self.rpc_timeout)
        CONF.set_override('operation_timeout', self.fabric_timeout,
                          'fabric')
        CONF.set_override('reservation_wait', 0, 'conductor')
        # The loops are driven by the tests (run_periodic_tasks).
        CONF.set_override('periodic_interval', 3600, 'conductor')
        CONF.set_override('heartbeat_interval', 3600, 'conductor')
        CONF.set_override('heartbeat_timeout', 60, 'conductor')
        # The reconciler is run by the tests that want it (Reconciler.run).
        CONF.set_override('reconcile_interval', 0, 'conductor')
        # Usage pruning and elastic resizing too (ElasticResizer.run).
        CONF.set_override('prune_interval', 0, 'elastic')
        CONF.set_override('resize_interval', 0, 'elastic')
        impl_fake.FakeExchangeManager.cleanup()
        fake_fabric.FakeFabricDriver.reset()
        fabric_drivers.reset()
        rpc.cleanup()
        rpc.init(CONF)
        self.inventory()
        for name in agents:
            self.start_agent(name)
        self.conductor = conductor_manager.ConductorManager(CONDUCTOR)
        self.conductor_service = service.RPCService(
            rpc.CONDUCTOR_TOPIC, CONDUCTOR, [self.conductor],
            manager=self.conductor)
        self.conductor_service.start()
        self.api = rpcapi.ConductorAPI(timeout=30)
        return self

    def start_agent(self, name):
        roles = (['memory_node'] if name.startswith('memory')
                 else ['compute_node'])
        agent = agent_manager.AgentManager(name, roles)
        svc = service.RPCService(rpc.AGENT_TOPIC, name, agent.endpoints)
        svc.start()
        self.agents[name] = agent
        self.agent_services[name] = svc
        return agent

    def stop_agent(self, name):
        svc = self.agent_services.pop(name)
        svc.stop()
        svc.wait()

    def stop(self):
        # Stop every server first, then wait for all: each one takes a
        # poll interval of the fake driver to notice.
        services = list(self.agent_services.values())
        if self.conductor_service is not None:
            services.insert(0, self.conductor_service)
        for svc in services:
            svc.stop()
        for svc in services:
            svc.wait()
        self.agent_services.clear()
        impl_fake.FakeDriver._send = self._original_send
        rpc.cleanup()
        impl_fake.FakeExchangeManager.cleanup()
        fake_fabric.FakeFabricDriver.reset()
        fabric_drivers.reset()
        with reservations._HELD_LOCK:
            reservations._HELD.clear()
        self.messaging.cleanUp()
        for name in ('rpc_response_timeout_bind',):
            CONF.clear_override(name)
        for name, group in (('operation_timeout', 'fabric'),
                            ('reservation_wait', 'conductor'),
                            ('periodic_interval', 'conductor'),
                            ('heartbeat_interval', 'conductor'),
                            ('heartbeat_timeout', 'conductor'),
                            ('reconcile_interval', 'conductor'),
                            ('prune_interval', 'elastic'),
                            ('resize_interval', 'elastic')):
            CONF.clear_override(name, group)

    def inventory(self, node_mb=4096, gpus=2):
        ctx = admin()
        self.fabric = db_api.fabric_create(ctx, {'name': 'fab',
                                                 'driver': 'fake'})
        self.hosts = {}
        for name in HOSTS:
            self.hosts[name] = db_api.host_create(ctx, {
                'name': name, 'fabric_id': self.fabric.id,
                'initiator_iqn': 'iqn.2026-11.org.openstack:%s' % name})
        self.memory_pool = db_api.pool_create(ctx, {
            'name': 'memory-pool', 'kind': 'memory',
            'fabric_id': self.fabric.id, 'step_size': 1024,
            'resource_class': 'CUSTOM_COMPOSABLE_MEMORY_MB'})
        for name in MEMORY_NODES:
            db_api.memory_node_create(ctx, {
                'name': name, 'pool_id': self.memory_pool.id,
                'capacity_mb': node_mb, 'portal': '127.0.0.1:3260'})
        self.gpu_pool = db_api.pool_create(ctx, {
            'name': 'gpu-pool', 'kind': 'gpu', 'fabric_id': self.fabric.id,
            'resource_class': 'CUSTOM_COMPOSABLE_GPU'})
        self.devices = [db_api.device_create(ctx, {
            'pool_id': self.gpu_pool.id, 'address': 'fake-gpu-%d' % i,
            'kind': 'gpu', 'model': 'FakeGPU-16G'}) for i in range(gpus)]

    # ------------------------------------------------------------ helpers

    def create(self, ctx=None, check_fit=False, **values):
        values.setdefault('project_id', PROJECT)
        return self.api.create_lease(ctx or user_context(), values,
                                     check_fit=check_fit)['uuid']

    def lease(self, uuid):
        return db_api.lease_get(admin(), uuid)

    def wait(self, uuid, statuses, timeout=30):
        if isinstance(statuses, str):
            statuses = [statuses]
        deadline = time.monotonic() + timeout
        while True:
            lease = self.lease(uuid)
            # The local registry is dropped last, once the worker has
            # also finished the lease action.
            if (lease.status in statuses and lease.reservation is None
                    and not reservations.held_locally(CONDUCTOR, lease.id)):
                return lease
            if time.monotonic() > deadline:
                raise AssertionError('lease %s is %s (reservation %s, '
                                     'fault %s), not %s' % (
                                         uuid, lease.status,
                                         lease.reservation, lease.fault,
                                         statuses))
            time.sleep(0.05)

    def idle(self, timeout=30):
        assert self.conductor.wait_for_workers(timeout)

    def actions(self, uuid):
        lease = self.lease(uuid)
        return [(a.action, a.result)
                for a in db_api.action_list(admin(), lease.id)]

    def pool(self, pool):
        return db_api.pool_get(admin(), pool.uuid)

    def node_allocated(self):
        return {n.name: n.allocated_mb
                for n in db_api.memory_node_list(admin())}

    def live_exports(self):
        return {name: dict(agent.exporter.exports)
                for name, agent in self.agents.items()
                if 'memory_node' in agent.roles and
                agent.memory_node.exporter_made}

    def backed(self):
        return {name: set(agent.exporter.backed)
                for name, agent in self.agents.items()
                if 'memory_node' in agent.roles and
                agent.memory_node.exporter_made}

    def host_attachments(self):
        return {name: (dict(agent.memory_attachments),
                       dict(agent.device_attachments))
                for name, agent in self.agents.items()
                if 'compute_node' in agent.roles}

    def assert_nothing_live(self):
        for name, exports in self.live_exports().items():
            assert not exports, '%s still exports %s' % (name, exports)
        for name, (memory, devices) in self.host_attachments().items():
            assert not memory and not devices, (
                '%s still has %s %s' % (name, memory, devices))
        assert not fake_fabric.FakeFabricDriver.bindings()

    def set_conductor_heartbeat(self, hostname, age_seconds):
        """Make (or age) a conductor row, as a conductor that stopped
        beating ``age_seconds`` ago would have left it."""
        ctx = admin()
        db_api.conductor_heartbeat(ctx, hostname)
        when = (datetime.datetime.utcnow().replace(microsecond=0) -
                datetime.timedelta(seconds=age_seconds))
        with db_api.writer(ctx) as session:
            session.query(models.Conductor).filter(
                models.Conductor.hostname == hostname).update(
                    {'heartbeat_at': when}, synchronize_session=False)
