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

"""Leases of SR-IOV virtual functions through the conductor: one VF per
lease, created with the first bound lease and removed with the last (on
demand) or taken from those the host made (pre-created), bound to
vfio-pci by the host's agent, never through the fabric; and what happens
when the agent is down or slow, or the PF is not there. The agent's PCI
work is real code on a fake sysfs (sriov_harness)."""

import threading
import time

import pytest

from composable.common import exception
from composable.common import sriov
from composable.common import states
from composable.db import allocation
from composable.db import api as db_api
from composable.fabric import fake as fake_fabric
from tests import concurrency
from tests import lease_rows
from tests.unit.conductor import harness as h_mod
from tests.unit.conductor import sriov_harness


@pytest.fixture
def sriov_env(sqlite_db, tmp_path):
    h = sriov_harness.SriovHarness(rpc_timeout=3, fabric_timeout=3)
    yield h, tmp_path
    h.stop()


def start(env, **kwargs):
    h, tmp_path = env
    return h.start(tmp_path, **kwargs)


def _bind(h, uuid, host=sriov_harness.HOST):
    h.api.bind_lease(h_mod.user_context(), uuid, h.hosts[host].uuid)


def check_lease_life_on_demand(h):
    """Two leases of a two-VF pool: bound, unbound, deleted."""
    first = h.create(device_count=1, device_kind='nic')
    second = h.create(device_count=1, device_kind='nic')
    assert h.lease(first).status == states.RESERVED
    assert h.pool(h.sriov_pool).used == 2
    assert h.vfs() == []  # nothing made before a bind

    _bind(h, first)
    lease = h.wait(first, [states.BOUND, states.BIND_FAILED])
    assert lease.status == states.BOUND, lease.fault
    assert h.numvfs_writes() == ['2']
    [device] = lease.devices
    vf = h.vfs()[sriov.vf_index(device.address)]
    assert device.pci_address == vf and device.state == 'attached'
    assert h.on_vfio() == [vf]
    assert h.pf_untouched()
    # The fabric was never asked.
    assert not fake_fabric.FakeFabricDriver.bindings()

    _bind(h, second)
    lease2 = h.wait(second, [states.BOUND, states.BIND_FAILED])
    assert lease2.status == states.BOUND, lease2.fault
    assert h.numvfs_writes() == ['2']
    assert h.on_vfio() == sorted(h.vfs())
    assert lease2.devices[0].pci_address != device.pci_address

    h.api.unbind_lease(h_mod.user_context(), first)
    lease = h.wait(first, states.RESERVED)
    assert lease.devices[0].pci_address is None
    # The other lease still holds a VF of the PF: none goes.
    assert len(h.vfs()) == 2 and h.numvfs_writes() == ['2']
    assert h.on_vfio() == [lease2.devices[0].pci_address]

    h.api.delete_lease(h_mod.user_context(), second)
    h.wait(second, states.RELEASED)
    assert h.vfs() == [] and h.numvfs_writes() == ['2', '0']
    h.api.delete_lease(h_mod.user_context(), first)
    h.wait(first, states.RELEASED)
    assert h.pool(h.sriov_pool).used == 0
    assert {d.state for d in db_api.device_list(
        h_mod.admin(), filters={'pool_id': h.sriov_pool.id})} == {
            'available'}
    assert h.pf_untouched()
    h.assert_nothing_live()
    assert allocation.check_consistency(h_mod.admin()) == []


def check_one_vf_per_lease_under_races(h):
    """Six concurrent requests for a two-VF pool: two get one VF each,
    never the same; a lease asking for two VFs gets none."""
    results = concurrency.run_concurrently(
        6, lambda i: h.create(device_count=1, device_kind='nic'))
    assert not [r for r in results if isinstance(r, Exception)], results
    leases = [h.lease(uuid) for uuid in results]
    reserved = [lease for lease in leases
                if lease.status == states.RESERVED]
    assert len(reserved) == 2
    assert [lease.status for lease in leases].count(
        states.ALLOC_FAILED) == 4
    taken = [d.uuid for lease in reserved for d in lease.devices]
    assert len(taken) == len(set(taken)) == 2
    assert h.pool(h.sriov_pool).used == 2
    assert allocation.check_consistency(h_mod.admin()) == []

    # Both bound at once: the VFs are made once, each lease has its own.
    for lease in reserved:
        _bind(h, lease.uuid)
    bound = [h.wait(lease.uuid, [states.BOUND, states.BIND_FAILED])
             for lease in reserved]
    assert [b.status for b in bound] == [states.BOUND] * 2, [
        b.fault for b in bound]
    assert h.numvfs_writes() == ['2']
    assert len({b.devices[0].pci_address for b in bound}) == 2
    # Both unbound at once: the VFs go once, after the last.
    for lease in reserved:
        h.api.unbind_lease(h_mod.user_context(), lease.uuid)
    for lease in reserved:
        h.wait(lease.uuid, states.RESERVED)
    assert h.vfs() == [] and h.numvfs_writes() == ['2', '0']
    h.assert_nothing_live()


def test_lease_life_on_demand(sriov_env):
    check_lease_life_on_demand(start(sriov_env))


def test_one_vf_per_lease_under_races(sriov_env):
    check_one_vf_per_lease_under_races(start(sriov_env))


def test_two_vfs_in_one_lease_are_refused(sriov_env):
    h = start(sriov_env, vf_count=4)
    uuid = h.create(device_count=2, device_kind='nic')
    lease = h.lease(uuid)
    assert lease.status == states.ALLOC_FAILED
    assert 'nic-vfs gives one virtual function per lease' in lease.fault
    assert h.pool(h.sriov_pool).used == 0
    picked = [d.uuid for d in db_api.device_list(
        h_mod.admin(), filters={'pool_id': h.sriov_pool.id})][:2]
    uuid = h.create(requested_devices=picked)
    lease = h.lease(uuid)
    assert lease.status == states.ALLOC_FAILED
    assert 'one virtual function per lease' in lease.fault


def test_precreated_vfs_are_used_and_left(sriov_env):
    h = start(sriov_env, vf_count=3, vf_mode=sriov.PRECREATED)
    uuid = h.create(device_count=1, device_kind='nic')
    _bind(h, uuid)
    lease = h.wait(uuid, [states.BOUND, states.BIND_FAILED])
    assert lease.status == states.BIND_FAILED
    assert ('set [compute_node]sriov_numvfs = 0000:41:00.0:3 on this host'
            in lease.fault)
    assert h.vfs() == [] and h.numvfs_writes() == []
    h.assert_nothing_live()

    # The operator configures the host; the agent makes them at start.
    assert h.host_pci.create_configured_vfs([sriov_harness.PF + ':3']) == []
    h.fs.writes.clear()
    _bind(h, uuid)
    lease = h.wait(uuid, [states.BOUND, states.BIND_FAILED])
    assert lease.status == states.BOUND, lease.fault
    assert h.on_vfio() == [lease.devices[0].pci_address]
    h.api.delete_lease(h_mod.user_context(), uuid)
    h.wait(uuid, states.RELEASED)
    assert len(h.vfs()) == 3 and h.numvfs_writes() == []
    assert h.on_vfio() == []
    h.assert_nothing_live()


def test_bind_to_another_host_is_refused_and_touches_nothing(sriov_env):
    h = start(sriov_env)
    uuid = h.create(device_count=1, device_kind='nic')
    refusal = ('lease %s holds a virtual function of 0000:41:00.0 on host '
               'compute-0 (pool nic-vfs); it can be bound to that host '
               'only, not to compute-1' % uuid)
    # Refused when asked, under the lease's reservation.
    with pytest.raises(exception.Conflict) as info:
        _bind(h, uuid, host='compute-1')
    assert refusal in str(info.value)
    lease = h.lease(uuid)
    assert (lease.status, lease.host_id) == (states.RESERVED, None)
    # A bind that reaches the flow anyway (one resumed after a takeover)
    # meets the same rule there.
    assert lease_rows.write(h_mod.admin(), lease.id, {
        'status': states.BINDING, 'host_id': h.hosts['compute-1'].id},
        expected_status=states.RESERVED)
    db_api.action_start(h_mod.user_context(), lease.id, 'bind')
    with h_mod.task_on(lease.id) as task:
        assert h.conductor.flows.bind(task) == states.BIND_FAILED
    lease = h.lease(uuid)
    assert lease.status == states.BIND_FAILED
    assert 'preparing: ' + refusal in lease.fault
    assert h.vfs() == [] and h.fs.writes == []
    h.assert_nothing_live()


def test_missing_pf_fails_with_a_fault_that_names_it(sriov_env):
    h = start(sriov_env, pf_address='0000:42:00.0')
    uuid = h.create(device_count=1, device_kind='nic')
    _bind(h, uuid)
    lease = h.wait(uuid, [states.BOUND, states.BIND_FAILED])
    assert lease.status == states.BIND_FAILED
    assert ('the physical function 0000:42:00.0 of device %s is not on '
            'this host' % lease.devices[0].uuid) in lease.fault
    assert lease.devices[0].state == 'reserved'
    h.assert_nothing_live()
    h.api.delete_lease(h_mod.user_context(), uuid)
    assert h.wait(uuid, states.RELEASED).fault is None


def test_agent_down_then_back(sriov_env):
    h = start(sriov_env)
    uuid = h.create(device_count=1, device_kind='nic')
    h.stop_agent(sriov_harness.HOST)
    _bind(h, uuid)
    lease = h.wait(uuid, [states.BOUND, states.BIND_FAILED])
    assert lease.status == states.BIND_FAILED
    assert 'attaching devices on host compute-0' in lease.fault
    assert 'did not answer' in lease.fault or 'not answer' in lease.fault
    assert h.vfs() == []
    h.start_agent(sriov_harness.HOST)
    _bind(h, uuid)
    lease = h.wait(uuid, [states.BOUND, states.BIND_FAILED])
    assert lease.status == states.BOUND, lease.fault
    assert h.on_vfio() == [lease.devices[0].pci_address]
    h.api.delete_lease(h_mod.user_context(), uuid)
    h.wait(uuid, states.RELEASED)
    assert h.vfs() == []
    h.assert_nothing_live()


def test_agent_too_slow_creating_vfs(sriov_env, monkeypatch):
    """The agent makes the VFs after the conductor gave up waiting: the
    bind fails, and the delete that follows takes the late VF off
    vfio-pci and removes the VFs."""
    h = start(sriov_env)
    uuid = h.create(device_count=1, device_kind='nic')
    made = threading.Event()
    original = h.host_pci.set_virtual_functions

    def slow(pf_address, count):
        if count:
            time.sleep(h.rpc_timeout + 1)
        try:
            return original(pf_address, count)
        finally:
            if count:
                made.set()

    monkeypatch.setattr(h.host_pci, 'set_virtual_functions', slow)
    _bind(h, uuid)
    lease = h.wait(uuid, [states.BOUND, states.BIND_FAILED], timeout=60)
    assert lease.status == states.BIND_FAILED
    assert 'attaching devices on host compute-0' in lease.fault
    assert made.wait(60)
    # The late attach finishes on the host: wait for it, as an operator
    # would see it in the agent's log.
    deadline = time.monotonic() + 60
    while not h.on_vfio() and time.monotonic() < deadline:
        time.sleep(0.05)
    h.api.delete_lease(h_mod.user_context(), uuid)
    lease = h.wait(uuid, [states.RELEASED, states.ERROR], timeout=60)
    assert lease.status == states.RELEASED, lease.fault
    assert h.vfs() == [] and h.on_vfio() == []
    assert h.host_pci.records.devices == {}
    h.assert_nothing_live()
