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

"""composable-conductor: serves the conductor RPC API, runs the lease flows
and the periodic tasks, until SIGTERM or SIGINT."""

import sys

from oslo_log import log as logging

from composable.common import rpc
from composable.common import service
from composable import conf
from composable.conductor import manager
from composable import notifications

CONF = conf.CONF
LOG = logging.getLogger(__name__)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    service.prepare_service(argv)
    rpc.init()
    notifications.init('composable-conductor')
    conductor = manager.ConductorManager(CONF.host)
    server = service.RPCService(rpc.CONDUCTOR_TOPIC, CONF.host, [conductor],
                                manager=conductor)
    LOG.info('Starting composable-conductor on %s', CONF.host)
    try:
        service.run([server])
    finally:
        notifications.cleanup()
        rpc.cleanup()
    return 0


if __name__ == '__main__':
    sys.exit(main())
