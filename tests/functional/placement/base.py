"""Placement for tests: placement's own PlacementFixture, reached
through a keystoneauth1 Adapter like in production."""

import fixtures
from keystoneauth1 import adapter as ks_adapter
from keystoneauth1 import session as ks_session
from keystoneauth1 import token_endpoint
from placement import db_api as placement_db
from placement.tests.functional.fixtures import placement as pfixture

from composable.common import context as ctx_mod
from composable.conductor import allocator
from composable.conductor import states
from composable.db import api as dbapi
from composable.placement import client as pclient


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


class RealPlacement(fixtures.Fixture):
    """Placement's WSGI application with its noauth2 middleware; the
    token "admin" makes every request an admin's."""

    def _setUp(self):
        self.fixture = self.useFixture(pfixture.PlacementFixture(
            token='admin', db=True, use_intercept=True))
        self.endpoint = self.fixture.endpoint
        # Runs before the fixture drops Placement's tables.
        self.addCleanup(foreign_keys_off)

    def adapter(self):
        auth = token_endpoint.Token(self.endpoint, 'admin')
        return ks_adapter.Adapter(ks_session.Session(auth=auth),
                                  service_type='placement')

    def client(self, **kwargs):
        kwargs.setdefault('retry_delay', 0)
        return pclient.ReportClient(self.adapter(), **kwargs)


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
    assert dbapi.lease_update(ctx, lease.id, {'status': states.RELEASING})
    allocator.release_capacity(ctx, lease.id)
    return dbapi.lease_get(ctx, lease.uuid)


def delete_pool(pool):
    ctx = admin()
    for node in dbapi.memory_node_list(ctx, filters={'pool_id': pool.id}):
        dbapi.memory_node_delete(ctx, node.uuid)
    dbapi.pool_delete(ctx, pool.uuid)
