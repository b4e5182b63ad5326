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

"""A compute agent's report of the devices it bound to vfio-pci again
after its host restarted (ConductorAPI.report_devices_restored): the
leases bound on that host get a ``restore`` action, and a fault when a
device could not be; reports about other hosts' leases, other leases'
devices and malformed results change nothing."""

import threading
import time

from oslo_utils import uuidutils

from composable.common import states
from composable.conductor import device_reports
from composable.db import api as db_api
from tests.unit.conductor import harness as h_mod

TIMEOUT = 30


def _bound_gpu_lease(harness, host='compute-0'):
    uuid = harness.create(device_count=1)
    harness.api.bind_lease(h_mod.user_context(), uuid,
                           harness.hosts[host].uuid)
    lease = harness.wait(uuid, states.BOUND)
    return lease, lease.devices[0].uuid


def _result(lease, device, ok=True, message=None, address='0000:41:00.0'):
    return {'lease_uuid': lease.uuid, 'device_uuid': device,
            'address': address, 'ok': ok,
            'message': message or '%s is bound to vfio-pci again' % address}


def _restores(harness, uuid):
    lease = harness.lease(uuid)
    return [a for a in db_api.action_list(h_mod.admin(), lease.id)
            if a.action == device_reports.ACTION_RESTORE]


def _wait_restores(harness, uuid, timeout=TIMEOUT):
    deadline = time.monotonic() + timeout
    while True:
        found = _restores(harness, uuid)
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError('no restore action on lease %s within %s s'
                                 % (uuid, timeout))
        time.sleep(0.05)


def test_a_device_bound_again_is_noted_on_its_lease(harness):
    lease, device = _bound_gpu_lease(harness)
    harness.api.report_devices_restored(h_mod.admin(), 'compute-0',
                                        [_result(lease, device)])
    [action] = _wait_restores(harness, lease.uuid)
    assert action.result == 'success'
    assert 'compute-0 restarted' in action.message
    assert device in action.message and '0000:41:00.0' in action.message
    lease = harness.lease(lease.uuid)
    assert lease.status == states.BOUND
    assert lease.fault is None


def test_a_device_that_could_not_be_bound_again_faults_its_lease(harness):
    lease, device = _bound_gpu_lease(harness)
    problem = 'no PCI function with ids 10de:2330 appeared within 1 s'
    harness.api.report_devices_restored(
        h_mod.admin(), 'compute-0',
        [_result(lease, device, ok=False, message=problem)])
    [action] = _wait_restores(harness, lease.uuid)
    assert action.result == 'error'
    lease = harness.lease(lease.uuid)
    # Still bound: the lease's other resources work; the fault says what
    # the user can do.
    assert lease.status == states.BOUND
    assert problem in lease.fault and device in lease.fault
    assert 'Unbind the lease' in lease.fault
    assert action.message == lease.fault

    # Unbinding clears the fault and frees the device as usual.
    harness.api.unbind_lease(h_mod.user_context(), lease.uuid)
    lease = harness.wait(lease.uuid, states.RESERVED)
    assert lease.fault is None


def test_reports_about_leases_not_bound_on_the_host_are_dropped(harness):
    lease, device = _bound_gpu_lease(harness)
    other_lease = harness.create(device_count=1)
    ctx = h_mod.admin()
    # Another host's agent cannot write this lease's history.
    assert device_reports.record_restored(
        ctx, 'compute-1', [_result(lease, device, ok=False,
                                   message='x')]) == []
    # A lease that is not bound, a device that is not the lease's, an
    # unknown lease: dropped.
    reserved = harness.lease(other_lease)
    assert device_reports.record_restored(ctx, 'compute-0', [
        _result(reserved, reserved.devices[0].uuid, ok=False),
        _result(lease, uuidutils.generate_uuid(), ok=False),
        dict(_result(lease, device, ok=False),
             lease_uuid=uuidutils.generate_uuid())]) == []
    assert _restores(harness, lease.uuid) == []
    assert _restores(harness, other_lease) == []
    assert harness.lease(lease.uuid).fault is None
    assert harness.lease(other_lease).fault is None


def test_malformed_reports_change_nothing_and_raise_nothing(harness):
    lease, device = _bound_gpu_lease(harness)
    ctx = h_mod.admin()
    good = _result(lease, device)
    for bad in (None, 'x', {'a': 1}, [None], [dict(good, ok='yes')],
                [dict(good, device_uuid='not-a-uuid')],
                [{k: v for k, v in good.items() if k != 'lease_uuid'}]):
        assert device_reports.record_restored(ctx, 'compute-0', bad) == []
    assert _restores(harness, lease.uuid) == []
    # Through RPC too: the conductor survives the bad cast and takes the
    # good one that follows.
    harness.api.report_devices_restored(ctx, 'compute-0', 'garbage')
    harness.api.report_devices_restored(ctx, 'compute-0', [good])
    [action] = _wait_restores(harness, lease.uuid)
    assert action.result == 'success'


def test_one_action_per_lease_and_a_partial_failure_is_an_error(harness):
    uuid = harness.create(device_count=2)
    harness.api.bind_lease(h_mod.user_context(), uuid,
                           harness.hosts['compute-0'].uuid)
    lease = harness.wait(uuid, states.BOUND)
    first, second = sorted(d.uuid for d in lease.devices)
    assert device_reports.record_restored(h_mod.admin(), 'compute-0', [
        _result(lease, first),
        _result(lease, second, ok=False, message='IOMMU group 13 also '
                'holds 0000:42:00.1 on driver nvme',
                address='0000:42:00.0')]) == [uuid]
    [action] = _restores(harness, uuid)
    assert action.result == 'error'
    lease = harness.lease(uuid)
    assert second in lease.fault and 'on driver nvme' in lease.fault
    assert first not in lease.fault


def test_an_unbind_racing_the_report_wins(harness):
    """The report is read while the lease is bound, and written after an
    unbind moved it: nothing is written (the unbind's own action says
    what happened), whichever comes first."""
    lease, device = _bound_gpu_lease(harness)
    ctx = h_mod.admin()
    harness.api.unbind_lease(h_mod.user_context(), lease.uuid)
    harness.wait(lease.uuid, states.RESERVED)
    assert db_api.lease_host_event(
        ctx, lease.id, 'compute-0', device_reports.ACTION_RESTORE,
        db_api.ACTION_ERROR, 'late', fault='late') is False
    assert harness.lease(lease.uuid).fault is None
    assert _restores(harness, lease.uuid) == []

    # Bound again, a report and an unbind at once: the report is written
    # before the unbind starts (and the unbind's success clears its
    # fault) or not at all; the lease ends reserved without a fault.
    harness.api.bind_lease(h_mod.user_context(), lease.uuid,
                           harness.hosts['compute-0'].uuid)
    harness.wait(lease.uuid, states.BOUND)
    start = threading.Barrier(2)

    def report():
        start.wait(TIMEOUT)
        device_reports.record_restored(ctx, 'compute-0', [
            _result(lease, device, ok=False, message='gone')])

    thread = threading.Thread(target=report)
    thread.start()
    start.wait(TIMEOUT)
    harness.api.unbind_lease(h_mod.user_context(), lease.uuid)
    thread.join(TIMEOUT)
    final = harness.wait(lease.uuid, states.RESERVED)
    assert final.fault is None
    assert harness.actions(lease.uuid)[-1] == ('unbind', 'success')
