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

"""What a compute agent did on its own to the devices of leases bound on
its host, noted on those leases.

After its host restarted, a compute agent binds the functions of the
devices it holds to vfio-pci again (the fabric kept them composed; the
kernel enumerated them with no driver override) and reports each device
(ConductorAPI.report_devices_restored, a cast). Each lease gets one
``restore`` action: ``success`` when all its reported devices are on
vfio-pci again, else ``error`` and the lease's fault says which device
could not be and why (the lease stays bound: its instance may still use
the others; unbinding it removes them all). Reports about leases that
are not bound on the reporting host, or about devices that are not the
lease's, are dropped: an agent writes only the history of leases it
serves.

After its host restarted, a compute agent also makes the CXL memory
regions of leases bound there again (the kernel forgot them; the device
kept its memory) and reports them
(ConductorAPI.report_memory_restored): the lease gets a ``restore``
action, and its attachment the NUMA node each extent is on now, which
may differ from the bind's.
"""

import collections

from oslo_log import log as logging
from oslo_utils import uuidutils

from composable.db import api as db_api

LOG = logging.getLogger(__name__)

#: The action a report is noted as in the lease's action log.
ACTION_RESTORE = 'restore'
#: Most results one report may carry (a host holds few devices).
MAX_RESULTS = 1000
#: Longest message kept from an agent's report.
MAX_MESSAGE = 1000


class BadResult(ValueError):
    pass


def parse_result(result):
    """The result as used here; BadResult when it is not {'lease_uuid',
    'device_uuid': UUID str, 'address': str or None, 'ok': bool,
    'message': str}."""
    if not isinstance(result, dict):
        raise BadResult('a result is a mapping, not %s' %
                        type(result).__name__)
    missing = {'lease_uuid', 'device_uuid', 'ok'} - set(result)
    if missing:
        raise BadResult('missing %s' % ', '.join(sorted(missing)))
    parsed = {}
    for key in ('lease_uuid', 'device_uuid'):
        value = result[key]
        if not isinstance(value, str) or not uuidutils.is_uuid_like(value):
            raise BadResult('%s is not a UUID: %r' % (key, value))
        parsed[key] = value.lower()
    if not isinstance(result['ok'], bool):
        raise BadResult('ok is not true or false: %r' % (result['ok'],))
    parsed['ok'] = result['ok']
    address = result.get('address')
    parsed['address'] = str(address)[:32] if address else None
    message = result.get('message')
    parsed['message'] = (str(message)[:MAX_MESSAGE] if message
                         else None)
    return parsed


def _lease_message(host, results):
    """The action's message and the fault (None when all went well)."""
    failed = [r for r in results if not r['ok']]
    if not failed:
        return ('After host %s restarted, its agent bound %s to vfio-pci '
                'again.' % (host, ', '.join(
                    'device %s (%s)' % (r['device_uuid'],
                                        r['address'] or 'no address')
                    for r in results)), None)
    fault = ('After host %s restarted, its agent could not bind these '
             'devices of the lease to vfio-pci again, so its instance '
             'cannot use them: %s. Unbind the lease (the host then removes '
             'what is left of them) and bind it again.' % (host, '; '.join(
                 'device %s at %s: %s' % (
                     r['device_uuid'], r['address'] or 'no address',
                     r['message'] or 'no reason given')
                 for r in failed)))
    return fault, fault


def _by_lease(host, results, parse, what):
    """The well-formed ``results`` of a ``what`` report (``parse`` reads
    one, raising BadResult) grouped by lease uuid, in report order; the
    malformed ones are dropped and logged."""
    by_lease = collections.OrderedDict()
    if not isinstance(results, (list, tuple)):
        LOG.debug('%(what)s report of host %(host)s is not a list '
                  '(%(type)s); dropped', {'what': what, 'host': host,
                                          'type': type(results).__name__})
        return by_lease
    for result in list(results)[:MAX_RESULTS]:
        try:
            parsed = parse(result)
        except BadResult as exc:
            LOG.debug('Dropped a %(what)s report from host %(host)s: '
                      '%(why)s', {'what': what.lower(), 'host': host,
                                  'why': exc})
            continue
        by_lease.setdefault(parsed['lease_uuid'], []).append(parsed)
    return by_lease


def record_restored(context, host, results):
    """Note the ``results`` the agent of ``host`` reported on the leases
    they name; the uuids of the leases noted. Nothing raises: a report is
    a cast, nobody waits for an error."""
    by_lease = _by_lease(host, results, parse_result, 'Device')
    if not by_lease:
        return []
    bound = db_api.bound_lease_devices(context, host, list(by_lease))
    noted = []
    for lease_uuid, lease_results in by_lease.items():
        if lease_uuid not in bound:
            LOG.debug('Dropped the device report of lease %(lease)s from '
                      'host %(host)s: unknown, or not bound on that host',
                      {'lease': lease_uuid, 'host': host})
            continue
        lease_id, devices = bound[lease_uuid]
        mine = [r for r in lease_results if r['device_uuid'] in devices]
        if len(mine) != len(lease_results):
            LOG.debug('Dropped the report of device(s) %(devs)s from host '
                      '%(host)s: not devices of lease %(lease)s',
                      {'devs': ', '.join(sorted(
                          r['device_uuid'] for r in lease_results
                          if r['device_uuid'] not in devices)),
                       'host': host, 'lease': lease_uuid})
        if not mine:
            continue
        message, fault = _lease_message(host, mine)
        if not db_api.lease_host_event(
                context, lease_id, host, ACTION_RESTORE,
                db_api.ACTION_ERROR if fault else db_api.ACTION_SUCCESS,
                message, fault=fault):
            LOG.debug('Lease %(lease)s left host %(host)s before its '
                      'device report was noted; dropped',
                      {'lease': lease_uuid, 'host': host})
            continue
        if fault:
            LOG.warning('Lease %(lease)s: %(fault)s',
                        {'lease': lease_uuid, 'fault': fault})
        else:
            LOG.info('Lease %(lease)s: %(message)s',
                     {'lease': lease_uuid, 'message': message})
        noted.append(lease_uuid)
    return noted


def parse_memory_result(result):
    """A CXL memory result as used here; BadResult when it is not
    {'lease_uuid': UUID str, 'device': str, 'ok': bool, 'numa_node': int
    or None, 'extents': [extent UUID str, ...], 'message': str}."""
    if not isinstance(result, dict):
        raise BadResult('a result is a mapping, not %s' %
                        type(result).__name__)
    missing = {'lease_uuid', 'device', 'ok'} - set(result)
    if missing:
        raise BadResult('missing %s' % ', '.join(sorted(missing)))
    lease = result['lease_uuid']
    if not isinstance(lease, str) or not uuidutils.is_uuid_like(lease):
        raise BadResult('lease_uuid is not a UUID: %r' % (lease,))
    if not isinstance(result['ok'], bool):
        raise BadResult('ok is not true or false: %r' % (result['ok'],))
    node = result.get('numa_node')
    if node is not None and (isinstance(node, bool) or
                             not isinstance(node, int) or node < 0):
        raise BadResult('numa_node is not a node number: %r' % (node,))
    extents = result.get('extents') or []
    if not isinstance(extents, list) or not all(
            isinstance(e, str) and uuidutils.is_uuid_like(e)
            for e in extents):
        raise BadResult('extents is not a list of UUIDs')
    message = result.get('message')
    return {'lease_uuid': lease.lower(), 'device': str(result['device'])[:64],
            'ok': result['ok'], 'numa_node': node,
            'extents': [e.lower() for e in extents][:MAX_RESULTS],
            'message': str(message)[:MAX_MESSAGE] if message else None}


def _memory_message(host, results):
    failed = [r for r in results if not r['ok']]
    if not failed:
        return ('After host %s restarted, its agent put the CXL memory of '
                'the lease online again: %s.' % (host, ', '.join(
                    'device %s as NUMA node %s' % (r['device'],
                                                   r['numa_node'])
                    for r in results)), None)
    fault = ('After host %s restarted, its agent could not put the CXL '
             'memory of the lease online again: %s. Unbind the lease and '
             'bind it again.' % (host, '; '.join(
                 'device %s: %s' % (r['device'],
                                    r['message'] or 'no reason given')
                 for r in failed)))
    return fault, fault


def record_memory_restored(context, host, results):
    """Note the CXL memory ``results`` the agent of ``host`` reported on
    the leases they name, with each extent's NUMA node now; the uuids of
    the leases noted. Nothing raises (a cast)."""
    by_lease = _by_lease(host, results, parse_memory_result, 'Memory')
    noted = []
    for lease_uuid, lease_results in by_lease.items():
        message, fault = _memory_message(host, lease_results)
        memory = {extent: {'numa_node': r['numa_node']}
                  for r in lease_results if r['ok']
                  for extent in r['extents']}
        if not db_api.lease_host_memory_restored(
                context, lease_uuid, host,
                db_api.ACTION_ERROR if fault else db_api.ACTION_SUCCESS,
                message, memory, fault=fault):
            LOG.debug('Dropped the memory report of lease %(lease)s from '
                      'host %(host)s: unknown, or not bound on that host',
                      {'lease': lease_uuid, 'host': host})
            continue
        (LOG.warning if fault else LOG.info)(
            'Lease %(lease)s: %(message)s',
            {'lease': lease_uuid, 'message': message})
        noted.append(lease_uuid)
    return noted
