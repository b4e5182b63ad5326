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

"""Nova's versioned notifications moving and ending an instance's leases:
each handler, redelivery, busy leases, leases of another project, and the
listener itself on the in-process messaging transport (listener pools).

The conductor harness (SQLite, in-process messaging, real agents) and a
real Placement (placement's own fixture) holding the instances'
allocations as Nova's scheduler writes them. The payloads have the shape
of Nova's (versioned object primitives); tests/functional/nova feeds
Nova's own.
"""

import threading
import time

from oslo_config import cfg
import oslo_messaging as messaging
from oslo_utils import uuidutils
import pytest

from composable.common import live_migration
from composable.common import states
from composable.conductor.nova import events as nova_events
from composable.conductor.nova import flavor_leases as instance_leases
from composable.conductor import task as lease_task
from composable import conf
from composable.db import allocation
from composable.db import api as db_api
from tests import lease_rows
from tests.unit.conductor import harness as h_mod
from tests.unit.conductor.nova import test_flavor_leases as lease_tests

CONF = conf.CONF
MEM = lease_tests.MEM

# The test modules' fixtures, used here as they are.
placement = lease_tests.placement
world = lease_tests.world


def payload(instance, host, project=h_mod.PROJECT, extra_specs=None,
            name='InstanceActionPayload'):
    """A versioned notification payload as Nova serializes it."""
    flavor = {'nova_object.name': 'FlavorPayload',
              'nova_object.namespace': 'nova',
              'nova_object.version': '1.4',
              'nova_object.data': {'flavorid': 'f1', 'memory_mb': 512,
                                   'extra_specs': extra_specs or {}}}
    return {'nova_object.name': name, 'nova_object.namespace': 'nova',
            'nova_object.version': '1.8',
            'nova_object.data': {'uuid': instance, 'host': host,
                                 'node': host, 'tenant_id': project,
                                 'user_id': 'u1', 'state': 'active',
                                 'flavor': flavor}}


@pytest.fixture
def events(world):
    world.h.start_agent('compute-1')
    CONF.set_override('notifications_busy_wait', 5, 'nova')
    # Every test here binds through the agents: room for a loaded
    # machine (the harness clears both when it stops).
    CONF.set_override('rpc_response_timeout_bind', 20)
    CONF.set_override('operation_timeout', 20, 'fabric')
    handler = nova_events.NovaEventHandler(world.h.conductor,
                                           placement_client=world.client)
    yield Events(world, handler)
    CONF.clear_override('notifications_busy_wait', 'nova')


class Events(object):
    def __init__(self, world, handler):
        self.world = world
        self.h = world.h
        self.handler = handler

    def send(self, event, instance, host, **kwargs):
        done = self.handler.handle(event, payload(instance, host, **kwargs),
                                   {'request_id': 'req-nova'})
        self.h.idle()
        return done

    def leases(self, instance):
        return db_api.lease_list_for_instance(
            h_mod.admin(), instance, include_released=True)

    def boot(self, host='compute-0', **kwargs):
        instance = self.world.boot(**kwargs)
        self.send(nova_events.CREATE_END, instance, host)
        return instance

    def only(self, instance):
        leases = self.leases(instance)
        assert len(leases) == 1, leases
        return leases[0]


def new_lease(harness, **values):
    made = harness.create(**values)
    return made['uuid'] if isinstance(made, dict) else made


def bound_to(harness, uuid, host, instance, project=h_mod.PROJECT):
    ctx = h_mod.user_context(project)
    harness.api.bind_lease(ctx, uuid, harness.hosts[host].uuid,
                           instance_uuid=instance)
    return harness.wait(uuid, states.BOUND)


# ---------------------------------------------------------------- create

def test_create_makes_and_binds_the_flavor_lease(events):
    instance = events.boot(memory_mb=2048)
    lease = events.only(instance)
    assert lease.status == states.BOUND, lease.fault
    assert lease.host.name == 'compute-0'
    assert lease.instance_uuid == instance
    assert lease.placement_consumer == instance
    assert events.h.pool(events.h.memory_pool).used == 2048
    assert events.world.usage(events.world.memory_pool) == {MEM: 2048}
    actions = events.h.actions(lease.uuid)
    assert actions == [('create', 'success'), ('bind', 'success')]
    # Redelivered: nothing more.
    assert events.send(nova_events.CREATE_END, instance, 'compute-0')
    assert events.only(instance).uuid == lease.uuid
    assert events.h.actions(lease.uuid) == actions
    assert events.h.pool(events.h.memory_pool).used == 2048


def test_create_without_pool_resources_makes_nothing(events):
    instance = events.boot()
    assert events.leases(instance) == []


# ---------------------------------------------------------------- moves

def test_resize_moves_the_lease_and_revert_brings_it_back(events):
    instance = events.boot(memory_mb=1024)
    uuid = events.only(instance).uuid
    events.send('instance.resize_finish.end', instance, 'compute-1')
    lease = events.h.wait(uuid, states.BOUND)
    assert lease.host.name == 'compute-1'
    assert lease.instance_uuid == instance
    memory, _ = events.h.host_attachments()['compute-1']
    assert uuid in memory
    assert uuid not in events.h.host_attachments()['compute-0'][0]
    # Confirm (and any redelivery) finds it where the instance runs.
    before = events.h.actions(uuid)
    events.send('instance.resize_confirm.end', instance, 'compute-1')
    events.send('instance.resize_finish.end', instance, 'compute-1')
    assert events.h.actions(uuid) == before
    events.send('instance.resize_revert.end', instance, 'compute-0')
    lease = events.h.wait(uuid, states.BOUND)
    assert lease.host.name == 'compute-0'
    assert [a for a, _ in events.h.actions(uuid)] == [
        'create', 'bind', 'move', 'bind', 'move', 'bind']
    assert events.h.pool(events.h.memory_pool).used == 1024


class Resize(object):
    """What Nova does to Placement around a resize of an instance: the new
    flavor's pool resources under the instance from the resize on, the
    old ones under the migration until a confirm drops them or a revert
    gives them back."""

    def __init__(self, events, instance, old, new):
        self.world = events.world
        self.instance = instance
        self.migration = uuidutils.generate_uuid()
        self.old, self.new = old, new

    def _put(self, consumer, memory_mb, consumer_type):
        resources = {self.world.compute_rp: {'VCPU': 1}}
        if memory_mb:
            resources[self.world.memory_pool.provider_uuid] = {
                MEM: memory_mb}
        self.world.client.put_allocations(consumer, resources,
                                          h_mod.PROJECT, 'u1',
                                          consumer_type=consumer_type)

    def start(self):
        self._put(self.migration, self.old, 'MIGRATION')
        self._put(self.instance, self.new, 'INSTANCE')
        return self

    def confirm(self):
        self.world.client.delete_allocations(self.migration)

    def revert(self):
        self.world.client.delete_allocations(self.migration)
        self._put(self.instance, self.old, 'INSTANCE')


def _live(events, instance):
    return [lease for lease in events.leases(instance)
            if lease.status != states.RELEASED]


def test_resize_to_more_memory_replaces_the_flavor_lease(events):
    instance = events.boot(memory_mb=1024)
    first = events.only(instance)
    resize = Resize(events, instance, 1024, 2048).start()
    events.send(nova_events.RESIZE_FINISH_END, instance, 'compute-1')
    # The old flavor's lease is released, the new flavor's made and bound
    # where the guest runs now: the next generation on the pool.
    assert events.h.lease(first.uuid).status == states.RELEASED
    [second] = _live(events, instance)
    assert second.uuid == instance_leases.lease_uuid(
        instance, events.h.memory_pool.uuid, 1)
    second = events.h.wait(second.uuid, states.BOUND)
    assert second.memory_mb == 2048
    assert second.host.name == 'compute-1'
    assert second.placement_consumer == instance
    assert events.h.pool(events.h.memory_pool).used == 2048
    # Placement holds both flavors until the confirm; composable one.
    assert events.world.usage(events.world.memory_pool) == {MEM: 3072}
    # The confirm (and any redelivery) finds nothing more to do.
    resize.confirm()
    actions = events.h.actions(second.uuid)
    events.send(nova_events.RESIZE_CONFIRM_END, instance, 'compute-1')
    events.send(nova_events.RESIZE_FINISH_END, instance, 'compute-1')
    assert [lease.uuid for lease in _live(events, instance)] == [
        second.uuid]
    assert events.h.actions(second.uuid) == actions
    assert events.h.pool(events.h.memory_pool).used == 2048
    assert events.world.usage(events.world.memory_pool) == {MEM: 2048}
    assert allocation.check_consistency(h_mod.admin()) == []


def test_resize_revert_gives_back_the_old_flavors_lease(events):
    instance = events.boot(memory_mb=2048)
    first = events.only(instance).uuid
    resize = Resize(events, instance, 2048, 1024).start()
    events.send(nova_events.RESIZE_FINISH_END, instance, 'compute-1')
    [smaller] = _live(events, instance)
    assert events.h.wait(smaller.uuid, states.BOUND).memory_mb == 1024
    assert events.h.pool(events.h.memory_pool).used == 1024
    resize.revert()
    events.send(nova_events.RESIZE_REVERT_END, instance, 'compute-0')
    assert events.h.lease(smaller.uuid).status == states.RELEASED
    [back] = _live(events, instance)
    assert back.uuid not in (first, smaller.uuid)
    back = events.h.wait(back.uuid, states.BOUND)
    assert (back.memory_mb, back.host.name) == (2048, 'compute-0')
    assert events.h.pool(events.h.memory_pool).used == 2048
    assert events.world.usage(events.world.memory_pool) == {MEM: 2048}
    assert [lease.status for lease in events.leases(instance)] == [
        states.RELEASED, states.RELEASED, states.BOUND]


def test_the_confirm_repairs_a_lost_resize_finish(events):
    instance = events.boot(memory_mb=1024)
    first = events.only(instance).uuid
    resize = Resize(events, instance, 1024, 3072).start()
    resize.confirm()
    events.send(nova_events.RESIZE_CONFIRM_END, instance, 'compute-1')
    [lease] = _live(events, instance)
    lease = events.h.wait(lease.uuid, states.BOUND)
    assert (lease.memory_mb, lease.host.name) == (3072, 'compute-1')
    assert events.h.lease(first).status == states.RELEASED
    assert events.h.pool(events.h.memory_pool).used == 3072


def test_resize_to_a_flavor_without_pool_resources_ends_the_lease(events):
    instance = events.boot(memory_mb=1024)
    uuid = events.only(instance).uuid
    mine = new_lease(events.h, memory_mb=1024)
    bound_to(events.h, mine, 'compute-0', instance)
    Resize(events, instance, 1024, 0).start().confirm()
    events.send(nova_events.RESIZE_CONFIRM_END, instance, 'compute-1')
    assert events.h.lease(uuid).status == states.RELEASED
    # The lease the project bound itself is not the flavor's: it follows.
    [kept] = _live(events, instance)
    assert kept.uuid == mine
    assert events.h.wait(mine, states.BOUND).host.name == 'compute-1'
    assert events.h.pool(events.h.memory_pool).used == 1024


@pytest.fixture
def held_releases(events, monkeypatch):
    """Releases wait until the returned event is set; the handler waits
    for no busy lease (notifications_busy_wait = 0)."""
    CONF.set_override('notifications_busy_wait', 0, 'nova')
    flows = events.h.conductor.flows
    real = flows.release
    gate = threading.Event()

    def held_release(*args, **kwargs):
        gate.wait(10)
        return real(*args, **kwargs)

    monkeypatch.setattr(flows, 'release', held_release)
    yield gate
    gate.set()


def test_a_replacement_waits_for_the_old_lease_to_be_released(
        events, held_releases):
    """The new flavor's lease claims only once the old one's capacity is
    back; until then the notification goes back on the queue."""
    instance = events.boot(memory_mb=1024)
    first = events.only(instance).uuid
    Resize(events, instance, 1024, 2048).start()
    with pytest.raises(nova_events.Requeue):
        events.handler.handle(nova_events.RESIZE_FINISH_END,
                              payload(instance, 'compute-1'))
    assert events.h.lease(first).status == states.RELEASING
    assert [lease.uuid for lease in events.leases(instance)] == [first]
    # Redelivered while the release still runs: back on the queue again.
    with pytest.raises(nova_events.Requeue):
        events.handler.handle(nova_events.RESIZE_FINISH_END,
                              payload(instance, 'compute-1'))
    held_releases.set()
    events.h.wait(first, states.RELEASED)
    events.send(nova_events.RESIZE_FINISH_END, instance, 'compute-1')
    [second] = _live(events, instance)
    second = events.h.wait(second.uuid, states.BOUND)
    assert (second.memory_mb, second.host.name) == (2048, 'compute-1')
    assert events.h.pool(events.h.memory_pool).used == 2048


def test_an_unshelve_waits_for_the_offloads_release(events, held_releases):
    instance = events.boot(memory_mb=1024)
    first = events.only(instance).uuid
    events.handler.handle(nova_events.SHELVE_OFFLOAD_END,
                          payload(instance, None))
    assert events.h.lease(first).status == states.RELEASING
    # Nova claimed again for the unshelve (its allocation never went, in
    # this test): no second lease while the first holds the capacity.
    with pytest.raises(nova_events.Requeue):
        events.handler.handle(nova_events.UNSHELVE_END,
                              payload(instance, 'compute-1'))
    assert [lease.uuid for lease in events.leases(instance)] == [first]
    held_releases.set()
    events.h.wait(first, states.RELEASED)
    events.send(nova_events.UNSHELVE_END, instance, 'compute-1')
    [second] = _live(events, instance)
    assert events.h.wait(second.uuid, states.BOUND).host.name == 'compute-1'
    assert events.h.pool(events.h.memory_pool).used == 1024


def test_another_attach_mode_replaces_the_lease(events):
    instance = events.boot(memory_mb=1024)
    first = events.only(instance)
    assert first.attach_mode == 'host'
    Resize(events, instance, 1024, 1024).start().confirm()
    events.send(nova_events.RESIZE_CONFIRM_END, instance, 'compute-0',
                extra_specs={instance_leases.EXTRA_ATTACH_MODE: 'guest'})
    assert events.h.lease(first.uuid).status == states.RELEASED
    [second] = _live(events, instance)
    assert (second.attach_mode, second.memory_mb) == ('guest', 1024)


def _live_attachments(uuid):
    lease = db_api.lease_get(h_mod.admin(), uuid)
    return sorted(a.host.name for a in db_api.attachment_list(
        h_mod.admin(), lease.id,
        states_=['attaching', 'attached', 'detaching', 'failed']))


def test_evacuation_lets_go_of_the_dead_host(events):
    instance = events.boot(memory_mb=1024)
    uuid = events.only(instance).uuid
    # compute-0 dies; Nova rebuilds the instance on compute-1.
    events.h.stop_agent('compute-0')
    CONF.set_override('rpc_response_timeout_bind', 2)
    events.send('instance.rebuild.end', instance, 'compute-1')
    lease = events.h.wait(uuid, [states.BOUND, states.ERROR], timeout=60)
    assert lease.status == states.BOUND, lease.fault
    assert lease.host.name == 'compute-1'
    assert lease.instance_uuid == instance
    assert [a for a, _ in events.h.actions(uuid)] == [
        'create', 'bind', 'evacuate', 'bind']
    # The dead host's attachment is closed: its exports are gone, so
    # nothing of the lease can reach it any more.
    assert _live_attachments(uuid) == ['compute-1']
    assert events.h.pool(events.h.memory_pool).used == 1024


def test_a_move_from_a_host_that_does_not_answer_fails_safely(events):
    # Not an evacuation: the host may still be swapping on the lease, so
    # nothing is pulled from under it; the lease waits in error.
    instance = events.boot(memory_mb=1024)
    uuid = events.only(instance).uuid
    events.h.stop_agent('compute-0')
    CONF.set_override('rpc_response_timeout_bind', 2)
    events.send('instance.resize_finish.end', instance, 'compute-1')
    lease = events.h.wait(uuid, [states.BOUND, states.ERROR], timeout=60)
    assert lease.status == states.ERROR
    assert 'compute-0' in lease.fault
    assert lease.instance_uuid == instance
    assert _live_attachments(uuid) == ['compute-0']


def test_live_migration_of_memory_follows_the_guest(events):
    instance = events.boot(memory_mb=1024)
    uuid = events.only(instance).uuid
    assert nova_events.live_migration_allowed(h_mod.admin(),
                                              instance) == (True, None)
    events.send(nova_events.LIVE_MIGRATION_PRE_START, instance,
                'compute-0')
    assert events.h.lease(uuid).fault is None
    events.send('instance.live_migration_post_dest.end', instance,
                'compute-1')
    assert events.h.wait(uuid, states.BOUND).host.name == 'compute-1'


def test_live_migration_with_a_device_is_refused_with_a_fault(events):
    instance = events.boot(gpus=1)
    lease = events.only(instance)
    assert lease.status == states.BOUND and len(lease.devices) == 1
    allowed, reason = nova_events.live_migration_allowed(h_mod.admin(),
                                                         instance)
    assert not allowed
    assert lease.uuid in reason and 'Cold migrate' in reason
    events.send(nova_events.LIVE_MIGRATION_PRE_START, instance,
                'compute-0')
    events.send(nova_events.LIVE_MIGRATION_PRE_START, instance,
                'compute-0')
    lease = events.h.lease(lease.uuid)
    assert lease.fault == reason
    assert lease.status == states.BOUND
    assert events.h.actions(lease.uuid).count(
        ('live_migration', 'error')) == 1


def test_suspend_with_a_device_in_the_guest_gets_a_fault(events):
    instance = events.boot(gpus=1)
    lease = events.only(instance)
    assert lease.status == states.BOUND and len(lease.devices) == 1
    assert events.send(nova_events.SUSPEND_START, instance, 'compute-0')
    events.send(nova_events.SUSPEND_START, instance, 'compute-0')
    lease = events.h.lease(lease.uuid)
    assert lease.status == states.BOUND
    assert lease.uuid in lease.fault and instance in lease.fault
    assert 'cannot be suspended' in lease.fault
    assert 'server set --state active' in lease.fault
    assert events.h.actions(lease.uuid).count(('suspend', 'error')) == 1


def test_suspend_without_devices_in_the_guest_is_left_alone(events):
    memory = events.boot(memory_mb=1024)
    events.send(nova_events.SUSPEND_START, memory, 'compute-0')
    assert events.only(memory).fault is None
    # A device lease that is only reserved (not in the guest) is plugged
    # again by the hook at the resume: no fault either.
    for status in sorted(states.ALL_STATES):
        why = live_migration.cannot_suspend(status, 1)
        assert (why is not None) == (status in (
            states.BINDING, states.BOUND, states.UNBINDING)), status
        assert live_migration.cannot_suspend(status, 0) is None


@pytest.mark.parametrize('status', sorted(states.HOLDS_CAPACITY))
def test_live_migration_rule_covers_devices_in_every_holding_state(status):
    assert live_migration.cannot_follow(status, states.ATTACH_HOST, 0, 1)
    assert live_migration.cannot_follow(status, states.ATTACH_HOST, 0,
                                        0) is None


def test_live_migration_with_guest_memory_is_refused(events):
    instance = events.world.boot(memory_mb=1024)
    events.send(nova_events.CREATE_END, instance, 'compute-0',
                extra_specs={'composable:attach_mode': 'guest'})
    lease = events.only(instance)
    assert lease.status == states.BOUND and lease.attach_mode == 'guest'
    allowed, reason = nova_events.live_migration_allowed(h_mod.admin(),
                                                         instance)
    assert not allowed and 'guest-mode memory' in reason
    events.send(nova_events.LIVE_MIGRATION_PRE_START, instance,
                'compute-0')
    assert events.h.lease(lease.uuid).fault == reason


def test_shelve_offload_and_unshelve(events):
    instance = events.boot(memory_mb=1024)
    flavor_lease = events.only(instance).uuid
    first = new_lease(events.h, memory_mb=1024)
    bound_to(events.h, first, 'compute-0', instance)
    events.send(nova_events.SHELVE_OFFLOAD_END, instance, None)
    # Nova freed the flavor-driven claim: that lease is released; the
    # lease-first one is unbound but stays the instance's.
    assert events.h.wait(flavor_lease, states.RELEASED)
    lease = events.h.wait(first, states.RESERVED)
    assert lease.instance_uuid == instance and lease.host is None
    assert events.h.pool(events.h.memory_pool).used == 1024
    # Unshelved elsewhere; Nova's scheduler claimed again.
    events.world.client.delete_allocations(instance)
    events.world.client.put_allocations(
        instance, {events.world.compute_rp: {'VCPU': 1},
                   events.world.memory_pool.provider_uuid: {MEM: 1024}},
        h_mod.PROJECT, 'u1', consumer_type='INSTANCE')
    events.send(nova_events.UNSHELVE_END, instance, 'compute-1')
    live = [lease for lease in events.leases(instance)
            if lease.status != states.RELEASED]
    assert {lease.uuid for lease in live} - {first}
    for lease in live:
        lease = events.h.wait(lease.uuid, states.BOUND)
        assert lease.host.name == 'compute-1'
    assert events.h.pool(events.h.memory_pool).used == 2048


# ---------------------------------------------------------------- delete

def test_delete_releases_the_flavor_lease_once(events):
    instance = events.boot(memory_mb=2048)
    uuid = events.only(instance).uuid
    events.send(nova_events.DELETE_END, instance, 'compute-0')
    events.h.wait(uuid, states.RELEASED)
    assert events.h.pool(events.h.memory_pool).used == 0
    events.h.assert_nothing_live()
    # Nova's allocation is Nova's to free.
    assert events.world.allocations(instance)
    actions = events.h.actions(uuid)
    events.send(nova_events.DELETE_END, instance, 'compute-0')
    assert events.h.actions(uuid) == actions


def test_delete_unbinds_leases_bound_to_the_instance(events):
    instance = uuidutils.generate_uuid()
    uuid = new_lease(events.h, memory_mb=1024)
    bound_to(events.h, uuid, 'compute-0', instance)
    events.send(nova_events.DELETE_END, instance, 'compute-0')
    lease = events.h.wait(uuid, states.RESERVED)
    assert lease.instance_uuid is None and lease.host is None
    assert events.h.pool(events.h.memory_pool).used == 1024


def test_a_lease_of_another_project_is_never_touched(events):
    instance = events.boot(memory_mb=1024)
    mine = events.only(instance).uuid
    theirs = new_lease(events.h, project_id='p2', memory_mb=1024)
    # An admin bound p2's lease to the instance (of p1).
    bound_to(events.h, theirs, 'compute-0', instance, project='p2')
    before = events.h.actions(theirs)
    events.send('instance.resize_finish.end', instance, 'compute-1')
    assert events.h.wait(mine, states.BOUND).host.name == 'compute-1'
    events.send(nova_events.DELETE_END, instance, 'compute-1')
    events.h.wait(mine, states.RELEASED)
    lease = events.h.lease(theirs)
    assert lease.status == states.BOUND
    assert lease.host.name == 'compute-0'
    assert events.h.actions(theirs) == before


# ---------------------------------------------------------------- busy

def test_a_busy_lease_puts_the_notification_back(events):
    CONF.set_override('notifications_busy_wait', 0, 'nova')
    instance = events.boot(memory_mb=1024)
    uuid = events.only(instance).uuid
    lease = events.h.lease(uuid)
    # Another conductor (alive) works on the lease.
    events.h.set_conductor_heartbeat('cond-other', 0)
    lease_rows.write(h_mod.admin(), lease.id,
                     {'reservation': 'cond-other'})
    with pytest.raises(nova_events.Requeue):
        events.handler.handle(nova_events.DELETE_END,
                              payload(instance, 'compute-0'))
    assert events.h.lease(uuid).status == states.BOUND
    lease_rows.write(h_mod.admin(), lease.id, {'reservation': None})
    events.send(nova_events.DELETE_END, instance, 'compute-0')
    events.h.wait(uuid, states.RELEASED)


def test_a_fault_waits_for_the_leases_reservation(events):
    """Nova's events change a lease only under its reservation: the fault
    of a refused live migration is not written while another conductor
    works on the lease, and is once it let go."""
    CONF.set_override('notifications_busy_wait', 0, 'nova')
    instance = events.boot(gpus=1)
    lease = events.only(instance)
    assert lease.status == states.BOUND and lease.fault is None
    with lease_task.acquire(h_mod.admin(), lease.id, 'cond-other'):
        with pytest.raises(nova_events.Requeue):
            events.handler.handle(nova_events.LIVE_MIGRATION_PRE_START,
                                  payload(instance, 'compute-0'))
        assert events.h.lease(lease.uuid).fault is None
        assert ('live_migration', 'error') not in events.h.actions(
            lease.uuid)
    events.send(nova_events.LIVE_MIGRATION_PRE_START, instance, 'compute-0')
    lease = events.h.lease(lease.uuid)
    assert 'Cold migrate' in lease.fault
    assert lease.reservation is None
    assert events.h.actions(lease.uuid).count(
        ('live_migration', 'error')) == 1


def test_a_hinted_lease_is_linked_under_its_reservation(events,
                                                        monkeypatch):
    CONF.set_override('notifications_busy_wait', 0, 'nova')
    uuid = new_lease(events.h, memory_mb=1024)
    lease = events.h.wait(uuid, states.RESERVED)
    instance = uuidutils.generate_uuid()
    monkeypatch.setattr(nova_events.nova_api, 'configured', lambda: True)
    monkeypatch.setattr(nova_events.nova_api, 'scheduler_hints',
                        lambda context, inst: {'composable_lease': uuid})
    with lease_task.acquire(h_mod.admin(), lease.id, 'cond-other'):
        with pytest.raises(nova_events.Requeue):
            events.handler._take_hinted_leases(h_mod.admin(), instance,
                                               h_mod.PROJECT)
        assert events.h.lease(uuid).instance_uuid is None
    events.handler._take_hinted_leases(h_mod.admin(), instance,
                                       h_mod.PROJECT)
    lease = events.h.lease(uuid)
    assert (lease.instance_uuid, lease.reservation) == (instance, None)


def test_unknown_events_and_payloads_are_ignored(events):
    instance = events.boot(memory_mb=1024)
    uuid = events.only(instance).uuid
    for event in ('instance.power_off.end', 'instance.evacuate',
                  'instance.resize_prep.start', 'compute.exception'):
        assert not events.send(event, instance, 'compute-1')
    assert not events.handler.handle(nova_events.DELETE_END, {})
    assert events.h.lease(uuid).host.name == 'compute-0'


# ---------------------------------------------------------------- listener

class _OtherConsumer(object):
    """Another consumer of Nova's notifications (a telemetry service),
    without a pool."""

    def __init__(self):
        self.seen = []

    def info(self, ctxt, publisher_id, event_type, payload, metadata):
        self.seen.append(event_type)


def _wait(condition, timeout=30):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, 'timed out'
        time.sleep(0.05)


def test_listener_in_its_own_pool(events):
    """The conductor's listener, on the messaging transport, next to a
    consumer of Nova's notifications that uses no pool: both get every
    notification; the requeued one is handled again."""
    CONF.set_override('notifications_enabled', True, 'nova')
    CONF.set_override('notifications_busy_wait', 0, 'nova')
    exchange = 'nova-test'
    CONF.set_override('notifications_exchange', exchange, 'nova')
    # Nova publishes on its control exchange: a transport whose
    # control_exchange is that exchange.
    nova_conf = cfg.ConfigOpts()
    nova_conf([], default_config_files=[], default_config_dirs=[])
    # (The first transport registers the options; the driver takes its
    # default exchange when it is made.) Made and cleaned up before the
    # listeners start: the fake driver's cleanup empties every exchange,
    # queues of listeners included, and a pool's queue made again later
    # misses what the other consumer took from the shared queue.
    messaging.get_notification_transport(nova_conf, url='fake:/').cleanup()
    nova_conf.set_override('control_exchange', exchange)
    transport = messaging.get_notification_transport(CONF)
    other = _OtherConsumer()
    other_listener = messaging.get_notification_listener(
        transport, [messaging.Target(topic='versioned_notifications',
                                     exchange=exchange)],
        [other], executor='threading')
    other_listener.start()
    listener = nova_events.NovaNotificationListener(
        events.h.conductor, handler=events.handler)
    listener.start()
    nova_transport = messaging.get_notification_transport(
        nova_conf, url='fake:/')
    notifier = messaging.Notifier(nova_transport,
                                  publisher_id='nova-compute:compute-0',
                                  driver='messagingv2',
                                  topics=['versioned_notifications'])
    try:
        instance = events.world.boot(memory_mb=1024)
        notifier.info({'request_id': 'req-1'}, nova_events.CREATE_END,
                      payload(instance, 'compute-0'))
        _wait(lambda: events.leases(instance) and
              events.leases(instance)[0].status == states.BOUND)
        uuid = events.leases(instance)[0].uuid
        # Busy for a moment: the delete is requeued, then handled.
        lease = events.h.lease(uuid)
        events.h.set_conductor_heartbeat('cond-other', 0)
        lease_rows.write(h_mod.admin(), lease.id,
                         {'reservation': 'cond-other'})
        notifier.info({}, nova_events.DELETE_END,
                      payload(instance, 'compute-0'))
        time.sleep(0.5)
        assert events.h.lease(uuid).status == states.BOUND
        lease_rows.write(h_mod.admin(), lease.id, {'reservation': None})
        _wait(lambda: events.h.lease(uuid).status == states.RELEASED)
        # (The in-process driver requeues onto every queue of the topic,
        # so the other consumer may see the delete twice; RabbitMQ puts
        # it back on the pool's queue only.)
        _wait(lambda: nova_events.DELETE_END in other.seen)
        assert other.seen[0] == nova_events.CREATE_END
    finally:
        listener.stop()
        other_listener.stop()
        other_listener.wait()
        nova_transport.cleanup()
        transport.cleanup()
        for name in ('notifications_enabled', 'notifications_busy_wait',
                     'notifications_exchange'):
            CONF.clear_override(name, 'nova')


def test_conductor_starts_and_stops_the_listener(events):
    CONF.set_override('notifications_enabled', True, 'nova')
    try:
        from composable.conductor import manager as manager_mod
        conductor = manager_mod.ConductorManager('cond-listen')
        conductor.start()
        listener = conductor._nova_listener
        try:
            assert listener is not None and listener._listener is not None
        finally:
            conductor.stop()
        assert conductor._nova_listener is None
        assert listener._listener is None and listener._transport is None
    finally:
        CONF.clear_override('notifications_enabled', 'nova')


def test_a_move_trades_the_devices_the_new_host_cannot_reach(events):
    instance = events.boot(gpus=1)
    uuid = events.only(instance).uuid
    lease = events.h.wait(uuid, states.BOUND)
    held = lease.devices[0]
    other, = [d for d in events.h.devices if d.uuid != held.uuid]
    ctx = h_mod.admin()
    db_api.device_set_facts(ctx, held.id, {'reachable_hosts': ['compute-0']})
    db_api.device_set_facts(ctx, other.id,
                            {'reachable_hosts': ['compute-1']})
    events.send('instance.resize_finish.end', instance, 'compute-1')
    lease = events.h.wait(uuid, states.BOUND)
    assert lease.host.name == 'compute-1'
    assert [d.uuid for d in lease.devices] == [other.uuid]
    assert events.h.pool(events.h.gpu_pool).used == 1
    # Back to compute-0, which reaches no free device any more: the
    # lease cannot follow, and says why.
    db_api.device_set_facts(ctx, held.id, {'reachable_hosts': ['compute-1']})
    events.send('instance.resize_revert.end', instance, 'compute-0')
    lease = events.h.wait(uuid, states.BIND_FAILED)
    assert 'host compute-0 cannot reach device %s' % other.uuid in (
        lease.fault)
    assert [d.uuid for d in lease.devices] == [other.uuid]
