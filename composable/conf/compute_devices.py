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

"""Options of the compute_node role for leased PCI devices passed through
into Nova instances (composable.agent.compute_node.hostdev). They live in
the ``[compute_node]`` group, beside the memory options of
composable.conf.compute."""

from oslo_config import cfg

from composable.conf import compute

opts = [
    cfg.IntOpt('device_detach_timeout',
               default=20,
               min=1,
               help='Seconds to wait, after each request to unplug a '
                    'leased PCI device from a running guest, for libvirt\'s '
                    'device-removed event (the guest acknowledged the '
                    'PCIe hot-unplug). After that the device is looked for '
                    'in the domain and, if still there, the request is '
                    'made again. The same meaning as Nova\'s [libvirt] '
                    'device_detach_timeout. device_detach_timeout times '
                    'device_detach_attempts must stay below '
                    '[DEFAULT]rpc_response_timeout_bind, or the conductor '
                    'gives up on the unbind before the agent does.'),
    cfg.IntOpt('device_detach_attempts',
               default=4,
               min=1,
               help='How many times a leased PCI device is asked to leave '
                    'a running guest before the unbind fails with a fault '
                    'that says the guest does not let go of it. The device '
                    'then stays in the guest and bound to this host: '
                    'nothing is pulled from under a running guest.'),
]


def register_opts(conf):
    conf.register_group(compute.group)
    conf.register_opts(opts, group=compute.group)


def list_opts():
    return {compute.group: opts}
