"""composable-api: the REST API in a standalone threaded server."""

import sys

from oslo_config import cfg
from oslo_log import log as logging

from composable.api import app as api_app
from composable.common import rpc
from composable.common import wsgi_server
from composable import conf

CONF = conf.CONF
LOG = logging.getLogger(__name__)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    try:
        logging.register_options(CONF)
    except cfg.ArgsAlreadyParsedError:
        # Already registered and parsed once in this process (tests).
        pass
    CONF(argv, project='composable')
    logging.setup(CONF, 'composable')
    rpc.init()
    app = api_app.setup_app()
    host, port = CONF.api.host_ip, CONF.api.port
    server = wsgi_server.make_server(app, host, port,
                                     threads=CONF.api.workers)
    LOG.info('composable-api listening on http://%s:%s', host, port)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        rpc.cleanup()
    return 0


if __name__ == '__main__':
    sys.exit(main())
