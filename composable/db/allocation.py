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

"""The allocator's claims and returns of pool capacity: its SQL and its
transactions.

Only this module writes the capacity counters (``pools.used``,
``memory_nodes.allocated_mb``), the extents a claim makes and the
devices' ``lease_id``. Each ``*_once`` function is one attempt in one
transaction (claim_batch_once runs several creates and quick releases in
one: create_in, create_failed_in and release_unbound_ident_in are the
parts of a transaction they share); the allocator
(composable.conductor.allocator.claims) retries them when they lose a
race (LostRace) or a deadlock, and decides what to do when they refuse.

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

The claim chooses among the rows it has locked (the pool with the most
free, the memory nodes an extent goes to, the devices that match), so
that choice is made here, inside the transaction, and not by its caller.

Devices a host can reach
------------------------
A fabric may connect a device to some of its hosts only (its zones):
``devices.reachable_hosts`` names them, NULL for every host. A claim
that knows the lease's host (a deferred allocation of a lease bound
since, a flavor's lease made where its instance starts) takes only
devices that host reaches. A lease claimed before it had a host is
checked at bind (:func:`reach_host_once`): devices the host cannot reach
are traded, in one transaction under the pool's lock, for free ones of
the same pool that it can, or the bind is refused (Conflict, HTTP 409)
when the pool has none left. Two binds racing for the last reachable
device are ordered by the pool's row lock: the second sees it taken.

Placement of memory extents
---------------------------
A memory lease of M MiB from a pool with step size S becomes M/S extents of
S MiB. ``[allocator] memory_placement`` chooses where they go:

* ``spread`` (default): each extent on the node with the most free memory,
  so a lease is striped over the pool's nodes; Linux round-robins swap
  devices of equal priority, so striping spreads the paging load.
* ``pack``: fill the node with the least free memory that still has room,
  so a lease touches few nodes and large free blocks stay whole.

The statements: SQLAlchemy Core, built once
-------------------------------------------
The claim of every lease created and the quick release of every lease
deleted run the statements below: they are the hot path of lease create
and delete. Both were rewritten from ORM queries to Core statements on
the tables to cut the CPU each lease create and delete costs ("Faster
lease create and delete"): the ORM's unit of work and identity map cost
more than the statements themselves. They were then built once, at
import, with bound parameters (``b_*``) ("Allocator: claim and release
statements built once"): building a statement and computing its cache
key cost more than executing it. (They lived in
composable/conductor/allocator/statements.py until every query moved
into composable/db.)

So rows read here are plain rows (attribute access by column name), never
ORM objects; a statement that depends on the request (a device model, a
list of pools) is derived from one of these with ``.where()``.
"""

import collections
import contextlib
import types

from oslo_utils import uuidutils
import sqlalchemy as sa

from composable.common import context as composable_context
from composable.common import exception
from composable.common import media
from composable.common import pool_fit
from composable.common import resource_classes
from composable.common import states
from composable.common import utils
from composable import conf
from composable.db import api as dbapi
from composable.db import models
from composable.db import views

CONF = conf.CONF

LEASES = models.Lease.__table__
EXTENTS = models.MemoryExtent.__table__
ATTACHMENTS = models.Attachment.__table__
DEVICES = models.Device.__table__
POOLS = models.Pool.__table__
NODES = models.MemoryNode.__table__
ACTIONS = models.LeaseAction.__table__
HOSTS = models.Host.__table__

_B = sa.bindparam

# Columns the claim reads.
POOL_COLUMNS = (POOLS.c.id, POOLS.c.uuid, POOLS.c.name, POOLS.c.kind,
                POOLS.c.fabric_id, POOLS.c.total, POOLS.c.reserved,
                POOLS.c.used, POOLS.c.step_size, POOLS.c.sriov_host_id,
                POOLS.c.medium)
NODE_COLUMNS = (NODES.c.id, NODES.c.name, NODES.c.capacity_mb,
                NODES.c.reserved_mb, NODES.c.allocated_mb)
DEVICE_COLUMNS = (DEVICES.c.id, DEVICES.c.uuid, DEVICES.c.pool_id,
                  DEVICES.c.kind, DEVICES.c.model, DEVICES.c.traits,
                  DEVICES.c.state, DEVICES.c.lease_id,
                  DEVICES.c.pci_address, DEVICES.c.address,
                  DEVICES.c.reachable_hosts)

# Pools.
CLAIM_POOL = POOLS.update().where(
    POOLS.c.id == _B('b_pool'),
    POOLS.c.used + _B('b_amount') <= POOLS.c.total - POOLS.c.reserved
).values(used=POOLS.c.used + _B('b_amount'))
UNCLAIM_POOL = POOLS.update().where(POOLS.c.id == _B('b_pool')).values(
    used=POOLS.c.used - _B('b_amount'))
MEMORY_POOLS = sa.select(*POOL_COLUMNS).where(POOLS.c.kind == 'memory')
# The pools a lease holds capacity in, by primary key, in id order. (The
# pools of the devices it holds are read first, without locking, by
# DEVICES_BY_POOL: a locking read would lock the devices too, and a pool
# condition that is not a plain key lookup makes InnoDB lock every pool
# row it scans, so that two releases on different pools wait for each
# other's pool and deadlock.)
LOCK_POOLS = sa.select(POOLS.c.id).where(
    POOLS.c.id.in_(_B('b_pools', expanding=True))).order_by(
    POOLS.c.id).with_for_update()

# Memory nodes and extents.
LOCK_NODES = sa.select(*NODE_COLUMNS).where(
    NODES.c.pool_id == _B('b_pool'),
    NODES.c.enabled.is_(True)).order_by(NODES.c.id).with_for_update()
CLAIM_NODE = NODES.update().where(
    NODES.c.id == _B('b_node'),
    NODES.c.enabled.is_(True),
    NODES.c.allocated_mb + _B('b_amount') <=
    NODES.c.capacity_mb - NODES.c.reserved_mb
).values(allocated_mb=NODES.c.allocated_mb + _B('b_amount'))
UNCLAIM_NODE = NODES.update().where(NODES.c.id == _B('b_node')).values(
    allocated_mb=NODES.c.allocated_mb - _B('b_amount'))
EXTENTS_BY_NODE = sa.select(
    EXTENTS.c.memory_node_id, sa.func.sum(EXTENTS.c.size_mb)).where(
    EXTENTS.c.lease_id == _B('b_lease')).group_by(
    EXTENTS.c.memory_node_id).order_by(EXTENTS.c.memory_node_id)
DELETE_EXTENTS = EXTENTS.delete().where(
    EXTENTS.c.lease_id == _B('b_lease'))

# Devices. Their state changes are those of states.DEVICE_MACHINE, each
# a compare-and-set from the event's declared sources (as
# db.api.device_transition, here inside the allocator's transactions).
_DEVICE = states.DEVICE_MACHINE
TAKE_DEVICES = DEVICES.update().where(
    DEVICES.c.id.in_(_B('b_ids', expanding=True)),
    DEVICES.c.state.in_(_DEVICE.sources(states.DEVICE_CLAIM)),
    DEVICES.c.lease_id.is_(None)).values(
        state=_DEVICE.target(states.DEVICE_CLAIM), lease_id=_B('b_lease'))
FREE_DEVICES = sa.select(*DEVICE_COLUMNS).where(
    DEVICES.c.pool_id == _B('b_pool'),
    DEVICES.c.state == states.DEVICE_AVAILABLE,
    DEVICES.c.lease_id.is_(None))
# Any free device will do (no model, no traits): lock only as many as
# needed. The pool claim before it guarantees that enough are free; SKIP
# LOCKED is not on every backend.
LOCK_ANY_FREE_DEVICES = FREE_DEVICES.order_by(DEVICES.c.id).limit(
    _B('b_limit')).with_for_update()
# A lease's devices, locked (a bind checks that its host reaches them).
LOCK_LEASE_DEVICES = sa.select(*DEVICE_COLUMNS).where(
    DEVICES.c.lease_id == _B('b_lease')).order_by(
    DEVICES.c.id).with_for_update()
# Devices a lease gives back without ever having bound them (a bind to a
# host that cannot reach them trades them for ones it can).
RETURN_DEVICES = DEVICES.update().where(
    DEVICES.c.id.in_(_B('b_ids', expanding=True)),
    DEVICES.c.lease_id == _B('b_lease'),
    # Never bound: of the sources of free, only reserved.
    DEVICES.c.state == states.DEVICE_RESERVED,
    DEVICES.c.pci_address.is_(None)).values(
        state=_DEVICE.target(states.DEVICE_FREE), lease_id=None)
DEVICES_BY_POOL = sa.select(DEVICES.c.pool_id, sa.func.count()).where(
    DEVICES.c.lease_id == _B('b_lease')).group_by(
    DEVICES.c.pool_id).order_by(DEVICES.c.pool_id)
GIVE_BACK_DEVICES = DEVICES.update().where(
    DEVICES.c.lease_id == _B('b_lease')).values(
    lease_id=None, pci_address=None,
    # Freed from the states free is declared from; any other state (none
    # while leased: an operator cannot change it then) is kept.
    state=sa.case(
        (DEVICES.c.state.in_(_DEVICE.sources(states.DEVICE_FREE)),
         _DEVICE.target(states.DEVICE_FREE)),
        else_=DEVICES.c.state))

# Leases and their action log.
INSERT_LEASE = LEASES.insert()
INSERT_EXTENTS = EXTENTS.insert()

# Resting states from which a lease that was never bound can be released
# without asking any agent or fabric.
QUICK_RELEASE_FROM = (states.REQUESTED, states.RESERVED,
                      states.ALLOC_FAILED)

# The short release, compare-and-set: the lease is still where it was read
# (status, no reservation, the pools locked for it: a deferred start may
# have allocated it since), and nothing of it is live: no extent exported
# or given credentials, no attachment, no device bound on the fabric.
QUICK_RELEASE = LEASES.update().where(
    LEASES.c.id == _B('b_lease'),
    LEASES.c.reservation.is_(None),
    LEASES.c.status.in_(QUICK_RELEASE_FROM),
    LEASES.c.memory_pool_id.is_not_distinct_from(_B('b_memory_pool')),
    LEASES.c.device_pool_id.is_not_distinct_from(_B('b_device_pool')),
    ~sa.exists().where(
        EXTENTS.c.lease_id == _B('b_lease'),
        sa.or_(EXTENTS.c.export_state != states.EXTENT_ALLOCATED,
               EXTENTS.c.chap_username.isnot(None))),
    ~sa.exists().where(
        ATTACHMENTS.c.lease_id == _B('b_lease'),
        ATTACHMENTS.c.state != states.ATT_DETACHED),
    ~sa.exists().where(
        DEVICES.c.lease_id == _B('b_lease'),
        sa.or_(DEVICES.c.state != states.DEVICE_RESERVED,
               DEVICES.c.pci_address.isnot(None)))).values(
    status=_B('b_status'), updated_at=_B('b_now'), live_name=None)
# An expiry, also only while the lease's end has passed: an end_at moved
# on (under the lease's reservation, see ConductorManager.update_lease)
# since the lease was read keeps it.
QUICK_EXPIRE = QUICK_RELEASE.where(LEASES.c.end_at <= _B('b_now'))


class LostRace(Exception):
    """A conditional UPDATE matched nothing although the rows were locked
    (a database without row locks, or inventory changed underneath):
    the whole transaction is rolled back and tried again."""


def _free(pool):
    return max(0, pool.total - pool.reserved - pool.used)


def _claim_pool(session, pool, amount):
    count = session.execute(CLAIM_POOL, {
        'b_pool': pool.id, 'b_amount': amount}).rowcount
    return count == 1


def _unclaim_pool(session, pool_id, amount):
    if amount:
        session.execute(UNCLAIM_POOL, {'b_pool': pool_id,
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


def _candidates(session, query, lease, fabric_id):
    """The pools of ``query`` the lease may take, most free first: those
    it names, else any but CXL ones; on ``fabric_id`` when given."""
    if lease.requested_pools:
        query = query.where(POOLS.c.uuid.in_(lease.requested_pools))
    else:
        # CXL memory is another tier, bound as a NUMA node: a lease gets
        # it only by naming its pool (composable.common.media).
        query = query.where(sa.or_(POOLS.c.medium.is_(None),
                                   POOLS.c.medium != media.CXL))
    if fabric_id is not None:
        query = query.where(POOLS.c.fabric_id == fabric_id)
    return _pools_by_free(session, query)


def _memory_candidates(session, lease, fabric_id=None):
    return _candidates(session, MEMORY_POOLS, lease, fabric_id)


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
        nodes = session.execute(LOCK_NODES,
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
            count = session.execute(CLAIM_NODE, {
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
    return _candidates(session, sa.select(*POOL_COLUMNS).where(
        POOLS.c.kind == kind, POOLS.c.resource_class == resource_class),
        lease, fabric_id)


def _take_devices(session, lease_id, devices):
    """Give ``devices`` to the lease, all or none (LostRace)."""
    ids = [device.id for device in devices]
    count = session.execute(TAKE_DEVICES, {
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
    devices = session.execute(sa.select(*DEVICE_COLUMNS).where(
        DEVICES.c.uuid.in_(lease.requested_devices)).order_by(
            DEVICES.c.id).with_for_update()).all()
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
    pool = session.execute(sa.select(*POOL_COLUMNS).where(
        POOLS.c.id == pool_ids.pop())).one()
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
            query = LOCK_ANY_FREE_DEVICES
        else:
            query = FREE_DEVICES
            if lease.device_model:
                query = query.where(DEVICES.c.model == lease.device_model)
            if not (lease.device_traits or host_name):
                query = query.limit(count)
            query = query.order_by(DEVICES.c.id).with_for_update()
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
        session.execute(INSERT_EXTENTS, [
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
    return session.execute(sa.select(HOSTS.c.name).where(
        HOSTS.c.id == host_id)).scalar()


def allocate_once(context, lease_id):
    """One attempt of the allocator's allocate, in one transaction:
    claim what the lease asks for and move it from ``allocating`` to
    ``reserved``. True when it claimed, False when the lease was claimed
    already (a retried RPC or a resumed flow). Raises
    InsufficientCapacity, or LostRace (roll back and try again)."""
    with dbapi.writer(context) as session:
        lease = session.execute(sa.select(LEASES).where(
            LEASES.c.id == lease_id,
            LEASES.c.status == states.ALLOCATING)).first()
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
    return session.execute(INSERT_LEASE,
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


def create_once(context, values, action, check_fit=False,
                host_name=None):
    """create_in in a transaction of its own."""
    with dbapi.writer(context) as session:
        return create_in(session, context, values, action,
                         check_fit=check_fit, host_name=host_name)


def create_failed(context, values, action, fault):
    """create_failed_in in a transaction of its own."""
    with dbapi.writer(context) as session:
        return create_failed_in(session, context, values, action, fault)


def reach_host_once(context, lease_id, host_name):
    """One attempt of the allocator's reach_host, in one transaction:
    trade the lease's devices that host ``host_name`` cannot reach for
    free ones of the same pools it can. {old device uuid: new device
    uuid}; raises Conflict (nothing changed) or LostRace."""
    with dbapi.writer(context) as session:
        # The pools first, as everywhere: a claim of the same pool waits
        # here, and so does another bind trading in the same pool.
        lock_lease_pools(session, lease_id)
        lease = session.execute(sa.select(
            LEASES.c.uuid, LEASES.c.device_model, LEASES.c.device_traits,
            LEASES.c.requested_devices).where(
            LEASES.c.id == lease_id)).first()
        if lease is None:
            raise exception.LeaseNotFound(lease=lease_id)
        held = session.execute(LOCK_LEASE_DEVICES,
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
            query = FREE_DEVICES
            if lease.device_model:
                query = query.where(DEVICES.c.model == lease.device_model)
            free = session.execute(
                query.order_by(DEVICES.c.id).with_for_update(),
                {'b_pool': pool_id}).all()
            usable = [d for d in free if reaches(d, host_name) and
                      _matches_traits(d, lease.device_traits)]
            if len(usable) < len(gone):
                pool = session.execute(sa.select(POOLS.c.name).where(
                    POOLS.c.id == pool_id)).scalar()
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
            count = session.execute(RETURN_DEVICES, {
                'b_ids': [d.id for d in gone],
                'b_lease': lease_id}).rowcount
            if count != len(gone):
                raise LostRace('device %s' % ', '.join(d.uuid for d in gone))
            _take_devices(session, lease_id, usable[:len(gone)])
            trades.update({old.uuid: new.uuid for old, new
                           in zip(gone, usable)})
        return trades


def host_name_of(context, host_id):
    """The name of the host of id ``host_id``; None when there is none."""
    with dbapi.reader(context) as session:
        return _host_name(session, host_id)


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


def _quick_release_target(event):
    """Where the short path leaves a lease: through the state machine, the
    ``event`` (delete or expire) and then the release's DONE. Every state
    the short path starts from must lead to the same one."""
    targets = {states.next_state(states.next_state(status, event),
                                 states.DONE)
               for status in QUICK_RELEASE_FROM}
    assert len(targets) == 1, targets
    return targets.pop()


def _shift_pools(session, amounts, sign):
    """Change the used counter of each pool of ``amounts`` ({pool id:
    amount}) by ``sign`` * its amount, in id order; a zero amount still
    row-locks its pool."""
    for pool_id in sorted(amounts):
        session.execute(UNCLAIM_POOL, {
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
            DEVICES_BY_POOL, {'b_lease': ref.id}))
    if pools:
        session.execute(LOCK_POOLS,
                        {'b_pools': sorted(pools)}).all()


def _release_unbound_in(session, context, ref, action):
    """The short release of lease ``ref`` in ``session``; the new status,
    or None (nothing changed) when the lease is busy or holds anything
    live. A handful of statements: this is the path every delete of a
    lease that was never bound takes."""
    if ref.status not in QUICK_RELEASE_FROM or ref.reservation is not None:
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
        statement=(QUICK_RELEASE if event == states.DELETE
                   else QUICK_EXPIRE),
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


def release_unbound_once(context, lease_id, action):
    """The short release of lease ``lease_id`` (see _release_unbound_in)
    in a transaction of its own; None when the lease is gone, busy or
    holds anything live."""
    with dbapi.writer(context) as session:
        ref = session.execute(dbapi.LEASE_REF_BY_ID,
                              {'b_id': lease_id}).first()
        if ref is None:
            return None
        return _release_unbound_in(session, context, ref, action)


def release_unbound_ident_in(session, context, ident, action):
    """release_unbound_ident in ``session``'s transaction."""
    ref = dbapi.lease_ref_in(session, context, ident)
    return ref, _release_unbound_in(session, context, ref, action)


def release_unbound_ident_once(context, ident, action):
    """release_unbound_ident_in in a transaction of its own."""
    with dbapi.writer(context) as session:
        return release_unbound_ident_in(session, context, ident, action)


# ---------------------------------------------------------- claim batches
# The claim lanes of a conductor (composable.conductor.allocator.batches)
# run the creates and quick releases that arrived together in one
# transaction, here.

BATCH_CREATE = 'create'
BATCH_RELEASE = 'release'


class _RunAlone(object):
    def __repr__(self):
        return 'RUN_ALONE'


# What claim_batch_once gives a member that is to be run again alone, in
# a transaction of its own, to get its own answer.
RUN_ALONE = _RunAlone()


def _savepoint(session, needed=True):
    """A savepoint in ``session``'s transaction when ``needed`` (else a
    context that does nothing): what runs inside it is undone alone when
    it raises (a batch's leases of memory and devices)."""
    return session.begin_nested() if needed else contextlib.nullcontext()


def _batch_member_in(session, kind, context, args):
    """One member of a claim batch in ``session``'s transaction: its
    result, or RUN_ALONE when it was refused before it changed anything.
    Raises (LostRace, anything unexpected) when the whole transaction
    must be rolled back."""
    if kind == BATCH_RELEASE:
        ident, action = args
        try:
            return release_unbound_ident_in(session, context, ident, action)
        except (exception.NotFound, exception.Conflict):
            # Refused before it changed anything: its own answer (404,
            # 409) is given to it alone.
            return RUN_ALONE
    values, action, check_fit = args
    both = bool(values.get('memory_mb') and (
        values.get('device_count') or values.get('requested_devices')))
    try:
        # Memory claimed, then the devices found wanting: that memory
        # claim is undone by rolling back to the savepoint.
        with _savepoint(session, needed=both):
            return create_in(session, context, values, action,
                             check_fit=check_fit)
    except exception.InsufficientCapacity as exc:
        return create_failed_in(session, context, values, action,
                                exc.message)
    except exception.Invalid:
        # Refused before anything was claimed: its 400 is given to it
        # alone.
        return RUN_ALONE
    except LostRace:
        if not both:
            # Part of a claim may stand: the whole transaction goes.
            raise
        return RUN_ALONE


def claim_batch_once(members):
    """Run the claim batch ``members``, each (kind, context, args): kind
    BATCH_CREATE with args (values, action, check_fit) as create_in
    takes them, or BATCH_RELEASE with (ident, action) as
    release_unbound_ident_in does, in one transaction. What each member
    got, in order: create_in's, create_failed_in's (InsufficientCapacity)
    or release_unbound_ident_in's result, or RUN_ALONE (a refusal, for
    the member alone to hear). Raises, having committed nothing, on a
    lost race of a claim part of which may stand, a deadlock (the caller
    retries) or anything unexpected."""
    # A context of its own: the members' contexts are the callers', and
    # a context already in a transaction would join it.
    with dbapi.writer(composable_context.get_admin_context()) as session:
        return [_batch_member_in(session, kind, context, args)
                for kind, context, args in members]


def release_once(context, lease_id):
    """Give back everything a ``releasing`` lease holds and move it to
    ``released``, in one transaction (its pools locked first). False
    when it was released already."""
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
    by_node = (session.execute(EXTENTS_BY_NODE, lease).all()
               if has_memory else [])
    by_pool = (session.execute(DEVICES_BY_POOL, lease).all()
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
        session.execute(UNCLAIM_NODE, {
            'b_node': node_id, 'b_amount': int(size_mb)})
    if by_node:
        session.execute(DELETE_EXTENTS, {'b_lease': lease_id})
    if by_pool:
        session.execute(GIVE_BACK_DEVICES, {'b_lease': lease_id})


def return_capacity(session, lease_id, memory_pool_id, has_memory=True,
                    has_devices=True):
    """Give back what the lease holds; its pools are locked already (see
    _holdings for ``has_memory`` and ``has_devices``)."""
    by_node, by_pool = _holdings(session, lease_id, has_memory, has_devices)
    for pool_id, amount in sorted(_pool_amounts(memory_pool_id, by_node,
                                                by_pool).items()):
        _unclaim_pool(session, pool_id, amount)
    _give_back(session, lease_id, by_node, by_pool)


def roll_back_once(context, lease_id, fault, action):
    """Undo the database claim of a ``reserved`` lease whose Placement
    claim failed, in one transaction: its capacity back in the pools, the
    lease alloc_failed with ``fault``, its newest ``action`` ending in
    error. False when the lease is no longer reserved (nothing changed).
    """
    with dbapi.writer(context) as session:
        # Same lock order as every claim and release: the lease's pools
        # first.
        memory_pool_id = lock_lease_pools(session, lease_id)
        # The Placement claim is the last step of allocate; the lease is
        # reserved only because the allocator commits the database claim
        # and that status together. Undoing the database claim takes the
        # lease back to where allocate started, so it ends where a failed
        # allocate ends: alloc_failed, holding nothing.
        if dbapi.lease_transition(
                context, lease_id, states.RESERVED, states.FAIL,
                values={'fault': fault, 'memory_pool_id': None,
                        'device_pool_id': None},
                session=session) is None:
            return False
        return_capacity(session, lease_id, memory_pool_id)
        # The action ended already when the claim was created with the
        # lease (create): it is the newest one of that name either way.
        dbapi.action_finish(context, lease_id, action, 'error',
                            message=fault, session=session, latest=True)
        return True


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

_GROW_LEASE = LEASES.update().where(
    LEASES.c.id == sa.bindparam('b_lease'),
    LEASES.c.status == states.BOUND).values(
    memory_mb=LEASES.c.memory_mb + sa.bindparam('b_amount'),
    updated_at=sa.bindparam('b_now'))
_SHRINK_LEASE = LEASES.update().where(
    LEASES.c.id == sa.bindparam('b_lease')).values(
    memory_mb=LEASES.c.memory_mb - sa.bindparam('b_amount'),
    updated_at=sa.bindparam('b_now'))
_LEASE_EXTENTS = sa.select(
    EXTENTS.c.id, EXTENTS.c.uuid,
    EXTENTS.c.memory_node_id, EXTENTS.c.size_mb,
    EXTENTS.c.index).where(
    EXTENTS.c.lease_id == sa.bindparam('b_lease'))


def grow_once(context, lease_id, amount_mb):
    """One attempt of the allocator's grow_memory, in one transaction:
    claim ``amount_mb`` more in the pool and on its memory nodes, add the
    extents and grow the bound lease. The new extents' uuids; raises
    Invalid, InvalidState, InsufficientCapacity or LostRace."""
    with dbapi.writer(context) as session:
        memory_pool_id = lock_lease_pools(session, lease_id)
        lease = session.execute(sa.select(
            LEASES.c.uuid, LEASES.c.status).where(
            LEASES.c.id == lease_id)).first()
        if lease is None:
            raise exception.LeaseNotFound(lease=lease_id)
        if lease.status != states.BOUND or memory_pool_id is None:
            raise exception.InvalidState(lease=lease.uuid,
                                         status=lease.status,
                                         action='grow')
        pool = session.execute(sa.select(*POOL_COLUMNS).where(
            POOLS.c.id == memory_pool_id)).one()
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
        nodes = session.execute(LOCK_NODES,
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
            count = session.execute(CLAIM_NODE, {
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
        session.execute(INSERT_EXTENTS, extents)
        if session.execute(_GROW_LEASE, {
                'b_lease': lease_id, 'b_amount': amount_mb,
                'b_now': utils.utcnow()}).rowcount != 1:
            raise LostRace('lease %s' % lease.uuid)
        return [e['uuid'] for e in extents]


def shrink_once(context, lease_id, extent_uuids):
    """Give the lease's extents of ``extent_uuids`` back to their nodes
    and pool and shrink the lease, in one transaction; the MiB given
    back (0 when none of them is left)."""
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
            session.execute(UNCLAIM_NODE, {
                'b_node': node_id, 'b_amount': by_node[node_id]})
        _unclaim_pool(session, memory_pool_id, amount)
        session.execute(EXTENTS.delete().where(
            EXTENTS.c.id.in_([e.id for e in extents])))
        session.execute(_SHRINK_LEASE, {'b_lease': lease_id,
                                        'b_amount': amount,
                                        'b_now': utils.utcnow()})
        return amount
