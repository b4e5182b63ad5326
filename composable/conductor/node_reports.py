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
  database restored from a backup). Scrubbing removes its target too.

Extent rows are created when a lease is allocated, before anything is
exported, and an extent is marked scrubbed only after its file is gone,
so neither check races with a running bind or release.

A node whose agent does not answer is reported and skipped; the next run
asks again. ``check_memory_nodes`` returns what it found, per node.
"""

from oslo_log import log as logging

from composable.agent import rpcapi as agent_rpcapi
from composable.db import api as db_api
from composable.db import models

LOG = logging.getLogger(__name__)

SCRUBBED = 'scrubbed'


def _extent_states(context, uuids):
    if not uuids:
        return {}
    with db_api.reader(context) as session:
        rows = session.query(models.MemoryExtent.uuid,
                             models.MemoryExtent.export_state).filter(
            models.MemoryExtent.uuid.in_(list(uuids))).all()
    return {uuid: state for uuid, state in rows}


def check_memory_node(context, node, agents):
    """Check one memory node; returns a dict: report, orphans (the
    extent uuids scrubbed now), problems (strings)."""
    result = {'report': None, 'orphans': [], 'problems': []}
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
    if report.get('simulated'):
        return result
    total = report.get('total_mb')
    if total is not None and total < node.capacity_mb:
        result['problems'].append(
            'memory node %s registers capacity_mb %d but its tmpfs at %s '
            'holds only %d MiB; grow [memory_node]tmpfs_size_mb or lower '
            'the capacity' % (node.name, node.capacity_mb,
                              report.get('path'), total))
        LOG.warning('%s', result['problems'][-1])
    files = report.get('extent_uuids') or []
    states = _extent_states(context, files)
    for uuid in files:
        state = states.get(uuid)
        if state is not None and state != SCRUBBED:
            continue
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


def check_memory_nodes(context, agents=None):
    """Check every enabled memory node; {node name: result}."""
    agents = agents or agent_rpcapi.AgentAPI()
    results = {}
    for node in db_api.memory_node_list(context,
                                        filters={'enabled': True}):
        results[node.name] = check_memory_node(context, node, agents)
    return results
