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

"""Small builders of database rows for the tests of composable.db.api."""

from oslo_utils import uuidutils

from composable.common import context
from composable.common import states
from composable.db import api as dbapi
from composable.db import models


def admin():
    return context.get_admin_context()


def project(project_id, roles=('member', 'reader')):
    return context.RequestContext(user_id='user-' + project_id,
                                  project_id=project_id, roles=list(roles),
                                  is_admin=False)


def fabric(name='fab', driver='fake'):
    return dbapi.fabric_create(admin(), {'name': name, 'driver': driver})


def host(fab, name='compute1'):
    return dbapi.host_create(admin(), {'name': name, 'fabric_id': fab.id})


def memory_pool(fab, name='mem', step=1024, reserved=0):
    return dbapi.pool_create(admin(), {
        'name': name, 'kind': 'memory', 'fabric_id': fab.id,
        'resource_class': 'CUSTOM_COMPOSABLE_MEMORY_MB', 'step_size': step,
        'reserved': reserved})


def gpu_pool(fab, name='gpu'):
    return dbapi.pool_create(admin(), {
        'name': name, 'kind': 'gpu', 'fabric_id': fab.id,
        'resource_class': 'CUSTOM_COMPOSABLE_GPU'})


def memory_node(pool, name='node1', capacity=4096, **values):
    values.update(name=name, pool_id=pool.id, capacity_mb=capacity)
    return dbapi.memory_node_create(admin(), values)


def device(pool, address='gpu-0', **values):
    values.update(pool_id=pool.id, address=address)
    values.setdefault('kind', 'gpu')
    return dbapi.device_create(admin(), values)


def lease(project_id='A', status=states.RESERVED, **values):
    values.update(project_id=project_id, status=status)
    return dbapi.lease_create(admin(), values)


def update_row(model, row_id, **values):
    """Change a row behind the API's back (as the allocator does)."""
    ctx = admin()
    with dbapi.writer(ctx) as session:
        session.query(model).filter(model.id == row_id).update(
            values, synchronize_session=False)


def add_extent(lease_row, node, size_mb=1024, index=0):
    ctx = admin()
    with dbapi.writer(ctx) as session:
        extent = models.MemoryExtent(uuid=uuidutils.generate_uuid(),
                                     lease_id=lease_row.id,
                                     memory_node_id=node.id,
                                     size_mb=size_mb, index=index)
        session.add(extent)
        session.flush()
        return extent
