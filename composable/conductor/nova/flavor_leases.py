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

"""Flavor-driven leases: the leases of an instance whose flavor asked Nova
for pool capacity (``resources:CUSTOM_COMPOSABLE_MEMORY_MB=4096``, ...).

Nova's scheduler claimed that capacity in Placement itself, from the
pools' sharing resource providers, under the instance's consumer. The
conductor turns that claim into leases, one per pool the instance holds
capacity in:

* the database claim is the allocator's (``create_and_allocate``: extents
  on memory nodes, devices), so the lease can be bound like any other;
* there is no second Placement claim: the lease records
  ``placement_consumer`` = the instance, so composable never writes an
  allocation for it, never deletes Nova's (Nova frees it when the instance
  goes), and the periodic Placement pass leaves it alone
  (composable.conductor.placement.claims, composable.conductor.placement.sync);
* ``instance_uuid`` = the instance.

Each lease has a uuid derived from (instance, pool, generation), so two
callers making the leases of one instance at the same time (the libvirt
hook's prepare and Nova's ``instance.create.end`` notification) cannot
both create one: the second insert hits the unique lease uuid and finds
the first one's lease. The generation counts the instance's earlier
leases on the pool, all released: an instance shelved (Nova frees its
allocation, its leases are released) and unshelved gets new ones.
"""

import uuid as uuid_mod

from oslo_db import exception as db_exc
from oslo_log import log as logging

from composable.common import context as ctx_mod
from composable.common import exception
from composable.common import media
from composable.common import resource_classes
from composable.common import states
from composable.conductor.allocator import claims as allocator
from composable.conductor.placement import claims as placement_claims
from composable.db import api as db_api

LOG = logging.getLogger(__name__)

# Namespace of the uuids of flavor-driven leases (uuid5).
LEASE_NAMESPACE = uuid_mod.UUID('0b6f7a52-3c1e-5d8a-9f4e-2a7c61d0e9b3')

EXTRA_ATTACH_MODE = 'composable:attach_mode'
EXTRA_GPU_MODEL = 'composable:gpu_model'
EXTRA_LEASE_NAME = 'composable:lease_name'


def lease_uuid(instance_uuid, pool_uuid, generation=0):
    """The uuid of the instance's ``generation``-th lease on the pool."""
    return str(uuid_mod.uuid5(LEASE_NAMESPACE, '%s/%s/%d' % (
        instance_uuid, pool_uuid, generation)))


def is_flavor_lease(lease):
    """True for a lease made from Nova's allocation of an instance."""
    consumer = getattr(lease, 'placement_consumer', None)
    return bool(consumer) and consumer != lease.uuid


def _lease_values(pool, amount, instance_uuid, project_id, user_id,
                  extra_specs, name):
    values = {'project_id': project_id, 'user_id': user_id,
              'instance_uuid': instance_uuid,
              'placement_consumer': instance_uuid,
              'requested_pools': [pool.uuid], 'name': name,
              'description': 'Pool resources of the flavor of server %s' %
                             instance_uuid,
              'attach_mode': (extra_specs.get(EXTRA_ATTACH_MODE) or
                              states.ATTACH_HOST)}
    if pool.kind == 'memory':
        values['memory_mb'] = int(amount)
        if media.is_cxl(pool):
            # CXL memory becomes the host's NUMA node, whatever the
            # flavor says of network memory.
            values['attach_mode'] = states.ATTACH_HOST
    elif pool.kind == 'gpu':
        values.update(device_count=int(amount), device_kind='gpu')
        if extra_specs.get(EXTRA_GPU_MODEL):
            values['device_model'] = extra_specs[EXTRA_GPU_MODEL]
    else:
        kind = pool.resource_class
        if kind.startswith(resource_classes.PCI_PREFIX):
            kind = kind[len(resource_classes.PCI_PREFIX):]
        values.update(device_count=int(amount), device_kind=kind.lower())
    return values


def instance_pool_allocations(context, instance_uuid, client=None):
    """Nova's allocation of the instance on composable's pools:
    {pool uuid: {resource class: amount}}, read from Placement."""
    if client is None:
        client = placement_claims.get_client()
    return placement_claims.instance_pool_allocations(client, instance_uuid,
                                                      context)


def ensure_instance_leases(context, instance_uuid, host_name, project_id,
                           user_id=None, extra_specs=None, client=None,
                           allocations=None):
    """Make sure the instance has one lease per pool Nova claimed capacity
    in for it; the uuids of those leases (made now or before).

    ``allocations`` ({pool uuid: {resource class: amount}}) is read from
    Placement (GET /allocations/{instance}) unless given. ``extra_specs``
    are the flavor's (composable:attach_mode, composable:gpu_model,
    composable:lease_name). Idempotent: an instance gets its leases once;
    a lease the pool cannot hold in composable's database (Placement and
    the database disagree) is created ``alloc_failed`` with a fault, and is
    not retried.
    """
    extra_specs = dict(extra_specs or {})
    if allocations is None:
        allocations = instance_pool_allocations(context, instance_uuid, client)
    if not allocations:
        return []
    existing = db_api.lease_list_for_instance(context, instance_uuid,
                                              include_released=True)
    base_name = (extra_specs.get(EXTRA_LEASE_NAME) or
                 'server-%s' % instance_uuid)
    result = []
    for pool_uuid in sorted(allocations):
        try:
            pool = db_api.pool_get(context, pool_uuid)
        except exception.PoolNotFound:
            LOG.warning('Instance %(inst)s holds capacity of pool %(pool)s, '
                        'which composable does not know (any more); no '
                        'lease made for it.',
                        {'inst': instance_uuid, 'pool': pool_uuid})
            continue
        amount = allocations[pool_uuid].get(pool.resource_class)
        if not amount:
            continue
        # requested_pools, not the chosen pool: an alloc_failed lease
        # was given none.
        mine = [lease for lease in existing if is_flavor_lease(lease) and
                pool.uuid in (lease.requested_pools or [])]
        live = [lease for lease in mine
                if lease.status not in (states.RELEASING, states.RELEASED)]
        if live:
            result.append(live[0].uuid)
            continue
        releasing = [lease.uuid for lease in mine
                     if lease.status == states.RELEASING]
        if releasing:
            # Replaced (a resize) or ended (a shelve): the next one claims
            # once this one's capacity is back, or the pool may not hold
            # it. The notification handler waits for that.
            LOG.info('Lease %(lease)s of instance %(inst)s on pool '
                     '%(pool)s is being released; its successor is made '
                     'once it is released.',
                     {'lease': releasing[0], 'inst': instance_uuid,
                      'pool': pool.name})
            continue
        reach_host = _check_host(host_name, pool, instance_uuid)
        name = base_name if len(allocations) == 1 else '%s-%s' % (
            base_name, pool.name)
        values = _lease_values(pool, amount, instance_uuid, project_id,
                               user_id, extra_specs, name)
        values['uuid'] = lease_uuid(instance_uuid, pool.uuid, len(mine))
        result.append(_create(context, values, instance_uuid, pool,
                              reach_host))
    return result


# The fields of a flavor-driven lease that come from the flavor: a lease
# whose fields differ from what the instance's flavor asks now is stale.
_FLAVOR_FIELDS = ('memory_mb', 'device_count', 'device_kind', 'device_model',
                  'attach_mode')


def stale_flavor_leases(context, leases, instance_uuid, allocations,
                        extra_specs=None):
    """Of ``leases`` (the instance's), the flavor-driven ones that no
    longer match Nova's allocation of the instance (``allocations``, as
    instance_pool_allocations gives it): the pool's amount changed, or
    the instance holds none of the pool any more, or the flavor's extra
    specs ask another attach mode or GPU model. After a resize these are
    replaced (see nova_events).

    Leases being released are left out.
    """
    extra_specs = dict(extra_specs or {})
    stale = []
    for lease in leases:
        if (not is_flavor_lease(lease) or
                lease.status in (states.RELEASING, states.RELEASED)):
            continue
        pool_uuid = (lease.requested_pools or [None])[0]
        try:
            pool = db_api.pool_get(context, pool_uuid)
        except exception.PoolNotFound:
            continue  # the reconciler's concern, not a resize's
        amount = (allocations.get(pool.uuid) or {}).get(pool.resource_class)
        if not amount:
            stale.append(lease)
            continue
        wanted = _lease_values(pool, amount, instance_uuid, lease.project_id,
                               lease.user_id, extra_specs, lease.name)
        if any((getattr(lease, field) or None) != (wanted.get(field) or None)
               for field in _FLAVOR_FIELDS):
            stale.append(lease)
    return stale


def _check_host(host_name, pool, instance_uuid):
    """The name of the instance's host when it is a host of the pool's
    fabric (the lease then gets devices that host reaches), else None."""
    if not host_name:
        return None
    try:
        host = db_api.host_get(_admin(), host_name)
    except exception.HostNotFound:
        LOG.warning('Instance %(inst)s runs on %(host)s, which is not a '
                    'composable host; its lease on pool %(pool)s cannot be '
                    'bound there. Register the host (on the fabric of the '
                    'pool) and add it to the fabric\'s aggregate.',
                    {'inst': instance_uuid, 'host': host_name,
                     'pool': pool.name})
        return None
    if host.fabric_id != pool.fabric_id:
        LOG.warning('Instance %(inst)s runs on %(host)s, which is not on '
                    'the fabric of pool %(pool)s; Nova\'s aggregate and '
                    'composable\'s hosts disagree.',
                    {'inst': instance_uuid, 'host': host_name,
                     'pool': pool.name})
        return None
    return host.name


def _admin():
    return ctx_mod.get_admin_context()


def _create(context, values, instance_uuid, pool, host_name=None):
    try:
        uuid, status = allocator.create_and_allocate(context, values,
                                                     action='create',
                                                     host_name=host_name)
    except db_exc.DBDuplicateEntry:
        # Made by a concurrent caller for the same instance and pool.
        LOG.debug('Lease %s of instance %s was made concurrently',
                  values['uuid'], instance_uuid)
        return values['uuid']
    if status == states.ALLOC_FAILED:
        lease = db_api.lease_get(_admin(), uuid)
        LOG.warning('Nova gave instance %(inst)s capacity of pool %(pool)s '
                    'that composable\'s database cannot hold: lease '
                    '%(lease)s is alloc_failed (%(fault)s). Placement and '
                    'the database disagree; see the reconciler.',
                    {'inst': instance_uuid, 'pool': pool.name,
                     'lease': uuid, 'fault': lease.fault})
    else:
        LOG.info('Made lease %(lease)s for instance %(inst)s from its '
                 'allocation on pool %(pool)s.',
                 {'lease': uuid, 'inst': instance_uuid, 'pool': pool.name})
    return uuid
