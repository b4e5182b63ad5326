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

"""A lease's name is unique among its project's live leases on every
database backend, creates racing for one name included: the unique
constraint on (project_id, live_name) decides, and NULLs (unnamed and
released leases) never collide."""

import oslo_messaging as messaging
import pytest

from composable.common import context
from composable.common import exception
from composable.common import states
from composable.conductor import manager as conductor_manager
from composable.db import api as dbapi
from tests import concurrency
from tests import lease_rows


def _inventory():
    ctx = context.get_admin_context()
    fabric = dbapi.fabric_create(ctx, {'name': 'fab', 'driver': 'fake'})
    pool = dbapi.pool_create(ctx, {
        'name': 'mem', 'kind': 'memory', 'fabric_id': fabric.id,
        'resource_class': 'CUSTOM_COMPOSABLE_MEMORY_MB', 'step_size': 1024})
    dbapi.memory_node_create(ctx, {'name': 'n1', 'pool_id': pool.id,
                                   'capacity_mb': 65536})
    return pool


def _member():
    return context.RequestContext(user_id='u', project_id='p1',
                                  roles=['member', 'reader'])


@pytest.fixture
def conductor(db_backend):
    _inventory()
    return conductor_manager.ConductorManager('names-test-host')


def test_one_of_many_creates_of_a_name_wins(conductor):
    ctx = _member()

    def create(i):
        try:
            return conductor.create_lease(ctx, {'name': 'race',
                                                'memory_mb': 1024})
        except messaging.ExpectedException as exc:
            # What the RPC server sends back: the conductor's own error.
            raise exc.exc_info[1]

    for attempt in range(3):
        results = concurrency.run_concurrently(6, create)
        won = [r for r in results if isinstance(r, dict)]
        lost = [r for r in results if not isinstance(r, dict)]
        assert len(won) == 1, results
        assert all(isinstance(r, exception.NameInUse) for r in lost), lost
        assert won[0]['status'] == states.RESERVED
        live = dbapi.lease_list(ctx, filters={
            'name': 'race', 'status': [s for s in states.ALL_STATES
                                       if s != states.RELEASED]})
        assert [x.uuid for x in live] == [won[0]['uuid']]
        # Nothing of the losers stays claimed.
        pool = dbapi.pool_get(context.get_admin_context(), 'mem')
        assert pool.used == 1024
        conductor.delete_lease(ctx, 'race')
        assert dbapi.lease_get(ctx, won[0]['uuid']).status == \
            states.RELEASED
        assert dbapi.pool_get(context.get_admin_context(), 'mem').used == 0


def test_released_and_unnamed_leases_never_collide(conductor):
    ctx = _member()
    for _ in range(3):
        conductor.create_lease(ctx, {'memory_mb': 1024})
    first = conductor.create_lease(ctx, {'name': 'n', 'memory_mb': 1024})
    conductor.delete_lease(ctx, 'n')
    second = conductor.create_lease(ctx, {'name': 'n', 'memory_mb': 1024})
    assert dbapi.lease_get(ctx, 'n').uuid == second['uuid']
    assert dbapi.lease_ref(ctx, 'n').uuid == second['uuid']
    # Renaming the released one (history) takes no name; renaming a
    # live one to a live name is refused by the database (written past
    # lease_edit, which answers NameInUse, to see the constraint itself).
    old = dbapi.lease_get(ctx, first['uuid'])
    assert dbapi.lease_edit(ctx, old.id, states.RELEASED, name='n')
    assert dbapi.lease_get(ctx, 'n').uuid == second['uuid']
    third = conductor.create_lease(ctx, {'name': 'm', 'memory_mb': 1024})
    with pytest.raises(dbapi.db_exc.DBDuplicateEntry) as info:
        lease_rows.write(ctx, dbapi.lease_get(ctx, third['uuid']).id,
                         {'name': 'n'})
    assert 'live_name' in info.value.columns
    other = context.RequestContext(user_id='v', project_id='p2',
                                   roles=['member', 'reader'])
    assert conductor.create_lease(other, {'name': 'n', 'memory_mb': 1024})
