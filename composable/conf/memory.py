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

"""Options of a memory node: the tmpfs area and the iSCSI exporters."""

from oslo_config import cfg

group = cfg.OptGroup('memory_node', title='Memory node options')

opts = [
    cfg.StrOpt('tmpfs_path',
               default='/var/lib/composable/memory',
               help='Directory of the tmpfs whose RAM this node lends. '
                    'Each extent is one file in it. It must be a tmpfs: '
                    'composable-agent refuses a directory on another file '
                    'system, because that would lend disk, not memory.'),
    cfg.IntOpt('tmpfs_size_mb',
               default=0,
               min=0,
               help='Size of the tmpfs in MiB, used when manage_mount is '
                    'true (it is the "size=" mount option). 0 lets the '
                    'kernel choose (half of the RAM). It should not exceed '
                    'the capacity_mb registered for this memory node plus '
                    'its reserved_mb.'),
    cfg.BoolOpt('manage_mount',
                default=False,
                help='Mount a tmpfs of tmpfs_size_mb on tmpfs_path when the '
                     'agent starts, if nothing is mounted there. When '
                     'false, the operator mounts it (fstab, a systemd mount '
                     'unit) and the agent only checks it is a tmpfs.'),
    cfg.BoolOpt('allow_overcommit',
                default=False,
                help='False (the default): the memory of an extent is '
                     'reserved when the extent is exported (fallocate on '
                     'tmpfs), and an export that does not fit fails at '
                     'once with a clear error. True: extents are sparse '
                     'files whose pages are taken only when written, so '
                     'the node may promise more than it has and a full '
                     'tmpfs shows up later as I/O errors in the swap of a '
                     'compute node. Only for tests and demos.'),
    cfg.StrOpt('portal',
               help='The iSCSI portal, "address:port", that compute nodes '
                    'use to reach this node\'s targets. When unset, the '
                    'portal registered for the memory node in the API is '
                    'used.'),
    cfg.StrOpt('transport',
               default='tcp',
               choices=[('tcp', 'iSCSI over TCP'),
                        ('iser', 'iSCSI Extensions for RDMA')],
               help='Transport of the exports when the memory node '
                    'registered in the API does not name one. iser needs an '
                    'RDMA NIC and a target built with iSER support.'),
]


def register_opts(conf):
    conf.register_group(group)
    conf.register_opts(opts, group=group)


def list_opts():
    return {group: opts}
