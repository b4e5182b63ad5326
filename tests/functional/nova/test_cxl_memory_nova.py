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

"""What nova-compute's libvirt driver makes of composable's writes to
the MEMORY_MB of its compute node, in Nova's own functional fixtures:
nova-compute with Nova's fake libvirt (its host memory changed as a CXL
region onlined or offlined would change MemTotal), Nova's in-process
Placement, and composable's code moving the inventory
(composable.conductor.placement.host_memory).
"""

from nova.tests.fixtures import libvirt as fakelibvirt
from nova.tests.functional.libvirt import base as libvirt_base

from composable.conductor.placement import host_memory
from composable.conductor import rules
from tests.functional.nova import base
from tests.functional.nova import test_flavor_boot

HOST = 'cxl-host'
# Nova's fake libvirt reports HostInfo.kB_mem as the host's memory in
# MiB (getInfo()[1]), which the driver reports as MEMORY_MB's total.
LOCAL = 4096
LEASE = 1024


class CxlHostMemoryTest(base.OutOfTreeMixin, libvirt_base.ServersTestBase):

    def setUp(self):
        super().setUp()
        self.start_compute(HOST, host_info=fakelibvirt.HostInfo(
            cpu_nodes=1, cpu_sockets=1, cpu_cores=2, cpu_threads=1,
            kB_mem=LOCAL))
        self.rp = {'uuid': self.compute_rp_uuids[HOST]}
        self.client = test_flavor_boot.placement_client(self)
        self.conn = self.computes[HOST].driver._host.get_connection()
        self.reportclient = self.computes[HOST].manager.rt.reportclient

    def total(self):
        return self.client.get_inventories(self.rp['uuid'])[1][
            'MEMORY_MB']['total']

    def host_memory_is(self, mb):
        """MemTotal of the host now (a region onlined or offlined)."""
        self.conn.host_info.kB_mem = mb

    def take_back(self):
        lease = type('Lease', (), {'uuid': 'lease-1', 'memory_mb': LEASE})

        def check(inventory, used):
            rules.check_cxl_unbind(lease, HOST, inventory, used)
        return host_memory._change(self.client, self.rp, -LEASE,
                                   check=check)

    def test_nova_converges_to_what_composable_wrote(self):
        assert self.total() == LOCAL
        # Bind: the agent onlined the region, then composable counts it.
        self.host_memory_is(LOCAL + LEASE)
        assert host_memory._change(self.client, self.rp, LEASE) == (
            LOCAL, LOCAL + LEASE)
        # nova-compute's write (its cached generation is stale) conflicts;
        # it reads the provider again and finds nothing to change.
        self._run_periodics()
        assert self.total() == LOCAL + LEASE

        # Unbind: composable lowers first, the memory is still online.
        assert self.take_back() == (LOCAL + LEASE, LOCAL)
        # nova-compute computes MemTotal (5120), which is what it last
        # wrote: it writes nothing, and the total stays lowered while the
        # agent offlines.
        self._run_periodics()
        assert self.total() == LOCAL
        # The agent offlined it: Nova's figure and composable's agree.
        self.host_memory_is(LOCAL)
        self._run_periodics()
        assert self.total() == LOCAL

    def test_a_refresh_in_the_window_counts_online_memory_again(self):
        """The one way Nova raises the total while the unbind runs: its
        report client re-reads inventories every
        [compute]resource_provider_association_refresh seconds (300) and
        at start, and then writes MemTotal, which still holds the region
        until the agent offlined it. The host still has that memory, so
        the figure is true; an instance placed on it in that window is
        what the kernel's offline then has to make room for (or refuse).
        """
        self.host_memory_is(LOCAL + LEASE)
        host_memory._change(self.client, self.rp, LEASE)
        self._run_periodics()
        self.take_back()
        assert self.total() == LOCAL
        self.reportclient._association_refresh_time.clear()
        self._run_periodics()
        assert self.total() == LOCAL + LEASE
        # Offlined: the next periodic run takes it off again.
        self.host_memory_is(LOCAL)
        self._run_periodics()
        assert self.total() == LOCAL

    def test_nova_alone_follows_memtotal(self):
        """Without composable's writes Nova gets there too, one periodic
        run later."""
        self.host_memory_is(LOCAL + LEASE)
        assert self.total() == LOCAL
        self._run_periodics()
        assert self.total() == LOCAL + LEASE
        self.host_memory_is(LOCAL)
        self._run_periodics()
        assert self.total() == LOCAL
