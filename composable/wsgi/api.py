"""The composable-api WSGI application, for uWSGI and mod_wsgi.

For example::

    uwsgi --http-socket :6590 --module composable.wsgi.api:application

The configuration is read from the default files
(/etc/composable/composable.conf, or ~/.composable/, ...) when the
application is first called, not at import time, so that importing this
module has no side effects.
"""

import threading

from oslo_config import cfg
from oslo_log import log as logging

from composable.api import app as api_app
from composable.common import rpc
from composable import conf

CONF = conf.CONF
LOG = logging.getLogger(__name__)

_LOCK = threading.Lock()
_APPLICATION = None


def init_application(argv=None):
    """Parse the configuration, set up logging and RPC, build the app.

    ``argv`` defaults to no arguments: uWSGI and mod_wsgi have argv of
    their own, which oslo.config must not read.
    """
    try:
        logging.register_options(CONF)
    except cfg.ArgsAlreadyParsedError:
        pass
    CONF(argv or [], project='composable')
    logging.setup(CONF, 'composable')
    rpc.init()
    app = api_app.setup_app()
    LOG.info('composable-api WSGI application ready')
    return app


def _get_application():
    global _APPLICATION
    if _APPLICATION is None:
        with _LOCK:
            if _APPLICATION is None:
                _APPLICATION = init_application()
    return _APPLICATION


def application(environ, start_response):
    return _get_application()(environ, start_response)
