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

"""composable-api: the REST API in a standalone threaded server."""

import sys

from oslo_config import cfg
from oslo_log import log as logging

from composable.api import app as api_app
from composable.common import rpc
from composable.common import service
from composable.common import wsgi_server
from composable import conf
from composable import notifications

CONF = conf.CONF
LOG = logging.getLogger(__name__)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    try:
        logging.register_options(CONF)
    except cfg.ArgsAlreadyParsedError:
        # Already registered and parsed once in this process (tests).
        pass
    service.parse_config(argv)
    logging.setup(CONF, 'composable')
    rpc.init()
    notifications.init('composable-api')
    app = api_app.setup_app()
    host, port = CONF.api.host_ip, CONF.api.port
    try:
        server = wsgi_server.make_server(app, host, port,
                                         threads=CONF.api.workers)
    except OSError as exc:
        print('composable-api: cannot listen on %s:%s: %s' % (
            host, port, exc.strerror or exc), file=sys.stderr)
        notifications.cleanup()
        rpc.cleanup()
        return 1
    LOG.info('composable-api listening on http://%s:%s', host, port)
    service.freeze_startup_objects()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        notifications.cleanup()
        rpc.cleanup()
    return 0


if __name__ == '__main__':
    sys.exit(main())
