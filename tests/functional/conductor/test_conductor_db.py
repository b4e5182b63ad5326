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

"""The conductor on every database backend (SQLite, MariaDB, PostgreSQL,
see tests/functional/conftest.py): concurrent lease creation never
over-commits, a device picked by many is given once, reservations keep
conductors apart, and a dead conductor's lease is taken over."""


import pytest

from composable.common import exception
from composable.common import states
from composable.conductor import reservations
from composable.db import allocation
from composable.db import api as db_api
from tests import concurrency
from tests import lease_rows
from tests.unit.conductor import harness as h_mod


@pytest.fixture
def harness(db_backend):
    h = h_mod.Harness(rpc_timeout=5, fabric_timeout=5)
    h.start()
    yield h
    h.stop()


def test_concurrent_creates_never_over_commit(harness):
    # Two nodes of 4096 MiB in 1024 MiB extents: room for 8 leases.
    results = concurrency.run_concurrently(
        12, lambda i: harness.create(memory_mb=1024))
    assert not [r for r in results if isinstance(r, Exception)], results
    statuses = [harness.lease(uuid).status for uuid in results]
    assert statuses.count(states.RESERVED) == 8
    assert statuses.count(states.ALLOC_FAILED) == 4
    assert harness.pool(harness.memory_pool).used == 8192
    assert allocation.check_consistency(h_mod.admin()) == []

    gpu_results = concurrency.run_concurrently(
        6, lambda i: harness.create(device_count=1))
    statuses = [harness.lease(uuid).status for uuid in gpu_results]
    assert statuses.count(states.RESERVED) == 2
    assert harness.pool(harness.gpu_pool).used == 2
    assert allocation.check_consistency(h_mod.admin()) == []


def test_one_device_picked_by_many_is_given_once(harness):
    device = harness.devices[0].uuid
    results = concurrency.run_concurrently(
        6, lambda i: harness.create(requested_devices=[device]))
    created = [r for r in results if isinstance(r, str)]
    refused = [r for r in results if isinstance(r, Exception)]
    assert len(created) == 1, results
    assert all(isinstance(r, exception.DeviceAlreadyLeased)
               for r in refused), refused
    assert harness.lease(created[0]).status == states.RESERVED
    # Nothing was created for the refused requests.
    assert len(db_api.lease_list(h_mod.admin())) == 1
    assert allocation.check_consistency(h_mod.admin()) == []


def test_reservation_keeps_two_conductors_apart(harness):
    uuid = harness.create(memory_mb=1024)
    lease_id = harness.lease(uuid).id

    def take(i):
        return reservations.try_reserve(h_mod.admin(), lease_id,
                                        'cond-%d' % i)

    results = concurrency.run_concurrently(8, take)
    held = [r for r in results if r is not None]
    assert len(held) == 1, results
    assert harness.lease(uuid).reservation == held[0].host
    held[0].release()
    assert harness.lease(uuid).reservation is None


def test_dead_conductor_is_taken_over(harness):
    uuid = harness.create(memory_mb=2048, device_count=1)
    lease = harness.lease(uuid)
    harness.set_conductor_heartbeat('cond-dead', age_seconds=3600)
    lease_rows.write(h_mod.admin(), lease.id, {
        'status': states.BINDING, 'reservation': 'cond-dead',
        'host_id': harness.hosts['compute-0'].id})
    db_api.action_start(h_mod.user_context(), lease.id, 'bind')
    harness.conductor.run_periodic_tasks()
    lease = harness.wait(uuid, [states.BOUND, states.BIND_FAILED])
    assert lease.status == states.BOUND, lease.fault
    assert harness.actions(uuid)[-1] == ('bind', 'success')

    harness.api.delete_lease(h_mod.user_context(), uuid)
    harness.wait(uuid, states.RELEASED)
    harness.idle()
    harness.assert_nothing_live()
    assert allocation.check_consistency(h_mod.admin()) == []
