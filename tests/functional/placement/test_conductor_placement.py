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

"""The conductor claims, releases and reports through a real Placement.

A real conductor (RPC on the in-process transport, real agents) and a
real Placement (its functional fixture): leases created through the
conductor's RPC API become Placement allocations of the lease, refusals
by Placement roll the database claim back, releases delete the
allocation, and the conductor's periodic pass repairs drift.
"""

import contextlib
import datetime
import logging
import threading
import time

from keystoneauth1 import adapter as ks_adapter
from keystoneauth1 import session as ks_session
from keystoneauth1 import token_endpoint
from oslo_utils import uuidutils
import pytest

from composable.api import app as api_app
from composable.common import states
from composable.common import utils
from composable.conductor.allocator import claims as allocator
from composable.conductor.placement import claims as placement_claims
from composable.conductor.placement import client as pclient
from composable.conductor.placement import sync
from composable import conf
from composable.db import allocation
from composable.db import api as dbapi
from composable import policies
from tests.functional import fixtures as db_fixtures
from tests.functional.placement import base
from tests import lease_rows
from tests.unit.api import base as api_base
from tests.unit.conductor import harness as h_mod

CONF = conf.CONF
MEM = 'CUSTOM_COMPOSABLE_MEMORY_MB'
GPU = 'CUSTOM_COMPOSABLE_GPU'


def _create(harness, **values):
    created = harness.create(**values)
    # The conductor answers with the lease's document (RPC 1.2) or uuid.
    return created['uuid'] if isinstance(created, dict) else created


def _held(client, consumer):
    got = client.get_allocations(consumer)['allocations']
    return {rp: a['resources'] for rp, a in got.items()}


def _set_total(client, provider_uuid, total):
    """Change the memory inventory of a provider behind composable's
    back."""
    generation, inventories = client.get_inventories(provider_uuid)
    inventories[MEM].update(total=total, max_unit=total)
    client._call('PUT', '/resource_providers/%s/inventories' %
                 provider_uuid, '1.26', body={
                     'resource_provider_generation': generation,
                     'inventories': inventories})


def _providers(harness):
    mem = harness.pool(harness.memory_pool)
    gpu = harness.pool(harness.gpu_pool)
    return mem, gpu


def _unreachable_client():
    """A client for a Placement nobody serves: every call fails to
    connect (port 9, discard, is closed on the test machine)."""
    auth = token_endpoint.Token('http://127.0.0.1:9/placement', 'admin')
    adapter = ks_adapter.Adapter(ks_session.Session(auth=auth),
                                 service_type='placement')
    return pclient.ReportClient(adapter, retry_delay=0)


def _nova_instance(client, pool_provider, amount, rc=MEM):
    """An instance's allocation as Nova's scheduler writes it: the pool's
    resources and a compute node's VCPU, under the instance's uuid."""
    compute = client.create_provider(pclient.new_provider_uuid(),
                                     'cn-%s' % pclient.new_provider_uuid())
    client._call('PUT', '/resource_providers/%s/inventories' %
                 compute['uuid'], '1.26', body={
                     'resource_provider_generation': compute['generation'],
                     'inventories': {'VCPU': {'total': 8}}})
    instance = pclient.new_provider_uuid()
    client.put_allocations(instance, {pool_provider: {rc: amount},
                                      compute['uuid']: {'VCPU': 1}},
                           'p2', 'u2', consumer_type='INSTANCE')
    return instance


def test_create_claims_the_lease_in_placement(harness, client):
    uuid = _create(harness, memory_mb=2048, device_count=1)
    lease = harness.lease(uuid)
    assert lease.status == states.RESERVED
    assert lease.reservation is None
    assert lease.placement_consumer == uuid
    mem, gpu = _providers(harness)
    # The pools had never been reported: the claim made their providers.
    assert mem.provider_uuid and gpu.provider_uuid
    got = client.get_allocations(uuid)
    assert {rp: a['resources'] for rp, a in got['allocations'].items()} == {
        mem.provider_uuid: {MEM: 2048}, gpu.provider_uuid: {GPU: 1}}
    assert got['project_id'] == h_mod.PROJECT
    assert got['user_id'] == 'u1'
    assert got['consumer_type'] == pclient.CONSUMER_TYPE
    # Placement's usage is the database's.
    assert client.get_usages(mem.provider_uuid) == {MEM: mem.used}
    assert client.get_usages(gpu.provider_uuid) == {GPU: gpu.used}
    assert mem.used == 2048 and gpu.used == 1
    assert harness.actions(uuid) == [('create', 'success')]


def test_placement_short_of_capacity_rolls_the_claim_back(harness, client):
    placement_claims.reconcile_pass()
    mem = harness.pool(harness.memory_pool)
    # Nova gave most of the pool to an instance; the database does not
    # know (its 8 GiB are all free).
    instance = _nova_instance(client, mem.provider_uuid, 7168)
    before = harness.node_allocated()

    uuid = _create(harness, memory_mb=2048, device_count=1)
    lease = harness.lease(uuid)
    assert lease.status == states.ALLOC_FAILED
    assert lease.reservation is None
    assert lease.fault.startswith(
        'Pool memory-pool has no room left in Placement for this lease')
    assert 'delete this lease and try again later, or ask for less' in \
        lease.fault
    assert harness.actions(uuid) == [('create', 'error')]
    # The database claim is undone: counters, extents, devices.
    assert harness.pool(harness.memory_pool).used == 0
    assert harness.pool(harness.gpu_pool).used == 0
    assert harness.node_allocated() == before
    assert lease.extents == [] and lease.devices == []
    assert lease.memory_pool_id is None and lease.device_pool_id is None
    assert allocation.check_consistency(h_mod.admin()) == []
    # Nothing in Placement for the lease; Nova's instance untouched.
    assert _held(client, uuid) == {}
    assert client.get_usages(mem.provider_uuid) == {MEM: 7168}
    assert _held(client, instance)[mem.provider_uuid] == {MEM: 7168}

    # What is left fits.
    uuid = _create(harness, memory_mb=1024)
    assert harness.lease(uuid).status == states.RESERVED
    assert client.get_usages(mem.provider_uuid) == {MEM: 8192}


def test_claim_catches_up_with_inventory_placement_lacks(harness, client):
    placement_claims.reconcile_pass()
    mem = harness.pool(harness.memory_pool)
    # A memory node added after the last pass: the database has 12 GiB,
    # Placement's inventory still says 8.
    dbapi.memory_node_create(h_mod.admin(), {
        'name': 'memory-2', 'pool_id': mem.id, 'capacity_mb': 4096,
        'portal': '127.0.0.1:3260'})
    assert client.get_inventories(mem.provider_uuid)[1][MEM]['total'] == \
        8192
    uuid = _create(harness, memory_mb=10240)
    assert harness.lease(uuid).status == states.RESERVED
    assert client.get_inventories(mem.provider_uuid)[1][MEM]['total'] == \
        12288
    assert _held(client, uuid) == {mem.provider_uuid: {MEM: 10240}}


class _AfterPut(object):
    """An Adapter that calls ``hook(url)`` after each successful PUT of
    allocations (another party acting between our write and our check)."""

    def __init__(self, real, hook):
        self.real = real
        self.hook = hook

    def request(self, url, method, **kwargs):
        resp = self.real.request(url, method, **kwargs)
        if (method == 'PUT' and url.startswith('/allocations/') and
                resp.status_code == 204):
            self.hook(url)
        return resp


def test_claim_withdrawn_when_placement_is_over_capacity(harness, placement,
                                                         client):
    # One lease per request: each claim reads the usages back.
    CONF.set_override('composable_claim_batch_size', 0, 'placement')
    placement_claims.reconcile_pass()
    mem = harness.pool(harness.memory_pool)
    other = _nova_instance(client, mem.provider_uuid, 4096)

    def shrink(url):
        # Right after our write, the provider holds more than it has: as
        # when Placement accepts racing writes beyond the capacity.
        _set_total(client, mem.provider_uuid, 4096)

    placement_claims.set_client(pclient.ReportClient(
        _AfterPut(placement.adapter(), shrink), retry_delay=0))
    uuid = _create(harness, memory_mb=2048)
    lease = harness.lease(uuid)
    assert lease.status == states.ALLOC_FAILED
    assert lease.fault.startswith(
        'Pool memory-pool has no room left in Placement')
    assert _held(client, uuid) == {}
    assert _held(client, other)[mem.provider_uuid] == {MEM: 4096}
    assert harness.pool(harness.memory_pool).used == 0
    assert allocation.check_consistency(h_mod.admin()) == []


class _AfterBatch(object):
    """An Adapter that calls ``hook()`` once, after the first successful
    POST /allocations (a batch of claims)."""

    def __init__(self, real, hook):
        self.real = real
        self.hook = hook

    def request(self, url, method, **kwargs):
        resp = self.real.request(url, method, **kwargs)
        if (method == 'POST' and url == '/allocations' and
                resp.status_code == 204 and self.hook):
            hook, self.hook = self.hook, None
            hook()
        return resp


def test_batch_withdrawn_when_placement_is_over_capacity(harness, placement,
                                                         client):
    """A batch is checked against the capacity the conductor knows (one
    usage read per provider per batch): a concurrent writer that made
    Placement exceed it (as Placement's own race does) gets the batch's
    claims withdrawn and written one by one, and the one that does not
    fit fails."""
    placement_claims.reconcile_pass()
    mem = harness.pool(harness.memory_pool)
    other = _nova_instance(client, mem.provider_uuid, 4096)
    racing = []

    def nova_races():
        # Placement's race, reproduced: Nova's claim lands beyond the
        # capacity (the inventory is raised for it and lowered again).
        _set_total(client, mem.provider_uuid, 16384)
        racing.append(_nova_instance(client, mem.provider_uuid, 4096))
        _set_total(client, mem.provider_uuid, 8192)

    placement_claims.set_client(pclient.ReportClient(
        _AfterBatch(placement.adapter(), nova_races), retry_delay=0))
    uuid = _create(harness, memory_mb=2048)
    lease = harness.lease(uuid)
    assert lease.status == states.ALLOC_FAILED
    assert lease.fault.startswith(
        'Pool memory-pool has no room left in Placement')
    assert _held(client, uuid) == {}
    assert _held(client, other)[mem.provider_uuid] == {MEM: 4096}
    assert _held(client, racing[0])[mem.provider_uuid] == {MEM: 4096}
    assert harness.pool(harness.memory_pool).used == 0
    assert allocation.check_consistency(h_mod.admin()) == []


def test_placement_unreachable_at_create(harness, client):
    placement_claims.set_client(_unreachable_client())
    uuid = _create(harness, memory_mb=1024)
    lease = harness.lease(uuid)
    assert lease.status == states.ALLOC_FAILED
    assert lease.fault.startswith('The Placement service could not be '
                                  'reached')
    assert harness.pool(harness.memory_pool).used == 0
    assert allocation.check_consistency(h_mod.admin()) == []


def test_delete_deletes_the_allocation(harness, client):
    uuid = _create(harness, memory_mb=1024, device_count=1)
    mem, gpu = _providers(harness)
    assert _held(client, uuid)
    # Never bound: the quick release path.
    harness.api.delete_lease(h_mod.user_context(), uuid)
    assert harness.lease(uuid).status == states.RELEASED
    assert _held(client, uuid) == {}
    assert client.get_usages(mem.provider_uuid) == {MEM: 0}
    assert client.get_usages(gpu.provider_uuid) == {GPU: 0}


def test_release_flow_deletes_the_allocation(harness, client):
    uuid = _create(harness, memory_mb=1024, device_count=1)
    harness.api.bind_lease(h_mod.user_context(), uuid,
                           harness.hosts['compute-0'].uuid)
    harness.wait(uuid, states.BOUND)
    mem, gpu = _providers(harness)
    assert _held(client, uuid) == {mem.provider_uuid: {MEM: 1024},
                                   gpu.provider_uuid: {GPU: 1}}
    harness.api.delete_lease(h_mod.user_context(), uuid)
    harness.wait(uuid, states.RELEASED)
    assert _held(client, uuid) == {}
    assert client.get_usages(mem.provider_uuid) == {MEM: 0}


def test_placement_down_at_delete_then_the_pass_cleans_up(harness, client,
                                                          caplog):
    placement_claims.reconcile_pass()
    uuid = _create(harness, memory_mb=1024)
    mem = harness.pool(harness.memory_pool)
    placement_claims.set_client(_unreachable_client())
    caplog.set_level(logging.INFO)

    harness.api.delete_lease(h_mod.user_context(), uuid)
    # The release stands: the capacity is back in the pool.
    assert harness.lease(uuid).status == states.RELEASED
    assert harness.pool(harness.memory_pool).used == 0
    assert ('Could not delete the Placement allocations of released lease '
            '%s' % uuid) in caplog.text
    # Placement still counts it.
    assert _held(client, uuid) == {mem.provider_uuid: {MEM: 1024}}

    placement_claims.set_client(None)  # Placement is back
    corrections = placement_claims.reconcile_pass()
    assert corrections == [
        'provider %s (memory-pool): lease %s is released '
        'and holds nothing; deleted its allocations' % (mem.provider_uuid,
                                                        uuid)]
    assert ('Placement reconcile: %s' % corrections[0]) in caplog.text
    assert _held(client, uuid) == {}
    assert client.get_usages(mem.provider_uuid) == {MEM: 0}


def test_conductor_dies_between_the_two_claims(harness, client):
    placement_claims.reconcile_pass()
    # A conductor inserted and claimed the lease in the database (under
    # its reservation) and died before writing Placement.
    dead = 'dead-conductor'
    harness.set_conductor_heartbeat(dead, 0)
    values = placement_claims.prepare_create(
        {'project_id': h_mod.PROJECT, 'user_id': 'u1', 'memory_mb': 2048},
        dead)
    uuid, status = allocator.create_and_allocate(h_mod.admin(), values)
    assert status == states.RESERVED
    assert harness.lease(uuid).reservation == dead
    assert _held(client, uuid) == {}

    harness.set_conductor_heartbeat(dead, 3600)
    harness.conductor.run_periodic_tasks()  # breaks its reservation
    assert harness.lease(uuid).reservation is None
    corrections = placement_claims.reconcile_pass()
    assert corrections == [
        'lease %s (reserved): allocations were missing in Placement; '
        'created %s=2048 on %s' % (uuid, MEM,
                                   harness.pool(
                                       harness.memory_pool).provider_uuid)]
    mem = harness.pool(harness.memory_pool)
    assert _held(client, uuid) == {mem.provider_uuid: {MEM: 2048}}


def _start_due(harness, uuid):
    lease = harness.lease(uuid)
    lease_rows.write(h_mod.admin(), lease.id,
                     {'start_at': utils.utcnow() -
                      datetime.timedelta(seconds=1)})
    harness.conductor.run_periodic_tasks()
    harness.idle()
    return harness.wait(uuid, [states.RESERVED, states.ALLOC_FAILED])


def test_deferred_start_claims_in_placement(harness, client):
    later = utils.isotime(utils.utcnow() + datetime.timedelta(hours=1))
    uuid = _create(harness, memory_mb=1024, start_at=later)
    assert harness.lease(uuid).status == states.REQUESTED
    assert _held(client, uuid) == {}
    lease = _start_due(harness, uuid)
    assert lease.status == states.RESERVED
    mem = harness.pool(harness.memory_pool)
    assert _held(client, uuid) == {mem.provider_uuid: {MEM: 1024}}
    assert harness.actions(uuid) == [('create', 'success'),
                                     ('start', 'success')]


def test_deferred_start_refused_by_placement(harness, client):
    placement_claims.reconcile_pass()
    mem = harness.pool(harness.memory_pool)
    later = utils.isotime(utils.utcnow() + datetime.timedelta(hours=1))
    uuid = _create(harness, memory_mb=2048, start_at=later)
    _nova_instance(client, mem.provider_uuid, 8192)
    lease = _start_due(harness, uuid)
    assert lease.status == states.ALLOC_FAILED
    assert 'no room left in Placement' in lease.fault
    assert harness.actions(uuid)[-1] == ('start', 'error')
    assert harness.pool(harness.memory_pool).used == 0
    assert _held(client, uuid) == {}


def test_periodic_pass_repairs_drift(composable_db, placement_conf, client,
                                     caplog, monkeypatch):
    """The conductor's periodic Placement pass finds and repairs drift
    made behind its back. The pass is held until the drift is in place,
    so it can neither race the injection nor repair half of it."""
    caplog.set_level(logging.INFO)
    CONF.set_override('composable_reconcile_interval', 1, 'placement')
    drift_made = threading.Event()
    passes = []
    real_pass = placement_claims.reconcile_pass

    def held_pass():
        if not drift_made.is_set():
            return []
        corrections = real_pass()
        passes.append(corrections)
        return corrections

    # loops() hands the conductor's thread whatever reconcile_pass is
    # when the conductor starts.
    monkeypatch.setattr(placement_claims, 'reconcile_pass', held_pass)
    harness = h_mod.Harness(rpc_timeout=5, fabric_timeout=5)
    harness.start()
    try:
        assert any(t.name == 'conductor-placement'
                   for t in harness.conductor._threads)
        uuid = _create(harness, memory_mb=1024)
        mem = harness.pool(harness.memory_pool)
        assert _held(client, uuid) == {mem.provider_uuid: {MEM: 1024}}
        # Someone edits the pool's inventory and deletes the lease's
        # allocation behind composable's back.
        _set_total(client, mem.provider_uuid, 65536)
        client._call('DELETE', '/allocations/%s' % uuid, '1.38',
                     ok=(204,))
        drift_made.set()
        # The conductor's own thread runs the pass: wait for it.
        deadline = time.monotonic() + 120
        while not passes:
            assert time.monotonic() < deadline, (
                'the periodic Placement pass did not run within 120 s')
            time.sleep(0.1)
        assert client.get_inventories(mem.provider_uuid)[1][MEM][
            'total'] == 8192
        assert _held(client, uuid) == {mem.provider_uuid: {MEM: 1024}}
        assert ('pool memory-pool: set the inventory of provider %s to '
                '%s total=8192' % (mem.provider_uuid, MEM)) in caplog.text
        assert ('lease %s (reserved): allocations were missing in '
                'Placement' % uuid) in caplog.text
    finally:
        harness.stop()


def test_reconcile_spares_a_lease_created_during_the_pass(
        harness, client, monkeypatch):
    """The pass reads the leases, then the providers' consumers. A lease
    created and claimed in between is in Placement but not in what the
    pass read: it is looked up again, not deleted as an orphan."""
    placement_claims.reconcile_pass()
    before = sync._load(h_mod.admin())
    uuid = _create(harness, memory_mb=1024)
    mem = harness.pool(harness.memory_pool)
    assert _held(client, uuid) == {mem.provider_uuid: {MEM: 1024}}
    monkeypatch.setattr(sync, '_load', lambda context: before)
    assert placement_claims.reconcile_pass() == []
    assert _held(client, uuid) == {mem.provider_uuid: {MEM: 1024}}
    # A consumer that is no lease at all is still an orphan.
    stranger = uuidutils.generate_uuid()
    client.put_allocations(stranger, {mem.provider_uuid: {MEM: 1024}},
                           'p1', 'u1')
    corrections = placement_claims.reconcile_pass()
    assert corrections == [
        'provider %s (memory-pool): consumer %s is no lease composable '
        'knows; deleted its allocations' % (mem.provider_uuid, stranger)]
    assert _held(client, stranger) == {}
    assert _held(client, uuid) == {mem.provider_uuid: {MEM: 1024}}


def test_nova_claimed_lease_is_never_claimed_or_released(harness, client):
    placement_claims.reconcile_pass()
    mem = harness.pool(harness.memory_pool)
    instance = _nova_instance(client, mem.provider_uuid, 2048)
    assert placement_claims.instance_pool_allocations(client, instance) == {
        mem.uuid: {MEM: 2048}}

    # The lease made from the instance's allocation: no claim of its own.
    uuid, status = allocator.create_and_allocate(h_mod.admin(), {
        'project_id': 'p2', 'user_id': 'u2', 'memory_mb': 2048,
        'requested_pools': [mem.uuid], 'instance_uuid': instance,
        'placement_consumer': instance})
    assert status == states.RESERVED
    assert placement_claims.claim(h_mod.admin(), harness.lease(uuid),
                                  'create') == states.RESERVED
    assert placement_claims.reconcile_pass() == []
    assert _held(client, uuid) == {}
    assert client.get_usages(mem.provider_uuid) == {MEM: 2048}

    harness.api.delete_lease(h_mod.user_context('p2'), uuid)
    assert harness.lease(uuid).status == states.RELEASED
    # Nova's allocation is Nova's to delete.
    assert _held(client, instance)[mem.provider_uuid] == {MEM: 2048}
    assert placement_claims.reconcile_pass() == []


def _race_creates(harness, count, **values):
    barrier = threading.Barrier(count)
    uuids = []
    lock = threading.Lock()

    def create():
        barrier.wait()
        uuid = _create(harness, **values)
        with lock:
            uuids.append(uuid)

    threads = [threading.Thread(target=create) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return {uuid: harness.lease(uuid).status for uuid in uuids}


@pytest.fixture(params=['mysql', 'postgresql'])
def server_stack(request, tmp_path):
    """composable's database and Placement's on a database server (both
    MariaDB or both PostgreSQL), and a conductor: claims made at the same
    time really race, in composable's database and in Placement's."""
    backend = request.param
    with db_fixtures.database(backend, tmpdir=str(tmp_path)):
        with db_fixtures.TestDatabase(backend) as placement_url:
            placement = base.RealPlacement(placement_url)
            placement.setUp()
            try:
                with base.placement_configured(placement.endpoint):
                    harness = h_mod.Harness(rpc_timeout=10,
                                            fabric_timeout=5)
                    harness.start()
                    try:
                        yield harness, placement.client()
                    finally:
                        harness.stop()
            finally:
                placement.cleanUp()


@pytest.mark.parametrize('limit', ['database', 'placement'])
def test_creates_race_for_the_last_capacity(server_stack, limit):
    """One conductor: exactly one create wins, in both databases."""
    harness, client = server_stack
    placement_claims.reconcile_pass()
    mem = harness.pool(harness.memory_pool)
    if limit == 'database':
        # 2 GiB left in the database (and so in Placement).
        first = _create(harness, memory_mb=6144)
        assert harness.lease(first).status == states.RESERVED
        others = {first}
    else:
        # 8 GiB free in the database; Nova holds 6 of them in Placement.
        _nova_instance(client, mem.provider_uuid, 6144)
        others = set()

    # Four creates at once for room for one.
    statuses = _race_creates(harness, 4, memory_mb=2048)
    winners = [u for u, s in statuses.items() if s == states.RESERVED]
    losers = [u for u, s in statuses.items() if s == states.ALLOC_FAILED]
    assert len(winners) == 1 and len(losers) == 3, statuses
    # Every creation's reservation was released, whatever the outcome.
    assert [u for u in statuses if harness.lease(u).reservation] == []
    winner = winners[0]
    assert _held(client, winner) == {mem.provider_uuid: {MEM: 2048}}
    for loser in losers:
        assert _held(client, loser) == {}
    assert client.get_usages(mem.provider_uuid) == {MEM: 8192}
    used = 2048 + (6144 if limit == 'database' else 0)
    assert harness.pool(harness.memory_pool).used == used
    assert allocation.check_consistency(h_mod.admin()) == []
    # Placement and the database agree on who holds what.
    held = {c for c in client.get_provider_allocations(mem.provider_uuid)
            if c in set(statuses) | others}
    assert held == {winner} | others
    assert sync.reconcile(h_mod.admin(), client) == []


def test_conductors_race_never_over_commit(server_stack, monkeypatch):
    """Several conductors (no lock shared between their claims) and
    Placement short of room: Placement alone may accept more than fits
    (see placement_claims._check_capacity); what composable keeps never
    exceeds the capacity, and the database agrees with Placement."""
    harness, client = server_stack
    monkeypatch.setattr(placement_claims, '_providers_locked',
                        lambda providers: contextlib.nullcontext())
    placement_claims.reconcile_pass()
    mem = harness.pool(harness.memory_pool)
    instance = _nova_instance(client, mem.provider_uuid, 6144)
    for _ in range(3):
        statuses = _race_creates(harness, 4, memory_mb=2048)
        winners = {u for u, s in statuses.items() if s == states.RESERVED}
        assert len(winners) <= 1, statuses
        assert set(statuses.values()) <= {states.RESERVED,
                                          states.ALLOC_FAILED}
        assert client.get_usages(mem.provider_uuid)[MEM] <= 8192
        holders = set(client.get_provider_allocations(mem.provider_uuid))
        assert holders == {instance} | winners
        assert harness.pool(harness.memory_pool).used == 2048 * len(
            winners)
        assert allocation.check_consistency(h_mod.admin()) == []
        for uuid in winners:
            harness.api.delete_lease(h_mod.user_context(), uuid)
        assert client.get_usages(mem.provider_uuid)[MEM] == 6144


def _wait_for(check, timeout=120):
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, 'gave up waiting'
        time.sleep(0.1)


def test_pool_changes_through_the_api_reach_placement(harness, client):
    policies.reset()
    api = api_base.Client(api_app.setup_app('noauth'), 'admin')
    made = api.post('/v1/pools', {'name': 'mem2', 'kind': 'memory',
                                  'fabric': 'fab', 'step_size': 512,
                                  'traits': ['CUSTOM_RDMA']})
    assert made.status == 201, made

    def provider_uuid():
        return dbapi.pool_get(h_mod.admin(), 'mem2').provider_uuid

    # Created in Placement by a conductor, without waiting for its
    # periodic pass (there is none in this test).
    uuid = _wait_for(provider_uuid)
    provider = client.get_provider(uuid)
    assert provider['name'] == 'composable-pool-mem2'
    # The provider is recorded first, its traits set after: wait for them.
    _wait_for(lambda: 'CUSTOM_RDMA' in client.get_traits(uuid)[1])
    assert client.get_inventories(uuid)[1] == {}  # no memory node yet

    def inventory():
        return client.get_inventories(uuid)[1].get(MEM)

    # A memory node added: the pool's total, and its inventory, grow
    # without a pool change.
    node = api.post('/v1/memory_nodes', {'name': 'mn-9', 'pool': 'mem2',
                                         'capacity_mb': 4096})
    assert node.status == 201, node
    inv = _wait_for(inventory)
    assert (inv['total'], inv['reserved']) == (4096, 0)
    changed = api.patch('/v1/pools/mem2', {'reserved': 1024})
    assert changed.status == 200, changed

    _wait_for(lambda: (inventory() or {}).get('reserved') == 1024)
    inv = inventory()
    assert (inv['total'], inv['reserved'], inv['step_size']) == (
        4096, 1024, 512)
    grown = api.patch('/v1/memory_nodes/mn-9', {'capacity_mb': 6144})
    assert grown.status == 200, grown
    _wait_for(lambda: inventory()['total'] == 6144)

    assert api.delete('/v1/memory_nodes/mn-9').status == 204
    _wait_for(lambda: inventory() is None)
    assert api.delete('/v1/pools/mem2').status == 204
    _wait_for(lambda: client.get_provider(uuid) is None)
