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

"""Faults on a Redfish fabric, end to end through the API: the fabric
failing or refusing, the compute agent gone after the fabric bind, and a
conductor that died after composing the block. Afterwards no block stays
composed to a host without a live lease of it, and no secret is in any
fault."""

import pytest

from composable.common import states
from composable.conductor import reconciler
from composable.db import api as dbapi
from composable import fabric as fabric_drivers
from tests.functional.fabric import redfish_emulator
from tests.functional.fabric import redfish_stack as rs
from tests import lease_rows
from tests.unit.conductor import harness as harness_mod

GPU0 = redfish_emulator.BLOCKS + '/GPU0'


@pytest.fixture
def stack(tmp_path, emulator):
    with rs.running(tmp_path, emulator) as parts:
        yield parts


def _gpu_lease(api, devices):
    made = api.as_('member').post('/v1/leases', {
        'device_count': 1, 'device_uuids': [devices[GPU0]['uuid']]})
    assert made.status == 201, made
    return made.json['uuid']


def _bind(h, api, uuid):
    answer = api.post('/v1/leases/%s/bind' % uuid, {'host': rs.HOST})
    assert answer.status == 202, answer
    return rs.wait(h, uuid, [states.BOUND, states.BIND_FAILED])


def _delete(h, api, uuid):
    api.as_('member').delete('/v1/leases/%s' % uuid)
    return rs.wait(h, uuid, [states.RELEASED, states.ERROR])


def _nothing_composed(emu):
    assert rs.block(emu, 'GPU0') == ('Unused', None)
    assert 'GPU0' not in rs.composed_into(emu, 'compute-0')


@pytest.mark.parametrize('fault', [
    {'kind': 'status', 'code': 503},
    {'kind': 'drop'},
    {'kind': 'garbage', 'body': '<html>proxy error</html>'}])
def test_fabric_that_fails_the_add_fails_the_bind_cleanly(stack, fault):
    h, api, url, emu = stack
    devices = rs.inventory(api, url)
    uuid = _gpu_lease(api, devices)
    # Every try of the action fails (the driver retries reads, not
    # actions that may have been done).
    emu.inject(method='POST', path='AddResourceBlock', count=10, **fault)
    lease = _bind(h, api, uuid)
    assert lease.status == states.BIND_FAILED
    assert 'binding device' in lease.fault
    assert 'redfish-secret' not in lease.fault
    assert url.split('//')[1] not in lease.fault or 'fabric' in lease.fault
    _nothing_composed(emu)
    emu.faults.clear()
    # Fixed: binding again works.
    assert _bind(h, api, uuid).status == states.BOUND
    assert rs.block(emu, 'GPU0') == ('Composed', 'compute-0')
    assert _delete(h, api, uuid).status == states.RELEASED
    _nothing_composed(emu)


def test_a_412_storm_shorter_than_the_retries_is_ridden_out(stack):
    h, api, url, emu = stack
    devices = rs.inventory(api, url)
    uuid = _gpu_lease(api, devices)
    seen = []
    emu.observe(lambda record: seen.append(record)
                if 'ResourceBlock' in record['path']
                and record['method'] == 'POST' else None)
    emu.inject('412', method='POST', path='AddResourceBlock', count=3)
    assert _bind(h, api, uuid).status == states.BOUND
    # Four tries, each with an If-Match (the ETag is never dropped).
    assert len(seen) == 4
    assert all(r['headers'].get('if-match') for r in seen)
    assert _delete(h, api, uuid).status == states.RELEASED
    _nothing_composed(emu)


def test_a_412_storm_longer_than_the_retries_fails_the_bind(stack):
    h, api, url, emu = stack
    devices = rs.inventory(api, url)
    uuid = _gpu_lease(api, devices)
    emu.inject('412', method='POST', path='AddResourceBlock', count=50)
    lease = _bind(h, api, uuid)
    assert lease.status == states.BIND_FAILED
    _nothing_composed(emu)
    emu.faults.clear()
    assert _delete(h, api, uuid).status == states.RELEASED


def test_agent_gone_after_the_fabric_bind_leaves_nothing_composed(stack):
    h, api, url, emu = stack
    devices = rs.inventory(api, url)
    uuid = _gpu_lease(api, devices)
    h.stop_agent(rs.HOST)
    lease = _bind(h, api, uuid)
    assert lease.status == states.BIND_FAILED
    assert rs.HOST in lease.fault
    # The host never confirmed the device, and the undo of the failed
    # bind removed the block from the host's system.
    _nothing_composed(emu)
    h.start_agent(rs.HOST)
    assert _bind(h, api, uuid).status == states.BOUND
    assert _delete(h, api, uuid).status == states.RELEASED
    _nothing_composed(emu)


def test_conductor_dead_after_composing_is_taken_over(stack):
    """A conductor composed the block (AddResourceBlock answered) and
    died before the host found the device: another conductor resumes the
    bind, finds the block composed already and finishes it."""
    h, api, url, emu = stack
    devices = rs.inventory(api, url)
    uuid = _gpu_lease(api, devices)
    lease = h.lease(uuid)
    host = dbapi.host_get(harness_mod.admin(), rs.HOST)
    fabric = dbapi.fabric_get(harness_mod.admin(), 'rf').as_dict()
    fabric_drivers.get_driver('redfish').bind_device(
        fabric, {'address': GPU0}, host.as_dict())
    assert rs.block(emu, 'GPU0') == ('Composed', 'compute-0')
    h.set_conductor_heartbeat('cond-dead', age_seconds=3600)
    assert lease_rows.write(harness_mod.admin(), lease.id, {
        'status': states.BINDING, 'reservation': 'cond-dead',
        'host_id': host.id})
    dbapi.action_start(harness_mod.user_context(), lease.id, 'bind')
    h.conductor.run_periodic_tasks()
    lease = rs.wait(h, uuid, [states.BOUND, states.BIND_FAILED])
    assert lease.status == states.BOUND, lease.fault
    assert rs.block(emu, 'GPU0') == ('Composed', 'compute-0')
    assert _delete(h, api, uuid).status == states.RELEASED
    _nothing_composed(emu)


def test_release_the_fabric_refused_is_finished_by_the_reconciler(
        stack):
    h, api, url, emu = stack
    devices = rs.inventory(api, url)
    uuid = _gpu_lease(api, devices)
    assert _bind(h, api, uuid).status == states.BOUND
    # The fabric refuses the unbind: the release ends in error, the block
    # still composed; once the fabric answers the reconciler finishes.
    emu.inject(method='POST', path='RemoveResourceBlock', count=100,
               kind='status', code=500)
    lease = _delete(h, api, uuid)
    assert lease.status == states.ERROR
    assert 'redfish-secret' not in lease.fault
    assert rs.block(emu, 'GPU0') == ('Composed', 'compute-0')
    emu.faults.clear()
    deadline_runs = 5
    for _ in range(deadline_runs):
        reconciler.Reconciler(h.conductor).run()
        h.conductor.wait_for_workers(timeout=60)
        if h.lease(uuid).status == states.RELEASED:
            break
    assert h.lease(uuid).status == states.RELEASED
    _nothing_composed(emu)
