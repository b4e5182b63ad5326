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

"""Periodic tasks every conductor runs (every ``[conductor]
periodic_interval`` seconds, in a thread of its own):

* take over the work of dead conductors: break the reservations of
  conductors whose heartbeat is older than ``heartbeat_timeout``, then
  resume every lease left in a transient state with no reservation;
* start leases whose ``start_at`` has come;
* expire leases whose ``end_at`` has passed. ``end_at`` changes only
  under the lease's reservation (ConductorManager.update_lease), so an
  extension and the expiry never both happen.

Each lease is handled only under its reservation, taken without waiting
(composable.conductor.task.lease_periodic): when several conductors run
these tasks at the same moment, exactly one of them acts on a given lease
and the others skip it.
"""

from oslo_log import log as logging

from composable.common import states
from composable.common import utils
from composable.conductor.allocator import claims as allocator
from composable.conductor.nova import actions as nova_actions
from composable.conductor.placement import claims as placement_claims
from composable.conductor import task as lease_task
from composable import conf
from composable.db import api as db_api

CONF = conf.CONF
LOG = logging.getLogger(__name__)

# What a lease found in a transient state needs, and the lease action it
# belongs to when no running action says otherwise.
_RESUME = {
    states.ALLOCATING: ('allocate', states.ALLOCATE, 'create'),
    states.BINDING: ('bind', states.BIND, 'bind'),
    states.UNBINDING: ('unbind', states.UNBIND, 'unbind'),
    states.RELEASING: ('release', states.DELETE, 'delete'),
}

# released is terminal: the machine refuses to even start from it.
EXPIRABLE = sorted(s for s in states.RESTING_STATES - {states.RELEASED}
                   if states.check(s, states.EXPIRE))


def running_action(context, lease_id, default):
    """The name of the lease's newest unfinished action, so a resumed flow
    finishes the action the user started."""
    for row in reversed(db_api.action_list(context, lease_id)):
        if row.result == 'running':
            return row.action
    return default


def _due(when):
    return when is None or when <= utils.utcnow()


class PeriodicTasks(object):

    def __init__(self, manager):
        self.manager = manager

    @property
    def host(self):
        return self.manager.host

    def run_all(self, context):
        for task in (self.take_over_dead_conductors, self.start_due_leases,
                     self.expire_leases):
            try:
                task(context)
            except Exception:
                # One failing task must not stop the others, nor the loop.
                LOG.exception('Periodic task %s failed', task.__name__)

    # ------------------------------------------------------------ takeover

    def take_over_dead_conductors(self, context):
        dead = db_api.break_dead_reservations(
            context, CONF.conductor.heartbeat_timeout, caller=self.host)
        if dead:
            LOG.warning('Broke the lease reservations of conductors that '
                        'stopped beating: %s', ', '.join(dead))
        return self.resume_leases(context)

    def _resume_flow(self, method):
        flows = self.manager.flows
        return {'allocate': flows.allocate, 'bind': flows.bind,
                'unbind': flows.unbind, 'release': flows.release}[method]

    @lease_task.lease_periodic(
        'resuming the leases of conductors that stopped',
        filters={'status': sorted(states.TRANSIENT_STATES)})
    def resume_leases(self, task, context):
        lease = task.lease
        if lease.status not in _RESUME:
            return None
        method, event, default_action = _RESUME[lease.status]
        action = running_action(context, lease.id, default_action)
        try:
            task.process_event(event)
        except Exception:
            LOG.exception('Cannot resume lease %s', lease.uuid)
            return None
        LOG.warning('Resuming %(method)s of lease %(lease)s, left in '
                    '%(status)s by a conductor that stopped',
                    {'method': method, 'lease': lease.uuid,
                     'status': lease.status})
        options = {}
        if method == 'unbind':
            options = nova_actions.unbind_options(action)
        task.spawn_after(self.manager.spawn, self._resume_flow(method),
                         task, action=action, **options)

    def resume(self, context, lease):
        return self.resume_leases.for_lease(context, lease)

    # ------------------------------------------------------------ start

    def _start_due(self, context, lease):
        return _due(lease.start_at)

    @lease_task.lease_periodic(
        'starting leases whose start time came',
        lister=lambda self, context: db_api.lease_refs_due(
            context, [states.REQUESTED], 'start_at', utils.utcnow()),
        predicate=_start_due)
    def start_due_leases(self, task, context):
        lease = task.lease
        if lease.status != states.REQUESTED or not _due(lease.start_at):
            return None
        task.process_event(states.ALLOCATE, action='start')
        LOG.info('Lease %s reached its start time; allocating it',
                 lease.uuid)
        task.spawn_after(self.manager.spawn, self.manager.flows.allocate,
                         task, action='start')

    def start(self, context, lease):
        return self.start_due_leases.for_lease(context, lease)

    # ------------------------------------------------------------ expire

    def _end_due(self, context, lease):
        """True when the listed lease has ended and needs its
        reservation to be released; one that holds nothing live is
        released here, at once, in one transaction (the conditional
        UPDATE checks end_at again), and needs nothing more."""
        if lease.end_at is None or not _due(lease.end_at):
            return False
        if allocator.release_unbound(context, lease.id, 'expire'):
            LOG.info('Lease %s reached its end time; released', lease.uuid)
            if placement_claims.enabled():
                placement_claims.release(lease.uuid)
            return False
        return True

    @lease_task.lease_periodic(
        'expiring leases whose end time passed',
        lister=lambda self, context: db_api.lease_refs_due(
            context, EXPIRABLE, 'end_at', utils.utcnow()),
        predicate=_end_due)
    def expire_leases(self, task, context):
        # end_at changes only under the reservation (update_lease): what
        # is read here holds until the lease is releasing.
        lease = task.lease
        if (lease.end_at is None or not _due(lease.end_at)
                or lease.status not in EXPIRABLE):
            return None
        task.process_event(states.EXPIRE, action='expire')
        LOG.info('Lease %s reached its end time; releasing it', lease.uuid)
        task.spawn_after(self.manager.spawn, self.manager.flows.release,
                         task, action='expire')

    def expire(self, context, lease):
        return self.expire_leases.for_lease(context, lease)
