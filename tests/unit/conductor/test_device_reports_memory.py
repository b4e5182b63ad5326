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

"""A compute agent's report of the CXL memory regions it made again after
its host restarted (ConductorAPI.report_memory_restored): the lease bound
on that host gets a ``restore`` action and its attachment the NUMA node
each extent is on now; a region that could not be made again faults the
lease; reports about other hosts' leases and malformed results change
nothing. The extents here are of a network pool: what is recorded does
not depend on the medium."""

import time

from oslo_utils import uuidutils

from composable.common import states
from composable.conductor import device_reports
from composable.db import api as db_api
from tests.unit.conductor import harness as h_mod

TIMEOUT = 30


def _bound_memory_lease(harness, host='compute-0'):
    uuid = harness.create(memory_mb=1024)
    harness.api.bind_lease(h_mod.user_context(), uuid,
                           harness.hosts[host].uuid)
    return harness.wait(uuid, states.BOUND)


def _result(lease, ok=True, node=3, message=None):
    return {'lease_uuid': lease.uuid, 'device': 'cmm0', 'ok': ok,
            'numa_node': node if ok else None,
            'extents': [e.uuid for e in lease.extents],
            'message': message}


def _restores(harness, uuid):
    lease = harness.lease(uuid)
    return [a for a in db_api.action_list(h_mod.admin(), lease.id)
            if a.action == device_reports.ACTION_RESTORE]


def _attachment_memory(harness, uuid):
    lease = harness.lease(uuid)
    [attachment] = db_api.attachment_list(
        h_mod.admin(), lease.id, states.LIVE_ATTACHMENT_STATES)
    return (attachment.details or {}).get('memory') or {}


def _wait_restores(harness, uuid):
    deadline = time.monotonic() + TIMEOUT
    while not _restores(harness, uuid):
        if time.monotonic() > deadline:
            raise AssertionError('no restore action on lease %s' % uuid)
        time.sleep(0.05)
    return _restores(harness, uuid)


def test_memory_online_again_is_noted_with_its_new_node(harness):
    lease = _bound_memory_lease(harness)
    before = _attachment_memory(harness, lease.uuid)
    assert set(before) == {e.uuid for e in lease.extents}
    harness.api.report_memory_restored(h_mod.admin(), 'compute-0',
                                       [_result(lease, node=3)])
    [action] = _wait_restores(harness, lease.uuid)
    assert action.result == 'success'
    assert 'compute-0 restarted' in action.message
    assert 'device cmm0 as NUMA node 3' in action.message
    after = _attachment_memory(harness, lease.uuid)
    assert {d['numa_node'] for d in after.values()} == {3}
    # Only the node changed: what the bind recorded of each extent stays.
    for extent, details in before.items():
        assert dict(details, numa_node=3) == after[extent]
    lease = harness.lease(lease.uuid)
    assert lease.status == states.BOUND and lease.fault is None


def test_memory_not_online_again_faults_its_lease(harness):
    lease = _bound_memory_lease(harness)
    before = _attachment_memory(harness, lease.uuid)
    problem = ("CXL memory device 0x5a5a0001 is not on this host's CXL "
               "bus since the host restarted")
    harness.api.report_memory_restored(
        h_mod.admin(), 'compute-0',
        [_result(lease, ok=False, message=problem)])
    [action] = _wait_restores(harness, lease.uuid)
    assert action.result == 'error'
    lease = harness.lease(lease.uuid)
    assert lease.status == states.BOUND
    assert problem in lease.fault and 'Unbind the lease' in lease.fault
    assert _attachment_memory(harness, lease.uuid) == before


def test_reports_about_leases_not_bound_on_the_host_are_dropped(harness):
    lease = _bound_memory_lease(harness)
    reserved = harness.lease(harness.create(memory_mb=1024))
    ctx = h_mod.admin()
    before = _attachment_memory(harness, lease.uuid)
    # Another host's agent cannot write this lease's history; a lease
    # that is not bound, or unknown, is left alone.
    assert device_reports.record_memory_restored(
        ctx, 'compute-1', [_result(lease)]) == []
    assert device_reports.record_memory_restored(ctx, 'compute-0', [
        _result(reserved),
        dict(_result(lease), lease_uuid=uuidutils.generate_uuid())]) == []
    assert _restores(harness, lease.uuid) == []
    assert _restores(harness, reserved.uuid) == []
    assert _attachment_memory(harness, lease.uuid) == before


def test_malformed_results_are_dropped(harness):
    lease = _bound_memory_lease(harness)
    ctx = h_mod.admin()
    bad = [None, 'x', {'lease_uuid': lease.uuid},
           dict(_result(lease), lease_uuid='not-a-uuid'),
           dict(_result(lease), ok='yes'),
           dict(_result(lease), numa_node=-1),
           dict(_result(lease), numa_node=True),
           dict(_result(lease), extents=['not-a-uuid'])]
    assert device_reports.record_memory_restored(ctx, 'compute-0',
                                                 bad) == []
    assert device_reports.record_memory_restored(ctx, 'compute-0',
                                                 'not a list') == []
    assert _restores(harness, lease.uuid) == []
    # A good one beside bad ones is noted.
    assert device_reports.record_memory_restored(
        ctx, 'compute-0', bad + [_result(lease)]) == [lease.uuid]
