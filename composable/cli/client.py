#    Licensed under the Apache License, Version 2.0 (the "License"); you may
#    not use this file except in compliance with the License. You may obtain
#    a copy of the License at
#
#         http://www.apache.org/licenses/LICENSE-2.0
#
#    Unless required by applicable law or agreed to in writing, software
#    distributed under the License is distributed on an "AS IS" BASIS, WITHOUT
#    WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied. See the
#    License for the specific language governing permissions and limitations
#    under the License.

"""A small REST client for the composable API v1.

It rides on the keystoneauth1 session the OpenStack client already built
(so authentication, TLS options and timing come from there), sends the
``OpenStack-API-Version`` header, turns API-SIG error bodies into
``osc_lib.exceptions`` and follows ``next`` links when listing.
"""

import json
import logging
from urllib import parse

from keystoneauth1 import exceptions as ks_exc
from osc_lib import exceptions

LOG = logging.getLogger(__name__)

SERVICE_TYPE = 'composable'
VERSION_HEADER = 'OpenStack-API-Version'
DEFAULT_API_VERSION = '1.0'

_ERROR_CLASSES = {
    400: exceptions.BadRequest,
    401: exceptions.Unauthorized,
    403: exceptions.Forbidden,
    404: exceptions.NotFound,
    409: exceptions.Conflict,
    413: exceptions.OverLimit,
    501: exceptions.HTTPNotImplemented,
}


def normalize_endpoint(endpoint):
    """Return the v1 root for an endpoint given with or without ``/v1``."""
    if not endpoint:
        raise exceptions.CommandError(
            'No endpoint for the composable API: register the service type '
            '"%s" in the catalog or pass --os-endpoint.' % SERVICE_TYPE)
    endpoint = endpoint.rstrip('/')
    if not endpoint.endswith('/v1'):
        endpoint += '/v1'
    return endpoint


def _error_message(response):
    """The user-facing message of an error response.

    API-SIG bodies ({"errors": [{"detail": ..., "code": ...}]}) give their
    details; anything else falls back to the body text or the reason.
    """
    code = None
    request_id = response.headers.get('x-openstack-request-id')
    try:
        body = response.json()
    except ValueError:
        body = None
    message = None
    if isinstance(body, dict):
        errors = body.get('errors')
        if isinstance(errors, list) and errors:
            details = []
            for error in errors:
                if not isinstance(error, dict):
                    continue
                detail = error.get('detail') or error.get('title')
                if detail:
                    details.append(str(detail))
                code = code or error.get('code')
                request_id = request_id or error.get('request_id')
            if details:
                message = '; '.join(details)
        elif isinstance(body.get('error'), dict):
            # Errors made by middleware outside the API's own handler.
            message = (body['error'].get('message') or
                       body['error'].get('title'))
        elif body.get('message'):
            message = str(body['message'])
    if not message:
        text = (response.text or '').strip()
        message = text[:300] if text else (response.reason or 'Error')
    return message, code, request_id


def error_from_response(response, method=None, url=None):
    """Build the osc_lib exception for an error response."""
    message, code, request_id = _error_message(response)
    if request_id:
        message = '%s (Request-ID: %s)' % (message, request_id)
    cls = _ERROR_CLASSES.get(response.status_code, exceptions.ClientException)
    LOG.debug('%s %s failed with %s: %s', method, url,
              response.status_code, message)
    return cls(response.status_code, message=message, details=code)


def quote(ident):
    return parse.quote(str(ident), safe='')


class Client(object):
    """composable API v1 client."""

    def __init__(self, session, endpoint, api_version=DEFAULT_API_VERSION,
                 timeout=None):
        self.session = session
        self.endpoint = normalize_endpoint(endpoint)
        self.api_version = api_version
        self.timeout = timeout
        self.fabrics = Manager(self, 'fabrics')
        self.hosts = Manager(self, 'hosts')
        self.pools = Manager(self, 'pools')
        self.memory_nodes = Manager(self, 'memory_nodes')
        self.devices = DeviceManager(self, 'devices')
        self.leases = LeaseManager(self, 'leases')

    # -- transport ---------------------------------------------------------

    def _url(self, path, params=None):
        if path.startswith('http://') or path.startswith('https://'):
            url = path
        else:
            url = '%s/%s' % (self.endpoint, path.lstrip('/'))
        if params:
            query = parse.urlencode(
                [(k, v) for k, v in params.items() if v is not None],
                doseq=True)
            if query:
                url += ('&' if '?' in url else '?') + query
        return url

    def at_least(self, version):
        """The configured API version, or ``version`` when that is newer:
        what a call that needs ``version`` sends."""
        def parts(value):
            return tuple(int(p) for p in value.split('.'))
        if parts(str(self.api_version)) >= parts(version):
            return self.api_version
        return version

    def request(self, method, path, params=None, body=None, version=None):
        """Send a request; return the decoded JSON body (or None).
        ``version``: the API version to ask for instead of the
        configured one."""
        url = self._url(path, params)
        headers = {
            'Accept': 'application/json',
            VERSION_HEADER: '%s %s' % (SERVICE_TYPE,
                                       version or self.api_version),
        }
        kwargs = {'headers': headers, 'raise_exc': False}
        if body is not None:
            headers['Content-Type'] = 'application/json'
            kwargs['data'] = json.dumps(body)
        if self.timeout:
            kwargs['timeout'] = self.timeout
        try:
            response = self.session.request(url, method, **kwargs)
        except (ks_exc.ConnectFailure, ks_exc.ConnectionError,
                ks_exc.ConnectTimeout) as exc:
            raise exceptions.CommandError(
                'Unable to reach the composable API at %s: %s'
                % (self.endpoint, exc))
        if response.status_code >= 400:
            raise error_from_response(response, method, url)
        if response.status_code == 204 or not response.content:
            return None
        try:
            return response.json()
        except ValueError:
            raise exceptions.CommandError(
                'The composable API returned a response that is not JSON '
                '(HTTP %s from %s %s)' % (response.status_code, method, url))

    def get(self, path, params=None, version=None):
        return self.request('GET', path, params=params, version=version)

    def post(self, path, body=None, version=None):
        return self.request('POST', path, body=body if body is not None
                            else {}, version=version)

    def patch(self, path, body):
        return self.request('PATCH', path, body=body)

    def delete(self, path):
        return self.request('DELETE', path)

    def list(self, path, key, params=None, limit=None, version=None):
        """Every item of a collection, following ``next`` links.

        With ``limit``, at most that many items are returned (and fetched).
        The marker of each ``next`` link is sent to the configured endpoint
        with the original filters, so a link built for another interface
        (say the public one) still works from the internal network.
        ``version``: the API version to ask for instead of the configured
        one.
        """
        params = dict(params or {})
        if limit:
            params['limit'] = limit
        items = []
        seen_markers = set()
        while True:
            body = self.get(path, params=params, version=version) or {}
            page = body.get(key) or []
            items.extend(page)
            if limit and len(items) >= limit:
                return items[:limit]
            next_href = None
            for link in body.get('links') or []:
                if link.get('rel') == 'next':
                    next_href = link.get('href')
            if not next_href or not page:
                return items
            query = dict(parse.parse_qsl(parse.urlsplit(next_href).query))
            marker = query.get('marker')
            if not marker or marker in seen_markers:
                return items
            seen_markers.add(marker)
            params.update(query)
            if limit:
                params['limit'] = min(int(query.get('limit') or limit),
                                      limit - len(items))

    def root(self):
        """The version document of the service (``GET /``)."""
        root = self.endpoint[:-len('/v1')] + '/'
        return self.get(root)


class Manager(object):
    """Helpers for one collection: list, get, create, update, delete."""

    def __init__(self, client, collection):
        self.client = client
        self.collection = collection

    def path(self, ident=None, *parts):
        path = self.collection
        if ident is not None:
            path += '/' + quote(ident)
        for part in parts:
            path += '/' + part
        return path

    def list(self, limit=None, **filters):
        params = {k: v for k, v in filters.items() if v is not None}
        return self.client.list(self.collection, self.collection,
                                params=params, limit=limit)

    def get(self, ident):
        return self.client.get(self.path(ident))

    def create(self, **fields):
        return self.client.post(self.collection, fields)

    def update(self, ident, **fields):
        return self.client.patch(self.path(ident), fields)

    def delete(self, ident):
        return self.client.delete(self.path(ident))


def _newer_or_configured(client, version, call):
    """``call(version)`` with the newest of the configured version and
    ``version``; a server older than that answers 406 and is asked again
    in the configured version."""
    wanted = client.at_least(version)
    if wanted == client.api_version:
        return call(None)
    try:
        return call(wanted)
    except exceptions.ClientException as exc:
        if getattr(exc, 'http_status', getattr(exc, 'code', None)) != 406:
            raise
    return call(None)


class DeviceManager(Manager):

    #: API version from which devices show serial, health and the hosts
    #: that can reach them.
    FACTS_VERSION = '1.4'

    def list(self, limit=None, **filters):
        params = {k: v for k, v in filters.items() if v is not None}
        return _newer_or_configured(
            self.client, self.FACTS_VERSION,
            lambda version: self.client.list(
                self.collection, self.collection, params=params,
                limit=limit, version=version))

    def get(self, ident):
        return _newer_or_configured(
            self.client, self.FACTS_VERSION,
            lambda version: self.client.get(self.path(ident),
                                            version=version))


class LeaseManager(Manager):

    def bind(self, ident, host=None, server=None, attach_mode=None):
        body = {}
        if host is not None:
            body['host'] = host
        if server is not None:
            body['server'] = server
        if attach_mode is not None:
            body['attach_mode'] = attach_mode
        return self.client.post(self.path(ident, 'bind'), body,
                                version=self._mode_version(attach_mode))

    def unbind(self, ident):
        return self.client.post(self.path(ident, 'unbind'), {})

    def actions(self, ident):
        body = self.client.get(self.path(ident, 'actions')) or {}
        return body.get('actions') or []

    #: API versions of the usage history and of elastic leases.
    USAGE_VERSION = '1.1'
    ELASTIC_VERSION = '1.2'
    #: API version from which attach_mode may be virtio-mem.
    VIRTIO_MEM_VERSION = '1.6'
    #: API version from which a virtio-mem lease (of a CXL pool) may be
    #: elastic.
    ELASTIC_VIRTIO_MEM_VERSION = '1.7'

    def _mode_version(self, attach_mode):
        return (self.client.at_least(self.VIRTIO_MEM_VERSION)
                if attach_mode == 'virtio-mem' else None)

    def create(self, **fields):
        # Elastic leases exist from 1.2 on, virtio-mem from 1.6, elastic
        # virtio-mem leases from 1.7: ask for the version needed.
        version = self._mode_version(fields.get('attach_mode'))
        if version is not None and fields.get('elastic'):
            version = self.client.at_least(self.ELASTIC_VIRTIO_MEM_VERSION)
        elif version is None and fields.get('elastic'):
            version = self.client.at_least(self.ELASTIC_VERSION)
        return self.client.post(self.collection, fields, version=version)

    def get(self, ident):
        # Newest of the configured version and 1.2, so that a lease's
        # elastic policy is shown; a server older than 1.2 answers 406,
        # and is asked again in the configured version.
        version = self.client.at_least(self.ELASTIC_VERSION)
        if version == self.client.api_version:
            return self.client.get(self.path(ident))
        try:
            return self.client.get(self.path(ident), version=version)
        except exceptions.ClientException as exc:
            if getattr(exc, 'http_status', getattr(exc, 'code', None)) != \
                    406:
                raise
        return self.client.get(self.path(ident))

    def usage(self, ident, since=None, limit=None, marker=None):
        """The lease's usage samples, oldest first (every page, or the
        first ``limit`` samples), after the sample ``marker`` when it is
        given."""
        version = self.client.at_least(self.USAGE_VERSION)
        params = {'since': since}
        if marker is not None:
            params['marker'] = marker
        samples = []
        seen = set()
        while True:
            query = dict(params)
            if limit:
                query['limit'] = limit - len(samples)
            body = self.client.get(self.path(ident, 'usage'), params=query,
                                   version=version) or {}
            page = body.get('usage') or []
            samples.extend(page)
            if limit and len(samples) >= limit:
                return samples[:limit]
            following = [link.get('href') for link in body.get('links') or []
                         if link.get('rel') == 'next']
            if not following or not page:
                return samples
            marker = dict(parse.parse_qsl(
                parse.urlsplit(following[0]).query)).get('marker')
            if not marker or marker in seen:
                return samples
            seen.add(marker)
            params['marker'] = marker
