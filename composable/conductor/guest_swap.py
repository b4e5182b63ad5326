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

"""How the guest made the disks of a guest-mode lease swap, noted on the
lease once the bind has answered.

With ``[compute_node]guest_swapon = best_effort`` a guest-mode bind (or
grow) is done once the compute agent hot-plugged the disks; the guest's
mkswap and swapon run afterwards, and the agent reports the outcome
(ConductorAPI.report_guest_swap, a cast): {extent uuid: {'guest_device':
'/dev/vdb'} or {'error': message}}. The lease's live attachment keeps
each extent's ``guest_device`` (or ``guest_swap_error``). When the guest
failed, the lease's action log also gets a ``guest_swap`` action in
``error`` and the lease's ``fault`` says which disk and why (the lease
stays bound: the disk is plugged; unbind and bind again, or fix the
guest). A success is what a bind is expected to bring: it is only
logged, and kept in the attachment.

A report for a lease that is no longer bound to that instance on that
host is dropped. One that comes before the bind (or the grow) that
plugged the disks recorded them -- the guest may be quicker than the
conductor's write -- is noted when it can be: the manager tries again a
few times (RETRY_DELAYS).
"""

from oslo_log import log as logging
from oslo_utils import uuidutils

from composable.db import api as db_api

LOG = logging.getLogger(__name__)

#: The action the outcome is noted as in the lease's action log.
ACTION_GUEST_SWAP = 'guest_swap'
#: Most extents one report may carry.
MAX_EXTENTS = 1000
#: Longest message kept from an agent's report.
MAX_MESSAGE = 1000
#: Seconds between the tries of a report that came early (about a
#: minute in all; a bind's write takes milliseconds).
RETRY_DELAYS = (0.2, 0.5, 1, 2, 4, 8, 15, 30)

NOTED = 'noted'
EARLY = db_api.GUEST_SWAP_EARLY
DROPPED = 'dropped'


def parse_outcome(outcome):
    """{extent uuid: {'guest_device': str} or {'error': str}} of the
    well-formed entries of ``outcome``; the others are dropped (logged)."""
    parsed = {}
    if not isinstance(outcome, dict):
        LOG.debug('A guest swap report is not a mapping (%s); dropped',
                  type(outcome).__name__)
        return parsed
    for extent, result in list(outcome.items())[:MAX_EXTENTS]:
        if not isinstance(extent, str) or \
                not uuidutils.is_uuid_like(extent) or \
                not isinstance(result, dict):
            LOG.debug('Dropped a malformed guest swap result for %r',
                      extent)
            continue
        if result.get('error'):
            parsed[extent.lower()] = {
                'error': str(result['error'])[:MAX_MESSAGE]}
        else:
            device = result.get('guest_device')
            parsed[extent.lower()] = {
                'guest_device': str(device)[:64] if device else None}
    return parsed


def _message(instance_uuid, parsed):
    """The action's message and the fault (None when all went well)."""
    failed = sorted((e, r['error']) for e, r in parsed.items()
                    if 'error' in r)
    if not failed:
        return ('The guest of instance %s made the leased disk(s) swap: '
                '%s.' % (instance_uuid, ', '.join(
                    'extent %s as %s' % (e, r['guest_device'] or
                                         'a device it did not name')
                    for e, r in sorted(parsed.items()))), None)
    fault = ('The leased disk(s) are plugged into instance %s, but its '
             'guest did not make these swap, so it does not use them: %s. '
             'Fix the guest (qemu-guest-agent running, a kernel with '
             'virtio_blk and PCI hot-plug, mkswap and swapon), or make the '
             'disks swap in the guest yourself; unbinding and binding the '
             'lease again retries.' % (instance_uuid, '; '.join(
                 'extent %s: %s' % (e, why) for e, why in failed)))
    return fault, fault


def record(context, host, lease_uuid, instance_uuid, outcome):
    """Note the swap-on ``outcome`` the agent of ``host`` reported for
    the lease bound to ``instance_uuid``; NOTED, EARLY (try again later)
    or DROPPED. Nothing raises for a bad report (a cast)."""
    parsed = parse_outcome(outcome)
    if not parsed or not isinstance(lease_uuid, str) or \
            not uuidutils.is_uuid_like(lease_uuid) or \
            not isinstance(instance_uuid, str):
        LOG.debug('Dropped an empty or malformed guest swap report of '
                  'lease %(lease)r from host %(host)s',
                  {'lease': lease_uuid, 'host': host})
        return DROPPED
    message, fault = _message(instance_uuid, parsed)
    memory = {}
    for extent, result in parsed.items():
        if 'error' in result:
            memory[extent] = {'guest_swap_error': result['error'],
                              'guest_device': None}
        else:
            memory[extent] = {'guest_device': result['guest_device'],
                              'guest_swap_error': None}
    noted = db_api.lease_guest_swap_noted(
        context, lease_uuid.lower(), host, instance_uuid,
        ACTION_GUEST_SWAP,
        db_api.ACTION_ERROR if fault else db_api.ACTION_SUCCESS,
        message, memory, fault=fault)
    if noted == EARLY:
        return EARLY
    if not noted:
        LOG.info('Dropped the guest swap report of lease %(lease)s from '
                 'host %(host)s: not bound to instance %(instance)s there '
                 '(any more)', {'lease': lease_uuid, 'host': host,
                                'instance': instance_uuid})
        return DROPPED
    (LOG.warning if fault else LOG.info)(
        'Lease %(lease)s: %(message)s',
        {'lease': lease_uuid, 'message': message})
    return NOTED
