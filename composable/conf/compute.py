"""Options of the compute_node role of composable-agent: how leased memory
reaches this host (host mode: iSCSI login + swap) or one of its guests
(guest mode: a hot-plugged libvirt network disk)."""

import socket

from oslo_config import cfg

group = cfg.OptGroup('compute_node',
                     title='Compute node options',
                     help='How the composable-agent of a compute node '
                          'attaches leased memory.')

IQN_PREFIX = 'iqn.2010-10.org.openstack.composable'


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
]


def register_opts(conf):
    conf.register_group(group)
    conf.register_opts(opts, group=group)


def list_opts():
    return {group: opts}
