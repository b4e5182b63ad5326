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

"""Elastic memory leases: predict, then grow or shrink in whole extents.

Every ``[elastic]resize_interval`` seconds the conductor looks at each
bound elastic memory lease: it puts the usage samples of the lease's
observation window on a grid of ``[elastic]sample_interval`` seconds,
fits the autoregressive model of composable.conductor.elastic.predictor
to them, and predicts the peak of the next prediction window; that peak
plus the lease's headroom, in whole extents, within [min_mb, max_mb], is
what the lease should hold. The pass predicts first from the listed
leases and their samples read in bulk; a lease with something to do is
then taken under its reservation (the per-lease lock every bind, unbind
and delete also takes, so none of them runs during a resize), read again
and decided for again as it is then.

* More than it holds: grow at once. The allocator claims the extra
  extents atomically (allocator.grow_memory: the same conditional UPDATEs
  as a create, so no over-commit), Placement's allocation of the lease is
  rewritten with its consumer generation, the new extents are exported to
  the bound host and its agent attaches *only them*. A full pool, or
  Placement refusing, leaves the lease at its size: an action ``resize``
  ending in error (and so a ``lease.resize.error`` notification), never a
  failure of the workload. An agent that fails or times out has the new
  extents detached (best effort: it may have attached them late),
  unexported, scrubbed and given back: the lease ends as it was.
* Less: only once the prediction has stayed low for
  ``[elastic]shrink_hysteresis`` seconds. The newest extents are detached
  by the agent (swapoff first: an extent whose pages do not fit back in
  free memory is refused there, and the lease keeps its size), unexported,
  scrubbed, and only then given back to the pool.

A lease of CXL memory (API 1.7: attach mode virtio-mem, a fabric whose
back end is ``local``) is resized through its guest's virtio-mem device
(agent RPC 1.4, a *partial* attach or detach of some of its chunks):

* grow: whole chunks claimed as above (on the devices the lease has
  first), a device it had none of made reachable from the host by the
  bind's fabric step, nothing exported; the agent makes the new regions
  and raises the device's requested size; only then does the compute
  node's MEMORY_MB (and the guest's hold) grow (host_memory.follow).
  A failure is undone in reverse; chunks the host may still map (it did
  not answer the undo) stay with the lease, marked, until it does.
* shrink: the agent lowers the requested size first (the guest gives the
  memory back, or refuses and keeps it) and destroys only those regions;
  then MEMORY_MB and the hold are lowered and the chunks given back (the
  host erased them: nothing to unexport or scrub).

Every resize is an action of the lease's log whose message carries the
prediction that caused it.
"""

import dataclasses
import datetime
import time

import numpy as np
from oslo_log import log as logging

from composable.common import exception
from composable.common import media
from composable.common import states
from composable.common import utils
from composable.conductor.allocator import claims as allocator
from composable.conductor.elastic import predictor as ar
from composable.conductor import flows as lease_flows
from composable.conductor.placement import claims as placement_claims
from composable.conductor.placement import host_memory
from composable.conductor import rules
from composable.conductor import task as lease_task
from composable import conf
from composable.db import api as db_api

CONF = conf.CONF
LOG = logging.getLogger(__name__)

ACTION = 'resize'
GROW = 'grow'
SHRINK = 'shrink'


@dataclasses.dataclass(frozen=True)
class Decision:
    """What to do to a lease, and the prediction behind it."""

    kind: str
    size_mb: int
    target_mb: int
    peak_mb: float
    order: int
    samples: int
    prediction_window: int
    headroom: float

    @property
    def amount_mb(self):
        return abs(self.target_mb - self.size_mb)

    def describe(self):
        verb = 'Growing' if self.kind == GROW else 'Shrinking'
        return ('%s from %d to %d MiB: predicted peak %.0f MiB over the '
                'next %d s (autoregressive order %d on %d samples), plus '
                '%g%% headroom.' % (verb, self.size_mb, self.target_mb,
                                    self.peak_mb, self.prediction_window,
                                    self.order, self.samples,
                                    self.headroom * 100))


def usage_grid(rows, end, interval, steps):
    """The ``used_mb`` of ``rows`` (samples, oldest first) on a grid of
    ``steps`` steps of ``interval`` seconds ending at ``end`` (the last
    step holds the samples of the last ``interval`` seconds up to
    ``end``); NaN where a step has no sample (the predictor fills such
    gaps). The newest sample of a step counts."""
    grid = np.full(steps, np.nan)
    for row in rows:
        age = (end - row.taken_at).total_seconds()
        if age < 0:
            continue
        step = steps - 1 - int(age // interval)
        if 0 <= step < steps:
            grid[step] = float(row.used_mb)
    return grid


@dataclasses.dataclass(frozen=True)
class _Sample:
    """A usage sample as the pass reads it in bulk."""

    taken_at: datetime.datetime
    used_mb: int


def _window_start(policy, now, interval):
    """The start of the observation window of a lease with ``policy``
    (its elastic policy) predicted at ``now``."""
    steps = max(2, int(policy['observation_window']) // interval)
    return now - datetime.timedelta(seconds=steps * interval)


def _outcome(policy, rows, now, step_size, size_mb, low_since):
    """What a lease with ``policy``, ``size_mb`` and ``low_since`` (when
    its predicted need went below its size, or None), whose usage samples
    in its observation window are ``rows`` (oldest first, none after
    ``now``), should do: (Decision or None, the low_since it should then
    have). Pure: the pass runs it on the listed rows to find the leases
    with something to do, the task again on the lease it holds."""
    interval = CONF.elastic.sample_interval
    window = int(policy['observation_window'])
    steps = max(2, window // interval)
    if len(rows) < CONF.elastic.min_samples:
        LOG.debug('An elastic lease has %d usage samples in its '
                  'observation window; leaving it at its size', len(rows))
        return None, low_since
    horizon = max(1, int(policy['prediction_window']) // interval)
    predictor = ar.Predictor(
        order=CONF.elastic.model_order, observation=steps,
        horizon=horizon, headroom=float(policy.get('headroom', 0)),
        quantum=step_size or 1, floor=int(policy['min_mb']),
        ceiling=int(policy['max_mb']))
    try:
        prediction = predictor.predict(usage_grid(rows, now, interval,
                                                  steps))
    except ar.NotEnoughHistory:
        return None, low_since
    size = int(size_mb)
    target = prediction.provision
    decision = Decision(
        kind=GROW if target > size else SHRINK, size_mb=size,
        target_mb=target, peak_mb=prediction.peak,
        order=prediction.order, samples=len(rows),
        prediction_window=int(policy['prediction_window']),
        headroom=float(policy.get('headroom', 0)))
    if target > size:
        return decision, None
    if target == size:
        return None, None
    # Low: revoking is rare, only after the prediction stayed low.
    if low_since is None:
        return None, now
    if (now - low_since).total_seconds() < CONF.elastic.shrink_hysteresis:
        return None, low_since
    return decision, low_since


# The marks of the resize machine (states.RESIZE_MACHINE) in the details
# of the lease's live attachment, written before a resize touches
# anything outside the database and removed when it ends: a conductor
# that dies in between leaves them for the next pass, which rolls an
# interrupted grow back and finishes an interrupted shrink.
PENDING_GROW = states.RESIZE_MARKS[states.RESIZE_GROWING]
PENDING_SHRINK = states.RESIZE_MARKS[states.RESIZE_SHRINKING]
# The event that sets (with extents) or clears (without) each mark.
_MARK_EVENTS = {PENDING_GROW: (states.RESIZE_GROW, states.RESIZE_GROW_ENDED),
                PENDING_SHRINK: (states.RESIZE_SHRINK,
                                 states.RESIZE_SHRINK_ENDED)}


def _live_attachment(context, lease):
    for row in db_api.attachment_list(
            context, lease.id, states_=states.LIVE_ATTACHMENT_STATES):
        if row.host_id == lease.host_id:
            return row
    return None


def _pending(context, lease):
    """{PENDING_GROW: [extent uuids], PENDING_SHRINK: [...]} left by an
    interrupted resize of ``lease``; empty when none."""
    row = _live_attachment(context, lease)
    details = (row.details or {}) if row is not None else {}
    return {key: details[key] for key in (PENDING_GROW, PENDING_SHRINK)
            if details.get(key)}


def _mark(context, lease, key, uuids):
    """Set (or with ``uuids`` None, clear) a pending mark: the event of
    the resize machine that does it, refused (StateChangeRefused) when
    the attachment's resize state does not allow it."""
    row = _live_attachment(context, lease)
    if row is None:
        return
    start, end = _MARK_EVENTS[key]
    db_api.attachment_change_details(context, row.id, None,
                                     resize_event=start if uuids else end,
                                     marked=uuids)


def _cxl(lease):
    """The memory pool of ``lease`` when it is a CXL pool, else None."""
    pool = lease.memory_pool
    return pool if pool is not None and media.is_cxl(pool) else None


def _cxl_refusal(lease):
    """Why CXL ``lease`` cannot be resized as it is bound (not in
    virtio-mem mode, or its fabric composes its chunks now), in words for
    its action; None when it can."""
    refusal = rules.elastic_cxl_refusal(lease.memory_pool,
                                        lease.attach_mode)
    if refusal is None:
        return None
    # The rule speaks of a request; here the lease is as it was made.
    return 'it cannot be resized: %s.' % refusal.split(': ', 1)[-1]


def _partial(lease):
    """The keyword of an agent call that attaches or detaches some of
    the chunks of a CXL lease in virtio-mem mode (agent RPC 1.4)."""
    return {'partial': True} if _cxl(lease) else {}


class _ShrankLess(object):
    """A shrink that gave back fewer chunks than predicted (whole CXL
    regions only): done, with a note for its action."""

    def __init__(self, note):
        self.note = note


def _shrink_victims(lease, count, memory_details):
    """The extents a shrink of ``count`` extents gives back: the newest.

    A CXL lease's host holds its chunks as regions, one per device per
    attach (the bind, then each grow), and gives a region back whole
    only. So for CXL the victims are whole regions, newest first, as many
    as fit in ``count`` (fewer extents than asked, or none, when the
    newest region is larger); ``memory_details`` ({extent uuid: what the
    host answered}, from the live attachment) names each chunk's region.
    A chunk the host named no region for counts as a region of its own.
    """
    ordered = sorted(lease.extents, key=lambda e: e.index)
    if not _cxl(lease):
        return ordered[-count:] if count else []
    regions = {}
    for extent in ordered:
        facts = (memory_details or {}).get(extent.uuid) or {}
        key = ((facts.get('cxl_device'), facts.get('region'))
               if facts.get('region') else ('extent', extent.uuid))
        regions.setdefault(key, []).append(extent)
    victims = []
    # Newest region first: the one holding the newest chunk.
    for chunks in sorted(regions.values(),
                         key=lambda group: -max(e.index for e in group)):
        if len(victims) + len(chunks) > count:
            break
        victims.extend(chunks)
    return sorted(victims, key=lambda e: e.index)


class ElasticResizer(object):

    def __init__(self, manager):
        self.manager = manager

    @property
    def host(self):
        return self.manager.host

    @property
    def flows(self):
        return self.manager.flows

    # ------------------------------------------------------------ pass

    def run(self, context, now=None):
        """One pass over the bound elastic leases; the futures of the
        resizes it started (tests wait for them).

        The pass predicts first, from the listed rows and the usage
        samples of every lease read in bulk, and takes the reservation
        (and reads the lease whole) only of the leases whose prediction
        asks for something: a grow, a shrink, a change of the start of a
        low prediction, or a resize cut short to settle. Under the
        reservation everything is decided again on the lease as it is
        then (the listing may be stale: a lease unbound or resized since
        is passed by, or decided for as it is now). A pass thus costs a
        few queries and one prediction per lease, not a reservation and
        reads per lease.
        """
        now = now or utils.utcnow()
        refs = db_api.elastic_lease_refs(context)
        interval = CONF.elastic.sample_interval
        futures = []
        for begin in range(0, len(refs), db_api.BULK_IDS):
            chunk = refs[begin:begin + db_api.BULK_IDS]
            since = min(_window_start(ref.elastic, now, interval)
                        for ref in chunk)
            ids = [ref.id for ref in chunk]
            samples = db_api.usage_windows(context, ids, since, now)
            attachments = db_api.live_attachment_details(context, ids)
            for ref in chunk:
                try:
                    wanted = self._wants_task(
                        ref, samples.get(ref.id, ()),
                        attachments.get(ref.id, ()), now)
                except Exception:
                    # Whatever fails here fails again under the
                    # reservation, where it is logged for the lease.
                    wanted = True
                if not wanted:
                    continue
                try:
                    future = self.act.for_lease(context, ref, now=now)
                except Exception:
                    # One lease must not stop the pass over the others.
                    LOG.exception('Elastic resizing failed on lease %s',
                                  ref.uuid)
                    continue
                if future is not None:
                    futures.append(future)
        return futures

    def _wants_task(self, ref, samples, attachments, now):
        """Whether the listed lease ``ref`` (an elastic_lease_refs row),
        with its ``samples`` ((taken_at, used_mb) since the earliest
        window start) and its live ``attachments`` ((host_id, details)),
        needs its reservation taken: False exactly when deciding under
        the reservation would do nothing, on the lease as listed."""
        if ref.status != states.BOUND or not ref.elastic or \
                ref.host_id is None:
            return False
        for host_id, details in attachments:
            if host_id == ref.host_id and any(
                    (details or {}).get(key)
                    for key in (PENDING_GROW, PENDING_SHRINK)):
                return True
        start = _window_start(ref.elastic, now, CONF.elastic.sample_interval)
        rows = [_Sample(taken_at, used_mb) for taken_at, used_mb in samples
                if start <= taken_at <= now]
        decision, low_since = _outcome(
            ref.elastic, rows, now, ref.step_size, ref.memory_mb,
            ref.elastic_low_since)
        return decision is not None or low_since != ref.elastic_low_since

    @lease_task.lease_periodic(
        'elastic resizing',
        lister=lambda self, context: db_api.elastic_lease_refs(context))
    def act(self, task, context, now=None):
        """Predict for one bound elastic lease, under its reservation,
        and start its resize in a worker."""
        lease = task.lease
        if lease.status != states.BOUND or not lease.elastic or \
                lease.host is None:
            return None
        if _pending(context, lease):
            # A resize cut short (its conductor died): settle it
            # before predicting anything.
            task.spawn_after(self.manager.spawn, self.settle, task)
        else:
            decision = self.decide(context, task, now=now)
            if decision is None:
                return None
            task.spawn_after(self.manager.spawn, self.resize, task,
                             decision)

    def consider(self, context, ref, now=None):
        """Predict for one lease (``ref``: an elastic_lease_refs row)
        under its reservation and start its resize in a worker; the
        worker's future, or None."""
        return self.act.for_lease(context, ref, now=now)

    def decide(self, context, task, now=None):
        """The Decision for the task's lease, or None to leave it. Keeps
        the start of a low prediction (elastic_low_since) up to date."""
        lease = task.lease
        now = now or utils.utcnow()
        start = _window_start(lease.elastic, now,
                              CONF.elastic.sample_interval)
        rows = [row for row in db_api.usage_list(context, lease.id,
                                                 since=start)
                if row.taken_at <= now]
        decision, low_since = _outcome(
            lease.elastic, rows, now, lease.memory_pool.step_size,
            lease.memory_mb, lease.elastic_low_since)
        if low_since != lease.elastic_low_since:
            task.set_low_since(low_since)
        return decision

    def settle(self, task):
        """Finish what an interrupted resize of the task's lease left (in
        the worker holding the lease's reservation): a grow is rolled
        back (its extents may not have reached the host), a shrink is
        completed (its extents may already be detached)."""
        context, lease_id = task.context, task.lease_id
        lease = task.reload()
        pending = _pending(context, lease)
        grow = pending.get(PENDING_GROW) or []
        shrink = pending.get(PENDING_SHRINK) or []
        db_api.action_start(
            context, lease_id, ACTION,
            message='Settling a resize interrupted by a conductor that '
                    'stopped: %s.' % ', '.join(
                        what for what in (
                            'taking back %d extent(s) of a grow' % len(grow)
                            if grow else '',
                            'finishing the release of %d extent(s) of a '
                            'shrink' % len(shrink) if shrink else '')
                        if what))
        problems = []
        if grow:
            undo_problems, settled = self._undo_grow(task, grow)
            problems += undo_problems
            if settled:
                _mark(context, lease, PENDING_GROW, None)
        if shrink:
            victims = [e for e in lease.extents if e.uuid in set(shrink)]
            try:
                self.flows.call_agent(
                    context, lease.host.name,
                    'detaching %d extent(s) on host %s' % (
                        len(victims), lease.host.name),
                    self.flows.agents.detach_memory,
                    lease_flows.lease_view(lease),
                    [lease_flows.extent_view(lease, e) for e in victims],
                    lease.attach_mode, lease.instance_uuid,
                    **_partial(lease))
            except lease_flows.StepFailed as exc:
                problems.append(exc.message)
                if not exc.unreachable:
                    # The host keeps using them: the shrink is off.
                    _mark(context, lease, PENDING_SHRINK, None)
            else:
                problems += self._finish_shrink(task, shrink)
        db_api.action_finish(
            context, lease_id, ACTION, 'error' if problems else 'success',
            message=('Not all of it could be settled (%s); the lease holds '
                     'those extents until it is deleted.' %
                     '; '.join(problems)) if problems else None)
        return task.reload().memory_mb

    # ------------------------------------------------------------ resize

    def resize(self, task, decision):
        """Grow or shrink the task's lease (in the worker holding its
        reservation); the lease's memory_mb afterwards."""
        context, lease_id = task.context, task.lease_id
        db_api.action_start(context, lease_id, ACTION,
                            message=decision.describe())
        started = time.monotonic()
        try:
            if decision.kind == GROW:
                message = self._grow(task, decision)
            else:
                message = self._shrink(task, decision)
        except Exception as exc:
            LOG.exception('Resizing lease %s failed', lease_id)
            message = ('%s Kept at %d MiB: the resize failed because of an '
                       'internal error (%s); see the conductor log.' % (
                           decision.describe(), decision.size_mb,
                           type(exc).__name__))
        done = None
        if isinstance(message, _ShrankLess):
            done, message = message.note, None
        failed = message is not None
        db_api.action_finish(
            context, lease_id, ACTION, 'error' if failed else 'success',
            message=message or '%s Done in %.1f s.%s' % (
                decision.describe(), time.monotonic() - started,
                ' ' + done if done else ''))
        lease = task.reload()
        if not failed:
            task.set_low_since(None)
        return lease.memory_mb

    def _kept(self, decision, why):
        return '%s Kept at %d MiB: %s' % (decision.describe(),
                                          decision.size_mb, why)

    def _grow(self, task, decision):
        """None when grown, else the message of a refused grow."""
        context, lease_id = task.context, task.lease_id
        before = task.reload()
        cxl = _cxl(before)
        if cxl:
            refusal = _cxl_refusal(before)
            if refusal:
                return self._kept(decision, refusal)
        try:
            new = allocator.grow_memory(context, lease_id,
                                        decision.amount_mb)
        except exception.InsufficientCapacity as exc:
            LOG.warning('Elastic lease %(lease)s stays at %(size)d MiB: '
                        '%(why)s', {'lease': lease_id,
                                    'size': decision.size_mb,
                                    'why': exc.message})
            return self._kept(decision, exc.message + '.')
        # Its new extents: read again for whoever looks next.
        task.mark_stale()
        try:
            placement_claims.update_claim(task)
        except Exception as exc:
            LOG.warning('Placement refused to grow the allocation of lease '
                        '%(lease)s: %(err)s', {'lease': lease_id,
                                               'err': exc})
            allocator.shrink_memory(context, lease_id, new)
            self._rewrite_placement(task)
            return self._kept(decision, 'Placement has no room for more on '
                                        'the lease\'s pool.')
        lease = task.reload()
        _mark(context, lease, PENDING_GROW, new)
        if cxl:
            return self._grow_cxl(task, new, decision)
        extents = [e for e in lease.extents if e.uuid in set(new)]
        host = lease.host
        try:
            portals = {e.uuid: self.flows._export(context, lease, e, host)
                       for e in extents}
            lease = task.reload()
            extents = [e for e in lease.extents if e.uuid in set(new)]
            views = [lease_flows.extent_view(lease, e,
                                             portal=portals.get(e.uuid),
                                             credentials=True)
                     for e in extents]
            attached = self.flows.call_agent(
                context, host.name,
                'attaching %d more MiB on host %s' % (decision.amount_mb,
                                                      host.name),
                self.flows.agents.attach_memory,
                lease_flows.lease_view(lease), views,
                lease.attach_mode, lease.instance_uuid) or {}
        except lease_flows.StepFailed as exc:
            problems, _settled = self._undo_grow(task, new)
            _mark(context, lease, PENDING_GROW, None)
            why = '%s.' % exc.message
            if problems:
                why += (' Not all of the new extents could be taken back '
                        '(%s); the lease holds them until it is deleted.'
                        % '; '.join(problems))
            return self._kept(decision, why)
        self._record_attached(context, lease, attached, add=True,
                              clear=PENDING_GROW)
        return None

    def _grow_cxl(self, task, new, decision):
        """The rest of a grow of a CXL lease in virtio-mem mode, once its
        new chunks are claimed (in the database and in Placement) and
        marked: make the devices of chunks on a device the lease had none
        of reachable from the host (the same fabric step as a bind), have
        the agent make their regions and raise the guest device's
        requested size by their total (nothing is exported: the host
        reaches CXL memory itself), then count them on the host's
        MEMORY_MB and in the guest's hold. Any failure is undone in the
        reverse order."""
        context, lease = task.context, task.lease
        extents = [e for e in lease.extents if e.uuid in set(new)]
        host = lease.host
        added = sum(e.size_mb for e in extents)
        try:
            locators = self._reach(context, lease, extents)
            views = self.flows.cxl_extent_views(lease, extents, locators)
            attached = self.flows.call_agent(
                context, host.name,
                'plugging %d more MiB into instance %s on host %s' % (
                    added, lease.instance_uuid, host.name),
                self.flows.agents.attach_memory,
                lease_flows.lease_view(lease), views, lease.attach_mode,
                lease.instance_uuid, partial=True) or {}
            try:
                # Only now is the memory online on the host (and the
                # guest's): count it there, and hold it for the guest.
                host_memory.follow(context, lease, lease.memory_mb)
            except exception.ComposableException as exc:
                raise lease_flows.StepFailed(
                    'counting the new memory on compute node %s: %s' % (
                        host.name, exc.message))
        except lease_flows.StepFailed as exc:
            problems, settled = self._undo_grow(task, new)
            why = '%s.' % exc.message
            if not settled:
                why += (' The host has not confirmed that it let the new '
                        'chunks go (%s): the lease holds them, and the '
                        'next pass asks it again before they go back to '
                        'the pool.' % '; '.join(problems))
            else:
                _mark(context, lease, PENDING_GROW, None)
                if problems:
                    why += (' Taken back, but: %s.' % '; '.join(problems))
            return self._kept(decision, why)
        self._record_attached(context, lease, attached, add=True,
                              clear=PENDING_GROW)
        return None

    def _reach(self, context, lease, extents):
        """{device: locator} reaching the devices of ``extents`` (new
        chunks of CXL ``lease``) from its host: the attachment's, plus
        those made reachable now for devices it had no chunk of. Recorded
        in the attachment before the host is asked (as a bind does), so
        that an unbind takes them back."""
        att = _live_attachment(context, lease)
        details = dict((att.details or {}) if att is not None else {})
        locators = dict(details.get('cxl_locators') or {})
        missing = [e for e in extents
                   if e.memory_node.name not in locators]
        if missing:
            locators.update(self.flows.cxl_reach(lease, lease.host,
                                                 missing))
            if att is not None:
                db_api.attachment_change_details(
                    context, att.id,
                    lambda now: dict(now, cxl_locators=locators))
        return locators

    def _let_go_of_devices(self, context, lease, gone, problems):
        """After the host destroyed the regions of chunks ``gone`` (uuids)
        of CXL ``lease``: the devices the lease keeps no chunk on are
        taken from the host by the fabric (nothing to do on a local
        back end) and dropped from the attachment's locators."""
        gone = set(gone)
        kept = {e.memory_node.name for e in lease.extents
                if e.uuid not in gone}
        devices = {e.memory_node.name for e in lease.extents
                   if e.uuid in gone} - kept
        att = _live_attachment(context, lease)
        if not devices or att is None:
            return
        try:
            self.flows._unbind_cxl_memory(lease, lease.host, att.details,
                                          devices=devices)
        except lease_flows.StepFailed as exc:
            problems.append(exc.message)
            return

        def change(details):
            locators = dict(details.get('cxl_locators') or {})
            for name in devices:
                locators.pop(name, None)
            details['cxl_locators'] = locators
            return details

        db_api.attachment_change_details(context, att.id, change)

    def _undo_grow(self, task, new):
        """Take back extents of a failed grow: (what could not be undone,
        whether it is settled). The agent is asked to detach them first: a
        call that timed out may still have attached them. A network
        lease's extents are then unexported, which cuts the host off
        whatever it did; a CXL lease's chunks stay with the lease (not
        settled) until the host confirms that it destroyed their
        regions."""
        context, lease_id = task.context, task.lease_id
        lease = task.reload()
        if _cxl(lease):
            return self._undo_grow_cxl(task, new)
        extents = [e for e in lease.extents if e.uuid in set(new)]
        problems = []
        host = lease.host
        if host is not None:
            try:
                self.flows.call_agent(
                    context, host.name,
                    'detaching the new extents on host %s' % host.name,
                    self.flows.agents.detach_memory,
                    lease_flows.lease_view(lease),
                    [lease_flows.extent_view(lease, e) for e in extents],
                    lease.attach_mode, lease.instance_uuid)
            except lease_flows.StepFailed as exc:
                # Whatever the agent did not attach is unexported below,
                # which cuts it off anyway.
                LOG.warning('Lease %(lease)s: %(err)s', {
                    'lease': lease.uuid, 'err': exc.message})
        given_back = self._release_extents(context, lease, extents, problems)
        if given_back:
            allocator.shrink_memory(context, lease_id, given_back)
            self._rewrite_placement(task)
        return problems, True

    def _undo_grow_cxl(self, task, new):
        context, lease = task.context, task.lease
        extents = [e for e in lease.extents if e.uuid in set(new)]
        host = lease.host
        if not extents:
            return [], True
        try:
            self.flows.call_agent(
                context, host.name,
                'taking the new chunks out of instance %s on host %s' % (
                    lease.instance_uuid, host.name),
                self.flows.agents.detach_memory,
                lease_flows.lease_view(lease),
                [lease_flows.extent_view(lease, e) for e in extents],
                lease.attach_mode, lease.instance_uuid, partial=True)
        except lease_flows.StepFailed as exc:
            # Its regions may map the chunks: they must not go to anyone
            # else before the host destroyed them.
            LOG.warning('Lease %(lease)s: %(err)s', {
                'lease': lease.uuid, 'err': exc.message})
            return [exc.message], False
        problems = []
        # Back to what the host counted before the grow (nothing changes
        # when the grow did not get that far).
        self._host_lets_go(context, lease, extents, problems)
        self._let_go_of_devices(context, lease, new, problems)
        # Nothing to unexport or scrub: the host erased the chunks when
        # it destroyed their regions.
        allocator.shrink_memory(context, lease.id, [e.uuid for e in extents])
        self._rewrite_placement(task)
        return problems, True

    def _release_extents(self, context, lease, extents, problems):
        """Unexport and scrub ``extents``; the uuids of those done (the
        others stay with the lease, marked, for its delete to finish)."""
        done = []
        for extent in extents:
            node = extent.memory_node.name
            try:
                if (extent.export_state == states.EXTENT_EXPORTED or
                        extent.chap_username):
                    self.flows.call_agent(
                        context, node,
                        'unexporting extent %d on memory node %s' % (
                            extent.index, node),
                        self.flows.agents.unexport_extent,
                        lease_flows.extent_view(lease, extent))
                    db_api.extent_transition(context, extent.id,
                                             states.EXTENT_UNEXPORT,
                                             lease_flows.CLEAR_EXPORT)
                    self.flows.call_agent(
                        context, node,
                        'scrubbing extent %d on memory node %s' % (
                            extent.index, node),
                        self.flows.agents.scrub_extent,
                        lease_flows.extent_view(lease, extent))
                    db_api.extent_transition(context, extent.id,
                                             states.EXTENT_SCRUB,
                                             lease_flows.CLEAR_EXPORT)
            except lease_flows.StepFailed as exc:
                problems.append(exc.message)
                continue
            done.append(extent.uuid)
        return done

    def _rewrite_placement(self, task):
        """Placement's allocation of the task's lease made to hold what
        the allocator just left it (best effort)."""
        task.mark_stale()
        try:
            placement_claims.update_claim(task)
        except Exception as exc:
            # The periodic Placement pass makes it match the database.
            LOG.warning('Could not update the Placement allocation of '
                        'lease %(lease)s (%(err)s); the periodic Placement '
                        'pass will.', {'lease': task.lease_id, 'err': exc})

    def _shrink(self, task, decision):
        """None when shrunk, else the message of a refused shrink."""
        context = task.context
        lease = task.reload()
        step = lease.memory_pool.step_size or 1
        count = decision.amount_mb // step
        cxl = _cxl(lease)
        if cxl:
            refusal = _cxl_refusal(lease)
            if refusal:
                return self._kept(decision, refusal)
        # The newest extents go first: the oldest were attached first and
        # Linux fills swap devices of equal priority round-robin anyway.
        live = _live_attachment(context, lease)
        victims = _shrink_victims(
            lease, count, ((live.details or {}).get('memory')
                           if live is not None else None))
        if count and not victims:
            return self._kept(
                decision, 'the host gives CXL memory back a region at a '
                          'time, and the newest region of the lease is '
                          'larger than %d MiB.' % decision.amount_mb)
        if not count or len(victims) >= len(lease.extents):
            return self._kept(decision, 'a lease keeps at least one extent.')
        shrank_less = None
        if len(victims) < count:
            # Whole regions only: the shrink is smaller than predicted,
            # and the next pass predicts again from what is left.
            shrank_less = _ShrankLess(
                'Only %d MiB went, to %d MiB: the host gives CXL memory '
                'back a region at a time.' % (
                    len(victims) * step,
                    decision.size_mb - len(victims) * step))
            decision = dataclasses.replace(
                decision,
                target_mb=decision.size_mb - len(victims) * step)
        host = lease.host
        _mark(context, lease, PENDING_SHRINK, [e.uuid for e in victims])
        try:
            # CXL in virtio-mem mode: the guest gives the memory back
            # first (its device's requested size lowered, a bounded
            # wait), then the host offlines, erases and destroys only
            # those regions. The host's MEMORY_MB and the guest's hold
            # are lowered only once that is done (_finish_shrink).
            self.flows.call_agent(
                context, host.name,
                ('taking %d MiB out of instance %s on host %s' % (
                    decision.amount_mb, lease.instance_uuid, host.name))
                if cxl else
                'detaching %d MiB on host %s' % (decision.amount_mb,
                                                 host.name),
                self.flows.agents.detach_memory, lease_flows.lease_view(lease),
                [lease_flows.extent_view(lease, e) for e in victims],
                lease.attach_mode, lease.instance_uuid, **_partial(lease))
        except lease_flows.StepFailed as exc:
            if exc.unreachable:
                # It may have let them go all the same: the next pass
                # asks again (settle) before anything else.
                return self._kept(decision, '%s; asked again on the next '
                                            'pass.' % exc.message)
            # Refused (their pages do not fit back in the host's
            # memory): the extents stay, attached as they were.
            _mark(context, lease, PENDING_SHRINK, None)
            return self._kept(decision, '%s.' % exc.message)
        problems = self._finish_shrink(task, [e.uuid for e in victims])
        if problems and cxl:
            return ('%s The guest and the host let the memory go, but: %s.'
                    % (decision.describe(), '; '.join(problems)))
        if problems:
            return ('%s Detached, but not every extent could be unexported '
                    'or scrubbed (%s); the lease holds those until its '
                    'delete finishes them.' % (decision.describe(),
                                               '; '.join(problems)))
        return shrank_less

    def _host_lets_go(self, context, lease, extents, problems):
        """Drop ``extents`` (CXL chunks the host no longer has) from the
        live attachment and lower the host's MEMORY_MB and the guest's
        hold by their size; a failure of the latter is logged and added
        to ``problems``."""
        self._record_attached(context, lease, {e.uuid: None
                                               for e in extents}, add=False)
        try:
            host_memory.follow(context, lease, lease.memory_mb - sum(
                e.size_mb for e in extents))
        except exception.ComposableException as exc:
            LOG.warning('Lease %(lease)s: %(err)s', {
                'lease': lease.uuid, 'err': exc.message})
            problems.append(exc.message)

    def _finish_shrink(self, task, uuids):
        """Unexport, scrub and give back extents the host let go of;
        what could not be done."""
        context, lease_id = task.context, task.lease_id
        lease = task.reload()
        victims = [e for e in lease.extents if e.uuid in set(uuids)]
        problems = []
        if _cxl(lease):
            # If the host's count cannot follow, the memory has left the
            # host all the same: nova-compute's periodic run sets the
            # total from MemTotal.
            self._host_lets_go(context, lease, victims, problems)
            self._let_go_of_devices(context, lease, uuids, problems)
        else:
            self._record_attached(context, lease, {e.uuid: None
                                                   for e in victims},
                                  add=False)
        # A CXL chunk has nothing to unexport or scrub (never exported:
        # the host erased it when it destroyed its region): given back
        # as it is.
        given_back = self._release_extents(context, lease, victims, problems)
        if given_back:
            allocator.shrink_memory(context, lease_id, given_back)
            self._rewrite_placement(task)
        _mark(context, lease, PENDING_SHRINK, None)
        return problems

    @staticmethod
    def _record_attached(context, lease, extents, add, clear=None):
        """Add (or drop) ``extents`` ({uuid: host-side facts}) in the
        details of the lease's live attachment on its host, as they are
        when written (a guest's swap-on report noted meanwhile is kept);
        ``clear``: a pending mark removed in the same write (the event
        of the resize machine that ends it)."""
        def change(details):
            memory = dict(details.get('memory') or {})
            for uuid, facts in extents.items():
                if add:
                    memory[uuid] = facts
                else:
                    memory.pop(uuid, None)
            details['memory'] = memory
            return details

        for row in db_api.attachment_list(
                context, lease.id, states_=states.LIVE_ATTACHMENT_STATES):
            if row.host_id != lease.host_id:
                continue
            db_api.attachment_change_details(
                context, row.id, change,
                resize_event=_MARK_EVENTS[clear][1] if clear else None)
