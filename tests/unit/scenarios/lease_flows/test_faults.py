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

"""Agents that do not answer and fabrics that fail: the lease ends in
bind_failed with a fault naming what failed, the lease action ends in
error, nothing stays exported or bound, and a later delete frees the
capacity."""

from composable.common import states
from composable import conf
from composable.db import api as db_api
from composable.fabric import fake as fake_fabric
from tests.unit.conductor import harness as h_mod

CONF = conf.CONF


def _bind(harness, uuid, host='compute-0'):
    harness.api.bind_lease(h_mod.user_context(), uuid,
                           harness.hosts[host].uuid)


def test_memory_node_agent_timeout_fails_bind(bare_harness):
    harness = bare_harness
    uuid = harness.create(memory_mb=2048, device_count=1)
    _bind(harness, uuid)
    lease = harness.wait(uuid, states.BIND_FAILED)
    assert 'memory-' in lease.fault
    assert 'did not answer within 1 seconds' in lease.fault
    assert harness.actions(uuid)[-1] == ('bind', 'error')
    assert fake_fabric.FakeFabricDriver.bindings() == {}
    assert all(d.pci_address is None for d in lease.devices)
    # Capacity stays with the lease until it is deleted.
    assert harness.pool(harness.memory_pool).used == 2048

    # The agents come back; deleting the lease cleans up and frees all.
    for name in h_mod.MEMORY_NODES + ('compute-0',):
        harness.start_agent(name)
    harness.api.delete_lease(h_mod.user_context(), uuid)
    lease = harness.wait(uuid, states.RELEASED)
    assert harness.pool(harness.memory_pool).used == 0
    assert harness.pool(harness.gpu_pool).used == 0
    assert set(harness.node_allocated().values()) == {0}
    harness.idle()
    harness.assert_nothing_live()
    assert all(not b for b in harness.backed().values())
    assert harness.actions(uuid)[-1] == ('delete', 'success')


def test_host_agent_timeout_fails_bind_and_unexports(harness):
    # No agent runs for compute-1.
    uuid = harness.create(memory_mb=2048)
    _bind(harness, uuid, host='compute-1')
    lease = harness.wait(uuid, states.BIND_FAILED)
    assert 'compute-1' in lease.fault
    assert 'check that it runs' in lease.fault
    # The exports the failed bind made were undone.
    for extent in lease.extents:
        assert extent.export_state == 'unexported'
        assert extent.chap_secret is None
    harness.assert_nothing_live()
    # The host never confirmed the attach and can reach nothing of the
    # lease any more: its attachment is closed.
    atts = db_api.attachment_list(h_mod.admin(), lease.id)
    assert [a.state for a in atts] == ['detached']

    # Binding again, to a host that answers, works.
    _bind(harness, uuid, host='compute-0')
    lease = harness.wait(uuid, states.BOUND)
    assert lease.fault is None


def test_fabric_failure_fails_bind(harness):
    db_api.fabric_update(h_mod.admin(), harness.fabric.uuid,
                         {'driver_info': {'simulate_failure': 'bind'}})
    uuid = harness.create(memory_mb=1024, device_count=1)
    _bind(harness, uuid)
    lease = harness.wait(uuid, states.BIND_FAILED)
    assert 'fabric fab' in lease.fault
    assert 'simulated bind failure' in lease.fault
    assert harness.actions(uuid)[-1] == ('bind', 'error')
    harness.assert_nothing_live()
    for extent in lease.extents:
        assert extent.export_state == 'unexported'

    harness.api.delete_lease(h_mod.user_context(), uuid)
    harness.wait(uuid, states.RELEASED)
    assert harness.pool(harness.gpu_pool).used == 0
    assert harness.pool(harness.memory_pool).used == 0
    harness.assert_nothing_live()


def test_fabric_timeout_fails_bind(harness):
    CONF.set_override('operation_timeout', 1, 'fabric')
    db_api.fabric_update(h_mod.admin(), harness.fabric.uuid,
                         {'driver_info': {'simulate_delay': 1.5}})
    uuid = harness.create(device_count=1)
    _bind(harness, uuid)
    lease = harness.wait(uuid, states.BIND_FAILED)
    assert 'did not answer within 1 seconds' in lease.fault
    assert 'Fabric fab (driver fake)' in lease.fault

    db_api.fabric_update(h_mod.admin(), harness.fabric.uuid,
                         {'driver_info': {}})
    harness.api.delete_lease(h_mod.user_context(), uuid)
    harness.wait(uuid, states.RELEASED)
    harness.assert_nothing_live()


def test_unbind_failure_goes_to_error_and_delete_recovers(harness):
    uuid = harness.create(memory_mb=1024)
    _bind(harness, uuid)
    harness.wait(uuid, states.BOUND)
    harness.stop_agent('compute-0')
    harness.api.unbind_lease(h_mod.user_context(), uuid)
    lease = harness.wait(uuid, states.ERROR)
    assert 'compute-0' in lease.fault
    assert harness.actions(uuid)[-1] == ('unbind', 'error')

    harness.start_agent('compute-0')
    harness.api.delete_lease(h_mod.user_context(), uuid)
    harness.wait(uuid, states.RELEASED)
    harness.idle()
    harness.assert_nothing_live()
    assert harness.pool(harness.memory_pool).used == 0


def test_disabled_fabric_driver_fails_bind_with_a_reason(harness):
    uuid = harness.create(device_count=1)
    CONF.set_override('enabled_drivers', ['redfish'], 'fabric')
    try:
        from composable import fabric as fabric_drivers
        fabric_drivers.reset()
        _bind(harness, uuid)
        lease = harness.wait(uuid, states.BIND_FAILED)
    finally:
        CONF.clear_override('enabled_drivers', 'fabric')
    assert 'enabled_drivers' in lease.fault
    assert 'internal error' not in lease.fault


def test_a_host_silent_at_attach_is_asked_to_let_devices_go_first(
        harness, monkeypatch):
    """The compute agent did not answer the attach of a device (it died
    after the fabric composed it, and was restarted): before the fabric
    unbinds the device, the undo asks that host again to let it go, so
    the host removes the function first. A host still silent then is
    abandoned as before."""
    import oslo_messaging

    agents = harness.conductor.flows.agents
    seen = []

    def attach_devices(context, node, *args, **kwargs):
        raise oslo_messaging.MessagingTimeout('no reply from %s' % node)

    real_detach = agents.detach_devices

    def detach_devices(context, node, lease, devices):
        # Still composed on the fabric when the host is asked.
        seen.append((node, sorted(d['uuid'] for d in devices),
                     len(fake_fabric.FakeFabricDriver.bindings())))
        return real_detach(context, node, lease, devices)

    monkeypatch.setattr(agents, 'attach_devices', attach_devices)
    monkeypatch.setattr(agents, 'detach_devices', detach_devices)
    uuid = harness.create(device_count=1)
    _bind(harness, uuid)
    lease = harness.wait(uuid, states.BIND_FAILED)
    assert 'compute-0' in lease.fault
    assert seen == [('compute-0', [lease.devices[0].uuid], 1)]
    assert fake_fabric.FakeFabricDriver.bindings() == {}

    # Silent at the retry too: the fabric unbinds all the same.
    seen.clear()

    def silent(context, node, lease, devices):
        seen.append(node)
        raise oslo_messaging.MessagingTimeout('no reply from %s' % node)
    monkeypatch.setattr(agents, 'detach_devices', silent)
    _bind(harness, uuid)
    lease = harness.wait(uuid, states.BIND_FAILED)
    assert seen == ['compute-0']
    assert fake_fabric.FakeFabricDriver.bindings() == {}
    atts = db_api.attachment_list(h_mod.admin(), lease.id)
    assert {a.state for a in atts} == {'detached'}
