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

"""Nova's versioned notifications: leases end and move with their instance.

The conductor listens (``[nova] notifications_enabled``) on Nova's
versioned notification topic (``versioned_notifications``, exchange
``nova``) in a listener *pool* of its own (``composable``): the pool gets
its own queue, so composable sees every notification without taking any
from Nova's other consumers, and the conductors of one deployment share
it, so each notification is handled by one of them. The threading
executor runs the handlers; the lease flows they start run in the
conductor's own workers, under each lease's reservation, exactly as the
API's requests do.

Which leases: the instance's *flavor-driven* leases (made from Nova's
Placement allocation, see instance_leases.py), and the leases bound to it
(``instance_uuid``). Only leases of the instance's project are touched
(the notification names the project), whatever else names the instance.

=============================== ==========================================
event                           what happens to the instance's leases
=============================== ==========================================
instance.create.end             flavor-driven leases made from Nova's
                                allocation; leases named by the
                                ``composable_lease`` scheduler hint (when
                                Nova can be asked) taken; all bound on the
                                instance's host
instance.resize_finish.end,     follow the instance: unbound from the
instance.resize_confirm.end,    host they are on and bound on the host the
instance.resize_revert.end,     instance runs on now (a cold migration or
instance.live_migration_post_   resize runs the guest on the destination
dest.end, instance.rebuild.end  from resize_finish on; a revert brings it
(evacuation ends with it),      back); an unshelved instance also gets new
instance.unshelve.end           flavor-driven leases (Nova claimed again);
                                after a resize, its revert or confirm,
                                the flavor-driven leases the flavor
                                changed are replaced (below)
instance.shelve_offload.end     flavor-driven leases released (Nova freed
                                their allocation); other leases unbound,
                                still naming the instance
instance.delete.end             flavor-driven leases released (their
                                capacity was Nova's claim, which Nova
                                freed); leases bound to the instance are
                                unbound and stay reserved for their owner
instance.live_migration_pre.    leases that cannot follow a live
start                           migration (passed-through devices,
                                guest-mode memory) get a fault saying why
instance.suspend.start          leases with devices in the guest get a
                                fault saying why the suspend fails
instance.evacuate               logged; the rebuild on the destination
                                moves the leases
anything else                   ignored
=============================== ==========================================

Where the instance runs: the host Nova reports for it when Nova can be
asked (``[nova]`` credentials), else the host in the notification. Asking
Nova makes a late or redelivered move notification harmless: leases go
where the instance *is*, not where an old message says it went.

Resize to a flavor asking other pool resources: from the resize on, Nova
holds the new flavor's capacity under the instance and the old flavor's
under the migration (so that a revert can go back); a revert moves the
old one back to the instance, a confirm drops the migration's. After
each of ``instance.resize_finish.end``, ``instance.resize_revert.end``
and ``instance.resize_confirm.end``, every flavor-driven lease that does
not match the instance's allocation at that moment (another amount, a
pool the instance no longer holds, another attach mode or GPU model) is
released, and once its capacity is back the leases of the flavor the
instance runs with are made (the next generation of the instance's leases
on the pool) and bound where it runs. composable's database never holds
both flavors' leases at once; Placement does, until the confirm. The
confirm normally finds nothing to do: it repairs a lost resize_finish.

Redelivery: every handler is idempotent (a lease already where the
instance is, or already released, is left alone). Every change to a lease
is made under its reservation: through the conductor's own methods
(bind, unbind, delete), or a task (composable.conductor.task) for the
instance a lease names and its fault. A lease busy with another
operation is waited for up to ``[nova] notifications_busy_wait``
seconds, then the message is put back on the queue (requeue) and handled
again later.

Live migration of an instance holding a passed-through fabric device
cannot work (the device is bound to the source host's partition; VFIO
devices do not migrate), nor, for now, of one with guest-mode memory (an
iSCSI disk of the source host's QEMU). A notification cannot stop Nova:
it only tells what Nova is doing. The refusal that prevents it belongs
where Nova can still be stopped: the libvirt hook's ``migrate`` operation
(composable/agent/hook_server.py) refuses such a migration, and
:func:`live_migration_allowed` gives the same answer to any other caller.
Here the lease only gets a fault and the conductor log an error, so the
owner and the operator see why.

Suspend of an instance whose leased devices are in its guest cannot work
either, and no hook can refuse it: libvirt runs no hook before it saves a
domain. libvirt itself refuses to save a guest holding a PCI host device
(the guest goes on running; Nova sets the server to ERROR). The lease gets
a fault that says so and what to do instead
(composable.common.live_migration.cannot_suspend).
"""

import threading
import time

from oslo_db import exception as db_exc
from oslo_log import log as logging
import oslo_messaging as messaging

from composable.common import context as ctx_mod
from composable.common import exception
from composable.common import live_migration
from composable.common import rpc
from composable.common import states
from composable.conductor.allocator import claims as allocator
from composable.conductor.nova import actions as nova_actions
from composable.conductor.nova import binding as instance_binding
from composable.conductor.nova import client as nova_api
from composable.conductor.nova import flavor_leases as instance_leases
from composable.conductor.placement import claims as placement_claims
from composable.conductor.placement import client as pclient
from composable.conductor import task as lease_task
from composable import conf
from composable.db import api as db_api

CONF = conf.CONF
LOG = logging.getLogger(__name__)

CREATE_END = 'instance.create.end'
DELETE_END = 'instance.delete.end'
SHELVE_OFFLOAD_END = 'instance.shelve_offload.end'
UNSHELVE_END = 'instance.unshelve.end'
EVACUATE = 'instance.evacuate'
REBUILD_END = 'instance.rebuild.end'
LIVE_MIGRATION_PRE_START = 'instance.live_migration_pre.start'
SUSPEND_START = 'instance.suspend.start'
RESIZE_FINISH_END = 'instance.resize_finish.end'
RESIZE_CONFIRM_END = 'instance.resize_confirm.end'
RESIZE_REVERT_END = 'instance.resize_revert.end'
# After these the instance's allocation is that of the flavor it runs
# with: its flavor-driven leases are made to match it.
RESIZE_EVENTS = frozenset([RESIZE_FINISH_END, RESIZE_CONFIRM_END,
                           RESIZE_REVERT_END])

# After these the instance runs on (or is back on) a host: its leases
# follow it there.
FOLLOW_EVENTS = frozenset([
    RESIZE_FINISH_END,
    RESIZE_CONFIRM_END,
    RESIZE_REVERT_END,
    'instance.live_migration_post_dest.end',
    REBUILD_END,
    UNSHELVE_END,
])

LEASE_HINT = 'composable_lease'

# Seconds between two looks at a busy lease.
_BUSY_POLL = 0.5


class Requeue(Exception):
    """The notification cannot be handled now; put it back on the queue."""


class _Busy(Exception):
    """A lease is in a transient state or reserved by someone else."""


def payload_data(payload):
    """The fields of a versioned notification payload (the ``nova_object``
    envelope taken off)."""
    if isinstance(payload, dict) and 'nova_object.data' in payload:
        return payload['nova_object.data'] or {}
    return payload or {}


def flavor_extra_specs(data):
    flavor = payload_data(data.get('flavor'))
    return dict(flavor.get('extra_specs') or {})


def _cannot_follow(lease):
    """Why ``lease`` cannot follow a live migration of its instance, or
    None (composable.common.live_migration)."""
    return live_migration.cannot_follow(lease.status, lease.attach_mode,
                                        lease.memory_mb,
                                        len(lease.devices or []))


def live_migration_allowed(context, instance_uuid):
    """(True, None) when the instance may be live migrated as far as
    composable is concerned; (False, reason) when one of its leases holds
    what cannot follow a live migration (see _cannot_follow).

    For the code that can still refuse the migration (the libvirt hook's
    ``migrate`` operation, a scheduler-side check); the notification
    handler can only record why.
    """
    reasons = []
    for lease in db_api.lease_list_for_instance(context, instance_uuid):
        why = _cannot_follow(lease)
        if why:
            reasons.append('%s (lease %s)' % (why, lease.uuid))
    if not reasons:
        return True, None
    return False, live_migration.refusal(instance_uuid, reasons)


def _event_context(ctxt):
    """An admin context carrying Nova's request id, so logs and lease
    actions can be traced back to the Nova request."""
    ctxt = ctxt or {}
    global_id = ctxt.get('global_request_id') or ctxt.get('request_id')
    context = ctx_mod.get_admin_context()
    if global_id:
        context.global_request_id = global_id
    return context


class NovaEventHandler(object):
    """Handles one notification at a time; thread-safe (each lease is
    changed under its reservation)."""

    def __init__(self, manager, placement_client=None):
        self.manager = manager
        self.placement_client = placement_client

    # ------------------------------------------------------------ dispatch

    def handle(self, event_type, payload, ctxt=None):
        """Act on one notification. Raises Requeue when it must be
        handled again later; returns True when it was acted upon, False
        when ignored."""
        data = payload_data(payload)
        instance = data.get('uuid')
        if not instance:
            return False
        if event_type == DELETE_END:
            handler = self._on_delete
        elif event_type == CREATE_END:
            handler = self._on_create
        elif event_type in FOLLOW_EVENTS:
            handler = self._on_follow
        elif event_type == SHELVE_OFFLOAD_END:
            handler = self._on_shelve_offload
        elif event_type == LIVE_MIGRATION_PRE_START:
            handler = self._on_live_migration
        elif event_type == SUSPEND_START:
            handler = self._on_suspend
        elif event_type == EVACUATE:
            LOG.info('Server %s is being evacuated; its leases move when '
                     'it is rebuilt on its new host.', instance)
            return False
        else:
            return False
        context = _event_context(ctxt)
        LOG.debug('Handling %(event)s for server %(inst)s',
                  {'event': event_type, 'inst': instance})
        try:
            handler(context, event_type, instance, data)
        except (pclient.PlacementUnavailable, exception.ServiceUnavailable,
                db_exc.DBConnectionError) as exc:
            LOG.warning('%(event)s for server %(inst)s cannot be handled '
                        'now (%(err)s); it will be handled again.',
                        {'event': event_type, 'inst': instance, 'err': exc})
            raise Requeue()
        return True

    # ------------------------------------------------------------ leases

    def _leases(self, context, instance, project):
        """The instance's live leases that belong to its project (none
        when the notification names no project)."""
        if not project:
            LOG.warning('A notification about server %s names no project; '
                        'its leases are left alone.', instance)
            return []
        leases = db_api.lease_list_for_instance(context, instance)
        foreign = [lease.uuid for lease in leases
                   if lease.project_id != project]
        if foreign:
            LOG.warning('Leases %(leases)s name server %(inst)s but belong '
                        'to another project than the server\'s; Nova\'s '
                        'events do not touch them.',
                        {'leases': ', '.join(foreign), 'inst': instance})
        return [lease for lease in leases if lease.project_id == project]

    def _for_each(self, context, leases, fn, *args):
        """Run fn(context, lease, *args) on every lease, each waiting for
        its lease while busy; Requeue when one stays busy too long."""
        busy = []
        for lease in leases:
            deadline = time.monotonic() + CONF.nova.notifications_busy_wait
            while True:
                try:
                    fn(context, db_api.lease_get_by_id(context, lease.id),
                       *args)
                    break
                except exception.LeaseNotFound:
                    break
                except (_Busy, exception.LeaseLocked,
                        exception.InvalidState):
                    # InvalidState: the lease moved between our look and
                    # the manager's; look again. Always after a pause: a
                    # requeued message comes straight back.
                    time.sleep(_BUSY_POLL)
                    if time.monotonic() >= deadline:
                        busy.append(lease.uuid)
                        break
        if busy:
            LOG.info('Leases %s stay busy; the notification will be '
                     'handled again.', ', '.join(busy))
            raise Requeue()

    def _task(self, context, lease):
        """A task on ``lease``: its reservation, taken without waiting
        (_Busy when someone else holds it: _for_each waits, then
        requeues), and the lease read again under it; _Busy too when the
        lease left the state it was seen in (_for_each looks again)."""
        task = lease_task.try_acquire(context, lease.id, self.manager.host)
        if task is None:
            raise _Busy()
        if task.lease.status != lease.status:
            task.reservation.release()
            raise _Busy()
        return task

    def _ensure_flavor_leases(self, context, instance, host, data,
                              allocations=None):
        if not placement_claims.enabled():
            LOG.debug('Placement is not configured: no flavor-driven '
                      'leases for server %s.', instance)
            return []
        return instance_leases.ensure_instance_leases(
            context, instance, host, data.get('tenant_id'),
            user_id=data.get('user_id'),
            extra_specs=flavor_extra_specs(data),
            client=self.placement_client, allocations=allocations)

    def _release_flavor_lease(self, context, lease, instance, why):
        """Release a flavor-driven lease (its capacity was Nova's claim
        for the instance, which Nova no longer holds). Idempotent."""
        if lease.status in (states.RELEASING, states.RELEASED):
            return
        if lease.status in states.TRANSIENT_STATES:
            raise _Busy()
        LOG.info('Server %(inst)s %(why)s; releasing its lease %(lease)s.',
                 {'inst': instance, 'why': why, 'lease': lease.uuid})
        rpc.call_unwrapped(self.manager.delete_lease, context, lease.uuid)

    def _released(self, context, lease, instance):
        """Busy until ``lease`` is released (for _for_each: its wait, then
        Requeue)."""
        if lease.status != states.RELEASED:
            raise _Busy()

    def _replace_stale_flavor_leases(self, context, instance, host, data):
        """After a resize, its revert or confirm, or an unshelve: the
        flavor-driven leases that do not match the instance's allocation
        are released, then those of the flavor it runs with are made."""
        if not placement_claims.enabled():
            return
        project = data.get('tenant_id')
        allocations = instance_leases.instance_pool_allocations(
            context, instance, client=self.placement_client)
        stale = instance_leases.stale_flavor_leases(
            context, self._leases(context, instance, project), instance,
            allocations, extra_specs=flavor_extra_specs(data))
        self._for_each(context, stale, self._release_flavor_lease, instance,
                       'runs with a flavor asking other pool resources')
        # Their capacity must be back before the new leases claim theirs
        # (the pool may have room for one of them only), including a
        # release left running by an earlier delivery of this message.
        self._for_each(context, [
            lease for lease in self._leases(context, instance, project)
            if instance_leases.is_flavor_lease(lease) and
            lease.status == states.RELEASING], self._released, instance)
        self._ensure_flavor_leases(context, instance, host, data,
                                   allocations=allocations)

    def _where(self, context, instance, data):
        """(host name or None, known) where the instance runs: Nova's word
        when Nova can be asked, else the notification's. ``known`` is
        False when Nova no longer knows the server."""
        if nova_api.configured():
            try:
                return nova_api.server_host(context, instance), True
            except exception.NotFound:
                return None, False
        return data.get('host'), True

    # ------------------------------------------------------------ events

    def _on_delete(self, context, event, instance, data):
        leases = self._leases(context, instance, data.get('tenant_id'))
        self._for_each(context, leases, self._end, instance)

    def _flavor_lease_ended(self, context, lease, instance, why):
        """The common start of an instance's end or offload: True when
        nothing more is to be done for ``lease`` (it is going or gone, or
        it was the flavor's and is now released); _Busy while someone
        works on it."""
        if lease.status in (states.RELEASING, states.RELEASED):
            return True
        if lease.status in states.TRANSIENT_STATES:
            raise _Busy()
        if instance_leases.is_flavor_lease(lease):
            self._release_flavor_lease(context, lease, instance, why)
            return True
        return False

    def _end(self, context, lease, instance):
        if self._flavor_lease_ended(context, lease, instance, 'is deleted'):
            return
        if lease.status in (states.BOUND, states.BIND_FAILED):
            LOG.info('Server %(inst)s is deleted; unbinding lease '
                     '%(lease)s, which stays reserved for its owner.',
                     {'inst': instance, 'lease': lease.uuid})
            rpc.call_unwrapped(self.manager.unbind_lease, context, lease.uuid)
        elif lease.instance_uuid == instance:
            with self._task(context, lease) as task:
                task.link_instance(None)

    def _on_create(self, context, event, instance, data):
        host, known = self._where(context, instance, data)
        if not known:
            return
        project = data.get('tenant_id')
        self._ensure_flavor_leases(context, instance, host, data)
        self._take_hinted_leases(context, instance, project)
        if host:
            self._for_each(context, self._leases(context, instance, project),
                           self._follow, instance, host, event)

    def _take_hinted_leases(self, context, instance, project):
        """Name the instance in the reserved leases it was booted with
        (``--hint composable_lease=<lease>``), so they are bound with it."""
        if not nova_api.configured():
            return
        hints = nova_api.scheduler_hints(context, instance) or {}
        wanted = hints.get(LEASE_HINT) or []
        if isinstance(wanted, str):
            wanted = [wanted]
        hinted = []
        for ident in wanted:
            try:
                lease = db_api.lease_get(context, ident)
            except (exception.NotFound, exception.Conflict):
                LOG.warning('Server %(inst)s was booted with lease hint '
                            '%(lease)s, which does not name one lease.',
                            {'inst': instance, 'lease': ident})
                continue
            if lease.project_id != project:
                LOG.warning('Server %(inst)s was booted with lease hint '
                            '%(lease)s of another project; ignored.',
                            {'inst': instance, 'lease': lease.uuid})
                continue
            hinted.append(lease)
        linked = []
        self._for_each(context, hinted, self._link_hinted, instance, linked)
        if linked:
            # The agents' caches answer the libvirt hook: tell them now
            # rather than at their next refresh.
            instance_binding.notify_agents(context, instance)

    def _link_hinted(self, context, lease, instance, linked):
        """Name ``instance`` in a lease it was booted with, if the lease
        is reserved (or failed to bind) and names no other instance."""
        if lease.instance_uuid not in (None, instance) or lease.status not in (
                states.RESERVED, states.BIND_FAILED):
            return
        with self._task(context, lease) as task:
            if task.link_instance(instance):
                linked.append(lease.uuid)

    def _on_follow(self, context, event, instance, data):
        host, known = self._where(context, instance, data)
        if not known:
            return
        project = data.get('tenant_id')
        if (event == UNSHELVE_END and host) or event in RESIZE_EVENTS:
            self._replace_stale_flavor_leases(context, instance, host, data)
        self._for_each(context, self._leases(context, instance, project),
                       self._follow, instance, host, event)

    def _on_shelve_offload(self, context, event, instance, data):
        leases = self._leases(context, instance, data.get('tenant_id'))
        self._for_each(context, leases, self._offload, instance, event)

    def _offload(self, context, lease, instance, event):
        # Nova deleted the instance's allocation: a flavor lease's
        # capacity is no longer the instance's. Unshelving claims (and
        # leases) anew.
        if not self._flavor_lease_ended(context, lease, instance,
                                        'is shelved offloaded'):
            self._follow(context, lease, instance, None, event)

    def _on_live_migration(self, context, event, instance, data):
        allowed, reason = live_migration_allowed(context, instance)
        if allowed:
            return
        LOG.error('Nova is live migrating server %(inst)s: %(reason)s '
                  'Refuse it in the libvirt hook (migrate) or the '
                  'scheduler; a notification cannot stop Nova.',
                  {'inst': instance, 'reason': reason})
        leases = [lease for lease in self._leases(context, instance,
                                                  data.get('tenant_id'))
                  if _cannot_follow(lease)]
        self._for_each(context, leases, self._refused, 'live_migration',
                       reason)

    def _on_suspend(self, context, event, instance, data):
        leases = [lease for lease in self._leases(context, instance,
                                                  data.get('tenant_id'))
                  if live_migration.cannot_suspend(
                      lease.status, len(lease.devices or []))]
        if not leases:
            return
        reason = live_migration.suspend_refusal(
            instance, ['%s (lease %s)' % (
                live_migration.cannot_suspend(lease.status,
                                              len(lease.devices or [])),
                lease.uuid) for lease in leases])
        LOG.error('Nova is suspending server %(inst)s: %(reason)s',
                  {'inst': instance, 'reason': reason})
        self._for_each(context, leases, self._refused, 'suspend', reason)

    def _refused(self, context, lease, action, reason):
        """Give ``lease`` the fault ``reason`` and a failed ``action`` in
        its log, once."""
        if lease.fault == reason:
            return
        with self._task(context, lease) as task:
            task.set_fault(reason, action=action)

    # ------------------------------------------------------------ moving

    def _follow(self, context, lease, instance, host_name, event):
        """Put ``lease`` where the instance runs (``host_name``; None: on
        no host). Idempotent."""
        status = lease.status
        if status in states.TRANSIENT_STATES:
            raise _Busy()
        if status not in (states.RESERVED, states.BOUND, states.BIND_FAILED):
            # Holds nothing to move (alloc_failed, requested), or is being
            # released or repaired (error: the reconciler's).
            return
        target = None
        if host_name:
            try:
                target = db_api.host_get(ctx_mod.get_admin_context(),
                                         host_name)
            except exception.HostNotFound:
                LOG.warning('Server %(inst)s runs on %(host)s, which is not '
                            'a composable host: lease %(lease)s cannot '
                            'follow it there and is unbound.',
                            {'inst': instance, 'host': host_name,
                             'lease': lease.uuid})
        if target is not None and not self._reaches(lease, target):
            LOG.warning('Server %(inst)s runs on %(host)s, which is not on '
                        'the fabric of lease %(lease)s: the lease is '
                        'unbound.', {'inst': instance, 'host': host_name,
                                     'lease': lease.uuid})
            target = None
        here = target is not None and lease.host_id == target.id
        if status == states.BOUND and here:
            return
        if status == states.BIND_FAILED and here:
            # Failed on this very host already: the owner rebinds it.
            return
        if status == states.RESERVED:
            if target is None:
                return
            LOG.info('Binding lease %(lease)s of server %(inst)s on '
                     '%(host)s (%(event)s).', {'lease': lease.uuid,
                                               'inst': instance,
                                               'host': target.name,
                                               'event': event})
            rpc.call_unwrapped(self.manager.bind_lease, context, lease.uuid,
                               target.uuid, instance_uuid=instance,
                               attach_mode=lease.attach_mode)
            return
        # Bound (or failed) elsewhere: unbind there, then bind here.
        self._move(context, lease, instance, target, event)

    @staticmethod
    def _reaches(lease, host):
        fabrics = {pool.fabric_id for pool in (lease.memory_pool,
                                               lease.device_pool)
                   if pool is not None}
        return not fabrics or host.fabric_id in fabrics

    def _move(self, context, lease, instance, target, event):
        manager = self.manager
        task = lease_task.try_acquire(context, lease.id, manager.host)
        if task is None:
            raise _Busy()
        with task:
            current = task.lease
            if (current.status != lease.status or
                    current.host_id != lease.host_id):
                raise _Busy()
            where = target.name if target is not None else 'no host'
            message = ('Server %s moved to %s (Nova %s).' %
                       (instance, where, event))
            # A rebuild that moves the instance is an evacuation: Nova does
            # it only when the old host's compute service is down.
            action = (nova_actions.EVACUATE if event == REBUILD_END
                      else nova_actions.MOVE)
            try:
                task.process_event(states.UNBIND, action=action,
                                   message=message)
            except lease_task.StatusChanged:
                raise _Busy()
            LOG.info('Lease %(lease)s: %(msg)s Unbinding it from its old '
                     'host.', {'lease': lease.uuid, 'msg': message})
            task.spawn_after(manager.spawn, self._move_flow, task,
                             instance, target, message, action)

    def _move_flow(self, task, instance, host, message,
                   action=nova_actions.MOVE):
        """Unbind the task's lease, then bind it on ``host`` (None: on no
        host); runs in a conductor worker holding the lease's
        reservation."""
        flows = self.manager.flows
        context, lease_id = task.context, task.lease_id
        # Evacuating: the old host not answering does not keep the lease
        # from following (flows.unbind, host_gone).
        if flows.unbind(task, action=action,
                        **nova_actions.unbind_options(action)) != (
                states.RESERVED):
            # Unbinding failed: the lease is in error with a fault, and
            # the reconciler retries the unbind.
            return
        if host is None:
            return
        lease = task.lease
        # The new host may not reach the lease's devices: they are traded
        # for ones it reaches, or the bind fails saying why.
        refusal = None
        try:
            if allocator.reach_host_id(context, lease_id, host.id):
                task.mark_stale()
        except exception.Conflict as exc:
            refusal = exc.message
        values = {'instance_uuid': instance, 'host_id': host.id,
                  'attach_mode': lease.attach_mode, 'fault': None}
        try:
            task.process_event(states.BIND, values=values, action='bind',
                               message=message, host=host)
        except lease_task.StatusChanged:
            return
        if refusal is not None:
            LOG.warning('Lease %(lease)s cannot follow instance %(inst)s: '
                        '%(reason)s', {'lease': lease.uuid, 'inst': instance,
                                       'reason': refusal})
            task.finish(states.FAIL, 'bind', fault=refusal)
            return
        flows.bind(task, action='bind')


class _Endpoint(object):
    """The oslo.messaging notification endpoint (info priority: Nova
    sends instance.*.error events at error priority, which are left
    out)."""

    filter_rule = messaging.NotificationFilter(event_type=r'^instance\.')

    def __init__(self, handler):
        self.handler = handler

    def info(self, ctxt, publisher_id, event_type, payload, metadata):
        try:
            self.handler.handle(event_type, payload, ctxt)
        except Requeue:
            return messaging.NotificationResult.REQUEUE
        except Exception:
            # A bug or bad data: requeueing would loop on it forever.
            LOG.exception('Handling %(event)s from %(publisher)s failed; '
                          'the notification is dropped.',
                          {'event': event_type, 'publisher': publisher_id})
        return messaging.NotificationResult.HANDLED


class NovaNotificationListener(object):
    """The listener the conductor starts when ``[nova]
    notifications_enabled`` is on."""

    def __init__(self, manager, handler=None):
        self.handler = handler or NovaEventHandler(manager)
        self._transport = None
        self._listener = None
        self._lock = threading.Lock()

    def start(self):
        group = CONF.nova
        with self._lock:
            self._transport = messaging.get_notification_transport(
                CONF, url=group.notifications_transport_url)
            targets = [messaging.Target(topic=topic,
                                        exchange=group.notifications_exchange)
                       for topic in group.notifications_topics]
            self._listener = messaging.get_notification_listener(
                self._transport, targets, [_Endpoint(self.handler)],
                executor='threading', pool=group.notifications_pool,
                allow_requeue=True)
            self._listener.start()
        LOG.info('Listening to Nova\'s notifications on %(topics)s '
                 '(exchange %(exchange)s, pool %(pool)s)',
                 {'topics': ', '.join(group.notifications_topics),
                  'exchange': group.notifications_exchange,
                  'pool': group.notifications_pool})

    def stop(self):
        with self._lock:
            listener, self._listener = self._listener, None
            transport, self._transport = self._transport, None
        if listener is not None:
            listener.stop()
            listener.wait()
        if transport is not None:
            transport.cleanup()
