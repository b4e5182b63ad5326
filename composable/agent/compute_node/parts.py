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

"""The pieces of one compute node's agent, made once per process.

ComputeNodeParts holds what the compute-node RPC endpoint, the libvirt
hook server and the usage sampler share:

* the one libvirt connection (libvirt_connection.LibvirtConnection);
* the workers, each made when first needed, so that a simulated node
  never loads libvirt: the guest memory attacher, the guest memory
  tuner, the device attacher, host swap, CXL memory, the virtio-mem
  attacher and the host's PCI functions;
* the back ends the configuration chooses (backends): ``memory``,
  ``cxl`` and ``devices``, each real or simulated, and ``virtio_mem``,
  real when ``cxl`` is;
* the record of what is attached here (attachments.LiveAttachments).

Every piece can be injected (tests, composable-all); an injected worker
makes its back end real whatever the configuration says.
"""

import threading

from composable.agent.compute_node import attachments as attachments_mod
from composable.agent.compute_node import backends
from composable.agent.compute_node import cxl_memory as cxl_memory_mod
from composable.agent.compute_node import host_pci as host_pci_mod
from composable.agent.compute_node import host_swap as host_swap_mod
from composable.agent.compute_node import hostdev
from composable.agent.compute_node import libvirt_connection
from composable.agent.compute_node import libvirt_guest
from composable.agent.compute_node import memory_tuning
from composable.agent.compute_node import virtio_mem as virtio_mem_mod
from composable.conf import compute_cxl as cxl_conf
from composable.conf import compute_pci as pci_conf


class ComputeNodeParts(object):

    def __init__(self, host, guest_attacher=None, host_swap=None,
                 simulate=None, memory_tuner=None, host_pci=None,
                 device_attacher=None, cxl_memory=None, connection=None,
                 virtio_mem_attacher=None):
        self.host = host
        # Reentrant: making a worker makes the workers it needs (the
        # guest attacher the connection, the tuner the guest attacher).
        self._lock = threading.RLock()
        self._connection = connection
        self._guest = guest_attacher
        self._host_swap = host_swap
        self._tuner = memory_tuner
        self._devices = device_attacher
        self._host_pci = host_pci
        self._cxl = cxl_memory
        self._virtio_mem = virtio_mem_attacher
        # Called with (lease uuid, instance uuid, outcome) when the guest
        # made the disks of a guest-mode lease swap in the background
        # (the agent sets it: it casts the outcome to the conductor).
        self.swap_reporter = None
        if guest_attacher is not None and \
                getattr(guest_attacher, 'swap_reporter', False) is None:
            guest_attacher.swap_reporter = self._report_guest_swap
        self.attachments = attachments_mod.LiveAttachments()
        if simulate is None:
            simulate = (backends.memory_simulated() and
                        guest_attacher is None and host_swap is None)
        self.memory = (backends.SimulatedMemory() if simulate
                       else backends.IscsiMemory(self))
        self.cxl = (backends.SimulatedCxlMemory()
                    if cxl_memory is None and
                    backends.cxl_backend() == cxl_conf.NOOP
                    else backends.CxlMemory(self))
        self.virtio_mem = backends.VirtioMemGuests(self)
        self.devices = (backends.SimulatedDevices(host)
                        if host_pci is None and
                        backends.pci_backend() == pci_conf.NOOP
                        else backends.HostDevices(self))

    def _made(self, name, make):
        """The worker in attribute ``name``, made by ``make()`` the first
        time (once, whichever thread asks first)."""
        value = getattr(self, name)
        if value is None:
            with self._lock:
                value = getattr(self, name)
                if value is None:
                    value = make()
                    setattr(self, name, value)
        return value

    @property
    def connection(self):
        """The agent's one libvirt connection, shared by the guest
        memory attacher and the device attacher."""
        return self._made('_connection',
                          libvirt_connection.LibvirtConnection)

    @property
    def guest_attacher(self):
        return self._made('_guest', lambda: libvirt_guest.GuestMemoryAttacher(
            connection=self.connection,
            swap_reporter=self._report_guest_swap))

    def _report_guest_swap(self, lease_uuid, instance_uuid, outcome):
        if self.swap_reporter is not None:
            self.swap_reporter(lease_uuid, instance_uuid, outcome)

    @property
    def memory_tuner(self):
        return self._made('_tuner', lambda: memory_tuning.GuestMemoryTuner(
            self.guest_attacher))

    @property
    def device_attacher(self):
        """Passes leased PCI functions through into guests."""
        return self._made('_devices', lambda: hostdev.GuestDeviceAttacher(
            connection=self.connection))

    @property
    def host_swap(self):
        return self._made('_host_swap', host_swap_mod.HostSwap)

    @property
    def cxl_memory(self):
        """CXL memory of host-mode leases (regions onlined as NUMA
        nodes)."""
        return self._made('_cxl', cxl_memory_mod.CxlHostMemory)

    @property
    def virtio_mem_attacher(self):
        """Plugs the CXL memory of virtio-mem leases into guests."""
        return self._made('_virtio_mem', lambda: virtio_mem_mod.
                          VirtioMemAttacher(connection=self.connection))

    @property
    def host_pci(self):
        return self._made('_host_pci', host_pci_mod.HostPciDevices)

    # What the libvirt hook and the service entry point read: whether
    # leases of a kind really reach the host and its guests.

    @property
    def memory_simulated(self):
        return self.memory.simulated

    @property
    def devices_simulated(self):
        return self.devices.simulated

    @property
    def cxl_simulated(self):
        return self.cxl.simulated
