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

"""Keep Placement in step with composable's database.

* :func:`sync_pool` makes one pool's sharing resource provider right:
  present (created under ``pool.provider_uuid``, or adopted by name, or
  new), named ``composable-pool-<pool name>``, with traits
  ``MISC_SHARES_VIA_AGGREGATE`` + ``CUSTOM_COMPOSABLE_POOL`` + the pool's
  own traits, in the aggregate of its fabric, and with one inventory of the
  pool's resource class (total, reserved, min_unit = step_size = the pool's
  step, max_unit = total, allocation ratio 1.0).

  A pool of SR-IOV virtual functions is the exception: its functions
  reach one host only, so its provider is not a sharing provider but a
  child of that host's compute node provider (found by name: the host's
  ``hypervisor_hostname`` property, or else its name), in no aggregate and
  without ``MISC_SHARES_VIA_AGGREGATE``. Placement's allocation
  candidates then take its resource class only together with that
  compute node's own resources, so a flavor asking for it lands on the
  physical function's host or nowhere. Placement counts a child as a
  member of its root's aggregates, so aggregate-based request filters
  (availability zones, tenant isolation) still see it. Until the host's
  compute node has a provider, the pool's provider stands alone (leases
  are still counted on it; flavors cannot use it) and every pass says so;
  when the compute node's provider changes (nova-compute re-registered
  the host under a new UUID, or ``hypervisor_hostname`` changed), the
  pool's provider is moved under the new one.
* :func:`claim_lease` / :func:`release_lease` write or remove the
  allocations of a lease consumer (consumer uuid = lease uuid). What a
  lease holds is read from the database, never from what was asked: the
  size of its memory extents and the devices it holds, which the allocator
  changes in the same transaction as the lease status.
* :func:`reconcile` makes Placement match the database both ways and
  returns one human-readable line per correction.

The database is the truth. Allocations of consumers that are not leases
(Nova instances that took pool capacity through a flavor) are never
touched; they are recognized by also holding resources of providers that
are not pools (every instance holds VCPU or MEMORY_MB of a compute node),
or by being the instance of a lease, or the ``placement_consumer`` of a
lease made from Nova's allocation (a flavor-driven lease: composable
writes no allocation of its own for it).
"""

import collections
import dataclasses

from oslo_log import log as logging
from oslo_utils import uuidutils

from composable.common import context as ctx_mod
from composable.common import resource_classes
from composable.common import sriov
from composable.conductor.placement import client as pclient
from composable.db import api as dbapi

LOG = logging.getLogger(__name__)


def get_client():
    return pclient.ReportClient.from_conf()


def pool_traits(pool):
    traits = {resource_classes.POOL_TRAIT}
    if not sriov.is_sriov_pool(pool):
        traits.add(resource_classes.SHARING_TRAIT)
    traits.update(resource_classes.normalize_trait(t)
                  for t in (pool.traits or []))
    return traits


def pool_inventory(pool):
    """{resource class: inventory} the pool's provider should have ({}
    when the pool cannot give even one step)."""
    step = max(1, pool.step_size or 1)
    total = int(pool.total or 0)
    if total < step:
        return {}
    return {pool.resource_class: {
        'total': total,
        'reserved': min(int(pool.reserved or 0), total),
        'min_unit': step,
        'max_unit': total,
        'step_size': step,
        'allocation_ratio': 1.0,
    }}


def pool_aggregates(pool):
    if sriov.is_sriov_pool(pool):
        # A child provider is in its root's aggregates already; an
        # aggregate of its own would only matter to a sharing provider.
        return set()
    aggregate = pool.fabric.aggregate_uuid if pool.fabric else None
    return {aggregate} if aggregate else set()


# The host property naming the host's compute node in Nova (its
# hypervisor_hostname, the name of its Placement provider) when that is
# not the host's name, e.g. a fully qualified name.
HYPERVISOR_HOSTNAME = 'hypervisor_hostname'


def compute_node_name(host):
    """The name of the Placement provider of ``host``'s compute node."""
    return (host.properties or {}).get(HYPERVISOR_HOSTNAME) or host.name


def _compute_node_provider(client, pool):
    """The compute node provider an SR-IOV pool's provider belongs
    under: (name looked for, provider or None when Placement has none)."""
    host = pool.sriov_host
    if host is None:
        return None, None
    name = compute_node_name(host)
    return name, client.get_provider_by_name(name)


def _ensure_parent(client, pool, provider, corrections):
    """Keep an SR-IOV pool's provider under its host's compute node."""
    name, node = _compute_node_provider(client, pool)
    current = provider.get('parent_provider_uuid')
    if node is None:
        host = pool.sriov_host.name if pool.sriov_host else '?'
        if current is None:
            corrections.append(
                'pool %s: host %s has no compute node resource provider '
                'named %s in Placement; until it has (nova-compute running '
                'there, or the host\'s %s property naming it), flavors '
                'cannot place the pool\'s virtual functions' % (
                    pool.name, host, name, HYPERVISOR_HOSTNAME))
        else:
            # Keep it where it is: under a host it was right for, or
            # nowhere a flavor could reach it but that host.
            LOG.warning('Pool %(pool)s: no compute node resource provider '
                        'named %(name)s in Placement; its provider stays '
                        'under %(parent)s.', {'pool': pool.name,
                                              'name': name,
                                              'parent': current})
        return
    if current == node['uuid']:
        return
    if node.get('root_provider_uuid') == provider['uuid']:
        raise ValueError('compute node provider %s is inside the tree of '
                         'pool provider %s' % (node['uuid'],
                                               provider['uuid']))
    client.set_parent(provider['uuid'], provider['name'], node['uuid'])
    corrections.append(
        'pool %s: put resource provider %s under the compute node provider '
        '%s (%s) of host %s (it was under %s)' % (
            pool.name, provider['uuid'], node['uuid'], name,
            pool.sriov_host.name, current or 'no provider'))


def _ensure_provider(client, context, pool, corrections):
    name = pclient.provider_name(pool.name)
    uuid = pool.provider_uuid
    provider = client.get_provider(uuid) if uuid else None
    if provider is None:
        by_name = client.get_provider_by_name(name)
        if by_name is not None and (uuid is None or
                                    by_name['uuid'] != uuid):
            # Ours from an earlier run whose uuid the database lost, or a
            # provider made by hand for this pool: adopt it.
            provider = by_name
            corrections.append(
                'pool %s: adopted existing resource provider %s (%s)' %
                (pool.name, by_name['uuid'], name))
        else:
            uuid = uuid or pclient.new_provider_uuid()
            parent = None
            if sriov.is_sriov_pool(pool):
                parent = _compute_node_provider(client, pool)[1]
            provider = client.create_provider(
                uuid, name, parent['uuid'] if parent else None)
            corrections.append(
                'pool %s: resource provider %s was missing in Placement; '
                'created it%s' % (pool.name, uuid,
                                  ' under the compute node provider %s of '
                                  'host %s' % (parent['uuid'],
                                               pool.sriov_host.name)
                                  if parent else ''))
    if provider['uuid'] != pool.provider_uuid:
        dbapi.pool_update(context, pool.uuid,
                          {'provider_uuid': provider['uuid']})
        pool.provider_uuid = provider['uuid']
    elif provider['name'] != name:
        client.rename_provider(provider['uuid'], name)
        corrections.append('pool %s: renamed resource provider %s from %s '
                           'to %s' % (pool.name, provider['uuid'],
                                      provider['name'], name))
        provider = dict(provider, name=name)
    if sriov.is_sriov_pool(pool):
        _ensure_parent(client, pool, provider, corrections)
    return provider['uuid']


def sync_pool(pool, client=None, context=None):
    """Make the pool's provider right (a sharing provider, or the child
    of a compute node for SR-IOV virtual functions); list of corrections
    made (empty when Placement was right already)."""
    client = client or get_client()
    context = context or ctx_mod.get_admin_context()
    corrections = []
    uuid = _ensure_provider(client, context, pool, corrections)
    if client.set_traits(uuid, pool_traits(pool)):
        corrections.append('pool %s: set the traits of provider %s to %s' %
                           (pool.name, uuid,
                            ', '.join(sorted(pool_traits(pool)))))
    if client.set_aggregates(uuid, pool_aggregates(pool)):
        corrections.append(
            'pool %s: set the aggregates of provider %s to %s' %
            (pool.name, uuid,
             ', '.join(sorted(pool_aggregates(pool))) or 'none'))
    wanted = pool_inventory(pool)
    if client.set_inventories(uuid, wanted):
        inv = wanted.get(pool.resource_class)
        corrections.append(
            'pool %s: set the inventory of provider %s to %s' %
            (pool.name, uuid,
             '%s total=%d reserved=%d step=%d' % (
                 pool.resource_class, inv['total'], inv['reserved'],
                 inv['step_size']) if inv else 'nothing'))
    return corrections


# ------------------------------------------------------------------ leases

def lease_resources(lease):
    """{provider uuid: {resource class: amount}} the lease holds now,
    from the database (its extents and its devices)."""
    held = collections.defaultdict(dict)
    pool = lease.memory_pool
    memory = sum(extent.size_mb for extent in lease.extents)
    if memory and pool is not None and pool.provider_uuid:
        held[pool.provider_uuid][pool.resource_class] = memory
    counts = collections.Counter()
    pools = {}
    for device in lease.devices:
        pools[device.pool_id] = device.pool
        counts[device.pool_id] += 1
    for pool_id, count in counts.items():
        pool = pools[pool_id]
        if pool.provider_uuid:
            rc = pool.resource_class
            held[pool.provider_uuid][rc] = (
                held[pool.provider_uuid].get(rc, 0) + count)
    return dict(held)


def nova_claimed(lease):
    """True when Placement holds the lease's capacity under another
    consumer (``placement_consumer``: the Nova instance whose flavor asked
    for it): composable then writes and deletes nothing for the lease."""
    consumer = getattr(lease, 'placement_consumer', None)
    return bool(consumer) and consumer != lease.uuid


def claimed_resources(lease):
    """What the lease's own consumer should hold in Placement: what it
    holds in the database, or nothing when Nova's claim covers it."""
    if nova_claimed(lease):
        return {}
    return lease_resources(lease)


def claim_lease(lease, client=None):
    """Write the lease's allocations into Placement (idempotent); True
    when Placement changed. Nothing for a lease Nova claimed for."""
    if nova_claimed(lease):
        return False
    client = client or get_client()
    resources = lease_resources(lease)
    if not resources:
        return client.delete_allocations(lease.uuid)
    return client.put_allocations(lease.uuid, resources, lease.project_id,
                                  lease.user_id)


def release_lease(lease, client=None):
    """Remove the lease's allocations from Placement (idempotent). A
    lease Nova claimed for has none of its own: Nova's stays."""
    if nova_claimed(lease):
        return False
    client = client or get_client()
    return client.delete_allocations(lease.uuid)


# ------------------------------------------------------------------ reconcile

@dataclasses.dataclass
class LeaseHolding:
    """A lease that may hold something, as the Placement pass reads it:
    the few columns it needs, what it holds in the database (the size of
    its extents and its devices per pool, summed by the database rather
    than from the loaded lease), and ``wanted``: what its own consumer
    should hold in Placement (claimed_resources of the lease), once
    resolve() has seen the pools with their providers."""

    id: int
    uuid: str
    status: str
    instance_uuid: str
    placement_consumer: str
    memory_pool_id: int
    memory_mb: int
    devices: tuple
    wanted: dict = dataclasses.field(default_factory=dict)

    def resolve(self, pools_by_id):
        """Set ``wanted`` from the pools (by id) as they are now: as
        lease_resources reads it from a loaded lease."""
        held = collections.defaultdict(dict)
        if not nova_claimed(self):
            pool = pools_by_id.get(self.memory_pool_id)
            if self.memory_mb and pool is not None and pool.provider_uuid:
                held[pool.provider_uuid][pool.resource_class] = \
                    self.memory_mb
            for pool_id, count in self.devices:
                pool = pools_by_id.get(pool_id)
                if pool is not None and pool.provider_uuid:
                    rc = pool.resource_class
                    held[pool.provider_uuid][rc] = (
                        held[pool.provider_uuid].get(rc, 0) + count)
        self.wanted = dict(held)
        return self.wanted


def _load(context):
    """The pools, and the leases that may hold something, as
    LeaseHolding (resolved with the pools as read): a released lease
    holds nothing, and the allocations one may have left are found from
    the providers' side (reading the whole history would make the pass
    grow with it).

    Read by db_api.live_lease_holdings in a fixed number of queries
    whatever the number of leases: the live leases' few columns, the
    size of their extents summed per lease, and their devices counted
    per lease and pool."""
    pools, rows, memory, devices = dbapi.live_lease_holdings(context)
    by_id = {pool.id: pool for pool in pools}
    leases = []
    for row in rows:
        lease = LeaseHolding(
            id=row.id, uuid=row.uuid, status=row.status,
            instance_uuid=row.instance_uuid,
            placement_consumer=row.placement_consumer,
            memory_pool_id=row.memory_pool_id,
            # SUM is a DECIMAL on MariaDB.
            memory_mb=int(memory.get(row.id) or 0),
            devices=tuple(devices.get(row.id, ())))
        lease.resolve(by_id)
        leases.append(lease)
    return pools, leases


def _fmt(resources):
    parts = []
    for rp, res in sorted(resources.items()):
        amounts = ', '.join('%s=%d' % kv for kv in sorted(res.items()))
        parts.append('%s on %s' % (amounts, rp))
    return '; '.join(parts)


def _wanted(lease):
    """What a lease's own consumer should hold: read by _load
    (LeaseHolding), or from a lease loaded whole."""
    if isinstance(lease, LeaseHolding):
        return lease.wanted
    return claimed_resources(lease)


def _consumer_is_foreign(client, consumer, pool_providers):
    """True when the consumer also holds resources outside the pools:
    a Nova instance, not a lease."""
    got = client.get_allocations(consumer)
    return bool(set(got['allocations']) - pool_providers)


def reconcile(context=None, client=None, delete_orphans=None):
    """Make Placement match the database; a list of corrections made.

    Both ways: pools without a provider get one and wrong traits,
    aggregates or inventories are fixed; leases holding capacity get
    their allocations (re)written; allocations of released or unknown
    leases are deleted; providers of deleted pools are deleted (unless
    Nova instances still hold allocations there, which is reported).
    Errors on one object are reported and do not stop the others.
    """
    context = context or ctx_mod.get_admin_context()
    client = client or get_client()
    if delete_orphans is None:
        try:
            from composable import conf
            delete_orphans = (
                conf.CONF.placement.composable_delete_orphan_providers)
        except Exception:
            delete_orphans = True
    corrections = []

    def failed(what, err):
        LOG.warning('Reconciling %s with Placement failed: %s', what, err)
        corrections.append('%s: could not be corrected: %s' % (what, err))

    pools, leases = _load(context)

    # 1. Pools -> providers.
    for pool in pools:
        try:
            corrections.extend(sync_pool(pool, client, context))
        except Exception as err:
            failed('pool %s' % pool.name, err)
    providers = {pool.provider_uuid: pool for pool in pools
                 if pool.provider_uuid}
    # What each lease should hold, with the providers step 1 made.
    pools_by_id = {pool.id: pool for pool in pools}
    for lease in leases:
        lease.resolve(pools_by_id)

    # 2. What Placement holds: every consumer's allocations on each
    # provider of a pool (one request per provider, whatever the number
    # of leases), then leases -> allocations, compared in bulk.
    try:
        ours = {p['uuid']: p for p in client.list_providers()}
    except Exception as err:
        failed('the list of composable resource providers', err)
        ours = {}
    pool_providers = set(ours) | set(providers)
    on_provider = {}
    held = collections.defaultdict(dict)
    for uuid in sorted(pool_providers):
        try:
            allocations = client.get_provider_allocations(uuid)
        except Exception as err:
            failed('provider %s' % uuid, err)
            continue
        on_provider[uuid] = allocations
        for consumer, resources in allocations.items():
            held[consumer][uuid] = resources

    by_uuid = {lease.uuid: lease for lease in leases}
    instances = dbapi.lease_nova_consumers(context)
    instances.update(lease.instance_uuid for lease in leases
                     if lease.instance_uuid)
    instances.update(lease.placement_consumer for lease in leases
                     if nova_claimed(lease))
    for lease in leases:
        try:
            wanted = lease.wanted
            if not wanted:
                continue  # handled below, from the providers' side
            if not set(wanted) <= set(on_provider):
                continue  # a provider that did not answer: reported
            have = held.get(lease.uuid, {})
            if have == wanted:
                continue
            # The lease may have moved on since the database was read.
            fresh = dbapi.lease_find(context, lease.id)
            if fresh is None or fresh.reservation:
                # A conductor holds the lease (creating it: its claim may
                # be queued in that conductor's batch right now). Writing
                # the allocation here would race that claim; a conductor
                # that died has its reservation broken, and the next pass
                # writes what is missing.
                continue
            wanted = claimed_resources(fresh)
            if not wanted or not client.put_allocations(
                    fresh.uuid, wanted, fresh.project_id, fresh.user_id):
                continue
            if have:
                corrections.append(
                    'lease %s: allocations were %s in Placement; set them '
                    'to %s' % (lease.uuid, _fmt(have), _fmt(wanted)))
            else:
                corrections.append(
                    'lease %s (%s): allocations were missing in Placement; '
                    'created %s' % (lease.uuid, lease.status, _fmt(wanted)))
        except Exception as err:
            failed('lease %s' % lease.uuid, err)

    # 3. Providers -> consumers that should not be there (from the
    # allocations read above: a lease written in step 2 holds its share,
    # and is no orphan), and providers of pools that are gone.
    for uuid in sorted(pool_providers):
        pool = providers.get(uuid)
        name = pool.name if pool is not None else ours[uuid]['name']
        if uuid not in on_provider:
            continue
        for consumer in sorted(on_provider[uuid]):
            if consumer in instances:
                continue  # a Nova instance's share of the pool
            lease = by_uuid.get(consumer)
            try:
                if lease is None and uuidutils.is_uuid_like(consumer):
                    # Created since the leases were read (its claim may
                    # have been written meanwhile): not an orphan.
                    lease = dbapi.lease_find(context, uuid=consumer)
                if lease is not None and _wanted(lease).get(uuid):
                    # It held its share here when the pass read it: no
                    # orphan. (Released since, it removed its own
                    # allocations, or the next pass does.) Read again
                    # only the leases that may hold nothing, not every
                    # live lease one query each.
                    continue
                if lease is not None:
                    fresh = dbapi.lease_find(context, lease.id)
                    if fresh is not None and claimed_resources(fresh):
                        continue
                    if fresh is not None and nova_claimed(fresh):
                        why = ('lease %s is held by the allocation of '
                               'instance %s; its own counted it twice' %
                               (consumer, fresh.placement_consumer))
                    else:
                        why = 'lease %s is %s and holds nothing' % (
                            consumer, fresh.status if fresh is not None
                            else 'gone')
                elif _consumer_is_foreign(client, consumer,
                                          pool_providers):
                    continue
                else:
                    why = 'consumer %s is no lease composable knows' % (
                        consumer)
                if client.delete_allocations(consumer):
                    corrections.append(
                        'provider %s (%s): %s; deleted its allocations' %
                        (uuid, name, why))
            except Exception as err:
                failed('allocations of consumer %s' % consumer, err)
        if pool is None and uuid in ours and delete_orphans:
            try:
                if client.delete_provider(uuid):
                    corrections.append(
                        'resource provider %s (%s) belongs to no pool; '
                        'deleted it' % (uuid, name))
            except Exception as err:
                failed('resource provider %s (%s) of a deleted pool' %
                       (uuid, name), err)

    for line in corrections:
        LOG.info('Placement reconcile: %s', line)
    return corrections
