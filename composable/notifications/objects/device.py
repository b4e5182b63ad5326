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

"""device.health: a pooled device's health or service state changed."""

from oslo_versionedobjects import fields

from composable.notifications.objects import base


@base.NotificationObjectRegistry.register
class DeviceHealthPayload(base.NotificationPayloadBase):
    """A device, what the fabric says of its health, and what composable
    did about it. Never the fabric's connection settings."""

    # Version 1.0: first version
    VERSION = '1.0'

    SCHEMA = {
        'uuid': ('device', 'uuid'),
        'name': ('device', 'name'),
        'address': ('device', 'address'),
        'kind': ('device', 'kind'),
        'vendor_id': ('device', 'vendor_id'),
        'product_id': ('device', 'product_id'),
        'model': ('device', 'model'),
        'state': ('device', 'state'),
    }

    fields = {
        'uuid': fields.UUIDField(),
        'name': fields.StringField(nullable=True),
        # The fabric's own id of the device.
        'address': fields.StringField(),
        'kind': fields.StringField(),
        'vendor_id': fields.StringField(nullable=True),
        'product_id': fields.StringField(nullable=True),
        'model': fields.StringField(nullable=True),
        'pool_uuid': fields.UUIDField(),
        'fabric_uuid': fields.UUIDField(nullable=True),
        'fabric_name': fields.StringField(nullable=True),
        # composable's state of the device now, and before the change.
        'state': fields.StringField(),
        'previous_state': fields.StringField(nullable=True),
        # What the fabric reports: ok, warning, critical; absent when it
        # no longer reports the device; None when it says nothing.
        'health': fields.StringField(nullable=True),
        'lease_uuid': fields.UUIDField(nullable=True),
        'reason': fields.StringField(nullable=True),
    }

    def __init__(self, device, previous_state=None, health=None,
                 reason=None, lease_uuid=None):
        super().__init__()
        self.populate_schema(device=device)
        pool = device.pool
        self.pool_uuid = pool.uuid
        fabric = pool.fabric
        self.fabric_uuid = fabric.uuid if fabric is not None else None
        self.fabric_name = fabric.name if fabric is not None else None
        self.previous_state = previous_state
        self.health = health
        self.reason = reason
        self.lease_uuid = lease_uuid


@base.NotificationObjectRegistry.register
class DeviceHealthNotification(base.NotificationBase):
    # Version 1.0: first version
    VERSION = '1.0'

    fields = {
        'payload': fields.ObjectField('DeviceHealthPayload'),
    }
