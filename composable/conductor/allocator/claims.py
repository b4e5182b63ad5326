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

Devices a host can reach
------------------------
A fabric may connect a device to some of its hosts only (its zones):
``devices.reachable_hosts`` names them, NULL for every host. A claim
that knows the lease's host (a deferred allocation of a lease bound
since, a flavor's lease made where its instance starts) takes only
devices that host reaches. A lease claimed before it had a host is
checked at bind (:func:`reach_host`): devices the host cannot reach are
traded, in one transaction under the pool's lock, for free ones of the
same pool that it can, or the bind is refused (Conflict, HTTP 409) when
the pool has none left. Two binds racing for the last reachable device
are ordered by the pool's row lock: the second sees it taken.

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
import types

from oslo_log import log as logging
from oslo_utils import uuidutils
import sqlalchemy as sa

from composable.common import exception
from composable.common import media
from composable.common import pool_fit
from composable.common import resource_classes
from composable.common import states
from composable.common import utils
from composable import conf
from composable.conductor.allocator import statements
from composable.db import api as dbapi
from composable.db import models
from composable.db import views

CONF = conf.CONF
LOG = logging.getLogger(__name__)

_LEASES = statements.LEASES
_DEVICES = statements.DEVICES
_POOLS = statements.POOLS


class LostRace(Exception):
    """A conditional UPDATE matched nothing although the rows were locked
    (a database without row locks, or inventory changed underneath):
    the whole transaction is rolled back and tried again."""


def _free(pool):
    return max(0, pool.total - pool.reserved - pool.used)


def _claim_pool(session, pool, amount):
    count = session.execute(statements.CLAIM_POOL, {
        'b_pool': pool.id, 'b_amount': amount}).rowcount
    return count == 1


def _unclaim_pool(session, pool_id, amount):
    if amount:
        session.execute(statements.UNCLAIM_POOL, {'b_pool': pool_id,
                                                  'b_amount': amount})


def _plan_extents(nodes, count, step, policy, prefer=()):
    """{node: extents} placing ``count`` extents of ``step`` MiB, or None
    when the nodes cannot hold them (fragmentation). ``prefer``: ids of
    nodes taken first while they have room (the devices an elastic CXL
    lease already has: its host reaches them already)."""
    free = {node.id: node.capacity_mb - node.reserved_mb - node.allocated_mb
            for node in nodes}
    by_id = {node.id: node for node in nodes}
    plan = collections.Counter()
    for _ in range(count):
        fitting = [nid for nid, mb in free.items() if mb >= step]
        if not fitting:
            return None
        preferred = [nid for nid in fitting if nid in prefer]
        fitting = preferred or fitting
        if policy == 'pack':
            # Least free first; ties by id so the plan is stable.
            chosen = min(fitting, key=lambda nid: (free[nid], nid))
        else:
            chosen = max(fitting, key=lambda nid: (free[nid], -nid))
        free[chosen] -= step
        plan[chosen] += 1
    return {by_id[nid]: n for nid, n in sorted(plan.items())}


def _pools_by_free(session, query):
    # Most free first, then by id so equal pools are tried in a fixed order.
    return sorted(session.execute(query).all(),
                  key=lambda p: (-_free(p), p.id))


def _memory_candidates(session, lease, fabric_id=None):
    query = statements.MEMORY_POOLS
    if lease.requested_pools:
        query = query.where(_POOLS.c.uuid.in_(lease.requested_pools))
    else:
        # CXL memory is another tier, bound as a NUMA node: a lease gets
        # it only by naming its pool (composable.common.media).
        query = query.where(sa.or_(_POOLS.c.medium.is_(None),
                                   _POOLS.c.medium != media.CXL))
    if fabric_id is not None:
        query = query.where(_POOLS.c.fabric_id == fabric_id)
    return _pools_by_free(session, query)


def _claim_memory(session, lease, check_fit=False):
    """Claim the lease's memory; returns (pool row, extent rows to insert
    once the lease has an id, as dicts without lease_id, with their memory
    node's name under 'node_name'). ``check_fit``: refuse (Invalid) a
    request that no memory pool could ever hold."""
    step_reasons = []
    pools = _memory_candidates(session, lease)
    if check_fit:
        pool_fit.check_memory(lease.memory_mb, pools)
    if not pools:
        raise exception.InsufficientCapacity(
            reason='There is no memory pool%s to take %d MiB from.' % (
                ' among the pools asked for' if lease.requested_pools
                else '', lease.memory_mb))
    for pool in pools:
        step = pool.step_size or 1
        elastic = getattr(lease, 'elastic', None) or {}
        if lease.memory_mb % step or any(
                elastic.get(k, 0) % step for k in ('min_mb', 'max_mb')):
            step_reasons.append('%s takes multiples of %d MiB' %
                                (pool.name, step))
            continue
        if not _claim_pool(session, pool, lease.memory_mb):
            step_reasons.append(
                '%s has %d MiB free' % (pool.name, _free(pool)))
            continue
        # Locked, and read again under the lock: a claim that committed
        # since is seen.
        nodes = session.execute(statements.LOCK_NODES,
                                {'b_pool': pool.id}).all()
        plan = _plan_extents(nodes, lease.memory_mb // step, step,
                             CONF.allocator.memory_placement)
        if plan is None:
            _unclaim_pool(session, pool.id, lease.memory_mb)
            step_reasons.append(
                '%s has memory free but not %d whole extents of %d MiB on '
                'its nodes' % (pool.name, lease.memory_mb // step, step))
            continue
        index = 0
        extents = []
        for node, n in plan.items():
            amount = n * step
            count = session.execute(statements.CLAIM_NODE, {
                'b_node': node.id, 'b_amount': amount}).rowcount
            if count != 1:
                raise LostRace('memory node %s' % node.name)
            for _ in range(n):
                extents.append({
                    'uuid': uuidutils.generate_uuid(),
                    'memory_node_id': node.id, 'size_mb': step,
                    'index': index,
                    'export_state': states.EXTENT_ALLOCATED,
                    'node_name': node.name})
                index += 1
        return pool, extents
    raise exception.InsufficientCapacity(
        reason='No memory pool can hold %d MiB now: %s. Delete leases you '
               'no longer need, ask for less memory, or try again later.' %
               (lease.memory_mb, '; '.join(step_reasons)))


def _device_candidates(session, lease, fabric_id):
    kind, resource_class = resource_classes.for_device_kind(
        lease.device_kind)
    query = sa.select(*statements.POOL_COLUMNS).where(
        _POOLS.c.kind == kind, _POOLS.c.resource_class == resource_class)
    if lease.requested_pools:
        query = query.where(_POOLS.c.uuid.in_(lease.requested_pools))
    else:
        # CXL memory is another tier, bound as a NUMA node: a lease gets
        # it only by naming its pool (composable.common.media).
        query = query.where(sa.or_(_POOLS.c.medium.is_(None),
                                   _POOLS.c.medium != media.CXL))
    if fabric_id is not None:
        query = query.where(_POOLS.c.fabric_id == fabric_id)
    return _pools_by_free(session, query)


def _take_devices(session, lease_id, devices):
    """Give ``devices`` to the lease, all or none (LostRace)."""
    ids = [device.id for device in devices]
    count = session.execute(statements.TAKE_DEVICES, {
        'b_ids': ids, 'b_lease': lease_id}).rowcount
    if count != len(ids):
        raise LostRace('device %s' % ', '.join(d.uuid for d in devices))


def reaches(device, host_name):
    """True when the fabric can connect ``device`` (a row with
    reachable_hosts) to host ``host_name``; any host when None."""
    hosts = device.reachable_hosts
    return host_name is None or hosts is None or host_name in hosts


def _reach_text(device):
    hosts = device.reachable_hosts
    if hosts is None:
        return 'every host'
    return ', '.join(hosts) if hosts else 'no host'


def _claim_requested_devices(session, lease, fabric_id, host_name=None):
    devices = session.execute(sa.select(*statements.DEVICE_COLUMNS).where(
        _DEVICES.c.uuid.in_(lease.requested_devices)).order_by(
            _DEVICES.c.id).with_for_update()).all()
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
        if (device.lease_id is not None or
                device.state != states.DEVICE_AVAILABLE):
            raise exception.InsufficientCapacity(
                reason='Device %s was taken by another lease or went to '
                       '%s meanwhile; ask for another device.' %
                (device.uuid, device.state))
        if not reaches(device, host_name):
            raise exception.InsufficientCapacity(
                reason='Device %s cannot be reached from host %s (the '
                       'fabric connects it to %s); ask for another '
                       'device.' % (device.uuid, host_name,
                                    _reach_text(device)))
    pool = session.execute(sa.select(*statements.POOL_COLUMNS).where(
        _POOLS.c.id == pool_ids.pop())).one()
    if len(devices) > 1 and pool.sriov_host_id is not None:
        raise exception.InsufficientCapacity(
            reason='Pool %s gives one virtual function per lease; ask for '
                   'one device.' % pool.name)
    if fabric_id is not None and pool.fabric_id != fabric_id:
        raise exception.InsufficientCapacity(
            reason='The devices asked for are on another fabric than the '
                   'lease\'s memory.')
    if not _claim_pool(session, pool, len(devices)):
        raise exception.InsufficientCapacity(
            reason='Pool %s keeps its remaining devices as headroom '
                   '(reserved %d).' % (pool.name, pool.reserved))
    return pool, devices


def _matches_traits(device, traits):
    return set(traits or []) <= set(device.traits or [])


def _claim_devices(session, lease, fabric_id, check_fit=False,
                   host_name=None):
    """Claim the lease's devices in their pool; returns (pool row, device
    rows) for the caller to give the devices to the lease
    (_take_devices) once it has an id. ``check_fit``: refuse (Invalid) a
    request that no pool of its kind could ever give. ``host_name``: only
    devices that host can reach."""
    if lease.requested_devices:
        return _claim_requested_devices(session, lease, fabric_id,
                                        host_name)
    count = lease.device_count
    reasons = []
    pools = _device_candidates(session, lease, fabric_id)
    if check_fit:
        pool_fit.check_device_candidates(count, lease.device_kind or 'gpu',
                                         pools)
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
        if count > 1 and pool.sriov_host_id is not None:
            # A pool of SR-IOV virtual functions shares one physical
            # device: one VF per lease.
            reasons.append('%s gives one virtual function per lease' %
                           pool.name)
            continue
        if not _claim_pool(session, pool, count):
            reasons.append('%s has %d free' % (pool.name, _free(pool)))
            continue
        if not (lease.device_model or lease.device_traits or host_name):
            query = statements.LOCK_ANY_FREE_DEVICES
        else:
            query = statements.FREE_DEVICES
            if lease.device_model:
                query = query.where(_DEVICES.c.model == lease.device_model)
            if not (lease.device_traits or host_name):
                query = query.limit(count)
            query = query.order_by(_DEVICES.c.id).with_for_update()
        locked = session.execute(query, {'b_pool': pool.id,
                                         'b_limit': count}).all()
        candidates = [d for d in locked
                      if _matches_traits(d, lease.device_traits)]
        matching = len(candidates)
        candidates = [d for d in candidates if reaches(d, host_name)]
        if len(candidates) < count:
            _unclaim_pool(session, pool.id, count)
            if len(candidates) < matching:
                reasons.append('%s has %d matching free, %d of them '
                               'reachable from host %s' %
                               (pool.name, matching, len(candidates),
                                host_name))
            else:
                reasons.append('%s has %d matching free' %
                               (pool.name, len(candidates)))
            continue
        return pool, candidates[:count]
    raise exception.InsufficientCapacity(
        reason='No pool can give %s now: %s. Delete leases you no longer '
               'need, relax the model or traits, or try again later.' %
               (what, '; '.join(reasons)))


def check_requested_devices(context, device_uuids, project_id=None):
    """Refuse, before a lease exists, devices that cannot be leased.

    Raises DeviceNotFound, DeviceAlreadyLeased, DeviceUnavailable or
    Invalid (devices from several pools). Returns the devices' pool uuid.
    With ``project_id``, the lease holding a device is named only when it
    is that project's.
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
                holder, owner = session.query(
                    models.Lease.uuid, models.Lease.project_id).filter(
                        models.Lease.id == device.lease_id).one()
                if project_id is not None and owner != project_id:
                    holder = 'of another project'
                raise exception.DeviceAlreadyLeased(device=device.uuid,
                                                    lease=holder)
            if device.state != states.DEVICE_AVAILABLE:
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
    target = dbapi.lease_transition(None, lease_id, source, states.DONE,
                                    values=values, session=session)
    if target is not None:
        return True
    target = states.next_state(source, states.DONE)
    status = session.query(models.Lease.status).filter(
        models.Lease.id == lease_id).scalar()
    if status == target:
        return False
    raise exception.InvalidState(lease=lease_id, status=status,
                                 action=action)


def _claim(session, lease, check_fit=False, host_name=None):
    """Claim, in the pools (and on the memory nodes), what ``lease`` asks
    for: anything with memory_mb, requested_pools, device_count,
    device_kind, device_model, device_traits and requested_devices.
    Returns the claim for _give (which needs the lease's id).

    ``check_fit`` (a request that names no pools or devices): refuse with
    Invalid, before claiming anything, what no pool could ever hold (see
    composable.common.pool_fit), checked on the pool rows the claim reads.
    ``host_name``: the host the lease is for, when known; its devices are
    then only ones that host can reach.
    """
    claim = {'memory_pool': None, 'extents': [], 'device_pool': None,
             'devices': []}
    wants_devices = lease.device_count or lease.requested_devices
    if check_fit and lease.memory_mb and wants_devices:
        # The device pools the claim reads are those of the memory's
        # fabric; the check is against every pool of the kind, first.
        pool_fit.check_device_candidates(
            lease.device_count, lease.device_kind or 'gpu',
            _device_candidates(session, lease, None))
    if lease.memory_mb:
        claim['memory_pool'], claim['extents'] = _claim_memory(
            session, lease, check_fit=check_fit)
    if wants_devices:
        memory_pool = claim['memory_pool']
        claim['device_pool'], claim['devices'] = _claim_devices(
            session, lease,
            memory_pool.fabric_id if memory_pool is not None else None,
            check_fit=check_fit and not lease.memory_mb,
            host_name=host_name)
    return claim


def _give(session, lease_id, claim):
    """Give the lease what ``claim`` holds for it (extents, devices);
    returns the parts of the lease's document the claim decided."""
    if claim['extents']:
        session.execute(statements.INSERT_EXTENTS, [
            dict({k: v for k, v in e.items() if k != 'node_name'},
                 lease_id=lease_id) for e in claim['extents']])
    if claim['devices']:
        _take_devices(session, lease_id, claim['devices'])
    memory_pool, device_pool = claim['memory_pool'], claim['device_pool']
    return {
        'memory_pool_uuid': memory_pool.uuid if memory_pool else None,
        'device_pool_uuid': device_pool.uuid if device_pool else None,
        'extents': [views.extent_document(
            types.SimpleNamespace(target_iqn=None, lun=None, **e),
            e['node_name']) for e in claim['extents']],
        # Taken just now: reserved, whatever the rows read before said.
        'devices': [views.device_document(d, state=states.DEVICE_RESERVED)
                    for d in claim['devices']],
    }


def _pool_ids(claim):
    return {'memory_pool_id': claim['memory_pool'].id
            if claim['memory_pool'] else None,
            'device_pool_id': claim['device_pool'].id
            if claim['device_pool'] else None}


def _host_name(session, host_id):
    if host_id is None:
        return None
    return session.execute(sa.select(statements.HOSTS.c.name).where(
        statements.HOSTS.c.id == host_id)).scalar()


def _allocate_once(context, lease_id):
    with dbapi.writer(context) as session:
        lease = session.execute(sa.select(_LEASES).where(
            _LEASES.c.id == lease_id,
            _LEASES.c.status == states.ALLOCATING)).first()
        if lease is None:
            # Claimed already (a retried RPC or a resumed flow), or moved
            # on: _complete says which.
            return _complete(session, lease_id, states.ALLOCATING,
                             'allocate')
        claim = _claim(session, lease,
                       host_name=_host_name(session, lease.host_id))
        # The lease row after the pools: one lock order everywhere.
        if not _complete(session, lease_id, states.ALLOCATING, 'allocate',
                         dict(_pool_ids(claim), fault=None)):
            raise LostRace('lease %s' % lease.uuid)
        _give(session, lease_id, claim)
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
        except LostRace as race:
            LOG.info('Lost a race for %s while allocating lease %s '
                     '(attempt %d of %d); retrying.', race, lease_id,
                     attempt + 1, attempts)
    raise exception.InsufficientCapacity(
        reason='The pools changed too fast to place this lease; try again.')


# Lease fields a create may set, and their defaults.
_LEASE_DEFAULTS = {
    'uuid': None, 'name': None, 'live_name': None, 'description': None,
    'project_id': None, 'user_id': None, 'memory_mb': 0, 'device_count': 0,
    'device_kind': None,
    'device_model': None, 'device_traits': None, 'requested_pools': None,
    'requested_devices': None, 'memory_pool_id': None,
    'device_pool_id': None, 'start_at': None, 'end_at': None,
    'host_id': None, 'instance_uuid': None,
    'attach_mode': states.ATTACH_HOST,
    'placement_consumer': None, 'status': None, 'fault': None,
    'reservation': None, 'created_at': None, 'updated_at': None,
    'elastic': None, 'elastic_low_since': None}


def _lease_values(values, status, **more):
    unknown = set(values) - set(_LEASE_DEFAULTS)
    if unknown:
        raise exception.Invalid(reason='unknown lease fields: %s' %
                                ', '.join(sorted(unknown)))
    row = dict(_LEASE_DEFAULTS)
    row.update({k: v for k, v in values.items() if v is not None})
    row.update(more)
    row['uuid'] = row['uuid'] or uuidutils.generate_uuid()
    row['status'] = status
    row['created_at'] = utils.utcnow()
    row['updated_at'] = None
    return row


def _insert_lease(session, row):
    return session.execute(statements.INSERT_LEASE,
                           row).inserted_primary_key[0]


def create_in(session, context, values, action, check_fit=False,
              host_name=None):
    """Insert a lease and claim what it asks for, in ``session``'s
    transaction; (uuid, status, document). Raises InsufficientCapacity or
    LostRace, after which the caller must roll back what this did, and
    with ``check_fit`` Invalid for a request no pool could ever hold (see
    _claim), before it claimed anything. ``host_name``: the host the
    lease is made for (its devices are ones that host reaches)."""
    request = types.SimpleNamespace(**dict(_LEASE_DEFAULTS, **values))
    # Pools first, then the new lease that names them (InnoDB's foreign
    # key check on the insert takes shared locks on the pool rows, which
    # this transaction holds already).
    claim = _claim(session, request, check_fit=check_fit,
                   host_name=host_name)
    status = states.next_state(
        states.next_state(states.REQUESTED, states.ALLOCATE), states.DONE)
    row = _lease_values(values, status, **_pool_ids(claim))
    lease_id = _insert_lease(session, row)
    parts = _give(session, lease_id, claim)
    dbapi.action_start(context, lease_id, action, session=session,
                       result='success')
    return row['uuid'], status, views.lease_document(
        types.SimpleNamespace(**row), **parts)


def create_failed_in(session, context, values, action, fault):
    """Record a lease that could not be placed: alloc_failed, with
    ``fault``; (uuid, status, document)."""
    status = states.next_state(
        states.next_state(states.REQUESTED, states.ALLOCATE), states.FAIL)
    row = _lease_values(values, status, fault=fault)
    lease_id = _insert_lease(session, row)
    dbapi.action_start(context, lease_id, action, session=session,
                       message=fault, result='error')
    return row['uuid'], status, views.lease_document(
        types.SimpleNamespace(**row), extents=[], devices=[])


CREATE_RACE_FAULT = ('The pools changed too fast to place this lease; '
                     'delete it and try again.')


def _create_once(context, values, action, check_fit=False,
                 host_name=None):
    with dbapi.writer(context) as session:
        return create_in(session, context, values, action,
                         check_fit=check_fit, host_name=host_name)


def _create_failed(context, values, action, fault):
    with dbapi.writer(context) as session:
        return create_failed_in(session, context, values, action, fault)


def create_and_allocate(context, values, action='create',
                        want_document=False, check_fit=False,
                        host_name=None):
    """Insert a lease and claim what it asks for, in one transaction.

    The lease goes requested -> allocating -> reserved and its first action
    is recorded finished. Nobody can see the lease before the commit, so no
    conductor reservation is needed. When it cannot be placed, that
    transaction is rolled back whole (nothing claimed) and the lease is
    recorded in alloc_failed, with the allocator's message as its fault,
    in a second one. (Not a savepoint: InnoDB rolls a deadlock victim back
    entirely, savepoints included, and the deadlock must reach the retry.)
    Returns (uuid, status), and with ``want_document`` (uuid, status,
    document): the lease's document (composable.db.views) as committed.
    With ``check_fit``, a request no pool could ever hold raises Invalid
    and nothing is recorded. With ``host_name``, the lease gets only
    devices that host can reach.
    """
    attempts = CONF.allocator.claim_retries + 1
    fault = CREATE_RACE_FAULT
    result = None
    for attempt in range(attempts):
        try:
            result = dbapi.retry_on_deadlock(_create_once)(
                context, values, action, check_fit=check_fit,
                host_name=host_name)
            break
        except exception.InsufficientCapacity as exc:
            fault = exc.message
            break
        except LostRace as race:
            LOG.info('Lost a race for %s while creating a lease (attempt '
                     '%d of %d); retrying.', race, attempt + 1, attempts)
    if result is None:
        result = dbapi.retry_on_deadlock(_create_failed)(context, values,
                                                         action, fault)
    return result if want_document else result[:2]


def _reach_once(context, lease_id, host_name):
    with dbapi.writer(context) as session:
        # The pools first, as everywhere: a claim of the same pool waits
        # here, and so does another bind trading in the same pool.
        lock_lease_pools(session, lease_id)
        lease = session.execute(sa.select(
            _LEASES.c.uuid, _LEASES.c.device_model, _LEASES.c.device_traits,
            _LEASES.c.requested_devices).where(
            _LEASES.c.id == lease_id)).first()
        if lease is None:
            raise exception.LeaseNotFound(lease=lease_id)
        held = session.execute(statements.LOCK_LEASE_DEVICES,
                               {'b_lease': lease_id}).all()
        away = [d for d in held if not reaches(d, host_name)]
        if not away:
            return {}
        first = away[0]
        if lease.requested_devices:
            raise exception.Conflict(
                reason='lease %s holds device %s, which the fabric cannot '
                       'connect to host %s (it reaches %s); the lease asked '
                       'for that device, so bind it to one of those hosts' %
                       (lease.uuid, first.uuid, host_name,
                        _reach_text(first)))
        stuck = [d for d in away if d.state != states.DEVICE_RESERVED or
                 d.pci_address is not None]
        if stuck:
            raise exception.Conflict(
                reason='lease %s holds device %s (%s), which the fabric '
                       'cannot connect to host %s (it reaches %s); unbind '
                       'the lease first' % (lease.uuid, stuck[0].uuid,
                                            stuck[0].state, host_name,
                                            _reach_text(stuck[0])))
        trades = {}
        for pool_id in sorted({d.pool_id for d in away}):
            gone = [d for d in away if d.pool_id == pool_id]
            query = statements.FREE_DEVICES
            if lease.device_model:
                query = query.where(_DEVICES.c.model == lease.device_model)
            free = session.execute(
                query.order_by(_DEVICES.c.id).with_for_update(),
                {'b_pool': pool_id}).all()
            usable = [d for d in free if reaches(d, host_name) and
                      _matches_traits(d, lease.device_traits)]
            if len(usable) < len(gone):
                pool = session.execute(sa.select(_POOLS.c.name).where(
                    _POOLS.c.id == pool_id)).scalar()
                raise exception.Conflict(
                    reason='host %s cannot reach device %s of lease %s '
                           '(the fabric connects it to %s), and pool %s has '
                           '%s free device that host can reach to take its '
                           'place; bind the lease to a host that reaches '
                           'its devices, or try again once a device is '
                           'free' % (
                               host_name, gone[0].uuid, lease.uuid,
                               _reach_text(gone[0]), pool,
                               'no' if not usable else
                               'only %d' % len(usable)))
            count = session.execute(statements.RETURN_DEVICES, {
                'b_ids': [d.id for d in gone],
                'b_lease': lease_id}).rowcount
            if count != len(gone):
                raise LostRace('device %s' % ', '.join(d.uuid for d in gone))
            _take_devices(session, lease_id, usable[:len(gone)])
            trades.update({old.uuid: new.uuid for old, new
                           in zip(gone, usable)})
        return trades


def reach_host(context, lease_id, host_name):
    """Make sure host ``host_name`` can reach every device the lease
    holds, before it is bound there: a device it cannot reach, never
    bound yet, is given back to its pool and replaced by a free one of
    the same pool (and model, traits) that the host reaches, all in one
    transaction. Returns {old device uuid: new device uuid} (empty when
    nothing had to change). Raises Conflict, changing nothing, when the
    pool has no such device free, the lease asked for that very device,
    or the device is bound already."""
    attempts = CONF.allocator.claim_retries + 1
    for attempt in range(attempts):
        try:
            return dbapi.retry_on_deadlock(_reach_once)(context, lease_id,
                                                        host_name)
        except LostRace as race:
            LOG.info('Lost a race for %s while trading devices of lease %s '
                     'for host %s (attempt %d of %d); retrying.', race,
                     lease_id, host_name, attempt + 1, attempts)
    raise exception.Conflict(
        reason='the pool changed too fast to find devices host %s can '
               'reach; try again' % host_name)


def reach_host_id(context, lease_id, host_id):
    """reach_host for the host of id ``host_id``."""
    with dbapi.reader(context) as session:
        name = _host_name(session, host_id)
    if name is None:
        raise exception.HostNotFound(host=host_id)
    return reach_host(context, lease_id, name)


def lock_lease_pools(session, lease_id):
    """Row-lock the pools a lease holds capacity in, before anything else.

    Updating a lease row makes InnoDB take a shared lock on the pools it
    references (foreign key check); asking for the exclusive pool lock
    after that deadlocks with a claim waiting for the same pool. Taking
    the pool locks first keeps one order everywhere: pools, then the rest.
    Returns the lease's memory pool id.
    """
    ref = session.execute(dbapi.LEASE_REF_BY_ID, {'b_id': lease_id}).first()
    if ref is None:
        return None
    _lock_pools_of(session, ref)
    return ref.memory_pool_id


# Resting states from which a lease that was never bound can be released
# without asking any agent or fabric.
_QUICK_RELEASE_FROM = statements.QUICK_RELEASE_FROM


def _quick_release_target(event):
    """Where the short path leaves a lease: through the state machine, the
    ``event`` (delete or expire) and then the release's DONE. Every state
    the short path starts from must lead to the same one."""
    targets = {states.next_state(states.next_state(status, event),
                                 states.DONE)
               for status in _QUICK_RELEASE_FROM}
    assert len(targets) == 1, targets
    return targets.pop()


def _shift_pools(session, amounts, sign):
    """Change the used counter of each pool of ``amounts`` ({pool id:
    amount}) by ``sign`` * its amount, in id order; a zero amount still
    row-locks its pool."""
    for pool_id in sorted(amounts):
        session.execute(statements.UNCLAIM_POOL, {
            'b_pool': pool_id, 'b_amount': -sign * amounts[pool_id]})


def _lock_pools_of(session, ref):
    """Row-lock, in id order, every pool ``ref`` (a lease_ref row) holds
    capacity in (see lock_lease_pools): its memory and device pools and
    the pools of the devices it holds. A lease without a device pool
    never took a device (the claim sets both in one transaction)."""
    pools = {pid for pid in (ref.memory_pool_id, ref.device_pool_id)
             if pid is not None}
    if ref.device_pool_id is not None:
        pools.update(pool_id for pool_id, _ in session.execute(
            statements.DEVICES_BY_POOL, {'b_lease': ref.id}))
    if pools:
        session.execute(statements.LOCK_POOLS,
                        {'b_pools': sorted(pools)}).all()


def _release_unbound_in(session, context, ref, action):
    """The short release of lease ``ref`` in ``session``; the new status,
    or None (nothing changed) when the lease is busy or holds anything
    live. A handful of statements: this is the path every delete of a
    lease that was never bound takes."""
    if ref.status not in _QUICK_RELEASE_FROM or ref.reservation is not None:
        return None
    event = states.DELETE if action == 'delete' else states.EXPIRE
    target = _quick_release_target(event)
    # What the lease holds, read before anything is locked: only this
    # release, or a bind under the lease's reservation (which the
    # compare-and-set below refuses), changes it.
    by_node, by_pool = _holdings(session, ref.id,
                                 has_memory=ref.memory_pool_id is not None,
                                 has_devices=ref.device_pool_id is not None)
    amounts = _pool_amounts(ref.memory_pool_id, by_node, by_pool)
    for pool_id in (ref.memory_pool_id, ref.device_pool_id):
        if pool_id is not None:
            amounts.setdefault(pool_id, 0)
    # The pools first, as everywhere, in id order: giving their share back
    # is what locks them (one statement a pool instead of a locking read
    # and then the update).
    _shift_pools(session, amounts, -1)
    moved = dbapi.lease_transition(
        context, ref.id, ref.status, (event, states.DONE), session=session,
        statement=(statements.QUICK_RELEASE if event == states.DELETE
                   else statements.QUICK_EXPIRE),
        params={'b_memory_pool': ref.memory_pool_id,
                'b_device_pool': ref.device_pool_id})
    if moved is None:
        # Busy or live after all (or released by someone else meanwhile):
        # take the shares back, and this transaction changed nothing.
        _shift_pools(session, amounts, +1)
        return None
    dbapi.action_start(context, ref.id, action, session=session,
                       result='success')
    _give_back(session, ref.id, by_node, by_pool)
    return target


def _release_unbound_once(context, lease_id, action):
    with dbapi.writer(context) as session:
        ref = session.execute(dbapi.LEASE_REF_BY_ID,
                              {'b_id': lease_id}).first()
        if ref is None:
            return None
        return _release_unbound_in(session, context, ref, action)


def release_unbound(context, lease_id, action='delete'):
    """Release a lease that was never handed to an agent or a fabric
    (nothing exported, attached or bound), in one transaction: the
    ``action`` (delete or expire) moves it to releasing, its capacity
    returns and it ends released. Returns None, changing nothing, when
    the lease is busy or has anything live: then the full release flow
    (teardown, scrub) must run."""
    return dbapi.retry_on_deadlock(_release_unbound_once)(context, lease_id,
                                                          action)


def release_unbound_ident_in(session, context, ident, action):
    """release_unbound_ident in ``session``'s transaction."""
    ref = dbapi.lease_ref_in(session, context, ident)
    return ref, _release_unbound_in(session, context, ref, action)


def _release_unbound_ident_once(context, ident, action):
    with dbapi.writer(context) as session:
        return release_unbound_ident_in(session, context, ident, action)


def release_unbound_ident(context, ident, action='delete'):
    """Look lease ``ident`` up as db_api.lease_ref does (scoped to the
    context's project; LeaseNotFound, Conflict) and release it as
    release_unbound does, in the same transaction. Returns (the lease_ref
    row, the new status or None)."""
    return dbapi.retry_on_deadlock(_release_unbound_ident_once)(
        context, ident, action)


def _release_once(context, lease_id):
    with dbapi.writer(context) as session:
        memory_pool_id = lock_lease_pools(session, lease_id)
        if not _complete(session, lease_id, states.RELEASING, 'release',
                         {'reservation': None}):
            return False
        return_capacity(session, lease_id, memory_pool_id)
        return True


def _holdings(session, lease_id, has_memory=True, has_devices=True):
    """What lease ``lease_id`` holds: ([(memory node id, MiB)], [(pool id,
    device count)]). ``has_memory`` / ``has_devices`` False skip the
    extents / devices (a lease with no memory / device pool has none: the
    claim sets the pool and takes the extents or devices in one
    transaction)."""
    lease = {'b_lease': lease_id}
    by_node = (session.execute(statements.EXTENTS_BY_NODE, lease).all()
               if has_memory else [])
    by_pool = (session.execute(statements.DEVICES_BY_POOL, lease).all()
               if has_devices else [])
    return by_node, by_pool


def _pool_amounts(memory_pool_id, by_node, by_pool):
    """{pool id: what the holdings (see _holdings) take from it}."""
    amounts = {}
    if by_node and memory_pool_id is not None:
        amounts[memory_pool_id] = sum(int(mb) for _, mb in by_node)
    for pool_id, count in by_pool:
        amounts[pool_id] = amounts.get(pool_id, 0) + int(count)
    return amounts


def _give_back(session, lease_id, by_node, by_pool):
    """Give the holdings back to the memory nodes and devices (the pools'
    counters are the caller's)."""
    for node_id, size_mb in by_node:
        session.execute(statements.UNCLAIM_NODE, {
            'b_node': node_id, 'b_amount': int(size_mb)})
    if by_node:
        session.execute(statements.DELETE_EXTENTS, {'b_lease': lease_id})
    if by_pool:
        session.execute(statements.GIVE_BACK_DEVICES, {'b_lease': lease_id})


def return_capacity(session, lease_id, memory_pool_id, has_memory=True,
                    has_devices=True):
    """Give back what the lease holds; its pools are locked already (see
    _holdings for ``has_memory`` and ``has_devices``)."""
    by_node, by_pool = _holdings(session, lease_id, has_memory, has_devices)
    for pool_id, amount in sorted(_pool_amounts(memory_pool_id, by_node,
                                                by_pool).items()):
        _unclaim_pool(session, pool_id, amount)
    _give_back(session, lease_id, by_node, by_pool)


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


# ---------------------------------------------------------------- resize
# Elastic memory leases (composable.conductor.elastic) grow and shrink in
# whole extents while bound. A grow is a claim like a create's: the same
# conditional UPDATEs on the pool and its memory nodes, in the same lock
# order (pools, nodes, then the lease), so a grow and a create racing for
# the last extents never both get them.

_GROW_LEASE = _LEASES.update().where(
    _LEASES.c.id == sa.bindparam('b_lease'),
    _LEASES.c.status == states.BOUND).values(
    memory_mb=_LEASES.c.memory_mb + sa.bindparam('b_amount'),
    updated_at=sa.bindparam('b_now'))
_SHRINK_LEASE = _LEASES.update().where(
    _LEASES.c.id == sa.bindparam('b_lease')).values(
    memory_mb=_LEASES.c.memory_mb - sa.bindparam('b_amount'),
    updated_at=sa.bindparam('b_now'))
_LEASE_EXTENTS = sa.select(
    statements.EXTENTS.c.id, statements.EXTENTS.c.uuid,
    statements.EXTENTS.c.memory_node_id, statements.EXTENTS.c.size_mb,
    statements.EXTENTS.c.index).where(
    statements.EXTENTS.c.lease_id == sa.bindparam('b_lease'))


def _grow_once(context, lease_id, amount_mb):
    with dbapi.writer(context) as session:
        memory_pool_id = lock_lease_pools(session, lease_id)
        lease = session.execute(sa.select(
            _LEASES.c.uuid, _LEASES.c.status).where(
            _LEASES.c.id == lease_id)).first()
        if lease is None:
            raise exception.LeaseNotFound(lease=lease_id)
        if lease.status != states.BOUND or memory_pool_id is None:
            raise exception.InvalidState(lease=lease.uuid,
                                         status=lease.status,
                                         action='grow')
        pool = session.execute(sa.select(*statements.POOL_COLUMNS).where(
            _POOLS.c.id == memory_pool_id)).one()
        step = pool.step_size or 1
        if amount_mb <= 0 or amount_mb % step:
            raise exception.Invalid(
                reason='a memory lease of pool %s grows in whole extents '
                       'of %d MiB, not by %d MiB' % (pool.name, step,
                                                     amount_mb))
        if not _claim_pool(session, pool, amount_mb):
            raise exception.InsufficientCapacity(
                reason='pool %s has %d MiB free, %d MiB more were asked '
                       'for' % (pool.name, _free(pool), amount_mb))
        nodes = session.execute(statements.LOCK_NODES,
                                {'b_pool': pool.id}).all()
        existing = session.execute(_LEASE_EXTENTS,
                                   {'b_lease': lease_id}).all()
        # CXL chunks go on the devices the lease has first: its host
        # reaches them already, and one region of a device grows the
        # guest's device with no other device to make reachable.
        prefer = ({e.memory_node_id for e in existing}
                  if pool.medium == media.CXL else ())
        plan = _plan_extents(nodes, amount_mb // step, step,
                             CONF.allocator.memory_placement, prefer=prefer)
        if plan is None:
            raise exception.InsufficientCapacity(
                reason='pool %s has memory free but not %d whole extents '
                       'of %d MiB on its nodes' % (pool.name,
                                                   amount_mb // step, step))
        index = max([e.index for e in existing], default=-1) + 1
        extents = []
        for node, n in plan.items():
            count = session.execute(statements.CLAIM_NODE, {
                'b_node': node.id, 'b_amount': n * step}).rowcount
            if count != 1:
                raise LostRace('memory node %s' % node.name)
            for _ in range(n):
                extents.append({
                    'uuid': uuidutils.generate_uuid(), 'lease_id': lease_id,
                    'memory_node_id': node.id, 'size_mb': step,
                    'index': index,
                    'export_state': states.EXTENT_ALLOCATED,
                    'created_at': utils.utcnow()})
                index += 1
        session.execute(statements.INSERT_EXTENTS, extents)
        if session.execute(_GROW_LEASE, {
                'b_lease': lease_id, 'b_amount': amount_mb,
                'b_now': utils.utcnow()}).rowcount != 1:
            raise LostRace('lease %s' % lease.uuid)
        return [e['uuid'] for e in extents]


def grow_memory(context, lease_id, amount_mb):
    """Claim ``amount_mb`` more (whole extents of its pool) for a bound
    memory lease, in one transaction: the pool's and memory nodes'
    counters, the new extents, the lease's memory_mb. Returns the uuids
    of the new extents. Raises InsufficientCapacity (nothing claimed)
    when the pool cannot give them, InvalidState when the lease is not
    bound."""
    attempts = CONF.allocator.claim_retries + 1
    for attempt in range(attempts):
        try:
            return dbapi.retry_on_deadlock(_grow_once)(context, lease_id,
                                                       amount_mb)
        except LostRace as race:
            LOG.info('Lost a race for %s while growing lease %s (attempt '
                     '%d of %d); retrying.', race, lease_id, attempt + 1,
                     attempts)
    raise exception.InsufficientCapacity(
        reason='the pool changed too fast to grow the lease')


def _shrink_once(context, lease_id, extent_uuids):
    with dbapi.writer(context) as session:
        memory_pool_id = lock_lease_pools(session, lease_id)
        wanted = set(extent_uuids)
        extents = [e for e in session.execute(
            _LEASE_EXTENTS, {'b_lease': lease_id}).all()
            if e.uuid in wanted]
        if not extents:
            return 0
        by_node = collections.Counter()
        for extent in extents:
            by_node[extent.memory_node_id] += int(extent.size_mb)
        amount = sum(by_node.values())
        for node_id in sorted(by_node):
            session.execute(statements.UNCLAIM_NODE, {
                'b_node': node_id, 'b_amount': by_node[node_id]})
        _unclaim_pool(session, memory_pool_id, amount)
        session.execute(statements.EXTENTS.delete().where(
            statements.EXTENTS.c.id.in_([e.id for e in extents])))
        session.execute(_SHRINK_LEASE, {'b_lease': lease_id,
                                        'b_amount': amount,
                                        'b_now': utils.utcnow()})
        return amount


def shrink_memory(context, lease_id, extent_uuids):
    """Give extents of a lease back to their pool and memory nodes and
    make the lease that much smaller, in one transaction; the MiB given
    back. The caller detached, unexported and scrubbed them first: only
    then may the capacity go to another lease. Idempotent (extents
    already gone are skipped)."""
    return dbapi.retry_on_deadlock(_shrink_once)(context, lease_id,
                                                 extent_uuids)
