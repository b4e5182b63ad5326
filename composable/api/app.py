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

"""The WSGI application of composable-api."""

from keystonemiddleware import auth_token
from oslo_log import log as logging
from oslo_middleware import http_proxy_to_wsgi
from oslo_middleware import request_id
import pecan
import pecan.core
import pecan.decorators
import pecan.rest
import pecan.routing
import pecan.util

from composable.api.controllers import root
from composable.api import hooks
from composable.common import utils
from composable import conf

CONF = conf.CONF
LOG = logging.getLogger(__name__)

# Version discovery needs no token (keystoneauth reads it before it has
# one).
PUBLIC_PATHS = frozenset(['', '/', '/v1', '/v1/'])


def register_auth_opts(conf_=None):
    """The [keystone_authtoken] options, as keystonemiddleware declares
    them."""
    conf_ = conf_ or CONF
    for group, opts in auth_token.list_opts():
        conf_.register_opts(opts, group=group)


class AuthTokenExceptVersions(object):
    """keystonemiddleware's auth_token on every path but the version
    documents."""

    def __init__(self, app, conf_):
        self.public_app = app
        self.auth_app = auth_token.AuthProtocol(
            app, {'oslo_config_config': conf_,
                  'oslo_config_project': 'composable'})

    def __call__(self, environ, start_response):
        if environ.get('PATH_INFO', '') in PUBLIC_PATHS:
            return self.public_app(environ, start_response)
        return self.auth_app(environ, start_response)


def _remember_controller_signatures():
    """Pecan inspects the signature of the controller it dispatches to on
    every request, and its inspection builds a new namedtuple class each
    time: several per cent of a request's CPU. A controller's signature
    never changes while the process runs, so remember it per function.

    Pecan offers no setting or hook for this: its routing and argument
    binding call pecan.util.getargspec directly (imported by name in each
    module), on the default path and on RestController's alike. Replacing
    that function where Pecan looks it up is the only way to keep its
    answers; it stays a pure function of the controller, so the routing
    and the errors Pecan gives are unchanged.
    """
    original = pecan.util.getargspec
    if getattr(original, 'remembers', False):
        return
    getargspec = utils.remembered_per_function(original)
    # Pecan's modules import the function by name.
    for module in (pecan.util, pecan.core, pecan.routing, pecan.rest,
                   pecan.decorators):
        if getattr(module, 'getargspec', None) is original:
            module.getargspec = getargspec


def setup_app(auth_strategy=None):
    """Build the WSGI application.

    ``auth_strategy`` defaults to [DEFAULT]auth_strategy: "keystone" wraps
    the application in keystonemiddleware.auth_token (configured from
    [keystone_authtoken]), "noauth" trusts the X-Project-Id and X-Roles
    headers and must only listen on a loopback address.
    """
    auth_strategy = auth_strategy or CONF.auth_strategy
    _remember_controller_signatures()
    app_hooks = [
        hooks.ErrorHook(),
        hooks.FormBodyHook(),
        hooks.MicroversionHook(),
        hooks.ContextHook(auth_strategy),
        hooks.ConductorHook(),
    ]
    app = pecan.make_app(
        root.RootController(),
        hooks=app_hooks,
        force_canonical=False,
        guess_content_type_from_ext=False,
        debug=False,
        logging=False,
    )
    if auth_strategy == 'keystone':
        register_auth_opts()
        app = AuthTokenExceptVersions(app, CONF)
    elif auth_strategy == 'noauth':
        LOG.warning('composable-api runs with auth_strategy=noauth: every '
                    'request is trusted. Only use it on a loopback '
                    'address.')
    else:
        raise ValueError('Unknown auth_strategy %s' % auth_strategy)
    app = request_id.RequestId(app)
    app = http_proxy_to_wsgi.HTTPProxyToWSGI(app, CONF)
    return app
