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

"""Lease claims and releases written to Placement in batches.

One conductor process has one :class:`BatchWriter`. Claims (a lease's new
allocation) and releases (the removal of an allocation this writer made)
queue in it; one thread of its own writes everything queued with one
``POST /allocations`` (many consumers, one transaction, one generation
bump per provider), while the next batch gathers behind it. Under load a
batch holds as many claims as arrived during the previous request, so the
Placement calls per lease fall well under one; alone, a claim costs one
request (plus one usage read, below) and waits for nothing.

Why this keeps Placement from over-committing:

* composable's own allocations never exceed a pool: the allocator claimed
  each lease in the database, under the pool's row lock, before it is
  queued here; a batch carries only what the database already holds.
* Placement refuses a batch in which any consumer does not fit (Nova's
  instances hold the rest): the claims of that batch are then written one
  by one (:class:`ClaimAlone`), so only those that do not fit fail.
* Placement's own race (two concurrent writes on one provider: the loser
  retries inside a transaction that still holds its first attempt, and
  may end over capacity) needs a second writer: another conductor, or
  Nova's scheduler. The writer reads the usages of the providers a batch
  claimed on once after it (one request per provider per batch, not per
  lease) and compares them with the capacity the conductor knows from the
  pool; when they exceed it the batch's claims on that provider are
  withdrawn (one request) and written one by one under the per-lease
  check.

A generation conflict (a consumer changed behind the writer's back, or
the provider kept changing beyond Placement's own retries) makes the
batch go again once, after a short pause; a second conflict sends its
claims one by one, each reading what it needs. When Placement cannot be
reached or answers 5xx, the batch is tried again for
``unavailable_wait`` seconds (the leases wait), then every claim of it
fails with PlacementUnavailable (the caller rolls the lease back with a
fault saying so) and releases are left to the periodic pass.

A release is queued only when this writer knows the consumer's
generation (it made the allocation and nobody changed it since); any
other release is one ``DELETE /allocations/{consumer}``. A release waits
for its batch like a claim, so a lease's allocation is gone when its
delete answers, as it was with one request per lease.
"""

import os
import threading
import time

from oslo_log import log as logging

from composable.conductor.placement import client as pclient

LOG = logging.getLogger(__name__)

MV_BATCH = pclient.MV_ALLOCATIONS


class ClaimAlone(Exception):
    """The batch could not take this claim: write it on its own (the
    per-lease path reads what it needs, repairs the pools and checks)."""


class _Entry(object):
    __slots__ = ('consumer', 'resources', 'capacity', 'project_id',
                 'user_id', 'generation', 'release', 'done', 'error')

    def __init__(self, consumer, resources=None, capacity=None,
                 project_id=None, user_id=None, generation=None,
                 release=False):
        self.consumer = consumer
        self.resources = resources or {}
        self.capacity = capacity or {}
        self.project_id = project_id
        self.user_id = user_id or project_id
        self.generation = generation
        self.release = release
        self.done = threading.Event()
        self.error = None

    def body(self):
        return {'allocations': {rp: {'resources': dict(res)}
                                for rp, res in self.resources.items()
                                if res and not self.release},
                'consumer_generation': self.generation,
                'project_id': self.project_id,
                'user_id': self.user_id,
                'consumer_type': pclient.CONSUMER_TYPE}


def _is_conflict(err):
    return (isinstance(err, pclient.PlacementError) and err.status == 409
            and err.placement_code == pclient.CONCURRENT_UPDATE)


def _is_unavailable(err):
    return isinstance(err, pclient.PlacementUnavailable) or (
        isinstance(err, pclient.PlacementError) and err.status is not None
        and err.status >= 500)


class BatchWriter(object):

    def __init__(self, get_client, max_batch=100, unavailable_wait=5.0,
                 conflict_pause=0.05, wait_timeout=300, provider_lock=None):
        self.get_client = get_client
        self.max_batch = max(1, max_batch)
        self.unavailable_wait = unavailable_wait
        self.conflict_pause = conflict_pause
        self.wait_timeout = wait_timeout
        # Held around each batch write and check: the per-lease path takes
        # the same locks, so this conductor never races itself.
        self.provider_lock = provider_lock
        self._cond = threading.Condition()
        self._pending = []
        self._closed = False
        self._thread = None
        self._pid = None
        # consumer -> (generation, project, user) of allocations this
        # writer made and nobody is known to have changed since.
        self._known = {}
        self._known_lock = threading.Lock()
        self.stats = {'batches': 0, 'requests': 0, 'claims': 0,
                      'releases': 0, 'alone': 0, 'withdrawn': 0}

    # ------------------------------------------------------------ callers

    def claim(self, consumer, resources, capacity, project_id, user_id):
        """Write ``consumer``'s allocation ({rp: {rc: amount}}), a new
        consumer, in the next batch, and wait for it. ``capacity`` is
        {rp: {rc: what the pool can hold}}. Raises ClaimAlone when it
        must be written on its own, PlacementUnavailable (or another
        PlacementError) when it could not be written."""
        entry = _Entry(consumer, resources, capacity, project_id, user_id)
        self._submit(entry)
        if not entry.done.wait(self.wait_timeout):
            raise pclient.PlacementUnavailable(
                reason='no answer to a batched claim in %d s' %
                self.wait_timeout)
        if entry.error is not None:
            raise entry.error

    def release(self, consumer):
        """Remove ``consumer``'s allocation in the next batch if this
        writer made it, and wait for it (True: done, or left to the
        periodic pass and logged); else False: the caller deletes it
        itself."""
        with self._known_lock:
            known = self._known.pop(consumer, None)
        if known is None:
            return False
        generation, project_id, user_id = known
        entry = _Entry(consumer, project_id=project_id, user_id=user_id,
                       generation=generation, release=True)
        self._submit(entry)
        if not entry.done.wait(self.wait_timeout):
            LOG.warning('Could not delete the Placement allocations of '
                        'released lease %(lease)s (no answer in %(s)d s); '
                        'the periodic Placement pass will delete them.',
                        {'lease': consumer, 's': self.wait_timeout})
        return True

    def forget(self, consumer):
        """Someone else changed ``consumer``'s allocation (a resize): its
        generation is no longer known here."""
        with self._known_lock:
            self._known.pop(consumer, None)

    def close(self):
        """Stop the writer's thread once what is queued is written."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    # ------------------------------------------------------------ thread

    def _submit(self, entry):
        with self._cond:
            if self._thread is None or self._pid != os.getpid() or (
                    not self._thread.is_alive()):
                self._pid = os.getpid()
                self._thread = threading.Thread(
                    target=self._run, name='placement-batch', daemon=True)
                self._thread.start()
            self._pending.append(entry)
            self._cond.notify()

    def _take(self):
        with self._cond:
            while not self._pending:
                if self._closed:
                    return None
                self._cond.wait()
            batch, seen = [], set()
            for entry in list(self._pending):
                # One consumer appears once per request; a second entry
                # of it waits for the next batch.
                if entry.consumer in seen or len(batch) >= self.max_batch:
                    break
                seen.add(entry.consumer)
                batch.append(entry)
            del self._pending[:len(batch)]
            return batch

    def _run(self):
        while True:
            batch = self._take()
            if batch is None:
                return
            try:
                self._write(batch)
            except Exception as exc:  # never let the thread die
                LOG.exception('Writing a batch of %d Placement claims '
                              'failed', len(batch))
                for entry in batch:
                    if not entry.done.is_set():
                        entry.error = pclient.PlacementError(
                            status=None, method='POST', url='/allocations',
                            detail=str(exc))
                        entry.done.set()

    # ------------------------------------------------------------ writing

    def _locked(self, providers):
        if self.provider_lock is None:
            import contextlib
            return contextlib.nullcontext()
        return self.provider_lock(providers)

    def _post(self, client, batch):
        self.stats['requests'] += 1
        client._call('POST', '/allocations', MV_BATCH,
                     body={e.consumer: e.body() for e in batch}, ok=(204,))

    def _write(self, batch):
        client = self.get_client()
        providers = set()
        for entry in batch:
            providers.update(entry.resources)
        self.stats['batches'] += 1
        deadline = time.monotonic() + self.unavailable_wait
        conflicts = 0
        delay = 0.2
        while True:
            try:
                with self._locked(providers):
                    self._post(client, batch)
                    over = self._checked(client, batch)
                break
            except pclient.PlacementError as err:
                if _is_conflict(err) and not conflicts:
                    conflicts += 1
                    LOG.info('Generation conflict on a batch of %d '
                             'Placement claims; writing it again.',
                             len(batch))
                    time.sleep(self.conflict_pause)
                    continue
                if _is_unavailable(err) and time.monotonic() < deadline:
                    LOG.warning('Placement did not take a batch of %d '
                                'claims (%s); trying again.', len(batch),
                                err)
                    time.sleep(delay)
                    delay = min(delay * 2, 1.0)
                    continue
                self._failed(client, batch, err)
                return
        self._written(batch, over)

    def _checked(self, client, batch):
        """_check, where a failure to read or withdraw is logged: the batch
        is written, and Placement checked its capacity for it; the check
        only guards against a rare race, which the periodic pass reports
        too."""
        try:
            return self._check(client, batch)
        except Exception as exc:
            LOG.warning('Could not check the usages of Placement after a '
                        'batch of %d claims: %s', len(batch), exc)
            return set()

    def _check(self, client, batch):
        """Consumers of ``batch`` withdrawn because a provider they claimed
        on holds more than its capacity now."""
        capacity = {}
        for entry in batch:
            for rp, classes in entry.capacity.items():
                capacity.setdefault(rp, {}).update(classes)
        withdraw = []
        for rp in sorted(capacity):
            self.stats['requests'] += 1
            usages = client.get_usages(rp)
            if all(usages.get(rc, 0) <= cap
                   for rc, cap in capacity[rp].items()):
                continue
            LOG.warning('Placement provider %(rp)s holds %(used)s of '
                        '%(cap)s after a batch of claims (a concurrent '
                        'writer); withdrawing the batch\'s claims on it.',
                        {'rp': rp, 'used': usages, 'cap': capacity[rp]})
            withdraw.extend(e for e in batch
                            if not e.release and rp in e.resources)
        if withdraw:
            undo = [_Entry(e.consumer, project_id=e.project_id,
                           user_id=e.user_id, generation=1, release=True)
                    for e in withdraw]
            self.stats['withdrawn'] += len(undo)
            try:
                self._post(client, undo)
            except Exception as exc:
                # Each is written alone next: that path sees its
                # allocation, checks the usages again and withdraws it.
                LOG.warning('Could not withdraw %d claims in one request: '
                            '%s', len(undo), exc)
        return {e.consumer for e in withdraw}

    def _written(self, batch, withdrawn):
        with self._known_lock:
            for entry in batch:
                if entry.release:
                    self.stats['releases'] += 1
                    self._known.pop(entry.consumer, None)
                elif entry.consumer not in withdrawn:
                    self.stats['claims'] += 1
                    # A new consumer's generation after its first write.
                    self._known[entry.consumer] = (
                        1, entry.project_id, entry.user_id)
        for entry in batch:
            if entry.consumer in withdrawn:
                self.stats['alone'] += 1
                entry.error = ClaimAlone()
            entry.done.set()

    def _failed(self, client, batch, err):
        if _is_unavailable(err):
            LOG.error('Placement could not take a batch of %d claims '
                      'within %.0f s: %s', len(batch), self.unavailable_wait,
                      err)
        else:
            LOG.info('Placement refused a batch of %d claims (%s); writing '
                     'them one by one.', len(batch), err)
        for entry in batch:
            if entry.release:
                self._release_alone(client, entry, err)
            else:
                self.stats['alone'] += 1
                entry.error = ClaimAlone()
                if _is_unavailable(err):
                    entry.error = (
                        err if isinstance(err, pclient.PlacementUnavailable)
                        else pclient.PlacementUnavailable(
                            status=err.status, reason=str(err)))
            entry.done.set()

    def _release_alone(self, client, entry, err):
        if _is_unavailable(err):
            LOG.warning('Could not delete the Placement allocations of '
                        'released lease %(lease)s (%(err)s); the periodic '
                        'Placement pass will delete them.',
                        {'lease': entry.consumer, 'err': err})
            return
        try:
            self.stats['requests'] += 1
            client.delete_consumer(entry.consumer)
        except Exception as exc:
            LOG.warning('Could not delete the Placement allocations of '
                        'released lease %(lease)s (%(err)s); the periodic '
                        'Placement pass will delete them.',
                        {'lease': entry.consumer, 'err': exc})
