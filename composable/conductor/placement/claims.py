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

"""The conductor's side of Placement: lease claims, releases, pool sync.

Placement is used when ``[placement]composable_enabled`` says so (unset:
when ``[placement]auth_type`` is set). When it is off, every entry point
here returns at once without reading the database or building a client,
so a deployment without Placement (composable-all, the lease churn
benchmark) pays nothing.

Lease-first claims
------------------
A lease created through the API is claimed twice: in the database by the
allocator (one transaction: capacity counters, extents, devices, status
``reserved``), then in Placement as an allocation whose consumer is the
lease (project and user of the lease), so Nova cannot give the same pool
capacity to an instance. The database claim comes first because only it
chooses the pool, the memory nodes and the devices; holding database row
locks across an HTTP call to Placement would serialize every claim on the
pool behind Placement's latency.

The Placement claims of one conductor are written in batches (see
:mod:`composable.conductor.placement.batch`): one ``POST /allocations``
for the claims queued while the previous one was under way, checked once
per provider against the capacity the conductor knows. A claim the batch
cannot take is written on its own, by the per-lease path below (read the
consumer, write it, check the provider's usages), which is also the only
path when ``[placement]composable_claim_batch_size`` is 0.

If Placement refuses (Nova's instances hold the capacity, the provider is
gone and cannot be made again, Placement does not answer), the database
claim is rolled back in one transaction: the capacity returns to the pool
and the lease ends ``alloc_failed`` with a fault its owner can act on.
Before giving up, a refusal that may only mean Placement is behind the
database (a memory node added since the last periodic pass, a provider
deleted by hand) brings the lease's pools up to date in Placement and
tries the claim once more.

While the Placement claim is under way a new lease carries its creating
conductor's reservation (set by the insert itself), so nobody binds or
deletes it between the two claims. A conductor that dies between them
leaves a ``reserved`` lease without a Placement allocation; the periodic
Placement pass (:func:`composable.conductor.placement.sync.reconcile`)
writes it, or reports that it cannot.

Release
-------
When a lease's capacity has returned to the pools its Placement
allocation is deleted. A failure there never undoes the release (the
database is the truth): it is logged and the periodic pass deletes the
stale allocation later.

Flavor-driven leases
--------------------
Nova's scheduler claims pool capacity itself for an instance whose flavor
asks for it (consumer = the instance). A lease made from that claim
(:func:`instance_pool_allocations` tells what the instance holds in which
pool) records ``placement_consumer`` = the instance uuid: composable then
never claims for it, never deletes that allocation, and the periodic pass
leaves it alone.

Pools
-----
Pool changes through the API are pushed to Placement at once by an RPC
cast to a conductor (:func:`sync_pool_now`); the periodic pass
(``[placement]composable_reconcile_interval``) repairs anything missed or
changed behind composable's back, both ways.
"""

import collections
import contextlib
import threading

from oslo_log import log as logging
from oslo_utils import uuidutils

from composable.common import context as ctx_mod
from composable.common import exception
from composable.common import states
from composable.conductor.placement import batch
from composable.conductor.placement import client as pclient
from composable.conductor.placement import sync
from composable.conductor import reservations
from composable import conf
from composable.conf import placement as placement_conf
from composable.db import allocation
from composable.db import api as db_api

CONF = conf.CONF
LOG = logging.getLogger(__name__)

_CLIENT = None
_CLIENT_LOCK = threading.Lock()
_WRITER = None
# Per resource provider: this conductor's claims on it, one at a time.
_PROVIDER_LOCKS = collections.defaultdict(threading.Lock)
_PROVIDER_LOCKS_LOCK = threading.Lock()
# Pool syncs of one conductor run one at a time: two casts for the same
# new pool would otherwise both try to create its provider.
_SYNC_LOCK = threading.Lock()


def enabled():
    return placement_conf.enabled(CONF)


def get_client():
    """The conductor's Placement client, made on first use (one
    keystoneauth session for the whole process)."""
    global _CLIENT
    if _CLIENT is None:
        with _CLIENT_LOCK:
            if _CLIENT is None:
                _CLIENT = pclient.ReportClient.from_conf(CONF)
    return _CLIENT


def set_client(client):
    """Use ``client`` from now on (None: make one again from the
    configuration on next use). The batch writer starts afresh too: what
    it knew of the old Placement's consumers is void."""
    global _CLIENT, _WRITER
    with _CLIENT_LOCK:
        _CLIENT = client
        if _WRITER is not None:
            _WRITER.close()
        _WRITER = None


def get_writer():
    """The conductor's batch writer of lease claims, made on first use;
    None when ``[placement]composable_claim_batch_size`` is 0."""
    global _WRITER
    size = CONF.placement.composable_claim_batch_size
    if not size:
        return None
    if _WRITER is None:
        with _CLIENT_LOCK:
            if _WRITER is None:
                _WRITER = batch.BatchWriter(
                    get_client, max_batch=size,
                    unavailable_wait=(
                        CONF.placement.composable_unavailable_wait),
                    provider_lock=_providers_locked)
    return _WRITER


def check_config():
    """Refuse to run a conductor told to use Placement without any way of
    reaching it."""
    group = CONF.placement
    if group.composable_enabled and not group.auth_type:
        raise exception.ComposableException(
            '[placement]composable_enabled is true but [placement]auth_type '
            'is not set: composable cannot reach Placement. Configure the '
            'credentials, or unset composable_enabled.')


def loops(manager):
    """(name, interval, function) of the periodic Placement pass, for
    ConductorManager.start(); empty when Placement is off."""
    if not enabled():
        return []
    check_config()
    interval = CONF.placement.composable_reconcile_interval
    if not interval:
        return []
    return [('placement', interval, reconcile_pass)]


def reconcile_pass():
    """One periodic pass making Placement match the database; the list of
    corrections (each is logged by the reconciler)."""
    corrections = sync.reconcile(ctx_mod.get_admin_context(), get_client())
    if corrections:
        LOG.warning('Placement did not match the database; made %d '
                    'correction(s), see above.', len(corrections))
    return corrections


# ---------------------------------------------------------------- leases

def prepare_create(values, host):
    """``values`` for allocator.create_and_allocate when Placement is on:
    the lease's uuid chosen now, the lease named as its own Placement
    consumer, and the creating conductor's reservation set by the insert
    (released by :func:`after_create`)."""
    values = dict(values)
    values.setdefault('uuid', uuidutils.generate_uuid())
    values.setdefault('placement_consumer', values['uuid'])
    values['reservation'] = host
    return values


def after_create(context, lease_uuid, status, host):
    """Claim a lease just created by allocator.create_and_allocate (with
    values from :func:`prepare_create`) in Placement, or roll it back.
    Releases the creation's reservation. Returns the lease's status."""
    admin = ctx_mod.get_admin_context()
    lease = db_api.lease_get(admin, lease_uuid)
    reservation = reservations.adopt(admin, lease.id, host)
    with reservations.guard(reservation):
        if status != states.RESERVED:
            return status
        return claim(context, lease, 'create')


def claim_allocated(task, action):
    """Claim in Placement the lease of ``task`` (a LeaseTask), which the
    allocator just moved to reserved (flows.allocate, in the worker
    holding the lease's reservation). True when claimed; False when
    Placement refused: the lease is alloc_failed then, and its running
    ``action`` ended with the fault."""
    claimed = claim(task.context, task.lease, action) == states.RESERVED
    if not claimed:
        task.mark_stale()
    return claimed


def claim(context, lease, action):
    """Write the lease's Placement allocation; on refusal roll the
    database claim back. Returns the lease's status afterwards."""
    if sync.nova_claimed(lease):
        return lease.status
    try:
        _claim(context, lease)
    except Exception as exc:
        fault = _fault(context, lease, exc)
        if roll_back(context, lease.id, fault, action):
            LOG.warning('Lease %(lease)s: Placement refused its claim, so '
                        'its database claim was rolled back: %(fault)s',
                        {'lease': lease.uuid, 'fault': fault})
            return states.ALLOC_FAILED
        # Someone moved the lease on meanwhile (it cannot be bound or
        # deleted under our reservation, but an operator may have broken
        # it): the periodic pass settles Placement.
        current = db_api.lease_get_by_id(context, lease.id)
        LOG.warning('Lease %(lease)s: Placement refused its claim and the '
                    'lease is %(status)s now; left to the periodic '
                    'Placement pass.', {'lease': lease.uuid,
                                        'status': current.status})
        return current.status
    return states.RESERVED


def _lease_pools(lease):
    pools = {}
    if lease.extents and lease.memory_pool is not None:
        pools[lease.memory_pool.id] = lease.memory_pool
    for device in lease.devices:
        pools[device.pool_id] = device.pool
    return [pools[pid] for pid in sorted(pools)]


def _sync_pools(context, client, pools):
    corrections = []
    with _SYNC_LOCK:
        for pool in pools:
            corrections.extend(sync.sync_pool(
                db_api.pool_get(context, pool.uuid), client, context))
    return corrections


class PlacementOverCommitted(pclient.PlacementError):
    msg_fmt = ('Placement let allocations exceed the capacity of '
               '%(resource_class)s on resource provider %(provider)s '
               '(%(used)s used of %(capacity)s); withdrew the lease\'s.')
    code = 409
    error_code = 'composable.placement.over_committed'


@contextlib.contextmanager
def _providers_locked(providers):
    """Serialize this conductor's claims on the same providers (in one
    order, so two claims never wait on each other crosswise)."""
    with _PROVIDER_LOCKS_LOCK:
        locks = [_PROVIDER_LOCKS[uuid] for uuid in sorted(providers)]
    for lock in locks:
        lock.acquire()
    try:
        yield
    finally:
        for lock in reversed(locks):
            lock.release()


def _check_capacity(client, consumer, resources):
    """Raise PlacementOverCommitted, after withdrawing ``consumer``'s
    allocation, when a provider it was just given holds more than its
    capacity.

    Placement (16.0.0, on MariaDB and PostgreSQL alike) can accept
    concurrent PUT /allocations on one provider beyond its capacity: when
    a write loses the provider generation race, Placement retries it
    inside the same database transaction, which still holds the first
    attempt's rows, so the retry counts them as the consumer's previous
    usage and takes the over-capacity result for "no worse than before".
    Claims of one conductor are serialized per provider, which closes the
    race between them; this check covers claims of other conductors and
    of Nova's scheduler running at the same moment.
    """
    for provider, wanted in sorted(resources.items()):
        _, inventories = client.get_inventories(provider)
        usages = client.get_usages(provider)
        for rc in sorted(wanted):
            inv = inventories.get(rc)
            capacity = 0 if inv is None else int(
                (inv['total'] - inv['reserved']) * inv['allocation_ratio'])
            used = usages.get(rc, 0)
            if used > capacity:
                try:
                    client.delete_allocations(consumer)
                except Exception as err:
                    # The lease is rolled back all the same; the periodic
                    # pass deletes the allocation of a lease holding
                    # nothing.
                    LOG.warning('Could not withdraw the allocation of '
                                '%(consumer)s (%(err)s); the periodic '
                                'Placement pass will.',
                                {'consumer': consumer, 'err': err})
                raise PlacementOverCommitted(
                    status=409, resource_class=rc, provider=provider,
                    used=used, capacity=capacity)


def _capacities(pools):
    """{provider uuid: {resource class: what the pool can hold}}, as
    composable reports it to Placement (allocation ratio 1.0)."""
    capacity = {}
    for pool in pools:
        for rc, inv in sync.pool_inventory(pool).items():
            if pool.provider_uuid:
                capacity.setdefault(pool.provider_uuid, {})[rc] = (
                    inv['total'] - inv['reserved'])
    return capacity


def _write(client, lease):
    resources = sync.claimed_resources(lease)
    with _providers_locked(resources):
        if sync.claim_lease(lease, client) and resources:
            _check_capacity(client, lease.uuid, resources)


def _claim(context, lease):
    client = get_client()
    admin = ctx_mod.get_admin_context()
    pools = _lease_pools(lease)
    if any(not pool.provider_uuid for pool in pools):
        # A pool never reported yet (made while Placement was off, or
        # before the first pass): without a provider there is nothing to
        # claim from.
        _sync_pools(admin, client, pools)
        lease = db_api.lease_get_by_id(admin, lease.id)
        pools = _lease_pools(lease)
    writer = get_writer()
    resources = sync.claimed_resources(lease)
    if writer is not None and resources:
        try:
            writer.claim(lease.uuid, resources, _capacities(pools),
                         lease.project_id, lease.user_id)
            return
        except batch.ClaimAlone:
            # Placement refused the batch this claim was in (no room for
            # one of them, a provider behind the database, a consumer
            # that exists already) or over-committed: on its own, with
            # every read and check.
            pass
    try:
        _write(client, lease)
        return
    except (pclient.PlacementUnavailable, pclient.GenerationConflict,
            PlacementOverCommitted):
        raise
    except pclient.PlacementError as exc:
        first = exc
    # Placement may only be behind the database (inventory not updated
    # yet, provider deleted by hand): bring the pools up to date, and
    # claim again if that changed anything.
    corrections = _sync_pools(admin, client, pools)
    if not corrections:
        raise first
    LOG.info('Lease %(lease)s: Placement was behind the database for its '
             'pools (%(fixed)s); claiming again.',
             {'lease': lease.uuid, 'fixed': '; '.join(corrections)})
    _write(client, db_api.lease_get_by_id(admin, lease.id))


def update_claim(task):
    """Make the Placement allocation of the lease of ``task`` (a
    LeaseTask: its reservation held), which was resized (an elastic
    memory lease), hold what the lease holds now, with the consumer
    generation Placement last gave it: a concurrent change of the same
    consumer is re-read and retried, never overwritten. Raises what
    Placement refused (PlacementError and subclasses); a lease Nova
    claimed for is left alone."""
    if not enabled():
        return False
    lease = task.lease
    if sync.nova_claimed(lease):
        return False
    writer = get_writer()
    if writer is not None:
        writer.forget(lease.uuid)
    _write(get_client(), lease)
    return True


_ADVICE = (' Nothing is held: delete this lease and try again later%s.')


def _fault(context, lease, exc):
    """What the lease's owner reads: why, and what to do. Placement's own
    words (provider uuids) go to the log for the operator."""
    pools = _lease_pools(lease)
    # Placement names the provider it refused; say which pool that is.
    named = [pool for pool in pools
             if pool.provider_uuid and pool.provider_uuid in str(exc)]
    pools = ', '.join(pool.name for pool in named or pools) or 'none'
    if isinstance(exc, pclient.PlacementUnavailable):
        LOG.error('Lease %(lease)s: Placement is unreachable: %(err)s',
                  {'lease': lease.uuid, 'err': exc})
        return ('The Placement service could not be reached to claim this '
                'lease\'s capacity.' +
                _ADVICE % '; if it keeps failing, tell your cloud operator')
    if isinstance(exc, pclient.GenerationConflict):
        return ('Placement changed too fast to claim this lease\'s '
                'capacity.' + _ADVICE % '')
    if isinstance(exc, pclient.PlacementError):
        LOG.warning('Lease %(lease)s: Placement refused its claim: %(err)s',
                    {'lease': lease.uuid, 'err': exc})
        if isinstance(exc, PlacementOverCommitted) or (
                exc.status == 409 and 'exceed the capacity' in str(exc)):
            return ('Pool %s has no room left in Placement for this lease: '
                    'instances booted with flavors that ask for composable '
                    'resources hold the rest.' % pools +
                    _ADVICE % ', or ask for less')
        return ('Placement refused to record this lease\'s claim on pool %s '
                '(HTTP %s).' % (pools, exc.status) +
                _ADVICE % '; if it keeps failing, tell your cloud operator '
                          '(request %s)' % getattr(context, 'request_id',
                                                   None))
    LOG.error('Lease %(lease)s: claiming it in Placement failed: %(err)r',
              {'lease': lease.uuid, 'err': exc})
    return ('Claiming this lease\'s capacity in Placement failed because of '
            'an internal error (%s).' % type(exc).__name__ +
            _ADVICE % '; tell your cloud operator')


def roll_back(context, lease_id, fault, action):
    """Return a reserved lease's capacity and make it alloc_failed with
    ``fault``, its newest ``action`` ending in error; one transaction.
    False when the lease is no longer reserved (nothing changed)."""
    return db_api.retry_on_deadlock(allocation.roll_back_once)(
        context, lease_id, fault, action)


def release(lease_uuid):
    """Delete composable's Placement allocation of a lease whose capacity
    is back in the pools. Never raises: the release stands either way,
    and the periodic pass deletes an allocation left behind.

    Only the lease's own consumer is touched, so Nova's allocation of an
    instance (a flavor-driven lease) is never deleted here.

    An allocation the batch writer made is removed in its next batch
    (without waiting); any other in one request.
    """
    try:
        writer = get_writer()
        if writer is not None and writer.release(lease_uuid):
            return
        if get_client().delete_consumer(lease_uuid):
            LOG.debug('Deleted the Placement allocations of lease %s',
                      lease_uuid)
    except Exception as exc:
        LOG.warning('Could not delete the Placement allocations of '
                    'released lease %(lease)s (%(err)s); the periodic '
                    'Placement pass will delete them.',
                    {'lease': lease_uuid, 'err': exc})


# ---------------------------------------------------------------- pools

def sync_pool_now(pool_uuid, provider_uuid=None):
    """Bring one pool's provider up to date in Placement now: after the
    API created, changed or deleted the pool. A deleted pool's provider
    is deleted (unless allocations remain on it: the periodic pass deals
    with those). Never raises; the periodic pass repairs what fails."""
    if not enabled():
        return []
    admin = ctx_mod.get_admin_context()
    try:
        client = get_client()
        with _SYNC_LOCK:
            try:
                pool = db_api.pool_get(admin, pool_uuid)
            except exception.PoolNotFound:
                pool = None
            if pool is not None:
                return sync.sync_pool(pool, client, admin)
            if provider_uuid and client.delete_provider(provider_uuid):
                return ['pool %s was deleted; deleted its resource provider '
                        '%s' % (pool_uuid, provider_uuid)]
            return []
    except Exception as exc:
        LOG.warning('Could not update Placement for pool %(pool)s now '
                    '(%(err)s); the periodic Placement pass will.',
                    {'pool': pool_uuid, 'err': exc})
        return []


# ---------------------------------------------------------------- Nova

def instance_pool_allocations(client, instance_uuid, context=None):
    """What Nova's scheduler claimed for an instance from composable's
    pools: {pool uuid: {resource class: amount}}.

    For making the instance's lease from its flavor-driven allocation
    without claiming a second time: such a lease records
    ``placement_consumer`` = ``instance_uuid``.
    """
    context = context or ctx_mod.get_admin_context()
    pools = db_api.pool_uuids_by_provider(context)
    held = client.get_allocations(instance_uuid)['allocations']
    return {pools[rp]: dict(alloc['resources'])
            for rp, alloc in held.items()
            if rp in pools and alloc.get('resources')}
