import socket

from oslo_config import cfg

opts = [
    cfg.StrOpt('host',
               default=socket.gethostname(),
               sample_default='localhost',
               help='Name of this node. Conductors use it to mark the '
                    'leases they hold; agents use it as their RPC server '
                    'name, so it must match the host or memory node name '
                    'registered in the API.'),
    cfg.StrOpt('auth_strategy',
               default='keystone',
               choices=[('keystone',
                         'Validate tokens with keystonemiddleware'),
                        ('noauth', 'No authentication: every request is an '
                                   'admin of the project named in '
                                   'X-Project-Id (default "demo"). Only for '
                                   'the standalone service on a loopback '
                                   'address.')],
               help='How API requests are authenticated.'),
    cfg.IntOpt('rpc_response_timeout_bind',
               default=120,
               min=1,
               help='Seconds the conductor waits for an agent to finish one '
                    'export or attach step before failing the bind.'),
]


def register_opts(conf):
    conf.register_opts(opts)


def list_opts():
    return {'DEFAULT': opts}
