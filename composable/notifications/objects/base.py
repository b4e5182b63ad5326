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

"""The shape every notification composable sends (after Nova's versioned
notifications).

A notification is a versioned object with four fields: ``priority``,
``event_type`` (an :class:`EventType`: the object, the action and, for
long operations, the phase, rendered ``lease.bind.start``), ``publisher``
(the service and host that sent it) and ``payload``, a versioned object of
its own. A payload names, in ``SCHEMA``, which of its fields come from
which attribute of which source object, so the payload is filled from the
database rows by :meth:`NotificationPayloadBase.populate_schema` and never
by hand-copied dictionaries.

What a consumer receives is the payload's ``obj_to_primitive()``: its
name, namespace, version and data. A payload's fields change only with a
new version (minor: fields added; major: anything else); the object hash
test keeps that promise.
"""

from oslo_versionedobjects import base as ovo_base
from oslo_versionedobjects import fields

NAMESPACE = 'composable'


class NotificationObjectRegistry(ovo_base.VersionedObjectRegistry):
    """Registers composable's notification objects. oslo.versionedobjects
    keeps the classes of every registry in one table per process (Nova's
    too, when both are imported); composable's are those whose
    OBJ_PROJECT_NAMESPACE is ``composable``."""


class NotificationObject(ovo_base.VersionedObject,
                         ovo_base.ComparableVersionedObject):
    OBJ_SERIAL_NAMESPACE = 'composable_object'
    OBJ_PROJECT_NAMESPACE = NAMESPACE

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        # Notifications are sent whole; change tracking means nothing here.
        self.obj_reset_changes(recursive=False)


# Priorities: the method of oslo.messaging's Notifier that sends them.
PRIORITY_INFO = 'info'
PRIORITY_ERROR = 'error'
PRIORITIES = (PRIORITY_INFO, PRIORITY_ERROR)

# Phases of a long operation.
PHASE_START = 'start'
PHASE_END = 'end'
PHASE_ERROR = 'error'
PHASES = (PHASE_START, PHASE_END, PHASE_ERROR)

# Objects and their actions.
OBJECT_LEASE = 'lease'
OBJECT_DEVICE = 'device'
OBJECT_POOL = 'pool'
OBJECTS = (OBJECT_LEASE, OBJECT_DEVICE, OBJECT_POOL)

ACTION_CREATE = 'create'
ACTION_ALLOCATE = 'allocate'
ACTION_BIND = 'bind'
ACTION_UNBIND = 'unbind'
ACTION_DELETE = 'delete'
ACTION_EXPIRE = 'expire'
ACTION_HEALTH = 'health'
ACTION_UPDATE = 'update'
ACTION_RESIZE = 'resize'
ACTION_RESTORE = 'restore'
ACTIONS = (ACTION_CREATE, ACTION_ALLOCATE, ACTION_BIND, ACTION_UNBIND,
           ACTION_DELETE, ACTION_EXPIRE, ACTION_HEALTH, ACTION_UPDATE,
           ACTION_RESIZE, ACTION_RESTORE)


@NotificationObjectRegistry.register_if(False)
class NotificationPayloadBase(NotificationObject):
    """A payload whose fields are filled from source objects.

    ``SCHEMA``: {field: (source name, attribute)}; populate_schema takes
    the sources by name.
    """

    SCHEMA = {}
    # Version 1.0: first version
    VERSION = '1.0'

    def populate_schema(self, **sources):
        for field, (source_name, attribute) in self.SCHEMA.items():
            source = sources[source_name]
            value = getattr(source, attribute, None)
            if value is None and not self.fields[field].nullable:
                raise ValueError('%s.%s is required for the %s payload' %
                                 (source_name, attribute, self.obj_name()))
            setattr(self, field, value)


@NotificationObjectRegistry.register
class EventType(NotificationObject):
    # Version 1.0: first version
    # Version 1.1: action resize (elastic memory leases)
    # Version 1.2: action restore (devices bound again after a host
    #              restart)
    VERSION = '1.2'

    fields = {
        'object': fields.EnumField(OBJECTS),
        'action': fields.EnumField(ACTIONS),
        'phase': fields.EnumField(PHASES, nullable=True),
    }

    def __init__(self, object, action, phase=None):
        super().__init__(object=object, action=action, phase=phase)

    def to_event_type(self):
        parts = [self.object, self.action]
        if self.phase is not None:
            parts.append(self.phase)
        return '.'.join(parts)


@NotificationObjectRegistry.register
class NotificationPublisher(NotificationObject):
    # Version 1.0: first version
    VERSION = '1.0'

    fields = {
        'host': fields.StringField(),
        'source': fields.StringField(),
    }

    def publisher_id(self):
        return '%s:%s' % (self.source, self.host)


@NotificationObjectRegistry.register_if(False)
class NotificationBase(NotificationObject):
    """A notification; subclasses declare their ``payload`` field."""

    # Version 1.0: first version
    VERSION = '1.0'

    fields = {
        'priority': fields.EnumField(PRIORITIES),
        'event_type': fields.ObjectField('EventType'),
        'publisher': fields.ObjectField('NotificationPublisher'),
    }

    def payload_primitive(self):
        """The payload as sent: a payload is whole, so no list of changed
        fields."""
        self.payload.obj_reset_changes(recursive=True)
        return self.payload.obj_to_primitive()

    def emit(self, notifier, context):
        """Send it with ``notifier`` (an oslo.messaging Notifier)."""
        prepared = notifier.prepare(
            publisher_id=self.publisher.publisher_id())
        send = getattr(prepared, self.priority)
        send(context, self.event_type.to_event_type(),
             self.payload_primitive())
