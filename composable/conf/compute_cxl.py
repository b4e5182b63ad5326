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

"""[compute_node] options of CXL memory (composable.agent.compute_node.
cxl_memory)."""

from oslo_config import cfg

from composable.conf import compute

group = compute.group

SYSFS = 'sysfs'
NOOP = 'noop'

opts = [
    cfg.StrOpt('cxl_backend',
               choices=[(SYSFS, 'make CXL regions and online them through '
                                'sysfs, as root through oslo.privsep '
                                '(Linux 6.3 or later)'),
                        (NOOP, 'a simulation for demos and tests: regions '
                               'are only logged, nothing on the host '
                               'changes')],
               help='How leased CXL memory is put on this compute node. '
                    'Unset: noop when [agent]memory_exporter is noop (the '
                    'simulated data plane), sysfs otherwise. The agent '
                    'checks at start that the kernel has what sysfs needs '
                    'and names what is missing.'),
    cfg.StrOpt('cxl_state_file',
               default='/var/lib/composable/cxl-regions.json',
               help='File in which the agent records each CXL region it '
                    'makes or removes, step by step, so that after a '
                    'restart it finishes or undoes what it had begun. Its '
                    'directory must be writable by the agent.'),
    cfg.IntOpt('cxl_offline_attempts',
               default=5,
               min=1,
               max=100,
               help='How many times the agent asks the kernel to offline '
                    'the memory of a CXL region before it gives up and '
                    'fails the unbind, naming the processes whose pages '
                    'are on the node.'),
    cfg.FloatOpt('cxl_offline_interval',
                 default=2.0,
                 min=0.0,
                 max=60.0,
                 help='Seconds between two attempts to offline the memory '
                      'of a CXL region (the processes holding its pages '
                      'may end or free them meanwhile).'),
    cfg.FloatOpt('cxl_offline_block_timeout',
                 default=10.0,
                 min=0.1,
                 max=600.0,
                 help='Seconds the kernel is given to offline one memory '
                      'block of a CXL region (to migrate its pages to '
                      'other memory). Linux does not give up on pages '
                      'that cannot move for now (for instance when the '
                      'rest of the host\'s memory is full): it retries '
                      'until the writer is interrupted. After this time '
                      'the write is interrupted and the block counts as '
                      'busy for this attempt; it stays online. One '
                      'attempt takes at most about this times the '
                      'number of blocks of the region.'),
    cfg.IntOpt('cxl_sanitize_timeout',
               default=600,
               min=1,
               max=3600,
               help='Seconds a CXL memory device\'s sanitize may take '
                    'before the unbind that asked for it fails.'),
]


def register_opts(conf):
    conf.register_opts(opts, group=group)


def list_opts():
    return {group: opts}
