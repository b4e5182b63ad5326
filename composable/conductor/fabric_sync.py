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

"""Keeping the device rows of each fabric in step with the fabric.

Every ``[conductor]fabric_sync_interval`` seconds each conductor asks the
driver of every fabric it has enabled what the fabric holds
(``FabricDriver.discover``) and compares it with the device rows of the
fabric's pools, matched by ``devices.address`` (the fabric's own id):

* a driver that cannot tell what its fabric holds (``discover`` answers
  None: the fake driver without a simulated inventory, as in the demo of
  composable-all) changes nothing;
* a device the fabric reports and no row has joins the fabric's pool of
  its kind (resource class), ``available`` -- or ``faulty`` when the
  fabric says it is unhealthy, ``maintenance`` when the fabric has it
  bound to a host already; a device for which the fabric has no pool, or
  several, is reported and left alone;
* an ``available`` device the fabric no longer reports, reports as
  critical, or reports bound to a host although no lease holds it goes to
  ``maintenance`` (gone, bound outside composable) or ``faulty``
  (critical), so the allocator stops giving it out;
* a device the fabric could not read this round (the driver reports it
  with an ``error``: a block that vanished between the listing and the
  read, or answered garbage) is left as it is, neither added nor taken
  out of service: the reason is logged and notified as its health
  (``unknown``), and the rest of the fabric is synced as usual;
* a device the fabric holds but no host can be given (the driver says
  ``not_poolable``, with the reason) is listed in the log and not added;
  one the fabric reports out of service (``unavailable``: a failed or
  reserved composition, a disabled resource) joins, or goes to,
  ``maintenance`` with the reason;
* a device a lease holds is never changed here: its state follows its
  lease, and taking it away would hand it to nobody. Such a device that
  vanished, failed or is bound to a host its lease is not bound to is
  logged as a warning for the operator;
* what changed is logged per fabric, and the pools that changed are
  pushed to Placement;
* what the fabric says of each device it reports -- serial, health (and
  why, when not ok) and the hosts that can reach it (``hosts``: None for
  every host of the fabric) -- is stored on its row whatever its state or
  lease (``devices.serial``, ``health``, ``health_reason``,
  ``reachable_hosts``: the allocator and the scheduler filter read the
  last); a device that could not be read gets health ``unknown`` with the
  reason, one no longer reported ``unknown`` too;
* each device whose state the sync changes, and each leased device the
  fabric reports unhealthy or no longer reports, is notified as
  ``device.health`` (a leased one once per health it is seen in by this
  conductor).

Each change goes through ``db_api.device_create`` / ``device_update``,
which lock the device's pool first: a device the allocator gives to a
lease at the same moment is either claimed before (and then left alone
here) or changed before (and then not claimed). Several conductors may
sync at once; a second create of the same device is refused by the
address check under the pool lock, and a state change is idempotent.
Devices that come back healthy are not put back in service: an operator
decides that (``openstack composable device set --state available``).
"""

import threading

from oslo_log import log as logging

from composable.common import context as composable_context
from composable.common import exception
from composable.common import resource_classes
from composable.common import states
from composable.common import utils
from composable import conf
from composable.conductor import cxl_sync
from composable.conductor import host_facts
from composable.conductor.placement import claims as placement_claims
from composable.db import api as db_api
from composable import fabric as fabric_drivers
from composable.fabric import base as fabric_base
from composable import notifications

CONF = conf.CONF
LOG = logging.getLogger(__name__)

DEVICE_POOL_KINDS = ('gpu', 'pci')

# What the fabric says of a device it no longer reports.
HEALTH_ABSENT = 'absent'
# What the sync says of a device the fabric could not read this round.
HEALTH_UNKNOWN = fabric_base.HEALTH_UNKNOWN

# The health last notified of each leased device, by device uuid: the
# sync sees the same unhealthy leased device every interval, its users
# need to hear once.
_LEASED_HEALTH = {}
# The reason last notified of each device the fabric could not read, by
# device uuid: notified once per reason, not every interval.
_UNKNOWN = {}


def new_summary():
    return {'added': [], 'unpooled': [], 'gone': [], 'faulty': [],
            'bound_outside': [], 'unavailable': [], 'unknown': [],
            'not_poolable': [], 'leased_warnings': []}


def describe(name, summary):
    parts = []
    for key, text in (('added', 'added %d device(s) (%s)'),
                      ('gone', '%d vanished, now maintenance (%s)'),
                      ('faulty', '%d unhealthy, now faulty (%s)'),
                      ('bound_outside', '%d bound outside composable, now '
                                        'maintenance (%s)'),
                      ('unavailable', '%d out of service on the fabric, '
                                      'now maintenance (%s)'),
                      ('unpooled', '%d found with no pool of their kind '
                                   '(%s)'),
                      ('not_poolable', '%d not poolable (%s)'),
                      ('unknown', '%d could not be read this round, left '
                                  'as they are (%s)')):
        if summary[key]:
            parts.append(text % (len(summary[key]),
                                 ', '.join(summary[key])))
    if not parts:
        return None
    return 'Fabric %s: %s' % (name, '; '.join(parts))


def _reachable(hosts):
    """A driver's ``hosts`` as stored: None (every host) or the sorted
    names, each once."""
    if hosts is None:
        return None
    return sorted({str(name) for name in hosts if name})


def facts(item):
    """The columns a discovered device's report gives its row."""
    health = item.get('health')
    if health not in fabric_base.HEALTHS:
        health = HEALTH_UNKNOWN
    reason = None
    if health != fabric_base.HEALTH_OK:
        reason = (item.get('health_reason') or
                  ('the fabric reports its health as %s' % health
                   if health != HEALTH_UNKNOWN
                   else 'the fabric does not report its health'))
    serial = item.get('serial')
    return {'serial': str(serial)[:255] if serial else None,
            'health': health, 'health_reason': reason,
            'reachable_hosts': _reachable(item.get('hosts'))}


# Fabrics whose discovery is still running in a thread the sync stopped
# waiting for: not asked again until it ends, so a hung fabric manager
# holds one thread, not one more every interval.
_RUNNING = set()
_RUNNING_LOCK = threading.Lock()


def discover(fabric_row, timeout):
    """The driver's discover(), at most ``timeout`` seconds (a driver
    stuck on the fabric must not hold the loop)."""
    driver = fabric_drivers.get_driver(fabric_row['driver'])
    key = fabric_row['uuid']
    with _RUNNING_LOCK:
        if key in _RUNNING:
            raise exception.DriverError(
                reason='the previous discovery on fabric %s has not ended '
                       'yet' % fabric_row['name'])
        _RUNNING.add(key)

    def _run():
        try:
            return driver.discover(fabric_row)
        finally:
            with _RUNNING_LOCK:
                _RUNNING.discard(key)

    # None: the driver cannot tell what the fabric holds (not: nothing).
    return utils.call_with_timeout(
        _run, timeout, 'Discovery on fabric %s (driver %s)' % (
            fabric_row['name'], fabric_row['driver']),
        name='fabric-discover')


class FabricSync(object):

    def __init__(self, host=None):
        self.host = host

    def run(self, context=None):
        """Sync every fabric whose driver this conductor has enabled;
        {fabric name: summary}."""
        context = context or composable_context.get_admin_context()
        results = {}
        for fabric in db_api.fabric_list(context):
            if fabric.driver not in CONF.fabric.enabled_drivers:
                continue
            try:
                results[fabric.name] = self.sync(context, fabric)
            except Exception as exc:
                # Driver errors carry no credentials (the drivers' rule);
                # anything else is logged as the conductor's own failure.
                if isinstance(exc, exception.ComposableException):
                    LOG.warning('Fabric %(name)s: inventory sync failed: '
                                '%(reason)s',
                                {'name': fabric.name, 'reason': exc.message})
                else:
                    LOG.exception('Fabric %s: inventory sync failed',
                                  fabric.name)
        return results

    def sync(self, context, fabric):
        summary = new_summary()
        driver = fabric_drivers.get_driver(fabric.driver)
        if getattr(driver, 'discover_memory', None) is not None:
            memory = cxl_sync.sync_memory(context, fabric, driver)
            summary['memory'] = memory
            if memory and any(m['change'] for m in memory) and \
                    placement_claims.enabled():
                # The pool's total followed its devices.
                placement_claims.sync_pool_now(memory[0]['pool_uuid'])
        pools = [p for p in db_api.pool_list(
            context, filters={'fabric_id': fabric.id})
            # The virtual functions of an SR-IOV pool are made on its
            # host, not composed by the fabric: nothing to discover.
            if p.kind in DEVICE_POOL_KINDS and p.sriov_host_id is None]
        fabric_row = host_facts.fabric_row_with_hosts(context, fabric)
        found = discover(fabric_row, CONF.fabric.operation_timeout)
        if found is None:
            # A driver that cannot list the fabric (the fake one without
            # a simulated inventory, as in composable-all's demo) says
            # nothing about the devices registered on it: leaving them
            # alone, not taking them all out of service.
            LOG.debug('Fabric %s: its driver reports no inventory; '
                      'nothing to sync', fabric.name)
            return summary
        pool_uuids = {pool.id: pool.uuid for pool in pools}
        rows = {}
        for pool in pools:
            for row in db_api.device_list(context,
                                          filters={'pool_id': pool.id}):
                rows[row.address] = row
        changed_pools = set()
        seen = set()
        for item in found:
            address = item.get('address')
            if not address or address in seen:
                continue
            seen.add(address)
            row = rows.get(address)
            if item.get('error'):
                # Unknown this round: neither new nor gone.
                summary['unknown'].append('%s: %s' % (address,
                                                      item['error']))
                if row is not None:
                    self._unknown(context, row, item['error'])
                    self._store_facts(context, row, {
                        'health': HEALTH_UNKNOWN,
                        'health_reason': 'could not be read from the '
                                         'fabric: %s' % item['error']})
                continue
            if row is not None:
                _UNKNOWN.pop(row.uuid, None)
                self._store_facts(context, row, facts(item))
            if row is None and item.get('not_poolable'):
                summary['not_poolable'].append('%s: %s' % (
                    address, item['not_poolable']))
                continue
            if row is None:
                pool = self._pool_for(pools, item.get('kind'))
                if pool is None:
                    summary['unpooled'].append(address)
                    continue
                self._add(context, pool, item, summary)
                changed_pools.add(pool.uuid)
            elif self._check(context, row, item, summary):
                changed_pools.add(pool_uuids[row.pool_id])
        for address, row in rows.items():
            if address in seen:
                continue
            self._store_facts(context, row, {
                'health': HEALTH_UNKNOWN,
                'health_reason': 'no longer reported by the fabric'})
            if row.lease_id is not None:
                summary['leased_warnings'].append(
                    'device %s (%s) of a lease is no longer reported by '
                    'the fabric' % (row.uuid, address))
                self._leased_health(context, row, HEALTH_ABSENT,
                                    'no longer reported by the fabric')
            elif row.state != states.DEVICE_AVAILABLE:
                # Out of service already (an operator's maintenance, or
                # faulty): its state says more than "gone".
                continue
            elif self._set_state(context, row, states.DEVICE_MAINTENANCE,
                                 health=HEALTH_ABSENT,
                                 reason='no longer reported by the fabric; '
                                        'taken out of service'):
                summary['gone'].append(address)
                changed_pools.add(pool_uuids[row.pool_id])
        text = describe(fabric.name, summary)
        if text:
            LOG.info('%s', text)
        for warning in summary['leased_warnings']:
            LOG.warning('Fabric %(name)s: %(warning)s; its state follows '
                        'its lease, so it is left as it is',
                        {'name': fabric.name, 'warning': warning})
        if changed_pools and placement_claims.enabled():
            for pool_uuid in sorted(changed_pools):
                placement_claims.sync_pool_now(pool_uuid)
        return summary

    @staticmethod
    def _store_facts(context, row, values):
        """Write what changed of the device's facts (most rounds:
        nothing, and then no write)."""
        changed = {key: value for key, value in values.items()
                   if getattr(row, key) != value}
        if changed:
            db_api.device_set_facts(context, row.id, changed)

    @staticmethod
    def _pool_for(pools, kind):
        pool_kind, resource_class = resource_classes.for_device_kind(
            kind or 'pci')
        matching = [p for p in pools if p.kind == pool_kind and
                    p.resource_class == resource_class]
        return matching[0] if len(matching) == 1 else None

    @staticmethod
    def _out_of_service(item):
        """Why the fabric cannot give the device out now, or None."""
        return item.get('unavailable') or item.get('not_poolable')

    @staticmethod
    def _unknown(context, row, reason):
        if _UNKNOWN.get(row.uuid) == reason:
            return
        _UNKNOWN[row.uuid] = reason
        notifications.device_health(
            context, row, health=HEALTH_UNKNOWN,
            reason='could not be read from the fabric: %s; left as it is '
                   'this round' % reason)

    def _state_for(self, item):
        if item.get('health') == fabric_base.HEALTH_CRITICAL:
            return states.DEVICE_FAULTY
        if self._out_of_service(item) or item.get('bound_to'):
            return states.DEVICE_MAINTENANCE
        return states.DEVICE_AVAILABLE

    def _add(self, context, pool, item, summary):
        values = dict(facts(item), pool_id=pool.id,
                      address=item['address'],
                      kind=item.get('kind') or 'pci',
                      vendor_id=item.get('vendor_id'),
                      product_id=item.get('product_id'),
                      model=item.get('model'),
                      state=self._state_for(item))
        try:
            device = db_api.device_create(context, values)
        except exception.Conflict:
            # Another conductor added it first.
            return
        summary['added'].append(item['address'])
        reason = None
        if values['state'] == states.DEVICE_FAULTY:
            summary['faulty'].append(item['address'])
            reason = 'found unhealthy on the fabric; added as faulty'
        elif self._out_of_service(item):
            summary['unavailable'].append(item['address'])
            reason = ('found out of service on the fabric (%s); added in '
                      'maintenance' % self._out_of_service(item))
        elif values['state'] == states.DEVICE_MAINTENANCE:
            summary['bound_outside'].append(item['address'])
            reason = ('found bound to host %s outside composable; added in '
                      'maintenance' % item.get('bound_to'))
        if reason is not None:
            notifications.device_health(
                context, db_api.device_get(context, device.uuid),
                health=item.get('health'), reason=reason)

    def _check(self, context, row, item, summary):
        """Compare one known device; True when its row changed."""
        unhealthy = item.get('health') == fabric_base.HEALTH_CRITICAL
        bound_to = item.get('bound_to')
        if row.lease_id is not None:
            try:
                lease = db_api.lease_get_by_id(context, row.lease_id)
            except exception.NotFound:
                # Released and purged since the rows were read: the next
                # run sees the device free.
                return False
            host = lease.host.name if lease.host is not None else None
            if unhealthy:
                summary['leased_warnings'].append(
                    'device %s (%s) of lease %s is unhealthy' %
                    (row.uuid, row.address, lease.uuid))
            self._leased_health(
                context, row, item.get('health'),
                'reported unhealthy by the fabric while leased; its state '
                'follows its lease' if unhealthy else None,
                lease_uuid=lease.uuid)
            if bound_to and bound_to != host:
                summary['leased_warnings'].append(
                    'device %s (%s) of lease %s is bound to host %s on '
                    'the fabric, not to the lease\'s host %s' %
                    (row.uuid, row.address, lease.uuid, bound_to, host))
            return False
        if row.state != states.DEVICE_AVAILABLE:
            return False
        if unhealthy:
            if self._set_state(context, row, states.DEVICE_FAULTY,
                               health=item.get('health'),
                               reason='reported unhealthy by the fabric; '
                                      'taken out of service'):
                summary['faulty'].append(row.address)
                return True
        elif self._out_of_service(item):
            if self._set_state(context, row, states.DEVICE_MAINTENANCE,
                               health=item.get('health'),
                               reason='out of service on the fabric (%s); '
                                      'taken out of service' %
                               self._out_of_service(item)):
                summary['unavailable'].append(row.address)
                return True
        elif bound_to:
            if self._set_state(context, row, states.DEVICE_MAINTENANCE,
                               health=item.get('health'),
                               reason='bound to host %s outside composable; '
                                      'taken out of service' % bound_to):
                summary['bound_outside'].append(row.address)
                return True
        return False

    @staticmethod
    def _leased_health(context, row, health, reason, lease_uuid=None):
        """Notify the health of a leased device when it is not the one
        last notified; a healthy device never notified is not news."""
        last = _LEASED_HEALTH.get(row.uuid, fabric_base.HEALTH_OK)
        health = health or fabric_base.HEALTH_OK
        if health == last:
            return
        _LEASED_HEALTH[row.uuid] = health
        if health == fabric_base.HEALTH_OK:
            _LEASED_HEALTH.pop(row.uuid, None)
            reason = 'reported healthy by the fabric again'
        notifications.device_health(context, row, health=health,
                                    reason=reason, lease_uuid=lease_uuid)

    @staticmethod
    def _set_state(context, row, state, health=None, reason=None):
        """Take an unleased device out of service; False when a lease
        took it meanwhile (the allocator won: its state follows the
        lease)."""
        if row.state == state:
            return False
        try:
            device = db_api.device_update(context, row.uuid,
                                          {'state': state})
        except (exception.DeviceInLease, states.StateChangeRefused):
            # A lease took it, or its state moved on meanwhile.
            return False
        except exception.PoolCapacityInUse as exc:
            # Not a lease that won: the pool's leases need the device
            # (its capacity would drop below what they hold).
            LOG.warning('Device %(dev)s stays %(state)s: %(reason)s',
                        {'dev': row.uuid, 'state': row.state,
                         'reason': exc.message})
            return False
        notifications.device_health(context, device,
                                    previous_state=row.state, health=health,
                                    reason=reason)
        return True
