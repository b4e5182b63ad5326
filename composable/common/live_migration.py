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


"""What cannot follow a live migration of an instance, and what keeps it
from being suspended: the one rule.

Asked by the conductor (composable.conductor.nova.events: the answer to
Nova's live migration notification, live_migration_allowed) and by the
libvirt hook's server on the destination host (composable.agent.
hook_server, which refuses the incoming migration), on the lease
summaries the conductor's instance_status returns. Imports nothing but
composable.common.states.
"""

from composable.common import states


def cannot_follow(status, attach_mode, memory_mb, device_count):
    """Why a lease cannot follow a live migration of its instance, or
    None: passed-through fabric devices (bound to the source host's
    partition, VFIO devices do not migrate), bound guest-mode memory
    (an iSCSI disk of the source host's QEMU), and bound virtio-mem
    memory (backed by a CXL region onlined on the source host)."""
    if status in states.HOLDS_CAPACITY and device_count:
        return 'pooled PCIe device(s) passed through from the fabric'
    if (status == states.BOUND and attach_mode == states.ATTACH_GUEST
            and memory_mb):
        return 'guest-mode memory, a disk of the guest'
    if (status == states.BOUND and attach_mode == states.ATTACH_VIRTIO_MEM
            and memory_mb):
        return ('virtio-mem memory, a CXL region of the source host in the '
                'guest')
    return None


def summary_cannot_follow(summary):
    """cannot_follow of a lease summary (the dicts of instance_status)."""
    return cannot_follow(summary['status'], summary.get('attach_mode'),
                         summary.get('memory_mb'),
                         summary.get('device_count'))


def refusal(instance_uuid, reasons):
    """The message that refuses a live migration, ``reasons`` being
    ['<cannot_follow> (lease <uuid>)', ...]."""
    return ('Server %s holds %s, which cannot follow a live migration. '
            'Cold migrate the server (migrate or resize) instead, or '
            'unbind the lease first.' % (instance_uuid,
                                         '; and '.join(reasons)))


def cannot_suspend(status, device_count):
    """Why a lease keeps its instance from being suspended, or None.

    Nova suspends a libvirt guest by saving its memory to a file
    (virDomainManagedSave); libvirt refuses to save a guest that holds a
    PCI host device (it asks QEMU for migration blockers, and a VFIO
    function without migration support is one), before pausing it. The
    devices of a lease are in the guest from the bind to the end of the
    unbind. A lease whose devices are not in the guest (reserved) does
    not stop a suspend: the hook plugs them again at the resume.
    """
    if status in (states.BINDING, states.BOUND, states.UNBINDING) and \
            device_count:
        return 'pooled PCIe device(s) passed through from the fabric'
    return None


def suspend_refusal(instance_uuid, reasons):
    """What the owner of a lease reads when Nova was asked to suspend its
    server; ``reasons`` as for refusal()."""
    return ('Server %s holds %s, which cannot be suspended: libvirt refuses '
            'to save the memory of a guest with a PCI host device, so the '
            'suspend fails and the guest keeps running, but Nova sets the '
            'server to ERROR (an administrator sets it back with '
            '"openstack server set --state active"). Stop or shelve the '
            'server instead, or unbind the lease first.' % (
                instance_uuid, '; and '.join(reasons)))
