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

"""Lease claims written to a real Placement in batches (one
POST /allocations for the claims that queued while the previous one was
under way), and what happens when Placement misbehaves: a storm of
generation conflicts, 503s, a restart in the middle of a churn.

Conflicts and 503s are injected into the HTTP answers composable's client
receives (the rest of each request is served by the real Placement): an
in-process Placement serves one request at a time and cannot produce
them. The restart is a real one: Placement under uWSGI on MariaDB,
stopped and started again while leases are created and deleted.
"""

import json
import threading
import time

import pytest
import requests

from composable.common import states
from composable.conductor.placement import claims as placement_claims
from composable.conductor.placement import client as pclient
from composable.conductor.placement import sync
from composable import conf
from composable.db import allocation
from tests.functional import fixtures as db_fixtures
from tests.functional.placement import base
from tests.functional import stack as stack_mod
from tests.unit.conductor import harness as h_mod

CONF = conf.CONF
MEM = 'CUSTOM_COMPOSABLE_MEMORY_MB'
GPU = 'CUSTOM_COMPOSABLE_GPU'


def _answer(status, code, detail):
    """A response as Placement writes its errors."""
    resp = requests.Response()
    resp.status_code = status
    resp.headers['Content-Type'] = 'application/json'
    resp._content = json.dumps({'errors': [{
        'status': status, 'code': code, 'title': 'injected',
        'detail': detail}]}).encode()
    return resp


class _Faulty(object):
    """The real Placement's Adapter, except that the requests ``hit``
    selects are answered ``answer()`` while ``faults`` is not 0 (each
    answer takes one; -1: forever). Counts what it forwards."""

    def __init__(self, real, hit, answer):
        self.real = real
        self.hit = hit
        self.answer = answer
        self.faults = 0
        self.injected = 0
        self.calls = []
        self.lock = threading.Lock()

    def request(self, url, method, **kwargs):
        with self.lock:
            self.calls.append((method, url))
            if self.faults and self.hit(method, url):
                self.faults -= 1 if self.faults > 0 else 0
                self.injected += 1
                return self.answer()
        return self.real.request(url, method, **kwargs)


def _allocation_writes(method, url):
    return (method == 'POST' and url == '/allocations') or (
        method == 'PUT' and url.startswith('/allocations/'))


def _conflict():
    return _answer(409, pclient.CONCURRENT_UPDATE,
                   'resource provider generation conflict (injected)')


def _unavailable():
    return _answer(503, None, 'Service Unavailable (injected)')


def _use(adapter):
    placement_claims.set_client(pclient.ReportClient(adapter,
                                                     retry_delay=0))


def _concurrently(count, fn):
    barrier = threading.Barrier(count)
    results = [None] * count
    errors = []

    def run(i):
        barrier.wait()
        try:
            results[i] = fn(i)
        except Exception as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,))
               for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not errors, errors
    return results


def _equal(harness, client):
    """Placement holds exactly what the database holds, and the periodic
    pass finds nothing to correct."""
    mem = harness.pool(harness.memory_pool)
    gpu = harness.pool(harness.gpu_pool)
    assert client.get_usages(mem.provider_uuid).get(MEM, 0) == mem.used
    assert client.get_usages(gpu.provider_uuid).get(GPU, 0) == gpu.used
    assert allocation.check_consistency(h_mod.admin()) == []
    assert sync.reconcile(h_mod.admin(), client) == []


def test_claims_queued_behind_a_request_go_in_one(harness, placement,
                                                  client):
    """While one batch is in Placement, the claims that arrive queue and
    are written together, in one request."""
    placement_claims.reconcile_pass()
    gate = threading.Event()
    posts = []
    real = placement.adapter()

    class Gated(object):
        def request(self, url, method, **kwargs):
            if method == 'POST' and url == '/allocations':
                posts.append(sorted(kwargs['json']))
                if len(posts) == 1:
                    # Held until the others have queued behind it.
                    assert gate.wait(60)
            return real.request(url, method, **kwargs)

    _use(Gated())
    writer = placement_claims.get_writer()
    first = threading.Thread(
        target=lambda: harness.create(memory_mb=1024))
    first.start()
    deadline = time.monotonic() + 60
    while not posts:
        assert time.monotonic() < deadline
        time.sleep(0.01)

    def queued():
        with writer._cond:
            return len(writer._pending)

    others = []
    threads = [threading.Thread(
        target=lambda: others.append(harness.create(device_count=1)))
        for _ in range(2)]
    for thread in threads:
        thread.start()
    while queued() < 2:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    gate.set()
    for thread in [first] + threads:
        thread.join(60)
    assert len(posts) == 2
    assert posts[1] == sorted(others)
    for uuid in others:
        assert harness.lease(uuid).status == states.RESERVED
    # Deletes: the allocations the writer made go in batches too.
    for uuid in others:
        harness.api.delete_lease(h_mod.user_context(), uuid)
    assert len(posts) == 4
    assert writer.stats['releases'] == 2
    _equal(harness, client)


def test_generation_conflict_storm(harness, placement, client):
    """Placement answers every allocation write with a generation
    conflict for a while: a batch goes again once, then each claim on its
    own with its bounded retries; leases that outlast the storm are
    reserved, the others fail with a fault saying so; nothing is counted
    twice."""
    placement_claims.reconcile_pass()
    adapter = _Faulty(placement.adapter(), _allocation_writes, _conflict)
    _use(adapter)
    started = time.monotonic()
    # A short storm: the batch and its one retry meet it, the claims
    # written alone get through.
    adapter.faults = 2
    uuids = _concurrently(4, lambda i: harness.create(memory_mb=1024))
    assert [harness.lease(u).status for u in uuids] == [states.RESERVED] * 4
    assert adapter.injected == 2
    _equal(harness, client)

    # A storm that never ends: each create fails, with its fault.
    adapter.faults = -1
    failed = _concurrently(4, lambda i: harness.create(memory_mb=1024))
    for uuid in failed:
        lease = harness.lease(uuid)
        assert lease.status == states.ALLOC_FAILED
        assert lease.fault.startswith('Placement changed too fast to claim '
                                      "this lease's capacity.")
        assert client.get_allocations(uuid)['allocations'] == {}
    adapter.faults = 0
    _equal(harness, client)
    for uuid in uuids:
        harness.api.delete_lease(h_mod.user_context(), uuid)
    _equal(harness, client)
    assert time.monotonic() - started < 60


def test_placement_answers_503(harness, placement, client):
    """503s for less than [placement]composable_unavailable_wait: the
    create waits and succeeds. For longer: it fails, its fault says
    Placement could not be reached, and nothing is held anywhere."""
    CONF.set_override('composable_unavailable_wait', 3.0, 'placement')
    placement_claims.reconcile_pass()
    adapter = _Faulty(
        placement.adapter(),
        lambda method, url: method == 'POST' and url == '/allocations',
        _unavailable)
    _use(adapter)
    adapter.faults = 2
    uuid = harness.create(memory_mb=2048, device_count=1)
    assert harness.lease(uuid).status == states.RESERVED
    assert adapter.injected == 2
    _equal(harness, client)

    CONF.set_override('composable_unavailable_wait', 0.5, 'placement')
    _use(adapter)  # a new writer, with the new wait
    adapter.faults = -1
    failed = harness.create(memory_mb=1024)
    lease = harness.lease(failed)
    assert lease.status == states.ALLOC_FAILED
    assert lease.fault.startswith('The Placement service could not be '
                                  'reached')
    assert harness.actions(failed) == [('create', 'error')]
    adapter.faults = 0
    _equal(harness, client)
    harness.api.delete_lease(h_mod.user_context(), uuid)
    _equal(harness, client)


@pytest.fixture
def uwsgi_placement(tmp_path):
    """Placement under uWSGI on a MariaDB database of its own (the lease
    churn benchmark's), which a test can stop and start again."""
    if stack_mod.uwsgi_binary() is None:
        pytest.skip('uwsgi is not installed')
    db_fixtures.check_server('mysql')
    from tools.bench import placement_server
    server = placement_server.PlacementServer(str(tmp_path))
    server.start()
    try:
        yield server
    finally:
        server.stop()


def test_placement_restarts_during_a_churn(composable_db, uwsgi_placement):
    """Leases are created and deleted from several threads while
    Placement stops and starts again: creates made while it is down wait
    for it ([placement]composable_unavailable_wait) or fail with a fault
    saying it could not be reached; afterwards Placement holds exactly
    what the database holds, and one periodic pass makes them equal."""
    server = uwsgi_placement
    with base.placement_configured(server.endpoint,
                                   composable_unavailable_wait=20.0):
        harness = h_mod.Harness(rpc_timeout=30, fabric_timeout=5)
        harness.start()
        try:
            client = placement_claims.get_client()
            placement_claims.reconcile_pass()
            stop = threading.Event()
            outcomes = []
            lock = threading.Lock()

            def churn(i):
                while not stop.is_set():
                    uuid = harness.create(memory_mb=1024)
                    lease = harness.lease(uuid)
                    with lock:
                        outcomes.append((lease.status, lease.fault))
                    if lease.status == states.RESERVED:
                        harness.api.delete_lease(h_mod.user_context(),
                                                 uuid)

            threads = [threading.Thread(target=churn, args=(i,))
                       for i in range(4)]
            for thread in threads:
                thread.start()
            deadline = time.monotonic() + 120
            while len(outcomes) < 8:
                assert time.monotonic() < deadline
                time.sleep(0.05)
            server.halt()
            before = len(outcomes)
            server.launch()
            deadline = time.monotonic() + 120
            while len(outcomes) < before + 8:
                assert time.monotonic() < deadline
                time.sleep(0.05)
            stop.set()
            for thread in threads:
                thread.join(60)
            for status, fault in outcomes:
                assert status in (states.RESERVED, states.ALLOC_FAILED)
                if status == states.ALLOC_FAILED:
                    # Down, or back with new generations while claims were
                    # under way: both fail with a clear fault, holding
                    # nothing (checked below).
                    assert fault.startswith((
                        'The Placement service could not be reached',
                        'Placement changed too fast to claim ')), fault
            # Every lease is released or failed; a release Placement did
            # not take while down is the periodic pass's to delete.
            corrections = sync.reconcile(h_mod.admin(), client)
            for line in corrections:
                assert 'holds nothing; deleted its allocations' in line
            _equal(harness, client)
            assert harness.pool(harness.memory_pool).used == 0
        finally:
            harness.stop()
