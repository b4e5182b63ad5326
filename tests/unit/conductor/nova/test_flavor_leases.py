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

"""Flavor-driven leases made from an instance's allocation in a real
Placement (placement's own fixture behind wsgi-intercept), with the
conductor harness (SQLite, in-process messaging, real agents)."""

import threading

from keystoneauth1 import loading as ks_loading
from oslo_utils import uuidutils
import pytest

from composable.common import states
from composable.conductor.nova import flavor_leases as instance_leases
from composable.conductor.placement import claims as placement_claims
from composable.conductor.placement import sync
from composable import conf
from composable.db import api as db_api
from tests.functional.placement import base as placement_base
from tests import lease_rows
from tests.unit.conductor import harness as h_mod

CONF = conf.CONF
MEM = 'CUSTOM_COMPOSABLE_MEMORY_MB'
GPU = 'CUSTOM_COMPOSABLE_GPU'


@pytest.fixture
def placement():
    fixture = placement_base.RealPlacement()
    fixture.setUp()
    try:
        yield fixture
    finally:
        fixture.cleanUp()


def configure_placement(endpoint):
    """composable's [placement] pointing at the fixture, as an operator
    configures it (auth_type set: Placement is on)."""
    CONF.register_opts(
        ks_loading.get_auth_plugin_conf_options('admin_token'),
        group='placement')
    for name, value in (('auth_type', 'admin_token'), ('token', 'admin'),
                        ('endpoint', endpoint)):
        CONF.set_override(name, value, 'placement')
    placement_claims.set_client(None)


def unconfigure_placement():
    placement_claims.set_client(None)
    for name in ('auth_type', 'token', 'endpoint'):
        CONF.clear_override(name, 'placement')


class World(object):
    """The harness's inventory reported to Placement, and a compute node
    provider for the instances' own resources."""

    def __init__(self, harness, placement):
        self.h = harness
        self.client = placement.client()
        ctx = h_mod.admin()
        for pool in (harness.memory_pool, harness.gpu_pool):
            sync.sync_pool(db_api.pool_get(ctx, pool.uuid), self.client, ctx)
        self.memory_pool = db_api.pool_get(ctx, harness.memory_pool.uuid)
        self.gpu_pool = db_api.pool_get(ctx, harness.gpu_pool.uuid)
        self.compute_rp = uuidutils.generate_uuid()
        self.client.create_provider(self.compute_rp, 'compute-0')
        self.client.set_inventories(self.compute_rp, {'VCPU': {
            'total': 64, 'reserved': 0, 'min_unit': 1, 'max_unit': 64,
            'step_size': 1, 'allocation_ratio': 1.0}})

    def boot(self, memory_mb=0, gpus=0, project=h_mod.PROJECT):
        """What Nova's scheduler claims for an instance of a flavor with
        resources:CUSTOM_COMPOSABLE_*: its compute node share and the
        pools' share, one consumer."""
        instance = uuidutils.generate_uuid()
        resources = {self.compute_rp: {'VCPU': 1}}
        if memory_mb:
            resources[self.memory_pool.provider_uuid] = {MEM: memory_mb}
        if gpus:
            resources[self.gpu_pool.provider_uuid] = {GPU: gpus}
        self.client.put_allocations(instance, resources, project, 'u1',
                                    consumer_type='INSTANCE')
        return instance

    def usage(self, pool):
        return self.client.get_usages(pool.provider_uuid)

    def allocations(self, consumer):
        return {rp: alloc['resources'] for rp, alloc in
                self.client.get_allocations(consumer)['allocations'].items()}


@pytest.fixture
def world(harness, placement):
    configure_placement(placement.endpoint)
    try:
        yield World(harness, placement)
    finally:
        unconfigure_placement()


def ensure(world, instance, **kwargs):
    kwargs.setdefault('project_id', h_mod.PROJECT)
    return instance_leases.ensure_instance_leases(
        h_mod.admin(), instance, kwargs.pop('host', 'compute-0'),
        kwargs.pop('project_id'), **kwargs)


def test_lease_from_the_instance_allocation(world):
    instance = world.boot(memory_mb=2048)
    made = ensure(world, instance, user_id='u7',
                  extra_specs={'composable:attach_mode': 'guest'})
    assert len(made) == 1
    lease = world.h.lease(made[0])
    assert lease.status == states.RESERVED
    assert lease.memory_mb == 2048
    assert lease.memory_pool_id == world.memory_pool.id
    assert lease.project_id == h_mod.PROJECT and lease.user_id == 'u7'
    assert lease.instance_uuid == instance
    assert lease.placement_consumer == instance
    assert lease.attach_mode == 'guest'
    assert sum(e.size_mb for e in lease.extents) == 2048
    assert world.h.pool(world.memory_pool).used == 2048
    # Nova's claim is the only one: nothing under the lease's consumer.
    assert world.allocations(lease.uuid) == {}
    assert world.usage(world.memory_pool) == {MEM: 2048}


def test_an_instance_gets_its_leases_once(world):
    instance = world.boot(memory_mb=1024)
    first = ensure(world, instance)
    assert ensure(world, instance) == first
    assert world.h.pool(world.memory_pool).used == 1024
    assert [lease.uuid for lease in db_api.lease_list_for_instance(
        h_mod.admin(), instance)] == first


def test_concurrent_callers_make_one_lease(world):
    instance = world.boot(memory_mb=1024)
    allocations = placement_claims.instance_pool_allocations(
        world.client, instance)
    results, errors = [], []
    start = threading.Barrier(4)

    def call():
        start.wait()
        try:
            results.append(tuple(ensure(world, instance,
                                        allocations=allocations)))
        except Exception as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=call) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    assert len(set(results)) == 1, results
    assert world.h.pool(world.memory_pool).used == 1024
    assert len(db_api.lease_list_for_instance(
        h_mod.admin(), instance, include_released=True)) == 1


def test_memory_and_gpu_make_one_lease_per_pool(world):
    instance = world.boot(memory_mb=1024, gpus=1)
    made = ensure(world, instance,
                  extra_specs={'composable:gpu_model': 'FakeGPU-16G',
                               'composable:lease_name': 'train'})
    leases = sorted((world.h.lease(uuid) for uuid in made),
                    key=lambda lease: lease.memory_mb)
    gpu, memory = leases
    assert len(gpu.devices) == 1 and gpu.device_kind == 'gpu'
    assert gpu.device_model == 'FakeGPU-16G'
    assert memory.memory_mb == 1024
    assert {lease.name for lease in leases} == {'train-gpu-pool',
                                                'train-memory-pool'}
    assert world.usage(world.gpu_pool) == {GPU: 1}


def test_no_pool_allocation_no_lease(world):
    assert ensure(world, world.boot()) == []
    assert ensure(world, uuidutils.generate_uuid()) == []


def test_release_keeps_novas_allocation_and_a_new_life_gets_new_leases(
        world):
    instance = world.boot(memory_mb=2048)
    [first] = ensure(world, instance)
    world.h.api.delete_lease(h_mod.user_context(), first)
    world.h.wait(first, states.RELEASED)
    assert world.h.pool(world.memory_pool).used == 0
    # Nova frees its allocation itself, when the instance goes.
    assert world.allocations(instance)[world.memory_pool.provider_uuid] == {
        MEM: 2048}
    # Unshelved (Nova claimed again): a new lease, not the released one.
    [second] = ensure(world, instance)
    assert second != first
    assert world.h.lease(second).status == states.RESERVED
    assert world.h.pool(world.memory_pool).used == 2048


def test_no_successor_while_a_lease_of_the_pool_is_being_released(world):
    """A lease of the instance's being released (replaced by a resize,
    ended by a shelve) still holds its capacity: its successor is made
    only once it is released (the pool may hold one of them only)."""
    instance = world.boot(memory_mb=2048)
    [first] = ensure(world, instance)
    lease = world.h.lease(first)
    lease_rows.write(h_mod.admin(), lease.id,
                     {'status': states.RELEASING})
    assert ensure(world, instance) == []
    assert [lease.uuid for lease in db_api.lease_list_for_instance(
        h_mod.admin(), instance, include_released=True)] == [first]
    lease_rows.write(h_mod.admin(), lease.id,
                     {'status': states.RESERVED})
    world.h.api.delete_lease(h_mod.user_context(), first)
    world.h.wait(first, states.RELEASED)
    [second] = ensure(world, instance)
    assert second == instance_leases.lease_uuid(
        instance, world.memory_pool.uuid, 1)


def test_stale_flavor_leases_compare_amount_pool_and_extra_specs(world):
    instance = world.boot(memory_mb=2048, gpus=1)
    made = ensure(world, instance)
    leases = db_api.lease_list_for_instance(h_mod.admin(), instance)
    by_pool = {lease.requested_pools[0]: lease.uuid for lease in leases}
    memory = by_pool[world.memory_pool.uuid]
    gpu = by_pool[world.gpu_pool.uuid]
    assert sorted(made) == sorted([memory, gpu])

    def stale(allocations, **extra_specs):
        return sorted(lease.uuid for lease in
                      instance_leases.stale_flavor_leases(
                          h_mod.admin(), leases, instance,
                          extra_specs=extra_specs, allocations=allocations))

    same = {world.memory_pool.uuid: {MEM: 2048},
            world.gpu_pool.uuid: {GPU: 1}}
    assert stale(same) == []
    assert stale({world.memory_pool.uuid: {MEM: 4096},
                  world.gpu_pool.uuid: {GPU: 1}}) == [memory]
    assert stale({world.memory_pool.uuid: {MEM: 2048}}) == [gpu]
    assert stale({}) == sorted([memory, gpu])
    assert stale(same, **{'composable:attach_mode': 'guest'}) == sorted(
        [memory, gpu])
    assert stale(same, **{'composable:gpu_model': 'OtherGPU'}) == [gpu]
    # A lease the project made itself is never the flavor's to replace.
    own = world.h.create(memory_mb=1024)
    own = own['uuid'] if isinstance(own, dict) else own
    assert instance_leases.stale_flavor_leases(
        h_mod.admin(), [world.h.lease(own)], instance,
        allocations={}) == []


def test_database_out_of_step_gives_alloc_failed_once(world):
    # Placement has room, composable's database has not (its pool was
    # filled behind Placement's back).
    ctx = h_mod.admin()
    db_api.pool_update(ctx, world.memory_pool.uuid, {'reserved': 8192})
    instance = world.boot(memory_mb=1024)
    [uuid] = ensure(world, instance)
    lease = world.h.lease(uuid)
    assert lease.status == states.ALLOC_FAILED
    assert lease.fault
    assert ensure(world, instance) == [uuid]


def test_the_lease_gets_devices_its_instance_host_reaches(world):
    """Placement counts the pool's GPUs; which of them the fabric can
    connect to the instance's host is the allocator's to honour."""
    ctx = h_mod.admin()
    first, *others = world.h.devices
    db_api.device_set_facts(ctx, first.id,
                            {'reachable_hosts': ['compute-1']})
    for device in others:
        db_api.device_set_facts(ctx, device.id,
                                {'reachable_hosts': ['compute-0']})
    instance = world.boot(gpus=1)
    lease = world.h.lease(ensure(world, instance, host='compute-0')[0])
    assert lease.status == states.RESERVED
    assert [d.uuid for d in lease.devices] == [others[0].uuid]
