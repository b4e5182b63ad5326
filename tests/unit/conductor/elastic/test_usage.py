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

"""Usage samples of memory leases: validation, storage, pruning."""

import datetime

import pytest

from composable.common import states
from composable.common import utils
from composable import conf
from composable.conductor.elastic import usage
from composable.db import api as db_api
from tests.unit.conductor import harness as harness_mod

CONF = conf.CONF
admin = harness_mod.admin
HOST = harness_mod.HOSTS[0]
UUID = '6f0c8a5e-1111-4000-8000-000000000000'


@pytest.mark.parametrize('sample, why', [
    ({'lease_uuid': UUID, 'taken_at': '2026-11-25T10:00:00Z',
      'used_mb': 1}, 'missing size_mb'),
    ({'lease_uuid': 'x', 'taken_at': '2026-11-25T10:00:00Z', 'used_mb': 1,
      'size_mb': 2}, 'lease_uuid is not a UUID'),
    ({'lease_uuid': UUID, 'taken_at': 'noon', 'used_mb': 1, 'size_mb': 2},
     'taken_at is not an ISO 8601 time'),
    ({'lease_uuid': UUID, 'taken_at': '2999-01-01T00:00:00Z', 'used_mb': 1,
      'size_mb': 2}, 'in the future'),
    ({'lease_uuid': UUID, 'taken_at': '2026-11-25T10:00:00Z',
      'used_mb': True, 'size_mb': 2}, 'not a whole number'),
    ({'lease_uuid': UUID, 'taken_at': '2026-11-25T10:00:00Z',
      'used_mb': 3, 'size_mb': 2}, 'more than size_mb'),
    ({'lease_uuid': UUID, 'taken_at': '2026-11-25T10:00:00Z',
      'used_mb': -1, 'size_mb': 2}, 'negative'),
    ('junk', 'a mapping'),
])
def test_malformed_samples(sample, why):
    with pytest.raises(usage.BadSample, match=why):
        usage.parse_sample(sample)


def test_sample_times_are_utc():
    parsed = usage.parse_sample({
        'lease_uuid': UUID.upper(), 'taken_at': '2026-11-25T11:00:00+01:00',
        'used_mb': 1, 'size_mb': 2})
    assert parsed == {'lease_uuid': UUID,
                      'taken_at': datetime.datetime(2026, 11, 25, 10, 0, 0),
                      'used_mb': 1, 'size_mb': 2}


def test_record_keeps_only_leases_bound_on_the_host(harness):
    bound = harness.create(memory_mb=1024)
    harness.api.bind_lease(harness_mod.user_context(), bound,
                           harness.hosts[HOST].uuid)
    harness.wait(bound, states.BOUND)
    reserved = harness.create(memory_mb=1024)
    now = utils.isotime(utils.utcnow())
    sample = {'taken_at': now, 'used_mb': 5, 'size_mb': 1024}
    assert usage.record(admin(), HOST, [
        dict(sample, lease_uuid=bound), dict(sample, lease_uuid=reserved),
        dict(sample, lease_uuid=UUID), dict(sample, used_mb='x')]) == 1
    # Another host cannot write the history of a lease bound here.
    assert usage.record(admin(), harness_mod.HOSTS[1],
                        [dict(sample, lease_uuid=bound)]) == 0
    assert usage.record(admin(), HOST, 'not a list') == 0
    rows = db_api.usage_list(admin(), harness.lease(bound).id)
    assert [(r.used_mb, r.size_mb) for r in rows] == [(5, 1024)]
    assert db_api.usage_list(admin(), harness.lease(reserved).id) == []


def test_prune_deletes_only_old_samples_in_batches(harness):
    uuid = harness.create(memory_mb=1024)
    harness.api.bind_lease(harness_mod.user_context(), uuid,
                           harness.hosts[HOST].uuid)
    lease = harness.wait(uuid, states.BOUND)
    now = utils.utcnow().replace(microsecond=0)
    retention = CONF.elastic.usage_retention
    ages = [retention + 3600, retention + 10, retention + 1, retention - 60,
            10]
    db_api.usage_record(admin(), HOST, [
        {'lease_uuid': uuid, 'used_mb': i, 'size_mb': 1024,
         'taken_at': now - datetime.timedelta(seconds=age)}
        for i, age in enumerate(ages)])
    CONF.set_override('prune_batch_size', 2, 'elastic')
    try:
        assert usage.prune(admin(), now=now) == 3
    finally:
        CONF.clear_override('prune_batch_size', 'elastic')
    kept = db_api.usage_list(admin(), lease.id)
    assert [r.used_mb for r in kept] == [3, 4]
    assert usage.prune(admin(), now=now) == 0


def test_released_lease_purge_takes_its_samples(harness):
    uuid = harness.create(memory_mb=1024)
    harness.api.bind_lease(harness_mod.user_context(), uuid,
                           harness.hosts[HOST].uuid)
    lease = harness.wait(uuid, states.BOUND)
    usage.record(admin(), HOST, [{
        'lease_uuid': uuid, 'taken_at': utils.isotime(utils.utcnow()),
        'used_mb': 1, 'size_mb': 1024}])
    harness.api.delete_lease(harness_mod.user_context(), uuid)
    harness.wait(uuid, states.RELEASED)
    db_api.lease_purge(admin(), lease.id)
    assert db_api.usage_list(admin(), lease.id) == []
