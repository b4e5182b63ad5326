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

"""The composable-api WSGI application, for uWSGI and mod_wsgi.

For example::

    uwsgi --http-socket :6590 --module composable.wsgi.api:application

The configuration is read when the application is first called, not at
import time, so that importing this module has no side effects. It comes
from the files named in ``OS_COMPOSABLE_CONFIG_FILES`` (separated by ``;``)
and the directory ``OS_COMPOSABLE_CONFIG_DIR``, as Nova's WSGI applications
do, and otherwise from oslo.config's default places
(/etc/composable/composable.conf, ~/.composable/, ...).
"""

import os
import threading

from oslo_config import cfg
from oslo_log import log as logging

from composable.api import app as api_app
from composable.common import rpc
from composable.common import service
from composable import conf
from composable import notifications

CONF = conf.CONF
LOG = logging.getLogger(__name__)

_LOCK = threading.Lock()
_APPLICATION = None

CONFIG_FILES_ENV = 'OS_COMPOSABLE_CONFIG_FILES'
CONFIG_DIR_ENV = 'OS_COMPOSABLE_CONFIG_DIR'


def config_args(environ=None):
    """oslo.config arguments naming the files and directory given in the
    environment; none when it names nothing (the default places)."""
    environ = os.environ if environ is None else environ
    args = []
    for path in (environ.get(CONFIG_FILES_ENV) or '').split(';'):
        if path.strip():
            args += ['--config-file', path.strip()]
    if (environ.get(CONFIG_DIR_ENV) or '').strip():
        args += ['--config-dir', environ[CONFIG_DIR_ENV].strip()]
    return args


def init_application(argv=None):
    """Parse the configuration, set up logging and RPC, build the app.

    ``argv`` defaults to the files named in the environment (see
    config_args): uWSGI and mod_wsgi have argv of their own, which
    oslo.config must not read.
    """
    try:
        logging.register_options(CONF)
    except cfg.ArgsAlreadyParsedError:
        pass
    CONF(config_args() if argv is None else argv, project='composable')
    logging.setup(CONF, 'composable')
    rpc.init()
    notifications.init('composable-api')
    app = api_app.setup_app()
    LOG.info('composable-api WSGI application ready')
    return app


def _ready_application():
    app = init_application()
    # What the process made to serve is there for good: out of the
    # cyclic collector's walks (see freeze_startup_objects).
    service.freeze_startup_objects()
    return app


def _get_application():
    global _APPLICATION
    if _APPLICATION is None:
        with _LOCK:
            if _APPLICATION is None:
                _APPLICATION = _ready_application()
    return _APPLICATION


def application(environ, start_response):
    return _get_application()(environ, start_response)
