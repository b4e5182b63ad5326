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

"""Whether a lease request can ever fit the pools it may come from.

A request no pool could ever hold (more memory than the largest pool has
in total, a step size no pool takes, a device kind no pool holds) is bad
input: refused with 400 and nothing created, not recorded as a lease in
alloc_failed. The API checks requests that name their pools or devices;
the conductor checks the others on the pool rows its claim reads anyway
(composable.conductor.allocator), so that a create costs the API no
database read. Both raise the same messages, from here.

``pools`` are rows or objects with kind, name, resource_class, total and
step_size.
"""

from composable.common import exception
from composable.common import resource_classes


def device_kind(pool):
    """The kind of the devices of a device pool: "gpu", or the lower-case
    device class of a pci pool; None for a memory pool."""
    if pool.kind == 'gpu':
        return 'gpu'
    if pool.kind == 'pci':
        return pool.resource_class[
            len(resource_classes.PCI_PREFIX):].lower()
    return None


def check_memory(memory_mb, pools):
    """Refuse ``memory_mb`` that none of the memory ``pools`` can hold."""
    candidates = [p for p in pools if p.kind == 'memory']
    if not candidates:
        raise exception.Invalid(
            "Invalid input for field 'memory_mb': there is no memory pool "
            "to lease memory from")
    largest = max(candidates, key=lambda p: p.total)
    if memory_mb > largest.total:
        raise exception.Invalid(
            "Invalid input for field 'memory_mb': %d MiB is more than the "
            "largest memory pool (%s) holds in total (%d MiB)" % (
                memory_mb, largest.name, largest.total))
    if not any(memory_mb % (p.step_size or 1) == 0 for p in candidates):
        steps = sorted({p.step_size or 1 for p in candidates})
        raise exception.Invalid(
            "Invalid input for field 'memory_mb': it must be a multiple of "
            "the pool's step size (%s MiB)" % ', '.join(
                str(s) for s in steps))


def check_devices(device_count, kind, pools):
    """Refuse ``device_count`` devices of ``kind`` that none of ``pools``
    (every pool: those of other kinds are left out here) can give."""
    check_device_candidates(device_count, kind,
                            [p for p in pools if device_kind(p) == kind])


def check_device_candidates(device_count, kind, candidates):
    """check_devices on ``candidates``, the pools of devices of ``kind``
    only."""
    if not candidates:
        raise exception.Invalid(
            "Invalid input for field 'device_kind': no pool holds %s "
            "devices" % kind)
    largest = max(candidates, key=_devices_per_lease)
    if device_count > _devices_per_lease(largest):
        if getattr(largest, 'sriov_host_id', None) is not None:
            raise exception.Invalid(
                "Invalid input for field 'device_count': the %s pools "
                "give one SR-IOV virtual function per lease, not %d" % (
                    kind, device_count))
        raise exception.Invalid(
            "Invalid input for field 'device_count': %d is more than the "
            "largest %s pool (%s) holds in total (%d)" % (
                device_count, kind, largest.name, largest.total))


def _devices_per_lease(pool):
    # A pool of SR-IOV virtual functions gives one VF per lease.
    if getattr(pool, 'sriov_host_id', None) is not None:
        return min(pool.total, 1)
    return pool.total
