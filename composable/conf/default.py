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

import socket

from oslo_config import cfg

opts = [
    cfg.StrOpt('host',
               default=socket.gethostname(),
               sample_default='localhost',
               help='Name of this node. Conductors use it to mark the '
                    'leases they hold; agents use it as their RPC server '
                    'name, so it must match the host or memory node name '
                    'registered in the API.'),
    cfg.StrOpt('auth_strategy',
               default='keystone',
               choices=[('keystone',
                         'Validate tokens with keystonemiddleware'),
                        ('noauth', 'No authentication: every request is an '
                                   'admin of the project named in '
                                   'X-Project-Id (default "demo"). Only for '
                                   'the standalone service on a loopback '
                                   'address.')],
               help='How API requests are authenticated.'),
    cfg.IntOpt('rpc_response_timeout_bind',
               default=120,
               min=1,
               help='Seconds the conductor waits for an agent to finish one '
                    'export or attach step before failing the bind.'),
]


def register_opts(conf):
    conf.register_opts(opts)


def list_opts():
    return {'DEFAULT': opts}
