from oslo_config import cfg

group = cfg.OptGroup('conductor', title='Conductor options')

opts = [
    cfg.IntOpt('workers',
               default=16,
               min=1,
               help='Threads serving RPC requests in one conductor.'),
    cfg.IntOpt('heartbeat_interval',
               default=10,
               min=1,
               help='Seconds between two heartbeats a conductor writes to the '
                    'database.'),
    cfg.IntOpt('heartbeat_timeout',
               default=60,
               min=2,
               help='A conductor whose last heartbeat is older than this many '
                    'seconds is dead: its lease reservations are broken and '
                    'another conductor resumes its unfinished work. Must be '
                    'larger than heartbeat_interval.'),
    cfg.IntOpt('periodic_interval',
               default=30,
               min=1,
               help='Seconds between two runs of the periodic tasks (lease '
                    'start and expiry, taking over dead conductors\' work).'),
    cfg.IntOpt('node_check_interval',
               default=300,
               min=0,
               help='Seconds between two checks of the memory nodes: each '
                    'memory node agent reports its tmpfs area; a tmpfs '
                    'smaller than the registered capacity is logged, and '
                    'extent files no lease holds any more (left by an agent '
                    'killed mid-export) are scrubbed. 0 disables the '
                    'check.'),
    cfg.IntOpt('reservation_wait',
               default=10,
               min=0,
               help='Seconds an operation waits for another operation on the '
                    'same lease to finish before answering 409.'),
]


def register_opts(conf):
    conf.register_group(group)
    conf.register_opts(opts, group=group)


def list_opts():
    return {group: opts}
