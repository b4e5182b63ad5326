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

"""Pecan hooks: request context, conductor client, microversions, errors."""

import threading

from pecan import hooks
from webob import exc as webob_exc

from composable.api import errors
from composable.api import microversion
from composable.api import utils
from composable.common import context as composable_context
from composable.conductor import rpcapi
from composable import policies

CONTEXT_KEY = 'composable.context'
CONDUCTOR_KEY = 'composable.conductor'

NOAUTH_USER = 'admin'
NOAUTH_PROJECT = 'demo'
NOAUTH_ROLES = 'admin,member,reader'


# Bodies WebOb parses as form fields when Pecan reads the request's
# parameters for routing: a malformed one (multipart without a boundary)
# would fail there, before any controller could refuse it.
FORM_TYPES = frozenset(['multipart/form-data',
                        'application/x-www-form-urlencoded'])
FORM_METHODS = frozenset(['POST', 'PUT', 'PATCH', 'DELETE'])


class FormBodyHook(hooks.PecanHook):
    """Refuse form-encoded requests (415) before routing: the API takes
    JSON bodies only."""

    priority = 2

    def on_route(self, state):
        request = state.request
        if request.method in FORM_METHODS and \
                request.content_type in FORM_TYPES:
            raise webob_exc.HTTPUnsupportedMediaType(
                'Content-Type %s is not supported; send application/json '
                '(or no Content-Type for a request without a body).' %
                request.content_type)


# Bodies Pecan parses as JSON to find the controller's arguments.
JSON_TYPES = frozenset(['application/json', 'application/javascript'])


class JsonBodyHook(hooks.PecanHook):
    """Parse a JSON body once, before routing, and refuse a bad one (400,
    415) there: Pecan's own parse, which follows, would log a traceback
    for a body that is not UTF-8 and fail with a 500 on an unknown
    charset or on deep nesting. The controllers read the parsed body
    from the environment (composable.api.utils.read_body)."""

    priority = 3

    def on_route(self, state):
        request = state.request
        if request.method not in FORM_METHODS or \
                request.content_type not in JSON_TYPES:
            return
        raw = request.body
        if not raw.strip():
            return
        if request.content_type != 'application/json':
            raise webob_exc.HTTPUnsupportedMediaType(
                'Content-Type %s is not supported; send application/json.'
                % request.content_type)
        utils.check_charset(request)
        request.environ[utils.BODY_KEY] = utils.load_json(raw)


class ContextHook(hooks.PecanHook):
    """Build the RequestContext from keystonemiddleware's headers, or, with
    noauth, from X-Project-Id and X-Roles (defaults: project "demo",
    roles admin, member and reader)."""

    priority = 10

    def __init__(self, auth_strategy):
        self.auth_strategy = auth_strategy

    def on_route(self, state):
        environ = state.request.environ
        request_id = environ.get('openstack.request_id')
        if self.auth_strategy == 'noauth':
            headers = state.request.headers
            roles = headers.get('X-Roles') or NOAUTH_ROLES
            ctx = composable_context.RequestContext(
                user_id=headers.get('X-User-Id') or NOAUTH_USER,
                project_id=headers.get('X-Project-Id') or NOAUTH_PROJECT,
                roles=[r.strip() for r in roles.split(',') if r.strip()],
                request_id=request_id)
        else:
            ctx = composable_context.RequestContext.from_environ(
                environ, request_id=request_id)
        ctx.is_admin = policies.check('context_is_admin', ctx)
        environ[CONTEXT_KEY] = ctx


class ConductorHook(hooks.PecanHook):
    """Give controllers a conductor RPC client, made on first use: most
    requests only read the database and never need one."""

    priority = 20

    def __init__(self):
        self._api = None
        self._lock = threading.Lock()

    def _get(self):
        if self._api is None:
            with self._lock:
                if self._api is None:
                    self._api = rpcapi.ConductorAPI()
        return self._api

    def on_route(self, state):
        state.request.environ[CONDUCTOR_KEY] = self._get


class MicroversionHook(hooks.PecanHook):
    """Negotiate the microversion and echo it on the response."""

    priority = 5

    def on_route(self, state):
        environ = state.request.environ
        environ[microversion.ENVIRON_KEY] = microversion.extract_version(
            state.request.headers)

    def after(self, state):
        response = state.response
        version = state.request.environ.get(microversion.ENVIRON_KEY)
        if version is not None:
            response.headers[microversion.HEADER] = (
                microversion.header_value(version))
        vary = response.headers.get('Vary')
        if not vary:
            response.headers['Vary'] = microversion.HEADER
        elif microversion.HEADER.lower() not in vary.lower():
            response.headers['Vary'] = '%s, %s' % (vary, microversion.HEADER)


class ErrorHook(hooks.PecanHook):
    """Every error, expected or not, leaves in the API-SIG error format."""

    priority = 1

    def on_error(self, state, exc):
        return errors.to_response(state.request, exc)
