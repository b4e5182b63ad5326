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

"""Options of the compute_node role for leased PCI devices: how the
composable-agent finds a function the fabric composed into this host,
hands it to vfio-pci, and keeps Nova's own PCI passthrough away from it.
They live in the ``[compute_node]`` group."""

from oslo_config import cfg

from composable.conf import compute

group = compute.group

SYSFS = 'sysfs'
NOOP = 'noop'

opts = [
    cfg.StrOpt('pci_backend',
               choices=[(SYSFS, 'rescan the PCI bus, find the composed '
                                'function and bind it to vfio-pci through '
                                'sysfs, as root through oslo.privsep'),
                        (NOOP, 'a simulation for demos and tests: devices '
                               'are only logged, nothing on the host '
                               'changes')],
               help='How leased PCI devices are prepared on this compute '
                    'node. Unset: noop when [agent]memory_exporter is noop '
                    '(the simulated data plane), sysfs otherwise. Set '
                    'sysfs on a compute node that receives fabric devices '
                    'but no leased memory.'),
    cfg.IntOpt('pci_find_timeout',
               default=60,
               min=1,
               max=3600,
               help='Seconds to wait, rescanning the PCI bus once a second, '
                    'for a function the fabric composed into this host to '
                    'appear. Keep it below the conductor\'s '
                    '[DEFAULT]rpc_response_timeout_bind, which bounds the '
                    'whole attach.'),
    cfg.ListOpt('nova_config_files',
                default=['/etc/nova/nova.conf'],
                help='Configuration files of the nova-compute service on '
                     'this host. Their [pci] device_spec (and the older '
                     'passthrough_whitelist) must not match a fabric '
                     'device: Nova re-reads the host\'s PCI devices about '
                     'every minute and would hand a composed device to '
                     'another instance. A file that does not exist holds no '
                     'specs.'),
    cfg.StrOpt('pci_state_file',
               default='/var/lib/composable/pci-devices.json',
               help='File in which the agent records which PCI function '
                    'each leased device became on this host, so that it '
                    'finds them again after a restart. Its directory must '
                    'be writable by the agent.'),
    cfg.ListOpt('sriov_numvfs',
                default=[],
                help='SR-IOV virtual functions to create when the agent '
                     'starts, as <PF PCI address>:<count> items, e.g. '
                     '0000:41:00.0:8. The physical function stays with the '
                     'host; its virtual functions can be leased one at a '
                     'time. A PF whose VFs are leased is never changed.'),
]


def register_opts(conf):
    conf.register_opts(opts, group=group)


def list_opts():
    return {group: opts}
