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

"""Group commit of lease creates and quick releases.

A create claims capacity under row locks on its pool and memory nodes (or
devices), and a quick release (a lease that was never bound) locks its
pools the same way. Those locks are held until the transaction commits,
and the commit waits for the database's durable log write. With many
small transactions, a pool's lock spends most of its time waiting for
commits, and that caps how many leases a pool can give out per second
whatever the CPUs could do.

So each conductor hands its creates and quick releases to a claim
thread, which runs those that arrived together in one transaction
(composable.db.allocation.claim_batch_once, the database layer's): a
lease that cannot be placed (or a release refused) changes nothing and
the others stand; one commit makes them all durable. A request that finds
the thread idle runs at once, alone: under light load nothing waits for a
batch to fill.

Failures stay per request: InsufficientCapacity records the lease in
alloc_failed in the same transaction; a refusal (404, 409, 400) is run
again alone to get its own answer. Requests need no savepoint (two round
trips each) because the allocator leaves nothing behind when it refuses:
a claim that does not fit is never made or is taken back, and a quick
release that finds the lease busy takes back what it gave. The exception
is a lease of memory *and* devices, whose memory is claimed before its
devices are found wanting: it runs in a savepoint. A lost race (a claim
made, then a memory node or device found changed under it) and anything
unexpected roll the whole transaction back, and every request of the
batch is run again alone (the allocator's own retries); so does a
deadlock, after which the batch is first run again.

One claim thread is a serial chain of database round trips, and with
busy CPUs it becomes the limit of the whole conductor. So a conductor has
two lanes, each a queue and a thread of its own: leases with memory
(which lock the memory pool, and the device pool too when they ask for
devices as well), and leases of devices only (which lock a device pool
only). Their transactions take different pool locks, so they overlap
instead of waiting for each other; neither lane ever waits for a lock
the other holds while holding one the other wants, as the device lane
never touches a memory pool. A release goes to the lane that created the
lease when this conductor remembers it, else to the memory lane: any
lane may release any lease correctly, the lane only decides what can
overlap. On SQLite, which locks the whole database, there is one lane.
"""

import collections
import queue
import threading

from oslo_log import log as logging

from composable.conductor.allocator import claims as allocator
from composable import conf
from composable.db import allocation
from composable.db import api as db_api

CONF = conf.CONF
LOG = logging.getLogger(__name__)

CREATE = allocation.BATCH_CREATE
RELEASE = allocation.BATCH_RELEASE


class _Request(object):
    def __init__(self, kind, context, args):
        self.kind = kind
        self.context = context
        self.args = args
        self.done = threading.Event()
        self.result = None
        self.error = None

    def finish(self, result=None, error=None):
        self.result, self.error = result, error
        self.done.set()

    def wait(self):
        self.done.wait()
        if self.error is not None:
            raise self.error
        return self.result


MEMORY_LANE = 'memory'
DEVICE_LANE = 'devices'

# How many lease uuids a conductor remembers the lane of (a lease is
# usually deleted soon after it was created, or bound and then released
# the long way, which needs no lane).
REMEMBERED_LEASES = 4096


def lane_of(values):
    """The lane of a create: devices-only leases have their own."""
    return MEMORY_LANE if values.get('memory_mb') else DEVICE_LANE


class ClaimBatcher(object):
    """The claim lanes of one conductor; ``create`` and ``release`` are
    called from the RPC threads and return what the allocator's
    create_and_allocate(want_document=True) and release_unbound_ident
    return."""

    def __init__(self, max_batch=None, lanes=None):
        self.max_batch = max_batch or CONF.allocator.claim_batch_size
        if lanes is None:
            lanes = CONF.allocator.claim_lanes
            if db_api.is_sqlite():
                lanes = 1
        names = [MEMORY_LANE, DEVICE_LANE][:max(1, min(2, lanes))]
        self.lanes = {name: ClaimLane(name, self.max_batch)
                      for name in names}
        self._remembered = collections.OrderedDict()
        self._remembered_lock = threading.Lock()

    def start(self):
        for lane in self.lanes.values():
            lane.start()

    def stop(self):
        for lane in self.lanes.values():
            lane.stop()

    @property
    def running(self):
        return all(lane.running for lane in self.lanes.values())

    def lane(self, name):
        """The lane ``name``, or the memory lane when there is one only."""
        return self.lanes.get(name) or self.lanes[MEMORY_LANE]

    # ------------------------------------------------------------ callers

    def create(self, context, values, action='create', check_fit=False):
        """See allocator.create_and_allocate."""
        lane = self.lane(lane_of(values))
        result = lane.create(context, values, action, check_fit=check_fit)
        if len(self.lanes) > 1:
            with self._remembered_lock:
                self._remembered[result[0]] = lane.name
                while len(self._remembered) > REMEMBERED_LEASES:
                    self._remembered.popitem(last=False)
        return result

    def release(self, context, ident, action='delete'):
        name = MEMORY_LANE
        if len(self.lanes) > 1:
            with self._remembered_lock:
                name = self._remembered.pop(ident, MEMORY_LANE)
        return self.lane(name).release(context, ident, action)


class ClaimLane(object):
    """One queue of creates and quick releases and the thread that runs
    them in batches."""

    def __init__(self, name, max_batch):
        self.name = name
        self.max_batch = max_batch
        self._queue = queue.Queue()
        self._thread = None
        self._lock = threading.Lock()

    def start(self):
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name='conductor-claims-%s' % self.name,
                    daemon=True)
                self._thread.start()

    def stop(self):
        with self._lock:
            thread, self._thread = self._thread, None
        if thread is not None:
            self._queue.put(None)
            thread.join()

    @property
    def running(self):
        return self._thread is not None

    def create(self, context, values, action='create', check_fit=False):
        if not self.running:
            return allocator.create_and_allocate(context, values, action,
                                                 want_document=True,
                                                 check_fit=check_fit)
        return self._submit(CREATE, context, (values, action, check_fit))

    def release(self, context, ident, action='delete'):
        if not self.running:
            return allocator.release_unbound_ident(context, ident, action)
        return self._submit(RELEASE, context, (ident, action))

    def _submit(self, kind, context, args):
        request = _Request(kind, context, args)
        self._queue.put(request)
        return request.wait()

    # ------------------------------------------------------------ thread

    def _run(self):
        while True:
            first = self._queue.get()
            if first is None:
                return
            batch = [first]
            stop = False
            while len(batch) < self.max_batch:
                try:
                    more = self._queue.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    stop = True
                    break
                batch.append(more)
            try:
                self._execute(batch)
            except Exception as exc:  # never lose a caller
                LOG.exception('Claim batch of %d failed', len(batch))
                for request in batch:
                    if not request.done.is_set():
                        request.finish(error=exc)
            if stop:
                return

    def _execute(self, batch):
        if len(batch) == 1:
            # Alone: its own transaction, no savepoint round trips.
            self._alone(batch[0])
            return
        try:
            outcomes = db_api.retry_on_deadlock(allocation.claim_batch_once)(
                [(request.kind, request.context, request.args)
                 for request in batch])
        except Exception as exc:
            # The transaction is gone: every request runs again alone,
            # with the allocator's own retries, so that one request's
            # trouble is reported to that request only.
            LOG.warning('A batch of %(n)d claims failed (%(err)s); running '
                        'them one by one', {'n': len(batch), 'err': exc})
            outcomes = [allocation.RUN_ALONE] * len(batch)
        for request, outcome in zip(batch, outcomes):
            if outcome is allocation.RUN_ALONE:
                self._alone(request)
            else:
                request.finish(result=outcome)

    def _alone(self, request):
        try:
            if request.kind == RELEASE:
                result = allocator.release_unbound_ident(
                    request.context, *request.args)
            else:
                values, action, check_fit = request.args
                result = allocator.create_and_allocate(
                    request.context, values, action, want_document=True,
                    check_fit=check_fit)
        except Exception as exc:
            request.finish(error=exc)
        else:
            request.finish(result=result)
