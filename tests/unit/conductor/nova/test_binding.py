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

"""The conductor's side of the libvirt hook (instance_binding): an
in-process conductor and agents (simulated attaches) on SQLite, called
through the conductor RPC API as the agent calls it."""

import time
import types

import pytest

from composable.common import states
from composable.conductor.nova import binding as instance_binding
from composable.db import api as db_api
from tests import lease_rows
from tests.unit.conductor import harness as h_mod

INSTANCE = '11111111-2222-4333-8444-555555555555'
OTHER = '99999999-2222-4333-8444-555555555555'
WAIT = 20


def _ctx():
    return h_mod.admin()


def _linked_lease(harness, instance=INSTANCE, **values):
    """A reserved lease linked to the instance (as the scheduler hint
    links it) but bound nowhere."""
    values.setdefault('memory_mb', 1024)
    values.setdefault('attach_mode', 'host')
    uuid = harness.create(**values)
    lease = harness.lease(uuid)
    assert db_api.lease_link_instance(_ctx(), lease.id, instance,
                                      expected_status=lease.status)
    return uuid


def _prepare(harness, host='compute-0', **kwargs):
    kwargs.setdefault('wait', WAIT)
    return harness.api.prepare_instance(_ctx(), INSTANCE, host,
                                        rpc_timeout=60, **kwargs)


def _release(harness, host='compute-0', **kwargs):
    kwargs.setdefault('wait', WAIT)
    return harness.api.release_instance(_ctx(), INSTANCE, host,
                                        rpc_timeout=60, **kwargs)


def test_start_stop_start(harness):
    uuid = _linked_lease(harness, device_count=1)
    result = _prepare(harness)
    assert result['ok'], result
    [summary] = result['leases']
    assert summary['uuid'] == uuid
    assert summary['status'] == states.BOUND
    assert summary['host'] == 'compute-0'
    assert 'chap_secret' not in str(result)
    memory, devices = harness.host_attachments()['compute-0']
    assert uuid in memory and uuid in devices

    result = _release(harness)
    assert result['ok'], result
    lease = harness.wait(uuid, states.RESERVED)
    # Back to reserved, still the instance's, nothing left on the host.
    assert lease.instance_uuid == INSTANCE
    assert lease.host is None
    assert lease.fault is None
    harness.assert_nothing_live()
    actions = harness.actions(uuid)
    assert actions[-2:] == [('bind', 'success'), ('stop', 'success')]

    result = _prepare(harness)
    assert result['ok'], result
    assert harness.lease(uuid).status == states.BOUND
    # The agent hears that release does nothing twice.
    assert _release(harness)['ok']
    assert _release(harness)['ok']
    assert harness.lease(uuid).status == states.RESERVED


def test_the_agents_list(harness):
    mine = _linked_lease(harness)
    other = _linked_lease(harness, instance=OTHER)
    harness.create(memory_mb=1024)  # linked to no instance
    gone = _linked_lease(harness)
    harness.api.delete_lease(h_mod.user_context(), gone)
    harness.wait(gone, states.RELEASED)
    # Holds nothing, so could be meant for any host: its instance's start
    # says why it is not there.
    failed = _linked_lease(harness, memory_mb=64 * 1024)
    assert harness.lease(failed).status == states.ALLOC_FAILED
    elsewhere = _linked_lease(harness, instance=OTHER)
    ctx = _ctx()
    fabric = db_api.fabric_create(ctx, {'name': 'fab-2', 'driver': 'fake'})
    pool = db_api.pool_create(ctx, {
        'name': 'pool-2', 'kind': 'memory', 'fabric_id': fabric.id,
        'step_size': 1024, 'resource_class': 'CUSTOM_COMPOSABLE_MEMORY_MB'})
    lease_rows.write(ctx, harness.lease(elsewhere).id,
                     {'memory_pool_id': pool.id})
    mapping = harness.api.instance_leases(_ctx(), 'compute-0')
    assert {k: sorted(v) for k, v in mapping.items()} == {
        INSTANCE: sorted([mine, failed]), OTHER: [other]}


def test_a_lease_left_bound_on_another_host_moves(harness):
    harness.start_agent('compute-1')
    uuid = _linked_lease(harness)
    assert _prepare(harness, host='compute-1')['ok']
    assert harness.lease(uuid).host.name == 'compute-1'
    # The instance starts on compute-0 without its stop on compute-1
    # having been seen (a cold migration, a dead libvirtd).
    result = _prepare(harness)
    assert result['ok'], result
    lease = harness.lease(uuid)
    assert lease.host.name == 'compute-0'
    assert lease.instance_uuid == INSTANCE
    assert uuid not in harness.host_attachments()['compute-1'][0]
    assert uuid in harness.host_attachments()['compute-0'][0]


def test_a_live_migration_does_not_take_the_lease(harness):
    harness.start_agent('compute-1')
    uuid = _linked_lease(harness)
    assert _prepare(harness, host='compute-1')['ok']
    result = _prepare(harness, incoming=True)
    assert result['ok']
    assert 'live migration' in result['message']
    assert harness.lease(uuid).host.name == 'compute-1'
    # Releasing on the destination leaves the source alone.
    assert _release(harness)['ok']
    assert harness.lease(uuid).status == states.BOUND


def test_a_lease_that_cannot_be_bound(harness):
    uuid = _linked_lease(harness, memory_mb=64 * 1024)
    assert harness.lease(uuid).status == states.ALLOC_FAILED
    result = _prepare(harness)
    assert result['ok'] is False
    assert uuid in result['message']
    assert 'holds no resources' in result['message']


def test_a_failed_bind_is_reported(harness):
    uuid = _linked_lease(harness)
    harness.stop_agent('compute-0')
    result = _prepare(harness, wait=30)
    assert result['ok'] is False
    assert uuid in result['message']
    lease = harness.lease(uuid)
    assert lease.status == states.BIND_FAILED
    assert 'compute-0' in result['message']
    # Released (unbound) on the next stop: the lease stays the instance's.
    harness.start_agent('compute-0')
    assert _release(harness)['ok']
    lease = harness.wait(uuid, states.RESERVED)
    assert lease.instance_uuid == INSTANCE


def test_an_unknown_host(harness):
    with pytest.raises(Exception) as err:
        _prepare(harness, host='nowhere')
    assert 'not registered' in str(err.value)


def test_a_fault_given_at_release_stays(harness):
    uuid = _linked_lease(harness)
    assert _prepare(harness)['ok']
    assert _release(harness, leases=[uuid],
                    fault='The guest did not get the memory')['ok']
    lease = harness.wait(uuid, states.RESERVED)
    assert lease.fault == 'The guest did not get the memory'
    # The next start clears it.
    assert _prepare(harness)['ok']
    assert harness.lease(uuid).fault is None


def test_only_the_leases_asked_for(harness):
    first = _linked_lease(harness)
    second = _linked_lease(harness)
    assert _prepare(harness, leases=[first])['ok']
    assert harness.lease(first).status == states.BOUND
    assert harness.lease(second).status == states.RESERVED
    assert _release(harness, leases=[second])['ok']
    assert harness.lease(first).status == states.BOUND


def test_flavor_driven_leases_are_made_first(harness, monkeypatch):
    made = []

    def ensure(context, instance_uuid, host_name, project_id):
        made.append((instance_uuid, host_name, project_id))
        return [_linked_lease(harness)]
    fake = types.SimpleNamespace(ensure_instance_leases=ensure)
    monkeypatch.setattr(instance_binding, 'flavor_leases', fake)
    monkeypatch.setattr(instance_binding, '_placement_enabled', lambda: True)
    result = _prepare(harness, flavor_resources=True, project_id='p1',
                      extra_specs={'composable:attach_mode': 'host'})
    assert result['ok'], result
    assert made == [(INSTANCE, 'compute-0', 'p1')]
    assert [s['status'] for s in result['leases']] == [states.BOUND]
    # Without flavor resources, nothing is made.
    _release(harness)
    _prepare(harness)
    assert len(made) == 1


def test_the_flavor_extra_specs_go_to_the_lease_maker(harness,
                                                      monkeypatch):
    made = []

    def ensure(context, instance_uuid, host_name, project_id, user_id=None,
               extra_specs=None, client=None):
        made.append((user_id, extra_specs))
        return []
    monkeypatch.setattr(instance_binding, 'flavor_leases',
                        types.SimpleNamespace(ensure_instance_leases=ensure))
    monkeypatch.setattr(instance_binding, '_placement_enabled', lambda: True)
    specs = {'composable:attach_mode': 'guest'}
    assert _prepare(harness, flavor_resources=True, project_id='p1',
                    user_id='u1', extra_specs=specs)['ok']
    assert made == [('u1', specs)]


def test_a_failing_lease_maker(harness, monkeypatch):
    def ensure(context, instance_uuid, host_name, project_id):
        raise RuntimeError('Placement is down')
    monkeypatch.setattr(instance_binding, 'flavor_leases',
                        types.SimpleNamespace(ensure_instance_leases=ensure))
    monkeypatch.setattr(instance_binding, '_placement_enabled', lambda: True)
    result = _prepare(harness, flavor_resources=True, project_id='p1')
    assert result['ok'] is False
    assert 'from its flavor failed (RuntimeError)' in result['message']
    assert 'Placement is down' not in result['message']


def test_no_lease_maker_without_placement(harness, monkeypatch):
    called = []
    monkeypatch.setattr(instance_binding, 'flavor_leases',
                        types.SimpleNamespace(
                            ensure_instance_leases=called.append))
    monkeypatch.setattr(instance_binding, '_placement_enabled',
                        lambda: False)
    uuid = _linked_lease(harness)
    assert _prepare(harness, flavor_resources=True)['ok']
    assert called == []
    assert harness.lease(uuid).status == states.BOUND


def test_status_for_the_agent(harness):
    uuid = _linked_lease(harness, attach_mode='guest')
    [summary] = harness.api.instance_status(_ctx(), INSTANCE, 'compute-0')
    assert summary['uuid'] == uuid
    assert summary['attach_mode'] == 'guest'
    assert len(summary['extents']) == 1
    assert summary['status'] == states.RESERVED


def test_agents_hear_about_linked_leases(harness):
    heard = []
    agent = harness.agents['compute-0']
    agent.hook_server = types.SimpleNamespace(
        leases_changed=lambda instance, leases: heard.append(
            (instance, leases)))
    uuid = _linked_lease(harness)
    instance_binding.notify_agents(_ctx(), INSTANCE)
    deadline = time.monotonic() + 10
    while not heard and time.monotonic() < deadline:
        time.sleep(0.05)
    assert heard == [(INSTANCE, [uuid])]
