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

"""The doors of the extent, attachment, resize and device states
(composable.db.api): each a compare-and-set from the declared sources of
its event, refusing a change its machine does not declare; and the
attachment details written from what they are when written."""

import pytest

from composable.common import states
from composable.conductor.elastic import resizer as resizer_mod
from composable.db import api as dbapi
from composable.db import models
from tests.unit.db import inventory as inv

INSTANCE = 'a1b2c3d4-0000-4000-8000-00000000000a'


def _extent_state(extent_id):
    with dbapi.reader(inv.admin()) as session:
        return session.get(models.MemoryExtent, extent_id).export_state


def _memory_lease(status=states.RESERVED):
    fab = inv.fabric()
    host = inv.host(fab)
    pool = inv.memory_pool(fab)
    node = inv.memory_node(pool)
    lease = inv.lease(status=status, memory_mb=2048, memory_pool_id=pool.id,
                      host_id=host.id, instance_uuid=INSTANCE,
                      attach_mode=states.ATTACH_GUEST)
    extents = [inv.add_extent(lease, node, index=i) for i in range(2)]
    return host, lease, extents


def test_the_extent_door_moves_an_extent_by_its_machine():
    _host, _lease, [extent, _] = _memory_lease()
    admin = inv.admin()
    assert dbapi.extent_transition(
        admin, extent.id, states.EXTENT_EXPORT,
        {'target_iqn': 'iqn.x', 'lun': 1}) == states.EXTENT_EXPORTED
    # Never scrubbed while exported: refused, and nothing written.
    with pytest.raises(states.StateChangeRefused) as info:
        dbapi.extent_transition(admin, extent.id, states.EXTENT_SCRUB)
    assert (info.value.what, info.value.ident, info.value.state,
            info.value.event) == ('extent', extent.uuid,
                                  states.EXTENT_EXPORTED, states.EXTENT_SCRUB)
    assert _extent_state(extent.id) == states.EXTENT_EXPORTED
    dbapi.extent_transition(admin, extent.id, states.EXTENT_UNEXPORT,
                            {'target_iqn': None, 'lun': None})
    assert dbapi.extent_transition(admin, extent.id, states.EXTENT_SCRUB) \
        == states.EXTENT_SCRUBBED
    with pytest.raises(states.StateChangeRefused):
        dbapi.extent_transition(admin, extent.id, states.EXTENT_EXPORT)
    assert _extent_state(extent.id) == states.EXTENT_SCRUBBED


def test_no_other_write_of_an_extent_sets_its_state():
    _host, _lease, [extent, _] = _memory_lease()
    with pytest.raises(ValueError, match='export_state'):
        dbapi.extent_update(inv.admin(), extent.id,
                            {'export_state': states.EXTENT_SCRUBBED})
    with pytest.raises(ValueError, match='export_state'):
        dbapi.extent_transition(inv.admin(), extent.id,
                                states.EXTENT_EXPORT,
                                {'export_state': states.EXTENT_SCRUBBED})
    assert _extent_state(extent.id) == states.EXTENT_ALLOCATED


def test_the_attachment_door_refuses_a_wrong_source_state():
    host, lease, _ = _memory_lease()
    admin = inv.admin()
    att = dbapi.attachment_create(admin, {
        'lease_id': lease.id, 'host_id': host.id, 'mode': 'host',
        'state': states.ATT_ATTACHING})
    assert dbapi.attachment_transition(
        admin, att.id, states.ATT_ATTACH_DONE,
        {'details': {'memory': {}}}) == states.ATT_ATTACHED
    with pytest.raises(states.StateChangeRefused) as info:
        dbapi.attachment_transition(admin, att.id, states.ATT_DETACH_DONE)
    assert info.value.state == states.ATT_ATTACHED
    assert info.value.what == 'attachment'
    dbapi.attachment_transition(admin, att.id, states.ATT_DETACH)
    dbapi.attachment_transition(admin, att.id, states.ATT_DETACH_DONE)
    with pytest.raises(states.StateChangeRefused):
        dbapi.attachment_transition(admin, att.id, states.ATT_ATTACH)
    [row] = dbapi.attachment_list(admin, lease.id)
    assert row.state == states.ATT_DETACHED
    with pytest.raises(ValueError, match='state'):
        dbapi.attachment_update(admin, att.id,
                                {'state': states.ATT_ATTACHED})


def test_the_device_door_refuses_a_wrong_source_state():
    fab = inv.fabric()
    pool = inv.gpu_pool(fab)
    device = inv.device(pool, state=states.DEVICE_AVAILABLE)
    admin = inv.admin()
    with pytest.raises(states.StateChangeRefused) as info:
        dbapi.device_transition(admin, device.id, states.DEVICE_ATTACH)
    assert (info.value.what, info.value.state) == (
        'device', states.DEVICE_AVAILABLE)
    assert dbapi.device_get(admin, device.uuid).state == \
        states.DEVICE_AVAILABLE
    with pytest.raises(ValueError, match='state'):
        dbapi.device_set_facts(admin, device.id,
                               {'state': states.DEVICE_ATTACHED})


def test_the_device_door_keeps_the_pool_total_right():
    fab = inv.fabric()
    pool = inv.gpu_pool(fab)
    devices = [inv.device(pool, address='gpu-%d' % i) for i in range(2)]
    admin = inv.admin()
    assert dbapi.pool_get(admin, pool.uuid).total == 2
    dbapi.device_transition(admin, devices[0].id, states.DEVICE_MAINTAIN)
    assert dbapi.pool_get(admin, pool.uuid).total == 1
    dbapi.device_transition(admin, devices[0].id, states.DEVICE_FAULT)
    assert dbapi.pool_get(admin, pool.uuid).total == 1
    dbapi.device_transition(admin, devices[0].id, states.DEVICE_ENABLE)
    assert dbapi.pool_get(admin, pool.uuid).total == 2
    # The operator's door is the same one.
    dbapi.device_update(admin, devices[1].uuid,
                        {'state': states.DEVICE_MAINTENANCE, 'name': 'x'})
    assert dbapi.pool_get(admin, pool.uuid).total == 1
    assert dbapi.device_get(admin, devices[1].uuid).name == 'x'


def test_the_resize_door_refuses_a_second_pending_resize():
    host, lease, [first, second] = _memory_lease(status=states.BOUND)
    admin = inv.admin()
    att = dbapi.attachment_create(admin, {
        'lease_id': lease.id, 'host_id': host.id, 'mode': 'guest',
        'instance_uuid': INSTANCE, 'state': states.ATT_ATTACHED,
        'details': {'memory': {}}})
    dbapi.attachment_change_details(admin, att.id, None,
                                    resize_event=states.RESIZE_GROW,
                                    marked=[second.uuid])
    for event in (states.RESIZE_GROW, states.RESIZE_SHRINK,
                  states.RESIZE_SHRINK_ENDED):
        with pytest.raises(states.StateChangeRefused) as info:
            dbapi.attachment_change_details(admin, att.id, None,
                                            resize_event=event,
                                            marked=[first.uuid])
        assert info.value.state == states.RESIZE_GROWING
    [row] = dbapi.attachment_list(admin, lease.id)
    assert row.details == {'memory': {},
                           resizer_mod.PENDING_GROW: [second.uuid]}
    dbapi.attachment_change_details(
        admin, att.id, None, resize_event=states.RESIZE_GROW_ENDED)
    [row] = dbapi.attachment_list(admin, lease.id)
    assert row.details == {'memory': {}}


def _guest_swap(lease, host, extent, device):
    return dbapi.lease_guest_swap_noted(
        inv.admin(), lease.uuid, host.name, INSTANCE, 'guest_swap',
        dbapi.ACTION_SUCCESS, 'swapping', {extent.uuid: {
            'guest_device': device}})


def test_a_guest_swap_noted_while_a_grow_records_its_extents_is_kept(
        monkeypatch):
    # The grow reads the attachment, the guest's swap-on report of the
    # bind's extent is noted by another conductor at that instant, then
    # the grow writes its new extent: neither write may undo the other.
    host, lease, [bound, grown] = _memory_lease(status=states.BOUND)
    admin = inv.admin()
    dbapi.attachment_create(admin, {
        'lease_id': lease.id, 'host_id': host.id, 'mode': 'guest',
        'instance_uuid': INSTANCE, 'state': states.ATT_ATTACHED,
        'details': {'memory': {bound.uuid: {'disk': 'vdb'}}}})
    lease = dbapi.lease_get_by_id(admin, lease.id)
    resizer_mod._mark(admin, lease, resizer_mod.PENDING_GROW, [grown.uuid])
    listing = dbapi.attachment_list
    noted = []

    def list_then_report(*args, **kwargs):
        rows = listing(*args, **kwargs)
        if not noted:
            noted.append(_guest_swap(lease, host, bound, '/dev/vdb'))
        return rows

    monkeypatch.setattr(dbapi, 'attachment_list', list_then_report)
    resizer_mod.ElasticResizer._record_attached(
        admin, lease, {grown.uuid: {'disk': 'vdc'}}, add=True,
        clear=resizer_mod.PENDING_GROW)
    monkeypatch.setattr(dbapi, 'attachment_list', listing)
    assert noted == [True]
    [row] = dbapi.attachment_list(admin, lease.id)
    assert row.details['memory'] == {
        bound.uuid: {'disk': 'vdb', 'guest_device': '/dev/vdb'},
        grown.uuid: {'disk': 'vdc'}}
    assert resizer_mod.PENDING_GROW not in row.details


def test_a_restore_report_noted_while_a_grow_records_is_kept(monkeypatch):
    host, lease, [bound, grown] = _memory_lease(status=states.BOUND)
    admin = inv.admin()
    dbapi.attachment_create(admin, {
        'lease_id': lease.id, 'host_id': host.id, 'mode': 'guest',
        'instance_uuid': INSTANCE, 'state': states.ATT_ATTACHED,
        'details': {'memory': {bound.uuid: {'numa_node': 2}}}})
    lease = dbapi.lease_get_by_id(admin, lease.id)
    listing = dbapi.attachment_list
    noted = []

    def list_then_report(*args, **kwargs):
        rows = listing(*args, **kwargs)
        if not noted:
            noted.append(dbapi.lease_host_memory_restored(
                admin, lease.uuid, host.name, dbapi.ACTION_SUCCESS,
                'restored', {bound.uuid: {'numa_node': 3}}))
        return rows

    monkeypatch.setattr(dbapi, 'attachment_list', list_then_report)
    resizer_mod.ElasticResizer._record_attached(
        admin, lease, {grown.uuid: {'numa_node': 3}}, add=True)
    monkeypatch.setattr(dbapi, 'attachment_list', listing)
    assert noted == [True]
    [row] = dbapi.attachment_list(admin, lease.id)
    assert row.details['memory'] == {bound.uuid: {'numa_node': 3},
                                     grown.uuid: {'numa_node': 3}}


def test_changing_details_of_a_missing_attachment_writes_nothing():
    assert dbapi.attachment_change_details(
        inv.admin(), 12345, lambda d: dict(d, x=1)) is None
