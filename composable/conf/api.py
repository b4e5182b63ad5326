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

from oslo_config import cfg

group = cfg.OptGroup('api', title='API server options')

opts = [
    cfg.HostAddressOpt('host_ip',
                       default='127.0.0.1',
                       help='Address the standalone API server listens on.'),
    cfg.PortOpt('port',
                default=6590,
                help='Port the standalone API server listens on.'),
    cfg.IntOpt('max_limit',
               default=1000,
               min=1,
               help='Largest number of items one list request returns; a '
                    'larger "limit" is cut to this.'),
    cfg.IntOpt('default_limit',
               default=1000,
               min=1,
               help='Number of items a list request returns when it gives '
                    'no "limit".'),
    cfg.StrOpt('public_endpoint',
               help='Public URL of the API, used in links returned to '
                    'clients when the API sits behind a proxy. Defaults to '
                    'the request host URL.'),
    cfg.IntOpt('max_request_body_size',
               default=256 * 1024,
               min=1024,
               help='Largest request body, in bytes, the API reads; a '
                    'larger one is refused with 413 before it is parsed. '
                    'The largest valid request (a lease naming 4096 devices '
                    'by UUID) is about 160 KiB.'),
    cfg.IntOpt('workers',
               default=8,
               min=1,
               help='Threads serving requests in the standalone API server. '
                    'Production deployments run the WSGI application under '
                    'uWSGI or mod_wsgi instead.'),
]


def register_opts(conf):
    conf.register_group(group)
    conf.register_opts(opts, group=group)


def list_opts():
    return {group: opts}
