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

group = cfg.OptGroup('agent', title='Agent options')

opts = [
    cfg.ListOpt('roles',
                default=['memory_node', 'compute_node'],
                item_type=cfg.types.String(
                    choices=['memory_node', 'compute_node']),
                help='What this agent does: export memory from this node '
                     '(memory_node), use leased memory and devices on this '
                     'node (compute_node), or both.'),
    cfg.StrOpt('memory_exporter',
               default='noop',
               help='Memory exporter driver, by its name on the '
                    'composable.memory.exporters entry point: "tgt" (tgtd) '
                    'or "lio" (the kernel target) export real memory. '
                    '"noop" is a simulation for demos and tests and says '
                    'so in the log: with it, the memory-node role exports '
                    'nothing AND the compute-node role attaches nothing. '
                    'Production memory and compute nodes set "tgt" or '
                    '"lio".'),
    cfg.IntOpt('report_interval',
               default=30,
               min=1,
               help='Seconds between two reports of this agent to the '
                    'conductor.'),
]


def register_opts(conf):
    conf.register_group(group)
    conf.register_opts(opts, group=group)


def list_opts():
    return {group: opts}
