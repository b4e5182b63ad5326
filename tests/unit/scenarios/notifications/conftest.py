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

import json
import time

import oslo_messaging as messaging
from oslo_messaging.notify import _impl_test
import pytest

from composable import conf
from composable.db import api as db_api
from composable import notifications
from tests.unit.conductor.conftest import bare_harness  # noqa: F401
from tests.unit.conductor.conftest import harness  # noqa: F401
from tests.unit.conductor.conftest import sqlite_db  # noqa: F401

CONF = conf.CONF


class Sent(object):
    """What oslo.messaging's in-memory ``test`` notification driver
    received."""

    @staticmethod
    def all():
        return [dict(message, context=ctxt)
                for ctxt, message, _priority, _retry
                in _impl_test.NOTIFICATIONS]

    def events(self, prefix=''):
        return [m['event_type'] for m in self.all()
                if m['event_type'].startswith(prefix)]

    def about(self, uuid):
        return [m for m in self.all()
                if m['payload']['composable_object.data'].get('uuid') ==
                uuid]

    def wait_for(self, predicate, timeout=30, what='notifications'):
        deadline = time.monotonic() + timeout
        while True:
            found = predicate()
            if found:
                return found
            if time.monotonic() > deadline:
                raise AssertionError('no %s in time; sent: %s' % (
                    what, json.dumps(self.all(), indent=1, default=str)))
            time.sleep(0.05)


@pytest.fixture
def sent():
    """Notifications on, to the in-memory driver."""
    # Registers [oslo_messaging_notifications] in CONF.
    messaging.get_notification_transport(CONF, url='fake://').cleanup()
    CONF.set_override('driver', ['test'],
                      'oslo_messaging_notifications')
    CONF.set_override('transport_url', 'fake://',
                      'oslo_messaging_notifications')
    _impl_test.reset()
    notifications.init('composable-conductor')
    assert notifications.enabled()
    yield Sent()
    notifications.cleanup()
    _impl_test.reset()
    CONF.clear_override('driver', 'oslo_messaging_notifications')
    CONF.clear_override('transport_url', 'oslo_messaging_notifications')


def data(message):
    return message['payload']['composable_object.data']


def assert_no_listener():
    assert notifications._on_commit not in db_api._COMMIT_LISTENERS
