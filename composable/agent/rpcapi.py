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

"""Client side of the agent RPC API, used by the conductor.

Every call goes to one node (``server`` = the host or memory node name as
registered) and waits at most ``[DEFAULT]rpc_response_timeout_bind``
seconds. Every method on the agent side is idempotent, so the conductor may
repeat any call after a timeout.

A device's or a CXL chunk's ``locator`` is
composable.common.locator.Locator.to_primitive(), and needs no version of
its own: for a device it is the dict of five keys sent since 1.0; a CXL
chunk's was ``{'serial', 'device'}``, which Locator.from_primitive still
reads, and an older agent reads only the ``serial`` both carry.

Version history:
    1.0 - Initial version.
    1.1 - set_sriov_vfs
    1.2 - attach_devices and detach_devices take SR-IOV virtual functions
          (a device with an ``sriov`` entry)
    1.3 - attach_memory and detach_memory take mode virtio-mem;
          resize_memory
    1.4 - attach_memory and detach_memory of some of the chunks of a
          lease bound in virtio-mem mode (an elastic lease growing or
          shrinking): the guest's device follows by their size
"""

from composable.common import rpc
from composable import conf

CONF = conf.CONF


class AgentAPI(object):
    # Calls go out as 1.0 unless they need more, so agents not yet
    # upgraded keep answering them.
    RPC_API_VERSION = '1.0'

    def __init__(self):
        self.client = rpc.get_client(rpc.AGENT_TOPIC, self.RPC_API_VERSION)

    def _call(self, context, node, method, version=None, **kwargs):
        cctxt = self.client.prepare(
            server=node, timeout=CONF.rpc_response_timeout_bind,
            **({'version': version} if version else {}))
        return cctxt.call(context, method, **kwargs)

    # memory_node role

    def export_extent(self, context, node, extent, initiator_iqn,
                      chap_username, chap_secret):
        return self._call(context, node, 'export_extent', extent=extent,
                          initiator_iqn=initiator_iqn,
                          chap_username=chap_username,
                          chap_secret=chap_secret)

    def unexport_extent(self, context, node, extent):
        return self._call(context, node, 'unexport_extent', extent=extent)

    def scrub_extent(self, context, node, extent):
        return self._call(context, node, 'scrub_extent', extent=extent)

    def get_memory_report(self, context, node):
        """Capacity and usage of the node's tmpfs area, in MiB."""
        return self._call(context, node, 'get_memory_report')

    # compute_node role

    @staticmethod
    def _memory_version(mode):
        # An older agent does not know virtio-mem and would refuse it by
        # its own check anyway; asking for 1.3 says why plainly.
        return '1.3' if mode == 'virtio-mem' else None

    def attach_memory(self, context, node, lease, extents, mode,
                      instance_uuid=None, partial=False):
        """``partial``: ``extents`` are more chunks of a lease already
        attached in virtio-mem mode (an elastic lease growing); the
        agent raises the guest device's requested size by their total.
        Needs 1.4; the flag itself is said by the version."""
        return self._call(context, node, 'attach_memory', lease=lease,
                          extents=extents, mode=mode,
                          instance_uuid=instance_uuid,
                          version=('1.4' if partial
                                   else self._memory_version(mode)))

    def detach_memory(self, context, node, lease, extents, mode,
                      instance_uuid=None, partial=False):
        """``partial``: only ``extents`` go (an elastic lease
        shrinking): the guest's device is lowered by their total first,
        and only their regions are destroyed. Needs 1.4."""
        return self._call(context, node, 'detach_memory', lease=lease,
                          extents=extents, mode=mode,
                          instance_uuid=instance_uuid,
                          version=('1.4' if partial
                                   else self._memory_version(mode)))

    def resize_memory(self, context, node, lease, instance_uuid,
                      requested_mb):
        """virtio-mem mode: the guest gets ``requested_mb`` of the
        lease's device; the MiB it has of it afterwards."""
        return self._call(context, node, 'resize_memory', lease=lease,
                          instance_uuid=instance_uuid,
                          requested_mb=requested_mb, version='1.3')

    @staticmethod
    def _devices_version(devices):
        # An older agent would take a virtual function for a composed
        # device and remove it from the bus at detach: it must refuse
        # the call instead.
        return '1.2' if any(d.get('sriov') for d in devices) else None

    def attach_devices(self, context, node, lease, devices):
        return self._call(context, node, 'attach_devices', lease=lease,
                          devices=devices,
                          version=self._devices_version(devices))

    def detach_devices(self, context, node, lease, devices):
        return self._call(context, node, 'detach_devices', lease=lease,
                          devices=devices,
                          version=self._devices_version(devices))

    def set_sriov_vfs(self, context, node, pf_address, count):
        """Give a physical function of the host ``count`` SR-IOV virtual
        functions; their addresses and ids."""
        cctxt = self.client.prepare(
            server=node, version='1.1',
            timeout=CONF.rpc_response_timeout_bind)
        return cctxt.call(context, 'set_sriov_vfs', pf_address=pf_address,
                          count=count)

    def instance_leases_changed(self, context, instance_uuid, lease_uuids):
        """Tell every agent (fanout cast) the leases of an instance, so
        the libvirt hook of the host it starts on finds them."""
        cctxt = self.client.prepare(fanout=True)
        cctxt.cast(context, 'instance_leases_changed',
                   instance_uuid=instance_uuid, lease_uuids=lease_uuids)
