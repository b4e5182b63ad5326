"""composable-conductor: serves the conductor RPC API, runs the lease flows
and the periodic tasks, until SIGTERM or SIGINT."""

import sys

from oslo_log import log as logging

from composable.common import rpc
from composable.common import service
from composable import conf
from composable.conductor import manager

CONF = conf.CONF
LOG = logging.getLogger(__name__)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    service.prepare_service(argv)
    rpc.init()
    conductor = manager.ConductorManager(CONF.host)
    server = service.RPCService(rpc.CONDUCTOR_TOPIC, CONF.host, [conductor],
                                manager=conductor)
    LOG.info('Starting composable-conductor on %s', CONF.host)
    try:
        service.run([server])
    finally:
        rpc.cleanup()
    return 0


if __name__ == '__main__':
    sys.exit(main())
