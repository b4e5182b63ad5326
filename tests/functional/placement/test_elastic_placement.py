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

"""Elastic memory leases against a real Placement: a grow and a shrink
rewrite the lease's allocation (with its consumer generation), and a grow
Placement has no room for is rolled back in the database."""

import datetime

from composable.common import states
from composable.common import utils
from composable import conf
from composable.db import allocation
from composable.db import api as dbapi
from tests.functional.placement import test_conductor_placement as base
from tests.unit.conductor import harness as h_mod

CONF = conf.CONF
MEM = base.MEM
HOST = h_mod.HOSTS[0]
POLICY = {'min_mb': 1024, 'max_mb': 4096, 'observation_window': 300,
          'prediction_window': 60, 'headroom': 0.2}


def _bound_elastic(harness, memory_mb):
    uuid = base._create(harness, memory_mb=memory_mb, elastic=dict(POLICY))
    harness.api.bind_lease(h_mod.user_context(), uuid,
                           harness.hosts[HOST].uuid)
    return harness.wait(uuid, states.BOUND)


def _report(lease, used, now, count=10):
    dbapi.usage_record(h_mod.admin(), HOST, [
        {'lease_uuid': lease.uuid, 'used_mb': used, 'size_mb':
         lease.memory_mb,
         'taken_at': now - datetime.timedelta(seconds=10 * (count - 1 - i))}
        for i in range(count)])


def _pass(harness, now):
    for future in harness.conductor.resizer.run(h_mod.admin(), now=now):
        future.result(timeout=60)
    harness.idle(60)


def test_grow_and_shrink_follow_in_placement(harness, client):
    lease = _bound_elastic(harness, 1024)
    mem = harness.pool(harness.memory_pool)
    assert base._held(client, lease.uuid) == {mem.provider_uuid: {MEM: 1024}}
    generation = client.get_allocations(lease.uuid)['consumer_generation']

    now = utils.utcnow()
    _report(lease, 1024, now)
    _pass(harness, now)
    grown = harness.lease(lease.uuid)
    assert grown.memory_mb > 1024
    assert base._held(client, lease.uuid) == {
        mem.provider_uuid: {MEM: grown.memory_mb}}
    assert client.get_allocations(lease.uuid)['consumer_generation'] > \
        generation
    assert client.get_usages(mem.provider_uuid) == {
        MEM: harness.pool(harness.memory_pool).used}

    CONF.set_override('shrink_hysteresis', 0, 'elastic')
    try:
        later = now + datetime.timedelta(seconds=100)
        _report(grown, 100, later)
        _pass(harness, later)
        _pass(harness, later + datetime.timedelta(seconds=1))
    finally:
        CONF.clear_override('shrink_hysteresis', 'elastic')
    assert harness.lease(lease.uuid).memory_mb == 1024
    assert base._held(client, lease.uuid) == {mem.provider_uuid: {MEM: 1024}}
    assert allocation.check_consistency(h_mod.admin()) == []


def test_grow_placement_has_no_room_for_is_rolled_back(harness, client):
    lease = _bound_elastic(harness, 1024)
    mem = harness.pool(harness.memory_pool)
    # Nova's instances hold the rest of the pool in Placement; the
    # database does not know.
    base._nova_instance(client, mem.provider_uuid, 7168)
    now = utils.utcnow()
    _report(lease, 1024, now)
    _pass(harness, now)
    kept = harness.lease(lease.uuid)
    assert kept.memory_mb == 1024 and len(kept.extents) == 1
    assert kept.status == states.BOUND
    assert harness.pool(harness.memory_pool).used == 1024
    assert base._held(client, lease.uuid) == {mem.provider_uuid: {MEM: 1024}}
    assert client.get_usages(mem.provider_uuid) == {MEM: 8192}
    resize = [a for a in dbapi.action_list(h_mod.admin(), kept.id)
              if a.action == 'resize']
    assert [a.result for a in resize] == ['error']
    assert 'Placement has no room' in resize[0].message
    assert allocation.check_consistency(h_mod.admin()) == []
