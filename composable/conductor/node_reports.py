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

"""What the memory nodes report, checked against the database.

A conductor asks the composable-agent of every enabled memory node for
the state of its tmpfs area (agent RPC ``get_memory_report``: capacity,
usage, and the extent files present) and:

* warns when the tmpfs is smaller than the capacity registered for the
  node (``capacity_mb``): leases could be promised memory the node cannot
  back;
* scrubs orphan extent files: a file whose extent is already scrubbed, or
  unknown to the database, holds memory nobody leases any more (left by
  a memory agent killed in the middle of an export or a scrub, or by a
  database restored from a backup). Scrubbing removes its target too;
* removes orphan targets: the agent also reports the extents its
  exporter serves a target for (``exported_extent_uuids``). A target of
  an extent that is scrubbed, unknown to the database, or placed on
  another node is removed at once: nothing will ever export that extent
  on this node again. A target of an extent the database says is not
  exported (``allocated`` or ``unexported``, left by a bind cut short)
  is removed only by a caller that names its conductor (``host``, the
  reconciler), under the lease's reservation taken without waiting, and
  only while no operation runs on the lease: a bind in progress exports
  an extent before it marks it ``exported``.

Extent rows are created when a lease is allocated, before anything is
exported, and an extent is marked scrubbed (its row deleted once the
lease is released) only after its target and file are gone, so no check
races with a running bind or release.

A node whose agent does not answer is reported and skipped; the next run
asks again. ``check_memory_nodes`` returns what it found, per node.
"""

from oslo_log import log as logging

from composable.agent import rpcapi as agent_rpcapi
from composable.common import states as lease_states
from composable.conductor import flows
from composable.conductor import reservations
from composable.db import api as db_api

LOG = logging.getLogger(__name__)

# The lease action of the repairs made here: the reconciler's
# (reconciler.RECONCILE), which runs this check too.
RECONCILE = 'reconcile'


def _message(exc):
    return getattr(exc, 'message', None) or str(exc) or type(exc).__name__


def _unexport(context, node, agents, extent, result):
    """Ask the node to remove the extent's target; True when done."""
    try:
        agents.unexport_extent(context, node.name, extent)
    except Exception as exc:
        result['problems'].append('could not remove the orphan target of '
                                  'extent %s on %s: %s' %
                                  (extent['uuid'], node.name,
                                   _message(exc)))
        LOG.warning('%s', result['problems'][-1])
        return False
    result['orphan_targets'].append(extent['uuid'])
    return True


def _bare_extent(node, uuid):
    return {'uuid': uuid, 'memory_node': node.name, 'portal': node.portal,
            'transport': node.transport}


def _unexport_unmarked(context, node, agents, lease_id, uuid, host,
                       result):
    """Remove the target of an extent of a lease that the database says
    is not exported, under the lease's reservation."""
    reservation = reservations.try_reserve(context, lease_id, host)
    if reservation is None:
        # An operation runs on the lease: it may be exporting this very
        # extent. The next run looks again.
        return
    with reservations.guard(reservation):
        lease = db_api.lease_get_by_id(context, lease_id)
        if lease.status in lease_states.TRANSIENT_STATES:
            # Left by a conductor that stopped; the takeover resumes it.
            return
        extent = next((e for e in lease.extents if e.uuid == uuid), None)
        if extent is None or extent.export_state in (
                lease_states.EXTENT_EXPORTED, lease_states.EXTENT_SCRUBBED):
            return
        LOG.warning('Memory node %(node)s serves a target for extent '
                    '%(uuid)s of lease %(lease)s, which the database says '
                    'is %(state)s; removing it',
                    {'node': node.name, 'uuid': uuid, 'lease': lease.uuid,
                     'state': extent.export_state})
        if _unexport(context, node, agents,
                     flows.extent_view(lease, extent), result):
            # Said in the lease's log, as the reconciler's own repairs
            # are, before the marks go: whoever sees the lease clean sees
            # why too.
            db_api.action_start(
                context, lease.id, RECONCILE, result=db_api.ACTION_SUCCESS,
                message='Memory node %s still served a target for extent '
                        '%d, which a failed bind left; it was removed.' %
                        (node.name, extent.index))
            # The backing file may hold what the lease wrote: the extent
            # stays to be scrubbed (unexported), with no credentials.
            db_api.extent_transition(context, extent.id,
                                     lease_states.EXTENT_UNEXPORT,
                                     flows.CLEAR_EXPORT)


def _check_targets(context, node, agents, exported, known, skip, host,
                   result):
    for uuid in exported:
        if uuid in skip:
            # Its file is scrubbed below, which removes the target too.
            continue
        state, node_id, lease_id = known.get(uuid, (None, None, None))
        if state == lease_states.EXTENT_EXPORTED and node_id == node.id:
            continue
        if (state is None or state == lease_states.EXTENT_SCRUBBED or
                node_id != node.id):
            LOG.warning('Memory node %(node)s serves a target for extent '
                        '%(uuid)s, which is %(why)s; removing it',
                        {'node': node.name, 'uuid': uuid,
                         'why': ('unknown to the database' if state is None
                                 else 'scrubbed already'
                                 if node_id == node.id else
                                 'placed on another memory node')})
            _unexport(context, node, agents, _bare_extent(node, uuid),
                      result)
        elif host is not None:
            _unexport_unmarked(context, node, agents, lease_id, uuid, host,
                               result)


def check_memory_node(context, node, agents, host=None):
    """Check one memory node; returns a dict: report, orphans (the
    extent uuids scrubbed now), orphan_targets (the extent uuids whose
    target was removed now), problems (strings).

    ``host``: the conductor asking, which may then take lease
    reservations (see the module's doc).
    """
    result = {'report': None, 'orphans': [], 'orphan_targets': [],
              'problems': []}
    try:
        report = agents.get_memory_report(context, node.name)
    except Exception as exc:
        message = getattr(exc, 'message', None) or type(exc).__name__
        result['problems'].append('the composable-agent of memory node %s '
                                  'did not report: %s' % (node.name,
                                                          message))
        LOG.warning('%s', result['problems'][-1])
        return result
    result['report'] = report
    if report.get('exporter_problem'):
        result['problems'].append('the exporter of memory node %s cannot '
                                  'list its targets: %s' %
                                  (node.name, report['exporter_problem']))
        LOG.warning('%s', result['problems'][-1])
    simulated = report.get('simulated')
    files = [] if simulated else report.get('extent_uuids') or []
    exported = report.get('exported_extent_uuids') or []
    known = db_api.extent_states(context, set(files) | set(exported))
    orphan_files = [u for u in files
                    if known.get(u, (lease_states.EXTENT_SCRUBBED,))[0] ==
                    lease_states.EXTENT_SCRUBBED]
    # A simulated node's pretend targets are checked too: removing one
    # touches nothing real.
    _check_targets(context, node, agents, exported, known,
                   set(orphan_files), host, result)
    if simulated:
        return result
    total = report.get('total_mb')
    if total is not None and total < node.capacity_mb:
        result['problems'].append(
            'memory node %s registers capacity_mb %d but its tmpfs at %s '
            'holds only %d MiB; grow [memory_node]tmpfs_size_mb or lower '
            'the capacity' % (node.name, node.capacity_mb,
                              report.get('path'), total))
        LOG.warning('%s', result['problems'][-1])
    for uuid in orphan_files:
        state = known.get(uuid, (None,))[0]
        LOG.warning('Memory node %(node)s has the file of extent %(uuid)s, '
                    'which is %(why)s; scrubbing it',
                    {'node': node.name, 'uuid': uuid,
                     'why': 'scrubbed already' if state else
                     'unknown to the database'})
        extent = {'uuid': uuid, 'memory_node': node.name,
                  'portal': node.portal, 'transport': node.transport}
        try:
            agents.scrub_extent(context, node.name, extent)
        except Exception as exc:
            result['problems'].append('could not scrub orphan extent %s on '
                                      '%s: %s' % (uuid, node.name, exc))
            LOG.warning('%s', result['problems'][-1])
            continue
        result['orphans'].append(uuid)
    return result


def check_memory_nodes(context, agents=None, host=None):
    """Check every enabled memory node; {node name: result}."""
    agents = agents or agent_rpcapi.AgentAPI()
    results = {}
    for node in db_api.memory_node_list(context,
                                        filters={'enabled': True}):
        results[node.name] = check_memory_node(context, node, agents,
                                               host=host)
    return results
