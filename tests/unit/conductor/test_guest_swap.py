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

"""A compute agent's report of how the guest made the disks of a
guest-mode lease swap after the bind answered
(ConductorAPI.report_guest_swap): the lease's attachment gets each
extent's ``guest_device`` (or ``guest_swap_error``) and, when the guest
failed, the lease a ``guest_swap`` action and a fault; reports for
leases not bound to that instance on that host are dropped; a report
that comes before the bind recorded the disks is noted once it has."""

from oslo_utils import uuidutils

from composable.common import states
from composable.conductor import guest_swap
from composable.conductor import rpcapi
from composable import conf
from composable.db import api as db_api
from tests.unit.conductor import harness as h_mod
from tests import waiting

TIMEOUT = 30
SERVER = 'c9f7b7f2-52a4-4c55-9a7f-1b8f2b0c8e01'


def _bound_guest_lease(harness, memory_mb=1024):
    uuid = harness.create(memory_mb=memory_mb)
    harness.api.bind_lease(h_mod.user_context(), uuid,
                           harness.hosts['compute-0'].uuid,
                           instance_uuid=SERVER, attach_mode='guest')
    return harness.wait(uuid, states.BOUND)


def _swaps(harness, uuid):
    lease = harness.lease(uuid)
    return [a for a in db_api.action_list(h_mod.admin(), lease.id)
            if a.action == guest_swap.ACTION_GUEST_SWAP]


def _wait_swaps(harness, uuid):
    return waiting.wait_until(lambda: _swaps(harness, uuid), TIMEOUT,
                              'a guest_swap action on lease %s' % uuid,
                              interval=0.05)


def _attachment(harness, uuid):
    lease = harness.lease(uuid)
    [attachment] = db_api.attachment_list(
        h_mod.admin(), lease.id, states.LIVE_ATTACHMENT_STATES)
    return attachment


def _memory(harness, uuid):
    return (_attachment(harness, uuid).details or {}).get('memory') or {}


def test_a_swapped_on_disk_is_noted_on_the_attachment(harness):
    lease = _bound_guest_lease(harness)
    [extent] = [e.uuid for e in lease.extents]
    before = _memory(harness, lease.uuid)[extent]
    assert 'guest_device' not in before
    actions = harness.actions(lease.uuid)
    harness.api.report_guest_swap(h_mod.admin(), 'compute-0', lease.uuid,
                                  SERVER,
                                  {extent: {'guest_device': '/dev/vdb'}})
    # What the bind recorded stays; the device is added.
    waiting.wait_until(
        lambda: _memory(harness, lease.uuid)[extent] == dict(
            before, guest_device='/dev/vdb'), TIMEOUT,
        'the guest device recorded', interval=0.05)
    lease = harness.lease(lease.uuid)
    assert lease.status == states.BOUND and lease.fault is None
    # A success is what a bind brings: no action of its own.
    assert harness.actions(lease.uuid) == actions


def test_a_failed_swapon_faults_the_lease_which_stays_bound(harness):
    lease = _bound_guest_lease(harness)
    [extent] = [e.uuid for e in lease.extents]
    problem = ('the guest does not see a disk with serial 0123 (does its '
               'kernel have virtio_blk and PCI hot-plug?)')
    harness.api.report_guest_swap(h_mod.admin(), 'compute-0', lease.uuid,
                                  SERVER, {extent: {'error': problem}})
    [action] = _wait_swaps(harness, lease.uuid)
    assert action.result == 'error'
    lease = harness.lease(lease.uuid)
    assert lease.status == states.BOUND
    assert problem in lease.fault and extent in lease.fault
    assert 'does not use them' in lease.fault
    details = _memory(harness, lease.uuid)[extent]
    assert details['guest_swap_error'] == problem
    assert 'guest_device' not in details
    # A later success (a restarted agent ran the script again) replaces
    # the error in the details.
    assert guest_swap.record(h_mod.admin(), 'compute-0', lease.uuid, SERVER,
                             {extent: {'guest_device': '/dev/vdc'}}) == \
        guest_swap.NOTED
    details = _memory(harness, lease.uuid)[extent]
    assert details['guest_device'] == '/dev/vdc'
    assert 'guest_swap_error' not in details
    assert len(_swaps(harness, lease.uuid)) == 1


def test_stale_reports_are_dropped(harness):
    lease = _bound_guest_lease(harness)
    [extent] = [e.uuid for e in lease.extents]
    reserved = harness.lease(harness.create(memory_mb=1024))
    ctx = h_mod.admin()
    outcome = {extent: {'guest_device': '/dev/vdb'}}
    before = _memory(harness, lease.uuid)
    # Another host, another instance, a lease not bound, an unknown one,
    # an extent that is not the lease's.
    assert guest_swap.record(ctx, 'compute-1', lease.uuid, SERVER,
                             outcome) == guest_swap.DROPPED
    assert guest_swap.record(ctx, 'compute-0', lease.uuid,
                             uuidutils.generate_uuid(),
                             outcome) == guest_swap.DROPPED
    assert guest_swap.record(ctx, 'compute-0', reserved.uuid, SERVER,
                             outcome) == guest_swap.DROPPED
    assert guest_swap.record(ctx, 'compute-0', uuidutils.generate_uuid(),
                             SERVER, outcome) == guest_swap.DROPPED
    assert guest_swap.record(
        ctx, 'compute-0', lease.uuid, SERVER,
        {uuidutils.generate_uuid(): {'guest_device': '/dev/vdb'}}) == \
        guest_swap.DROPPED
    assert _swaps(harness, lease.uuid) == []
    assert _swaps(harness, reserved.uuid) == []
    assert _memory(harness, lease.uuid) == before

    # Unbound meanwhile: the report of the old bind is dropped.
    harness.api.unbind_lease(h_mod.user_context(), lease.uuid)
    harness.wait(lease.uuid, states.RESERVED)
    assert guest_swap.record(ctx, 'compute-0', lease.uuid, SERVER,
                             outcome) == guest_swap.DROPPED
    assert _swaps(harness, lease.uuid) == []


def test_malformed_reports_are_dropped(harness):
    lease = _bound_guest_lease(harness)
    ctx = h_mod.admin()
    for outcome in (None, 'x', [], {}, {'not-a-uuid': {'error': 'x'}},
                    {lease.extents[0].uuid: 'x'}):
        assert guest_swap.record(ctx, 'compute-0', lease.uuid, SERVER,
                                 outcome) == guest_swap.DROPPED
    assert guest_swap.record(ctx, 'compute-0', 'not-a-uuid', SERVER,
                             {lease.extents[0].uuid: {'error': 'x'}}) == \
        guest_swap.DROPPED
    assert _swaps(harness, lease.uuid) == []


def test_a_report_before_the_bind_recorded_the_disks_is_noted_later(
        harness, monkeypatch):
    """The guest may answer before the conductor wrote what the attach
    returned (a grow's new extents, a bind still ``binding``): the
    report is tried again until it can be noted."""
    monkeypatch.setattr(guest_swap, 'RETRY_DELAYS', (0.05,) * 200)
    lease = _bound_guest_lease(harness)
    [extent] = [e.uuid for e in lease.extents]
    attachment = _attachment(harness, lease.uuid)
    recorded = dict(attachment.details)
    # As if the grow that plugged the extent had not recorded it yet.
    db_api.attachment_update(h_mod.admin(), attachment.id,
                             {'details': dict(recorded, memory={})})
    outcome = {extent: {'guest_device': '/dev/vdb'}}
    assert harness.conductor.report_guest_swap(
        h_mod.admin(), 'compute-0', lease.uuid, SERVER,
        outcome) == guest_swap.EARLY
    assert _swaps(harness, lease.uuid) == []
    db_api.attachment_update(h_mod.admin(), attachment.id,
                             {'details': recorded})
    waiting.wait_until(
        lambda: _memory(harness, lease.uuid)[extent].get('guest_device'),
        TIMEOUT, 'the early report noted', interval=0.05)
    assert _memory(harness, lease.uuid)[extent]['guest_device'] == \
        '/dev/vdb'


def test_an_early_report_is_dropped_after_its_tries(harness, monkeypatch):
    monkeypatch.setattr(guest_swap, 'RETRY_DELAYS', ())
    lease = _bound_guest_lease(harness)
    [extent] = [e.uuid for e in lease.extents]
    attachment = _attachment(harness, lease.uuid)
    db_api.attachment_update(h_mod.admin(), attachment.id,
                             {'details': dict(attachment.details,
                                              memory={})})
    assert harness.conductor.report_guest_swap(
        h_mod.admin(), 'compute-0', lease.uuid, SERVER,
        {extent: {'guest_device': '/dev/vdb'}}) == guest_swap.DROPPED
    assert _swaps(harness, lease.uuid) == []


def test_a_conductor_capped_below_1_7_is_not_sent_the_report(harness):
    conf.CONF.set_override('conductor', '1.6', 'upgrade_levels')
    try:
        api = rpcapi.ConductorAPI()
        assert api.report_guest_swap(
            h_mod.admin(), 'compute-0', uuidutils.generate_uuid(), SERVER,
            {uuidutils.generate_uuid(): {'guest_device': '/dev/vdb'}}) \
            is False
    finally:
        conf.CONF.clear_override('conductor', 'upgrade_levels')
    assert rpcapi.ConductorAPI().client.can_send_version('1.7')
