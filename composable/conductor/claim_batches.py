"""Group commit of lease creates and quick releases.

A create claims capacity under row locks on its pool and memory nodes (or
devices), and a quick release (a lease that was never bound) locks its
pools the same way. Those locks are held until the transaction commits,
and the commit waits for the database's durable log write. With many
small transactions, a pool's lock spends most of its time waiting for
commits, and that caps how many leases a pool can give out per second
whatever the CPUs could do.

So each conductor hands its creates and quick releases to one claim
thread, which runs those that arrived together in one transaction, each
in a savepoint: a lease that cannot be placed (or a release refused) is
rolled back alone and the others stand; one commit makes them all
durable. A request that finds the thread idle runs at once, alone: under
light load nothing waits for a batch to fill.

Failures stay per request: InsufficientCapacity records the lease in
alloc_failed in the same transaction; a lost race and anything
unexpected run that request again on its own (the allocator's own
retries); a deadlock rolls the whole transaction back (InnoDB undoes the
savepoints too), and the batch is run again.
"""

import queue
import threading

from oslo_log import log as logging

from composable.common import context as composable_context
from composable.common import exception
from composable import conf
from composable.conductor import allocator
from composable.db import api as db_api

CONF = conf.CONF
LOG = logging.getLogger(__name__)

CREATE = 'create'
RELEASE = 'release'


class _Request(object):
    def __init__(self, kind, context, args):
        self.kind = kind
        self.context = context
        self.args = args
        self.done = threading.Event()
        self.result = None
        self.error = None
        # Set while a batch transaction runs; kept only once it commits.
        self.pending = None
        self.alone = False

    def finish(self, result=None, error=None):
        self.result, self.error = result, error
        self.done.set()

    def wait(self):
        self.done.wait()
        if self.error is not None:
            raise self.error
        return self.result


class ClaimBatcher(object):
    """The claim thread of one conductor; ``create`` and ``release`` are
    called from the RPC threads and return what the allocator's
    create_and_allocate(want_document=True) and release_unbound_ident
    return."""

    def __init__(self, max_batch=None):
        self.max_batch = max_batch or CONF.allocator.claim_batch_size
        self._queue = queue.Queue()
        self._thread = None
        self._lock = threading.Lock()

    def start(self):
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name='conductor-claims', daemon=True)
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

    # ------------------------------------------------------------ callers

    def create(self, context, values, action='create'):
        if not self.running:
            return allocator.create_and_allocate(context, values, action,
                                                 want_document=True)
        return self._submit(CREATE, context, (values, action))

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
            db_api.retry_on_deadlock(self._once)(batch)
        except Exception as exc:
            # The transaction is gone: every request runs again alone,
            # with the allocator's own retries, so that one request's
            # trouble is reported to that request only.
            LOG.warning('A batch of %(n)d claims failed (%(err)s); running '
                        'them one by one', {'n': len(batch), 'err': exc})
            for request in batch:
                request.pending = None
                request.alone = True
        for request in batch:
            if request.alone:
                self._alone(request)
            else:
                request.finish(result=request.pending)

    def _once(self, batch):
        for request in batch:
            request.pending = None
            request.alone = False
        admin = composable_context.get_admin_context()
        with db_api.writer(admin) as session:
            for request in batch:
                self._in_savepoint(session, request)

    def _in_savepoint(self, session, request):
        context = request.context
        if request.kind == RELEASE:
            ident, action = request.args
            try:
                with session.begin_nested():
                    request.pending = allocator.release_unbound_ident_in(
                        session, context, ident, action)
            except (exception.NotFound, exception.Conflict):
                # Its own answer (404, 409): given to it alone.
                request.alone = True
            return
        values, action = request.args
        try:
            with session.begin_nested():
                request.pending = allocator.create_in(session, context,
                                                      values, action)
        except exception.InsufficientCapacity as exc:
            with session.begin_nested():
                request.pending = allocator.create_failed_in(
                    session, context, values, action, exc.message)
        except allocator.LostRace:
            request.alone = True

    def _alone(self, request):
        try:
            if request.kind == RELEASE:
                result = allocator.release_unbound_ident(
                    request.context, *request.args)
            else:
                values, action = request.args
                result = allocator.create_and_allocate(
                    request.context, values, action, want_document=True)
        except Exception as exc:
            request.finish(error=exc)
        else:
            request.finish(result=result)
