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

"""Running composable's daemons: configuration and logging set-up, and a
small threaded RPC service (no eventlet) that stops cleanly on SIGTERM or
SIGINT."""

import gc
import os
import signal
import sys
import threading

from oslo_config import cfg
from oslo_log import log as logging

from composable.common import rpc
from composable import conf
from composable.conf import opts

CONF = conf.CONF
LOG = logging.getLogger(__name__)


# What oslo.config raises for a configuration file it cannot use.
CONFIG_FILE_ERRORS = (cfg.ConfigFilesNotFoundError,
                      cfg.ConfigFilesPermissionDeniedError,
                      cfg.ConfigFileParseError,
                      cfg.ConfigFileValueError)


def config_file_error(exc, prog=None):
    """One line saying which configuration file cannot be used and why,
    for a command to print instead of a traceback."""
    prog = prog or os.path.basename(sys.argv[0] or 'composable')
    if isinstance(exc, cfg.ConfigFilesNotFoundError):
        files = ', '.join(exc.config_files)
        return ('%s: configuration file %s does not exist; create it (see '
                'the installation guide) or give another --config-file' %
                (prog, files))
    if isinstance(exc, cfg.ConfigFilesPermissionDeniedError):
        return ('%s: configuration file %s cannot be read (permission '
                'denied)' % (prog, ', '.join(exc.config_files)))
    return '%s: %s' % (prog, ' '.join(str(exc).split()))


def parse_config(argv=None, default_config_files=None, prog=None):
    """CONF(argv) for project 'composable'; a configuration file that
    cannot be used ends the command with one line (SystemExit, status
    1) instead of a traceback."""
    try:
        CONF(argv if argv is not None else [], project='composable',
             default_config_files=default_config_files)
    except CONFIG_FILE_ERRORS as exc:
        raise SystemExit(config_file_error(exc, prog))


def freeze_startup_objects():
    """Move every object the process has made so far (modules, classes,
    configuration, the WSGI application, the RPC servers) out of the
    cyclic garbage collector's reach; the number of objects frozen.

    They live as long as the process does, yet each full collection
    walked them all again: an API process holds ~150,000 of them, and a
    full collection took 100-600 ms on a busy two-core machine, which a
    request that triggered it waited for (the list's p99 at 100,000
    leases was such pauses). Frozen, a full collection walks only what
    requests and passes made since, a few ms. Only for a service's
    process, once it has started: frozen objects that become cyclic
    garbage are never collected, so a process that keeps building
    applications (a test run) must not call it."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


def prepare_service(argv=None, default_config_files=None):
    """Parse the command line and configuration files (project
    'composable') and set up logging."""
    logging.register_options(CONF)
    opts.set_config_defaults()
    parse_config(argv, default_config_files)
    logging.setup(CONF, 'composable')


class RPCService(object):
    """One oslo.messaging RPC server and, optionally, the manager behind it
    whose ``start()``/``stop()`` run its background threads."""

    def __init__(self, topic, server, endpoints, manager=None):
        self.topic = topic
        self.server_name = server
        self.endpoints = list(endpoints)
        self.manager = manager
        self._server = None

    def start(self):
        if self.manager is not None and hasattr(self.manager, 'start'):
            self.manager.start()
        self._server = rpc.get_server(self.topic, self.server_name,
                                      self.endpoints)
        self._server.start()
        LOG.info('Serving RPC topic %(topic)s as %(server)s',
                 {'topic': self.topic, 'server': self.server_name})

    def stop(self):
        # Stop taking requests first, then let the manager finish the work
        # it already accepted.
        if self._server is not None:
            self._server.stop()
        if self.manager is not None and hasattr(self.manager, 'stop'):
            self.manager.stop()

    def wait(self):
        if self._server is not None:
            self._server.wait()
            self._server = None


def _catch_signals(stop_event):
    """Make SIGTERM and SIGINT set ``stop_event``; the previous handlers,
    to put back."""

    def _handler(signum, frame):
        LOG.info('Caught signal %s, stopping', signum)
        stop_event.set()

    return {sig: signal.signal(sig, _handler)
            for sig in (signal.SIGTERM, signal.SIGINT)}


def _wait(stop_event):
    # A timed wait keeps the main thread responsive to signals.
    while not stop_event.wait(1):
        pass


def wait_for_signal(stop_event=None):
    """Block until SIGTERM or SIGINT (or ``stop_event`` is set). Must run
    in the main thread, where Python delivers signals."""
    stop_event = stop_event or threading.Event()
    previous = _catch_signals(stop_event)
    try:
        _wait(stop_event)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def run(services, stop_event=None):
    """Start ``services``, run until signalled, then stop them in reverse
    order. The signals are caught before the first service starts: a
    SIGTERM that comes while they start (a conductor has written its
    first heartbeat, say) stops them cleanly too."""
    stop_event = stop_event or threading.Event()
    previous = _catch_signals(stop_event)
    started = []
    try:
        for service in services:
            if stop_event.is_set():
                break
            service.start()
            started.append(service)
        if len(started) == len(services):
            freeze_startup_objects()
        _wait(stop_event)
    finally:
        for service in reversed(started):
            try:
                service.stop()
            except Exception:
                LOG.exception('Error while stopping %s', service)
        for service in reversed(started):
            service.wait()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
