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

"""The allocator's SQL: SQLAlchemy Core statements, built once.

Why Core and not the ORM
------------------------
The claim of every lease created and the quick release of every lease
deleted run these statements: they are the hot path of lease create and
delete. Both were rewritten from ORM queries to Core statements on the
tables to cut the CPU each lease create and delete costs ("Faster lease
create and delete"): the ORM's unit of work and identity map cost more
than the statements themselves. They were then built once, at import,
with bound parameters (``b_*``) ("Allocator: claim and release statements
built once"): building a statement and computing its cache key cost more
than executing it.

So rows read here are plain rows (attribute access by column name), never
ORM objects; a statement that depends on the request (a device model, a
list of pools) is derived from one of these with ``.where()``.
"""

import sqlalchemy as sa

from composable.common import states
from composable.db import models

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

# Devices.
TAKE_DEVICES = DEVICES.update().where(
    DEVICES.c.id.in_(_B('b_ids', expanding=True)),
    DEVICES.c.state == states.DEVICE_AVAILABLE,
    DEVICES.c.lease_id.is_(None)).values(
        state=states.DEVICE_RESERVED, lease_id=_B('b_lease'))
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
    DEVICES.c.state == states.DEVICE_RESERVED,
    DEVICES.c.pci_address.is_(None)).values(
        state=states.DEVICE_AVAILABLE, lease_id=None)
DEVICES_BY_POOL = sa.select(DEVICES.c.pool_id, sa.func.count()).where(
    DEVICES.c.lease_id == _B('b_lease')).group_by(
    DEVICES.c.pool_id).order_by(DEVICES.c.pool_id)
GIVE_BACK_DEVICES = DEVICES.update().where(
    DEVICES.c.lease_id == _B('b_lease')).values(
    lease_id=None, pci_address=None,
    state=sa.case(
        (DEVICES.c.state.in_([states.DEVICE_RESERVED, states.DEVICE_ATTACHED]),
         states.DEVICE_AVAILABLE),
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
