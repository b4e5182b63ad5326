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

"""composable's versioned notifications on the machine's RabbitMQ.

composable-api, composable-conductor and two composable-agents run as
processes (the agents with their no-op memory exporter) on MariaDB, with
``[oslo_messaging_notifications] driver = messagingv2``. The test listens
with oslo.messaging's notification listener, as a billing or monitoring
service would, on the stack's own RabbitMQ vhost (removed with the stack),
and checks what a lease's life sends: create, bind, unbind and delete,
each start and end, in order, with the lease's payload, and no secret; a
bind whose agent is gone ends with lease.bind.error and its fault.
"""

import json
import threading
import time

from oslo_config import cfg
import oslo_messaging as messaging
import pytest

from tests.functional.service import test_real_processes as processes
from tests.functional import stack as stack_mod

TOPIC = 'composable-test-notifications'

mariadb_url = processes.mariadb_url


class Collector(object):
    """The listener's endpoint: keeps every notification it gets."""

    def __init__(self):
        self.messages = []
        self._lock = threading.Lock()

    def _keep(self, priority, ctxt, publisher_id, event_type, payload):
        with self._lock:
            self.messages.append({'priority': priority,
                                  'publisher_id': publisher_id,
                                  'event_type': event_type,
                                  'payload': payload, 'context': ctxt})
        return messaging.NotificationResult.HANDLED

    def info(self, ctxt, publisher_id, event_type, payload, metadata):
        return self._keep('INFO', ctxt, publisher_id, event_type, payload)

    def error(self, ctxt, publisher_id, event_type, payload, metadata):
        return self._keep('ERROR', ctxt, publisher_id, event_type, payload)

    def about(self, uuid):
        with self._lock:
            return [m for m in self.messages
                    if m['payload'].get('composable_object.data', {}).get(
                        'uuid') == uuid]

    def wait_for(self, uuid, count, timeout=120):
        deadline = time.monotonic() + timeout
        while True:
            found = self.about(uuid)
            if len(found) >= count:
                return found
            if time.monotonic() > deadline:
                raise AssertionError(
                    'only these notifications of lease %s came: %s' % (
                        uuid, [m['event_type'] for m in found]))
            time.sleep(0.1)


@pytest.fixture
def stack(tmp_path, mariadb_url):
    if not processes._rabbit_up():
        import os
        if os.environ.get('COMPOSABLE_REQUIRE_DBS') == '1':
            pytest.fail('RabbitMQ is required but not running on :5672')
        pytest.skip('RabbitMQ is not running on 127.0.0.1:5672')
    s = stack_mod.Stack(tmp_path, mariadb_url, processes.RABBIT, extra={
        'oslo_messaging_notifications': {'driver': 'messagingv2',
                                         'topics': TOPIC}})
    try:
        s.dbsync()
        s.start_conductor('conductor-0')
        s.wait_conductor('conductor-0')
        s.start_agent('compute-0', roles='compute_node')
        s.start_agent('memory-0', roles='memory_node')
        s.start_api()
        yield s
    finally:
        s.stop()


@pytest.fixture
def collector(stack):
    """Listening on the stack's vhost before anything is sent (the
    queues exist from then on)."""
    conf = cfg.ConfigOpts()
    conf([], project='composable-test')
    transport = messaging.get_notification_transport(
        conf, url=stack.transport_url)
    found = Collector()
    listener = messaging.get_notification_listener(
        transport, [messaging.Target(topic=TOPIC, exchange=stack.exchange)],
        [found], executor='threading')
    listener.start()
    try:
        yield found
    finally:
        listener.stop()
        listener.wait()
        transport.cleanup()


def _types(messages):
    return [m['event_type'] for m in messages]


def _data(message):
    return message['payload']['composable_object.data']


def test_lease_life_cycle_notifications(stack, collector):
    admin = stack_mod.Client(stack.endpoint, project='admin')
    stack_mod.demo_inventory(admin)
    user = stack_mod.Client(stack.endpoint, project='project-a',
                            roles='member,reader')
    lease = user.post('/leases', {'name': 'billed', 'memory_mb': 2048,
                                  'device_count': 1, 'device_kind': 'gpu'},
                      expect=201).json()
    uuid = lease['uuid']
    user.post('/leases/%s/bind' % uuid, {'host': 'compute-0'}, expect=202)
    bound = user.wait_lease(uuid, ('bound', 'bind_failed'))
    assert bound['status'] == 'bound', bound['fault']
    user.post('/leases/%s/unbind' % uuid, {}, expect=202)
    user.wait_lease(uuid, ('reserved', 'error'))
    user.delete('/leases/%s' % uuid, expect=204)
    user.wait_lease(uuid, ('released', 'error'))

    messages = collector.wait_for(uuid, 8)
    assert _types(messages) == [
        'lease.create.start', 'lease.create.end',
        'lease.bind.start', 'lease.bind.end',
        'lease.unbind.start', 'lease.unbind.end',
        'lease.delete.start', 'lease.delete.end']
    for message in messages:
        assert message['priority'] == 'INFO'
        assert message['publisher_id'] == (
            'composable-conductor:conductor-0')
        assert message['payload']['composable_object.name'] == (
            'LeasePayload')
        assert message['payload']['composable_object.version'] == '1.0'
        body = _data(message)
        assert body['project_id'] == 'project-a'
        assert body['name'] == 'billed'
        assert body['memory_mb'] == 2048
        assert body['device_count'] == 1
    statuses = [_data(m)['status'] for m in messages]
    assert statuses == ['reserved', 'reserved', 'binding', 'bound',
                        'unbinding', 'reserved', 'releasing', 'released']
    assert _data(messages[3])['host'] == 'compute-0'
    text = json.dumps(collector.messages)
    assert 'chap' not in text.lower()
    assert 'auth_token' not in text
    # The inventory the operator registered: each device and memory node
    # added changed its pool's capacity.
    pools = [m for m in collector.messages
             if m['event_type'] == 'pool.update']
    assert {_data(m)['name'] for m in pools} == {'memory-pool', 'gpu-pool'}
    assert all(m['publisher_id'] == 'composable-api:api-0' for m in pools)


def test_a_failed_bind_is_notified_as_an_error(stack, collector):
    admin = stack_mod.Client(stack.endpoint, project='admin')
    stack_mod.demo_inventory(admin)
    # The memory node's agent is gone: the export is never answered.
    stack.kill('memory-0')
    user = stack_mod.Client(stack.endpoint, project='project-a',
                            roles='member,reader')
    lease = user.post('/leases', {'memory_mb': 1024}, expect=201).json()
    user.post('/leases/%s/bind' % lease['uuid'], {'host': 'compute-0'},
              expect=202)
    failed = user.wait_lease(lease['uuid'], ('bind_failed', 'bound'))
    assert failed['status'] == 'bind_failed'
    messages = collector.wait_for(lease['uuid'], 4)
    assert _types(messages) == ['lease.create.start', 'lease.create.end',
                                'lease.bind.start', 'lease.bind.error']
    error = messages[-1]
    assert error['priority'] == 'ERROR'
    assert _data(error)['status'] == 'bind_failed'
    assert _data(error)['fault'] == failed['fault']
