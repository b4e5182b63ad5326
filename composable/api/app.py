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
import pecan
import pecan.core
import pecan.decorators
import pecan.rest
import pecan.routing
import pecan.util
import webob

from composable.api.controllers import root
from composable.api import errors
from composable.api import hooks
from composable.api import request_log
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


# Set in the WSGI environment once a request got past auth_token: an
# error after that is the application's own, already in the API's format.
_AUTHENTICATED = 'composable.authenticated'

UNAUTHORIZED_DETAIL = (
    'Authentication required: the request has no token, or one that is '
    'expired, revoked or not valid. Get a new token from Keystone (see the '
    'WWW-Authenticate header) and retry.')
IDENTITY_UNAVAILABLE_DETAIL = (
    'The identity service (Keystone) could not be reached to validate the '
    'token. Try again shortly; if this persists, the cloud operator should '
    'check Keystone and the [keystone_authtoken] section of '
    'composable.conf.')


class AuthTokenExceptVersions(object):
    """keystonemiddleware's auth_token on every path but the version
    documents, its refusals given in the API's own error format."""

    def __init__(self, app, conf_):
        self.public_app = app
        self.auth_app = auth_token.AuthProtocol(
            self._authenticated(app), {'oslo_config_config': conf_,
                                       'oslo_config_project': 'composable'})

    @staticmethod
    def _authenticated(app):
        def marked(environ, start_response):
            environ[_AUTHENTICATED] = True
            return app(environ, start_response)
        return marked

    def __call__(self, environ, start_response):
        if environ.get('PATH_INFO', '') in PUBLIC_PATHS:
            return self.public_app(environ, start_response)
        request = webob.Request(environ)
        response = request.get_response(self.auth_app)
        if not environ.get(_AUTHENTICATED):
            response = self._refusal(request, response)
        return response(environ, start_response)

    @staticmethod
    def _refusal(request, response):
        """auth_token's own 401 and 503 (its bodies are Keystone's error
        format, or HTML) as API-SIG errors with an actionable detail."""
        status = response.status_int
        if status == 401:
            headers = {}
            if 'WWW-Authenticate' in response.headers:
                headers['WWW-Authenticate'] = response.headers[
                    'WWW-Authenticate']
            return errors.error_response(
                request, 401, 'composable.unauthorized',
                UNAUTHORIZED_DETAIL, headers)
        if status == 503:
            LOG.warning('Request %s refused: Keystone could not be reached '
                        'to validate its token',
                        errors.request_id(request))
            return errors.error_response(
                request, 503, 'composable.identity.unavailable',
                IDENTITY_UNAVAILABLE_DETAIL)
        return response


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
    # oslo.middleware's RequestId, which also logs each request.
    app = request_log.RequestLog(app)
    app = http_proxy_to_wsgi.HTTPProxyToWSGI(app, CONF)
    return app
