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

"""Options for oslo-config-generator and for the sample configuration."""

import collections

from oslo_log import log
from oslo_middleware import cors

from composable.conf import agent
from composable.conf import allocator
from composable.conf import api
from composable.conf import compute
from composable.conf import compute_cxl
from composable.conf import compute_devices
from composable.conf import compute_pci
from composable.conf import conductor
from composable.conf import database
from composable.conf import default
from composable.conf import elastic
from composable.conf import fabric
from composable.conf import memory
from composable.conf import messaging
from composable.conf import nova
from composable.conf import placement

_MODULES = (default, api, conductor, allocator, agent, compute,
            compute_pci, compute_devices, compute_cxl, fabric, memory,
            database, placement, nova, elastic, messaging)


def list_opts():
    grouped = collections.defaultdict(list)
    for module in _MODULES:
        for group, opts in module.list_opts().items():
            grouped[group].extend(opts)
    return [(group, opts) for group, opts in grouped.items()]


def set_config_defaults():
    log.set_defaults(default_log_levels=log.get_default_log_levels() + [
        'pecan=WARN', 'routes=WARN', 'stevedore=INFO',
        # "Context impl SQLiteImpl", "Will assume transactional DDL" and
        # each migration's name at every start; errors still show.
        'alembic=WARN'])
    cors.set_defaults(
        allow_headers=['X-Auth-Token', 'X-OpenStack-Request-ID',
                       'OpenStack-API-Version'],
        expose_headers=['X-OpenStack-Request-ID', 'OpenStack-API-Version'],
        allow_methods=['GET', 'PUT', 'POST', 'DELETE', 'PATCH'])
