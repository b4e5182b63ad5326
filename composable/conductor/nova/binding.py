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

"""Binding an instance's leases to the host it starts on, for the libvirt
hook (composable/hooks/libvirt.py, through the compute node's agent).

An instance's leases are the leases whose ``instance_uuid`` is the
instance: lease-first leases (bound through the API, or linked to the
instance from the ``composable_lease`` scheduler hint), and flavor-driven
leases, which composable.conductor.nova.flavor_leases creates from the
instance's Placement allocation when the instance is first prepared.

prepare (domain start)
    Every lease of the instance is bound to the host, by the ordinary bind
    path (ConductorManager.bind_lease: the lease's reservation, the state
    machine, LeaseFlows.bind). A lease still bound from an earlier life of
    the domain (a stop the hook did not see, another host) is unbound
    first. Waits, at most ``wait`` seconds, until every lease is bound or
    has failed.
release (domain stop)
    Every lease of the instance bound to the host is unbound (teardown of
    LeaseFlows, in its safe order) back to ``reserved``; unlike an unbind
    through the API, the lease stays the instance's, for its next start.

Answers are plain dicts (they cross RPC): ``{"ok": bool, "message": str,
"leases": [lease summary, ...]}``.
"""

import inspect
import time

from oslo_log import log as logging

from composable.agent import rpcapi as agent_rpcapi
from composable.common import context as composable_context
from composable.common import exception
from composable.common import rpc
from composable.common import states
from composable.conductor.nova import actions as nova_actions
from composable.conductor.nova import flavor_leases
from composable.conductor.placement import claims as placement_claims
from composable.conductor import task as lease_task
from composable.db import api as db_api

LOG = logging.getLogger(__name__)

# Leases that belong to their instance: everything but the ones that are
# gone or going.
LIVE_STATES = sorted(states.ALL_STATES - {states.RELEASING, states.RELEASED})
# Seconds between two looks at leases another worker is busy with.
POLL_INTERVAL = 0.2

ACTION_PREPARE = 'bind'
# The domain stopped: unbound, still the instance's (see flows).
ACTION_RELEASE = nova_actions.STOP


def lease_summary(lease):
    """What the agent needs to know of one lease (no credentials)."""
    return {'uuid': lease.uuid, 'name': lease.name, 'status': lease.status,
            'attach_mode': lease.attach_mode,
            'host': lease.host.name if lease.host is not None else None,
            'instance_uuid': lease.instance_uuid,
            'memory_mb': lease.memory_mb,
            'device_count': len(lease.devices or []),
            'devices': [d.uuid for d in lease.devices or []],
            'extents': [e.uuid for e in lease.extents or []],
            'fault': lease.fault}


def _placement_enabled():
    return placement_claims.enabled()


class InstanceBinding(object):
    """prepare/release for one ConductorManager."""

    def __init__(self, manager):
        self.manager = manager

    @property
    def flows(self):
        return self.manager.flows

    @staticmethod
    def _admin():
        return composable_context.get_admin_context()

    def _host(self, host_name):
        try:
            return db_api.host_get(self._admin(), host_name)
        except exception.HostNotFound:
            raise exception.Invalid(
                reason='host %s is not registered in composable; an '
                       'administrator registers it with openstack '
                       'composable host create (its name must be the Nova '
                       'compute host name, [DEFAULT]host of its agent)' %
                host_name)

    def _leases(self, instance_uuid):
        return db_api.lease_list(self._admin(),
                                 filters={'instance_uuid': instance_uuid,
                                          'status': LIVE_STATES})

    # ------------------------------------------------------------ cache

    def instance_leases(self, host_name):
        """{instance uuid: [lease uuid, ...]} of every lease linked to an
        instance that could be meant for the host: its pools are on the
        host's fabric, or it has none (requested, alloc_failed), and then
        the start of its instance is where the user learns why it is not
        there."""
        host = self._host(host_name)
        rows = db_api.instance_lease_uuids(self._admin(), host.fabric_id,
                                           LIVE_STATES)
        mapping = {}
        for instance_uuid, lease_uuid in rows:
            mapping.setdefault(instance_uuid, []).append(lease_uuid)
        return mapping

    def instance_status(self, instance_uuid, host_name=None):
        return [lease_summary(lease)
                for lease in self._leases(instance_uuid)]

    def host_memory_leases(self, host_name):
        """The memory leases bound to the host in host mode, each as its
        summary with ``memory``: what the host's agent answered when it
        attached each extent ({extent uuid: {'device', 'swap_device',
        ...}}), so that an agent that restarted learns them again."""
        host = self._host(host_name)
        ctx = self._admin()
        found = []
        for lease in db_api.lease_list(ctx, filters={
                'host_id': host.id, 'kind': 'memory',
                'status': states.BOUND,
                'attach_mode': states.ATTACH_HOST}):
            memory = {}
            for row in db_api.attachment_list(
                    ctx, lease.id, states_=states.LIVE_ATTACHMENT_STATES):
                if row.host_id == host.id:
                    memory.update((row.details or {}).get('memory') or {})
            found.append(dict(lease_summary(lease), memory=memory))
        return found

    # ------------------------------------------------------------ prepare

    def _flavor_leases(self, instance_uuid, host_name, project_id,
                       user_id=None, extra_specs=None):
        if not _placement_enabled():
            LOG.warning('Instance %s asks for composable resources in its '
                        'flavor, but this conductor cannot make leases from '
                        'a flavor (no Placement credentials in '
                        '[placement]); only leases already linked to the '
                        'instance are bound', instance_uuid)
            return None
        ensure = flavor_leases.ensure_instance_leases
        kwargs = {}
        # The flavor's composable:* extra specs (attach mode...), when the
        # function takes them: the lease may be made here, before Nova's
        # notification brings them.
        params = inspect.signature(ensure).parameters
        if 'extra_specs' in params and extra_specs:
            kwargs['extra_specs'] = extra_specs
        if 'user_id' in params and user_id:
            kwargs['user_id'] = user_id
        try:
            made = ensure(self._admin(), instance_uuid, host_name,
                          project_id, **kwargs)
        except exception.ComposableException as exc:
            return exc.message
        except Exception as exc:
            LOG.exception('Creating the leases of instance %s from its '
                          'flavor failed', instance_uuid)
            return ('creating its leases from its flavor failed (%s); see '
                    'the conductor log' % type(exc).__name__)
        LOG.info('Instance %(instance)s has flavor-driven lease(s) '
                 '%(leases)s', {'instance': instance_uuid,
                                'leases': made})
        return None

    def prepare(self, instance_uuid, host_name, project_id=None,
                flavor_resources=False, wait=0, incoming=False,
                leases=None, user_id=None, extra_specs=None):
        """``leases``: only these (lease uuids), the others as they are.
        ``extra_specs``: the flavor's composable:* ones."""
        host = self._host(host_name)
        only = set(leases) if leases else None
        problems = {}
        if flavor_resources:
            problem = self._flavor_leases(instance_uuid, host_name,
                                          project_id, user_id=user_id,
                                          extra_specs=extra_specs)
            if problem:
                problems['flavor'] = problem
        asked = set()     # leases this call asked to bind
        unbinding = set()  # leases this call asked to unbind first
        notes = {}
        deadline = time.monotonic() + max(0, wait or 0)
        while True:
            busy = False
            for lease in self._leases(instance_uuid):
                if lease.uuid in problems or (
                        only is not None and lease.uuid not in only):
                    continue
                outcome = self._prepare_one(lease, host, instance_uuid,
                                            asked, unbinding, incoming)
                if outcome is None:
                    busy = True
                elif outcome is not True:
                    kind, text = outcome
                    if kind == 'note':
                        notes[lease.uuid] = text
                    else:
                        problems[lease.uuid] = text
            if not busy or time.monotonic() >= deadline:
                break
            time.sleep(POLL_INTERVAL)
        leases = self._leases(instance_uuid)
        late = [lease.uuid for lease in leases
                if lease.uuid not in problems and lease.uuid not in notes
                and (only is None or lease.uuid in only)
                and not (lease.status == states.BOUND and
                         lease.host_id == host.id)]
        for uuid in late:
            problems[uuid] = 'not bound after %d s' % (wait or 0)
        message = '; '.join('lease %s: %s' % item if item[0] != 'flavor'
                            else item[1] for item in sorted(
                                problems.items()))
        if notes:
            message = '; '.join(filter(None, [message] + [
                'lease %s: %s' % item for item in sorted(notes.items())]))
        return {'ok': not problems, 'message': message,
                'leases': [lease_summary(lease) for lease in leases]}

    def _prepare_one(self, lease, host, instance_uuid, asked, unbinding,
                     incoming):
        """One step for one lease: True (bound here), None (wait), or
        ('problem' | 'note', text)."""
        status = lease.status
        here = lease.host_id == host.id
        if status == states.BOUND and lease.uuid in asked and here:
            return True
        if status in states.TRANSIENT_STATES or lease.reservation:
            return None
        if status == states.BOUND:
            if incoming and not here:
                return ('note', 'stays bound to %s, where the instance '
                                'comes from by live migration; it is bound '
                                'to this host at the next start of the '
                                'instance' % lease.host.name)
            if lease.uuid in unbinding:
                return ('problem', 'was bound again by someone else while '
                                   'this host prepared the instance')
            # Bound by an earlier life of the domain whose stop was not
            # seen (libvirtd or the agent was down), or on another host
            # (the instance moved): what it set up there is gone or stale.
            LOG.info('Lease %(lease)s of instance %(instance)s is still '
                     'bound to %(host)s; unbinding it before binding it to '
                     '%(here)s', {'lease': lease.uuid,
                                  'instance': instance_uuid,
                                  'host': lease.host.name
                                  if lease.host else None,
                                  'here': host.name})
            if self._start_unbind(lease, 'instance %s starts on %s' % (
                    instance_uuid, host.name)):
                unbinding.add(lease.uuid)
            return None
        if status in (states.RESERVED, states.BIND_FAILED):
            if lease.uuid in asked:
                return ('problem', lease.fault or 'the bind failed; see '
                                                  'the lease\'s actions')
            asked.add(lease.uuid)
            try:
                rpc.call_unwrapped(self.manager.bind_lease, self._admin(),
                                   lease.uuid, host.uuid,
                                   instance_uuid=instance_uuid)
            except exception.LeaseLocked:
                asked.discard(lease.uuid)
                return None
            except exception.InvalidState:
                # It moved since it was read: look again.
                asked.discard(lease.uuid)
                return None
            except exception.ComposableException as exc:
                return ('problem', exc.message)
            return None
        if status == states.REQUESTED:
            return ('problem', 'it starts only at %s (start_at)' %
                    lease.start_at)
        if status == states.ALLOC_FAILED:
            return ('problem', 'it holds no resources (%s); delete it and '
                               'create a new lease' % (lease.fault or
                                                       states.ALLOC_FAILED))
        return ('problem', 'it is %s (%s); an administrator must unbind or '
                           'delete it' % (status, lease.fault or 'no fault'))

    # ------------------------------------------------------------ release

    def _start_unbind(self, lease, why, fault=None):
        """Move the lease to unbinding and start the teardown in a worker.
        False when someone else holds or moved the lease (look again)."""
        manager = self.manager
        admin = self._admin()
        try:
            with lease_task.acquire(admin, lease.id, manager.host, wait=0,
                                    lease_ident=lease.uuid) as task:
                task.process_event(states.UNBIND, request='unbind',
                                   action=ACTION_RELEASE, message=why)
                task.spawn_after(manager.spawn, self._unbind, task, fault)
        except (exception.LeaseLocked, exception.InvalidState):
            return False
        return True

    def _unbind(self, task, fault=None):
        """LeaseFlows' unbind of the task's lease, the lease staying
        linked to its instance; ``fault``: what the lease is told once
        unbound (why its instance stopped)."""
        target = self.flows.unbind(
            task, action=ACTION_RELEASE, keep_consumer=True,
            advice=' It is unbound again at the next stop or start of its '
                   'instance, or unbind or delete it.')
        if fault and target == states.RESERVED:
            task.set_fault(fault)
        return target

    def release(self, instance_uuid, host_name, wait=0, leases=None,
                fault=None):
        host = self._host(host_name)
        only = set(leases) if leases else None
        asked = set()
        problems = {}
        deadline = time.monotonic() + max(0, wait or 0)
        while True:
            busy = False
            for lease in self._leases(instance_uuid):
                if only is not None and lease.uuid not in only:
                    continue
                if lease.host_id != host.id or lease.uuid in problems:
                    continue
                if (lease.status in states.TRANSIENT_STATES or
                        lease.reservation):
                    busy = True
                    continue
                if lease.status not in (states.BOUND, states.BIND_FAILED):
                    continue
                if lease.uuid in asked:
                    problems[lease.uuid] = lease.fault or 'still %s' % \
                        lease.status
                    continue
                asked.add(lease.uuid)
                self._start_unbind(
                    lease, 'instance %s stopped on %s' % (instance_uuid,
                                                          host.name),
                    fault=fault)
                busy = True
            if not busy or time.monotonic() >= deadline:
                break
            time.sleep(POLL_INTERVAL)
        leases = self._leases(instance_uuid)
        for lease in leases:
            if (lease.uuid in asked and lease.uuid not in problems and
                    lease.host_id == host.id):
                problems[lease.uuid] = lease.fault or (
                    'still %s after %d s' % (lease.status, wait or 0))
        message = '; '.join('lease %s: %s' % item
                            for item in sorted(problems.items()))
        return {'ok': not problems, 'message': message,
                'leases': [lease_summary(lease) for lease in leases]}


def notify_agents(context, instance_uuid, lease_uuids=None):
    """Tell every compute node's agent that the leases of an instance
    changed (a lease was linked to it or let go of it), so that its next
    start finds them. ``lease_uuids`` is read from the database when not
    given. Best effort: the agents also refresh on their own."""
    if lease_uuids is None:
        lease_uuids = [lease.uuid for lease in db_api.lease_list(
            composable_context.get_admin_context(),
            filters={'instance_uuid': instance_uuid,
                     'status': LIVE_STATES})]
    try:
        agent_rpcapi.AgentAPI().instance_leases_changed(
            context, instance_uuid, lease_uuids)
    except Exception:
        LOG.exception('Could not tell the agents about the leases of '
                      'instance %s', instance_uuid)
