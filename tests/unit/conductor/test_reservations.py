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

import threading
import time

from composable.common import exception
from composable.common import states
from composable.conductor import reservations
from composable.db import api as db_api
from tests.unit.conductor import harness as h_mod


def _lease():
    return db_api.lease_create(h_mod.admin(), {
        'project_id': 'p1', 'status': states.RESERVED})


def test_two_threads_one_gets_lease_locked(sqlite_db):
    lease = _lease()
    held = threading.Event()
    done = threading.Event()
    results = {}

    def holder():
        with reservations.lease_reservation(h_mod.admin(), lease.id,
                                            'cond-a', wait=0):
            held.set()
            done.wait(10)
        results['holder'] = 'ok'

    def contender(host):
        held.wait(10)
        try:
            with reservations.lease_reservation(h_mod.admin(), lease.id,
                                                host, wait=0.3,
                                                lease_ident=lease.uuid):
                results[host] = 'got it'
        except exception.LeaseLocked as exc:
            results[host] = exc

    threads = [threading.Thread(target=holder),
               threading.Thread(target=contender, args=('cond-a',)),
               threading.Thread(target=contender, args=('cond-b',))]
    for t in threads:
        t.start()
    threads[1].join(10)
    threads[2].join(10)
    done.set()
    threads[0].join(10)
    # The same conductor's other thread is kept out as well as another
    # conductor.
    for host in ('cond-a', 'cond-b'):
        assert isinstance(results[host], exception.LeaseLocked)
        assert lease.uuid in results[host].message
    assert results['holder'] == 'ok'
    assert db_api.lease_get_by_id(h_mod.admin(),
                                  lease.id).reservation is None


def test_waits_for_the_holder(sqlite_db):
    lease = _lease()
    first = reservations.reserve(h_mod.admin(), lease.id, 'cond-a', wait=0)
    threading.Timer(0.3, first.release).start()
    start = time.monotonic()
    with reservations.lease_reservation(h_mod.admin(), lease.id, 'cond-b',
                                        wait=5):
        assert db_api.lease_get_by_id(
            h_mod.admin(), lease.id).reservation == 'cond-b'
    assert time.monotonic() - start >= 0.25


def test_hand_off_keeps_it_until_the_worker_ends(sqlite_db):
    from concurrent import futures
    lease = _lease()
    gate = threading.Event()
    with futures.ThreadPoolExecutor(1) as executor:
        with reservations.lease_reservation(h_mod.admin(), lease.id,
                                            'cond-a', wait=0) as res:
            future = res.hand_off(executor, gate.wait, 10)
        # The with block ended, the worker still holds it.
        assert db_api.lease_get_by_id(
            h_mod.admin(), lease.id).reservation == 'cond-a'
        assert reservations.try_reserve(h_mod.admin(), lease.id,
                                        'cond-b') is None
        gate.set()
        future.result(10)
    assert db_api.lease_get_by_id(h_mod.admin(),
                                  lease.id).reservation is None
    assert not reservations.held_locally('cond-a', lease.id)


def test_released_when_the_block_raises(sqlite_db):
    lease = _lease()
    try:
        with reservations.lease_reservation(h_mod.admin(), lease.id,
                                            'cond-a', wait=0):
            raise ValueError('boom')
    except ValueError:
        pass
    assert db_api.lease_get_by_id(h_mod.admin(),
                                  lease.id).reservation is None


def test_rpc_call_on_busy_lease_is_lease_locked(harness):
    uuid = harness.create(memory_mb=1024)
    lease = harness.lease(uuid)
    other = reservations.reserve(h_mod.admin(), lease.id, 'cond-other',
                                 wait=0)
    try:
        harness.api.delete_lease(h_mod.user_context(), uuid)
    except exception.LeaseLocked:
        pass
    else:
        raise AssertionError('a busy lease was deleted')
    finally:
        other.release()
    assert harness.lease(uuid).status == states.RESERVED
