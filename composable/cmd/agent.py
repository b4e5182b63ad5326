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

import importlib
import sys

from oslo_log import log as logging

from composable.agent import manager
from composable.common import rpc
from composable.common import service
from composable import conf

CONF = conf.CONF
LOG = logging.getLogger(__name__)

# What a compute node needs for libvirt-python, which pip compiles (it has
# no wheel): Debian's package names.
COMPUTE_SYSTEM_PACKAGES = 'gcc pkg-config libvirt-dev python3-dev'
NO_LIBVIRT = (
    'composable-agent: the compute_node role needs the libvirt Python '
    'binding, which is not installed; install the compute extra: '
    'pip install \'composable[compute]\' (it compiles libvirt-python, '
    'which needs the packages %s on Debian)' % COMPUTE_SYSTEM_PACKAGES)


def libvirt_missing(agent):
    """The one-line error for a compute node that would use libvirt
    without the binding, or None. A compute node whose memory and devices
    are both simulated (noop) never calls libvirt."""
    if manager.COMPUTE_NODE not in agent.roles:
        return None
    if agent.simulate and agent.simulate_devices:
        return None
    try:
        importlib.import_module('libvirt')
    except ImportError:
        return NO_LIBVIRT
    return None


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    service.prepare_service(argv)
    agent = manager.AgentManager(CONF.host, CONF.agent.roles)
    missing = libvirt_missing(agent)
    if missing:
        print(missing, file=sys.stderr)
        return 1
    rpc.init()
    # The manager starts first: a memory node's tmpfs area is mounted or
    # checked before any request is taken.
    server = service.RPCService(rpc.AGENT_TOPIC, CONF.host,
                                agent.endpoints, manager=agent)
    LOG.info('Starting composable-agent on %(host)s with roles %(roles)s',
             {'host': CONF.host, 'roles': ', '.join(agent.roles)})
    try:
        service.run([server])
    finally:
        rpc.cleanup()
    return 0


if __name__ == '__main__':
    sys.exit(main())
