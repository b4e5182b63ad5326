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

"""Per-lease locks ("reservations").

A conductor works on a lease only while it holds the lease's reservation:
the ``leases.reservation`` column set to its hostname. The column keeps
other conductors out; a process-local registry keeps out the other threads
of this conductor, which the column alone cannot tell apart (they share
the hostname). A conductor's reservations live as long as its heartbeat:
another conductor breaks them once it stops beating (see periodic.py).

A lease changes state only in a task (composable.conductor.task), which
takes the reservation with :func:`reserve` or :func:`try_reserve` and, for
the slow part, gives it to a worker thread (``Reservation.hand_off``),
which releases it when the flow ends; the RPC call returns at once.
"""

import contextlib
import threading
import time

from oslo_log import log as logging

from composable.common import exception
from composable import conf
from composable.db import api as db_api

CONF = conf.CONF
LOG = logging.getLogger(__name__)

_HELD = set()
_HELD_LOCK = threading.Lock()

# Seconds between two attempts to take a busy reservation.
_POLL_INTERVAL = 0.2


def _take_local(key):
    with _HELD_LOCK:
        if key in _HELD:
            return False
        _HELD.add(key)
        return True


def _drop_local(key):
    with _HELD_LOCK:
        _HELD.discard(key)


def held_locally(host, lease_id):
    with _HELD_LOCK:
        return (host, lease_id) in _HELD


class Reservation(object):
    """A held reservation; release() is idempotent."""

    def __init__(self, context, lease_id, host):
        self.context = context
        self.lease_id = lease_id
        self.host = host
        self.handed_off = False
        # The lease as read when the reservation was taken (try_reserve
        # with ``read``), else None.
        self.lease = None
        self._released = False
        self._lock = threading.Lock()

    @property
    def released(self):
        return self._released

    def release(self):
        with self._lock:
            if self._released:
                return
            self._released = True
        try:
            db_api.lease_release_reservation(self.context, self.lease_id,
                                             self.host)
        except Exception:
            # The reservation then stays until this conductor stops or is
            # declared dead; nothing else can be done from here.
            LOG.exception('Could not release the reservation of lease %s',
                          self.lease_id)
        finally:
            _drop_local((self.host, self.lease_id))

    def hand_off(self, executor, fn, *args, **kwargs):
        """Run ``fn(*args, **kwargs)`` in ``executor``; the reservation is
        released when it ends, whatever the outcome. Returns the future.

        If the executor refuses the work (it is shutting down), the
        reservation stays with the caller's ``with`` block, which releases
        it; the lease is then resumed by the periodic tasks.
        """
        def _run():
            try:
                return fn(*args, **kwargs)
            except Exception:
                LOG.exception('Unexpected error in the work on lease %s',
                              self.lease_id)
                raise
            finally:
                self.release()

        future = executor.submit(_run)
        self.handed_off = True
        return future


def try_reserve(context, lease_id, host, read=False):
    """Take the reservation now or return None.

    ``read``: the lease is read whole in the transaction that takes the
    reservation, as ``Reservation.lease`` (a task's first look at it).
    """
    key = (host, lease_id)
    if not _take_local(key):
        return None
    try:
        if read:
            lease = db_api.lease_reserve_and_get(context, lease_id, host)
            taken = lease is not None
        else:
            lease = None
            taken = db_api.lease_reserve(context, lease_id, host)
    except Exception:
        _drop_local(key)
        raise
    if not taken:
        _drop_local(key)
        return None
    reservation = Reservation(context, lease_id, host)
    reservation.lease = lease
    return reservation


def reserve(context, lease_id, host, wait=None, lease_ident=None,
            read=False):
    """Take the reservation, waiting up to ``wait`` seconds (default
    ``[conductor]reservation_wait``); raise LeaseLocked after that.
    ``read``: see try_reserve."""
    if wait is None:
        wait = CONF.conductor.reservation_wait
    deadline = time.monotonic() + wait
    while True:
        reservation = try_reserve(context, lease_id, host, read=read)
        if reservation is not None:
            return reservation
        if time.monotonic() >= deadline:
            raise exception.LeaseLocked(
                lease=lease_ident if lease_ident is not None else lease_id)
        time.sleep(min(_POLL_INTERVAL,
                       max(0.0, deadline - time.monotonic())))


@contextlib.contextmanager
def lease_reservation(context, lease_id, host, wait=None, lease_ident=None):
    """Hold the lease's reservation for the ``with`` block, unless it is
    handed to a worker with ``Reservation.hand_off``."""
    reservation = reserve(context, lease_id, host, wait=wait,
                          lease_ident=lease_ident)
    try:
        yield reservation
    finally:
        if not reservation.handed_off:
            reservation.release()


@contextlib.contextmanager
def guard(reservation):
    """Release an already held reservation at the end of the block unless
    it was handed to a worker."""
    try:
        yield reservation
    finally:
        if not reservation.handed_off:
            reservation.release()


def adopt(context, lease_id, host):
    """A Reservation object for a lease whose reservation column was set to
    ``host`` by the insert that created it (see create_lease)."""
    key = (host, lease_id)
    if not _take_local(key):
        raise exception.LeaseLocked(lease=lease_id)
    return Reservation(context, lease_id, host)
