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

"""What the conductor asks Nova about a server, through python-novaclient.

The conductor needs, for a server (instance) UUID: the compute host it
runs on (``OS-EXT-SRV-ATTR:host``, an admin-only attribute), its state,
the project that owns it, and the scheduler hints it was booted with.

Credentials
-----------
Calls are made with composable's own account (``[nova]`` keystoneauth
options; see composable/conf/nova.py), which must be allowed to read the
host of any server (Nova's admin role by default policy).

When a call is made on behalf of a user whose request carries a token and
``[service_user] send_service_user_token`` is on, the server is first read
*as that user*, with composable's service token attached
(``X-Service-Token``, keystoneauth's ServiceTokenAuthWrapper), as Nova does
towards Cinder and Neutron: Nova itself decides whether the user may see
the server (a server of another project is "not found"), and accepts the
call even if the user's token expired meanwhile. What only admins may read
(the host) is then read with composable's account.

Microversions
-------------
* 2.1 (novaclient ``servers.get``): host, vm_state, task_state, status,
  tenant_id, user_id; every Nova has it.
* 2.100: ``scheduler_hints`` in ``GET /servers/{id}`` (Nova 2024.2 and
  later). python-novaclient 18.x stops at 2.96 and refuses a higher
  version, so this one call is a plain keystoneauth request on the same
  session. An older Nova answers 406; the hints are then unknown (None).

Errors become composable exceptions (they cross RPC to the API): a server
Nova does not know is NotFound (404), Nova unreachable or refusing
composable's credentials is ServiceUnavailable (503).
"""

import collections
import threading

from keystoneauth1 import adapter as ks_adapter
from keystoneauth1 import exceptions as ks_exc
from keystoneauth1 import loading as ks_loading
from keystoneauth1 import service_token
from keystoneauth1 import token_endpoint
from novaclient import client as nova_client
from novaclient import exceptions as nova_exc
from oslo_log import log as logging

from composable.common import context as ctx_mod
from composable.common import exception
from composable.common import keystone
from composable import conf
from composable.db import api as db_api

CONF = conf.CONF
LOG = logging.getLogger(__name__)

NOVA_GROUP = 'nova'
SERVICE_USER_GROUP = 'service_user'

# Everything but the hints is in the base microversion.
MV_SERVER = '2.1'
MV_SCHEDULER_HINTS = '2.100'

Server = collections.namedtuple(
    'Server', ['uuid', 'host', 'project_id', 'user_id', 'status',
               'vm_state', 'task_state'])


def configured(conf_=None):
    """True when ``[nova]`` names credentials (auth_type is set), or the
    process was given a ready NovaAPI (:func:`reset`)."""
    conf_ = conf_ or CONF
    if _API is not None and _API.given_session:
        return True
    return bool(conf_[NOVA_GROUP].auth_type)


def _server_not_found(uuid):
    return exception.NotFound(
        'Server %s could not be found in Nova (or is not yours).' % uuid)


def _unavailable(what, err):
    return exception.ServiceUnavailable(
        reason='Nova could not be asked %s: %s' % (what, err))


def _from_novaclient(server):
    info = server.to_dict()
    return Server(
        uuid=info.get('id'),
        host=info.get('OS-EXT-SRV-ATTR:host'),
        project_id=info.get('tenant_id'),
        user_id=info.get('user_id'),
        status=info.get('status'),
        vm_state=info.get('OS-EXT-STS:vm_state'),
        task_state=info.get('OS-EXT-STS:task_state'))


class NovaAPI(object):
    """Server lookups; one instance per process is enough (thread-safe:
    the keystoneauth session and auth plugins are, and every call makes
    its own small novaclient client on them)."""

    def __init__(self, conf_=None, session=None, auth=None):
        """``session`` and ``auth``: a keystoneauth session and auth plugin
        to use instead of those the ``[nova]`` options describe."""
        self.conf = conf_ or CONF
        self._lock = threading.Lock()
        self._session = session
        self._auth = auth
        self.given_session = session is not None
        self._service_auth = None

    # ------------------------------------------------------------ plumbing

    def _load(self):
        with self._lock:
            if self._session is None:
                auth = ks_loading.load_auth_from_conf_options(self.conf,
                                                              NOVA_GROUP)
                self._session = ks_loading.load_session_from_conf_options(
                    self.conf, NOVA_GROUP, auth=auth)
                self._auth = auth
            return self._session, self._auth

    def _load_service_auth(self):
        with self._lock:
            if self._service_auth is None:
                self._service_auth = ks_loading.load_auth_from_conf_options(
                    self.conf, SERVICE_USER_GROUP)
            return self._service_auth

    def _adapter_kwargs(self):
        return keystone.adapter_options(self.conf[NOVA_GROUP])

    def _user_auth(self, context):
        """The user's token with composable's service token attached, or
        None when calls on behalf of the user are not configured."""
        token = getattr(context, 'auth_token', None)
        if not token or not self.conf[
                SERVICE_USER_GROUP].send_service_user_token:
            return None
        session, auth = self._load()
        # The user's token carries no catalog here: the endpoint is the
        # one composable's own account finds for Nova.
        endpoint = ks_adapter.Adapter(
            session, auth=auth,
            interface=self.conf[NOVA_GROUP].valid_interfaces,
            **self._adapter_kwargs()).get_endpoint()
        return service_token.ServiceTokenAuthWrapper(
            user_auth=token_endpoint.Token(endpoint, token),
            service_auth=self._load_service_auth())

    def novaclient(self, context=None, auth=None):
        """A python-novaclient client at MV_SERVER on the [nova] session
        (with ``auth`` instead of composable's own account if given)."""
        session, own = self._load()
        kwargs = self._adapter_kwargs()
        return nova_client.Client(
            MV_SERVER, session=session, auth=auth or own,
            endpoint_type=self.conf[NOVA_GROUP].valid_interfaces,
            global_request_id=getattr(context, 'global_id', None),
            **kwargs)

    def _show(self, context, uuid, auth=None):
        try:
            return _from_novaclient(
                self.novaclient(context, auth).servers.get(uuid))
        except nova_exc.NotFound:
            raise _server_not_found(uuid)
        except (nova_exc.Unauthorized, nova_exc.Forbidden) as err:
            LOG.error('Nova refused composable\'s credentials for server '
                      '%(uuid)s: %(err)s; check the [nova] and '
                      '[service_user] options.', {'uuid': uuid, 'err': err})
            raise _unavailable('about server %s' % uuid,
                               'it refused the credentials')
        except (nova_exc.ClientException, ks_exc.ClientException) as err:
            raise _unavailable('about server %s' % uuid, err)

    # ------------------------------------------------------------ lookups

    def get_server(self, context, uuid):
        """A Server; NotFound when Nova does not know it (or, acting for a
        user, the user may not see it)."""
        user_auth = self._user_auth(context)
        if user_auth is not None:
            server = self._show(context, uuid, auth=user_auth)
            if server.host is not None:
                return server
            # An ordinary user does not see the host (nor does anyone
            # while the server has none): read it with composable's own
            # account, now that Nova said the user may see the server.
        return self._show(context, uuid)

    def scheduler_hints(self, context, uuid):
        """The scheduler hints the server was booted with ({} for none),
        or None when Nova is older than microversion 2.100."""
        session, auth = self._load()
        adapter = ks_adapter.Adapter(
            session, auth=auth,
            interface=self.conf[NOVA_GROUP].valid_interfaces,
            global_request_id=getattr(context, 'global_id', None),
            **self._adapter_kwargs())
        try:
            resp = adapter.get('/servers/%s' % uuid,
                               microversion=MV_SCHEDULER_HINTS,
                               raise_exc=False)
        except ks_exc.ClientException as err:
            raise _unavailable('for the scheduler hints of server %s' % uuid,
                               err)
        if resp.status_code == 404:
            raise _server_not_found(uuid)
        if resp.status_code == 406:
            LOG.info('Nova does not support microversion %s; the scheduler '
                     'hints of server %s are unknown.', MV_SCHEDULER_HINTS,
                     uuid)
            return None
        if resp.status_code != 200:
            raise _unavailable(
                'for the scheduler hints of server %s' % uuid,
                'HTTP %d' % resp.status_code)
        return resp.json()['server'].get('scheduler_hints') or {}


_API = None
_API_LOCK = threading.Lock()


def api():
    """The process's NovaAPI (made on first use, from CONF)."""
    global _API
    with _API_LOCK:
        if _API is None:
            _API = NovaAPI()
        return _API


def reset(new=None):
    """Forget the process's NovaAPI (configuration reloaded), or use
    ``new`` from now on."""
    global _API
    with _API_LOCK:
        _API = new


def get_server(context, uuid):
    return api().get_server(context, uuid)


def server_host(context, uuid):
    """The compute host the server is on, or None (not scheduled yet,
    shelved offloaded)."""
    return get_server(context, uuid).host


def server_state(context, uuid):
    """(vm_state, task_state) of the server."""
    server = get_server(context, uuid)
    return server.vm_state, server.task_state


def server_project(context, uuid):
    return get_server(context, uuid).project_id


def scheduler_hints(context, uuid):
    return api().scheduler_hints(context, uuid)


def host_for_bind(context, lease, host_ident, instance_uuid):
    """The host to bind ``lease`` to for server ``instance_uuid``: the
    one Nova says the server runs on.

    Refuses (NotFound, like a server that does not exist) a server of
    another project than the lease's; refuses (Conflict) a server without
    a host and a ``host_ident`` that is not the server's host; Invalid
    when the server's host is not a composable host. Returns the host's
    name.
    """
    server = get_server(context, instance_uuid)
    if server.project_id != lease.project_id:
        LOG.info('Refused to bind lease %(lease)s of project %(lp)s to '
                 'server %(inst)s of project %(sp)s.',
                 {'lease': lease.uuid, 'lp': lease.project_id,
                  'inst': instance_uuid, 'sp': server.project_id})
        raise exception.NotFound(
            'Server %s could not be found in the project of lease %s.' %
            (instance_uuid, lease.uuid))
    if not server.host:
        raise exception.Conflict(
            reason='server %s runs on no host now (it is %s); bind the '
                   'lease once the server is active' %
                   (instance_uuid, server.vm_state or server.status))
    admin = ctx_mod.get_admin_context()
    try:
        host = db_api.host_get(admin, server.host)
    except exception.HostNotFound:
        raise exception.Invalid(
            reason='server %s runs on %s, which is not a composable host; '
                   'an operator must register it first' %
                   (instance_uuid, server.host))
    if host_ident:
        try:
            asked = db_api.host_get(admin, host_ident)
        except exception.HostNotFound:
            raise exception.Invalid(reason='host %s does not exist' %
                                    host_ident)
        if asked.id != host.id:
            raise exception.Conflict(
                reason='server %s runs on host %s, not on %s; leave the '
                       'host out to bind where the server runs' %
                       (instance_uuid, host.name, asked.name))
    return host.name
