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

"""composable-agent: serves the agent RPC API for this node (RPC server
name = [DEFAULT]host, which must match the host or memory node name
registered in the API), with the roles in [agent]roles."""

import sys

from oslo_log import log as logging

from composable.agent import manager
from composable.common import rpc
from composable.common import service
from composable import conf

CONF = conf.CONF
LOG = logging.getLogger(__name__)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    service.prepare_service(argv)
    rpc.init()
    agent = manager.AgentManager(CONF.host, CONF.agent.roles)
    # The manager starts first: a memory node's tmpfs area is mounted or
    # checked before any request is taken.
    server = service.RPCService(rpc.AGENT_TOPIC, CONF.host, [agent],
                                manager=agent)
    LOG.info('Starting composable-agent on %(host)s with roles %(roles)s',
             {'host': CONF.host, 'roles': ', '.join(agent.roles)})
    try:
        service.run([server])
    finally:
        rpc.cleanup()
    return 0


if __name__ == '__main__':
    sys.exit(main())
