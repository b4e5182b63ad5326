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

import io
import re
from urllib import parse

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

_CONTROL = re.compile('[\x00-\x1f\x7f]')

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


class RequestLimits(object):
    """Refuse, before anything reads the request and in the API's error
    format:

    - a URL that is not UTF-8 once percent-decoded, or holds control
      characters (no name or UUID can hold them, and PostgreSQL cannot
      even compare a string holding NUL): 400;
    - a body larger than [api]max_request_body_size: 413, by its
      Content-Length, or, for a chunked body, once more than the limit
      has been read (what was read is then given to the application, so
      it is read only once).
    """

    def __init__(self, app, conf_):
        self.app = app
        self.conf = conf_

    @staticmethod
    def _error(environ, start_response, status, code, detail):
        # An unread body is left to the server (a WSGI application may
        # not send hop-by-hop headers such as Connection: close).
        response = errors.error_response(webob.Request(environ), status,
                                         code, detail)
        return response(environ, start_response)

    @staticmethod
    def _url_problem(environ):
        path = environ.get('PATH_INFO', '')
        query = environ.get('QUERY_STRING', '')
        try:
            path = path.encode('latin-1').decode('utf-8')
            query = parse.unquote_to_bytes(
                query.replace('+', ' ')).decode('utf-8')
        except UnicodeError:
            return ('The URL is not valid UTF-8 once percent-decoded '
                    '(RFC 3986); quote each byte of UTF-8 text as %XX.')
        if _CONTROL.search(path) or _CONTROL.search(query):
            return ('The URL holds control characters (such as %00 or a '
                    'newline); no name or UUID can hold them.')
        return None

    def __call__(self, environ, start_response):
        problem = self._url_problem(environ)
        if problem:
            return self._error(environ, start_response, 400,
                               'composable.invalid', problem)
        if environ.get('REQUEST_METHOD') not in hooks.FORM_METHODS:
            # GET and HEAD bodies are never read.
            return self.app(environ, start_response)
        limit = self.conf.api.max_request_body_size
        too_large = ('The request body is larger than the %d bytes this '
                     'API accepts ([api]max_request_body_size).' % limit)
        length = environ.get('CONTENT_LENGTH')
        if length:
            try:
                length = int(length)
            except ValueError:
                return self._error(environ, start_response, 400,
                                   'composable.invalid',
                                   'The Content-Length header is not a '
                                   'number.')
            if length > limit:
                return self._error(environ, start_response, 413,
                                   'composable.too_large', too_large)
        elif 'chunked' in environ.get('HTTP_TRANSFER_ENCODING', '').lower():
            body = environ['wsgi.input'].read(limit + 1)
            if len(body) > limit:
                return self._error(environ, start_response, 413,
                                   'composable.too_large', too_large)
            environ['wsgi.input'] = io.BytesIO(body)
            environ['CONTENT_LENGTH'] = str(len(body))
            environ.pop('HTTP_TRANSFER_ENCODING', None)
        return self.app(environ, start_response)


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
        hooks.JsonBodyHook(),
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
    app = RequestLimits(app, CONF)
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
