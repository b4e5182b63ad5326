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

"""Lease flows end to end in one process: conductor RPC server, real agent
RPC servers (noop exporter, no-op attach), fake fabric, SQLite file DB."""

import re

from composable.common import exception
from composable.common import states
from composable.conductor.allocator import claims as allocator
from composable.db import api as db_api
from tests.unit.conductor import harness as h_mod
from tools.bench import device_bind
from tools.bench import memory_bind


def test_create_allocates_to_reserved(harness):
    uuid = harness.create(memory_mb=2048, device_count=1)
    lease = harness.lease(uuid)
    assert lease.status == states.RESERVED
    assert lease.fault is None
    assert lease.reservation is None
    assert len(lease.extents) == 2
    assert all(e.export_state == 'allocated' for e in lease.extents)
    assert len(lease.devices) == 1
    assert harness.pool(harness.memory_pool).used == 2048
    assert harness.pool(harness.gpu_pool).used == 1
    assert harness.actions(uuid) == [('create', 'success')]


def test_create_without_capacity_is_alloc_failed(harness):
    uuid = harness.create(memory_mb=64 * 1024)
    lease = harness.lease(uuid)
    assert lease.status == states.ALLOC_FAILED
    assert 'MiB' in lease.fault
    assert harness.actions(uuid) == [('create', 'error')]
    assert harness.pool(harness.memory_pool).used == 0


def test_leased_device_pick_creates_nothing(harness):
    device = harness.devices[0].uuid
    first = harness.create(requested_devices=[device])
    assert harness.lease(first).status == states.RESERVED
    before = len(db_api.lease_list(h_mod.admin()))
    try:
        harness.create(requested_devices=[device])
    except exception.DeviceAlreadyLeased as exc:
        assert first in exc.message
    else:
        raise AssertionError('a leased device was given twice')
    assert len(db_api.lease_list(h_mod.admin())) == before


def test_unknown_device_pick_creates_nothing(harness):
    try:
        harness.create(
            requested_devices=['0e6a3e52-5c1d-4d6f-9d53-94b7f1d1f1aa'])
    except exception.DeviceNotFound:
        pass
    else:
        raise AssertionError('an unknown device was accepted')
    assert db_api.lease_list(h_mod.admin()) == []


def test_bind_unbind_release(harness):
    uuid = harness.create(memory_mb=2048, device_count=2)
    host = harness.hosts['compute-0']
    harness.api.bind_lease(h_mod.user_context(), uuid, host.uuid)
    lease = harness.wait(uuid, states.BOUND)
    assert lease.host.name == 'compute-0'
    assert lease.fault is None
    for extent in lease.extents:
        assert extent.export_state == 'exported'
        assert extent.target_iqn.endswith(extent.uuid)
        assert extent.chap_username and extent.chap_secret
    secrets = {e.chap_secret for e in lease.extents}
    assert len(secrets) == 2  # one secret per extent
    assert all(d.state == 'attached' and d.pci_address
               for d in lease.devices)
    atts = db_api.attachment_list(h_mod.admin(), lease.id)
    assert [a.state for a in atts] == ['attached']
    assert set(atts[0].details['devices']) == {d.uuid
                                               for d in lease.devices}
    memory, devices = harness.host_attachments()['compute-0']
    assert uuid in memory and uuid in devices
    exported = {}
    for exports in harness.live_exports().values():
        exported.update(exports)
    assert set(exported) == {e.uuid for e in lease.extents}

    harness.api.unbind_lease(h_mod.user_context(), uuid)
    lease = harness.wait(uuid, states.RESERVED)
    assert lease.host is None and lease.instance_uuid is None
    for extent in lease.extents:
        assert extent.export_state == 'unexported'
        assert extent.chap_secret is None and extent.target_iqn is None
    assert all(d.state == 'reserved' and d.pci_address is None
               for d in lease.devices)
    harness.assert_nothing_live()

    harness.api.delete_lease(h_mod.user_context(), uuid)
    lease = harness.wait(uuid, states.RELEASED)
    assert lease.extents == [] and lease.devices == []
    assert harness.pool(harness.memory_pool).used == 0
    assert harness.pool(harness.gpu_pool).used == 0
    assert set(harness.node_allocated().values()) == {0}
    assert all(not backed for backed in harness.backed().values())
    harness.assert_nothing_live()
    assert harness.actions(uuid) == [('create', 'success'),
                                     ('bind', 'success'),
                                     ('unbind', 'success'),
                                     ('delete', 'success')]


def test_bind_trades_devices_only_for_a_lease_that_has_some(
        harness, monkeypatch):
    asked = []
    real = allocator.reach_host

    def reach_host(context, lease_id, host_name):
        asked.append(lease_id)
        return real(context, lease_id, host_name)

    monkeypatch.setattr(allocator, 'reach_host', reach_host)
    host = harness.hosts['compute-0']
    memory_only = harness.create(memory_mb=1024)
    with_devices = harness.create(memory_mb=1024, device_count=1)
    for uuid in (memory_only, with_devices):
        harness.api.bind_lease(h_mod.user_context(), uuid, host.uuid)
        harness.wait(uuid, states.BOUND)
    assert asked == [harness.lease(with_devices).id]


def test_delete_bound_lease_tears_everything_down(harness):
    uuid = harness.create(memory_mb=1024, device_count=1)
    harness.api.bind_lease(h_mod.user_context(), uuid,
                           harness.hosts['compute-0'].uuid)
    harness.wait(uuid, states.BOUND)
    harness.api.delete_lease(h_mod.user_context(), uuid)
    harness.wait(uuid, states.RELEASED)
    harness.assert_nothing_live()
    assert all(not backed for backed in harness.backed().values())
    assert harness.pool(harness.gpu_pool).used == 0
    devices = db_api.device_list(h_mod.admin())
    assert {d.state for d in devices} == {'available'}


def test_refused_transitions_are_409_with_hint(harness):
    uuid = harness.create(memory_mb=1024)
    try:
        harness.api.unbind_lease(h_mod.user_context(), uuid)
    except exception.InvalidState as exc:
        assert 'It is not bound.' in exc.message
    else:
        raise AssertionError('unbind of a reserved lease was accepted')
    harness.api.bind_lease(h_mod.user_context(), uuid,
                           harness.hosts['compute-0'].uuid)
    harness.wait(uuid, states.BOUND)
    try:
        harness.api.bind_lease(h_mod.user_context(), uuid,
                               harness.hosts['compute-0'].uuid)
    except exception.InvalidState as exc:
        assert 'unbind it first' in exc.message
    else:
        raise AssertionError('bind of a bound lease was accepted')
    harness.api.delete_lease(h_mod.user_context(), uuid)
    harness.wait(uuid, states.RELEASED)
    try:
        harness.api.delete_lease(h_mod.user_context(), uuid)
    except exception.InvalidState as exc:
        assert 'released already' in exc.message
    else:
        raise AssertionError('delete of a released lease was accepted')


def test_other_projects_lease_is_not_found(harness):
    uuid = harness.create(memory_mb=1024)
    try:
        harness.api.delete_lease(h_mod.user_context('p2'), uuid)
    except exception.LeaseNotFound:
        pass
    else:
        raise AssertionError('another project deleted the lease')
    assert harness.lease(uuid).status == states.RESERVED


def test_bind_to_unknown_host_is_invalid(harness):
    uuid = harness.create(memory_mb=1024)
    try:
        harness.api.bind_lease(h_mod.user_context(), uuid, 'nowhere')
    except exception.Invalid as exc:
        assert 'nowhere' in exc.message
    else:
        raise AssertionError('bound to an unknown host')
    assert harness.lease(uuid).status == states.RESERVED


def test_guest_mode_records_the_instance(harness):
    uuid = harness.create(memory_mb=1024)
    server = 'c9f7b7f2-52a4-4c55-9a7f-1b8f2b0c8e01'
    harness.api.bind_lease(h_mod.user_context(), uuid,
                           harness.hosts['compute-0'].uuid,
                           instance_uuid=server, attach_mode='guest')
    lease = harness.wait(uuid, states.BOUND)
    assert lease.instance_uuid == server and lease.attach_mode == 'guest'
    att = db_api.attachment_list(h_mod.admin(), lease.id)[0]
    assert att.mode == 'guest' and att.instance_uuid == server
    memory, _ = harness.host_attachments()['compute-0']
    assert all(d['mode'] == 'guest' for d in memory[uuid].values())


def test_bind_marks_its_phases_for_the_benchmarks(harness, caplog):
    """tools/bench/memory_bind.py and device_bind.py cut a bind into
    phases by the conductor's debug marks: each one they look for is
    logged, in order."""
    caplog.set_level('DEBUG', logger='composable.conductor.flows')
    uuid = harness.create(memory_mb=1024, device_count=1)
    host = harness.hosts['compute-0']
    harness.api.bind_lease(h_mod.user_context(), uuid, host.uuid)
    harness.wait(uuid, states.BOUND)
    flows = [r.getMessage() for r in caplog.records
             if r.name == 'composable.conductor.flows']
    for bench in (memory_bind, device_bind):
        marks = [(name, pattern) for name, where, pattern in bench.PHASES
                 if where == 'conductor-0' and pattern and
                 re.search(r'(attached on|bind started)', pattern)]
        assert marks, bench
        for name, pattern in marks:
            assert any(re.search(pattern, m) and uuid in m
                       for m in flows), (bench.__name__, name, flows)
