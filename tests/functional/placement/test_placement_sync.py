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

"""composable's report client and reconciler against a real Placement."""

from keystoneauth1 import loading as ks_loading
import pytest

from composable.conductor.placement import client as pclient
from composable.conductor.placement import sync
from composable import conf
from composable.db import api as dbapi
from tests.functional.placement import base

AGG = '6f1a0c1e-52f5-4bb1-8a3a-0d6f3b1c9a11'
MEM = 'CUSTOM_COMPOSABLE_MEMORY_MB'
GPU = 'CUSTOM_COMPOSABLE_GPU'

pytestmark = pytest.mark.usefixtures('composable_db')


class HookedAdapter(object):
    """Forwards to a real Adapter, calling ``hook(method, url)`` first."""

    def __init__(self, real, hook):
        self.real = real
        self.hook = hook
        self.calls = []

    def request(self, url, method, **kwargs):
        self.calls.append((method, url))
        self.hook(method, url)
        return self.real.request(url, method, **kwargs)


def _get(client, url, version='1.38'):
    return client._call('GET', url, version)


def test_sync_pool_creates_class_provider_traits_aggregate_inventory(
        client):
    pool = base.memory_pool(aggregate=AGG, reserved=1024,
                            traits=['CUSTOM_RDMA', 'HW_CPU_X86_AVX2'])
    corrections = sync.sync_pool(pool, client)
    assert len(corrections) == 4, corrections
    assert 'was missing in Placement; created it' in corrections[0]

    uuid = dbapi.pool_get(base.admin(), pool.uuid).provider_uuid
    assert uuid and uuid == pool.provider_uuid
    provider = client.get_provider(uuid)
    assert provider['name'] == 'composable-pool-mem'
    assert _get(client, '/resource_classes/%s' % MEM, '1.7')['name'] == MEM
    _, traits = client.get_traits(uuid)
    assert traits == {'MISC_SHARES_VIA_AGGREGATE', 'CUSTOM_COMPOSABLE_POOL',
                      'CUSTOM_RDMA', 'HW_CPU_X86_AVX2'}
    _, aggregates = client.get_aggregates(uuid)
    assert aggregates == {AGG}
    _, inventories = client.get_inventories(uuid)
    assert inventories == {MEM: {
        'total': 8192, 'reserved': 1024, 'min_unit': 1024,
        'max_unit': 8192, 'step_size': 1024, 'allocation_ratio': 1.0}}
    # Found by the trait that marks composable's providers.
    assert [p['uuid'] for p in client.list_providers()] == [uuid]

    # A second pass has nothing to do.
    assert sync.sync_pool(dbapi.pool_get(base.admin(), pool.uuid),
                          client) == []


def test_sync_pool_follows_pool_changes(client):
    pool = base.memory_pool(aggregate=AGG)
    sync.sync_pool(pool, client)
    pool = dbapi.pool_update(base.admin(), pool.uuid,
                             {'name': 'mem2', 'reserved': 2048,
                              'traits': ['CUSTOM_SLOW']})
    pool = dbapi.pool_get(base.admin(), pool.uuid)
    corrections = sync.sync_pool(pool, client)
    assert any('renamed resource provider' in c for c in corrections)
    assert client.get_provider(pool.provider_uuid)['name'] == \
        'composable-pool-mem2'
    assert client.get_inventories(pool.provider_uuid)[1][MEM][
        'reserved'] == 2048
    assert 'CUSTOM_SLOW' in client.get_traits(pool.provider_uuid)[1]


def test_sync_pool_adopts_provider_by_name(client):
    pool = base.memory_pool(aggregate=AGG)
    made = client.create_provider(pclient.new_provider_uuid(),
                                  'composable-pool-mem')
    corrections = sync.sync_pool(pool, client)
    assert 'adopted existing resource provider' in corrections[0]
    assert dbapi.pool_get(base.admin(), pool.uuid).provider_uuid == \
        made['uuid']


def test_lease_allocation_with_consumer_generation(client):
    mem = base.memory_pool(aggregate=AGG)
    gpu = base.gpu_pool(mem.fabric_id)
    sync.sync_pool(mem, client)
    sync.sync_pool(gpu, client)
    mem = dbapi.pool_get(base.admin(), mem.uuid)
    gpu = dbapi.pool_get(base.admin(), gpu.uuid)

    lease = base.allocated_lease(memory_mb=3072, device_count=1)
    assert sync.claim_lease(lease, client) is True
    got = client.get_allocations(lease.uuid)
    assert {rp: a['resources'] for rp, a in got['allocations'].items()} == {
        mem.provider_uuid: {MEM: 3072}, gpu.provider_uuid: {GPU: 1}}
    assert got['project_id'] == 'p1'
    assert got['user_id'] == 'u1'
    assert got['consumer_type'] == pclient.CONSUMER_TYPE
    generation = got['consumer_generation']
    assert generation == 1
    assert client.get_usages(mem.provider_uuid) == {MEM: 3072}

    # Idempotent: nothing written, the consumer generation stays.
    assert sync.claim_lease(lease, client) is False
    assert client.get_allocations(lease.uuid)['consumer_generation'] == \
        generation

    # A stale consumer generation is refused by Placement itself.
    with pytest.raises(pclient.PlacementError) as err:
        client._call('PUT', '/allocations/%s' % lease.uuid, '1.38', body={
            'allocations': {mem.provider_uuid: {'resources': {MEM: 1024}}},
            'consumer_generation': None, 'project_id': 'p1',
            'user_id': 'u1', 'consumer_type': 'COMPOSABLE_LEASE'},
            ok=(204,))
    assert err.value.status == 409
    assert err.value.placement_code == pclient.CONCURRENT_UPDATE

    assert sync.release_lease(lease, client) is True
    assert client.get_allocations(lease.uuid)['allocations'] == {}
    assert client.get_usages(mem.provider_uuid) == {MEM: 0}
    assert sync.release_lease(lease, client) is False


def test_provider_generation_conflict_is_retried(placement):
    other = placement.client()
    bumped = []

    def bump_once(method, url):
        # Between our read of the provider generation and our write,
        # someone else changes the provider (its generation moves on).
        if method == 'PUT' and url.endswith('/inventories') and not bumped:
            uuid = url.split('/')[2]
            generation, _ = other.get_traits(uuid)
            other._call('PUT', '/resource_providers/%s/traits' % uuid,
                        '1.6', body={'resource_provider_generation':
                                     generation,
                                     'traits': ['CUSTOM_SOMEONE_ELSE']})
            bumped.append(uuid)

    other.ensure_traits(['CUSTOM_SOMEONE_ELSE'])
    hooked = HookedAdapter(placement.adapter(), bump_once)
    client = pclient.ReportClient(hooked, retry_delay=0)
    pool = base.memory_pool(aggregate=AGG)
    sync.sync_pool(pool, client)

    assert bumped
    inventory_puts = [c for c in hooked.calls
                      if c[0] == 'PUT' and c[1].endswith('/inventories')]
    assert len(inventory_puts) == 2  # the conflict, then the retry
    _, inventories = other.get_inventories(bumped[0])
    assert inventories[MEM]['total'] == 8192


def test_consumer_generation_conflict_is_retried(placement):
    mem = base.memory_pool(aggregate=AGG)
    plain = placement.client()
    sync.sync_pool(mem, plain)
    mem = dbapi.pool_get(base.admin(), mem.uuid)
    lease = base.allocated_lease(memory_mb=2048)
    raced = []

    def race_once(method, url):
        if (method == 'PUT' and url == '/allocations/%s' % lease.uuid
                and not raced):
            # Someone else writes the same consumer first.
            plain.put_allocations(lease.uuid,
                                  {mem.provider_uuid: {MEM: 1024}},
                                  'p1', 'u1')
            raced.append(True)

    hooked = HookedAdapter(placement.adapter(), race_once)
    client = pclient.ReportClient(hooked, retry_delay=0)
    assert sync.claim_lease(lease, client) is True
    assert raced
    puts = [c for c in hooked.calls if c[0] == 'PUT']
    assert len(puts) == 2
    got = plain.get_allocations(lease.uuid)
    assert got['allocations'][mem.provider_uuid]['resources'] == {MEM: 2048}


def test_generation_conflicts_give_up_after_the_retries(placement):
    other = placement.client()
    other.ensure_traits(['CUSTOM_X0', 'CUSTOM_X1', 'CUSTOM_X2'])
    count = []

    def always_bump(method, url):
        if method == 'PUT' and url.endswith('/inventories'):
            uuid = url.split('/')[2]
            generation, _ = other.get_traits(uuid)
            other._call('PUT', '/resource_providers/%s/traits' % uuid,
                        '1.6', body={'resource_provider_generation':
                                     generation,
                                     'traits': ['CUSTOM_X%d' %
                                                (len(count) % 3)]})
            count.append(1)

    client = pclient.ReportClient(
        HookedAdapter(placement.adapter(), always_bump), retries=2,
        retry_delay=0)
    pool = base.memory_pool(aggregate=AGG)
    with pytest.raises(pclient.GenerationConflict):
        sync.sync_pool(pool, client)
    assert len(count) == 3


def test_reconcile_repairs_drift_both_ways(client):
    ctx = base.admin()
    mem = base.memory_pool(aggregate=AGG)
    gpu = base.gpu_pool(mem.fabric_id)
    gone = base.memory_pool(name='gone', aggregate=AGG)
    lease = base.allocated_lease(memory_mb=2048, device_count=1)
    old = base.allocated_lease(memory_mb=1024)

    # First pass: providers and the leases' allocations are created.
    corrections = sync.reconcile(ctx, client)
    text = '\n'.join(corrections)
    for pool in ('mem', 'gpu', 'gone'):
        assert 'pool %s: resource provider' % pool in text
    assert 'lease %s (reserved): allocations were missing' % lease.uuid \
        in text
    assert sync.reconcile(ctx, client) == []

    mem = dbapi.pool_get(ctx, mem.uuid)
    gpu = dbapi.pool_get(ctx, gpu.uuid)
    gone = dbapi.pool_get(ctx, gone.uuid)

    # Drift 1: someone deletes the lease's allocations behind our back.
    client._call('DELETE', '/allocations/%s' % lease.uuid, '1.38',
                 ok=(204,))
    # Drift 2: and changes the pool's inventory.
    generation, inventories = client.get_inventories(mem.provider_uuid)
    inventories[MEM]['total'] = 100 * 1024
    inventories[MEM]['max_unit'] = 100 * 1024
    client._call('PUT', '/resource_providers/%s/inventories' %
                 mem.provider_uuid, '1.26',
                 body={'resource_provider_generation': generation,
                       'inventories': inventories})
    # Drift 3: a lease was released but its allocation stayed.
    old = base.released(old)
    # Drift 4: an allocation of a consumer nobody knows, only on a pool.
    stray = pclient.new_provider_uuid()
    client.put_allocations(stray, {mem.provider_uuid: {MEM: 1024}}, 'p9',
                           'u9')
    # Not drift: a Nova instance holding pool memory and compute-node
    # resources stays untouched.
    compute = client.create_provider(pclient.new_provider_uuid(), 'cn1')
    generation = compute['generation']
    client._call('PUT', '/resource_providers/%s/inventories' %
                 compute['uuid'], '1.26', body={
                     'resource_provider_generation': generation,
                     'inventories': {'VCPU': {'total': 8}}})
    instance = pclient.new_provider_uuid()
    client.put_allocations(instance, {mem.provider_uuid: {MEM: 1024},
                                      compute['uuid']: {'VCPU': 1}},
                           'p2', 'u2', consumer_type='INSTANCE')
    # Drift 5: a pool was deleted, its provider stayed.
    base.delete_pool(gone)

    corrections = sync.reconcile(ctx, client)
    text = '\n'.join(corrections)
    assert ('lease %s (reserved): allocations were missing in Placement; '
            'created' % lease.uuid) in text
    assert ('pool mem: set the inventory of provider %s to '
            'CUSTOM_COMPOSABLE_MEMORY_MB total=8192 reserved=0 step=1024' %
            mem.provider_uuid) in text
    assert ('lease %s is released and holds nothing; deleted its '
            'allocations' % old.uuid) in text
    assert ('consumer %s is no lease composable knows; deleted its '
            'allocations' % stray) in text
    assert ('resource provider %s (composable-pool-gone) belongs to no '
            'pool; deleted it' % gone.provider_uuid) in text
    assert len(corrections) == 5, corrections

    # Placement matches the database again.
    got = client.get_allocations(lease.uuid)['allocations']
    assert {rp: a['resources'] for rp, a in got.items()} == {
        mem.provider_uuid: {MEM: 2048}, gpu.provider_uuid: {GPU: 1}}
    assert client.get_inventories(mem.provider_uuid)[1][MEM]['total'] == \
        8192
    assert client.get_allocations(old.uuid)['allocations'] == {}
    assert client.get_allocations(stray)['allocations'] == {}
    assert client.get_provider(gone.provider_uuid) is None
    assert set(client.get_allocations(instance)['allocations']) == {
        mem.provider_uuid, compute['uuid']}
    assert client.get_usages(mem.provider_uuid) == {MEM: 3072}
    assert sync.reconcile(ctx, client) == []


def test_reconcile_recreates_a_deleted_provider(client):
    ctx = base.admin()
    mem = base.memory_pool(aggregate=AGG)
    lease = base.allocated_lease(memory_mb=1024)
    sync.reconcile(ctx, client)
    mem = dbapi.pool_get(ctx, mem.uuid)
    client.delete_allocations(lease.uuid)
    assert client.delete_provider(mem.provider_uuid)

    corrections = sync.reconcile(ctx, client)
    assert corrections[0] == (
        'pool mem: resource provider %s was missing in Placement; created '
        'it' % mem.provider_uuid)
    assert any('lease %s (reserved): allocations were missing' %
               lease.uuid in c for c in corrections)
    assert client.get_usages(mem.provider_uuid) == {MEM: 1024}


def test_reconcile_reports_what_it_cannot_fix(client):
    ctx = base.admin()
    gone = base.memory_pool(name='gone', aggregate=AGG)
    sync.reconcile(ctx, client)
    gone = dbapi.pool_get(ctx, gone.uuid)
    compute = client.create_provider(pclient.new_provider_uuid(), 'cn1')
    client._call('PUT', '/resource_providers/%s/inventories' %
                 compute['uuid'], '1.26', body={
                     'resource_provider_generation': compute['generation'],
                     'inventories': {'VCPU': {'total': 8}}})
    instance = pclient.new_provider_uuid()
    client.put_allocations(instance, {gone.provider_uuid: {MEM: 1024},
                                      compute['uuid']: {'VCPU': 1}},
                           'p2', 'u2', consumer_type='INSTANCE')
    base.delete_pool(gone)

    corrections = sync.reconcile(ctx, client)
    assert len(corrections) == 1
    assert corrections[0].startswith(
        'resource provider %s (composable-pool-gone) of a deleted pool: '
        'could not be corrected: ' % gone.provider_uuid)
    assert instance in corrections[0]
    # The instance keeps its allocation.
    assert client.get_usages(gone.provider_uuid) == {MEM: 1024}


def test_client_from_composable_configuration(placement):
    conf_ = conf.CONF
    conf_.register_opts(
        ks_loading.get_auth_plugin_conf_options('admin_token'),
        group='placement')
    overrides = {'auth_type': 'admin_token', 'token': 'admin',
                 'endpoint': placement.endpoint,
                 'composable_generation_retries': 1}
    for name, value in overrides.items():
        conf_.set_override(name, value, 'placement')
    try:
        client = pclient.ReportClient.from_conf()
        assert client.retries == 1
        pool = base.memory_pool(aggregate=AGG)
        assert sync.sync_pool(pool, client)
        assert [p['name'] for p in client.list_providers()] == [
            'composable-pool-mem']
    finally:
        for name in overrides:
            conf_.clear_override(name, 'placement')


def _consumer_gets(calls):
    return [url for method, url in calls
            if method == 'GET' and url.startswith('/allocations/')]


def _provider_allocation_gets(calls):
    return [url for method, url in calls
            if method == 'GET' and url.startswith('/resource_providers/')
            and url.endswith('/allocations')]


def test_reconcile_reads_allocations_per_provider_not_per_lease(placement):
    ctx = base.admin()
    mem = base.memory_pool(aggregate=AGG, nodes=(8192,) * 4)
    gpu = base.gpu_pool(mem.fabric_id, count=6)
    leases = [base.allocated_lease(memory_mb=1024) for _ in range(20)]
    leases += [base.allocated_lease(device_count=1) for _ in range(4)]
    leases.append(base.allocated_lease(memory_mb=2048, device_count=2))
    hooked = HookedAdapter(placement.adapter(), lambda method, url: None)
    client = pclient.ReportClient(hooked, retry_delay=0)
    corrections = sync.reconcile(ctx, client)
    assert sum('allocations were missing' in c for c in corrections) == 25

    # In step: one request for each pool's allocations, none per lease.
    del hooked.calls[:]
    assert sync.reconcile(ctx, client) == []
    assert _consumer_gets(hooked.calls) == []
    assert sorted(_provider_allocation_gets(hooked.calls)) == sorted(
        '/resource_providers/%s/allocations' % dbapi.pool_get(
            ctx, pool.uuid).provider_uuid for pool in (mem, gpu))

    # What the pass reads in bulk is what each lease loaded whole holds.
    _, holdings = sync._load(ctx)
    assert {h.uuid: h.wanted for h in holdings} == {
        lease.uuid: sync.claimed_resources(dbapi.lease_get(ctx, lease.uuid))
        for lease in leases}

    # Drift on two leases: only they are read and written again.
    mem = dbapi.pool_get(ctx, mem.uuid)
    client._call('DELETE', '/allocations/%s' % leases[3].uuid, '1.38',
                 ok=(204,))
    client.put_allocations(leases[7].uuid, {mem.provider_uuid: {MEM: 3072}},
                           'p1', 'u1')
    del hooked.calls[:]
    corrections = sync.reconcile(ctx, client)
    assert sorted(corrections) == sorted([
        'lease %s (reserved): allocations were missing in Placement; '
        'created %s=1024 on %s' % (leases[3].uuid, MEM, mem.provider_uuid),
        'lease %s: allocations were %s=3072 on %s in Placement; set them '
        'to %s=1024 on %s' % (leases[7].uuid, MEM, mem.provider_uuid, MEM,
                              mem.provider_uuid)])
    assert sorted(_consumer_gets(hooked.calls)) == sorted(
        '/allocations/%s' % lease.uuid for lease in (leases[3], leases[7]))
    assert client.get_usages(mem.provider_uuid) == {MEM: 20 * 1024 + 2048}
    assert sync.reconcile(ctx, client) == []


def test_reconcile_leaves_the_leases_of_a_provider_it_cannot_read(
        placement):
    ctx = base.admin()
    mem = base.memory_pool(aggregate=AGG)
    gpu = base.gpu_pool(mem.fabric_id)
    on_mem = base.allocated_lease(memory_mb=1024)
    on_gpu = base.allocated_lease(device_count=1)
    client = placement.client()
    sync.reconcile(ctx, client)
    mem = dbapi.pool_get(ctx, mem.uuid)
    gpu = dbapi.pool_get(ctx, gpu.uuid)
    for lease in (on_mem, on_gpu):
        client._call('DELETE', '/allocations/%s' % lease.uuid, '1.38',
                     ok=(204,))
    broken = '/resource_providers/%s/allocations' % mem.provider_uuid

    def unavailable(method, url):
        if method == 'GET' and url == broken:
            raise RuntimeError('503 Service Unavailable')
    hooked = pclient.ReportClient(
        HookedAdapter(placement.adapter(), unavailable), retry_delay=0)
    corrections = sync.reconcile(ctx, hooked)
    # The provider that answered has its lease repaired; the one that did
    # not is reported, and its lease waits for a pass that can compare.
    assert sorted(corrections) == sorted([
        'lease %s (reserved): allocations were missing in Placement; '
        'created %s=1 on %s' % (on_gpu.uuid, GPU, gpu.provider_uuid),
        'provider %s: could not be corrected: 503 Service Unavailable' %
        mem.provider_uuid])
    assert client.get_allocations(on_mem.uuid)['allocations'] == {}
    corrections = sync.reconcile(ctx, client)
    assert corrections == [
        'lease %s (reserved): allocations were missing in Placement; '
        'created %s=1024 on %s' % (on_mem.uuid, MEM, mem.provider_uuid)]
