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

group = cfg.OptGroup('allocator', title='Allocator options')

opts = [
    cfg.IntOpt('memory_extent_mb',
               default=1024,
               min=4,
               help='Default extent size (MiB) of new memory pools: a memory '
                    'lease is carved into extents of this size, each one '
                    'exported as one LUN from one memory node. Coarse '
                    'extents keep the number of iSCSI sessions and swap '
                    'devices small. A pool\'s own step_size overrides it, '
                    'and memory leases must be a multiple of it.'),
    cfg.StrOpt('memory_placement',
               default='spread',
               choices=[('spread', 'Place each extent on the memory node with '
                                   'the most free memory, so a lease is '
                                   'striped over many nodes (Linux '
                                   'round-robins swap devices of equal '
                                   'priority).'),
                        ('pack', 'Fill the fullest node that still has room '
                                 'first, so a lease touches as few nodes as '
                                 'possible and large free blocks stay '
                                 'available.')],
               help='How extents of a memory lease are placed on the memory '
                    'nodes of a pool.'),
    cfg.IntOpt('claim_batch_size',
               default=32,
               min=1,
               help='Most lease creates and releases of never-bound leases '
                    'a conductor commits in one database transaction (each '
                    'in a savepoint of its own). Requests that arrive '
                    'while a batch runs wait for the next one; a lone '
                    'request runs at once. 1 gives every request its own '
                    'transaction.'),
    cfg.IntOpt('claim_lanes',
               default=2,
               min=1,
               max=2,
               help='Claim threads of a conductor. With 2, leases of '
                    'devices only are claimed and released by a thread of '
                    'their own, in transactions that overlap with those of '
                    'leases with memory (they lock different pools). 1 '
                    'runs every claim in one thread. SQLite always uses '
                    '1.'),
    cfg.IntOpt('claim_retries',
               default=5,
               min=0,
               help='Times a claim is retried after a database deadlock or a '
                    'lost race for a device.'),
]


def register_opts(conf):
    conf.register_group(group)
    conf.register_opts(opts, group=group)


def list_opts():
    return {group: opts}
