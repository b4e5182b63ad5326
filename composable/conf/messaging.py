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
import oslo_messaging as messaging

upgrade_levels_group = cfg.OptGroup(
    'upgrade_levels', title='RPC versions during a rolling upgrade')

upgrade_levels_opts = [
    cfg.StrOpt('conductor',
               help='Highest conductor RPC API version that the other '
                    'services (API, agents) send, e.g. 1.6 while some '
                    'conductors still run the previous release. Unset: '
                    'the newest this release knows. Reports an older '
                    'conductor would not understand are then not sent '
                    '(the agent logs them).'),
]


def register_opts(conf):
    messaging.set_transport_defaults(control_exchange='composable')
    conf.register_group(upgrade_levels_group)
    conf.register_opts(upgrade_levels_opts, group=upgrade_levels_group)


def list_opts():
    return {upgrade_levels_group.name: upgrade_levels_opts}
