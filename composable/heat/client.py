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

"""Heat client plugin for the composable API.

Registered as ``composable`` in Heat's ``heat.clients`` entry point group,
so ``self.client('composable')`` in a resource returns the same client the
``openstack composable`` commands use, riding on the keystoneauth session
Heat builds for the stack's user and finding the API in the catalog under
the ``composable`` service type.
"""

from heat.common import config as heat_config
from heat.common import exception as heat_exception
from heat.engine.clients import client_plugin
from heat.engine import constraints
from osc_lib import exceptions as osc_exceptions
from oslo_config import cfg

from composable.cli import client as composable_client

CLIENT_NAME = 'composable'

# [clients_composable] endpoint_type, ca_file, ... as for Heat's own
# clients; unset options fall back to Heat's [clients] section.
cfg.CONF.register_opts(heat_config.clients_opts,
                       group='clients_' + CLIENT_NAME)


class ComposableClientPlugin(client_plugin.ClientPlugin):

    exceptions_module = osc_exceptions

    service_types = [COMPOSABLE] = [composable_client.SERVICE_TYPE]

    def _create(self, version=None):
        interface = self._get_client_option(CLIENT_NAME, 'endpoint_type')
        endpoint = self.url_for(service_type=self.COMPOSABLE,
                                endpoint_type=interface)
        return composable_client.Client(
            session=self.context.keystone_session, endpoint=endpoint,
            api_version=version or composable_client.DEFAULT_API_VERSION)

    def is_not_found(self, ex):
        return isinstance(ex, osc_exceptions.NotFound)

    def is_conflict(self, ex):
        return isinstance(ex, osc_exceptions.Conflict)

    def is_over_limit(self, ex):
        return isinstance(ex, osc_exceptions.OverLimit)

    def get_pool(self, pool):
        """The pool named or identified by ``pool``; EntityNotFound when
        the caller cannot see such a pool."""
        try:
            return self.client().pools.get(pool)
        except osc_exceptions.NotFound:
            raise heat_exception.EntityNotFound(entity='Composable pool',
                                                name=pool)


class PoolConstraint(constraints.BaseCustomConstraint):
    """``composable.pool``: a pool (name or UUID) the user can see."""

    resource_client_name = CLIENT_NAME
    resource_getter_name = 'get_pool'
