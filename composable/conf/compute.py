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

"""Options of the compute_node role of composable-agent: how leased memory
reaches this host (host mode: iSCSI login + swap) or one of its guests
(guest mode: a hot-plugged libvirt network disk), and how the libvirt hook
reaches the agent."""

import socket

from oslo_config import cfg

group = cfg.OptGroup('compute_node',
                     title='Compute node options',
                     help='How the composable-agent of a compute node '
                          'attaches leased memory.')

IQN_PREFIX = 'iqn.2010-10.org.openstack.composable'
# Where composable-libvirt-hook looks when no configuration names a socket.
DEFAULT_HOOK_SOCKET = '/run/composable/libvirt-hook.sock'


def default_initiator_iqn(hostname=None):
    """An initiator IQN derived from the host name.

    The name part keeps the characters an IQN allows (lower-case letters,
    digits, '.', '-' and ':').
    """
    name = (hostname or socket.gethostname()).lower()
    name = ''.join(c if c.isalnum() or c in '.-' else '-' for c in name)
    return '%s:%s' % (IQN_PREFIX, name.strip('.-') or 'localhost')


opts = [
    cfg.StrOpt('libvirt_uri',
               default='qemu:///system',
               help='libvirt connection URI of the hypervisor whose guests '
                    'get guest-mode memory. Use the same URI as Nova\'s '
                    '[libvirt]connection_uri.'),
    cfg.StrOpt('initiator_iqn',
               default=default_initiator_iqn(),
               sample_default=IQN_PREFIX + ':<hostname>',
               help='iSCSI initiator name this host uses to reach memory '
                    'nodes. It must equal the initiator_iqn registered for '
                    'the host in composable, because exports are restricted '
                    'to it. In host mode it must also be the name open-iscsi '
                    'uses (/etc/iscsi/initiatorname.iscsi); in guest mode '
                    'QEMU logs in with it.'),
    cfg.IntOpt('swap_priority',
               default=10,
               min=-1, max=32767,
               help='swapon priority of host-mode memory. All extents get '
                    'the same priority so that Linux spreads pages over '
                    'them; keep it above the priority of any local disk '
                    'swap, so leased memory is used first.'),
    cfg.IntOpt('attach_timeout',
               default=60,
               min=1,
               help='Seconds to wait for one extent to be attached: the '
                    'hot-plug in guest mode, the iSCSI login and the '
                    'block device to appear in host mode.'),
    cfg.IntOpt('detach_timeout',
               default=60,
               min=1,
               help='Seconds to wait for one extent to go away: the guest '
                    'to release a hot-unplugged disk in guest mode, the '
                    'swapoff and logout in host mode.'),
    cfg.IntOpt('virtio_mem_shrink_timeout',
               default=60,
               min=1,
               help='virtio-mem mode: seconds to wait for a guest to give '
                    'back memory of a lease\'s virtio-mem device (its '
                    'current size down to the requested one) when the lease '
                    'shrinks or is unbound. A guest that does not is asked '
                    'for its former size again and the shrink or unbind '
                    'fails naming both sizes; the memory is never unplugged '
                    'by force and the host keeps its CXL region. Keep it '
                    'below [DEFAULT]rpc_response_timeout_bind.'),
    cfg.StrOpt('guest_swapoff',
               default='required',
               choices=[('required', 'a guest-mode disk is unplugged only '
                                     'once the guest agent turned its swap '
                                     'off; without an agent the unbind '
                                     'fails and the disk stays'),
                        ('best_effort', 'the guest agent is asked when it '
                                        'answers; without one the disk is '
                                        'unplugged anyway'),
                        ('disabled', 'the disk is unplugged without asking '
                                     'the guest')],
               help='Guest mode: before a leased disk is unplugged from a '
                    'running guest, the QEMU guest agent runs swapoff on it '
                    'inside the guest (guest-exec of /bin/sh). Unplugging a '
                    'disk the guest still swaps to loses the pages on it '
                    'and kills the processes they belong to. A swapoff the '
                    'guest refuses (too little free memory) always keeps '
                    'the disk. Images need the agent '
                    '(hw_qemu_guest_agent=yes, qemu-guest-agent running).'),
    cfg.StrOpt('guest_swapon',
               default='best_effort',
               choices=[('required', 'the attach (bind, grow) waits for '
                                     'the guest: a hot-plugged disk the '
                                     'guest agent could not turn into swap '
                                     'is unplugged again and the attach '
                                     'fails'),
                        ('best_effort', 'the attach answers once the disk '
                                        'is plugged; the guest agent is '
                                        'asked afterwards, in the '
                                        'background, and the outcome is '
                                        'recorded on the lease (a failure '
                                        'as its fault); the disk stays '
                                        'plugged either way, and without '
                                        'an agent the image has to make '
                                        'it swap itself'),
                        ('disabled', 'the guest is never asked: the image '
                                     'turns new disks into swap itself '
                                     '(e.g. a udev rule)')],
               help='Guest mode: once a leased disk is hot-plugged into a '
                    'running guest, the QEMU guest agent runs mkswap and '
                    'swapon -p <swap_priority> on it inside the guest '
                    '(guest-exec of /bin/sh; the disk is found by its '
                    'serial). A disk that is swap already is left as it '
                    'is, so an image that makes new disks swap by itself '
                    'works with every choice. With best_effort a bind is '
                    'done (bound) when the disk is plugged, as a volume '
                    'attach is: the guest needs from milliseconds to '
                    'seconds (an emulated guest) to see the disk. A detach '
                    'of a disk whose swap-on still runs waits for it.'),
    cfg.IntOpt('usage_report_interval',
               default=60,
               min=0,
               help='Seconds between two reports of how much of each '
                    'memory lease bound to this host is in use (the swap '
                    'used on its extents: /proc/swaps of this host in host '
                    'mode, of the guest through its QEMU guest agent in '
                    'guest mode), sent to the conductor for the lease\'s '
                    'usage history and elastic resizing. 0: no reports.'),
    cfg.BoolOpt('simulated_usage',
                default=False,
                help='With the noop memory exporter (leased memory is '
                     'simulated, nothing is attached), report a SIMULATED '
                     'use of each memory lease bound to this host every '
                     'usage_report_interval seconds: a workload that rises '
                     'and falls over a few minutes, so that usage history '
                     'and elastic resizing can be seen without hardware. '
                     'composable-all turns it on for its demo; never use it '
                     'on a real compute node.'),
    cfg.IntOpt('usage_sample_timeout',
               default=10,
               min=1,
               help='Seconds one guest may take to answer a usage sample '
                    '(guest mode). A guest that does not answer in time '
                    'is left out of that report, and is not asked again '
                    'while its last question is still open; the other '
                    'leases are reported as usual.'),
    cfg.IntOpt('iscsi_replacement_timeout',
               default=86400,
               min=0,
               help='open-iscsi node.session.timeo.replacement_timeout of '
                    'host-mode sessions, in seconds: how long I/O is queued '
                    'while a session to a memory node is re-established '
                    'before it is failed. Swap I/O that fails kills '
                    'processes, so this is long by default.'),
    cfg.IntOpt('swapoff_headroom_mb',
               default=64,
               min=0,
               help='Host mode: swapoff of an extent is refused unless the '
                    'pages it holds fit into MemAvailable with this many '
                    'MiB to spare.'),
    cfg.IntOpt('min_resident_percent',
               default=25,
               min=1,
               max=100,
               help='Host-mode memory leases lower the memory soft limit of '
                    'the instance they are bound for by their size, so '
                    'that the kernel moves that guest\'s cold pages to the '
                    'leased swap; the limit never goes below this share '
                    '(per cent) of the guest\'s memory.'),
    # The libvirt hook (composable-libvirt-hook) reads hook_socket,
    # hook_failure and hook_prepare_timeout itself, with a plain line
    # scanner: keep them one-line values.
    cfg.StrOpt('hook_socket',
               default=DEFAULT_HOOK_SOCKET,
               help='Unix socket on which the composable-agent of a compute '
                    'node answers the libvirt hook '
                    '(/etc/libvirt/hooks/qemu.d/50-composable). The hook '
                    'reads this option from the same configuration file. '
                    'Empty: the agent does not listen, and domains start '
                    'without their leases.'),
    cfg.StrOpt('hook_socket_group',
               help='Group allowed to talk to the hook socket besides root '
                    'and the agent\'s own user: the socket is then mode 0660 '
                    'with that group (default: 0600). The hook itself runs '
                    'as root under libvirtd.'),
    cfg.StrOpt('hook_failure',
               default='abort',
               choices=[('abort', 'the domain does not start; libvirt '
                                  'shows the reason to Nova'),
                        ('continue', 'the domain starts without the '
                                     'leases that could not be bound')],
               help='What happens when an instance that has leases (or '
                    'whose flavor asks for composable resources) starts and '
                    'its leases cannot be bound to this host in time. A '
                    'flavor\'s composable:on_bind_failure extra spec (fail '
                    'or ignore) overrides it for the flavor\'s instances.'),
    cfg.IntOpt('hook_prepare_timeout',
               default=120,
               min=1,
               help='Seconds the start of a domain waits, in the libvirt '
                    'hook\'s prepare step, for the instance\'s leases to be '
                    'bound to this host (exports made, host-mode memory '
                    'attached, devices bound); hook_failure says what '
                    'happens after that.'),
    cfg.IntOpt('hook_release_timeout',
               default=60,
               min=1,
               help='Seconds the stop of a domain waits, in the libvirt '
                    'hook\'s stopped step, for the instance\'s leases to be '
                    'unbound from this host. The stop never fails: a lease '
                    'not unbound by then is unbound in the background, or '
                    'shows why not in its fault.'),
    cfg.IntOpt('hook_cache_refresh_interval',
               default=30,
               min=0,
               help='Seconds between two refreshes of the agent\'s list of '
                    'instances that have leases, which lets domains without '
                    'leases start without asking the conductor. The '
                    'conductor also pushes changes as they happen. 0: only '
                    'at start and on pushes.'),
]


def register_opts(conf):
    conf.register_group(group)
    conf.register_opts(opts, group=group)


def list_opts():
    return {group: opts}
