"""The allocator: claims and returns pool capacity, atomically.

Why it cannot over-commit
-------------------------
Every claim is one database transaction that moves the lease from
``allocating`` to ``reserved`` and changes the capacity counters with
*conditional* UPDATEs::

    UPDATE pools SET used = used + :n
     WHERE id = :pool AND used + :n <= total - reserved

    UPDATE memory_nodes SET allocated_mb = allocated_mb + :mb
     WHERE id = :node AND allocated_mb + :mb <= capacity_mb - reserved_mb

    UPDATE devices SET state = 'reserved', lease_id = :lease
     WHERE id = :device AND state = 'available' AND lease_id IS NULL

A row that no longer satisfies its condition is simply not updated (the
row count says so), whatever runs at the same time: on MariaDB/InnoDB and
PostgreSQL the UPDATE waits for the row lock and re-checks the condition
against the committed row; on SQLite writers are serialized (BEGIN
IMMEDIATE, see composable/db/api.py). A device has a single ``lease_id``
column, so it can never be in two leases. The capacity claim and the
lease's move to ``reserved`` commit together or not at all, so a conductor
that dies mid-claim leaves the lease in ``allocating`` with nothing held;
allocating it again is safe.

Pool rows are locked before anything else (memory pool, device pool, then
memory nodes and devices by id), so concurrent claims and releases do not
deadlock: on InnoDB, updating a lease row takes a shared lock on the pools
it references (foreign key check), and asking for a pool's exclusive lock
after that deadlocks with a claim already waiting for it. The rare deadlock
a database still reports is retried.

Placement of memory extents
---------------------------
A memory lease of M MiB from a pool with step size S becomes M/S extents of
S MiB. ``[allocator] memory_placement`` chooses where they go:

* ``spread`` (default): each extent on the node with the most free memory,
  so a lease is striped over the pool's nodes; Linux round-robins swap
  devices of equal priority, so striping spreads the paging load.
* ``pack``: fill the node with the least free memory that still has room,
  so a lease touches few nodes and large free blocks stay whole.
"""

import collections

from oslo_log import log as logging
from oslo_utils import uuidutils
import sqlalchemy as sa

from composable.common import exception
from composable.common import utils
from composable import conf
from composable.conductor import states
from composable.db import api as dbapi
from composable.db import models

CONF = conf.CONF
LOG = logging.getLogger(__name__)

DEVICE_AVAILABLE = 'available'
DEVICE_RESERVED = 'reserved'


class _LostRace(Exception):
    """A conditional UPDATE matched nothing although the rows were locked
    (a database without row locks, or inventory changed underneath):
    the whole transaction is rolled back and tried again."""


def pool_kind_for_device_kind(device_kind):
    """(pool kind, resource class) that serves devices of ``device_kind``."""
    if device_kind in (None, 'gpu'):
        return 'gpu', 'CUSTOM_COMPOSABLE_GPU'
    return 'pci', 'CUSTOM_COMPOSABLE_PCI_%s' % device_kind.upper()


def _free(pool):
    return max(0, pool.total - pool.reserved - pool.used)


def _claim_pool(session, pool, amount):
    count = session.query(models.Pool).filter(
        models.Pool.id == pool.id,
        models.Pool.used + amount <= models.Pool.total - models.Pool.reserved
    ).update({'used': models.Pool.used + amount},
             synchronize_session=False)
    return count == 1


def _unclaim_pool(session, pool_id, amount):
    if amount:
        session.query(models.Pool).filter(models.Pool.id == pool_id).update(
            {'used': models.Pool.used - amount}, synchronize_session=False)


def _plan_extents(nodes, count, step, policy):
    """{node: extents} placing ``count`` extents of ``step`` MiB, or None
    when the nodes cannot hold them (fragmentation)."""
    free = {node.id: node.capacity_mb - node.reserved_mb - node.allocated_mb
            for node in nodes}
    by_id = {node.id: node for node in nodes}
    plan = collections.Counter()
    for _ in range(count):
        fitting = [nid for nid, mb in free.items() if mb >= step]
        if not fitting:
            return None
        if policy == 'pack':
            # Least free first; ties by id so the plan is stable.
            chosen = min(fitting, key=lambda nid: (free[nid], nid))
        else:
            chosen = max(fitting, key=lambda nid: (free[nid], -nid))
        free[chosen] -= step
        plan[chosen] += 1
    return {by_id[nid]: n for nid, n in sorted(plan.items())}


def _memory_candidates(session, lease, fabric_id=None):
    query = session.query(models.Pool).filter(models.Pool.kind == 'memory')
    if lease.requested_pools:
        query = query.filter(models.Pool.uuid.in_(lease.requested_pools))
    if fabric_id is not None:
        query = query.filter(models.Pool.fabric_id == fabric_id)
    pools = query.all()
    # Most free first, then by id so equal pools are tried in a fixed order.
    return sorted(pools, key=lambda p: (-_free(p), p.id))


def _claim_memory(session, lease):
    step_reasons = []
    pools = _memory_candidates(session, lease)
    if not pools:
        raise exception.InsufficientCapacity(
            reason='There is no memory pool%s to take %d MiB from.' % (
                ' among the pools asked for' if lease.requested_pools
                else '', lease.memory_mb))
    for pool in pools:
        step = pool.step_size or 1
        if lease.memory_mb % step:
            step_reasons.append('%s takes multiples of %d MiB' %
                                (pool.name, step))
            continue
        if not _claim_pool(session, pool, lease.memory_mb):
            step_reasons.append(
                '%s has %d MiB free' % (pool.name, _free(pool)))
            continue
        nodes = dbapi.locking(session.query(models.MemoryNode).filter(
            models.MemoryNode.pool_id == pool.id,
            models.MemoryNode.enabled.is_(True)).order_by(
                models.MemoryNode.id)).all()
        plan = _plan_extents(nodes, lease.memory_mb // step, step,
                             CONF.allocator.memory_placement)
        if plan is None:
            _unclaim_pool(session, pool.id, lease.memory_mb)
            step_reasons.append(
                '%s has memory free but not %d whole extents of %d MiB on '
                'its nodes' % (pool.name, lease.memory_mb // step, step))
            continue
        index = 0
        for node, n in plan.items():
            amount = n * step
            count = session.query(models.MemoryNode).filter(
                models.MemoryNode.id == node.id,
                models.MemoryNode.enabled.is_(True),
                models.MemoryNode.allocated_mb + amount <=
                models.MemoryNode.capacity_mb - models.MemoryNode.reserved_mb
            ).update({'allocated_mb': models.MemoryNode.allocated_mb +
                      amount}, synchronize_session=False)
            if count != 1:
                raise _LostRace('memory node %s' % node.name)
            for _ in range(n):
                session.add(models.MemoryExtent(
                    uuid=uuidutils.generate_uuid(), lease_id=lease.id,
                    memory_node_id=node.id, size_mb=step, index=index,
                    export_state='allocated'))
                index += 1
        return pool
    raise exception.InsufficientCapacity(
        reason='No memory pool can hold %d MiB now: %s. Delete leases you '
               'no longer need, ask for less memory, or try again later.' %
               (lease.memory_mb, '; '.join(step_reasons)))


def _device_candidates(session, lease, fabric_id):
    kind, resource_class = pool_kind_for_device_kind(lease.device_kind)
    query = session.query(models.Pool).filter(
        models.Pool.kind == kind,
        models.Pool.resource_class == resource_class)
    if lease.requested_pools:
        query = query.filter(models.Pool.uuid.in_(lease.requested_pools))
    if fabric_id is not None:
        query = query.filter(models.Pool.fabric_id == fabric_id)
    return sorted(query.all(), key=lambda p: (-_free(p), p.id))


def _take_devices(session, lease, devices):
    for device in devices:
        count = session.query(models.Device).filter(
            models.Device.id == device.id,
            models.Device.state == DEVICE_AVAILABLE,
            models.Device.lease_id.is_(None)).update(
                {'state': DEVICE_RESERVED, 'lease_id': lease.id},
                synchronize_session=False)
        if count != 1:
            raise _LostRace('device %s' % device.uuid)


def _claim_requested_devices(session, lease, fabric_id):
    devices = dbapi.locking(session.query(models.Device).filter(
        models.Device.uuid.in_(lease.requested_devices)).order_by(
            models.Device.id)).all()
    missing = set(lease.requested_devices) - {d.uuid for d in devices}
    if missing:
        raise exception.InsufficientCapacity(
            reason='Device %s no longer exists.' % sorted(missing)[0])
    pool_ids = {d.pool_id for d in devices}
    if len(pool_ids) != 1:
        raise exception.InsufficientCapacity(
            reason='The devices asked for are in different pools; a lease '
                   'takes devices from one pool.')
    for device in devices:
        if device.lease_id is not None or device.state != DEVICE_AVAILABLE:
            raise exception.InsufficientCapacity(
                reason='Device %s was taken by another lease or went to '
                       '%s meanwhile; ask for another device.' %
                (device.uuid, device.state))
    pool = session.query(models.Pool).filter(
        models.Pool.id == pool_ids.pop()).one()
    if fabric_id is not None and pool.fabric_id != fabric_id:
        raise exception.InsufficientCapacity(
            reason='The devices asked for are on another fabric than the '
                   'lease\'s memory.')
    if not _claim_pool(session, pool, len(devices)):
        raise exception.InsufficientCapacity(
            reason='Pool %s keeps its remaining devices as headroom '
                   '(reserved %d).' % (pool.name, pool.reserved))
    _take_devices(session, lease, devices)
    return pool


def _matches_traits(device, traits):
    return set(traits or []) <= set(device.traits or [])


def _claim_devices(session, lease, fabric_id):
    if lease.requested_devices:
        return _claim_requested_devices(session, lease, fabric_id)
    count = lease.device_count
    reasons = []
    pools = _device_candidates(session, lease, fabric_id)
    what = '%d %s device%s%s' % (
        count, lease.device_kind or 'gpu', 's' if count != 1 else '',
        ' of model %s' % lease.device_model if lease.device_model else '')
    if not pools:
        raise exception.InsufficientCapacity(
            reason='There is no pool of %s devices%s%s.' % (
                lease.device_kind or 'gpu',
                ' among the pools asked for' if lease.requested_pools
                else '',
                ' on the fabric of the lease\'s memory'
                if fabric_id is not None else ''))
    for pool in pools:
        if not _claim_pool(session, pool, count):
            reasons.append('%s has %d free' % (pool.name, _free(pool)))
            continue
        query = session.query(models.Device).filter(
            models.Device.pool_id == pool.id,
            models.Device.state == DEVICE_AVAILABLE,
            models.Device.lease_id.is_(None))
        if lease.device_model:
            query = query.filter(models.Device.model == lease.device_model)
        locked = dbapi.locking(query.order_by(models.Device.id)).all()
        candidates = [d for d in locked
                      if _matches_traits(d, lease.device_traits)]
        if len(candidates) < count:
            _unclaim_pool(session, pool.id, count)
            reasons.append('%s has %d matching free' %
                           (pool.name, len(candidates)))
            continue
        _take_devices(session, lease, candidates[:count])
        return pool
    raise exception.InsufficientCapacity(
        reason='No pool can give %s now: %s. Delete leases you no longer '
               'need, relax the model or traits, or try again later.' %
               (what, '; '.join(reasons)))


def check_requested_devices(context, device_uuids):
    """Refuse, before a lease exists, devices that cannot be leased.

    Raises DeviceNotFound, DeviceAlreadyLeased, DeviceUnavailable or
    Invalid (devices from several pools). Returns the devices' pool uuid.
    """
    with dbapi.reader(context) as session:
        devices = session.query(models.Device).filter(
            models.Device.uuid.in_(device_uuids)).all()
        found = {d.uuid: d for d in devices}
        for ident in device_uuids:
            if ident not in found:
                raise exception.DeviceNotFound(device=ident)
        for device in devices:
            if device.lease_id is not None:
                holder = session.query(models.Lease.uuid).filter(
                    models.Lease.id == device.lease_id).scalar()
                raise exception.DeviceAlreadyLeased(device=device.uuid,
                                                    lease=holder)
            if device.state != DEVICE_AVAILABLE:
                raise exception.DeviceUnavailable(device=device.uuid,
                                                  state=device.state)
        pools = {d.pool.uuid for d in devices}
        if len(pools) > 1:
            raise exception.Invalid(
                reason='the devices asked for are in different pools; a '
                       'lease takes devices from one pool')
        return pools.pop() if pools else None


def _complete(session, lease_id, source, action, values=None):
    """Move a lease from ``source`` to where DONE leads, compare-and-set.

    True when this call moved it; False when it was there already (the
    step is idempotent: a retried RPC or a resumed flow lands here);
    InvalidState for any other state.
    """
    target = states.next_state(source, states.DONE)
    moved = session.query(models.Lease).filter(
        models.Lease.id == lease_id,
        models.Lease.status == source).update(
            dict(values or {}, status=target), synchronize_session=False)
    if moved == 1:
        return True
    status = session.query(models.Lease.status).filter(
        models.Lease.id == lease_id).scalar()
    if status == target:
        return False
    raise exception.InvalidState(lease=lease_id, status=status,
                                 action=action)


def _allocate_once(context, lease_id):
    with dbapi.writer(context) as session:
        # The lease row first (it names no pool yet, so this locks no
        # pool): the claim and the state change are one commit.
        if not _complete(session, lease_id, states.ALLOCATING, 'allocate',
                         {'fault': None}):
            return False
        lease = session.query(models.Lease).filter(
            models.Lease.id == lease_id).one()
        _claim(session, lease)
        session.flush()
        return True


def allocate(context, lease_id):
    """Claim what the lease asks for and move it to ``reserved``.

    All or nothing, in one transaction. Raises InsufficientCapacity (its
    message is the fault to show the user) and leaves the lease in
    ``allocating`` with nothing claimed; the caller moves it on to
    ``alloc_failed``. Returns True when it claimed, False when the lease
    was claimed already.
    """
    attempts = CONF.allocator.claim_retries + 1
    for attempt in range(attempts):
        try:
            return dbapi.retry_on_deadlock(_allocate_once)(context, lease_id)
        except _LostRace as race:
            LOG.info('Lost a race for %s while allocating lease %s '
                     '(attempt %d of %d); retrying.', race, lease_id,
                     attempt + 1, attempts)
    raise exception.InsufficientCapacity(
        reason='The pools changed too fast to place this lease; try again.')


def _claim(session, lease):
    memory_pool = None
    if lease.memory_mb:
        memory_pool = _claim_memory(session, lease)
        lease.memory_pool_id = memory_pool.id
    if lease.device_count or lease.requested_devices:
        device_pool = _claim_devices(
            session, lease,
            memory_pool.fabric_id if memory_pool is not None else None)
        lease.device_pool_id = device_pool.id


def _action_row(context, lease_id, action, result, message=None):
    now = utils.utcnow()
    return models.LeaseAction(
        lease_id=lease_id, action=action,
        request_id=getattr(context, 'request_id', None),
        user_id=getattr(context, 'user_id', None),
        project_id=getattr(context, 'project_id', None),
        start_time=now, finish_time=now, result=result, message=message)


def _insert_lease(session, values, status):
    lease = models.Lease()
    lease.update(values)
    lease.uuid = values.get('uuid') or uuidutils.generate_uuid()
    lease.status = status
    session.add(lease)
    session.flush()
    return lease


def _create_once(context, values, action):
    with dbapi.writer(context) as session:
        # The new lease names no pool yet, so inserting it locks no pool
        # row: the claim's UPDATE on the pool is the first pool lock.
        lease = _insert_lease(
            session, values,
            states.next_state(states.REQUESTED, states.ALLOCATE))
        _claim(session, lease)
        lease.status = states.next_state(lease.status, states.DONE)
        session.add(_action_row(context, lease.id, action, 'success'))
        session.flush()
        return lease.uuid, lease.status


def _create_failed(context, values, action, fault):
    with dbapi.writer(context) as session:
        status = states.next_state(
            states.next_state(states.REQUESTED, states.ALLOCATE),
            states.FAIL)
        lease = _insert_lease(session, dict(values, fault=fault), status)
        session.add(_action_row(context, lease.id, action, 'error', fault))
        session.flush()
        return lease.uuid, lease.status


def create_and_allocate(context, values, action='create'):
    """Insert a lease and claim what it asks for, in one transaction.

    The lease goes requested -> allocating -> reserved and its first action
    is recorded finished. Nobody can see the lease before the commit, so no
    conductor reservation is needed. When it cannot be placed, that
    transaction is rolled back whole (nothing claimed) and the lease is
    recorded in alloc_failed, with the allocator's message as its fault,
    in a second one. (Not a savepoint: InnoDB rolls a deadlock victim back
    entirely, savepoints included, and the deadlock must reach the retry.)
    Returns (uuid, status).
    """
    attempts = CONF.allocator.claim_retries + 1
    fault = ('The pools changed too fast to place this lease; delete it '
             'and try again.')
    for attempt in range(attempts):
        try:
            return dbapi.retry_on_deadlock(_create_once)(context, values,
                                                         action)
        except exception.InsufficientCapacity as exc:
            fault = exc.message
            break
        except _LostRace as race:
            LOG.info('Lost a race for %s while creating a lease (attempt '
                     '%d of %d); retrying.', race, attempt + 1, attempts)
    return dbapi.retry_on_deadlock(_create_failed)(context, values, action,
                                                   fault)


def _lock_lease_pools(session, lease_id):
    """Row-lock the pools a lease holds capacity in, before anything else.

    Updating a lease row makes InnoDB take a shared lock on the pools it
    references (foreign key check); asking for the exclusive pool lock
    after that deadlocks with a claim waiting for the same pool. Taking
    the pool locks first keeps one order everywhere: pools, then the rest.
    Returns the lease's memory pool id.
    """
    row = session.query(models.Lease.memory_pool_id,
                        models.Lease.device_pool_id).filter(
        models.Lease.id == lease_id).first()
    if row is None:
        return None
    device_pools = {pid for (pid,) in session.query(
        models.Device.pool_id).filter(models.Device.lease_id == lease_id)}
    if row.memory_pool_id is not None:
        dbapi.lock_pool(session, row.memory_pool_id)
    for pool_id in sorted(device_pools | ({row.device_pool_id} - {None})):
        dbapi.lock_pool(session, pool_id)
    return row.memory_pool_id


# Resting states from which a lease that was never bound can be released
# without asking any agent or fabric.
_QUICK_RELEASE_FROM = (states.REQUESTED, states.RESERVED,
                       states.ALLOC_FAILED)


class _NotQuick(Exception):
    """The lease has something live: roll back, use the full flow."""


def _release_unbound_once(context, lease_id, action):
    now = utils.utcnow()
    event = states.DELETE if action == 'delete' else states.EXPIRE
    # Every state the short path starts from moves to the same one.
    targets = {states.next_state(status, event)
               for status in _QUICK_RELEASE_FROM}
    assert len(targets) == 1
    try:
        with dbapi.writer(context) as session:
            memory_pool_id = _lock_lease_pools(session, lease_id)
            moved = session.query(models.Lease).filter(
                models.Lease.id == lease_id,
                models.Lease.reservation.is_(None),
                models.Lease.status.in_(_QUICK_RELEASE_FROM)).update(
                    {'status': targets.pop(), 'updated_at': now},
                    synchronize_session=False)
            if moved != 1:
                return None
            touched = session.query(models.MemoryExtent.id).filter(
                models.MemoryExtent.lease_id == lease_id,
                sa.or_(models.MemoryExtent.export_state != 'allocated',
                       models.MemoryExtent.chap_username.isnot(None))
            ).first()
            live = session.query(models.Attachment.id).filter(
                models.Attachment.lease_id == lease_id,
                models.Attachment.state != 'detached').first()
            bound = session.query(models.Device.id).filter(
                models.Device.lease_id == lease_id,
                sa.or_(models.Device.state != DEVICE_RESERVED,
                       models.Device.pci_address.isnot(None))).first()
            if touched or live or bound:
                raise _NotQuick()
            session.add(_action_row(context, lease_id, action, 'success'))
            session.flush()
            # Same transaction: return the capacity, move to released.
            _complete(session, lease_id, states.RELEASING, 'release',
                      {'reservation': None})
            _return_capacity(session, lease_id, memory_pool_id)
            return states.RELEASED
    except _NotQuick:
        return None


def release_unbound(context, lease_id, action='delete'):
    """Release a lease that was never handed to an agent or a fabric
    (nothing exported, attached or bound), in one transaction: the
    ``action`` (delete or expire) moves it to releasing, its capacity
    returns and it ends released. Returns None, changing nothing, when
    the lease is busy or has anything live: then the full release flow
    (teardown, scrub) must run."""
    return dbapi.retry_on_deadlock(_release_unbound_once)(context, lease_id,
                                                          action)


def _release_once(context, lease_id):
    with dbapi.writer(context) as session:
        memory_pool_id = _lock_lease_pools(session, lease_id)
        if not _complete(session, lease_id, states.RELEASING, 'release',
                         {'reservation': None}):
            return False
        _return_capacity(session, lease_id, memory_pool_id)
        return True


def _return_capacity(session, lease_id, memory_pool_id):
    """Give back what the lease holds; its pools are locked already."""
    extents = session.query(models.MemoryExtent.memory_node_id,
                            models.MemoryExtent.size_mb).filter(
        models.MemoryExtent.lease_id == lease_id).all()
    if extents:
        by_node = collections.Counter()
        for node_id, size_mb in extents:
            by_node[node_id] += size_mb
        total = sum(by_node.values())
        if memory_pool_id is not None:
            # Locked already by _lock_lease_pools.
            _unclaim_pool(session, memory_pool_id, total)
        for node_id in sorted(by_node):
            session.query(models.MemoryNode).filter(
                models.MemoryNode.id == node_id).update(
                    {'allocated_mb': models.MemoryNode.allocated_mb -
                     by_node[node_id]}, synchronize_session=False)
        session.query(models.MemoryExtent).filter(
            models.MemoryExtent.lease_id == lease_id).delete(
                synchronize_session=False)
    devices = session.query(models.Device.pool_id).filter(
        models.Device.lease_id == lease_id).all()
    if devices:
        per_pool = collections.Counter(pid for (pid,) in devices)
        for pool_id in sorted(per_pool):
            # Locked already by _lock_lease_pools.
            _unclaim_pool(session, pool_id, per_pool[pool_id])
        session.query(models.Device).filter(
            models.Device.lease_id == lease_id).update(
                {'lease_id': None, 'pci_address': None,
                 'state': sa.case(
                     (models.Device.state.in_(
                         [DEVICE_RESERVED, 'attached']),
                      DEVICE_AVAILABLE),
                     else_=models.Device.state)},
                synchronize_session=False)


def release_capacity(context, lease_id):
    """Return everything the lease holds to its pools and move it from
    ``releasing`` to ``released``, in one transaction.

    The caller must have torn down exports, attachments and fabric
    bindings and scrubbed the extents first: capacity comes back only
    when nothing of the lease is live any more. Idempotent.
    """
    return dbapi.retry_on_deadlock(_release_once)(context, lease_id)


def check_consistency(context):
    """Compare the counters with what leases hold. Returns a list of
    problems (empty when pools, nodes and devices agree with leases)."""
    problems = []
    with dbapi.reader(context) as session:
        live = [s for s in states.ALL_STATES if s != states.RELEASED]
        for pool in session.query(models.Pool).all():
            if pool.kind == 'memory':
                held = session.query(sa.func.coalesce(sa.func.sum(
                    models.MemoryExtent.size_mb), 0)).join(
                        models.MemoryNode,
                        models.MemoryExtent.memory_node_id ==
                        models.MemoryNode.id).filter(
                            models.MemoryNode.pool_id == pool.id).scalar()
            else:
                held = session.query(sa.func.count(models.Device.id)).filter(
                    models.Device.pool_id == pool.id,
                    models.Device.lease_id.isnot(None)).scalar()
            if int(held) != pool.used:
                problems.append('pool %s: used %d but leases hold %d' %
                                (pool.name, pool.used, held))
            if pool.used > pool.total - pool.reserved:
                problems.append('pool %s: over-committed, used %d of %d '
                                '(reserved %d)' % (pool.name, pool.used,
                                                   pool.total,
                                                   pool.reserved))
        for node in session.query(models.MemoryNode).all():
            held = session.query(sa.func.coalesce(sa.func.sum(
                models.MemoryExtent.size_mb), 0)).filter(
                    models.MemoryExtent.memory_node_id == node.id).scalar()
            if int(held) != node.allocated_mb:
                problems.append('memory node %s: allocated %d but extents '
                                'hold %d' % (node.name, node.allocated_mb,
                                             held))
            if node.allocated_mb > node.capacity_mb - node.reserved_mb:
                problems.append('memory node %s: over-committed' %
                                node.name)
        stale = session.query(models.Device.uuid).join(
            models.Lease, models.Device.lease_id == models.Lease.id).filter(
                models.Lease.status.notin_(live)).all()
        for (uuid,) in stale:
            problems.append('device %s is held by a released lease' % uuid)
    return problems
