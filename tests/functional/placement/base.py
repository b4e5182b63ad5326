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

"""Placement for tests: placement's own PlacementFixture, reached
through a keystoneauth1 Adapter like in production."""

import contextlib
import threading

import fixtures
from keystoneauth1 import adapter as ks_adapter
from keystoneauth1 import loading as ks_loading
from keystoneauth1 import session as ks_session
from keystoneauth1 import token_endpoint
from oslo_db.sqlalchemy import engines as db_engines
from oslo_utils import uuidutils
from placement import db_api as placement_db
from placement import deploy as placement_deploy
from placement.db.sqlalchemy import migration as placement_migration
from placement.objects import resource_class as placement_rc
from placement.objects import trait as placement_trait
from placement.tests.functional.fixtures import placement as pfixture
from wsgi_intercept import interceptor

from composable.common import context as ctx_mod
from composable.common import states
from composable.conductor.allocator import claims as allocator
from composable.conductor.placement import claims as placement_claims
from composable.conductor.placement import client as pclient
from composable import conf
from composable.db import api as dbapi
from tests import lease_rows


def foreign_keys_off():
    """composable.db.api turns SQLite foreign keys on for every SQLite
    connection of the process (a pool-level listener), Placement's test
    database included; oslo.db's drop of Placement's tables at cleanup
    then fails. Turn them off again on Placement's connection (outside
    a transaction, where SQLite ignores the pragma)."""
    raw = placement_db.get_placement_engine().raw_connection()
    try:
        raw.driver_connection.execute('PRAGMA foreign_keys = OFF')
    finally:
        raw.close()


class _PlacementOn(pfixture.PlacementFixture):
    """Placement's fixture with its database at ``url`` (an empty
    database on a server), set up as Placement's own Database fixture
    sets up its in-memory one: the schema from the models, the engine
    patched into Placement's transaction factory, the standard traits and
    resource classes synced again into the new database."""

    def __init__(self, url, **kwargs):
        kwargs['db'] = False
        super().__init__(**kwargs)
        self.url = url

    def _configure_placement(self, conf_fixture):
        conf_fixture.config(connection=self.url, group='placement_database')
        # Starts the factory if no earlier test did (run once).
        placement_db.configure(conf_fixture.conf)
        engine = db_engines.create_engine(self.url)
        self.addCleanup(engine.dispose)
        placement_migration.create_schema(engine)
        self.addCleanup(
            placement_db.placement_context_manager.patch_engine(engine))
        self.addCleanup(self._unsynced)
        self._unsynced()

    @staticmethod
    def _unsynced():
        # Placement remembers per process that it synced these; the new
        # database has none yet (loadapp syncs them).
        placement_trait._TRAITS_SYNCED = False
        placement_rc._RESOURCE_CLASSES_SYNCED = False


class _OneRequestAtATime(pfixture.PlacementFixture):
    """Placement's fixture on its in-memory SQLite database, serving one
    request at a time.

    That database is one connection shared by every thread, so two
    requests served at once (a conductor thread pushing inventory while
    the test reads it) share one transaction, and Placement answers 500
    "cannot start a transaction within a transaction". A deployed
    Placement gives each request a connection of its own; here the
    requests queue instead, which changes no answer.
    """

    def __init__(self, **kwargs):
        kwargs['use_intercept'] = False
        super().__init__(**kwargs)

    def setUp(self):
        super().setUp()
        app = placement_deploy.loadapp(self.conf_fixture.conf)
        lock = threading.Lock()

        def one_at_a_time(environ, start_response):
            with lock:
                result = app(environ, start_response)
                try:
                    body = b''.join(result)
                finally:
                    if hasattr(result, 'close'):
                        result.close()
            return [body]

        self.endpoint = 'http://%s/placement' % uuidutils.generate_uuid()
        intercept = interceptor.RequestsInterceptor(lambda: one_at_a_time,
                                                    url=self.endpoint)
        intercept.install_intercept()
        self.addCleanup(intercept.uninstall_intercept)


class RealPlacement(fixtures.Fixture):
    """Placement's WSGI application with its noauth2 middleware; the
    token "admin" makes every request an admin's.

    Its database is in-memory SQLite on one shared connection unless
    ``url`` names another; it then serves one request at a time (see
    _OneRequestAtATime), so tests of concurrent claims give Placement a
    database server of its own.
    """

    def __init__(self, url=None):
        super().__init__()
        self.url = url

    def _setUp(self):
        kwargs = dict(token='admin', db=True, use_intercept=True)
        if self.url:
            self.fixture = self.useFixture(_PlacementOn(self.url, **kwargs))
        else:
            self.fixture = self.useFixture(_OneRequestAtATime(**kwargs))
        self.endpoint = self.fixture.endpoint
        if not self.url or self.url.startswith('sqlite'):
            # Runs before the fixture drops Placement's tables.
            self.addCleanup(foreign_keys_off)

    def adapter(self):
        auth = token_endpoint.Token(self.endpoint, 'admin')
        return ks_adapter.Adapter(ks_session.Session(auth=auth),
                                  service_type='placement')

    def client(self, **kwargs):
        kwargs.setdefault('retry_delay', 0)
        return pclient.ReportClient(self.adapter(), **kwargs)


@contextlib.contextmanager
def placement_configured(endpoint, **extra):
    """composable configured to reach the Placement at ``endpoint`` the
    way an operator configures it: [placement] credentials (auth_type
    set, so composable_enabled's default turns Placement on)."""
    conf_ = conf.CONF
    conf_.register_opts(
        ks_loading.get_auth_plugin_conf_options('admin_token'),
        group='placement')
    overrides = {'auth_type': 'admin_token', 'token': 'admin',
                 'endpoint': endpoint,
                 # Tests run the periodic pass themselves unless they say
                 # otherwise.
                 'composable_reconcile_interval': 0,
                 # A batch of claims waits this long for an unreachable
                 # Placement before its leases fail.
                 'composable_unavailable_wait': 0.5}
    overrides.update(extra)
    for name, value in overrides.items():
        conf_.set_override(name, value, 'placement')
    placement_claims.set_client(None)
    try:
        yield overrides
    finally:
        placement_claims.set_client(None)
        for name in overrides:
            conf_.clear_override(name, 'placement')


def admin():
    return ctx_mod.get_admin_context()


def memory_pool(name='mem', nodes=(4096, 4096), step=1024, reserved=0,
                aggregate=None, traits=None, fabric=None):
    ctx = admin()
    fabric = fabric or dbapi.fabric_create(ctx, {
        'name': 'fab-' + name, 'driver': 'fake',
        'aggregate_uuid': aggregate})
    pool = dbapi.pool_create(ctx, {
        'name': name, 'kind': 'memory', 'fabric_id': fabric.id,
        'resource_class': 'CUSTOM_COMPOSABLE_MEMORY_MB', 'step_size': step,
        'reserved': reserved, 'traits': traits or []})
    for i, capacity in enumerate(nodes):
        dbapi.memory_node_create(ctx, {'name': '%s-node-%d' % (name, i),
                                       'pool_id': pool.id,
                                       'capacity_mb': capacity})
    return dbapi.pool_get(ctx, pool.uuid)


def gpu_pool(fabric_id, name='gpu', count=2, traits=None):
    ctx = admin()
    pool = dbapi.pool_create(ctx, {
        'name': name, 'kind': 'gpu', 'fabric_id': fabric_id,
        'resource_class': 'CUSTOM_COMPOSABLE_GPU', 'traits': traits or []})
    for i in range(count):
        dbapi.device_create(ctx, {'pool_id': pool.id,
                                  'address': '%s-%d' % (name, i),
                                  'kind': 'gpu', 'model': 'A100'})
    return dbapi.pool_get(ctx, pool.uuid)


def allocated_lease(project='p1', user='u1', **values):
    """A lease the allocator moved to reserved."""
    values.update(project_id=project, user_id=user,
                  status=states.ALLOCATING)
    lease = dbapi.lease_create(admin(), values)
    allocator.allocate(admin(), lease.id)
    return dbapi.lease_get(admin(), lease.uuid)


def released(lease):
    ctx = admin()
    assert lease_rows.write(ctx, lease.id, {'status': states.RELEASING})
    allocator.release_capacity(ctx, lease.id)
    return dbapi.lease_get(ctx, lease.uuid)


def delete_pool(pool):
    ctx = admin()
    for node in dbapi.memory_node_list(ctx, filters={'pool_id': pool.id}):
        dbapi.memory_node_delete(ctx, node.uuid)
    dbapi.pool_delete(ctx, pool.uuid)
