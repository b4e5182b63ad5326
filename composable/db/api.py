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

"""Database queries. Every function opens its own transaction through
oslo.db's enginefacade, or joins the caller's when given a ``context`` that
is already inside one (``with writer(context): ...``).

Objects are looked up by UUID or by name (``ident``). Project scoping of
leases happens here as well as in policy: a non-admin context never sees
another project's lease, whatever the caller forgot.
"""

import datetime
import threading

from oslo_db import api as oslo_db_api
from oslo_db import exception as db_exc
from oslo_db.sqlalchemy import enginefacade
from oslo_db.sqlalchemy import utils as db_utils
from oslo_log import log as logging
from oslo_utils import uuidutils
import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy import orm
from sqlalchemy.pool import base as sa_pool_base

from composable.common import exception
from composable.common import media
from composable.common import sriov
from composable.common import states
from composable.common import utils
from composable.db import models

LOG = logging.getLogger(__name__)

_FACADE = None
_FACADE_LOCK = threading.Lock()


def _sqlite_on_connect(dbapi_conn, record):
    # Writers wait for the lock instead of failing at once.
    cursor = dbapi_conn.cursor()
    cursor.execute('PRAGMA busy_timeout = 30000')
    cursor.execute('PRAGMA foreign_keys = ON')
    cursor.close()


def _sqlite_on_begin(conn):
    # oslo.db turns off pysqlite's own BEGIN and emits a plain (DEFERRED)
    # one unless the connection is marked as in a transaction. A DEFERRED
    # transaction lets two writers deadlock (both hold SHARED, both want
    # RESERVED); BEGIN IMMEDIATE takes the write lock first, so SQLite
    # writers queue instead. Inserted ahead of oslo.db's own listener.
    if 'in_transaction' not in conn.info:
        conn.exec_driver_sql('BEGIN IMMEDIATE')
        conn.info['in_transaction'] = True


def _mysql_on_connect(dbapi_conn, record):
    # READ COMMITTED, as PostgreSQL runs by default. Correctness rests on
    # row locks and compare-and-set UPDATEs, never on REPEATABLE READ's
    # snapshot; what REPEATABLE READ adds on InnoDB is gap locks, on every
    # index range a locking statement searches (the devices of a memory
    # lease, which has none, lock the gap where a device claim inserts):
    # transactions on disjoint pools then deadlock with each other.
    cursor = dbapi_conn.cursor()
    cursor.execute('SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED')
    cursor.close()


# The IN_TRANS flag of the MySQL protocol's server status (PyMySQL keeps the
# last status the server sent as Connection.server_status).
_MYSQL_IN_TRANS = 1


def _mysql_on_reset(dbapi_conn, record, reset_state):
    """Roll a connection back on its way to the pool only when the server
    says a transaction is open. SQLAlchemy's own reset sends a ROLLBACK
    after every COMMIT too: a round trip per transaction for nothing."""
    if reset_state.terminate_only or reset_state.transaction_was_reset:
        return
    status = getattr(dbapi_conn, 'server_status', None)
    if isinstance(status, int) and not status & _MYSQL_IN_TRANS:
        return
    dbapi_conn.rollback()


def _take_over_mysql_reset(engine):
    reset_rollback = getattr(sa_pool_base, 'reset_rollback', None)
    reset_none = getattr(sa_pool_base, 'reset_none', None)
    if (reset_none is None or
            getattr(engine.pool, '_reset_on_return', None) is not
            reset_rollback):
        return
    event.listen(engine.pool, 'reset', _mysql_on_reset)
    engine.pool._reset_on_return = reset_none


def _configure_engine(engine):
    """Composable's SQLite and MySQL settings, on composable's engine only
    (Nova's and Placement's engines in the same test process keep
    theirs)."""
    if engine.dialect.name == 'mysql':
        if not event.contains(engine, 'connect', _mysql_on_connect):
            event.listen(engine, 'connect', _mysql_on_connect)
            _take_over_mysql_reset(engine)
            engine.dispose()
        return
    if engine.dialect.name != 'sqlite':
        return
    if not event.contains(engine, 'begin', _sqlite_on_begin):
        # Ours must run first: take the engine's own listeners off and put
        # them back after it (they then find the transaction begun).
        others = list(engine.dispatch.begin)
        for listener in others:
            event.remove(engine, 'begin', listener)
        event.listen(engine, 'begin', _sqlite_on_begin)
        for listener in others:
            event.listen(engine, 'begin', listener)
    if not event.contains(engine, 'connect', _sqlite_on_connect):
        event.listen(engine, 'connect', _sqlite_on_connect)
        # Connections the pool made before (oslo.db tests one at start-up)
        # would miss the settings: start from fresh ones.
        engine.dispose()


def _facade():
    global _FACADE
    if _FACADE is None:
        with _FACADE_LOCK:
            if _FACADE is None:
                facade = enginefacade.transaction_context()
                facade.configure(sqlite_fk=True)
                _FACADE = facade
    return _FACADE


def get_engine():
    return _configured_facade().writer.get_engine()


def is_sqlite(conf_=None):
    """True when [database]connection names SQLite (which locks the whole
    database, not rows)."""
    from composable import conf
    connection = (conf_ or conf.CONF).database.connection or ''
    return connection.startswith('sqlite')


def reset_facade():
    """Forget engines (tests, and after the connection option changed)."""
    global _FACADE
    with _FACADE_LOCK:
        if _FACADE is not None:
            try:
                _FACADE.dispose_pool()
            except Exception:
                pass
        _FACADE = None
        _CONFIGURED.clear()


_CONFIGURED = set()


def _configured_facade():
    facade = _facade()
    if id(facade) not in _CONFIGURED:
        with _FACADE_LOCK:
            if id(facade) not in _CONFIGURED:
                _configure_engine(facade.writer.get_engine())
                _configure_engine(facade.reader.get_engine())
                _CONFIGURED.add(id(facade))
    return facade


def writer(context):
    """A read-write transaction; nested calls with the same context join
    the outer transaction."""
    return _configured_facade().writer.using(context)


def reader(context):
    return _configured_facade().reader.using(context)


def retry_on_deadlock(f):
    return oslo_db_api.wrap_db_retry(max_retries=5, retry_on_deadlock=True,
                                     retry_interval=0.05,
                                     inc_retry_interval=True,
                                     max_retry_interval=1)(f)


# ---------------------------------------------------------------- events
# What a transaction changed that others may want to hear about (the
# versioned notifications, composable.notifications): recorded in the
# session and handed to the listeners once the transaction commits, in
# the order recorded; a rolled-back transaction hands over nothing.
# Recorded only while someone listens.

EVENT_LEASE_ACTION = 'lease_action'
EVENT_POOL_CHANGED = 'pool_changed'
_EVENTS_KEY = 'composable.events'
_COMMIT_LISTENERS = []


def add_commit_listener(listener):
    """Call ``listener(events)`` after each commit that recorded events.
    It runs in the committing thread, after the commit, and must not
    raise."""
    if listener not in _COMMIT_LISTENERS:
        _COMMIT_LISTENERS.append(listener)


def remove_commit_listener(listener):
    if listener in _COMMIT_LISTENERS:
        _COMMIT_LISTENERS.remove(listener)


def record_event(session, *event):
    if _COMMIT_LISTENERS:
        # With the (sub)transaction it belongs to: rolling back to a
        # savepoint (the claim batches) drops what was recorded since.
        transaction = (session.get_nested_transaction() or
                       session.get_transaction())
        session.info.setdefault(_EVENTS_KEY, []).append((transaction,
                                                         event))


def _within(transaction, ended):
    while transaction is not None:
        if transaction is ended:
            return True
        transaction = transaction.parent
    return False


@event.listens_for(orm.Session, 'after_commit')
def _after_commit(session):
    recorded = session.info.pop(_EVENTS_KEY, None)
    if not recorded:
        return
    events = [e for _, e in recorded]
    for listener in list(_COMMIT_LISTENERS):
        try:
            listener(events)
        except Exception:
            LOG.exception('Commit listener %r failed', listener)


@event.listens_for(orm.Session, 'after_soft_rollback')
def _after_soft_rollback(session, previous_transaction):
    recorded = session.info.get(_EVENTS_KEY)
    if not recorded:
        return
    if not previous_transaction.nested:
        session.info.pop(_EVENTS_KEY, None)
        return
    session.info[_EVENTS_KEY] = [
        (t, e) for t, e in recorded if not _within(t, previous_transaction)]


# ---------------------------------------------------------------- helpers

def _by_ident(query, model, ident):
    if uuidutils.is_uuid_like(ident):
        return query.filter(model.uuid == ident)
    if hasattr(model, 'name'):
        return query.filter(model.name == ident)
    return query.filter(sa.false())


def _marker_row(session, model, marker):
    """The row named by a page's ``marker`` (a uuid), with its columns
    only: the sort keys are all a page needs of it, and loading a lease's
    pools, host, extents and devices with it cost three more queries."""
    if marker is None:
        return None
    marker_obj = session.query(model).options(orm.noload('*')).filter(
        model.uuid == marker).first()
    if marker_obj is None:
        raise exception.Invalid(
            reason='marker %s was not found in this list' % marker)
    return marker_obj


def _paginated(query, model, limit, marker_obj, sort_key, sort_dir):
    """``query`` sorted by ``sort_key`` then id, after ``marker_obj``,
    cut at ``limit`` (not run)."""
    sort_keys = [sort_key]
    if sort_key != 'id':
        sort_keys.append('id')
    try:
        return db_utils.paginate_query(query, model, limit, sort_keys,
                                       marker=marker_obj,
                                       sort_dir=sort_dir)
    except db_exc.InvalidSortKey:
        raise exception.Invalid(reason='cannot sort by %s' % sort_key)


def _paginate(session, query, model, limit=None, marker=None,
              sort_key='created_at', sort_dir='asc', marker_error=None):
    marker_obj = _marker_row(session, model, marker)
    return _paginated(query, model, limit, marker_obj, sort_key,
                      sort_dir).all()


_NOT_FOUND = {
    models.Fabric: (exception.FabricNotFound, 'fabric'),
    models.Host: (exception.HostNotFound, 'host'),
    models.MemoryNode: (exception.MemoryNodeNotFound, 'memory_node'),
    models.Pool: (exception.PoolNotFound, 'pool'),
    models.Device: (exception.DeviceNotFound, 'device'),
    models.Lease: (exception.LeaseNotFound, 'lease'),
}

_RESOURCE_NAMES = {
    models.Fabric: 'fabric',
    models.Host: 'host',
    models.MemoryNode: 'memory node',
    models.Pool: 'pool',
    models.Device: 'device',
    models.Lease: 'lease',
}


def _get(session, model, ident):
    obj = _by_ident(session.query(model), model, ident).first()
    if obj is None:
        exc, key = _NOT_FOUND[model]
        raise exc(**{key: ident})
    return obj


def _create(context, model, values):
    values = dict(values)
    values.setdefault('uuid', uuidutils.generate_uuid())
    obj = model()
    obj.update(values)
    try:
        with writer(context) as session:
            session.add(obj)
            session.flush()
    except db_exc.DBDuplicateEntry:
        raise exception.DuplicateName(resource=_RESOURCE_NAMES[model],
                                      name=values.get('name') or
                                      values.get('address'))
    return obj


def _update(context, model, ident, values):
    try:
        with writer(context) as session:
            obj = _get(session, model, ident)
            obj.update(values)
            session.flush()
            return obj
    except db_exc.DBDuplicateEntry:
        raise exception.DuplicateName(resource=_RESOURCE_NAMES[model],
                                      name=values.get('name'))


def _list(context, model, filters=None, limit=None, marker=None,
          sort_key='created_at', sort_dir='asc'):
    filters = filters or {}
    with reader(context) as session:
        query = session.query(model)
        for key, value in filters.items():
            if value is None:
                continue
            query = query.filter(getattr(model, key) == value)
        return _paginate(session, query, model, limit, marker, sort_key,
                         sort_dir)


# ---------------------------------------------------------------- fabrics

def fabric_create(context, values):
    return _create(context, models.Fabric, values)


def fabric_get(context, ident):
    with reader(context) as session:
        return _get(session, models.Fabric, ident)


def fabric_list(context, **kwargs):
    return _list(context, models.Fabric, **kwargs)


def fabric_update(context, ident, values):
    return _update(context, models.Fabric, ident, values)


def fabric_delete(context, ident):
    with writer(context) as session:
        fabric = _get(session, models.Fabric, ident)
        for model, what in ((models.Host, 'hosts'), (models.Pool, 'pools')):
            count = session.query(model).filter(
                model.fabric_id == fabric.id).count()
            if count:
                raise exception.InUse(
                    resource='Fabric', name=fabric.name,
                    reason='%d %s are on it; delete them first' %
                    (count, what))
        session.delete(fabric)


# ---------------------------------------------------------------- hosts

def host_create(context, values):
    return _create(context, models.Host, values)


def host_get(context, ident):
    with reader(context) as session:
        return _get(session, models.Host, ident)


def host_list(context, **kwargs):
    return _list(context, models.Host, **kwargs)


def host_update(context, ident, values):
    return _update(context, models.Host, ident, values)


def host_delete(context, ident):
    with writer(context) as session:
        host = _get(session, models.Host, ident)
        pools = session.query(models.Pool.name).filter(
            models.Pool.sriov_host_id == host.id).all()
        if pools:
            raise exception.InUse(
                resource='Host', name=host.name,
                reason='pool(s) %s are made of virtual functions of its '
                       'physical functions; delete them first' %
                       ', '.join(sorted(p.name for p in pools)))
        count = session.query(models.Lease).filter(
            models.Lease.host_id == host.id,
            models.Lease.status != states.RELEASED).count()
        if count:
            raise exception.InUse(
                resource='Host', name=host.name,
                reason='%d leases are bound to it; unbind them first' % count)
        attachments = session.query(models.Attachment).filter(
            models.Attachment.host_id == host.id)
        count = attachments.filter(
            models.Attachment.state != states.ATT_DETACHED).count()
        if count:
            raise exception.InUse(
                resource='Host', name=host.name,
                reason='%d attachments on it are not detached; unbind their '
                       'leases first' % count)
        # Detached attachments are history that would keep the host.
        attachments.delete(synchronize_session=False)
        session.delete(host)


# ---------------------------------------------------------------- pools

def _recompute_pool_total(session, pool):
    """Pool total follows its inventory; called in the transaction that
    changed the inventory, after locking the pool row."""
    if pool.kind == 'memory':
        total = session.query(sa.func.coalesce(sa.func.sum(
            models.MemoryNode.capacity_mb - models.MemoryNode.reserved_mb),
            0)).filter(models.MemoryNode.pool_id == pool.id,
                       models.MemoryNode.enabled.is_(True)).scalar()
    else:
        total = session.query(sa.func.count(models.Device.id)).filter(
            models.Device.pool_id == pool.id,
            models.Device.state.in_(
                states.DEVICE_IN_SERVICE_STATES)).scalar()
    total = int(total or 0)
    if pool.total != total:
        record_event(session, EVENT_POOL_CHANGED, None, pool.id)
    pool.total = total


def locking(query):
    """SELECT ... FOR UPDATE of the query's own rows only.

    Eager-loaded relationships are turned off: a joined eager load would
    lock the joined rows too (every claim on a fabric would queue on the
    fabric's row), and PostgreSQL refuses FOR UPDATE on the nullable side
    of an outer join. populate_existing: the locked row's values replace
    those the session read before the lock (else a concurrent claim would
    go unseen). SQLite has no row locks; its writers are serialized.
    """
    return query.options(orm.lazyload('*')).populate_existing(
    ).with_for_update()


def lock_pool(session, pool_id):
    """Row-lock a pool and return it with its current counters."""
    return locking(session.query(models.Pool).filter(
        models.Pool.id == pool_id)).one()


def pool_summaries(context, kind=None):
    """(uuid, name, kind, resource_class, total, step_size) of every pool,
    or of those of one kind: for checks that need no more than that."""
    with reader(context) as session:
        query = session.query(models.Pool.uuid, models.Pool.name,
                              models.Pool.kind, models.Pool.resource_class,
                              models.Pool.total, models.Pool.step_size)
        if kind is not None:
            query = query.filter(models.Pool.kind == kind)
        return query.order_by(models.Pool.id).all()


def pool_uuids_by_provider(context):
    """{resource provider uuid: pool uuid} of every pool that has a
    provider in Placement."""
    with reader(context) as session:
        return dict(session.query(models.Pool.provider_uuid,
                                  models.Pool.uuid).filter(
            models.Pool.provider_uuid.isnot(None)).all())


def pool_create(context, values):
    if values.get('kind') == 'memory' and not values.get('medium'):
        values = dict(values, medium=media.NETWORK)
    return _create(context, models.Pool, values)


def sriov_pool_create(context, values, vf_kind, vf_values=None):
    """A pool of SR-IOV virtual functions and one device row per VF, in
    one transaction: the pool never exists without its VFs."""
    with writer(context) as session:
        pool = _create(context, models.Pool, values)
        for index in range(pool.sriov_vf_count):
            _create(context, models.Device, {
                'pool_id': pool.id, 'kind': vf_kind,
                'address': sriov.vf_device_address(pool.sriov_pf_address,
                                                   index),
                'name': '%s-vf%d' % (pool.name, index),
                'traits': list(pool.traits or []),
                'state': states.DEVICE_AVAILABLE, **(vf_values or {})})
        session.flush()
        _recompute_pool_total(session, lock_pool(session, pool.id))
        return pool


def pool_get(context, ident):
    with reader(context) as session:
        return _get(session, models.Pool, ident)


def pool_list(context, **kwargs):
    return _list(context, models.Pool, **kwargs)


def pool_update(context, ident, values):
    with writer(context) as session:
        pool = _update(context, models.Pool, ident, values)
        record_event(session, EVENT_POOL_CHANGED, context, pool.id)
        return pool


def pool_update_checked(context, ident, values):
    """pool_update, refusing (Conflict) a ``reserved`` that would leave
    less than the pool has in use. The pool's counters are row-locked
    for the check, so a concurrent claim cannot slip in between the
    check and the update. The pool as read before the update."""
    with writer(context) as session:
        pool = pool_get(context, ident)
        locked = lock_pool(session, pool.id)
        reserved = values.get('reserved', locked.reserved)
        if locked.total - reserved < locked.used:
            raise exception.Conflict(
                reason='pool %s has %d in use of %d; reserved may be at '
                       'most %d' % (locked.name, locked.used, locked.total,
                                    max(0, locked.total - locked.used)))
        pool_update(context, pool.uuid, values)
    return pool


def pool_get_by_id(context, pool_id):
    with reader(context) as session:
        pool = session.query(models.Pool).filter(
            models.Pool.id == pool_id).first()
        if pool is None:
            raise exception.PoolNotFound(pool=pool_id)
        return pool


def pool_delete(context, ident):
    with writer(context) as session:
        pool = _get(session, models.Pool, ident)
        pool = lock_pool(session, pool.id)
        if sriov.is_sriov_pool(pool):
            # Its devices are its virtual functions: they go with it,
            # unless a lease holds one.
            vfs = session.query(models.Device).filter(
                models.Device.pool_id == pool.id)
            held = vfs.filter(models.Device.lease_id.isnot(None)).count()
            if held:
                raise exception.InUse(
                    resource='Pool', name=pool.name,
                    reason='%d of its virtual functions are leased; delete '
                           'those leases first' % held)
            vfs.delete(synchronize_session=False)
        for model, what in ((models.MemoryNode, 'memory nodes'),
                            (models.Device, 'devices')):
            count = session.query(model).filter(
                model.pool_id == pool.id).count()
            if count:
                raise exception.InUse(
                    resource='Pool', name=pool.name,
                    reason='%d %s are in it; delete them first' %
                    (count, what))
        count = session.query(models.Lease).filter(
            sa.or_(models.Lease.memory_pool_id == pool.id,
                   models.Lease.device_pool_id == pool.id),
            models.Lease.status != states.RELEASED).count()
        if count:
            raise exception.InUse(
                resource='Pool', name=pool.name,
                reason='%d leases use it; delete them first' % count)
        # Released leases keep their history but not the pool.
        session.query(models.Lease).filter(
            models.Lease.memory_pool_id == pool.id).update(
                {'memory_pool_id': None}, synchronize_session=False)
        session.query(models.Lease).filter(
            models.Lease.device_pool_id == pool.id).update(
                {'device_pool_id': None}, synchronize_session=False)
        session.delete(pool)


# ---------------------------------------------------------------- memory nodes

def memory_node_create(context, values):
    with writer(context) as session:
        node = _create(context, models.MemoryNode, values)
        pool = lock_pool(session, node.pool_id)
        _recompute_pool_total(session, pool)
        return node


def memory_node_get(context, ident):
    with reader(context) as session:
        return _get(session, models.MemoryNode, ident)


def memory_node_list(context, **kwargs):
    return _list(context, models.MemoryNode, **kwargs)


def memory_node_update(context, ident, values):
    """Capacity changes may not take away memory that leases hold."""
    with writer(context) as session:
        node = _get(session, models.MemoryNode, ident)
        pool = lock_pool(session, node.pool_id)
        node = locking(session.query(models.MemoryNode).filter(
            models.MemoryNode.id == node.id)).one()
        capacity = values.get('capacity_mb', node.capacity_mb)
        reserved = values.get('reserved_mb', node.reserved_mb)
        if capacity - reserved < node.allocated_mb:
            raise exception.InUse(
                resource='Memory node', name=node.name,
                reason='leases hold %d MiB of it; capacity_mb - reserved_mb '
                       'may not go below that' % node.allocated_mb)
        node.update(values)
        session.flush()
        _recompute_pool_total(session, pool)
        if pool.total - pool.reserved < pool.used:
            raise exception.InUse(
                resource='Memory node', name=node.name,
                reason='pool %s would hold less than its leases use' %
                pool.name)
        return node


def memory_node_delete(context, ident):
    with writer(context) as session:
        node = _get(session, models.MemoryNode, ident)
        pool = lock_pool(session, node.pool_id)
        count = session.query(models.MemoryExtent).filter(
            models.MemoryExtent.memory_node_id == node.id).count()
        if count:
            raise exception.InUse(
                resource='Memory node', name=node.name,
                reason='%d lease extents are on it; delete those leases '
                       'first' % count)
        session.delete(node)
        session.flush()
        _recompute_pool_total(session, pool)


# ---------------------------------------------------------------- devices

def device_create(context, values):
    with writer(context) as session:
        device = _create(context, models.Device, values)
        pool = lock_pool(session, device.pool_id)
        _recompute_pool_total(session, pool)
        return device


def device_get(context, ident):
    with reader(context) as session:
        return _get(session, models.Device, ident)


def device_list(context, **kwargs):
    return _list(context, models.Device, **kwargs)


def device_update(context, ident, values):
    """Operators may set name, model, traits and move a device between
    available and maintenance/faulty; a leased device keeps its state.
    The state changes by its event (states.DEVICE_SETTING_EVENTS)
    through the device machine, in the transaction that holds the pool's
    lock and recomputes its total (device_transition's own step).

    DeviceInLease when the device is in a lease and its state would
    change; StateChangeRefused when the machine declares no such change;
    PoolCapacityInUse when its pool would hold less than its leases use
    (all are Conflict)."""
    values = dict(values)
    new_state = values.pop('state', None)
    with writer(context) as session:
        device = _get(session, models.Device, ident)
        pool = lock_pool(session, device.pool_id)
        device = locking(session.query(models.Device).filter(
            models.Device.id == device.id)).one()
        if new_state and new_state != device.state:
            if device.lease_id is not None:
                raise exception.DeviceInLease(name=device.uuid)
            event = states.DEVICE_SETTING_EVENTS.get(new_state)
            if event is None:
                raise states.StateChangeRefused('device', device.uuid,
                                                device.state,
                                                'set %s' % new_state)
            _device_transition(session, device.id, pool.id, event)
            session.refresh(device)
        if values:
            device.update(values)
            session.flush()
        _recompute_pool_total(session, pool)
        if pool.total - pool.reserved < pool.used:
            raise exception.PoolCapacityInUse(
                resource='Device', name=device.uuid,
                reason='pool %s would hold less than its leases use' %
                pool.name)
        return device


def device_delete(context, ident):
    with writer(context) as session:
        device = _get(session, models.Device, ident)
        pool = lock_pool(session, device.pool_id)
        if device.lease_id is not None:
            raise exception.InUse(resource='Device', name=device.uuid,
                                  reason='it is in a lease')
        session.delete(device)
        session.flush()
        _recompute_pool_total(session, pool)


# ---------------------------------------------------------------- leases

def _lease_query(context, session):
    query = session.query(models.Lease)
    if not getattr(context, 'is_admin', False):
        query = query.filter(models.Lease.project_id == context.project_id)
    return query


def _lease_view_options():
    """What rendering a lease needs: its pools, host, extents with their
    memory node and devices, but none of the fabrics (and pools of nodes
    and devices) the models would otherwise join in; a render touching
    one of those would fail loudly (detached instance), not silently."""
    return (
        orm.defaultload(models.Lease.memory_pool).noload(models.Pool.fabric),
        orm.defaultload(models.Lease.device_pool).noload(models.Pool.fabric),
        orm.defaultload(models.Lease.host).noload(models.Host.fabric),
        orm.defaultload(models.Lease.extents).defaultload(
            models.MemoryExtent.memory_node).noload(models.MemoryNode.pool),
        orm.defaultload(models.Lease.devices).noload(models.Device.pool),
    )


def _lease_by_ident(query, ident):
    """By UUID, any lease; by name, only leases not released: a released
    lease is history, reachable by its UUID, and its name is free for a
    new lease."""
    if uuidutils.is_uuid_like(ident):
        return query.filter(models.Lease.uuid == ident)
    return query.filter(models.Lease.name == ident,
                        models.Lease.status != states.RELEASED)


def lease_get(context, ident, session=None, for_view=False):
    """A lease by UUID or name (released leases by UUID only), scoped to
    the caller's project unless the context is admin. A name that several
    live leases share (of several projects, for an admin) is refused with
    409. ``for_view``: load only what the API renders."""
    with reader(context) as session:
        query = _lease_by_ident(_lease_query(context, session), ident)
        if for_view:
            query = query.options(*_lease_view_options())
        found = query.limit(2).all()
        if not found:
            raise exception.LeaseNotFound(lease=ident)
        if len(found) > 1:
            raise exception.Conflict(
                reason='more than one lease is named %s; use its UUID' %
                ident)
        return found[0]


_LEASES = models.Lease.__table__
# What lease_ref returns: a lease's identity, state and pools.
_LEASE_REF_COLUMNS = (
    _LEASES.c.id, _LEASES.c.uuid, _LEASES.c.name, _LEASES.c.project_id,
    _LEASES.c.status, _LEASES.c.attach_mode, _LEASES.c.reservation,
    _LEASES.c.memory_pool_id, _LEASES.c.device_pool_id)


# Built once (lease_ref runs for every delete): by uuid or name, within a
# project or not.
_LEASE_REFS = {
    (by, scoped): (sa.select(*_LEASE_REF_COLUMNS).where(
        column == sa.bindparam('b_ident'),
        *([_LEASES.c.status != states.RELEASED] if by == 'name' else []),
        *([_LEASES.c.project_id == sa.bindparam('b_project')]
          if scoped else [])).limit(2))
    for by, column in (('uuid', _LEASES.c.uuid), ('name', _LEASES.c.name))
    for scoped in (True, False)}
LEASE_REF_BY_ID = sa.select(*_LEASE_REF_COLUMNS).where(
    _LEASES.c.id == sa.bindparam('b_id'))


def lease_ref_in(session, context, ident):
    """lease_ref inside the caller's ``session`` (one statement)."""
    scoped = not getattr(context, 'is_admin', False)
    query = _LEASE_REFS['uuid' if uuidutils.is_uuid_like(ident) else 'name',
                        scoped]
    params = {'b_ident': ident}
    if scoped:
        params['b_project'] = context.project_id
    found = session.execute(query, params).all()
    if not found:
        raise exception.LeaseNotFound(lease=ident)
    if len(found) > 1:
        raise exception.Conflict(
            reason='more than one lease is named %s; use its UUID' % ident)
    return found[0]


def lease_ref(context, ident):
    """The identity and state of a lease, without loading what hangs off
    it: id, uuid, name, project_id, status, attach_mode, reservation,
    memory_pool_id, device_pool_id.

    Scoped and refused exactly like lease_get; for the hot paths (delete,
    checks before an RPC call) that need no extents, devices or pools.
    """
    with reader(context) as session:
        return lease_ref_in(session, context, ident)


def lease_list(context, filters=None, limit=None, marker=None,
               sort_key='created_at', sort_dir='asc', for_view=False):
    """Filters: project_id, status, pool (pool id), kind
    (memory|gpu|pci), host_id, instance_uuid, name. ``for_view``: a page
    (``limit``) of leases loaded with only what the API renders, as
    lease_get(for_view=True)."""
    filters = dict(filters or {})
    with reader(context) as session:
        query = _lease_query(context, session)
        pool_id = filters.pop('pool_id', None)
        if pool_id is not None:
            query = query.filter(sa.or_(
                models.Lease.memory_pool_id == pool_id,
                models.Lease.device_pool_id == pool_id))
        kind = filters.pop('kind', None)
        if kind == 'memory':
            query = query.filter(models.Lease.memory_mb > 0)
        elif kind is not None:
            query = query.filter(models.Lease.device_count > 0,
                                 models.Lease.device_kind == kind)
        status = filters.pop('status', None)
        statuses = None
        if isinstance(status, (list, tuple, set)):
            statuses = sorted(set(status))
        elif status is not None:
            statuses = [status]
        for key, value in filters.items():
            if value is not None:
                query = query.filter(getattr(models.Lease, key) == value)
        by_status = query
        if statuses is not None:
            query = query.filter(models.Lease.status.in_(statuses))
        if not limit:
            return _paginate(session, query, models.Lease, limit, marker,
                             sort_key, sort_dir)
        # A page in two steps: its ids, sorted and cut from an index
        # alone (leases_status_created_at_idx and the project's), then
        # those leases. In one step the database reads and sorts every
        # lease the filters match, live leases of the whole region for
        # the default list, to return a page of them.
        if statuses and len(statuses) > 1 and sort_key == 'created_at':
            ids = _page_ids_by_status(session, by_status, statuses, limit,
                                      marker, sort_dir)
        else:
            ids = [row[0] for row in _paginate(
                session, query.with_entities(models.Lease.id),
                models.Lease, limit, marker, sort_key, sort_dir)]
        if not ids:
            return []
        query = session.query(models.Lease).filter(
            models.Lease.id.in_(ids))
        if for_view:
            query = query.options(*_lease_view_options())
        rows = {lease.id: lease for lease in query}
        # One purged in between is left out of the page.
        return [rows[i] for i in ids if i in rows]


def _page_ids_by_status(session, query, statuses, limit, marker,
                        sort_dir):
    """The ids of a page of ``query``'s leases in any of ``statuses``,
    by creation time: the page of each status (one index range each,
    already in order: at most ``limit`` entries read), merged and cut.

    With ``status IN (...)`` the index holds each status's leases in
    creation order but not all of them in one order, so the database
    read every live lease of the region (20,000 of 100,000 leases) and
    sorted them for a page of 50."""
    lease = models.Lease
    marker_obj = _marker_row(session, lease, marker)
    parts = []
    for status in statuses:
        part = _paginated(
            query.filter(lease.status == status).with_entities(
                lease.id, lease.created_at),
            lease, limit, marker_obj, 'created_at', sort_dir).subquery()
        parts.append(sa.select(part.c.id, part.c.created_at))
    merged = sa.union_all(*parts).subquery()
    order = sa.desc if sort_dir == 'desc' else sa.asc
    return [row[0] for row in session.execute(
        sa.select(merged.c.id).order_by(
            order(merged.c.created_at), order(merged.c.id)).limit(limit))]


def lease_create(context, values, action=None, message=None):
    """Insert a lease (status from ``values``) and its first action."""
    values = dict(values)
    values.setdefault('uuid', uuidutils.generate_uuid())
    values.setdefault('status', states.REQUESTED)
    with writer(context) as session:
        lease = models.Lease()
        lease.update(values)
        session.add(lease)
        session.flush()
        if action:
            action_start(context, lease.id, action, session=session,
                         message=message)
        return lease


# The fields of a lease that a user edits (PATCH /v1/leases/{lease}).
LEASE_EDITABLE_FIELDS = frozenset(['name', 'description', 'end_at'])


def _lease_set(context, lease_id, values, expected_status):
    """Write ``values`` (never ``status``: lease_transition alone moves a
    lease) to the lease if it is still in ``expected_status`` (a state or
    a set of them); False when it is not (nothing written).

    The one writer behind the named functions below, each of which sets
    the fields of one purpose.
    """
    if 'status' in values or 'live_name' in values:
        raise ValueError('the status of a lease changes by '
                         'lease_transition only')
    if isinstance(expected_status, str):
        expected_status = [expected_status]
    values = dict(values, updated_at=utils.utcnow())
    if 'name' in values:
        # A rename takes the name among the project's live leases
        # (DBDuplicateEntry when a live lease has it already).
        values['live_name'] = sa.case(
            (models.Lease.status == states.RELEASED, None),
            else_=sa.literal(values['name'], sa.String(255)))
    with writer(context) as session:
        count = session.query(models.Lease).filter(
            models.Lease.id == lease_id,
            models.Lease.status.in_(list(expected_status))).update(
                values, synchronize_session=False)
        return count == 1


def lease_edit(context, lease_id, expected_status, **fields):
    """Change what a user edits of a lease (LEASE_EDITABLE_FIELDS: name,
    description, end_at) in one UPDATE, if the lease is still in
    ``expected_status``; False when it is not (nothing written).
    NameInUse when a live lease of the project has the new name."""
    unknown = set(fields) - LEASE_EDITABLE_FIELDS
    if unknown:
        raise TypeError('lease_edit changes %s, not %s' % (
            ', '.join(sorted(LEASE_EDITABLE_FIELDS)),
            ', '.join(sorted(unknown))))
    if not fields:
        return True
    try:
        return _lease_set(context, lease_id, fields, expected_status)
    except db_exc.DBDuplicateEntry:
        raise exception.NameInUse(name=fields.get('name'))


def lease_set_fault(context, lease_id, fault, expected_status):
    """Record why the lease cannot do what is asked of it (None clears
    it), if the lease is still in ``expected_status``; False when it is
    not (nothing written)."""
    return _lease_set(context, lease_id, {'fault': fault}, expected_status)


def lease_link_instance(context, lease_id, instance_uuid, expected_status):
    """Name the Nova instance the lease serves (None: none), if the lease
    is still in ``expected_status``; False when it is not."""
    return _lease_set(context, lease_id, {'instance_uuid': instance_uuid},
                      expected_status)


def lease_set_low_since(context, lease_id, since, expected_status):
    """Record when the elastic lease's predicted need went below its size
    (None: it is not below), if the lease is still in
    ``expected_status``; False when it is not."""
    return _lease_set(context, lease_id, {'elastic_low_since': since},
                      expected_status)


def lease_forget_binding(context, lease_id, expected_status):
    """Forget the host, the instance and the fault of a lease whose
    binding is undone (its release), if the lease is still in
    ``expected_status``; False when it is not."""
    return _lease_set(context, lease_id, {'host_id': None,
                                          'instance_uuid': None,
                                          'fault': None}, expected_status)


# ---------------------------------------------------------------- transitions

def transition_target(current, event):
    """Where ``event`` (an event, or events taken in turn) leads a lease in
    ``current``; InvalidTransition when the state machine says nowhere."""
    events = (event,) if isinstance(event, str) else tuple(event)
    target = current
    for one in events:
        target = states.next_state(target, one)
    return target


def lease_transition(context, lease_id, current, event, values=None,
                     session=None, statement=None, params=None, action=None,
                     message=None):
    """Move a lease from ``current`` on ``event`` (see transition_target),
    setting ``values`` too: the one writer of ``leases.status``.

    A compare-and-set on the status: the new status, or None when the
    lease is no longer in ``current`` (nothing written).

    ``action`` (with ``message``): the entry of the lease's action log
    started, in the same transaction, once the lease moved.

    ``session``: in the caller's transaction (the allocator's claim and
    release, the Placement roll-back). ``statement``: a prebuilt UPDATE
    run instead (the allocator's short release): it compares the status
    itself and sets ``status`` and ``updated_at`` from the b_status and
    b_now parameters; b_lease is the lease's id, ``params`` the others.
    """
    target = transition_target(current, event)
    if session is None:
        with writer(context) as session:
            moved = _transition_in(session, lease_id, current, target,
                                   values, statement, params)
            if moved and action is not None:
                action_start(context, lease_id, action, session=session,
                             message=message)
    else:
        moved = _transition_in(session, lease_id, current, target, values,
                               statement, params)
        if moved and action is not None:
            action_start(context, lease_id, action, session=session,
                         message=message)
    if not moved:
        return None
    _log_transition(lease_id, current, event, target)
    return target


def lease_flow_end(context, lease_id, current, event, action, result,
                   values=None, message=None, attachment=None):
    """The end of a flow, in one transaction: ``attachment`` (``(id,
    event, values)``: the flow's last move of the lease's attachment, a
    bind's ``attached``, through attachment_transition) written, the
    lease moved from ``current`` on ``event`` with ``values`` (as
    lease_transition), and its running ``action`` finished with
    ``result`` and ``message``. A lease is thus never bound with its
    attachment still attaching, nor the other way round.

    The new status, or None when the lease is no longer in ``current``:
    its status is left as it is then, the attachment and the action are
    written all the same (they say what the flow did).
    """
    target = transition_target(current, event)
    with writer(context) as session:
        if attachment is not None:
            attachment_transition(context, *attachment)
        moved = _transition_in(session, lease_id, current, target, values,
                               None, None)
        action_finish(context, lease_id, action, result, message=message,
                      session=session)
    if not moved:
        return None
    _log_transition(lease_id, current, event, target)
    return target


def _log_transition(lease_id, current, event, target):
    # Once committed: tools/bench/memory_bind.py times a bind by it.
    LOG.debug('Lease %(lease)s: %(source)s -%(event)s-> %(target)s',
              {'lease': lease_id, 'source': current,
               'event': event if isinstance(event, str) else
               ','.join(event), 'target': target})


def _transition_in(session, lease_id, current, target, values, statement,
                   params):
    now = utils.utcnow()
    if target == states.RELEASED:
        # A released lease's name is free for a new lease (a prebuilt
        # statement clears it itself).
        values = dict(values or {}, live_name=None)
    if statement is not None:
        return session.execute(statement, dict(
            params or {}, b_lease=lease_id, b_status=target,
            b_now=now)).rowcount == 1
    return session.query(models.Lease).filter(
        models.Lease.id == lease_id,
        models.Lease.status == current).update(
            dict(values or {}, status=target, updated_at=now),
            synchronize_session=False) == 1


def lease_get_by_id(context, lease_id):
    with reader(context) as session:
        lease = session.query(models.Lease).filter(
            models.Lease.id == lease_id).first()
        if lease is None:
            raise exception.LeaseNotFound(lease=lease_id)
        return lease


def lease_purge(context, lease_id):
    """Delete a released lease row and what hangs off it (admin tooling)."""
    with writer(context) as session:
        for model in (models.LeaseAction, models.Attachment,
                      models.MemoryExtent, models.LeaseUsage):
            session.query(model).filter(
                model.lease_id == lease_id).delete(synchronize_session=False)
        session.query(models.Lease).filter(
            models.Lease.id == lease_id).delete(synchronize_session=False)


# ---------------------------------------------------------------- reservations

def lease_reserve(context, lease_id, conductor):
    """Take the per-lease lock for ``conductor``. True when taken (or
    already held by it), False when another conductor holds it."""
    with writer(context) as session:
        count = session.query(models.Lease).filter(
            models.Lease.id == lease_id,
            models.Lease.reservation.is_(None)).update(
                {'reservation': conductor}, synchronize_session=False)
        if count:
            return True
        holder = session.query(models.Lease.reservation).filter(
            models.Lease.id == lease_id).scalar()
        return holder == conductor


def lease_reserve_and_get(context, lease_id, conductor):
    """lease_reserve, and when the reservation is taken the lease read
    whole (as lease_get_by_id) in the same transaction; None when another
    conductor holds it."""
    with writer(context):
        if not lease_reserve(context, lease_id, conductor):
            return None
        return lease_get_by_id(context, lease_id)


def lease_release_reservation(context, lease_id, conductor):
    with writer(context) as session:
        session.query(models.Lease).filter(
            models.Lease.id == lease_id,
            models.Lease.reservation == conductor).update(
                {'reservation': None}, synchronize_session=False)


def conductor_heartbeat(context, hostname):
    """Register or refresh a conductor's heartbeat."""
    now = utils.utcnow()
    with writer(context) as session:
        count = session.query(models.Conductor).filter(
            models.Conductor.hostname == hostname).update(
                {'heartbeat_at': now, 'online': True},
                synchronize_session=False)
        if not count:
            try:
                with session.begin_nested():
                    session.add(models.Conductor(hostname=hostname,
                                                 heartbeat_at=now,
                                                 online=True))
            except db_exc.DBDuplicateEntry:
                pass


def conductor_offline(context, hostname):
    with writer(context) as session:
        session.query(models.Conductor).filter(
            models.Conductor.hostname == hostname).update(
                {'online': False}, synchronize_session=False)
        session.query(models.Lease).filter(
            models.Lease.reservation == hostname).update(
                {'reservation': None}, synchronize_session=False)


def conductor_list(context):
    with reader(context) as session:
        return session.query(models.Conductor).all()


def break_dead_reservations(context, timeout, caller=None):
    """Clear the lease reservations of conductors whose heartbeat is older
    than ``timeout`` seconds, and mark those conductors offline. Returns the
    hostnames this call found dead: conductors still marked online, and
    holders of reservations it broke (a conductor found dead before is not
    reported again).

    ``caller``, the conductor asking, is alive whatever its heartbeat says:
    an overloaded conductor whose heartbeat lags must not break its own
    reservations and race its own workers.
    """
    limit = utils.utcnow() - datetime.timedelta(seconds=timeout)
    with writer(context) as session:
        dead = [row.hostname for row in session.query(
            models.Conductor.hostname).filter(
                models.Conductor.heartbeat_at < limit,
                models.Conductor.online.is_(True))
            if row.hostname != caller]
        # Reservations held by a hostname with no conductor row at all are
        # dead too (a row removed by an operator).
        alive = [row.hostname for row in session.query(
            models.Conductor.hostname).filter(
                models.Conductor.heartbeat_at >= limit)]
        if caller is not None:
            alive.append(caller)
        query = session.query(models.Lease).filter(
            models.Lease.reservation.isnot(None))
        if alive:
            query = query.filter(models.Lease.reservation.notin_(alive))
        orphans = {row.reservation for row in query.with_entities(
            models.Lease.reservation)}
        stale = sorted(set(dead) | orphans)
        if stale:
            session.query(models.Lease).filter(
                models.Lease.reservation.in_(stale)).update(
                    {'reservation': None}, synchronize_session=False)
            session.query(models.Conductor).filter(
                models.Conductor.hostname.in_(dead)).update(
                    {'online': False}, synchronize_session=False)
        return stale


# ---------------------------------------------------------------- actions

# The lease action log. action_start and action_finish are its one writer:
# the allocator and the Placement claims write their entries through them,
# inside their own transactions.

_ACTIONS = models.LeaseAction.__table__
# Prebuilt: the allocator records an action for every lease it creates or
# releases on its short path.
_INSERT_ACTION = _ACTIONS.insert()

ACTION_RUNNING = 'running'
ACTION_SUCCESS = 'success'
ACTION_ERROR = 'error'
# The phases of an action's notifications an entry's result ends it with.
_ACTION_PHASES = {ACTION_SUCCESS: ('end',), ACTION_ERROR: ('error',)}


def _action_values(context, lease_id, action, result, message, now):
    return dict(
        lease_id=lease_id, action=action,
        request_id=getattr(context, 'request_id', None),
        user_id=getattr(context, 'user_id', None),
        project_id=getattr(context, 'project_id', None),
        start_time=now,
        finish_time=None if result == ACTION_RUNNING else now,
        result=result, message=message, created_at=now)


def action_start(context, lease_id, action, session=None, message=None,
                 result=ACTION_RUNNING):
    """Start an entry of the lease's action log; with a ``result`` other
    than running, one that ended as it started (nothing ran in the
    background).

    With ``session`` (the allocator's claim and release transactions),
    the entry is one prebuilt INSERT in that transaction and nothing is
    returned; otherwise the new row.
    """
    values = _action_values(context, lease_id, action, result, message,
                            utils.utcnow())
    phases = ('start',) + _ACTION_PHASES.get(result, ())
    if session is not None:
        session.execute(_INSERT_ACTION, values)
        record_event(session, EVENT_LEASE_ACTION, context, lease_id, action,
                     phases, message)
        return None
    with writer(context) as session:
        record_event(session, EVENT_LEASE_ACTION, context, lease_id, action,
                     phases, message)
        row = models.LeaseAction(**values)
        session.add(row)
        session.flush()
        return row


def action_finish(context, lease_id, action, result, message=None,
                  session=None, latest=False):
    """Finish the newest running ``action`` of a lease (one that ended at
    once when none runs).

    ``latest`` (undoing a claim after its action ended): the newest
    ``action`` whatever its result, and nothing when there is none.
    ``session``: in the caller's transaction.
    """
    if session is None:
        with writer(context) as session:
            return _action_finish_in(session, context, lease_id, action,
                                     result, message, latest)
    return _action_finish_in(session, context, lease_id, action, result,
                             message, latest)


def _action_finish_in(session, context, lease_id, action, result, message,
                      latest):
    query = session.query(models.LeaseAction).filter(
        models.LeaseAction.lease_id == lease_id,
        models.LeaseAction.action == action)
    if not latest:
        query = query.filter(models.LeaseAction.result == ACTION_RUNNING)
    row = query.order_by(models.LeaseAction.id.desc()).first()
    if row is None:
        if latest:
            return None
        return action_start(context, lease_id, action, message=message,
                            result=result)
    record_event(session, EVENT_LEASE_ACTION, context, lease_id, action,
                 _ACTION_PHASES.get(result, ()), message)
    row.result = result
    row.finish_time = utils.utcnow()
    if message is not None:
        row.message = message
    return row


def action_list(context, lease_id, limit=None, marker=None):
    with reader(context) as session:
        query = session.query(models.LeaseAction).filter(
            models.LeaseAction.lease_id == lease_id).order_by(
                models.LeaseAction.id.asc())
        if marker is not None:
            query = query.filter(models.LeaseAction.id > int(marker))
        if limit:
            query = query.limit(limit)
        return query.all()


# ---------------------------------------------------------------- attachments

def attachment_create(context, values):
    values = dict(values)
    values.setdefault('uuid', uuidutils.generate_uuid())
    with writer(context) as session:
        row = models.Attachment(**values)
        session.add(row)
        session.flush()
        return row


def attachment_list(context, lease_id, states_=None):
    with reader(context) as session:
        query = session.query(models.Attachment).filter(
            models.Attachment.lease_id == lease_id)
        if states_:
            query = query.filter(models.Attachment.state.in_(states_))
        return query.order_by(models.Attachment.id).all()


def _transition(session, table, machine, row_id, event, values=None):
    """Move the row ``row_id`` of ``table`` on ``event`` of ``machine``:
    one compare-and-set, ``UPDATE ... SET state = <the event's target>
    WHERE id = :id AND state IN (<the event's declared sources>)``,
    with ``values`` (other columns) in the same statement. A row in a
    state the event is not declared from is left as it is:
    StateChangeRefused, naming it, its state and the event."""
    column = table.c[_STATE_COLUMNS[table.name]]
    sources = machine.sources(event)
    values = dict(values or {})
    values[column.name] = machine.target(event)
    moved = session.execute(table.update().where(
        table.c.id == row_id, column.in_(sources)).values(
        **values)).rowcount
    if moved == 1:
        return values[column.name]
    found = session.execute(sa.select(table.c.uuid, column).where(
        table.c.id == row_id)).first()
    if found is None:
        raise exception.NotFound('%s %s not found.' % (machine.what,
                                                       row_id))
    raise states.StateChangeRefused(machine.what, found[0], found[1], event)


_STATE_COLUMNS = {'memory_extents': 'export_state', 'attachments': 'state',
                  'devices': 'state'}
_ATTACHMENTS_T = models.Attachment.__table__
_EXTENTS_T = models.MemoryExtent.__table__
# What may change with an attachment's state.
_ATTACHMENT_TRANSITION_COLUMNS = frozenset(['mode', 'instance_uuid',
                                            'details'])
# What may change with an extent's export state: the export's facts.
_EXTENT_TRANSITION_COLUMNS = frozenset(['target_iqn', 'lun',
                                        'chap_username', 'chap_secret'])


def _refuse_columns(values, allowed, door):
    unknown = set(values or {}) - allowed
    if unknown:
        raise ValueError('%s does not write %s' % (
            door, ', '.join(sorted(unknown))))


def attachment_transition(context, attachment_id, event, values=None):
    """The one door of ``attachments.state``: the attachment moves on
    ``event`` of states.ATTACHMENT_MACHINE (its new state returned), with
    ``values`` (mode, instance_uuid, details) in the same write;
    StateChangeRefused when it is in a state the event is not declared
    from."""
    _refuse_columns(values, _ATTACHMENT_TRANSITION_COLUMNS,
                    'attachment_transition')
    with writer(context) as session:
        return _transition(session, _ATTACHMENTS_T,
                           states.ATTACHMENT_MACHINE, attachment_id, event,
                           values)


def attachment_update(context, attachment_id, values):
    """Write the details (or mode, instance_uuid) of an attachment as
    given, for a writer under the lease's reservation while no report
    of its host can be noted (the lease is binding or unbinding). The
    state changes only through attachment_transition; details of a
    bound lease through attachment_change_details."""
    _refuse_columns(values, _ATTACHMENT_TRANSITION_COLUMNS,
                    'attachment_update')
    with writer(context) as session:
        session.query(models.Attachment).filter(
            models.Attachment.id == attachment_id).update(
                values, synchronize_session=False)


def _locked_attachment(session, attachment_id):
    return locking(session.query(models.Attachment).filter(
        models.Attachment.id == attachment_id)).first()


def attachment_change_details(context, attachment_id, change,
                              resize_event=None, marked=None):
    """Change the details of an attachment from what they are now, not
    from what a caller read earlier: in one transaction the row is
    locked (FOR UPDATE; SQLite's writers are serialized), ``change``
    (details -> new details; it must not keep the dict it is given) is
    applied to its details as they are then, and the result written. A
    report of the host noted at the same moment (lease_guest_swap_noted,
    lease_host_memory_restored lock the row the same way) is kept, not
    overwritten.

    ``resize_event``: an event of states.RESIZE_MACHINE, checked against
    the resize state the details record (StateChangeRefused when it is
    not declared from it) and written in the same change: the pending
    mark of the state it leads to set to ``marked`` (extent uuids,
    sorted), the mark of the state it leaves removed. The new details,
    or None when there is no such attachment."""
    with writer(context) as session:
        row = _locked_attachment(session, attachment_id)
        if row is None:
            return None
        details = dict(row.details or {})
        if resize_event is not None:
            current = states.resize_state(details)
            target = states.next_resize_state(current, resize_event,
                                              ident=row.uuid)
            details.pop(states.RESIZE_MARKS.get(current), None)
            if target in states.RESIZE_MARKS:
                details[states.RESIZE_MARKS[target]] = sorted(marked or ())
        details = change(details) if change is not None else details
        session.execute(_ATTACHMENTS_T.update().where(
            _ATTACHMENTS_T.c.id == row.id).values(details=details))
        return details


def extent_transition(context, extent_id, event, values=None):
    """The one door of ``memory_extents.export_state``: the extent moves
    on ``event`` of states.EXTENT_MACHINE (its new state returned), with
    ``values`` (the export's target_iqn, lun and CHAP credentials) in
    the same write; StateChangeRefused when it is in a state the event
    is not declared from (never scrubbed while exported)."""
    _refuse_columns(values, _EXTENT_TRANSITION_COLUMNS, 'extent_transition')
    with writer(context) as session:
        return _transition(session, _EXTENTS_T, states.EXTENT_MACHINE,
                           extent_id, event, values)


def extent_update(context, extent_id, values):
    """Store an extent's CHAP credentials (before its first export, so
    that a resumed bind reuses them and a teardown knows the extent may
    be exported); its export state changes only through
    extent_transition."""
    _refuse_columns(values, frozenset(['chap_username', 'chap_secret']),
                    'extent_update')
    with writer(context) as session:
        session.query(models.MemoryExtent).filter(
            models.MemoryExtent.id == extent_id).update(
                values, synchronize_session=False)


def extent_states(context, uuids):
    """{uuid: (export_state, memory_node_id, lease_id)} of the extents
    the database knows among ``uuids``."""
    if not uuids:
        return {}
    with reader(context) as session:
        rows = session.query(models.MemoryExtent.uuid,
                             models.MemoryExtent.export_state,
                             models.MemoryExtent.memory_node_id,
                             models.MemoryExtent.lease_id).filter(
            models.MemoryExtent.uuid.in_(list(uuids))).all()
    return {row[0]: tuple(row[1:]) for row in rows}


def extent_list(context, lease_id):
    with reader(context) as session:
        return session.query(models.MemoryExtent).filter(
            models.MemoryExtent.lease_id == lease_id).order_by(
                models.MemoryExtent.index).all()


def device_set_facts(context, device_id, values):
    """Store what the fabric or the bind says of a device (serial,
    health, health_reason, reachable_hosts, pci_address, vendor_id,
    product_id): one UPDATE of its row, no pool lock (none of it is
    capacity); the row lock orders it with a claim that reads the
    device's reachable hosts under that lock. Its state changes only
    through device_transition."""
    if 'state' in values or 'lease_id' in values:
        raise ValueError('device_set_facts does not write the state or '
                         'the lease of a device')
    with writer(context) as session:
        session.query(models.Device).filter(
            models.Device.id == device_id).update(
                values, synchronize_session=False)


def _device_transition(session, device_id, pool_id, event):
    counts = states.device_event_counts(event)
    pool = lock_pool(session, pool_id) if counts else None
    target = _transition(session, _DEVICES_T, states.DEVICE_MACHINE,
                         device_id, event)
    if pool is not None:
        _recompute_pool_total(session, pool)
    return target, pool


def device_transition(context, device_id, event):
    """The one door of ``devices.state``: the device moves on ``event``
    of states.DEVICE_MACHINE, one compare-and-set (StateChangeRefused
    when it is in a state the event is not declared from); its new state.
    An event that can change how many of its pool's devices are in
    service (states.device_event_counts) takes the pool's lock first and
    recomputes the pool's total in the same transaction
    (PoolCapacityInUse, nothing written, when the pool would hold less
    than its leases use); the others, a bind's attach and detach, leave
    the total as it is and take no pool lock."""
    with writer(context) as session:
        pool_id = session.execute(sa.select(_DEVICES_T.c.pool_id).where(
            _DEVICES_T.c.id == device_id)).scalar()
        if pool_id is None:
            raise exception.DeviceNotFound(device=device_id)
        target, pool = _device_transition(session, device_id, pool_id,
                                          event)
        if pool is not None and pool.total - pool.reserved < pool.used:
            raise exception.PoolCapacityInUse(
                resource='Device', name=device_id,
                reason='pool %s would hold less than its leases use' %
                pool.name)
        return target


# ---------------------------------------------------------------- usage

_USAGE = models.LeaseUsage.__table__
_LEASES_T = models.Lease.__table__
_HOSTS_T = models.Host.__table__


def usage_record(context, host, samples):
    """Store usage ``samples`` reported by the agent of ``host``: dicts
    with lease_uuid, taken_at (naive UTC datetime), used_mb, size_mb.

    Only samples of memory leases bound on that host are kept: an agent
    cannot write history into another host's leases, and a sample that
    arrives after an unbind is stale. Returns (stored count, list of the
    lease uuids whose samples were dropped).
    """
    uuids = sorted({s['lease_uuid'] for s in samples})
    if not uuids:
        return 0, []
    with writer(context) as session:
        rows = session.execute(
            sa.select(_LEASES_T.c.id, _LEASES_T.c.uuid).select_from(
                _LEASES_T.join(_HOSTS_T,
                               _HOSTS_T.c.id == _LEASES_T.c.host_id)).where(
                _LEASES_T.c.uuid.in_(uuids),
                _HOSTS_T.c.name == host,
                _LEASES_T.c.status == states.BOUND,
                _LEASES_T.c.memory_pool_id.isnot(None))).all()
        ids = {uuid: lease_id for lease_id, uuid in rows}
        now = utils.utcnow()
        values = [{'lease_id': ids[s['lease_uuid']],
                   'taken_at': s['taken_at'], 'used_mb': s['used_mb'],
                   'size_mb': s['size_mb'], 'created_at': now}
                  for s in samples if s['lease_uuid'] in ids]
        if values:
            session.execute(_USAGE.insert(), values)
    return len(values), sorted(set(uuids) - set(ids))


# ---------------------------------------------------------------- host events

_DEVICES_T = models.Device.__table__


def bound_lease_devices(context, host, lease_uuids):
    """{lease uuid: (lease id, set of its device uuids)} of those of
    ``lease_uuids`` that are bound on the host named ``host``: what an
    agent may report about (it serves no other lease)."""
    uuids = sorted({u for u in lease_uuids if isinstance(u, str)})
    if not uuids:
        return {}
    with reader(context) as session:
        rows = session.execute(
            sa.select(_LEASES_T.c.id, _LEASES_T.c.uuid,
                      _DEVICES_T.c.uuid).select_from(
                _LEASES_T.join(
                    _HOSTS_T, _HOSTS_T.c.id == _LEASES_T.c.host_id).join(
                    _DEVICES_T, _DEVICES_T.c.lease_id == _LEASES_T.c.id,
                    isouter=True)).where(
                _LEASES_T.c.uuid.in_(uuids),
                _HOSTS_T.c.name == host,
                _LEASES_T.c.status == states.BOUND)).all()
    found = {}
    for lease_id, lease_uuid, device_uuid in rows:
        _id, devices = found.setdefault(lease_uuid, (lease_id, set()))
        if device_uuid is not None:
            devices.add(device_uuid)
    return found


def lease_host_event(context, lease_id, host, action, result, message,
                     fault=None):
    """Note in the action log of a lease bound on the host named ``host``
    something that host did on its own (``action``, ending with
    ``result`` and ``message``), setting the lease's ``fault`` too when
    given; one transaction. False, with nothing written, when the lease
    is no longer bound on that host."""
    with writer(context) as session:
        host_ids = sa.select(_HOSTS_T.c.id).where(
            _HOSTS_T.c.name == host).scalar_subquery()
        values = {'updated_at': utils.utcnow()}
        if fault is not None:
            values['fault'] = fault
        # A compare-and-set: an unbind that started since the report was
        # read wins, and its own action log says what happened.
        moved = session.execute(
            _LEASES_T.update().where(
                _LEASES_T.c.id == lease_id,
                _LEASES_T.c.status == states.BOUND,
                _LEASES_T.c.host_id == host_ids).values(**values)).rowcount
        if moved != 1:
            return False
        action_start(context, lease_id, action, session=session,
                     message=message, result=result)
    return True


def lease_host_memory_restored(context, lease_uuid, host, result, message,
                               memory, fault=None):
    """lease_host_event for the lease ``lease_uuid`` after its host's
    agent remade its CXL memory on its own, and in the same transaction
    ``memory`` ({extent uuid: {detail: value}}, what the agent now says
    of each extent, e.g. its NUMA node) merged into the details of the
    lease's live attachment on that host. False, with nothing written,
    when the lease is no longer bound on that host."""
    with writer(context) as session:
        lease_id = session.execute(sa.select(_LEASES_T.c.id).where(
            _LEASES_T.c.uuid == lease_uuid)).scalar()
        if lease_id is None or not lease_host_event(
                context, lease_id, host, action=_RESTORE, result=result,
                message=message, fault=fault):
            return False
        # Locked, as attachment_change_details locks it: the details
        # merged into are those of now, and a resize recording its
        # extents at the same moment waits for this write (or this one
        # for it) instead of writing over it.
        attachment = locking(session.query(models.Attachment).filter(
            models.Attachment.lease_id == lease_id,
            models.Attachment.state.in_(states.LIVE_ATTACHMENT_STATES),
            models.Attachment.host_id == sa.select(_HOSTS_T.c.id).where(
                _HOSTS_T.c.name == host).scalar_subquery()).order_by(
            models.Attachment.id.desc())).first()
        if attachment is not None and memory:
            details = dict(attachment.details or {})
            known = dict(details.get('memory') or {})
            for extent, values in memory.items():
                if extent in known:
                    known[extent] = dict(known[extent], **values)
            details['memory'] = known
            attachment.details = details
    return True


_RESTORE = 'restore'

#: What lease_guest_swap_noted answers for a report that came before the
#: bind (or grow) that plugged the disks recorded them: try again later.
GUEST_SWAP_EARLY = 'early'


def lease_guest_swap_noted(context, lease_uuid, host, instance_uuid, action,
                           result, message, memory, fault=None):
    """Once the guest of ``instance_uuid`` on ``host`` made (or failed to
    make) the disks of the lease ``lease_uuid`` swap after the bind had
    answered: with a ``fault``, lease_host_event (``action``, ``result``,
    ``message``), and in the same transaction ``memory``
    ({extent uuid: {detail: value, or None to remove it}}) merged into the
    details of the lease's live attachment to that instance on that host;
    extents that are not the lease's are left out. True when noted;
    GUEST_SWAP_EARLY, with nothing written, while the lease is still
    binding there or its attachment does not have these extents yet (a
    grow that has not recorded them); False, with nothing written, when
    the lease is not bound (or binding) to that instance on that host."""
    with writer(context) as session:
        lease = session.execute(sa.select(
            _LEASES_T.c.id, _LEASES_T.c.status, _LEASES_T.c.host_id).where(
            _LEASES_T.c.uuid == lease_uuid)).first()
        host_id = session.execute(sa.select(_HOSTS_T.c.id).where(
            _HOSTS_T.c.name == host)).scalar()
        if lease is None or host_id is None or lease.host_id != host_id or \
                lease.status not in (states.BINDING, states.BOUND):
            return False
        # Locked, as attachment_change_details locks it: a grow recording
        # its extents at the same moment neither loses this report's
        # guest_device nor has its own extents written over.
        attachment = locking(session.query(models.Attachment).filter(
            models.Attachment.lease_id == lease.id,
            models.Attachment.host_id == host_id,
            models.Attachment.instance_uuid == instance_uuid,
            models.Attachment.state.in_(
                states.LIVE_ATTACHMENT_STATES)).order_by(
            models.Attachment.id.desc())).first()
        if attachment is None:
            return False
        if lease.status == states.BINDING:
            return GUEST_SWAP_EARLY
        extents = set(session.execute(
            sa.select(models.MemoryExtent.uuid).where(
                models.MemoryExtent.lease_id == lease.id)).scalars())
        memory = {e: v for e, v in memory.items() if e in extents}
        details = dict(attachment.details or {})
        known = dict(details.get('memory') or {})
        if not memory:
            return False
        if any(e not in known for e in memory):
            return GUEST_SWAP_EARLY
        if fault is not None and not lease_host_event(
                context, lease.id, host, action=action, result=result,
                message=message, fault=fault):
            return False
        for extent, values in memory.items():
            merged = dict(known[extent])
            for key, value in values.items():
                if value is None:
                    merged.pop(key, None)
                else:
                    merged[key] = value
            known[extent] = merged
        details['memory'] = known
        attachment.details = details
    return True


def elastic_lease_refs(context):
    """The bound elastic memory leases, as the resizing task looks at
    them before taking any reservation: rows of (id, uuid, reservation,
    status, memory_mb, elastic (the policy, decoded), elastic_low_since,
    host_id, step_size (of the lease's memory pool)), without loading the
    leases."""
    # The stored text, not the JSON type: compared through the column's
    # type, '{}' would be bound as the JSON string '"{}"', and every
    # lease of fixed size (stored as {}) would be taken for elastic.
    policy = sa.type_coerce(_LEASES_T.c.elastic, sa.Text)
    pools = models.Pool.__table__
    with reader(context) as session:
        return session.execute(
            sa.select(_LEASES_T.c.id, _LEASES_T.c.uuid,
                      _LEASES_T.c.reservation, _LEASES_T.c.status,
                      _LEASES_T.c.memory_mb, _LEASES_T.c.elastic,
                      _LEASES_T.c.elastic_low_since, _LEASES_T.c.host_id,
                      pools.c.step_size).select_from(
                _LEASES_T.join(pools, pools.c.id ==
                               _LEASES_T.c.memory_pool_id,
                               isouter=True)).where(
                _LEASES_T.c.status == states.BOUND,
                _LEASES_T.c.memory_pool_id.isnot(None),
                policy.isnot(None),
                policy != '{}').order_by(
                _LEASES_T.c.id)).all()


# Leases per IN list of a bulk read: well under every database's limit on
# bound parameters (SQLite's is 999 in old builds).
BULK_IDS = 500


def _id_batches(ids):
    """``ids``, without repeats and in order, as lists of at most
    BULK_IDS: one IN list each."""
    ids = sorted(set(ids))
    for start in range(0, len(ids), BULK_IDS):
        yield ids[start:start + BULK_IDS]


def usage_windows(context, lease_ids, since, until):
    """{lease id: [(taken_at, used_mb), ...] oldest first} of the usage
    samples of ``lease_ids`` taken at or after ``since`` and at or before
    ``until``: one query per BULK_IDS leases (by the (lease_id, taken_at)
    index), for a pass that predicts for all of them.

    The samples of each lease come packed in one string (GROUP_CONCAT,
    string_agg): a thousand elastic leases hold some 70,000 samples of
    their windows, and the driver's decoding of that many rows, one
    datetime each, was most of a resizing pass."""
    found = {}
    with reader(context) as session:
        dialect = session.get_bind().dialect.name
        for chunk in _id_batches(lease_ids):
            where = (_USAGE.c.lease_id.in_(chunk),
                     _USAGE.c.taken_at >= since, _USAGE.c.taken_at <= until)
            packed = None
            if dialect in _PACKING:
                packed = _usage_packed(session, dialect, where)
            if packed is None:
                packed = _usage_rows(session, where)
            found.update(packed)
    return found


# The aggregate that joins strings, by dialect.
_PACKING = {'mysql': sa.func.group_concat, 'sqlite': sa.func.group_concat,
            'postgresql': lambda text: sa.func.string_agg(text, ',')}


def _stamp(text):
    """A naive datetime from the text of a DATETIME / TIMESTAMP column
    ('YYYY-MM-DD HH:MM:SS[.f...]'; PostgreSQL drops the fraction's
    trailing zeros)."""
    whole, _dot, fraction = text.partition('.')
    value = datetime.datetime.fromisoformat(whole)
    if fraction:
        value = value.replace(microsecond=int(fraction[:6].ljust(6, '0')))
    return value


def _usage_packed(session, dialect, where):
    """_usage_rows from one row per lease; None when a lease's string came
    back cut (MySQL's group_concat_max_len) or unreadable."""
    u = _USAGE.c
    text = (sa.cast(u.id, sa.String) + '|' +
            sa.cast(u.taken_at, sa.String) + '|' +
            sa.cast(u.used_mb, sa.String))
    found = {}
    for lease_id, count, packed in session.execute(
            sa.select(u.lease_id, sa.func.count(),
                      _PACKING[dialect](text)).where(*where).group_by(
                u.lease_id)):
        samples = []
        try:
            for item in packed.split(','):
                sample_id, taken_at, used_mb = item.split('|')
                samples.append((_stamp(taken_at), int(sample_id),
                                int(used_mb)))
        except ValueError:
            return None
        if len(samples) != count:
            return None
        # Oldest first, ties by id: as ORDER BY taken_at, id.
        samples.sort()
        found[lease_id] = [(taken_at, used_mb)
                           for taken_at, _id, used_mb in samples]
    return found


def _usage_rows(session, where):
    found = {}
    for lease_id, taken_at, used_mb in session.execute(
            sa.select(_USAGE.c.lease_id, _USAGE.c.taken_at,
                      _USAGE.c.used_mb).where(*where).order_by(
                _USAGE.c.lease_id, _USAGE.c.taken_at, _USAGE.c.id)):
        found.setdefault(lease_id, []).append((taken_at, used_mb))
    return found


def live_attachment_details(context, lease_ids):
    """{lease id: [(host_id, details), ...]} of the live attachments of
    ``lease_ids`` (states.LIVE_ATTACHMENT_STATES), in one query per
    BULK_IDS leases."""
    table = models.Attachment.__table__
    found = {}
    with reader(context) as session:
        for chunk in _id_batches(lease_ids):
            rows = session.execute(
                sa.select(table.c.lease_id, table.c.host_id,
                          table.c.details).where(
                    table.c.lease_id.in_(chunk),
                    table.c.state.in_(states.LIVE_ATTACHMENT_STATES)
                ).order_by(table.c.id))
            for lease_id, host_id, details in rows:
                found.setdefault(lease_id, []).append((host_id, details))
    return found


def lease_refs_in_status(context, status):
    """(id, uuid, reservation, status) of the leases in ``status``, by id:
    what the reconciler lists, by the status index, without loading the
    leases' pools, host, extents and devices."""
    with reader(context) as session:
        return session.execute(
            sa.select(_LEASES_T.c.id, _LEASES_T.c.uuid,
                      _LEASES_T.c.reservation, _LEASES_T.c.status).where(
                _LEASES_T.c.status == status).order_by(
                _LEASES_T.c.id)).all()


def action_logs(context, lease_ids):
    """{lease id: [(action, result, finish_time), ...] oldest first} of
    ``lease_ids`` (rows with those attributes, as action_list's), one
    query per BULK_IDS leases: the action logs a reconciler pass decides
    its back-off from."""
    table = models.LeaseAction.__table__
    found = {}
    with reader(context) as session:
        for chunk in _id_batches(lease_ids):
            rows = session.execute(
                sa.select(table.c.lease_id, table.c.action,
                          table.c.result, table.c.finish_time).where(
                    table.c.lease_id.in_(chunk)
                ).order_by(table.c.lease_id, table.c.id))
            for row in rows:
                found.setdefault(row.lease_id, []).append(row)
    return found


def _set(column):
    """A text column that is neither NULL nor empty: true in Python."""
    return sa.and_(column.isnot(None), column != '')


def leases_holding(context, lease_ids):
    """The ids among ``lease_ids`` that may still hold something: an
    extent exported (or with CHAP credentials set), a live attachment,
    a device with a PCI address or attached (the marks the flows leave
    before they act). Three queries per BULK_IDS leases."""
    extents = models.MemoryExtent.__table__
    attachments = models.Attachment.__table__
    devices = models.Device.__table__
    found = set()
    with reader(context) as session:
        for chunk in _id_batches(lease_ids):
            for query in (
                    sa.select(extents.c.lease_id).where(
                        extents.c.lease_id.in_(chunk), sa.or_(
                            extents.c.export_state ==
                            states.EXTENT_EXPORTED,
                            _set(extents.c.chap_username))),
                    sa.select(attachments.c.lease_id).where(
                        attachments.c.lease_id.in_(chunk),
                        attachments.c.state.in_(
                            states.LIVE_ATTACHMENT_STATES)),
                    sa.select(devices.c.lease_id).where(
                        devices.c.lease_id.in_(chunk), sa.or_(
                            _set(devices.c.pci_address),
                            devices.c.state == states.DEVICE_ATTACHED))):
                found.update(row[0] for row in
                             session.execute(query.distinct()))
    return found


def live_lease_holdings(context):
    """What the Placement pass compares with Placement, in four queries
    whatever the number of leases: (every pool in id order, the live
    leases' id, uuid, status, instance_uuid, placement_consumer and
    memory_pool_id in id order, {lease id: the size of its extents
    summed}, {lease id: [(pool id, device count), ...]}). A released
    lease holds nothing and is left out. The sums are the database's
    (SUM is a DECIMAL on MariaDB); loading every live lease with its
    pools, host, extents and devices took most of a pass."""
    leases_t = models.Lease.__table__
    extents_t = models.MemoryExtent.__table__
    devices_t = models.Device.__table__
    live = leases_t.c.status != states.RELEASED
    with reader(context) as session:
        pools = session.query(models.Pool).order_by(models.Pool.id).all()
        rows = session.execute(
            sa.select(leases_t.c.id, leases_t.c.uuid, leases_t.c.status,
                      leases_t.c.instance_uuid,
                      leases_t.c.placement_consumer,
                      leases_t.c.memory_pool_id).where(live).order_by(
                leases_t.c.id)).all()
        memory = dict(session.execute(
            sa.select(extents_t.c.lease_id,
                      sa.func.sum(extents_t.c.size_mb)).select_from(
                extents_t.join(leases_t,
                               leases_t.c.id == extents_t.c.lease_id)).where(
                live).group_by(extents_t.c.lease_id)).all())
        devices = {}
        for lease_id, pool_id, count in session.execute(
                sa.select(devices_t.c.lease_id, devices_t.c.pool_id,
                          sa.func.count()).where(
                    devices_t.c.lease_id.isnot(None)).group_by(
                    devices_t.c.lease_id, devices_t.c.pool_id).order_by(
                    devices_t.c.lease_id, devices_t.c.pool_id)):
            devices.setdefault(lease_id, []).append((pool_id, int(count)))
    return pools, rows, memory, devices


def lease_nova_consumers(context):
    """The uuids of every instance a lease was ever bound to or claimed
    by, released leases' included: Nova's consumers in Placement. Two
    columns, read from their indexes, not the leases."""
    lease = models.Lease
    with reader(context) as session:
        found = {row[0] for row in session.query(
            lease.instance_uuid).filter(
            lease.instance_uuid.isnot(None)).distinct()}
        found.update(row[0] for row in session.query(
            lease.placement_consumer).filter(
            lease.placement_consumer.isnot(None),
            lease.placement_consumer != lease.uuid).distinct())
    return found


def lease_find(context, lease_id=None, uuid=None):
    """The lease of id ``lease_id`` (or of ``uuid``), not scoped to a
    project, or None when there is none."""
    column = models.Lease.id if uuid is None else models.Lease.uuid
    with reader(context) as session:
        return session.query(models.Lease).filter(
            column == (lease_id if uuid is None else uuid)).first()


def lease_list_for_instance(context, instance_uuid,
                            include_released=False):
    """The leases of an instance: made from its flavor
    (placement_consumer) or bound to it (instance_uuid), oldest first."""
    with reader(context) as session:
        query = session.query(models.Lease).filter(sa.or_(
            models.Lease.placement_consumer == instance_uuid,
            models.Lease.instance_uuid == instance_uuid))
        if not include_released:
            query = query.filter(models.Lease.status != states.RELEASED)
        return query.order_by(models.Lease.id).all()


def instance_lease_uuids(context, fabric_id, statuses):
    """(instance uuid, lease uuid) of every lease in ``statuses`` linked
    to an instance whose pools are on fabric ``fabric_id``, or that has
    no pool (requested, alloc_failed)."""
    lease = models.Lease
    with reader(context) as session:
        pools = [row.id for row in session.query(models.Pool.id).filter(
            models.Pool.fabric_id == fabric_id)]
        reachable = (lease.memory_pool_id.is_(None) &
                     lease.device_pool_id.is_(None))
        if pools:
            reachable = (reachable | lease.memory_pool_id.in_(pools) |
                         lease.device_pool_id.in_(pools))
        return session.query(lease.instance_uuid, lease.uuid).filter(
            lease.instance_uuid.isnot(None),
            lease.status.in_(statuses), reachable).all()


def lease_refs_due(context, statuses, column, now):
    """(id, uuid, reservation, status, start_at, end_at) of the leases in
    ``statuses`` whose ``column`` ('start_at' or 'end_at') is at or
    before ``now`` ('start_at' also when it is NULL: start at once):
    what the start and expiry passes look at, found by the
    (status, start_at) and (status, end_at) indexes rather than by
    reading every live lease."""
    when = _LEASES_T.c[column]
    due = when <= now
    if column == 'start_at':
        due = sa.or_(when.is_(None), due)
    with reader(context) as session:
        return session.execute(
            sa.select(_LEASES_T.c.id, _LEASES_T.c.uuid,
                      _LEASES_T.c.reservation, _LEASES_T.c.status,
                      _LEASES_T.c.start_at, _LEASES_T.c.end_at).where(
                _LEASES_T.c.status.in_(list(statuses)), due).order_by(
                _LEASES_T.c.id)).all()


def usage_list(context, lease_id, since=None, until=None, limit=None,
               marker=None, newest=False):
    """Usage samples of a lease, oldest first.

    ``since`` / ``until``: only samples taken at or after / before these
    times. ``marker``: the id of the last sample of the previous page.
    ``newest``: the ``limit`` newest samples (still returned oldest
    first) instead of the oldest.
    """
    with reader(context) as session:
        query = session.query(models.LeaseUsage).filter(
            models.LeaseUsage.lease_id == lease_id)
        if since is not None:
            query = query.filter(models.LeaseUsage.taken_at >= since)
        if until is not None:
            query = query.filter(models.LeaseUsage.taken_at < until)
        if marker is not None:
            marker_row = session.query(models.LeaseUsage).filter(
                models.LeaseUsage.lease_id == lease_id,
                models.LeaseUsage.id == int(marker)).first()
            if marker_row is None:
                raise exception.Invalid(
                    "Invalid input for query parameter 'marker': %s is not "
                    "a sample of this lease" % marker)
            query = query.filter(sa.or_(
                models.LeaseUsage.taken_at > marker_row.taken_at,
                sa.and_(models.LeaseUsage.taken_at == marker_row.taken_at,
                        models.LeaseUsage.id > marker_row.id)))
        if newest:
            query = query.order_by(models.LeaseUsage.taken_at.desc(),
                                   models.LeaseUsage.id.desc())
        else:
            query = query.order_by(models.LeaseUsage.taken_at.asc(),
                                   models.LeaseUsage.id.asc())
        if limit:
            query = query.limit(limit)
        rows = query.all()
    return list(reversed(rows)) if newest else rows


def usage_prune(context, older_than, batch_size=5000):
    """Delete usage samples taken before ``older_than``, ``batch_size``
    at a time (each batch its own transaction); how many were deleted."""
    total = 0
    while True:
        with writer(context) as session:
            ids = [row[0] for row in session.execute(
                sa.select(_USAGE.c.id).where(
                    _USAGE.c.taken_at < older_than).order_by(
                    _USAGE.c.id).limit(batch_size)).all()]
            if ids:
                session.execute(_USAGE.delete().where(
                    _USAGE.c.id.in_(ids)))
        total += len(ids)
        if len(ids) < batch_size:
            return total


# ---------------------------------------------------------------- schema

def create_schema_for_tests(engine=None):
    models.Base.metadata.create_all(engine or get_engine())
