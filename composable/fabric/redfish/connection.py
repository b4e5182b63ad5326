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

"""A session with a Redfish service, over sushy's connector.

sushy does the HTTP work (retries of transient errors, the session login
and the login again when the service forgets the session). A service
without a SessionService is spoken to with HTTP Basic authentication
(``auth_type`` ``auto``); ``session`` or ``basic`` force one. Everything it
raises becomes a DriverError that says which fabric address and what
request failed, never with credentials in it.
"""

from oslo_log import log as logging
from sushy import auth as sushy_auth
from sushy import connector as sushy_connector
from sushy import exceptions as sushy_exc

from composable.common import exception
from composable.fabric.redfish import models

LOG = logging.getLogger(__name__)

ROOT = '/redfish/v1/'
DEFAULT_SESSIONS = '/redfish/v1/SessionService/Sessions'
# Cap of one HTTP request; the driver's own timeout bounds the operation.
MAX_REQUEST_TIMEOUT = 30
AUTH_TYPES = ('auto', 'session', 'basic')


class HTTPFailure(exception.DriverError):
    """The service answered an error status."""

    def __init__(self, status, messages, **kwargs):
        self.status = status
        self.messages = messages
        super(HTTPFailure, self).__init__(**kwargs)


class BadAnswer(exception.DriverError):
    """The service answered something that is not the resource asked
    for (not JSON, or not the Redfish resource)."""


class Response(object):

    def __init__(self, status, headers, body):
        self.status = status
        self.headers = headers
        self.body = body

    @property
    def etag(self):
        return self.headers.get('ETag')


class _Root(object):
    """What sushy's session authentication asks of a service root."""

    def __init__(self, connection):
        self._conn = connection

    def create_session(self, username=None, password=None):
        return self._conn.login(username, password)


class Connection(object):

    def __init__(self, address, username, password, verify=True,
                 timeout=60, auth_type='auto'):
        self.address = address.rstrip('/')
        self.auth_type = auth_type
        self._credentials = (username, password)
        self._timeout = max(1, min(float(timeout), MAX_REQUEST_TIMEOUT))
        self._connector = sushy_connector.Connector(
            self.address, verify=verify,
            default_request_timeout=self._timeout,
            connect_timeout=min(self._timeout, 10),
            server_side_retries=2, server_side_retries_delay=0.5)
        self._auth = sushy_auth.SessionAuth(username, password)
        self._auth.set_context(_Root(self), self._connector)
        self._sessions = None
        self.root = {}
        # The service root as an authenticated client reads it, once.
        self._service_root = None
        # Members a collection read with $expand gave in full, by URI.
        self.expanded = {}

    def __enter__(self):
        try:
            self.open()
        except BaseException:
            # A refused login or a service that does not answer: the HTTP
            # session is closed all the same.
            self.close()
            raise
        return self

    def __exit__(self, *exc):
        self.close()

    def open(self):
        root = self.get(ROOT, authenticated=False).body
        self.root = root if isinstance(root, dict) else {}
        links = root.get('Links') if isinstance(root, dict) else None
        sessions = None
        if isinstance(links, dict) and isinstance(links.get('Sessions'),
                                                  dict):
            sessions = links['Sessions'].get('@odata.id')
        self._sessions = sessions or DEFAULT_SESSIONS
        has_sessions = bool(sessions) or (
            isinstance(root, dict) and isinstance(
                root.get('SessionService'), dict))
        use = self.auth_type
        if use == 'auto':
            use = 'session' if has_sessions else 'basic'
        self.auth_used = use
        if use == 'basic':
            # Every request carries the credentials; nothing to log in
            # to (and nothing to log out of).
            self._auth = sushy_auth.BasicAuth(*self._credentials)
            self._auth.set_context(_Root(self), self._connector)
            self._call(self._auth.authenticate, 'GET', ROOT)
            return
        self._call(self._auth.authenticate, 'POST', self._sessions)

    def close(self):
        try:
            self._auth.close()
        except Exception as exc:
            LOG.debug('Closing the session on %(addr)s failed: %(exc)s',
                      {'addr': self.address, 'exc': type(exc).__name__})
        self._connector.close()

    def login(self, username, password):
        """Create a session; returns (token, session URI)."""
        response = self._connector.post(
            self._sessions, data={'UserName': username,
                                  'Password': password},
            allow_reauth=False)
        token = response.headers.get('X-Auth-Token')
        if not token:
            raise exception.DriverError(
                reason='Redfish service %s answered the login without an '
                       'X-Auth-Token' % self.address)
        location = response.headers.get('Location')
        if not location:
            try:
                location = response.json().get('@odata.id')
            except (ValueError, AttributeError):
                location = None
        LOG.debug('Logged in to the Redfish service %s', self.address)
        return token, location

    def _call(self, func, method, path, *args, **kwargs):
        what = '%s %s' % (method, path)
        try:
            return func(*args, **kwargs)
        except sushy_exc.AccessError as exc:
            raise HTTPFailure(
                exc.status_code, [], reason='Redfish service %s refused %s '
                '(HTTP %s): check the fabric\'s username and password' %
                (self.address, what, exc.status_code))
        except sushy_exc.HTTPError as exc:
            messages = [m for m in [exc.detail] if m]
            raise HTTPFailure(
                exc.status_code, messages,
                reason='Redfish service %s answered %s with HTTP %s%s' %
                (self.address, what, exc.status_code,
                 ': %s' % '; '.join(messages) if messages else ''))
        except sushy_exc.ConnectionError as exc:
            cause = str(getattr(exc, 'kwargs', {}).get('error') or exc)
            kind = ('did not answer in time'
                    if 'timed out' in cause.lower() or 'timeout' in
                    cause.lower() else 'could not be reached')
            raise exception.DriverError(
                reason='Redfish service %s %s (%s); check the fabric\'s '
                       'address and that the service runs' %
                       (self.address, kind, what))
        except sushy_exc.SushyError as exc:
            raise exception.DriverError(
                reason='Redfish service %s: %s failed (%s)' %
                (self.address, what, type(exc).__name__))
        except (OSError, ValueError) as exc:
            # requests' own checks, before any connection: a CA bundle
            # that is not there, an address it cannot use.
            raise exception.DriverError(
                reason='Redfish service %s: %s could not be sent (%s); '
                       'check the fabric\'s address and verify_ca' %
                       (self.address, what, type(exc).__name__))

    def _response(self, method, path, response):
        body = None
        if response.content:
            try:
                body = response.json()
            except ValueError:
                raise BadAnswer(
                    reason='Redfish service %s answered %s %s with '
                           'something that is not JSON' %
                           (self.address, method, path))
        return Response(response.status_code, response.headers, body)

    def get(self, path, authenticated=True):
        kwargs = {} if authenticated else {'allow_reauth': False}
        response = self._call(self._connector.get, 'GET', path, path,
                              **kwargs)
        return self._response('GET', path, response)

    def post(self, path, data, headers=None):
        response = self._call(self._connector.post, 'POST', path, path,
                              data=data, headers=headers)
        return self._response('POST', path, response)

    def patch(self, path, data, headers=None):
        response = self._call(self._connector.patch, 'PATCH', path, path,
                              data=data, headers=headers)
        return self._response('PATCH', path, response)

    def delete(self, path, headers=None):
        response = self._call(self._connector.delete, 'DELETE', path, path,
                              headers=headers)
        return self._response('DELETE', path, response)

    def service_root(self):
        """The service root's body, read (authenticated) at the first
        call and kept: one operation asks it for several of its links
        (Systems, CompositionService, ...), and each request to a BMC
        costs tens of milliseconds."""
        if self._service_root is None:
            self._service_root = self.get(ROOT).body
        return self._service_root

    @property
    def expand_query(self):
        """The $expand query that gives a collection's members in full,
        where the service says it supports one
        (ProtocolFeaturesSupported.ExpandQuery); None otherwise."""
        features = self.root.get('ProtocolFeaturesSupported')
        expand = (features.get('ExpandQuery')
                  if isinstance(features, dict) else None)
        if not isinstance(expand, dict):
            return None
        if expand.get('NoLinks') is True:
            return '$expand=.'
        if expand.get('ExpandAll') is True:
            return '$expand=*'
        return None

    def read_member(self, path, model):
        """Like :meth:`read`, from the body an expanded collection gave
        when it did (no ETag then)."""
        body = self.expanded.pop(path.rstrip('/'), None)
        if body is None:
            return self.read(path, model)
        parse = getattr(model, 'parse', model)
        try:
            return parse(body), None
        except models.ParseError as exc:
            raise BadAnswer(
                reason='Redfish service %s answered a member %s of an '
                       'expanded collection with an unexpected payload: '
                       '%s' % (self.address, path, exc))

    def read(self, path, model):
        """GET ``path`` and parse it with ``model`` (a parse function or
        a class with ``parse``); returns (object, ETag)."""
        response = self.get(path)
        parse = getattr(model, 'parse', model)
        try:
            return parse(response.body), response.etag
        except models.ParseError as exc:
            raise BadAnswer(
                reason='Redfish service %s answered GET %s with an '
                       'unexpected payload: %s' % (self.address, path, exc))
