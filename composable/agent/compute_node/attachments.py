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

"""What a compute node has live, by lease uuid.

Kept in memory so repeated calls answer the same, the usage reports know
which memory leases to sample, and tests can check nothing is left over.
One lock guards it all: the RPC workers, the libvirt hook's threads and
the usage sampler write and read it at once. A restarted agent learns
its memory leases again from the conductor (AgentManager.
recover_memory_leases).
"""

import threading


class LiveAttachments(object):

    def __init__(self):
        self._lock = threading.Lock()
        # {lease uuid: {extent uuid: details}}
        self.memory = {}
        # {lease uuid: {'uuid', 'attach_mode', 'instance_uuid'}} of the
        # memory leases attached here, for the usage reports.
        self._memory_leases = {}
        # {lease uuid: {device uuid: host PCI address}}
        self.devices = {}

    # ------------------------------------------------------------ memory

    def memory_attached(self, lease_uuid, details, lease=None):
        """Record extents of a lease as live here ({extent uuid:
        details}); extents attached before stay recorded (a lease grows
        by attaching its new extents only)."""
        with self._lock:
            held = self.memory.setdefault(lease_uuid, {})
            held.update(details or {})
            if lease is not None:
                self._memory_leases[lease_uuid] = {
                    'uuid': lease_uuid,
                    'attach_mode': lease.get('attach_mode'),
                    'instance_uuid': lease.get('instance_uuid')}

    def memory_detached(self, lease_uuid, extents):
        """Forget the extents of a lease detached here; the lease once
        none is left."""
        with self._lock:
            held = self.memory.get(lease_uuid)
            if held is None:
                return
            for extent in extents:
                held.pop(extent['uuid'], None)
            if not held:
                self.memory.pop(lease_uuid, None)
                self._memory_leases.pop(lease_uuid, None)

    def memory_recovered(self, lease_uuid, details, attach_mode,
                         instance_uuid):
        """Record a memory lease learnt from the conductor after a
        restart, unless this process attached it meanwhile. True when
        recorded."""
        with self._lock:
            if lease_uuid in self.memory:
                return False
            self.memory[lease_uuid] = details
            self._memory_leases[lease_uuid] = {
                'uuid': lease_uuid, 'attach_mode': attach_mode,
                'instance_uuid': instance_uuid}
            return True

    def memory_leases(self):
        """{lease uuid: (lease, {extent uuid: details})} of the memory
        leases attached here: a snapshot."""
        with self._lock:
            return {uuid: (dict(self._memory_leases.get(uuid) or
                                {'uuid': uuid}), dict(details))
                    for uuid, details in self.memory.items()}

    # ----------------------------------------------------------- devices

    def devices_attached(self, lease_uuid, addresses):
        """Record devices of a lease as live here ({device uuid: host PCI
        address})."""
        with self._lock:
            self.devices.setdefault(lease_uuid, {}).update(addresses)

    def devices_detached(self, lease_uuid, devices):
        """Forget devices of a lease; the lease once none is left."""
        with self._lock:
            held = self.devices.get(lease_uuid, {})
            for device in devices:
                held.pop(device['uuid'], None)
            if not held:
                self.devices.pop(lease_uuid, None)
