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

"""The memory devices of a CXL fabric (driver cxl, local back end) kept in
step with its cxl pool by the fabric sync: capacity, free chunks, the
hosts that reach each device."""

import logging

import pytest

from composable.conductor import fabric_sync
from composable import conf
from composable.db import api as dbapi
from composable import fabric as fabric_drivers
from tests.unit.conductor.allocator import inventory as inv

CONF = conf.CONF


def _info(**capacities):
    return {'backend': 'local', 'devices': {
        name: {'serial': '0x%x' % (index + 1), 'capacity_mb': mb,
               'hosts': ['compute-1', 'compute-%d' % (index + 2)]}
        for index, (name, mb) in enumerate(sorted(capacities.items()))}}


@pytest.fixture
def fabric(sqlite_db):
    CONF.set_override('enabled_drivers', ['cxl'], 'fabric')
    fabric_drivers.reset()
    from composable.fabric import cxl
    fabric_drivers._DRIVERS['cxl'] = cxl.CxlFabricDriver()
    fabric = dbapi.fabric_create(inv.admin(), {
        'name': 'cxl1', 'driver': 'cxl',
        'driver_info': _info(cmm0=1024, cmm1=2048)})
    yield fabric
    fabric_drivers.reset()
    CONF.clear_override('enabled_drivers', 'fabric')


def _pool(fabric, name='cxl-mem'):
    return dbapi.pool_create(inv.admin(), {
        'name': name, 'kind': 'memory', 'medium': 'cxl',
        'resource_class': 'CUSTOM_COMPOSABLE_CXL_MEMORY_MB',
        'fabric_id': fabric.id, 'step_size': 256, 'total': 0, 'used': 0,
        'reserved': 0, 'traits': []})


def _sync():
    return fabric_sync.FabricSync('cond-0').run(inv.admin())


def _nodes(pool):
    return {n.name: n for n in dbapi.memory_node_list(
        inv.admin(), filters={'pool_id': pool.id})}


def test_devices_join_follow_and_leave_the_pool(fabric, caplog):
    pool = _pool(fabric)
    caplog.set_level(logging.INFO)
    report = _sync()['cxl1']['memory']
    assert [(d['name'], d['capacity_mb'], d['free_chunks'], d['hosts'],
             d['change']) for d in report] == [
        ('cmm0', 1024, 4, ['compute-1', 'compute-2'], 'added'),
        ('cmm1', 2048, 8, ['compute-1', 'compute-3'], 'added')]
    assert 'CXL memory device cmm1: 2048 MiB, 8 free chunk(s) of 256 MiB, ' \
        'reached from compute-1, compute-3 (added)' in caplog.text
    nodes = _nodes(pool)
    assert {n: (v.exporter, v.capacity_mb) for n, v in nodes.items()} == {
        'cmm0': ('cxl', 1024), 'cmm1': ('cxl', 2048)}
    assert dbapi.pool_get(inv.admin(), pool.uuid).total == 3072
    # Chunks a lease holds show as not free.
    dbapi.memory_node_update(inv.admin(), nodes['cmm1'].uuid,
                             {'allocated_mb': 512})
    report = _sync()['cxl1']['memory']
    assert [(d['name'], d['free_chunks'], d['change']) for d in report] == [
        ('cmm0', 4, None), ('cmm1', 6, None)]
    # A device grows, another goes.
    dbapi.fabric_update(inv.admin(), fabric.uuid,
                        {'driver_info': _info(cmm1=4096)})
    report = _sync()['cxl1']['memory']
    assert [(d['name'], d['capacity_mb'], d['change']) for d in report] == [
        ('cmm1', 4096, 'updated'), ('cmm0', 1024, 'gone')]
    nodes = _nodes(pool)
    assert not nodes['cmm0'].enabled and nodes['cmm1'].enabled
    # Shrinking below what leases hold is refused and logged.
    dbapi.fabric_update(inv.admin(), fabric.uuid,
                        {'driver_info': _info(cmm1=256)})
    report = _sync()['cxl1']['memory']
    assert report[0]['capacity_mb'] == 4096
    assert 'now has 256 MiB; its memory node keeps 4096 MiB' in caplog.text
    assert 'leases hold 512 MiB of it' in caplog.text


def test_no_single_cxl_pool_changes_nothing(fabric, caplog):
    assert _sync()['cxl1']['memory'] is None
    first = _pool(fabric)
    _pool(fabric, 'cxl-mem-2')
    assert _sync()['cxl1']['memory'] is None
    assert 'has 2 cxl memory pools' in caplog.text
    assert _nodes(first) == {}


def test_devices_of_a_redfish_fabric_manager_join_the_pool(fabric):
    """The redfish back end on the project's emulator (profile cxl): the
    memory domains become memory nodes, less what someone else's chunks
    hold; what the fabric manager has carved shows beside it."""
    from composable.fabric import cxl
    from tests.functional.fabric import redfish_emulator as emu

    url, stop, emulator = emu.serve(config=emu.PROFILES['cxl'])
    try:
        dbapi.fabric_update(inv.admin(), fabric.uuid, {'driver_info': {
            'backend': 'redfish', 'address': url, 'username': 'admin',
            'password': emu.DEFAULT_CONFIG['password'],
            'poll_interval': 0.05, 'timeout': 30}})
        pool = _pool(fabric)
        # A host whose name no system has; its agent reported the DMI
        # UUID of system compute-0.
        dbapi.host_create(inv.admin(), {
            'name': 'node-a', 'fabric_id': fabric.id,
            'properties': {'dmi_uuid': emu.DEFAULT_CONFIG['systems'][0][
                'uuid']}})
        report = _sync()['cxl1']['memory']
        assert [(d['name'], d['capacity_mb'], d['free_chunks'],
                 d['fabric_free_chunks'], d['hosts'], d['change'])
                for d in report] == [
            ('CXLMem0.1', 2048, 8, 8, ['compute-1', 'node-a'], 'added'),
            ('CXLMem1.1', 1536, 6, 6, ['compute-1'], 'added')]
        assert report[0]['serial'] == '0x4c1d96fffeddd835'
        assert {n: v.capacity_mb for n, v in _nodes(pool).items()} == {
            'CXLMem0.1': 2048, 'CXLMem1.1': 1536}
        # A chunk composed for a lease: the fabric has less free; the
        # pool's capacity stays (the lease is the pool's own).
        cxl.CxlFabricDriver().bind_memory(
            dbapi.fabric_get(inv.admin(), fabric.uuid).as_dict(),
            'CXLMem0.1', {'name': 'node-a', 'properties': {
                'dmi_uuid': emu.DEFAULT_CONFIG['systems'][0]['uuid']}},
            512, 'lease-a')
        assert emulator.cxl_state()[1]['101'][0] == 'compute-0'
        report = _sync()['cxl1']['memory']
        assert [(d['name'], d['capacity_mb'], d['fabric_free_chunks'])
                for d in report] == [('CXLMem0.1', 2048, 6),
                                     ('CXLMem1.1', 1536, 6)]
    finally:
        stop()
