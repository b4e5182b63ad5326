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

"""composable's versioned notifications (see doc/source/admin/
notifications.rst).

Off until ``[oslo_messaging_notifications] driver`` names a driver (e.g.
``messagingv2``): oslo.messaging's own switch, which operators know from
every other OpenStack service. They go to ``[oslo_messaging_notifications]
topics`` on ``[oslo_messaging_notifications] transport_url`` (else
``[DEFAULT] transport_url``).

Lease notifications follow the lease's action log: every entry that
starts or ends (composable.db.api.action_start / action_finish) becomes
``lease.<action>.start`` / ``.end`` / ``.error``, sent once the database
transaction that wrote it has committed (a rolled-back entry sends
nothing), so there is one place where they come from, whatever path a
lease took. Pool notifications follow the same way from the writes that
change a pool's capacity. device.health is sent by the fabric sync.
"""

import os
import sys
import threading

from oslo_log import log as logging
import oslo_messaging as messaging

from composable.common import context as composable_context
from composable.common import states
from composable import conf
from composable.db import api as db_api
from composable.notifications.objects import base
from composable.notifications.objects import device as device_objects
from composable.notifications.objects import lease as lease_objects
from composable.notifications.objects import pool as pool_objects

CONF = conf.CONF
LOG = logging.getLogger(__name__)

_NOTIFIER = None
_TRANSPORT = None
_SOURCE = None
_LOCK = threading.Lock()

# Action log entries that are notified, and the action they are notified
# as. The expiry is one event, sent when it ends (the lease released, or
# the release failed). A lease created with a future start_at is
# allocated by its "start" action; "stop" is the unbind that follows its
# instance's domain stopping. Moves and evacuations (an unbind and a bind
# in one action) and the reconciler's repairs are not notified.
LEASE_ACTIONS = {
    'create': base.ACTION_CREATE,
    'start': base.ACTION_ALLOCATE,
    'bind': base.ACTION_BIND,
    'unbind': base.ACTION_UNBIND,
    'stop': base.ACTION_UNBIND,
    'delete': base.ACTION_DELETE,
    'expire': base.ACTION_EXPIRE,
    # An elastic memory lease grown or shrunk; .error when it was kept
    # at its size (a full pool, an agent that failed).
    'resize': base.ACTION_RESIZE,
    # The devices of a bound lease bound to vfio-pci again after its host
    # restarted (composable.conductor.device_reports); .error when one
    # could not be.
    'restore': base.ACTION_RESTORE,
}
_SINGLE_EVENT_ACTIONS = frozenset([base.ACTION_EXPIRE])


class _ContextSerializer(messaging.NoOpSerializer):
    """Sends only who asked: never the caller's token or service
    catalog."""

    @staticmethod
    def serialize_context(context):
        if context is None:
            return {}
        return {key: getattr(context, key, None)
                for key in ('request_id', 'global_request_id', 'project_id',
                            'user_id')}


def init(source=None, conf_=None):
    """Set up the notifier for the service ``source`` (e.g.
    composable-conductor). Does nothing more when no driver is
    configured."""
    global _NOTIFIER, _TRANSPORT, _SOURCE
    conf_ = conf_ or CONF
    with _LOCK:
        _SOURCE = source or os.path.basename(sys.argv[0]) or 'composable'
        if _NOTIFIER is not None:
            return _NOTIFIER
        # Registers [oslo_messaging_notifications] too; connects to
        # nothing yet.
        transport = messaging.get_notification_transport(conf_)
        # oslo.messaging's own is_enabled() is true for an empty driver
        # list, which sends nothing: off means no driver but noop.
        if not set(conf_.oslo_messaging_notifications.driver) - {'noop'}:
            transport.cleanup()
            return None
        notifier = messaging.Notifier(transport,
                                      serializer=_ContextSerializer())
        _TRANSPORT, _NOTIFIER = transport, notifier
        db_api.add_commit_listener(_on_commit)
    LOG.info('Versioned notifications enabled (drivers %s, topics %s)',
             ', '.join(conf_.oslo_messaging_notifications.driver),
             ', '.join(conf_.oslo_messaging_notifications.topics))
    return notifier


def cleanup():
    global _NOTIFIER, _TRANSPORT
    with _LOCK:
        db_api.remove_commit_listener(_on_commit)
        if _TRANSPORT is not None:
            _TRANSPORT.cleanup()
        _NOTIFIER = _TRANSPORT = None


def enabled():
    return _NOTIFIER is not None


def _publisher():
    return base.NotificationPublisher(host=CONF.host,
                                      source=_SOURCE or 'composable')


def _send(notification, context):
    notifier = _NOTIFIER
    if notifier is None:
        return
    try:
        notification.emit(notifier, context)
    except Exception:
        # A notification never fails what it reports on.
        LOG.exception('Could not send notification %s',
                      notification.event_type.to_event_type())


def lease_event(context, lease, action, phase=None, fault=None):
    """Send lease.<action>[.<phase>] about ``lease`` (a lease row)."""
    error = phase == base.PHASE_ERROR
    if action in _SINGLE_EVENT_ACTIONS:
        phase = None
    _send(lease_objects.LeaseNotification(
        priority=base.PRIORITY_ERROR if error else base.PRIORITY_INFO,
        publisher=_publisher(),
        event_type=base.EventType(base.OBJECT_LEASE, action, phase),
        payload=lease_objects.LeasePayload(
            lease, fault=fault if error else None)), context)


def device_health(context, device, previous_state=None, health=None,
                  reason=None, lease_uuid=None):
    """Send device.health about ``device`` (a device row, read again
    here with its pool and fabric)."""
    if _NOTIFIER is None:
        return
    try:
        device = db_api.device_get(composable_context.get_admin_context(),
                                   device.uuid)
        bad = (device.state == states.DEVICE_FAULTY or
               health in ('critical', 'absent'))
        notification = device_objects.DeviceHealthNotification(
            priority=base.PRIORITY_ERROR if bad else base.PRIORITY_INFO,
            publisher=_publisher(),
            event_type=base.EventType(base.OBJECT_DEVICE,
                                      base.ACTION_HEALTH),
            payload=device_objects.DeviceHealthPayload(
                device, previous_state=previous_state, health=health,
                reason=reason, lease_uuid=lease_uuid))
    except Exception:
        # Whatever the notification needs, the sync goes on without it.
        LOG.exception('Could not build the device.health notification of '
                      'device %s', getattr(device, 'uuid', device))
        return
    _send(notification, context)


def pool_update(context, pool):
    """Send pool.update about ``pool`` (a pool row)."""
    _send(pool_objects.PoolNotification(
        priority=base.PRIORITY_INFO, publisher=_publisher(),
        event_type=base.EventType(base.OBJECT_POOL, base.ACTION_UPDATE),
        payload=pool_objects.PoolPayload(pool)), context)


def _on_commit(events):
    """What a committed transaction recorded (db_api.record_event),
    turned into notifications in the order it was recorded."""
    admin = composable_context.get_admin_context()
    for event in events:
        kind = event[0]
        try:
            if kind == db_api.EVENT_LEASE_ACTION:
                _, context, lease_id, action, phases, message = event
                notified = LEASE_ACTIONS.get(action)
                if notified is None:
                    continue
                lease = db_api.lease_get_by_id(admin, lease_id)
                for phase in phases:
                    if (notified in _SINGLE_EVENT_ACTIONS and
                            phase == base.PHASE_START):
                        continue
                    lease_event(context, lease, notified, phase,
                                fault=message)
            elif kind == db_api.EVENT_POOL_CHANGED:
                _, context, pool_id = event
                pool_update(context, db_api.pool_get_by_id(admin, pool_id))
        except Exception:
            LOG.exception('Could not build the notification of %s', kind)
