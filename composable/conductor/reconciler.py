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

"""The lease reconciler: finishes, without a user action, what failed.

Every conductor runs it every ``[conductor]reconcile_interval`` seconds
(0 disables it). One run:

1. breaks the reservations of conductors that stopped beating (as the
   periodic takeover does), so a lease a dead conductor held while it
   reconciled is free for this run;
2. retries the leases in ``error``: the release (a ``delete`` or an
   ``expire`` that failed) or the unbind that failed, whichever the
   lease's action log says the user asked for last. A released lease
   gives its capacity back; an unbound one is ``reserved`` again;
3. tears down what a failed bind left held by leases in ``bind_failed``
   (extents that may still be exported, live attachments, devices bound
   on the fabric), so nothing stays exported while the lease waits for
   its owner. The lease stays ``bind_failed``: its owner binds it again
   or deletes it;
4. checks every enabled memory node (composable.conductor.node_reports):
   targets the exporter still serves for extents the database says are
   not exported are removed, and orphan extent files are scrubbed.

A run lists the leases in ``error`` and ``bind_failed`` by their
identity and state, and reads their action logs and what they still hold
in bulk: a lease that backs off or holds nothing costs no query of its
own and no reservation.

Each lease is handled only under its reservation, taken without waiting
(composable.conductor.task.lease_periodic): when several conductors
reconcile at the same moment, exactly one acts on
a given lease and the others skip it. Every attempt on a lease is a lease
action named ``reconcile`` (its message says what was tried, and why it
failed), so the owner sees in the action log what happened to the lease.

Failed attempts back off: after *n* failed ``reconcile`` actions in a row
the next attempt waits ``reconcile_retry_backoff * 2**(n-1)`` seconds
(at most ``reconcile_retry_max_backoff``) after the last one ended. The
count lives in the action log, so it survives restarts and is shared by
all conductors. A lease whose failure came from a user request is retried
at the first run.

Within one run a node whose agent did not answer is not asked again: the
leases that need it wait for the next run. ``run`` returns (and logs) a
summary of what it changed and what it could not.
"""

import datetime
import functools

from oslo_log import log as logging
import oslo_messaging as messaging

from composable.common import context as composable_context
from composable.common import states
from composable.common import utils
from composable.conductor import flows as lease_flows
from composable.conductor.nova import actions as nova_actions
from composable.conductor import node_reports
from composable.conductor import task as lease_task
from composable import conf
from composable.db import api as db_api

CONF = conf.CONF
LOG = logging.getLogger(__name__)

# The lease action of every reconciler attempt.
RECONCILE = 'reconcile'

RUNNING = 'running'
SUCCESS = 'success'
ERROR = 'error'


def new_summary():
    return {
        # Dead conductors whose reservations this run broke.
        'dead_conductors': [],
        # Leases in error: released, unbound, or still failing.
        'released': [], 'unbound': [], 'retry_failed': {},
        # Leases in bind_failed: torn down, or still holding something.
        'cleaned': [], 'clean_failed': {},
        # Leases left for a later run: backing off, or needing a node
        # that did not answer in this run.
        'waiting': [],
        # Memory nodes: {node: [extent uuid]}.
        'orphan_targets': {}, 'orphan_files': {},
        'unreachable': [], 'problems': [],
    }


def changed(summary):
    """True when the run changed something."""
    return bool(summary['released'] or summary['unbound'] or
                summary['cleaned'] or summary['dead_conductors'] or
                any(summary['orphan_targets'].values()) or
                any(summary['orphan_files'].values()))


def describe(summary):
    """One line for the log."""
    parts = []
    for key, what in (('released', 'released %d lease(s) in error'),
                      ('unbound', 'unbound %d lease(s) in error'),
                      ('cleaned', 'tore down what %d failed bind(s) left'),
                      ('retry_failed', '%d lease(s) in error still fail'),
                      ('clean_failed', 'could not tear down %d failed '
                                       'bind(s)'),
                      ('waiting', '%d lease(s) wait for a later run')):
        if summary[key]:
            parts.append(what % len(summary[key]))
    targets = sum(len(v) for v in summary['orphan_targets'].values())
    files = sum(len(v) for v in summary['orphan_files'].values())
    if targets:
        parts.append('removed %d orphan target(s)' % targets)
    if files:
        parts.append('scrubbed %d orphan extent file(s)' % files)
    if summary['unreachable']:
        parts.append('no answer from %s' %
                     ', '.join(sorted(summary['unreachable'])))
    if summary['dead_conductors']:
        parts.append('broke the reservations of %s' %
                     ', '.join(summary['dead_conductors']))
    return '; '.join(parts) or 'nothing to do'


class _WatchedAgents(object):
    """The agent RPC client, noting the nodes that did not answer."""

    def __init__(self, agents, unreachable):
        self._agents = agents
        self._unreachable = unreachable

    def __getattr__(self, name):
        method = getattr(self._agents, name)

        def call(context, node, *args, **kwargs):
            try:
                return method(context, node, *args, **kwargs)
            except messaging.MessagingTimeout:
                self._unreachable.add(node)
                raise
        return call


def _failed_attempts(actions):
    """How many reconciler attempts failed in a row at the end of the
    action log, and when the last of them ended."""
    count, last = 0, None
    for row in reversed(actions):
        if row.action != RECONCILE or row.result == SUCCESS:
            break
        if row.result == ERROR:
            count += 1
            if last is None:
                last = row.finish_time
    return count, last


def backoff(failures):
    """Seconds to wait after ``failures`` failed attempts in a row."""
    if failures <= 0:
        return 0
    base = CONF.conductor.reconcile_retry_backoff
    limit = CONF.conductor.reconcile_retry_max_backoff
    # Bounded before the power, so a long history cannot overflow.
    return min(base * 2 ** min(failures - 1, 32), limit)


def next_attempt(actions):
    """When the reconciler may next act on a lease (None: now)."""
    failures, last = _failed_attempts(actions)
    if not failures or last is None:
        return None
    return last + datetime.timedelta(seconds=backoff(failures))


def user_intent(actions):
    """What was last asked of a lease in error: 'release', or the action
    of an unbind (the owner's 'unbind', or one of an instance's:
    nova_actions.UNBIND_ACTIONS)."""
    for row in reversed(actions):
        if row.action == RECONCILE:
            continue
        if row.action in nova_actions.UNBIND_ACTIONS:
            return row.action
        return 'release'
    return 'release'


def _lease_nodes(context, lease):
    """The agents a teardown of ``lease`` may have to ask."""
    nodes = {e.memory_node.name for e in lease.extents or []}
    for att in db_api.attachment_list(
            context, lease.id, states_=states.LIVE_ATTACHMENT_STATES):
        nodes.add(att.host.name)
    if lease.host is not None:
        nodes.add(lease.host.name)
    return nodes


def holds_something(context, lease):
    """True when a lease may still have something exported, attached or
    bound: the marks the flows leave before they act (see flows.py)."""
    for extent in lease.extents or []:
        if (extent.export_state == states.EXTENT_EXPORTED or
                extent.chap_username):
            return True
    if db_api.attachment_list(context, lease.id,
                              states_=states.LIVE_ATTACHMENT_STATES):
        return True
    for device in lease.devices or []:
        if (device.pci_address or
                device.state == states.DEVICE_ATTACHED):
            return True
    return False


class _Listed(object):
    """A lease as a reconciler pass lists it: id, uuid, reservation and
    status, with what the pass read in bulk for its predicate
    (``listed_actions``: the action log; ``listed_holds``: whether it
    may hold something). Not the lease: the task reads that under the
    reservation."""

    def __init__(self, ref, actions=None, holds=None):
        self.id = ref.id
        self.uuid = ref.uuid
        self.reservation = ref.reservation
        self.status = ref.status
        self.listed_actions = actions
        self.listed_holds = holds


def _whole(context, lease):
    """The lease itself, for a listed one."""
    if isinstance(lease, _Listed):
        return db_api.lease_get_by_id(context, lease.id)
    return lease


class Reconciler(object):
    """One conductor's reconciler; ``run`` is one pass."""

    def __init__(self, manager):
        self.manager = manager

    @property
    def host(self):
        return self.manager.host

    # ------------------------------------------------------------ run

    def run(self, context=None):
        context = context or composable_context.get_admin_context()
        summary = new_summary()
        unreachable = set()
        agents = _WatchedAgents(self.manager.flows.agents, unreachable)
        flows = lease_flows.LeaseFlows(self.host, agent_api=agents)
        try:
            summary['dead_conductors'] = db_api.break_dead_reservations(
                context, CONF.conductor.heartbeat_timeout,
                caller=self.host)
        except Exception:
            LOG.exception('The reconciler could not check for dead '
                          'conductors')
        for name, task in ((states.ERROR, self.retry_errors),
                           (states.BIND_FAILED, self.clean_failed_binds),
                           ('memory nodes', self.check_memory_nodes)):
            if self._stopping():
                break
            try:
                task(context, flows, unreachable, summary)
            except Exception as exc:
                # One failing part must not stop the others, nor the loop.
                LOG.exception('The reconciler failed on %s', name)
                summary['problems'].append('%s: %s' % (
                    name, type(exc).__name__))
        summary['unreachable'] = sorted(unreachable)
        if changed(summary) or summary['retry_failed'] or \
                summary['clean_failed'] or summary['problems']:
            LOG.info('Reconciler on %(host)s: %(what)s',
                     {'host': self.host, 'what': describe(summary)})
        else:
            LOG.debug('Reconciler on %(host)s: %(what)s',
                      {'host': self.host, 'what': describe(summary)})
        return summary

    # ------------------------------------------------------------ helpers

    def _stopping(self):
        event = getattr(self.manager, '_stopping', None)
        return event is not None and event.is_set()

    def _due(self, context, lease, flows, unreachable, summary):
        """False when the listed lease waits for a later run: it is
        backing off, or needs a node that did not answer in this run."""
        actions = getattr(lease, 'listed_actions', None)
        if actions is None:
            actions = db_api.action_list(context, lease.id)
        due = next_attempt(actions)
        if due is not None and utils.utcnow() < due:
            summary['waiting'].append(lease.uuid)
            return False
        # The nodes only matter once one did not answer in this run: then
        # (rarely) the lease is read whole.
        if unreachable and _lease_nodes(
                context, _whole(context, lease)) & unreachable:
            summary['waiting'].append(lease.uuid)
            return False
        return True

    def _holds_and_due(self, context, lease, flows, unreachable, summary):
        holds = getattr(lease, 'listed_holds', None)
        if holds is None:
            holds = holds_something(context, lease)
        return holds and self._due(context, lease, flows, unreachable,
                                   summary)

    # The lists of a pass: the leases' identity and state, and in bulk
    # what the predicates decide on, so a lease with nothing to do costs
    # no query of its own and no reservation. What a lease turns out to
    # need is checked again on the lease read under its reservation.

    def _list_errors(self, context):
        refs = db_api.lease_refs_in_status(context, states.ERROR)
        logs = db_api.action_logs(context, [ref.id for ref in refs])
        return [_Listed(ref, actions=logs.get(ref.id, [])) for ref in refs]

    def _list_failed_binds(self, context):
        refs = db_api.lease_refs_in_status(context, states.BIND_FAILED)
        holding = db_api.leases_holding(context, [ref.id for ref in refs])
        logs = db_api.action_logs(context, holding)
        return [_Listed(ref, holds=ref.id in holding,
                        actions=logs.get(ref.id, [])) for ref in refs]

    def _failed(self, lease, exc, flows, unreachable, summary):
        summary['problems'].append('lease %s: %s' % (lease.uuid,
                                                     type(exc).__name__))

    @staticmethod
    def _start_action(context, lease_id, message):
        """Start a reconcile action, or go on with the one a conductor
        that stopped left running (it is finished by this attempt)."""
        actions = db_api.action_list(context, lease_id)
        if actions and actions[-1].action == RECONCILE and \
                actions[-1].result == RUNNING:
            return
        db_api.action_start(context, lease_id, RECONCILE, message=message)

    # ------------------------------------------------------------ error

    @lease_task.lease_periodic(
        'retrying leases in error',
        lister=lambda self, context: self._list_errors(context),
        predicate=_due, stop=_stopping, on_error=_failed)
    def retry_errors(self, task, context, flows, unreachable, summary):
        """Retry the release or unbind of one lease in error."""
        lease = task.lease
        if lease.status != states.ERROR:
            return None
        intent = user_intent(db_api.action_list(context, lease.id))
        if intent != 'release':
            event = states.UNBIND
            flow = functools.partial(flows.unbind,
                                     **nova_actions.unbind_options(intent))
            message = ('The reconciler retries the unbind that '
                       'failed.')
        else:
            event, flow = states.DELETE, flows.release
            message = ('The reconciler retries the release that '
                       'failed.')
        try:
            task.process_event(event)
        except lease_task.StatusChanged:
            return None
        self._start_action(context, lease.id, message)
        LOG.info('Reconciler: retrying the %(what)s of lease %(lease)s',
                 {'what': intent, 'lease': lease.uuid})
        result = flow(task, action=RECONCILE)
        if result == states.RELEASED:
            summary['released'].append(lease.uuid)
        elif result == states.RESERVED:
            summary['unbound'].append(lease.uuid)
        else:
            summary['retry_failed'][lease.uuid] = task.lease.fault
        return result

    def retry(self, context, lease, flows, unreachable, summary):
        return self.retry_errors.for_lease(context, lease, flows,
                                           unreachable, summary)

    # ------------------------------------------------------------ bind_failed

    @lease_task.lease_periodic(
        'tearing down what failed binds left',
        lister=lambda self, context: self._list_failed_binds(context),
        predicate=_holds_and_due,
        stop=_stopping, on_error=_failed)
    def clean_failed_binds(self, task, context, flows, unreachable, summary):
        """Tear down what a failed bind left; the lease stays
        bind_failed. True when nothing is left."""
        lease = task.lease
        if lease.status != states.BIND_FAILED or \
                not holds_something(context, lease):
            return None
        self._start_action(
            context, lease.id,
            'The reconciler removes what the failed bind left '
            'exported or attached; the lease stays bind_failed.')
        LOG.info('Reconciler: tearing down what the failed bind of '
                 'lease %s left', lease.uuid)
        try:
            problems = flows.teardown(task, best_effort=True)
        except Exception as exc:
            LOG.exception('Tearing down the failed bind of lease %s '
                          'failed', lease.uuid)
            problems = ['an internal error (%s); see the conductor '
                        'log' % type(exc).__name__]
        if problems:
            message = ('Could not remove all the failed bind left: '
                       '%s. The reconciler tries again later.' %
                       '; '.join(problems))
            db_api.action_finish(context, lease.id, RECONCILE, ERROR,
                                 message=message)
            summary['clean_failed'][lease.uuid] = message
            return False
        db_api.action_finish(context, lease.id, RECONCILE, SUCCESS)
        summary['cleaned'].append(lease.uuid)
        return True

    def clean(self, context, lease, flows, unreachable, summary):
        return self.clean_failed_binds.for_lease(context, lease, flows,
                                                 unreachable, summary)

    # ------------------------------------------------------------ nodes

    def check_memory_nodes(self, context, flows, unreachable, summary):
        for node in db_api.memory_node_list(context,
                                            filters={'enabled': True}):
            if self._stopping():
                return
            if node.name in unreachable:
                continue
            result = node_reports.check_memory_node(
                context, node, flows.agents, host=self.host)
            if result['orphan_targets']:
                summary['orphan_targets'][node.name] = list(
                    result['orphan_targets'])
            if result['orphans']:
                summary['orphan_files'][node.name] = list(result['orphans'])
            summary['problems'].extend(result['problems'])
