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

"""Every call the dashboard makes to the composable API.

Views, tables, forms and tabs import this module and nothing else of the
API: it builds the project's own REST client (``composable.cli.client``,
the one the ``openstack composable`` commands use) on a keystoneauth
session carrying the user's token, with the ``composable`` endpoint of the
user's service catalog, and turns the client's errors into
:class:`ComposableAPIError` so views can show the API's own message.
"""

import logging

from django.conf import settings
from horizon import exceptions as horizon_exceptions
from horizon.utils.memoized import memoized
from keystoneauth1 import session as ks_session
from keystoneauth1 import token_endpoint
from openstack_dashboard.api import _nova
from openstack_dashboard.api import base
from openstack_dashboard.api import nova
from osc_lib import exceptions as osc_exceptions

from composable.cli import client as composable_client

LOG = logging.getLogger(__name__)

SERVICE_TYPE = composable_client.SERVICE_TYPE


class ComposableAPIError(Exception):
    """The composable API refused a request or could not be reached.

    ``str()`` is the API's own message (with its request ID), which
    Horizon shows as the details of the error message a view gives.
    """

    def __init__(self, message, status_code=None, code=None):
        super().__init__(message)
        self.message = message
        self.status_code = status_code
        self.code = code


class ComposableNotFound(ComposableAPIError):
    """404: the object does not exist or belongs to another project."""


class ComposableConflict(ComposableAPIError):
    """409: the object is not in a state that allows the request."""


class ComposableUnauthorized(ComposableAPIError,
                             horizon_exceptions.NotAuthorized):
    """401: the token was refused; Horizon logs the user out."""


_ERRORS_BY_STATUS = {
    401: ComposableUnauthorized,
    404: ComposableNotFound,
    409: ComposableConflict,
}


def _translated(func):
    """Raise the client's errors as :class:`ComposableAPIError`."""
    def call(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except osc_exceptions.ClientException as exc:
            status = getattr(exc, 'code', None)
            cls = _ERRORS_BY_STATUS.get(status, ComposableAPIError)
            raise cls(getattr(exc, 'message', None) or str(exc),
                      status_code=status,
                      code=getattr(exc, 'details', None)) from exc
        except osc_exceptions.CommandError as exc:
            # The client could not reach the API or read its answer.
            raise ComposableAPIError(str(exc)) from exc
    call.__name__ = func.__name__
    call.__doc__ = func.__doc__
    return call


class Resource(base.APIDictWrapper):
    """One object of the API: its fields as attributes, ``id`` its UUID."""

    @property
    def id(self):
        return self._apidict.get('uuid')


class Lease(Resource):

    @property
    def display_name(self):
        return self._apidict.get('name') or self._apidict.get('uuid')


class Pool(Resource):

    @property
    def usable(self):
        """What the pool can lend: its total less what is held back."""
        return max((self.total or 0) - (self.reserved or 0), 0)


def _ssl_verify():
    if getattr(settings, 'OPENSTACK_SSL_NO_VERIFY', False):
        return False
    return getattr(settings, 'OPENSTACK_SSL_CACERT', None) or True


@memoized
def composableclient(request):
    """The composable client of this request (one per request).

    The session sends the user's scoped token as it is (no new token is
    asked of Keystone) to the ``composable`` endpoint of the catalog, of
    the interface ``OPENSTACK_ENDPOINT_TYPE`` names.
    """
    endpoint = base.url_for(request, SERVICE_TYPE)
    auth = token_endpoint.Token(endpoint, request.user.token.id)
    session = ks_session.Session(auth=auth, verify=_ssl_verify())
    api_version = getattr(settings, 'COMPOSABLE_API_VERSION',
                          composable_client.DEFAULT_API_VERSION)
    timeout = getattr(settings, 'COMPOSABLE_API_TIMEOUT', None)
    return composable_client.Client(session, endpoint,
                                    api_version=api_version,
                                    timeout=timeout)


def _wrap(cls, items):
    return [cls(item) for item in items]


# -- leases ----------------------------------------------------------------

@_translated
def lease_list(request, **filters):
    return _wrap(Lease, composableclient(request).leases.list(**filters))


@_translated
def lease_get(request, lease_id):
    return Lease(composableclient(request).leases.get(lease_id))


@_translated
def lease_create(request, **fields):
    return Lease(composableclient(request).leases.create(**fields))


@_translated
def lease_update(request, lease_id, **fields):
    client = composableclient(request)
    return Lease(client.leases.update(lease_id, **fields))


@_translated
def lease_delete(request, lease_id):
    composableclient(request).leases.delete(lease_id)


@_translated
def lease_bind(request, lease_id, server=None, host=None, attach_mode=None):
    return Lease(composableclient(request).leases.bind(
        lease_id, host=host, server=server, attach_mode=attach_mode))


@_translated
def lease_unbind(request, lease_id):
    return Lease(composableclient(request).leases.unbind(lease_id))


@_translated
def lease_action_list(request, lease_id):
    return _wrap(base.APIDictWrapper,
                 composableclient(request).leases.actions(lease_id))


@_translated
def lease_usage(request, lease_id, since=None, limit=None):
    """The lease's usage samples, oldest first (API 1.1)."""
    return composableclient(request).leases.usage(lease_id, since=since,
                                                  limit=limit)


# -- pools and the inventory: list, get, create, update, delete ----------

def _inventory_calls(collection, cls=Resource):
    """list/get/create/update/delete for one inventory collection."""

    @_translated
    def list_(request, **filters):
        manager = getattr(composableclient(request), collection)
        return _wrap(cls, manager.list(**filters))

    @_translated
    def get(request, ident):
        return cls(getattr(composableclient(request), collection).get(ident))

    @_translated
    def create(request, **fields):
        return cls(getattr(composableclient(request),
                           collection).create(**fields))

    @_translated
    def update(request, ident, **fields):
        return cls(getattr(composableclient(request),
                           collection).update(ident, **fields))

    @_translated
    def delete(request, ident):
        getattr(composableclient(request), collection).delete(ident)

    return list_, get, create, update, delete


(fabric_list, fabric_get, fabric_create, fabric_update,
 fabric_delete) = _inventory_calls('fabrics')
(host_list, host_get, host_create, host_update,
 host_delete) = _inventory_calls('hosts')
(memory_node_list, memory_node_get, memory_node_create, memory_node_update,
 memory_node_delete) = _inventory_calls('memory_nodes')
(device_list, device_get, device_create, device_update,
 device_delete) = _inventory_calls('devices')
(_pool_list, _pool_get, _pool_create, pool_update,
 pool_delete) = _inventory_calls('pools', Pool)

#: The API version from which pools show and take their SR-IOV fields.
SRIOV_VERSION = '1.3'


def _at_least(client, version, call):
    """``call(v)``, v the newer of the configured API version and
    ``version`` (None: the configured one); a server older than
    ``version`` answers 406 and is asked again at the configured one."""
    wanted = client.at_least(version)
    if wanted == client.api_version:
        return call(None)
    try:
        return call(wanted)
    except osc_exceptions.ClientException as exc:
        if getattr(exc, 'code', None) != 406:
            raise
    return call(None)


@_translated
def pool_list(request, **filters):
    """The pools, with the SR-IOV fields of those made of virtual
    functions where the server has them (API 1.3)."""
    client = composableclient(request)
    params = {k: v for k, v in filters.items() if v is not None}
    return _wrap(Pool, _at_least(
        client, SRIOV_VERSION,
        lambda version: client.list('pools', 'pools', params=params,
                                    version=version)))


@_translated
def pool_get(request, ident):
    client = composableclient(request)
    path = client.pools.path(ident)
    return Pool(_at_least(client, SRIOV_VERSION,
                          lambda version: client.get(path,
                                                     version=version)))


@_translated
def pool_create(request, **fields):
    """Create a pool; one of SR-IOV virtual functions (``sriov``) is
    asked for at API 1.3 at least."""
    client = composableclient(request)
    version = client.at_least(SRIOV_VERSION) if fields.get('sriov') \
        else None
    return Pool(client.post('pools', fields, version=version))


def names_by_uuid(request, lister):
    """UUID -> name of what ``lister`` (``fabric_list``, ``pool_list``)
    lists, the unnamed left out; {} when the API does not answer, the
    tables then showing UUIDs."""
    try:
        return {item.uuid: item.get('name') for item in lister(request)
                if item.get('name')}
    except ComposableAPIError as exc:
        LOG.warning('Unable to list names for the tables: %s', exc)
        return {}


def lease_names(request):
    """UUID -> name of the named leases of every project (what an
    administrator's inventory tables show of the lease holding a
    device); {} when the API does not answer."""
    return names_by_uuid(
        request, lambda req: lease_list(req, all_projects=True))


# -- what Nova knows: names of aggregates and servers ---------------------

#: Nova's API version from which host aggregates show their UUID (the
#: ``aggregate_uuid`` of a fabric).
AGGREGATE_UUID_VERSION = '2.41'


def _from_nova(request, what, read, default):
    """``read()`` where the cloud has Nova; ``default`` when it has none
    or Nova cannot be read: names are a courtesy, their absence no error
    of the page (the UUIDs are shown instead)."""
    try:
        if not base.is_service_enabled(request, 'compute'):
            return default
        return read()
    except Exception as exc:
        LOG.warning('Unable to read the %s of Nova; their UUIDs are shown: '
                    '%s', what, exc)
        return default


def aggregate_names(request):
    """UUID -> name of Nova's host aggregates."""
    def read():
        # Horizon's own client (openstack_dashboard.api.nova reads the
        # aggregates through it too), at the version that shows UUIDs.
        client = _nova.novaclient(request, version=AGGREGATE_UUID_VERSION)
        return {agg.uuid: agg.name for agg in client.aggregates.list()
                if getattr(agg, 'uuid', None) and agg.name}
    return _from_nova(request, 'host aggregates', read, {})


def server_name(request, server_id):
    """The name of one server, or None."""
    return _from_nova(request, 'server %s' % server_id,
                      lambda: nova.server_get(request, server_id).name, None)


def server_names(request):
    """ID -> name of the servers of the user's project."""
    def read():
        servers, _more = nova.server_list(request)
        return {server.id: server.name for server in servers
                if server.name}
    return _from_nova(request, 'servers', read, {})
