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

"""FAKE of the compute agent's side of agent RPC 1.4 for an elastic CXL
lease in virtio-mem mode, on the harness's simulated data plane (no
region is made, no domain exists): what the contract promises, kept as
state the tests read.

* The endpoint announces 1.4, as an upgraded agent does.
* attach_memory of chunks of a lease the host already has in virtio-mem
  mode: each new chunk gets a "region", and the guest device's requested
  size grows by their total (never past the address space the device was
  plugged with at the first bind: the lease view's ``max_mb``).
  As the real agent, it makes one region per device per call and names
  it in each chunk's details (``cxl_device``, ``region``).
* detach_memory of some of a lease's chunks: a region is given back
  whole only (a call naming part of one is refused before the guest is
  touched, as the real agent refuses it); the requested size is
  lowered first; a guest that cannot give that much back (its
  ``floor_mb``) refuses with DriverError and nothing changes; otherwise
  only those regions go (erased). Chunks it does not have are no error
  (the conductor repeats calls).
* Any other call is the simulated agent's own.

The version a call came with is not visible to an endpoint:
``versions`` (filled by the tests from the client side) records it.
"""

import threading

import oslo_messaging as messaging

from composable.common import exception
from composable.common import states


class FakeVirtioMemAgent(object):

    def __init__(self, endpoint):
        self.endpoint = endpoint
        self._attach = endpoint.attach_memory
        self._detach = endpoint.detach_memory
        self.lock = threading.Lock()
        # lease uuid -> {chunk uuid: size_mb}
        self.regions = {}
        # chunk uuid -> the region the fake made it part of (grows only)
        self.region_of = {}
        self._made = 0
        # lease uuid -> the guest device's requested size, MiB
        self.requested = {}
        # lease uuid -> the device's size when plugged (address space)
        self.plugged_mb = {}
        # The guest gives memory back down to this much of its device.
        self.floor_mb = 0
        # (method, sorted chunk uuids, partial as the fake saw it)
        self.calls = []
        # Set to an exception to raise from the next partial attach.
        self.fail_attach = None

    def install(self, monkeypatch):
        monkeypatch.setattr(self.endpoint, 'target',
                            messaging.Target(version='1.4'), raising=False)
        monkeypatch.setattr(self.endpoint, 'attach_memory',
                            self.attach_memory)
        monkeypatch.setattr(self.endpoint, 'detach_memory',
                            self.detach_memory)
        return self

    def attach_memory(self, context, lease, extents, mode,
                      instance_uuid=None, partial=False):
        uuid = lease['uuid']
        sizes = {e['uuid']: int(e['size_mb']) for e in extents}
        with self.lock:
            told = partial
            partial = (mode == states.ATTACH_VIRTIO_MEM and
                       bool(self.regions.get(uuid)))
            # A partial attach comes only for a lease the host has.
            assert partial or not told, (uuid, sorted(sizes))
            self.calls.append(('attach_memory', sorted(sizes), partial))
            if not partial:
                details = self._attach(context, lease, extents, mode,
                                       instance_uuid=instance_uuid)
                self.regions[uuid] = dict(sizes)
                self.requested[uuid] = sum(sizes.values())
                self.plugged_mb[uuid] = (lease.get('max_mb') or
                                         sum(sizes.values()))
                return details
            if self.fail_attach is not None:
                failure, self.fail_attach = self.fail_attach, None
                raise failure
            for extent in extents:
                # What the host finds the device by, as at a bind.
                assert extent['locator']['serial'], extent
                assert extent['medium'] == 'cxl', extent
            fresh = {k: v for k, v in sizes.items()
                     if k not in self.regions[uuid]}
            want = self.requested[uuid] + sum(fresh.values())
            if want > self.plugged_mb[uuid]:
                raise exception.DriverError(
                    reason='the virtio-mem device of lease %s was plugged '
                           'with %d MiB; it cannot be asked for %d' % (
                               uuid, self.plugged_mb[uuid], want))
            self.regions[uuid].update(fresh)
            self.requested[uuid] = want
            device_of = {e['uuid']: e['device'] for e in extents}
            for device in sorted({device_of[k] for k in fresh}):
                self._made += 1
                for key in fresh:
                    if device_of[key] == device:
                        self.region_of[key] = 'region%d' % self._made
            details = {k: {'mode': states.ATTACH_VIRTIO_MEM,
                           'medium': 'cxl', 'size_mb': v,
                           'cxl_device': device_of[k],
                           'region': self.region_of.get(k),
                           'instance_uuid': instance_uuid,
                           'requested_mb': want}
                       for k, v in sizes.items()}
            self.endpoint._parts.attachments.memory_attached(uuid, details)
            return details

    def detach_memory(self, context, lease, extents, mode,
                      instance_uuid=None, partial=False):
        uuid = lease['uuid']
        asked = {e['uuid'] for e in extents}
        with self.lock:
            have = self.regions.get(uuid, {})
            partial = (mode == states.ATTACH_VIRTIO_MEM and
                       bool(set(have) - asked))
            self.calls.append(('detach_memory', sorted(asked), partial))
            if not partial:
                self._detach(context, lease, extents, mode,
                             instance_uuid=instance_uuid)
                self.regions.pop(uuid, None)
                self.requested.pop(uuid, None)
                self.plugged_mb.pop(uuid, None)
                return None
            going = {k: v for k, v in have.items() if k in asked}
            for key in going:
                region = self.region_of.get(key)
                rest = [k for k in have if k not in asked and
                        self.region_of.get(k) == region]
                if region is not None and rest:
                    raise exception.DriverError(
                        reason='chunk %s is part of region %s with %s; a '
                               'region is given back whole' % (
                                   key, region, ', '.join(rest)))
            want = self.requested[uuid] - sum(going.values())
            if want < self.floor_mb:
                raise exception.DriverError(
                    reason='instance %s did not give the memory back in '
                           'time: it still has %d MiB of its virtio-mem '
                           'device, %d MiB were asked for' % (
                               instance_uuid, self.requested[uuid], want))
            self.requested[uuid] = want
            for key in going:
                del have[key]
            self.endpoint._parts.attachments.memory_detached(
                uuid, [{'uuid': key} for key in going])
            return None
