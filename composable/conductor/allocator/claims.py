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

The claims themselves -- their SQL, their locks and the transaction each
one is -- live in composable.db.allocation (why they cannot over-commit,
the lock order, which devices a host reaches, where extents go: see its
docstring). This module is what the rest of the conductor calls: each
function runs one of those transactions, runs it again after a deadlock
(composable.db.api.retry_on_deadlock) or a lost race
(composable.db.allocation.LostRace: a conditional UPDATE matched nothing
although its rows were locked) up to ``[allocator] claim_retries`` times,
and says what to tell the user when the pools changed too fast.
"""

from oslo_log import log as logging

from composable.common import exception
from composable import conf
from composable.db import allocation
from composable.db import api as dbapi

CONF = conf.CONF
LOG = logging.getLogger(__name__)


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
            return dbapi.retry_on_deadlock(allocation.allocate_once)(
                context, lease_id)
        except allocation.LostRace as race:
            LOG.info('Lost a race for %s while allocating lease %s '
                     '(attempt %d of %d); retrying.', race, lease_id,
                     attempt + 1, attempts)
    raise exception.InsufficientCapacity(
        reason='The pools changed too fast to place this lease; try again.')


CREATE_RACE_FAULT = ('The pools changed too fast to place this lease; '
                     'delete it and try again.')


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
            result = dbapi.retry_on_deadlock(allocation.create_once)(
                context, values, action, check_fit=check_fit,
                host_name=host_name)
            break
        except exception.InsufficientCapacity as exc:
            fault = exc.message
            break
        except allocation.LostRace as race:
            LOG.info('Lost a race for %s while creating a lease (attempt '
                     '%d of %d); retrying.', race, attempt + 1, attempts)
    if result is None:
        result = dbapi.retry_on_deadlock(allocation.create_failed)(
            context, values, action, fault)
    return result if want_document else result[:2]


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
            return dbapi.retry_on_deadlock(allocation.reach_host_once)(
                context, lease_id, host_name)
        except allocation.LostRace as race:
            LOG.info('Lost a race for %s while trading devices of lease %s '
                     'for host %s (attempt %d of %d); retrying.', race,
                     lease_id, host_name, attempt + 1, attempts)
    raise exception.Conflict(
        reason='the pool changed too fast to find devices host %s can '
               'reach; try again' % host_name)


def reach_host_id(context, lease_id, host_id):
    """reach_host for the host of id ``host_id``."""
    name = allocation.host_name_of(context, host_id)
    if name is None:
        raise exception.HostNotFound(host=host_id)
    return reach_host(context, lease_id, name)


def release_unbound(context, lease_id, action='delete'):
    """Release a lease that was never handed to an agent or a fabric
    (nothing exported, attached or bound), in one transaction: the
    ``action`` (delete or expire) moves it to releasing, its capacity
    returns and it ends released. Returns None, changing nothing, when
    the lease is busy or has anything live: then the full release flow
    (teardown, scrub) must run."""
    return dbapi.retry_on_deadlock(allocation.release_unbound_once)(
        context, lease_id, action)


def release_unbound_ident(context, ident, action='delete'):
    """Look lease ``ident`` up as db_api.lease_ref does (scoped to the
    context's project; LeaseNotFound, Conflict) and release it as
    release_unbound does, in the same transaction. Returns (the lease_ref
    row, the new status or None)."""
    return dbapi.retry_on_deadlock(allocation.release_unbound_ident_once)(
        context, ident, action)


def release_capacity(context, lease_id):
    """Return everything the lease holds to its pools and move it from
    ``releasing`` to ``released``, in one transaction.

    The caller must have torn down exports, attachments and fabric
    bindings and scrubbed the extents first: capacity comes back only
    when nothing of the lease is live any more. Idempotent.
    """
    return dbapi.retry_on_deadlock(allocation.release_once)(context, lease_id)


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
            return dbapi.retry_on_deadlock(allocation.grow_once)(
                context, lease_id, amount_mb)
        except allocation.LostRace as race:
            LOG.info('Lost a race for %s while growing lease %s (attempt '
                     '%d of %d); retrying.', race, lease_id, attempt + 1,
                     attempts)
    raise exception.InsufficientCapacity(
        reason='the pool changed too fast to grow the lease')


def shrink_memory(context, lease_id, extent_uuids):
    """Give extents of a lease back to their pool and memory nodes and
    make the lease that much smaller, in one transaction; the MiB given
    back. The caller detached, unexported and scrubbed them first: only
    then may the capacity go to another lease. Idempotent (extents
    already gone are skipped)."""
    return dbapi.retry_on_deadlock(allocation.shrink_once)(
        context, lease_id, extent_uuids)
