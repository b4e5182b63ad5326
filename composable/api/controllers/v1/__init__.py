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

"""API v1: the route table of every v1 resource.

Each entry maps a path template to the handlers of its methods; a
handler takes the request and the placeholders' values. The OpenAPI
document (composable/api/openapi.yaml) lists exactly these routes.
"""

from composable.api.controllers.v1 import devices
from composable.api.controllers.v1 import fabrics
from composable.api.controllers.v1 import hosts
from composable.api.controllers.v1 import leases
from composable.api.controllers.v1 import memory_nodes
from composable.api.controllers.v1 import pools

ROUTES = (
    ('/v1/fabrics', {'GET': fabrics.list_fabrics,
                     'POST': fabrics.create_fabric}),
    ('/v1/fabrics/{fabric_ident}', {'GET': fabrics.show_fabric,
                                    'PATCH': fabrics.update_fabric,
                                    'DELETE': fabrics.delete_fabric}),
    ('/v1/hosts', {'GET': hosts.list_hosts,
                   'POST': hosts.create_host}),
    ('/v1/hosts/{host_ident}', {'GET': hosts.show_host,
                                'PATCH': hosts.update_host,
                                'DELETE': hosts.delete_host}),
    ('/v1/pools', {'GET': pools.list_pools,
                   'POST': pools.create_pool}),
    ('/v1/pools/{pool_ident}', {'GET': pools.show_pool,
                                'PATCH': pools.update_pool,
                                'DELETE': pools.delete_pool}),
    ('/v1/memory_nodes', {'GET': memory_nodes.list_memory_nodes,
                          'POST': memory_nodes.create_memory_node}),
    ('/v1/memory_nodes/{memory_node_ident}', {
        'GET': memory_nodes.show_memory_node,
        'PATCH': memory_nodes.update_memory_node,
        'DELETE': memory_nodes.delete_memory_node}),
    ('/v1/devices', {'GET': devices.list_devices,
                     'POST': devices.create_device}),
    ('/v1/devices/{device_ident}', {'GET': devices.show_device,
                                    'PATCH': devices.update_device,
                                    'DELETE': devices.delete_device}),
    ('/v1/leases', {'GET': leases.list_leases,
                    'POST': leases.create_lease}),
    ('/v1/leases/{lease_ident}', {'GET': leases.show_lease,
                                  'PATCH': leases.update_lease,
                                  'DELETE': leases.delete_lease}),
    ('/v1/leases/{lease_ident}/bind', {'POST': leases.bind_lease}),
    ('/v1/leases/{lease_ident}/unbind', {'POST': leases.unbind_lease}),
    ('/v1/leases/{lease_ident}/actions', {'GET': leases.list_actions}),
    ('/v1/leases/{lease_ident}/usage', {'GET': leases.show_usage}),
)
