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

"""Lease notifications from a real conductor, real agents (no-op
exporter) and the fake fabric on SQLite, sent to oslo.messaging's
in-memory ``test`` driver."""

import datetime
import json
import threading

from oslo_messaging.notify import _impl_test
from oslo_utils import timeutils

from composable.common import states
from composable.common import utils
from composable.conductor import periodic
from composable.db import api as db_api
from composable import notifications
from composable.notifications import samples
from tests import lease_rows
from tests.unit.conductor import harness as h_mod
from tests.unit.scenarios.notifications import conftest

data = conftest.data


def _types(messages):
    return [m['event_type'] for m in messages]


def test_life_cycle_sequence_and_payloads(harness, sent):
    uuid = harness.create(memory_mb=2048, device_count=1, name='big-job')
    host = harness.hosts['compute-0']
    harness.api.bind_lease(h_mod.user_context(), uuid, host.uuid)
    harness.wait(uuid, states.BOUND)
    harness.api.unbind_lease(h_mod.user_context(), uuid)
    harness.wait(uuid, states.RESERVED)
    harness.api.delete_lease(h_mod.user_context(), uuid)
    harness.wait(uuid, states.RELEASED)
    expected = ['lease.create.start', 'lease.create.end',
                'lease.bind.start', 'lease.bind.end',
                'lease.unbind.start', 'lease.unbind.end',
                'lease.delete.start', 'lease.delete.end']
    messages = sent.wait_for(
        lambda: len(sent.about(uuid)) >= len(expected) and sent.about(uuid))
    assert _types(messages) == expected
    by_type = {m['event_type']: m for m in messages}
    documented = samples.build()
    for message in messages:
        # The documented samples have the very fields sent.
        sample = documented[message['event_type']]
        assert set(data(message)) == set(
            sample['payload']['composable_object.data'])
        assert message['priority'] == sample['priority']
    for message in messages:
        assert message['priority'] == 'INFO'
        assert message['publisher_id'].startswith('composable-conductor:')
        payload = message['payload']
        assert payload['composable_object.name'] == 'LeasePayload'
        assert payload['composable_object.version'] == '1.0'
        assert payload['composable_object.namespace'] == 'composable'
        body = data(message)
        assert body['project_id'] == h_mod.PROJECT
        assert body['user_id'] == 'u1'
        assert body['name'] == 'big-job'
        assert body['memory_mb'] == 2048
        assert body['device_count'] == 1
        assert body['fault'] is None
    assert data(by_type['lease.create.end'])['status'] == states.RESERVED
    assert data(by_type['lease.create.end'])['memory_pool_uuid'] == (
        harness.memory_pool.uuid)
    assert data(by_type['lease.create.end'])['device_pool_uuid'] == (
        harness.gpu_pool.uuid)
    assert data(by_type['lease.create.end'])['devices_held'] == 1
    assert data(by_type['lease.bind.start'])['status'] == states.BINDING
    bound = data(by_type['lease.bind.end'])
    assert bound['status'] == states.BOUND
    assert bound['host'] == 'compute-0'
    assert data(by_type['lease.unbind.end'])['status'] == states.RESERVED
    assert data(by_type['lease.unbind.end'])['host'] is None
    released = data(by_type['lease.delete.end'])
    assert released['status'] == states.RELEASED
    assert released['devices_held'] == 0
    # The requester, never the token.
    context = by_type['lease.bind.start']['context']
    assert context['project_id'] == h_mod.PROJECT
    assert 'auth_token' not in context


def test_failed_create_is_an_error(harness, sent):
    uuid = harness.create(memory_mb=64 * 1024)
    messages = sent.wait_for(lambda: len(sent.about(uuid)) >= 2 and
                             sent.about(uuid))
    assert _types(messages) == ['lease.create.start', 'lease.create.error']
    error = messages[1]
    assert error['priority'] == 'ERROR'
    assert data(error)['status'] == states.ALLOC_FAILED
    assert 'MiB' in data(error)['fault']
    assert data(error)['fault'] == harness.lease(uuid).fault


def test_failed_bind_is_an_error(bare_harness, sent):
    # No agent runs: the memory node does not answer the export.
    harness = bare_harness
    uuid = harness.create(memory_mb=1024)
    host = harness.hosts['compute-0']
    harness.api.bind_lease(h_mod.user_context(), uuid, host.uuid)
    lease = harness.wait(uuid, states.BIND_FAILED, timeout=60)
    messages = sent.wait_for(lambda: len(sent.about(uuid)) >= 4 and
                             sent.about(uuid))
    assert _types(messages) == ['lease.create.start', 'lease.create.end',
                                'lease.bind.start', 'lease.bind.error']
    error = messages[-1]
    assert error['priority'] == 'ERROR'
    assert data(error)['status'] == states.BIND_FAILED
    assert data(error)['fault'] == lease.fault
    assert 'memory node' in data(error)['fault']


def test_no_secret_in_any_notification(harness, sent):
    uuid = harness.create(memory_mb=2048)
    harness.api.bind_lease(h_mod.user_context(), uuid,
                           harness.hosts['compute-0'].uuid)
    lease = harness.wait(uuid, states.BOUND)
    secrets = [e.chap_secret for e in lease.extents]
    assert all(secrets)
    sent.wait_for(lambda: 'lease.bind.end' in sent.events())
    text = json.dumps(sent.all(), default=str)
    for secret in secrets:
        assert secret not in text
    assert 'chap' not in text.lower()
    assert 'driver_info' not in text


def test_quick_delete_and_expiry(harness, sent):
    deleted = harness.create(memory_mb=1024)
    harness.api.delete_lease(h_mod.user_context(), deleted)
    harness.wait(deleted, states.RELEASED)
    expiring = harness.create(memory_mb=1024)
    lease = harness.lease(expiring)
    lease_rows.write(h_mod.admin(), lease.id,
                     {'end_at': timeutils.utcnow().replace(
                         microsecond=0)})
    periodic.PeriodicTasks(harness.conductor).expire_leases(h_mod.admin())
    harness.wait(expiring, states.RELEASED)
    assert _types(sent.wait_for(
        lambda: len(sent.about(deleted)) >= 4 and sent.about(deleted))) == [
        'lease.create.start', 'lease.create.end',
        'lease.delete.start', 'lease.delete.end']
    messages = sent.wait_for(lambda: len(sent.about(expiring)) >= 3 and
                             sent.about(expiring))
    assert _types(messages) == ['lease.create.start', 'lease.create.end',
                                'lease.expire']
    assert messages[-1]['priority'] == 'INFO'
    assert data(messages[-1])['status'] == states.RELEASED


def test_rolled_back_action_sends_nothing(harness, sent):
    uuid = harness.create(memory_mb=1024)
    lease = harness.lease(uuid)
    sent.wait_for(lambda: len(sent.about(uuid)) >= 2)
    before = len(sent.all())
    try:
        with db_api.writer(h_mod.admin()) as session:
            db_api.action_start(h_mod.admin(), lease.id, 'bind',
                                session=session)
            raise RuntimeError('roll back')
    except RuntimeError:
        pass
    db_api.action_start(h_mod.admin(), lease.id, 'unbind',
                        result='success')
    sent.wait_for(lambda: 'lease.unbind.end' in sent.events())
    assert sent.events()[before:] == ['lease.unbind.start',
                                      'lease.unbind.end']


def test_off_by_default(harness):
    _impl_test.reset()
    assert notifications.init('composable-conductor') is None
    assert not notifications.enabled()
    conftest.assert_no_listener()
    uuid = harness.create(memory_mb=1024)
    harness.api.delete_lease(h_mod.user_context(), uuid)
    harness.wait(uuid, states.RELEASED)
    assert _impl_test.NOTIFICATIONS == []


def test_rolled_back_savepoint_drops_only_its_own(harness, sent):
    kept = harness.lease(harness.create(memory_mb=1024))
    dropped = harness.lease(harness.create(memory_mb=1024))
    sent.wait_for(lambda: len(sent.about(dropped.uuid)) >= 2)
    before = len(sent.all())
    with db_api.writer(h_mod.admin()) as session:
        db_api.action_start(h_mod.admin(), kept.id, 'bind',
                            session=session, result='success')
        try:
            with session.begin_nested():
                db_api.action_start(h_mod.admin(), dropped.id, 'bind',
                                    session=session, result='success')
                raise RuntimeError('roll back to the savepoint')
        except RuntimeError:
            pass
    sent.wait_for(lambda: len(sent.all()) >= before + 2)
    assert [(m['event_type'], conftest.data(m)['uuid'])
            for m in sent.all()[before:]] == [
        ('lease.bind.start', kept.uuid), ('lease.bind.end', kept.uuid)]
    assert [a.action for a in db_api.action_list(
        h_mod.admin(), dropped.id)] == ['create']


def test_a_deferred_lease_is_notified_when_it_is_allocated(harness, sent):
    start = utils.utcnow() + datetime.timedelta(hours=1)
    uuid = harness.create(memory_mb=1024, start_at=utils.isotime(start))
    created = sent.wait_for(lambda: len(sent.about(uuid)) >= 2 and
                            sent.about(uuid))
    assert _types(created) == ['lease.create.start', 'lease.create.end']
    assert data(created[-1])['status'] == states.REQUESTED
    assert data(created[-1])['start_at'].startswith(start.strftime(
        '%Y-%m-%dT%H:%M:%S'))
    lease_rows.write(h_mod.admin(), harness.lease(uuid).id, {
        'start_at': utils.utcnow() - datetime.timedelta(seconds=1)})
    harness.conductor.run_periodic_tasks()
    harness.wait(uuid, states.RESERVED)
    messages = sent.wait_for(lambda: len(sent.about(uuid)) >= 4 and
                             sent.about(uuid))
    assert _types(messages[2:]) == ['lease.allocate.start',
                                    'lease.allocate.end']
    assert data(messages[2])['status'] == states.ALLOCATING
    assert data(messages[3])['status'] == states.RESERVED
    assert data(messages[3])['memory_pool_uuid'] == harness.memory_pool.uuid


def test_racing_deletes_send_one_delete(harness, sent):
    uuid = harness.create(memory_mb=1024)
    harness.api.bind_lease(h_mod.user_context(), uuid,
                           harness.hosts['compute-0'].uuid)
    harness.wait(uuid, states.BOUND)
    barrier = threading.Barrier(2)
    outcomes = []

    def delete():
        barrier.wait()
        try:
            harness.api.delete_lease(h_mod.user_context(), uuid)
            outcomes.append('accepted')
        except Exception as exc:
            outcomes.append(type(exc).__name__)

    threads = [threading.Thread(target=delete) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    harness.wait(uuid, states.RELEASED)
    assert 'accepted' in outcomes
    messages = sent.wait_for(
        lambda: 'lease.delete.end' in _types(sent.about(uuid)) and
        sent.about(uuid))
    deletes = [t for t in _types(messages) if t.startswith('lease.delete')]
    # A second delete accepted while the first one releases resumes it:
    # still one start and one end.
    assert deletes == ['lease.delete.start', 'lease.delete.end'], outcomes
    assert [a for a in harness.actions(uuid) if a[0] == 'delete'] == [
        ('delete', 'success')]


def test_an_instance_stop_is_notified_as_an_unbind(harness, sent):
    instance = '1d5e7c3b-9a2f-4b8e-8c6d-2f4a1b3c5d7e'
    uuid = harness.create(memory_mb=1024)
    harness.api.bind_lease(h_mod.user_context(), uuid,
                           harness.hosts['compute-0'].uuid,
                           instance_uuid=instance)
    harness.wait(uuid, states.BOUND)
    harness.api.release_instance(h_mod.admin(), instance, 'compute-0',
                                 wait=30)
    harness.wait(uuid, states.RESERVED)
    messages = sent.wait_for(lambda: len(sent.about(uuid)) >= 6 and
                             sent.about(uuid))
    assert _types(messages)[4:] == ['lease.unbind.start',
                                    'lease.unbind.end']
    assert data(messages[-1])['instance_uuid'] == instance
    assert data(messages[-1])['host'] is None
