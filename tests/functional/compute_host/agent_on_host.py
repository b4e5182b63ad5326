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

"""composable-agent for the compute host guest: the service exactly as
composable.cmd.agent runs it (its configuration file, RPC server, roles),
except that its HostPciDevices works on the guest's PCI bus
(guest_bus.GuestPciBus) instead of this machine's sysfs. Test
infrastructure: it stands in for an agent running on that host.

    python -m tests.functional.compute_host.agent_on_host \\
        --config-file agent.conf

The guest is named by the environment: COMPOSABLE_HOST_GUEST_UUID (the
libvirt domain's UUID); COMPOSABLE_HOST_GUEST_PAUSE_FILE optionally names
GuestPciBus's pause file.
"""

import os
import sys

from oslo_log import log as logging

from composable.agent.compute_node import host_pci
from composable.agent import manager
from composable.common import rpc
from composable.common import service
from composable import conf
from tests.functional.compute_host import guest_bus
from tests.functional.compute_host import guest_exec

CONF = conf.CONF
LOG = logging.getLogger(__name__)

GUEST_UUID_ENV = 'COMPOSABLE_HOST_GUEST_UUID'
PAUSE_FILE_ENV = 'COMPOSABLE_HOST_GUEST_PAUSE_FILE'
# The agent's copy of the PCI module in the guest, apart from the tests'.
GUEST_MODULE_DIR = '/tmp/composable-agent'


def main(argv=None):
    import libvirt
    from tests.functional.compute_node import dataplane
    argv = sys.argv[1:] if argv is None else argv
    service.prepare_service(argv)
    rpc.init()
    conn = libvirt.open(dataplane.LIBVIRT_URI)
    domain = conn.lookupByUUIDString(os.environ[GUEST_UUID_ENV])
    bus = guest_bus.GuestPciBus(
        guest_exec.PciServerRunner(guest_exec.GuestAgent(domain),
                                   directory=GUEST_MODULE_DIR),
        pause_file=os.environ.get(PAUSE_FILE_ENV))
    agent = manager.AgentManager(
        CONF.host, CONF.agent.roles,
        host_pci=host_pci.HostPciDevices(bus=bus))
    server = service.RPCService(rpc.AGENT_TOPIC, CONF.host,
                                agent.endpoints, manager=agent)
    LOG.info('Starting composable-agent on %(host)s, its PCI work in the '
             'compute host guest %(guest)s',
             {'host': CONF.host, 'guest': domain.name()})
    try:
        service.run([server])
    finally:
        rpc.cleanup()
        conn.close()
    return 0


if __name__ == '__main__':
    sys.exit(main())
