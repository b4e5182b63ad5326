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

"""composable.db.api under concurrent writers on MariaDB and PostgreSQL
(SQLite serializes its writers, so these races cannot happen there)."""

import threading

import pytest

from composable.common import context
from composable.common import exception
from composable.db import api as dbapi
from composable.db import models
from tests.functional import fixtures as db_fixtures


@pytest.fixture(params=[b for b in db_fixtures.BACKENDS if b != 'sqlite'])
def server_db(request):
    with db_fixtures.database(request.param) as url:
        yield url


def _admin():
    return context.get_admin_context()


def _claim_elsewhere(node_id, pool_id, size_mb):
    """What the allocator does for a lease, committed from another
    connection."""
    def claim():
        ctx = _admin()
        with dbapi.writer(ctx) as session:
            session.query(models.Pool).filter(
                models.Pool.id == pool_id).update(
                    {'used': models.Pool.used + size_mb},
                    synchronize_session=False)
            session.query(models.MemoryNode).filter(
                models.MemoryNode.id == node_id).update(
                    {'allocated_mb': models.MemoryNode.allocated_mb +
                     size_mb}, synchronize_session=False)

    thread = threading.Thread(target=claim)
    thread.start()
    thread.join(30)
    assert not thread.is_alive()


def _inventory():
    ctx = _admin()
    fabric = dbapi.fabric_create(ctx, {'name': 'fab', 'driver': 'fake'})
    pool = dbapi.pool_create(ctx, {
        'name': 'mem', 'kind': 'memory', 'fabric_id': fabric.id,
        'resource_class': 'CUSTOM_COMPOSABLE_MEMORY_MB', 'step_size': 1024})
    node = dbapi.memory_node_create(ctx, {'name': 'n1', 'pool_id': pool.id,
                                          'capacity_mb': 4096})
    return pool, node


def test_shrinking_a_node_sees_a_claim_made_before_the_lock(server_db,
                                                            monkeypatch):
    pool, node = _inventory()
    real_lock_pool = dbapi.lock_pool

    def lock_pool_after_a_claim(session, pool_id):
        # The node and its pool were read; a claim commits before the
        # update locks them.
        _claim_elsewhere(node.id, pool.id, 2048)
        return real_lock_pool(session, pool_id)

    monkeypatch.setattr(dbapi, 'lock_pool', lock_pool_after_a_claim)
    with pytest.raises(exception.InUse, match='leases hold 2048 MiB'):
        dbapi.memory_node_update(_admin(), 'n1', {'capacity_mb': 1024})
    monkeypatch.undo()

    got = dbapi.memory_node_get(_admin(), 'n1')
    assert (got.capacity_mb, got.allocated_mb) == (4096, 2048)
    got = dbapi.pool_get(_admin(), 'mem')
    assert (got.total, got.used) == (4096, 2048)


def test_disabling_a_node_sees_a_claim_made_before_the_lock(server_db,
                                                            monkeypatch):
    pool, node = _inventory()
    dbapi.memory_node_create(_admin(), {'name': 'n2', 'pool_id': pool.id,
                                        'capacity_mb': 4096})
    dbapi.pool_update(_admin(), 'mem', {'reserved': 1024})
    real_lock_pool = dbapi.lock_pool

    def lock_pool_after_a_claim(session, pool_id):
        _claim_elsewhere(node.id, pool.id, 4096)
        return real_lock_pool(session, pool_id)

    monkeypatch.setattr(dbapi, 'lock_pool', lock_pool_after_a_claim)
    # n2 holds nothing itself, but without it the pool (4096 - 1024
    # reserved) cannot hold the 4096 MiB claimed on n1.
    with pytest.raises(exception.InUse, match='would hold less'):
        dbapi.memory_node_update(_admin(), 'n2', {'enabled': False})
    monkeypatch.undo()
    assert dbapi.pool_get(_admin(), 'mem').total == 8192


def test_reserving_sees_a_claim_made_before_the_lock(server_db, monkeypatch):
    # PATCH /v1/pools/{pool} with reserved: the check against what is in
    # use is made on the pool's row as locked, not as read before.
    pool, node = _inventory()
    real_lock_pool = dbapi.lock_pool

    def lock_pool_after_a_claim(session, pool_id):
        _claim_elsewhere(node.id, pool.id, 3072)
        return real_lock_pool(session, pool_id)

    monkeypatch.setattr(dbapi, 'lock_pool', lock_pool_after_a_claim)
    with pytest.raises(exception.Conflict, match='has 3072 in use of 4096'):
        dbapi.pool_update_checked(_admin(), 'mem', {'reserved': 2048})
    monkeypatch.undo()
    got = dbapi.pool_get(_admin(), 'mem')
    assert (got.reserved, got.used) == (0, 3072)
    # Within what is free, it is set.
    dbapi.pool_update_checked(_admin(), 'mem', {'reserved': 1024})
    assert dbapi.pool_get(_admin(), 'mem').reserved == 1024


def test_a_guest_swap_report_waits_for_a_resize_writing_the_details(
        server_db):
    # The resizer's write holds the attachment's row while it changes the
    # details; a guest's swap-on report noted by another conductor at
    # that moment reads the details only once that write committed, and
    # neither undoes the other.
    from composable.common import states

    ctx = _admin()
    pool, node = _inventory()
    host = dbapi.host_create(ctx, {'name': 'compute1', 'fabric_id':
                                   pool.fabric_id})
    instance = 'a1b2c3d4-0000-4000-8000-00000000000a'
    lease = dbapi.lease_create(ctx, {
        'project_id': 'A', 'status': states.BOUND, 'memory_mb': 2048,
        'memory_pool_id': pool.id, 'host_id': host.id,
        'instance_uuid': instance, 'attach_mode': states.ATTACH_GUEST})
    with dbapi.writer(ctx) as session:
        extents = [models.MemoryExtent(uuid='e%035d' % i, lease_id=lease.id,
                                       memory_node_id=node.id, size_mb=1024,
                                       index=i) for i in range(2)]
        session.add_all(extents)
    bound, grown = ('e%035d' % i for i in range(2))
    att = dbapi.attachment_create(ctx, {
        'lease_id': lease.id, 'host_id': host.id, 'mode': 'guest',
        'instance_uuid': instance, 'state': states.ATT_ATTACHED,
        'details': {'memory': {bound: {'disk': 'vdb'}}}})
    holding = threading.Event()
    release = threading.Event()
    noted = []

    def grow_records(details):
        holding.set()
        assert release.wait(30)
        details['memory'] = dict(details['memory'],
                                 **{grown: {'disk': 'vdc'}})
        return details

    def report():
        noted.append(dbapi.lease_guest_swap_noted(
            _admin(), lease.uuid, 'compute1', instance, 'guest_swap',
            dbapi.ACTION_SUCCESS, 'swapping',
            {bound: {'guest_device': '/dev/vdb'}}))

    writer = threading.Thread(target=dbapi.attachment_change_details,
                              args=(_admin(), att.id, grow_records))
    writer.start()
    assert holding.wait(30)
    reporter = threading.Thread(target=report)
    reporter.start()
    # The report waits for the row (its FOR UPDATE), however long.
    reporter.join(1)
    assert reporter.is_alive()
    release.set()
    writer.join(30)
    reporter.join(30)
    assert not writer.is_alive() and not reporter.is_alive()
    assert noted == [True]
    [row] = dbapi.attachment_list(ctx, lease.id)
    assert row.details['memory'] == {
        bound: {'disk': 'vdb', 'guest_device': '/dev/vdb'},
        grown: {'disk': 'vdc'}}
