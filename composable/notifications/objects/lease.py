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

"""Lease notifications: lease.create, lease.bind, lease.unbind,
lease.delete (each .start, .end, .error) and lease.expire."""

from oslo_versionedobjects import fields

from composable.notifications.objects import base


@base.NotificationObjectRegistry.register
class LeasePayload(base.NotificationPayloadBase):
    """What a lease is, for billing and monitoring.

    Never the lease's memory extents: their CHAP credentials stay in the
    database, and the export details are the operator's business.
    """

    # Version 1.0: first version
    VERSION = '1.0'

    SCHEMA = {
        'uuid': ('lease', 'uuid'),
        'name': ('lease', 'name'),
        'project_id': ('lease', 'project_id'),
        'user_id': ('lease', 'user_id'),
        'status': ('lease', 'status'),
        'memory_mb': ('lease', 'memory_mb'),
        'device_count': ('lease', 'device_count'),
        'device_kind': ('lease', 'device_kind'),
        'device_model': ('lease', 'device_model'),
        'attach_mode': ('lease', 'attach_mode'),
        'instance_uuid': ('lease', 'instance_uuid'),
        'start_at': ('lease', 'start_at'),
        'end_at': ('lease', 'end_at'),
        'created_at': ('lease', 'created_at'),
    }

    fields = {
        'uuid': fields.UUIDField(),
        'name': fields.StringField(nullable=True),
        'project_id': fields.StringField(),
        'user_id': fields.StringField(nullable=True),
        'status': fields.StringField(),
        'memory_mb': fields.IntegerField(),
        'device_count': fields.IntegerField(),
        'device_kind': fields.StringField(nullable=True),
        'device_model': fields.StringField(nullable=True),
        # The devices the lease holds now (its device_count is what it
        # asked for).
        'devices_held': fields.IntegerField(),
        'memory_pool_uuid': fields.UUIDField(nullable=True),
        'device_pool_uuid': fields.UUIDField(nullable=True),
        'attach_mode': fields.StringField(),
        'host': fields.StringField(nullable=True),
        'instance_uuid': fields.UUIDField(nullable=True),
        'start_at': fields.DateTimeField(nullable=True),
        'end_at': fields.DateTimeField(nullable=True),
        'created_at': fields.DateTimeField(nullable=True),
        # Why the operation failed (error phases), else the lease's fault.
        'fault': fields.StringField(nullable=True),
    }

    def __init__(self, lease, fault=None):
        super().__init__()
        self.populate_schema(lease=lease)
        self.devices_held = len(lease.devices or [])
        self.memory_pool_uuid = (lease.memory_pool.uuid
                                 if lease.memory_pool is not None else None)
        self.device_pool_uuid = (lease.device_pool.uuid
                                 if lease.device_pool is not None else None)
        self.host = lease.host.name if lease.host is not None else None
        self.fault = fault if fault is not None else lease.fault


@base.NotificationObjectRegistry.register
class LeaseNotification(base.NotificationBase):
    # Version 1.0: first version
    VERSION = '1.0'

    fields = {
        'payload': fields.ObjectField('LeasePayload'),
    }
