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

"""What Nova makes of a NUMA node without CPUs, the shape CXL memory
takes on a host, in Nova's own functional fixtures: nova-compute with
Nova's fake libvirt whose capabilities hold a CPU-less cell, the
scheduler with its NUMATopologyFilter, and Placement.
"""

from nova import context as nova_context
from nova import objects
from nova.tests.fixtures import libvirt as fakelibvirt
from nova.tests.functional.libvirt import test_numa_servers
from nova.virt.libvirt import config as vconfig

from tests.functional.nova import base

HOST = 'cxl-host'
GIB_KB = 1024 * 1024


def cpu_less_cell(cell_id, kb):
    """A cell as the libvirt capabilities show a CXL region onlined by
    kmem: memory, 4 KiB pages, no CPUs."""
    cell = vconfig.LibvirtConfigCapsNUMACell()
    cell.id = cell_id
    cell.memory = kb
    cell.mempages = fakelibvirt.create_mempages([(4, kb // 4)])
    return cell


class CpuLessNodeTest(base.OutOfTreeMixin,
                      test_numa_servers.NUMAServersTestBase):

    def host_info(self, kb=4 * GIB_KB):
        # One node with 2 CPUs, as the host boots. (Nova's fake libvirt
        # gives the cell kb KiB, and reports kb as the host's MiB.)
        return fakelibvirt.HostInfo(cpu_nodes=1, cpu_sockets=1,
                                    cpu_cores=2, cpu_threads=1, kB_mem=kb)

    def host_cells(self):
        node = objects.ComputeNode.get_by_nodename(
            nova_context.get_admin_context(), HOST)
        topology = objects.NUMATopology.obj_from_db_obj(node.numa_topology)
        return {cell.id: cell for cell in topology.cells}

    def boot(self, extra_spec, expected_state, memory_mb=512):
        flavor = self._create_flavor(vcpu=2, memory_mb=memory_mb,
                                     extra_spec=extra_spec)
        server = self._create_server(flavor_id=flavor,
                                     expected_state=expected_state)
        self.addCleanup(self._delete_server, server)
        if expected_state == 'ERROR':
            # Never scheduled: buried in cell0, the fault says why.
            return server
        return objects.Instance.get_by_uuid(
            nova_context.get_admin_context(), server['id'])

    def test_cpu_less_cell_is_a_host_cell_no_guest_cell_lands_on(self):
        # The CPU cell has 1 GiB; the CPU-less one (the CXL region) 4.
        info = self.host_info(kb=GIB_KB)
        info.numa_topology.cells.append(cpu_less_cell(1, 4 * GIB_KB))
        self.start_compute(HOST, host_info=info)

        cells = self.host_cells()
        assert sorted(cells) == [0, 1]
        assert cells[1].cpuset == set() and cells[1].pcpuset == set()
        assert cells[1].memory == 4096
        assert len(cells[0].cpuset) == 2 and cells[0].memory == 1024

        # A guest cell that fits the CPU cell lands there.
        inst = self.boot({'hw:numa_nodes': '1'}, 'ACTIVE')
        assert [c.id for c in inst.numa_topology.cells] == [0]
        # One of 2 GiB fits no cell with CPUs; the CPU-less cell's 4 GiB
        # are not offered to it.
        refused = self.boot({'hw:numa_nodes': '1'}, 'ERROR', memory_mb=2048)
        assert 'No valid host' in refused['fault']['message']
        # Without a NUMA topology the guest takes the host's memory as a
        # whole (MEMORY_MB), CXL node included.
        inst = self.boot({}, 'ACTIVE', memory_mb=2048)
        assert inst.numa_topology is None

    def test_a_node_onlined_later_waits_for_a_restart(self):
        info = self.host_info()
        self.start_compute(HOST, host_info=info)
        assert sorted(self.host_cells()) == [0]

        # The region is onlined while nova-compute runs.
        info.numa_topology.cells.append(cpu_less_cell(1, 4 * GIB_KB))
        self._run_periodics()
        # Host.get_capabilities() is cached for the process's life.
        assert sorted(self.host_cells()) == [0]

        self.restart_compute_service(HOST)
        assert sorted(self.host_cells()) == [0, 1]
        assert self.host_cells()[1].cpuset == set()
