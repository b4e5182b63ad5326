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

"""The resource provider of a pool of SR-IOV virtual functions: a child
of the compute node provider of the physical function's host, against a
real Placement (what Nova's scheduler makes of it is in
tests/functional/nova/test_sriov_boot.py)."""

import pytest

from composable.conductor.placement import claims as placement_claims
from composable.conductor.placement import client as pclient
from composable.conductor.placement import sync
from composable.db import api as dbapi
from tests.functional.placement import base

AGG = '0b5e7f7e-8c55-4c3b-9f0e-2d1f6c1d2a31'
NIC = 'CUSTOM_COMPOSABLE_PCI_NIC'

pytestmark = pytest.mark.usefixtures('composable_db')


def compute_node(client, name, aggregates=(AGG,)):
    """A provider as nova-compute makes one for its compute node: VCPU
    inventory, in the fabric's aggregate."""
    node = client.create_provider(pclient.new_provider_uuid(), name)
    client.set_inventories(node['uuid'], {'VCPU': {'total': 8}})
    client.set_aggregates(node['uuid'], set(aggregates))
    return node


def sriov_pool(name='nic-vfs', host='host1', vfs=4, properties=None):
    ctx = base.admin()
    fabric = dbapi.fabric_create(ctx, {'name': 'fab-' + name,
                                       'driver': 'fake',
                                       'aggregate_uuid': AGG})
    host = dbapi.host_create(ctx, {'name': host, 'fabric_id': fabric.id,
                                   'properties': properties or {}})
    pool = dbapi.sriov_pool_create(ctx, {
        'name': name, 'kind': 'pci', 'fabric_id': fabric.id,
        'resource_class': NIC, 'step_size': 1, 'reserved': 0,
        'total': 0, 'used': 0, 'traits': [],
        'sriov_host_id': host.id, 'sriov_pf_address': '0000:41:00.0',
        'sriov_vf_count': vfs, 'sriov_vf_mode': 'on_demand'}, 'nic')
    return dbapi.pool_get(ctx, pool.uuid)


def candidate_roots(client, resources):
    """The compute node providers of the allocation candidates Placement
    offers for ``resources`` (what Nova's scheduler asks)."""
    got = client._call('GET', '/allocation_candidates?resources=%s' %
                       resources, '1.36')
    summaries = got['provider_summaries']
    roots = set()
    for request in got['allocation_requests']:
        roots.update(summaries[rp]['root_provider_uuid']
                     for rp in request['allocations'])
    return roots


def test_sriov_pool_provider_is_a_child_of_the_pf_host(client):
    host1 = compute_node(client, 'host1')
    host2 = compute_node(client, 'host2')
    pool = sriov_pool()

    corrections = sync.sync_pool(pool, client)
    assert ('pool nic-vfs: resource provider %s was missing in Placement; '
            'created it under the compute node provider %s of host host1' %
            (pool.provider_uuid, host1['uuid'])) in corrections
    provider = client.get_provider(pool.provider_uuid)
    assert provider['parent_provider_uuid'] == host1['uuid']
    assert provider['root_provider_uuid'] == host1['uuid']
    # Not shared with the fabric's other hosts.
    assert client.get_traits(pool.provider_uuid)[1] == {
        'CUSTOM_COMPOSABLE_POOL'}
    assert client.get_aggregates(pool.provider_uuid)[1] == set()
    assert client.get_inventories(pool.provider_uuid)[1][NIC]['total'] == 4
    assert sync.sync_pool(dbapi.pool_get(base.admin(), pool.uuid),
                          client) == []

    # What a flavor asking for a VF gets: host1's tree only, though
    # host2 is in the same aggregate.
    assert candidate_roots(client, 'VCPU:1,%s:1' % NIC) == {host1['uuid']}
    assert candidate_roots(client, 'VCPU:1') == {host1['uuid'],
                                                 host2['uuid']}
    # A child counts as a member of its root's aggregates.
    got = client._call('GET', '/allocation_candidates?resources=VCPU:1,'
                       '%s:1&member_of=%s' % (NIC, AGG), '1.36')
    assert len(got['allocation_requests']) == 1


def test_a_pool_made_sharing_earlier_becomes_a_child(client):
    """A pool synced by a release that made every pool a sharing
    provider is moved under its host on the next pass."""
    host1 = compute_node(client, 'host1')
    pool = sriov_pool()
    client.create_provider(pool.provider_uuid or pclient.new_provider_uuid(),
                           'composable-pool-nic-vfs')
    client.set_traits(client.get_provider_by_name(
        'composable-pool-nic-vfs')['uuid'],
        {'MISC_SHARES_VIA_AGGREGATE', 'CUSTOM_COMPOSABLE_POOL'})
    corrections = sync.reconcile(base.admin(), client)
    text = '\n'.join(corrections)
    assert 'adopted existing resource provider' in text
    assert ('put resource provider %s under the compute node provider %s '
            '(host1) of host host1 (it was under no provider)' % (
                dbapi.pool_get(base.admin(), pool.uuid).provider_uuid,
                host1['uuid'])) in text
    assert 'set the traits of provider' in text
    assert candidate_roots(client, 'VCPU:1,%s:1' % NIC) == {host1['uuid']}
    assert sync.reconcile(base.admin(), client) == []


def test_pool_waits_for_its_compute_node_then_moves_under_it(client):
    pool = sriov_pool()
    corrections = sync.sync_pool(pool, client)
    assert ('pool nic-vfs: host host1 has no compute node resource provider '
            'named host1 in Placement') in '\n'.join(corrections)
    assert client.get_provider(pool.provider_uuid)[
        'parent_provider_uuid'] is None
    # A provider of its own, not sharing: no flavor reaches it.
    compute_node(client, 'host2')
    assert candidate_roots(client, 'VCPU:1,%s:1' % NIC) == set()

    host1 = compute_node(client, 'host1')
    corrections = sync.sync_pool(dbapi.pool_get(base.admin(), pool.uuid),
                                 client)
    assert corrections == [
        'pool nic-vfs: put resource provider %s under the compute node '
        'provider %s (host1) of host host1 (it was under no provider)' % (
            pool.provider_uuid, host1['uuid'])]
    assert candidate_roots(client, 'VCPU:1,%s:1' % NIC) == {host1['uuid']}


def test_compute_node_renamed_moves_the_provider_with_its_allocations(
        client):
    old = compute_node(client, 'host1')
    pool = sriov_pool()
    sync.sync_pool(pool, client)
    lease = base.allocated_lease(device_count=1, device_kind='nic')
    assert sync.reconcile(base.admin(), client) != []
    assert client.get_usages(pool.provider_uuid) == {NIC: 1}

    # The host's compute node registers under its full name.
    new = compute_node(client, 'host1.example.org')
    host = dbapi.pool_get(base.admin(), pool.uuid).sriov_host
    dbapi.host_update(base.admin(), host.uuid, {
        'properties': {sync.HYPERVISOR_HOSTNAME: 'host1.example.org'}})
    corrections = sync.reconcile(base.admin(), client)
    assert corrections == [
        'pool nic-vfs: put resource provider %s under the compute node '
        'provider %s (host1.example.org) of host host1 (it was under %s)' %
        (pool.provider_uuid, new['uuid'], old['uuid'])]
    assert client.get_provider(pool.provider_uuid)[
        'root_provider_uuid'] == new['uuid']
    # The lease's allocation moved with it; the old node is free to go.
    assert client.get_usages(pool.provider_uuid) == {NIC: 1}
    assert set(client.get_allocations(lease.uuid)['allocations']) == {
        pool.provider_uuid}
    assert client.delete_provider(old['uuid'])

    # A name Placement does not know leaves the provider where it is.
    dbapi.host_update(base.admin(), host.uuid, {
        'properties': {sync.HYPERVISOR_HOSTNAME: 'nowhere'}})
    assert sync.reconcile(base.admin(), client) == []
    assert client.get_provider(pool.provider_uuid)[
        'parent_provider_uuid'] == new['uuid']


def test_compute_node_recreated_gets_the_provider_back(client):
    """nova-compute's service delete removes the compute node's tree,
    the pool's provider with it; the node comes back under a new UUID."""
    old = compute_node(client, 'host1')
    pool = sriov_pool()
    sync.sync_pool(pool, client)
    assert client.delete_provider(pool.provider_uuid)
    assert client.delete_provider(old['uuid'])
    new = compute_node(client, 'host1')

    corrections = sync.reconcile(base.admin(), client)
    assert corrections[0] == (
        'pool nic-vfs: resource provider %s was missing in Placement; '
        'created it under the compute node provider %s of host host1' % (
            pool.provider_uuid, new['uuid']))
    assert candidate_roots(client, 'VCPU:1,%s:1' % NIC) == {new['uuid']}


def test_deleted_pool_leaves_its_compute_node_deletable(client,
                                                        placement_conf):
    node = compute_node(client, 'host1')
    pool = sriov_pool()
    sync.sync_pool(pool, client)
    # Placement refuses to delete a provider that has children.
    with pytest.raises(pclient.PlacementError):
        client.delete_provider(node['uuid'])

    dbapi.pool_delete(base.admin(), pool.uuid)
    assert placement_claims.sync_pool_now(pool.uuid, pool.provider_uuid) == [
        'pool %s was deleted; deleted its resource provider %s' % (
            pool.uuid, pool.provider_uuid)]
    assert client.get_provider(pool.provider_uuid) is None
    assert client.delete_provider(node['uuid'])
