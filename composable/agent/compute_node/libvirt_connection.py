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

"""The compute agent's one connection to libvirtd.

The guest memory attacher (libvirt_guest), the device attacher (hostdev)
and what reads the guests (usage, memory_tuning) share one
LibvirtConnection per agent process. It is opened when first needed,
checked (``isAlive``) at every use and opened again when libvirtd
restarted or dropped it; one lock makes sure that threads asking at the
same moment (RPC workers, the libvirt hook's threads, the usage sampler)
get the same connection and open at most one.

Domain events (a device removed from a guest) reach only connections
opened after libvirt's event loop was registered: the loop is started
before the first connection, and whoever wants the events of every
connection (the device attacher) registers a listener, called with each
connection opened, the reopened ones included.
"""

import threading

from oslo_log import log as logging
from oslo_utils import importutils

from composable.common import exception
from composable import conf

libvirt = importutils.try_import('libvirt')

CONF = conf.CONF
LOG = logging.getLogger(__name__)

_event_loop_lock = threading.Lock()
_event_loop_started = False


def quiet_libvirt():
    """libvirt's default error handler prints every error to stderr, even
    the expected ones (no such domain, no such secret...); they are raised
    as exceptions and handled by the callers anyway."""
    libvirt.registerErrorHandler(lambda ctx, err: None, None)


def start_libvirt_event_loop():
    """Register libvirt's default event loop and run it in a daemon
    thread, once per process; connections opened afterwards deliver
    domain events."""
    global _event_loop_started
    with _event_loop_lock:
        if _event_loop_started:
            return
        libvirt.virEventRegisterDefaultImpl()
        quiet_libvirt()

        def run():
            while True:
                libvirt.virEventRunDefaultImpl()

        threading.Thread(target=run, name='libvirt-events',
                         daemon=True).start()
        _event_loop_started = True


class LibvirtConnection(object):
    """A libvirt connection opened when needed and again when it died.

    ``connect`` (the URI -> a libvirt connection) and ``event_loop`` (run
    before every open) can be injected; by default they are libvirt.open
    and start_libvirt_event_loop. An injected ``connect`` runs no event
    loop unless one is given too.
    """

    def __init__(self, uri=None, connect=None, event_loop=None):
        self.uri = uri or CONF.compute_node.libvirt_uri
        self._connect = connect
        if event_loop is None and connect is None:
            event_loop = start_libvirt_event_loop
        self._event_loop = event_loop
        self._conn = None
        self._lock = threading.Lock()
        self._listeners = []
        # How many times a connection was opened (the first and every
        # reopening): what the logs and the tests read.
        self.opened = 0

    def add_listener(self, callback):
        """Call ``callback(conn)`` with every connection opened from now
        on, and with the open one if there is one."""
        with self._lock:
            self._listeners.append(callback)
            if self._conn is not None:
                callback(self._conn)

    def _alive(self):
        try:
            return bool(self._conn.isAlive())
        except Exception:
            return False

    def get(self, needed_for='the compute agent cannot use libvirt'):
        """The live connection, opened (again) if needed. ``needed_for``
        says, in the error when the libvirt binding is missing, what
        cannot be done without it. Raises DriverError when libvirtd
        cannot be reached."""
        with self._lock:
            if self._conn is not None:
                if self._alive():
                    return self._conn
                LOG.warning('The libvirt connection to %s is gone '
                            '(libvirtd restarted?); opening it again',
                            self.uri)
                self._conn = None
            connect = self._connect
            if connect is None:
                if libvirt is None:
                    raise exception.DriverError(
                        reason='the libvirt Python binding (libvirt-python) '
                               'is not installed, so %s' % needed_for)
                connect = libvirt.open
            if self._event_loop is not None:
                self._event_loop()
            try:
                conn = connect(self.uri)
            except Exception as exc:
                raise exception.DriverError(
                    reason='cannot connect to libvirt at %s: %s; check that '
                           'libvirtd runs and [compute_node]libvirt_uri' %
                           (self.uri, exc))
            for listener in self._listeners:
                listener(conn)
            self._conn = conn
            self.opened += 1
            return conn
