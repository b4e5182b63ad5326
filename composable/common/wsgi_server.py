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

"""A small threaded WSGI server for the standalone composable-api.

Production deployments run composable.wsgi.api under uWSGI or mod_wsgi;
this server exists so that ``composable-api`` and ``composable-all`` work
with nothing else installed. Requests are served by a bounded pool of
worker threads, so a burst of slow requests queues instead of spawning
threads without limit.
"""

from concurrent import futures
import socket
import socketserver
from wsgiref import simple_server

from oslo_log import log as logging

LOG = logging.getLogger(__name__)


class _RequestHandler(simple_server.WSGIRequestHandler):

    def log_message(self, format, *args):
        # Access logging is the deployment's business (a proxy in front);
        # keep it at DEBUG instead of writing to stderr.
        LOG.debug('%s - %s', self.address_string(), format % args)

    def address_string(self):
        # Never resolve client names: a reverse DNS lookup per request.
        return self.client_address[0]


class ThreadPoolWSGIServer(socketserver.ThreadingMixIn,
                           simple_server.WSGIServer):
    """wsgiref's server with requests handed to a bounded thread pool."""

    daemon_threads = True
    allow_reuse_address = True
    # Connections waiting for accept(); beyond this the kernel refuses.
    request_queue_size = 128

    def __init__(self, server_address, threads=8, listen=True):
        self._pool = futures.ThreadPoolExecutor(
            max_workers=max(1, threads),
            thread_name_prefix='composable-api')
        try:
            super().__init__(server_address, _RequestHandler,
                             bind_and_activate=False)
            self.server_bind()
            if listen:
                self.server_activate()
        except BaseException:
            self.server_close()
            raise

    def process_request(self, request, client_address):
        self._pool.submit(self.process_request_thread, request,
                          client_address)

    def server_close(self):
        super().server_close()
        self._pool.shutdown(wait=False, cancel_futures=True)


def make_server(app, host, port, threads=8, listen=True):
    """A server for ``app`` bound to host:port; call serve_forever() on it
    and shutdown() from another thread to stop it. With ``listen=False``
    the address is taken (a second server on it fails now) but
    connections are refused until ``server_activate()``."""
    server_class = ThreadPoolWSGIServer
    if ':' in host:
        server_class = type('ThreadPoolWSGIServerV6', (ThreadPoolWSGIServer,),
                            {'address_family': socket.AF_INET6})
    server = server_class((host, port), threads=threads, listen=listen)
    server.set_app(app)
    return server
