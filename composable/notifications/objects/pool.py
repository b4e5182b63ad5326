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

"""pool.update: a pool's capacity changed (an operator changed the pool or
its inventory, or the fabric sync found devices come or go)."""

from oslo_versionedobjects import fields

from composable.common import media
from composable.notifications.objects import base


@base.NotificationObjectRegistry.register
class PoolPayload(base.NotificationPayloadBase):
    # Version 1.0: first version
    # Version 1.1: medium
    VERSION = '1.1'

    SCHEMA = {
        'uuid': ('pool', 'uuid'),
        'name': ('pool', 'name'),
        'kind': ('pool', 'kind'),
        'resource_class': ('pool', 'resource_class'),
        'total': ('pool', 'total'),
        'reserved': ('pool', 'reserved'),
        'used': ('pool', 'used'),
        'step_size': ('pool', 'step_size'),
        'provider_uuid': ('pool', 'provider_uuid'),
    }

    fields = {
        'uuid': fields.UUIDField(),
        'name': fields.StringField(),
        'kind': fields.StringField(),
        'resource_class': fields.StringField(),
        'fabric_uuid': fields.UUIDField(nullable=True),
        # In MiB for memory pools, in devices otherwise.
        'total': fields.IntegerField(),
        'reserved': fields.IntegerField(),
        'used': fields.IntegerField(),
        'free': fields.IntegerField(),
        'step_size': fields.IntegerField(),
        'provider_uuid': fields.UUIDField(nullable=True),
        # Memory pools: network or cxl; None for device pools.
        'medium': fields.StringField(nullable=True),
    }

    def __init__(self, pool):
        super().__init__()
        self.populate_schema(pool=pool)
        self.fabric_uuid = (pool.fabric.uuid
                            if pool.fabric is not None else None)
        self.free = max(0, pool.total - pool.reserved - pool.used)
        self.medium = media.medium(pool)


@base.NotificationObjectRegistry.register
class PoolNotification(base.NotificationBase):
    # Version 1.0: first version
    VERSION = '1.0'

    fields = {
        'payload': fields.ObjectField('PoolPayload'),
    }
