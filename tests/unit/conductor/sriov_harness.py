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

"""The conductor harness (harness.Harness) with a compute agent whose PCI
work is real code on a fake sysfs: HostPciDevices and the privileged
functions of composable.privsep.pci run in this process on the fake
kernel of tests/unit/privsep/test_pci_sysfs, which holds one physical
function offering SR-IOV virtual functions. The unit tests run it on
SQLite, the functional ones on MariaDB and PostgreSQL."""

import os

from composable.agent.compute_node import host_pci as host_pci_mod
from composable.agent import manager as agent_manager
from composable.common import rpc
from composable.common import service
from composable.common import sriov
from composable.db import api as db_api
from composable import privsep
from composable.privsep import pci as priv_pci
from composable.privsep import pci_sysfs as pci
from tests.unit.privsep import test_pci_sysfs as test_pci
from tests.unit.conductor import harness as h_mod

PF = '0000:41:00.0'
HOST = 'compute-0'


class SriovHarness(h_mod.Harness):
    """``start(tmp_path, vf_count, vf_mode)``: the harness, a fake sysfs
    with PF, and a pool of ``vf_count`` of its VFs on compute-0."""

    def start(self, tmp_path, vf_count=2, vf_mode=sriov.ON_DEMAND,
              pf_address=PF, host_pci=None, vf_kind='nic',
              vf_values=None):
        """``host_pci``: the compute agent's HostPciDevices, when not the
        one on the fake sysfs made here (a real kernel's)."""
        self.tmp_path = tmp_path
        self._saved = None
        if host_pci is None:
            self.fs = test_pci.FakeSysfs(tmp_path / 'host')
            self.fs.add_driver(pci.VFIO_DRIVER)
            self.fs.add(PF, vendor='0x15b3', device='0x1017',
                        cls='0x020000', driver='mlx5_core', group=20,
                        totalvfs=8)
            privsep.sys_admin_pctxt.set_client_mode(False)
            self._saved = (priv_pci.ROOT, priv_pci.WRITER)
            priv_pci.ROOT, priv_pci.WRITER = self.fs.root, self.fs.write
            host_pci = host_pci_mod.HostPciDevices(
                ops=priv_pci, root=self.fs.root, find_timeout=2,
                nova_config_files=[str(tmp_path / 'nova.conf')],
                state_file=str(tmp_path / 'state' / 'pci-devices.json'),
                kernel_release='6.1.0-test')
            vf_values = {'vendor_id': '15b3', 'product_id': '101e'}
        super().start(agents=h_mod.MEMORY_NODES)
        self.host_pci = host_pci
        assert self.host_pci.start() == []
        self.start_agent(HOST)
        ctx = h_mod.admin()
        self.sriov_pool = db_api.sriov_pool_create(ctx, {
            'name': '%s-vfs' % vf_kind, 'kind': 'pci',
            'fabric_id': self.fabric.id,
            'resource_class': 'CUSTOM_COMPOSABLE_PCI_%s' % vf_kind.upper(),
            'sriov_host_id': self.hosts[HOST].id,
            'sriov_pf_address': pf_address, 'sriov_vf_count': vf_count,
            'sriov_vf_mode': vf_mode}, vf_kind, vf_values=vf_values)
        return self

    def start_agent(self, name):
        if name != HOST:
            return super().start_agent(name)
        agent = agent_manager.AgentManager(name, ['compute_node'],
                                           host_pci=self.host_pci)
        svc = service.RPCService(rpc.AGENT_TOPIC, name, agent.endpoints)
        svc.start()
        self.agents[name] = agent
        self.agent_services[name] = svc
        return agent

    def stop(self):
        try:
            super().stop()
        finally:
            if self._saved is not None:
                priv_pci.ROOT, priv_pci.WRITER = self._saved
                privsep.sys_admin_pctxt.set_client_mode(True)
                self._saved = None

    # ------------------------------------------------------------ looks

    def vfs(self):
        return pci.virtual_functions(PF, self.fs.root)

    def on_vfio(self):
        return sorted(a for a in self.vfs()
                      if self.fs.driver_of(a) == pci.VFIO_DRIVER)

    def numvfs_writes(self):
        path = 'sys/bus/pci/devices/%s/sriov_numvfs' % PF
        return [v for p, v in self.fs.writes if p == path]

    def pf_untouched(self):
        return (self.fs.driver_of(PF) == 'mlx5_core' and
                os.path.exists(self.fs.path('sys/bus/pci/devices', PF)))
