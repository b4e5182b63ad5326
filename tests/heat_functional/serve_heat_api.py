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

"""Serves heat-api (``heat.api.openstack.wsgi``, the application
deployments run under uWSGI or mod_wsgi) on 127.0.0.1 with the standard
library's threaded WSGI server: ``python serve_heat_api.py PORT CONFIG``.

The wheel's ``heat-wsgi-api`` script serves one request at a time, so a
``--wait`` poll would queue behind a stack create. Stops on SIGTERM.
"""

import signal
import socketserver
import sys
import threading
from wsgiref import simple_server


class _Server(socketserver.ThreadingMixIn, simple_server.WSGIServer):
    daemon_threads = True


class _QuietHandler(simple_server.WSGIRequestHandler):
    def log_message(self, fmt, *args):
        sys.stderr.write('heat-api %s\n' % (fmt % args))


def main():
    port = int(sys.argv[1])
    # Heat's configuration is read from the command line.
    sys.argv[1:] = ['--config-file', sys.argv[2]]
    from heat.api.openstack import wsgi
    application = wsgi.init_application()
    server = simple_server.make_server('127.0.0.1', port, application,
                                       server_class=_Server,
                                       handler_class=_QuietHandler)

    def _stop(signum, frame):
        threading.Thread(target=server.shutdown).start()

    signal.signal(signal.SIGTERM, _stop)
    sys.stderr.write('heat-api serving on 127.0.0.1:%d\n' % port)
    sys.stderr.flush()
    server.serve_forever()
    server.server_close()


if __name__ == '__main__':
    main()
