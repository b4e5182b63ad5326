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

group = cfg.OptGroup('fabric', title='Fabric driver options')

opts = [
    cfg.ListOpt('enabled_drivers',
                default=['fake'],
                help='Fabric drivers, by name on the '
                     'composable.fabric.drivers entry point, that fabrics '
                     'may use. "fake" simulates a PCIe fabric and says so '
                     'loudly.'),
    cfg.IntOpt('operation_timeout',
               default=60,
               min=1,
               help='Seconds one fabric operation (bind or unbind of a '
                    'device) may take before it is failed.'),
    cfg.StrOpt('switchtec_command',
               default='switchtec',
               help='The switchtec CLI (switchtec-user) of the switchtec '
                    'fabric driver: a bare name, looked up on the fixed '
                    'PATH /usr/local/sbin:/usr/local/bin:/usr/sbin:'
                    '/usr/bin:/sbin:/bin, or an absolute path. It is run '
                    'with root privileges through privsep, and the '
                    'privileged side runs no other program. It is only '
                    'read from the service\'s own configuration: a '
                    'fabric\'s driver_info cannot choose the program.'),
]


def register_opts(conf):
    conf.register_group(group)
    conf.register_opts(opts, group=group)


def list_opts():
    return {group: opts}
