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

"""Keeping the memory devices of a CXL fabric in step with its driver.

With each fabric sync (composable.conductor.fabric_sync), a fabric whose
driver reports memory devices (``discover_memory``: the cxl driver) has
them compared with the memory nodes of its cxl pool, matched by name:

* a device with no memory node joins the pool (exporter cxl, its
  capacity in whole chunks of the pool);
* a memory node whose capacity differs follows the device, unless leases
  hold more than the new capacity (then it is left and the reason
  logged);
* a memory node the driver no longer reports is disabled (the allocator
  gives it out no more); one reported again is enabled again.

A fabric with no cxl pool, or several, is left alone and logged: which
pool a device belongs to is the operator's to say. What each device has
-- capacity, free chunks and the hosts that reach it -- is returned and
logged, so an operator sees the fabric as the driver does.
"""

from oslo_log import log as logging

from composable.common import exception
from composable.common import media
from composable.conductor import host_facts
from composable.db import api as db_api

LOG = logging.getLogger(__name__)


def sync_memory(context, fabric, driver):
    """Sync the memory devices of ``fabric`` (a row); a list of ``{'name',
    'serial', 'capacity_mb', 'free_chunks', 'fabric_free_chunks',
    'chunk_mb', 'hosts', 'change', 'pool_uuid'}`` (``free_chunks``: what
    the pool has not leased; ``fabric_free_chunks``: what the fabric
    manager has not composed, where the back end says, else None), or
    None when the fabric has no single cxl pool."""
    pools = [p for p in db_api.pool_list(
        context, filters={'fabric_id': fabric.id, 'kind': 'memory'})
        if media.is_cxl(p)]
    if len(pools) != 1:
        if pools:
            LOG.warning('Fabric %(fabric)s has %(n)d cxl memory pools '
                        '(%(names)s); its memory devices are not synced, '
                        'register them by hand',
                        {'fabric': fabric.name, 'n': len(pools),
                         'names': ', '.join(p.name for p in pools)})
        return None
    pool = pools[0]
    step = pool.step_size or media.CXL_GRANULE_MB
    nodes = {n.name: n for n in db_api.memory_node_list(
        context, filters={'pool_id': pool.id})}
    report = []
    reported = set()
    fabric_row = host_facts.fabric_row_with_hosts(context, fabric)
    for device in driver.discover_memory(fabric_row):
        name = device['name']
        reported.add(name)
        capacity = device['capacity_mb'] // step * step
        node = nodes.get(name)
        change = None
        if node is None:
            node = db_api.memory_node_create(context, {
                'name': name, 'pool_id': pool.id, 'capacity_mb': capacity,
                'reserved_mb': 0, 'allocated_mb': 0,
                'exporter': media.CXL_EXPORTER, 'transport': 'tcp',
                'enabled': True})
            change = 'added'
        else:
            values = {}
            if node.capacity_mb != capacity:
                values['capacity_mb'] = capacity
            if not node.enabled:
                values['enabled'] = True
            if values:
                try:
                    node = db_api.memory_node_update(context, node.uuid,
                                                     values)
                    change = 'updated'
                except exception.InUse as exc:
                    LOG.warning('Fabric %(fabric)s: CXL memory device '
                                '%(name)s now has %(mb)d MiB; its memory '
                                'node keeps %(kept)d MiB (%(reason)s)',
                                {'fabric': fabric.name, 'name': name,
                                 'mb': capacity, 'kept': node.capacity_mb,
                                 'reason': exc.message})
        free = max(0, node.capacity_mb - node.reserved_mb -
                   node.allocated_mb)
        report.append({'name': name, 'serial': device.get('serial'),
                       'capacity_mb': node.capacity_mb, 'chunk_mb': step,
                       'free_chunks': free // step,
                       'hosts': list(device.get('hosts') or []),
                       # What the fabric manager itself has not given
                       # out (a back end that composes memory says).
                       'fabric_free_chunks': device.get('free_chunks'),
                       'change': change, 'pool_uuid': pool.uuid})
    for name, node in sorted(nodes.items()):
        if name in reported or not node.enabled:
            continue
        db_api.memory_node_update(context, node.uuid, {'enabled': False})
        report.append({'name': name, 'serial': None,
                       'capacity_mb': node.capacity_mb, 'chunk_mb': step,
                       'free_chunks': 0, 'fabric_free_chunks': None,
                       'hosts': [], 'change': 'gone',
                       'pool_uuid': pool.uuid})
    for item in report:
        LOG.info('Fabric %(fabric)s: CXL memory device %(name)s: %(mb)d '
                 'MiB, %(free)d free chunk(s) of %(chunk)d MiB, reached '
                 'from %(hosts)s%(change)s',
                 {'fabric': fabric.name, 'name': item['name'],
                  'mb': item['capacity_mb'], 'free': item['free_chunks'],
                  'chunk': step,
                  'hosts': ', '.join(item['hosts']) or 'no host',
                  'change': ' (%s)' % item['change'] if item['change']
                  else ''})
    return report
