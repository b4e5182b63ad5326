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

"""The LIO exporter's logic, over FakeRtslib (an in-memory stand-in for
rtslib_fb: the machines the tests run on have no configfs target)."""

import os

import pytest

from composable.common import exception
from composable.memory.exporters import base
from composable.memory.exporters import lio
from composable import privsep
from composable.privsep import lio as priv_lio
from composable.privsep import memory as priv_memory
from tests.unit.memory.conftest import INITIATOR
from tests.unit.memory.conftest import make_extent
from tests.unit.memory.conftest import SECRET
from tests.unit.memory import fakes

MiB = 1024 * 1024


@pytest.fixture
def rts():
    return fakes.FakeRtslib()


@pytest.fixture
def exporter(area, rts, memory_conf):
    return lio.LioExporter('mem-1', backend=lio.LioConfig(rts), area=area)


def _export(exporter, extent, initiator=INITIATOR, user='chap-1',
            secret=SECRET):
    return exporter.export(extent, initiator, user, secret)


def test_export_builds_a_closed_target(exporter, rts, area):
    extent = make_extent(size_mb=4)
    iqn = base.target_iqn(extent)

    result = _export(exporter, extent)

    assert result == {'target_iqn': iqn, 'lun': 1,
                      'portal': '192.0.2.10:3260'}
    (so,) = rts.storage_objects
    assert so.name == 'composable-extent-' + extent['uuid']
    assert so.udev_path == area.file_path(extent)
    assert so.size == 4 * MiB
    assert so.write_back is False
    (target,) = rts.targets
    assert target.wwn == iqn
    (tpg,) = target.tpgs
    assert tpg.tag == 1
    assert tpg.enable is True
    assert tpg.attributes == {'authentication': '1',
                              'generate_node_acls': '0',
                              'demo_mode_write_protect': '1'}
    (lun,) = tpg.luns
    assert lun.lun == 1 and lun.storage_object is so
    (acl,) = tpg.node_acls
    assert acl.node_wwn == INITIATOR
    assert (acl.chap_userid, acl.chap_password) == ('chap-1', SECRET)
    (mapped,) = acl.mapped_luns
    assert mapped.mapped_lun == 1 and mapped.tpg_lun is lun
    (portal,) = tpg.network_portals
    assert (portal.ip_address, portal.port, portal.iser) == (
        '192.0.2.10', 3260, False)
    assert os.path.getsize(area.file_path(extent)) == 4 * MiB


def test_iser_enables_iser_on_the_portal(exporter, rts):
    _export(exporter, make_extent(transport='iser'))
    (portal,) = rts.targets[0].tpgs[0].network_portals
    assert portal.iser is True


def test_iser_unavailable_is_explained(area, memory_conf):
    rts = fakes.FakeRtslib(iser_supported=False)
    exporter = lio.LioExporter('mem-1', backend=lio.LioConfig(rts),
                               area=area)
    with pytest.raises(exception.DriverError, match='ib_isert'):
        _export(exporter, make_extent(transport='iser'))
    assert rts.targets[0].tpgs[0].enable is False


def test_export_again_is_idempotent_and_reapplies(exporter, rts):
    extent = make_extent()
    _export(exporter, extent)
    tpg = rts.targets[0].tpgs[0]
    lun = tpg.luns[0]
    rts.NodeACL(tpg, 'iqn.x:intruder')
    rts.NetworkPortal(tpg, '0.0.0.0', 3260)

    _export(exporter, extent, initiator='iqn.x:compute-2',
            secret='other-secret')

    assert len(rts.targets) == 1 and len(rts.storage_objects) == 1
    assert tpg.luns == [lun]
    (acl,) = tpg.node_acls
    assert acl.node_wwn == 'iqn.x:compute-2'
    assert acl.chap_password == 'other-secret'
    assert [m.mapped_lun for m in acl.mapped_luns] == [1]
    assert [(p.ip_address, p.port) for p in tpg.network_portals] == [
        ('192.0.2.10', 3260)]


def test_wrong_backstore_is_replaced(exporter, rts, area):
    extent = make_extent()
    _export(exporter, extent)
    rts.storage_objects[0].udev_path = '/elsewhere'
    _export(exporter, extent)
    (so,) = rts.storage_objects
    assert so.udev_path == area.file_path(extent)
    assert rts.targets[0].tpgs[0].luns[0].storage_object is so


def test_unexport_and_scrub(exporter, rts, area):
    extent = make_extent()
    _export(exporter, extent)
    exporter.unexport(extent)
    assert rts.targets == [] and rts.storage_objects == []
    assert os.path.exists(area.file_path(extent))
    exporter.unexport(extent)
    exporter.scrub(extent)
    assert not os.path.exists(area.file_path(extent))
    exporter.scrub(extent)


def test_scrub_refuses_while_a_backstore_serves_the_file(exporter, rts,
                                                         area):
    extent = make_extent()
    _export(exporter, extent)
    rts.FileIOStorageObject('someone-else', dev=area.file_path(extent),
                            size=1)
    with pytest.raises(exception.DriverError, match='still serves'):
        exporter.scrub(extent)
    assert os.path.exists(area.file_path(extent))


def test_export_requires_chap(exporter, rts):
    with pytest.raises(exception.DriverError, match='CHAP'):
        exporter.export(make_extent(), INITIATOR, 'u', '')
    assert rts.targets == []


@pytest.mark.parametrize('portal,expected', [
    ('10.0.0.1:3261', ('10.0.0.1', 3261)),
    ('10.0.0.1', ('10.0.0.1', 3260)),
    ('[fe80::1]:3260', ('fe80::1', 3260)),
    ('fe80::1', ('fe80::1', 3260))])
def test_split_portal(portal, expected):
    assert lio.split_portal(portal) == expected


def test_privileged_functions_use_lio_config(privsep_in_process,
                                             monkeypatch, rts, all_logs):
    monkeypatch.setattr(priv_lio, 'load_rtslib', lambda: rts)
    iqn = 'iqn.2026-11.org.openstack.composable:extent-x'
    backend = lio.PrivilegedLio()
    backend.export(iqn, '/dev/shm/f', MiB, INITIATOR, 'u', SECRET,
                   '127.0.0.1', 3260, False)
    assert [t.wwn for t in rts.targets] == [iqn]
    assert backend.holders('/dev/shm/f') == ['composable-extent-x']
    assert backend.unexport(iqn) is True
    assert backend.unexport(iqn) is False
    assert SECRET not in '\n'.join(all_logs)


def test_rtslib_errors_become_driver_errors(privsep_in_process,
                                            monkeypatch):
    rts = fakes.FakeRtslib()

    def broken():
        raise rts.RTSLibError('configfs is not mounted')

    rts.RTSRoot = broken
    monkeypatch.setattr(priv_lio, 'load_rtslib', lambda: rts)
    # rtslib's errors cross the privsep channel as LioError ...
    with pytest.raises(priv_lio.LioError, match='LIO: configfs') as caught:
        priv_memory.lio_unexport('iqn.x:y')
    assert caught.value.code is priv_lio.ErrorCode.REFUSED
    # ... which the exporter turns into a DriverError.
    exporter = lio.LioExporter('mem-1', backend=lio.PrivilegedLio(),
                               area=object())
    with pytest.raises(exception.DriverError, match='LIO: configfs'):
        exporter.unexport(make_extent())


def test_missing_rtslib_is_explained(monkeypatch):
    def no_module(name):
        raise ImportError(name)

    monkeypatch.setattr(priv_lio.importlib, 'import_module', no_module)
    with pytest.raises(priv_lio.LioError, match='rtslib-fb') as caught:
        priv_lio.load_rtslib()
    assert caught.value.code is priv_lio.ErrorCode.NOT_INSTALLED


def test_privileged_entrypoints_are_registered():
    for func in (priv_memory.lio_export, priv_memory.lio_unexport,
                 priv_memory.lio_holders, priv_memory.tgtadm,
                 priv_memory.create_extent_file,
                 priv_memory.remove_extent_file, priv_memory.mount_tmpfs,
                 priv_memory.stat_extent_file,
                 priv_memory.list_extent_files):
        assert privsep.sys_admin_pctxt.is_entrypoint(func)


def test_exported_lists_the_extents_lio_serves(exporter, rts):
    extent = make_extent(size_mb=4)
    _export(exporter, extent)
    # A target composable did not make is none of its business.
    rts.Target(rts.FabricModule('iscsi'), 'iqn.2001-04.com.example:other')

    assert exporter.exported() == [extent['uuid']]
    exporter.unexport(extent)
    assert exporter.exported() == []


def test_privileged_target_names(privsep_in_process, monkeypatch, rts):
    monkeypatch.setattr(priv_lio, 'load_rtslib', lambda: rts)
    iqn = 'iqn.2026-11.org.openstack.composable:extent-x'
    backend = lio.PrivilegedLio()
    backend.export(iqn, '/dev/shm/f', MiB, INITIATOR, 'u', SECRET,
                   '127.0.0.1', 3260, False)
    assert backend.target_names() == [iqn]
    assert privsep.sys_admin_pctxt.is_entrypoint(
        priv_memory.lio_target_names)
