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

"""The lease document: what the API shows of a lease, as plain data.

One definition serves both places that produce it: composable-api renders
leases it reads from the database, and the conductor returns the document
of a lease it has just created (built from the rows it wrote in that same
transaction), so the API answers a create without reading the lease back.

The document holds every field, the admin-only ones included
(``ADMIN_EXTENT_FIELDS``, ``ADMIN_DEVICE_FIELDS``); the API removes those
for other callers. CHAP credentials are never part of it.
"""

from composable.common import states
from composable.common import utils

# Where an extent is exported and where a device sits on the fabric:
# operators' business, not projects'.
ADMIN_EXTENT_FIELDS = ('target_iqn', 'lun')
ADMIN_DEVICE_FIELDS = ('address',)


def extent_document(extent, memory_node_name):
    return {
        'uuid': extent.uuid,
        'index': extent.index,
        'memory_node': memory_node_name,
        'size_mb': extent.size_mb,
        'export_state': extent.export_state,
        'target_iqn': extent.target_iqn,
        'lun': extent.lun,
    }


def device_document(device, state=None):
    return {
        'uuid': device.uuid,
        'kind': device.kind,
        'model': device.model,
        'state': state or device.state,
        'pci_address': device.pci_address,
        'address': device.address,
    }


def lease_document(lease, host_name=None, memory_pool_uuid=None,
                   device_pool_uuid=None, extents=None, devices=None):
    """The document of ``lease``.

    With only ``lease``, its relationships (host, pools, extents with their
    memory node, devices) are read from it. The other arguments give them
    instead, as documents (extents, devices) or plain values, for a lease
    whose relationships are not loaded.
    """
    if extents is None:
        extents = [extent_document(e, e.memory_node.name)
                   for e in lease.extents]
        devices = [device_document(d) for d in lease.devices]
        host_name = lease.host.name if lease.host is not None else None
        memory_pool_uuid = (lease.memory_pool.uuid
                            if lease.memory_pool is not None else None)
        device_pool_uuid = (lease.device_pool.uuid
                            if lease.device_pool is not None else None)
    return {
        'uuid': lease.uuid,
        'name': lease.name,
        'description': lease.description,
        'project_id': lease.project_id,
        'user_id': lease.user_id,
        'status': lease.status,
        'fault': lease.fault,
        'memory_mb': lease.memory_mb or 0,
        'device_count': lease.device_count or 0,
        'device_kind': lease.device_kind,
        'device_model': lease.device_model,
        'device_traits': lease.device_traits or [],
        'attach_mode': lease.attach_mode or states.ATTACH_HOST,
        'start_at': utils.isotime(lease.start_at),
        'end_at': utils.isotime(lease.end_at),
        'host': host_name,
        'instance_uuid': lease.instance_uuid,
        'memory_pool_uuid': memory_pool_uuid,
        'device_pool_uuid': device_pool_uuid,
        'extents': list(extents or []),
        'devices': list(devices or []),
        # An elastic memory lease's policy; None for a lease of fixed size.
        'elastic': getattr(lease, 'elastic', None) or None,
        'created_at': utils.isotime(lease.created_at),
        'updated_at': utils.isotime(lease.updated_at),
    }
