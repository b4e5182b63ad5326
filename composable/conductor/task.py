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

"""Lease tasks: the one way a lease changes state (after Ironic's
task_manager).

A task holds the lease's reservation (composable.conductor.reservations)
and the lease row read again under it, so what it decides is decided on
the lease as it is, and nobody else changes the lease meanwhile. Every
transition then takes the same steps: check the event against the state
machine (composable.common.states), compare-and-set the status
(db_api.lease_transition), start the entry of the lease's action log, and
hand the slow part to a worker thread that keeps the reservation until it
ends::

    with task.acquire(context, lease.id, host, lease_ident=uuid) as t:
        t.process_event(states.BIND, request='bind', action='bind',
                        values={...}, host=host)
        t.spawn_after(manager.spawn, flows.bind, t)

:func:`acquire` waits for the reservation (RPC methods, which answer
LeaseLocked after ``[conductor]reservation_wait``); :func:`try_acquire`
does not (periodic tasks, the reconciler, Nova's events: a lease busy now
is looked at again on the next pass). The periodic tasks, the reconciler
and the elastic resizer write only what they do to one lease, decorated
with :func:`lease_periodic`, which lists the leases and takes each one's
reservation. The flows, the resizer's steps and the Placement claim run
in the worker holding the reservation and are given the task: they work
on ``task.lease`` and end their transitions with :meth:`LeaseTask.finish`.

The lease is read once: with the reservation, in the same transaction.
A transition made through the task is set on the row it holds (the new
status and what was written), so a bind goes from the RPC call to the end
of its flow on that one read. Whatever changes the lease elsewhere (the
allocator's claims, a resize's extents) tells the task with
:meth:`LeaseTask.mark_stale`, and the next look reads it again.
"""

import functools

from oslo_log import log as logging

from composable.common import exception
from composable.common import states
from composable.conductor import reservations
from composable.conductor import rules
from composable.db import api as db_api

LOG = logging.getLogger(__name__)

_WAIT_HINT = ' Wait until it is no longer %s, then try again.'


class StatusChanged(Exception):
    """The lease left the state a flow expected; someone else acted."""


def check_event(lease, event, request):
    """The state ``event`` moves ``lease`` to, or InvalidState for the
    user's ``request`` (bind, unbind, delete) with a hint.

    Under the reservation a transient state means no one works on the
    lease (a conductor died, the takeover has not run yet). Users may
    repeat a delete to resume a release; other requests wait.
    """
    status = lease.status
    if status in states.TRANSIENT_STATES and not (
            status == states.RELEASING and event == states.DELETE):
        raise exception.InvalidState(
            lease=lease.uuid, status=status, action=request,
            hint=states.hint(status, event) or _WAIT_HINT % status)
    try:
        # The terminal state (released) is an InvalidTransition too.
        return states.next_state(status, event)
    except states.InvalidTransition as exc:
        raise exception.InvalidState(lease=lease.uuid, status=status,
                                     action=request, hint=exc.hint)


def transition(context, lease_id, current, event, values=None, action=None,
               message=None):
    """Move a lease from ``current`` on ``event`` with ``values`` and
    start its ``action`` (if given) in the action log, in one
    transaction. The new status; StatusChanged when the lease is no
    longer ``current``.

    For the holder of the lease's reservation (a task, or the flow a task
    handed its reservation to).
    """
    target = db_api.lease_transition(context, lease_id, current, event,
                                     values=values, action=action,
                                     message=message)
    if target is None:
        raise StatusChanged('lease %s is no longer %s' % (lease_id, current))
    return target


class LeaseTask(object):
    """A held lease reservation and the lease read under it; a context
    manager that releases the reservation at its end unless a worker was
    given it (spawn_after)."""

    def __init__(self, context, reservation, lease):
        self.context = context
        self.reservation = reservation
        self._lease = lease
        # Set when the lease was changed by something else than this
        # task's own writes: it is read again on the next look only.
        self._stale = False
        self.future = None
        self._spawn = None

    @property
    def lease(self):
        """The lease as it is under the reservation: the row read with
        it, with what this task wrote since (read again on the first look
        after mark_stale)."""
        if self._stale:
            self.reload()
        return self._lease

    def mark_stale(self):
        """The lease was changed by a writer other than this task (the
        allocator's claim, trade or resize): read it again on the next
        look."""
        self._stale = True

    def _moved(self, target, values, host=None):
        """Set on the row held the ``target`` status and the ``values``
        just written with it, as the database has them now. A host_id
        changed without its ``host`` row leaves the row stale."""
        lease = self._lease
        lease.status = target
        self._wrote(values or {})
        if 'host_id' in (values or {}):
            host_id = values['host_id']
            if host_id is None:
                lease.host = None
            elif host is not None and host.id == host_id:
                lease.host = host
            elif lease.host is None or lease.host.id != host_id:
                self._stale = True

    @property
    def lease_id(self):
        return self.reservation.lease_id

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc_value, tb):
        try:
            if exc_type is None and self._spawn is not None:
                spawn_method, fn, args, kwargs = self._spawn
                self._spawn = None
                self.future = spawn_method(self.reservation, fn, *args,
                                           **kwargs)
        finally:
            if not self.reservation.handed_off:
                self.reservation.release()
        return False

    def reload(self):
        """Read the lease again (under the reservation); the row."""
        self._lease = db_api.lease_get_by_id(self.context, self.lease_id)
        self._stale = False
        return self._lease

    def process_event(self, event, action=None, values=None, message=None,
                      request=None, host=None):
        """Move the lease on ``event``; its new status.

        ``request``: what the user asked (bind, unbind, delete). The
        event is checked first (check_event), and a lease that moved
        meanwhile is refused with InvalidState too. Without it (periodic
        tasks, the reconciler, Nova's events) a refused transition raises
        InvalidTransition and a lease that moved StatusChanged.

        ``action`` (with ``message``): the entry of the lease's action log
        started once the lease moved, in the same transaction.

        The row held gets the new status and ``values`` (``host``: the
        Host row of a ``host_id`` among them), so the worker given the
        task goes on without reading the lease again.
        """
        lease = self.lease
        if request is not None:
            check_event(lease, event, request)
        try:
            target = transition(self.context, lease.id, lease.status, event,
                                values=values, action=action,
                                message=message)
        except StatusChanged:
            if request is None:
                raise
            current = self.reload()
            raise exception.InvalidState(
                lease=lease.uuid, status=current.status, action=request,
                hint=states.hint(current.status, event))
        self._moved(target, values, host=host)
        return target

    def finish(self, event, action, fault=None, values=None,
               attachment=None):
        """End the flow the task was given: move the lease out of the
        transient state it holds on ``event`` with ``values``, the fault
        set to ``fault`` (None: cleared), and end its running ``action``
        (error when there is a fault); ``attachment`` (``(id, event,
        values)``, the flow's last move of the lease's attachment) in the
        same transaction (db_api.lease_flow_end). The new status, or None
        when the lease left that state meanwhile (logged; not changed)."""
        current = self._lease.status
        values = dict(values or {}, fault=fault)
        target = db_api.lease_flow_end(
            self.context, self.lease_id, current, event, action,
            'error' if fault else 'success', values=values, message=fault,
            attachment=attachment)
        if target is None:
            LOG.warning('Lease %(lease)s left %(status)s while this '
                        'conductor worked on it; not changing it.',
                        {'lease': self.lease_id, 'status': current})
            self._stale = True
            return None
        self._moved(target, values)
        return target

    def edit(self, **fields):
        """Change what a user edits of the lease (name, description,
        end_at: naive UTC or None), all in one write, each field by its
        rule (composable.conductor.rules): nothing is written when one is
        refused. NameInUse when a live lease of the project has the name;
        InvalidState when the lease left its state meanwhile."""
        lease = self.lease
        if 'end_at' in fields:
            rules.check_end(lease, fields['end_at'])
        if not db_api.lease_edit(self.context, self.lease_id, lease.status,
                                 **fields):
            # Nothing else moves a lease under its reservation; an
            # operator may have broken it.
            current = self.reload()
            raise exception.InvalidState(
                lease=lease.uuid, status=current.status,
                action='changing %s' % ', '.join(sorted(fields)))
        self._wrote(fields)

    def _wrote(self, values):
        """Set on the row held the ``values`` just written to the lease
        (its status unchanged)."""
        for key, value in values.items():
            setattr(self._lease, key, value)

    def set_end(self, end_at):
        """Move the lease's end to ``end_at`` (naive UTC, None: no end);
        see edit."""
        self.edit(end_at=end_at)

    def set_fault(self, fault, action=None):
        """Record ``fault``: why the lease cannot do what is asked of it
        (None clears it). With ``action``, the lease's action log gets an
        entry of that name that failed with ``fault`` as its message, so
        the owner sees when and why. False when the lease left its state
        meanwhile (nothing written)."""
        if not db_api.lease_set_fault(self.context, self.lease_id, fault,
                                      self.lease.status):
            return False
        self._wrote({'fault': fault})
        if action is not None:
            db_api.action_start(self.context, self.lease_id, action,
                                message=fault)
            db_api.action_finish(self.context, self.lease_id, action,
                                 'error', message=fault)
        return True

    def link_instance(self, instance_uuid):
        """Name the Nova instance the lease serves (None: no instance);
        the lease is bound with it when it starts. False when the lease
        left its state meanwhile (nothing written)."""
        if not db_api.lease_link_instance(self.context, self.lease_id,
                                          instance_uuid, self.lease.status):
            return False
        self._wrote({'instance_uuid': instance_uuid})
        return True

    def set_low_since(self, since):
        """Record when the elastic lease's predicted need went below its
        size (None: it is not below); False when the lease left its state
        meanwhile (nothing written)."""
        if not db_api.lease_set_low_since(self.context, self.lease_id, since,
                                          self.lease.status):
            return False
        self._wrote({'elastic_low_since': since})
        return True

    def spawn_after(self, spawn_method, fn, *args, **kwargs):
        """Once the ``with`` block ends without an error, run
        ``spawn_method(reservation, fn, *args, **kwargs)`` (the
        conductor's ``spawn``): ``fn`` runs in a worker that keeps the
        reservation until it ends; ``future`` is then its future."""
        self._spawn = (spawn_method, fn, args, kwargs)


def acquire(context, lease_id, host, wait=None, lease_ident=None):
    """A task on the lease, waiting up to ``wait`` seconds (default
    ``[conductor]reservation_wait``) for its reservation; LeaseLocked
    after that."""
    reservation = reservations.reserve(context, lease_id, host, wait=wait,
                                       lease_ident=lease_ident, read=True)
    return _task(context, reservation)


def try_acquire(context, lease_id, host, listed=None):
    """A task on the lease if its reservation is free now, else None.

    ``listed``: the lease as a list read it; None at once when that
    showed a reservation.
    """
    if listed is not None and listed.reservation is not None:
        return None
    reservation = reservations.try_reserve(context, lease_id, host,
                                           read=True)
    if reservation is None:
        return None
    return _task(context, reservation)


def _task(context, reservation):
    """The task on a reservation taken with the lease's read."""
    return LeaseTask(context, reservation, reservation.lease)


# ---------------------------------------------------------------- periodic

class _LeasePeriodic(object):
    """What :func:`lease_periodic` makes of a method (a descriptor: on an
    instance it is a :class:`LeasePass`)."""

    def __init__(self, fn, purpose, filters, lister, predicate, stop,
                 on_error):
        functools.update_wrapper(self, fn)
        self.fn = fn
        self.purpose = purpose
        self.filters = filters
        self.lister = lister
        self.predicate = predicate
        self.stop = stop
        self.on_error = on_error

    def __get__(self, owner, owner_type=None):
        if owner is None:
            return self
        return LeasePass(self, owner)


class LeasePass(object):
    """One lease periodic of one object (a conductor's periodic tasks,
    reconciler, resizer): called, it makes a pass over its leases;
    :meth:`for_lease` acts on one lease as the pass would."""

    def __init__(self, periodic, owner):
        self._periodic = periodic
        self._owner = owner
        self.__name__ = periodic.__name__
        self.__doc__ = periodic.__doc__

    def leases(self, context):
        """The leases the pass looks at, as its list reads them."""
        periodic, owner = self._periodic, self._owner
        if periodic.lister is not None:
            return periodic.lister(owner, context)
        filters = periodic.filters
        if callable(filters):
            filters = filters(owner)
        return db_api.lease_list(context, filters=filters)

    def __call__(self, context, *args, **kwargs):
        """One pass; the results the leases acted upon gave (see
        for_lease), those that are None left out."""
        periodic, owner = self._periodic, self._owner
        results = []
        for lease in self.leases(context):
            if periodic.stop is not None and periodic.stop(owner):
                LOG.debug('Stopping %s: the conductor stops',
                          periodic.purpose)
                break
            try:
                result = self.for_lease(context, lease, *args, **kwargs)
            except Exception as exc:
                # One lease must not stop the pass over the others.
                LOG.exception('%(purpose)s failed on lease %(lease)s',
                              {'purpose': periodic.purpose.capitalize(),
                               'lease': lease.uuid})
                if periodic.on_error is not None:
                    periodic.on_error(owner, lease, exc, *args, **kwargs)
                continue
            if result is not None:
                results.append(result)
        return results

    def for_lease(self, context, lease, *args, **kwargs):
        """Act on one ``lease`` (as the pass listed it) under its
        reservation, taken without waiting. None when the lease is busy,
        gone, or the predicate passes it by; else the future of the worker
        the method handed the reservation to (spawn_after), or the
        method's own result."""
        periodic, owner = self._periodic, self._owner
        if lease.reservation is not None:
            return None
        if periodic.predicate is not None and not periodic.predicate(
                owner, context, lease, *args, **kwargs):
            return None
        try:
            task = try_acquire(context, lease.id, owner.host, listed=lease)
        except exception.LeaseNotFound:
            LOG.debug('Lease %s is gone; %s passes it by', lease.uuid,
                      periodic.purpose)
            return None
        if task is None:
            return None
        with task:
            result = periodic.fn(owner, task, context, *args, **kwargs)
        if task.future is not None:
            return task.future
        return result


def lease_periodic(purpose, filters=None, lister=None, predicate=None,
                   stop=None, on_error=None):
    """The skeleton of every periodic lease task, after Ironic's
    ``node_periodic``: list the leases, take each one's reservation
    without waiting, pass by those that are busy, act on the others.

    Decorates ``fn(self, task, context, *args, **kwargs)``: what to do to
    one lease, given a :class:`LeaseTask` on it (``task.lease`` is the
    lease read under its reservation; check there whatever the list
    showed, the lease may have changed since). ``self`` has a ``host``
    (the conductor's name: the reservation's holder). The decorated name
    is then a :class:`LeasePass`: ``self.name(context, *args, **kwargs)``
    runs one pass, ``self.name.for_lease(context, lease, ...)`` acts on one
    lease as the pass would.

    One pass:

    * lists the leases: ``db_api.lease_list`` with ``filters`` (a dict, or
      a callable of ``self`` giving one), or ``lister(self, context)`` for
      another list (its rows need ``id``, ``uuid`` and ``reservation``);
    * before each lease, ends early when ``stop(self)`` is true;
    * passes by a lease the list shows reserved, then one that
      ``predicate(self, context, lease, *args, **kwargs)`` refuses. The
      predicate sees the lease as listed, without its reservation; it may
      finish a lease that needs no reservation (the expiry releases a
      lease that holds nothing live in one conditional UPDATE) and refuse
      it then;
    * takes the lease's reservation without waiting; a lease busy now is
      looked at again on the next pass;
    * runs ``fn`` under it. An exception there (or in the predicate) is
      logged, given to ``on_error(self, lease, exc, *args, **kwargs)`` if
      set, and the pass goes on with the next lease.

    ``purpose``: what the pass does, for the log ("expiring leases").
    """
    if (filters is None) == (lister is None):
        raise TypeError('lease_periodic needs filters or a lister')

    def decorator(fn):
        return _LeasePeriodic(fn, purpose, filters, lister, predicate, stop,
                              on_error)
    return decorator
