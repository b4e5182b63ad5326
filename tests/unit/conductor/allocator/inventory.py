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

"""Builds small inventories for allocator tests, on whatever database
CONF.database.connection names."""

from composable.common import context as ctx_mod
from composable.common import states
from composable.conductor.allocator import claims as allocator
from composable.db import api as dbapi
from tests import lease_rows


def admin():
    return ctx_mod.get_admin_context()


def memory_inventory(nodes=(4096, 4096), step=1024, reserved=0,
                     name='mem', fabric=None):
    ctx = admin()
    fabric = fabric or dbapi.fabric_create(ctx, {'name': 'fab-' + name,
                                                 'driver': 'fake'})
    pool = dbapi.pool_create(ctx, {
        'name': name, 'kind': 'memory', 'fabric_id': fabric.id,
        'resource_class': 'CUSTOM_COMPOSABLE_MEMORY_MB', 'step_size': step,
        'reserved': reserved})
    for i, capacity in enumerate(nodes):
        dbapi.memory_node_create(ctx, {'name': '%s-node-%d' % (name, i),
                                       'pool_id': pool.id,
                                       'capacity_mb': capacity})
    return fabric, dbapi.pool_get(ctx, pool.uuid)


def gpu_inventory(fabric, models_=('A', 'A', 'B', 'B'), name='gpu',
                  traits=None):
    ctx = admin()
    pool = dbapi.pool_create(ctx, {
        'name': name, 'kind': 'gpu', 'fabric_id': fabric.id,
        'resource_class': 'CUSTOM_COMPOSABLE_GPU'})
    devices = []
    for i, model in enumerate(models_):
        devices.append(dbapi.device_create(ctx, {
            'pool_id': pool.id, 'address': '%s-%d' % (name, i),
            'kind': 'gpu', 'model': model,
            'traits': (traits or {}).get(i, [])}))
    return dbapi.pool_get(ctx, pool.uuid), devices


def new_lease(project='p1', **values):
    values.setdefault('status', states.ALLOCATING)
    values.setdefault('project_id', project)
    return dbapi.lease_create(admin(), values)


def allocate(lease):
    return allocator.allocate(admin(), lease.id)


def release(lease):
    ctx = admin()
    assert lease_rows.write(ctx, lease.id, {'status': states.RELEASING})
    return allocator.release_capacity(ctx, lease.id)
