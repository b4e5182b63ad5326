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

"""The tgt exporter's command contract, against a fake tgtadm."""

import os
import subprocess
import threading

import pytest

from composable.common import exception
from composable import conf
from composable.memory import exporters
from composable.memory.exporters import base
from composable.memory.exporters import lio
from composable.memory.exporters import tgt
from composable.memory import tmpfs
from composable.privsep import memory as priv_memory
from tests.unit.memory.conftest import INITIATOR
from tests.unit.memory.conftest import make_extent
from tests.unit.memory.conftest import SECRET
from tests.unit.memory import fakes

CONF = conf.CONF
MiB = 1024 * 1024


@pytest.fixture
def exporter(area, fake_tgtadm, memory_conf):
    return tgt.TgtExporter('mem-1', runner=fake_tgtadm, area=area)


def _export(exporter, extent, initiator=INITIATOR, user='chap-1',
            secret=SECRET):
    return exporter.export(extent, initiator, user, secret)


def test_first_export_command_contract(exporter, fake_tgtadm, area):
    extent = make_extent()
    iqn = base.target_iqn(extent)
    path = os.path.join(area.path, 'extent-' + extent['uuid'])

    result = _export(exporter, extent)

    assert result == {'target_iqn': iqn, 'lun': 1,
                      'portal': '192.0.2.10:3260'}
    assert fake_tgtadm.calls[:2] == [
        ['--lld', 'iscsi', '--op', 'show', '--mode', 'target'],
        ['--lld', 'iser', '--op', 'show', '--mode', 'target']]
    # CHAP first, then the initiator rule, the LUN last: the target is
    # never reachable half-built.
    assert fake_tgtadm.commands() == [
        ['--lld', 'iscsi', '--op', 'new', '--mode', 'target', '--tid', '1',
         '--targetname', iqn],
        ['--lld', 'iscsi', '--op', 'new', '--mode', 'account', '--user',
         'chap-1', '--password', SECRET],
        ['--lld', 'iscsi', '--op', 'bind', '--mode', 'account', '--tid',
         '1', '--user', 'chap-1'],
        ['--lld', 'iscsi', '--op', 'bind', '--mode', 'target', '--tid', '1',
         '--initiator-name', INITIATOR],
        ['--lld', 'iscsi', '--op', 'new', '--mode', 'logicalunit', '--tid',
         '1', '--lun', '1', '--backing-store', path],
    ]
    assert not any('--initiator-address' in c or '-I' in c
                   for c in fake_tgtadm.calls)
    target = fake_tgtadm.targets[1]
    assert target['acls'] == [INITIATOR]
    assert target['accounts'] == ['chap-1']
    assert target['luns'] == {1: path}
    assert fake_tgtadm.accounts == {'chap-1': SECRET}
    assert os.path.getsize(path) == 4 * MiB


SHOW_ISCSI = ['--lld', 'iscsi', '--op', 'show', '--mode', 'target']
SHOW_ISER = ['--lld', 'iser', '--op', 'show', '--mode', 'target']


def test_export_does_not_ask_again_for_a_driver_tgtd_lacks(
        exporter, fake_tgtadm, area):
    # tgtd said once it has no iser driver: the next export's look shows
    # only its own driver (one tgtadm run less), and builds the target
    # with every step all the same.
    _export(exporter, make_extent())
    assert SHOW_ISER in fake_tgtadm.calls
    fake_tgtadm.calls.clear()

    extent = make_extent()
    _export(exporter, extent, user='chap-2')

    shows = [c for c in fake_tgtadm.calls if c[3] == 'show']
    assert shows == [SHOW_ISCSI]
    assert [c[2:6] for c in fake_tgtadm.commands()] == [
        ['--op', 'new', '--mode', 'target'],
        ['--op', 'new', '--mode', 'account'],
        ['--op', 'bind', '--mode', 'account'],
        ['--op', 'bind', '--mode', 'target'],
        ['--op', 'new', '--mode', 'logicalunit']]
    target = fake_tgtadm.targets[2]
    assert target['name'] == base.target_iqn(extent)
    assert target['accounts'] == ['chap-2']
    assert target['acls'] == [INITIATOR]
    assert target['luns'] == {1: area.file_path(extent)}


def test_export_still_shows_a_driver_tgtd_has(area, memory_conf):
    fake = fakes.FakeTgtadm(iser=True)
    exporter = tgt.TgtExporter('mem-1', runner=fake, area=area)
    _export(exporter, make_extent())
    fake.calls.clear()
    _export(exporter, make_extent())
    assert [c for c in fake.calls if c[3] == 'show'] == [SHOW_ISCSI,
                                                         SHOW_ISER]


def test_a_refused_target_looks_at_every_driver_again(
        exporter, fake_tgtadm, area):
    # tgtd came back with an iser driver and a target of this extent's
    # name under it (and on the tid the first look would pick): tgtd
    # refuses the new target, and the exporter then finds the one under
    # iser and rebuilds it under the extent's driver.
    _export(exporter, make_extent())
    extent = make_extent()
    fake_tgtadm.iser = True
    fake_tgtadm.add_target(2, base.target_iqn(extent), lld='iser')
    fake_tgtadm.calls.clear()

    _export(exporter, extent, user='chap-2')

    assert fake_tgtadm.calls[0] == SHOW_ISCSI
    assert SHOW_ISER in fake_tgtadm.calls
    mine = [t for t in fake_tgtadm.targets.values()
            if t['name'] == base.target_iqn(extent)]
    assert len(mine) == 1 and mine[0]['lld'] == 'iscsi'
    assert mine[0]['acls'] == [INITIATOR]
    assert mine[0]['luns'] == {1: area.file_path(extent)}


def test_iser_uses_the_iser_driver(area, memory_conf):
    fake = fakes.FakeTgtadm(iser=True)
    exporter = tgt.TgtExporter('mem-1', runner=fake, area=area)
    extent = make_extent(transport='iser')

    _export(exporter, extent)

    changes = fake.commands()
    assert len(changes) == 5
    assert all(c[:2] == ['--lld', 'iser'] for c in changes)
    assert fake.targets[1]['lld'] == 'iser'

    exporter.unexport(extent)
    assert fake.targets == {}
    assert all(c[:2] == ['--lld', 'iser'] for c in fake.commands())


def test_transport_falls_back_to_config(area, memory_conf):
    CONF.set_override('transport', 'iser', 'memory_node')
    fake = fakes.FakeTgtadm(iser=True)
    exporter = tgt.TgtExporter('mem-1', runner=fake, area=area)
    _export(exporter, make_extent(transport=None))
    assert fake.targets[1]['lld'] == 'iser'


def test_unknown_transport_refused(exporter):
    with pytest.raises(exception.DriverError, match='unknown transport'):
        _export(exporter, make_extent(transport='fc'))


def test_free_tid_is_picked(exporter, fake_tgtadm):
    fake_tgtadm.add_target(1, 'iqn.other:a')
    fake_tgtadm.add_target(3, 'iqn.other:b')
    _export(exporter, make_extent())
    assert fake_tgtadm.targets[2]['name'].startswith(
        'iqn.2026-11.org.openstack.composable:extent-')


def test_tid_race_is_retried(exporter, fake_tgtadm):
    # Another process creates targets 1 and 2 between our show and new.
    fake_tgtadm.steal_tids = [1, 2]
    extent = make_extent()
    _export(exporter, extent)
    news = [c for c in fake_tgtadm.calls
            if c[2:6] == ['--op', 'new', '--mode', 'target']]
    assert [c[7] for c in news] == ['1', '2', '3']
    assert fake_tgtadm.targets[3]['name'] == base.target_iqn(extent)


def test_tid_search_gives_up(exporter, fake_tgtadm):
    fake_tgtadm.steal_tids = list(range(1, 100))
    with pytest.raises(exception.DriverError, match='free tgt target id'):
        _export(exporter, make_extent())


def test_two_exporters_share_the_lock(area, memory_conf, fake_tgtadm):
    one = tgt.TgtExporter('mem-1', runner=fake_tgtadm, area=area)
    two = tgt.TgtExporter('mem-1', runner=fake_tgtadm, area=area)
    extents = [make_extent() for _ in range(8)]
    threads = [threading.Thread(target=_export,
                                args=(one if i % 2 else two, e))
               for i, e in enumerate(extents)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    names = sorted(t['name'] for t in fake_tgtadm.targets.values())
    assert names == sorted(base.target_iqn(e) for e in extents)
    assert sorted(fake_tgtadm.targets) == list(range(1, 9))


def test_export_again_reuses_target_and_reapplies(exporter, fake_tgtadm,
                                                  area):
    extent = make_extent()
    _export(exporter, extent)
    path = area.file_path(extent)
    with open(path, 'r+b') as f:
        f.write(b'live swap')
    # Someone opened the target up meanwhile.
    target = fake_tgtadm.targets[1]
    target['acls'] += ['ALL', '10.0.0.0/8', 'iqn.x:intruder']
    fake_tgtadm.calls.clear()

    result = _export(exporter, extent, secret='new-secret-value')

    assert result['target_iqn'] == base.target_iqn(extent)
    assert list(fake_tgtadm.targets) == [1]
    assert target['acls'] == [INITIATOR]
    assert target['accounts'] == ['chap-1']
    assert fake_tgtadm.accounts == {'chap-1': 'new-secret-value'}
    cmds = fake_tgtadm.commands()
    # The password is replaced while a throw-away account keeps the
    # target under CHAP.
    spare = 'chap-1' + tgt.REKEY_SUFFIX
    ops = [(c[3], c[5], c[c.index('--user') + 1] if '--user' in c else
            c[-1]) for c in cmds]
    assert ops[:8] == [
        ('new', 'account', 'chap-1'),
        ('delete', 'account', spare),
        ('new', 'account', spare),
        ('bind', 'account', spare),
        ('delete', 'account', 'chap-1'),
        ('new', 'account', 'chap-1'),
        ('bind', 'account', 'chap-1'),
        ('delete', 'account', spare),
    ]
    assert ['--lld', 'iscsi', '--op', 'unbind', '--mode', 'target', '--tid',
            '1', '--initiator-address', 'ALL'] in cmds
    assert ['--lld', 'iscsi', '--op', 'unbind', '--mode', 'target', '--tid',
            '1', '--initiator-address', '10.0.0.0/8'] in cmds
    assert ['--lld', 'iscsi', '--op', 'unbind', '--mode', 'target', '--tid',
            '1', '--initiator-name', 'iqn.x:intruder'] in cmds
    assert not any(c[5] == 'logicalunit' for c in cmds)
    with open(path, 'rb') as f:
        assert f.read(9) == b'live swap'


def test_export_to_another_host_moves_the_rule(exporter, fake_tgtadm):
    extent = make_extent()
    _export(exporter, extent)
    _export(exporter, extent, initiator='iqn.x:compute-2')
    assert fake_tgtadm.targets[1]['acls'] == ['iqn.x:compute-2']


def test_stale_account_and_lun_are_replaced(exporter, fake_tgtadm, area):
    extent = make_extent()
    iqn = base.target_iqn(extent)
    fake_tgtadm.accounts['old-user'] = 'x'
    fake_tgtadm.add_target(5, iqn, accounts=['old-user'],
                           luns={1: '/elsewhere'})
    _export(exporter, extent)
    target = fake_tgtadm.targets[5]
    assert target['accounts'] == ['chap-1']
    assert 'old-user' not in fake_tgtadm.accounts
    assert target['luns'] == {1: area.file_path(extent)}


def test_transport_change_rebuilds_the_target(area, memory_conf):
    fake = fakes.FakeTgtadm(iser=True)
    exporter = tgt.TgtExporter('mem-1', runner=fake, area=area)
    extent = make_extent(transport='tcp')
    _export(exporter, extent)
    extent['transport'] = 'iser'
    _export(exporter, extent)
    assert [t['lld'] for t in fake.targets.values()] == ['iser']


def test_unexport_removes_target_and_account(exporter, fake_tgtadm, area):
    extent = make_extent()
    _export(exporter, extent)
    fake_tgtadm.targets[1]['sessions'] = 1
    fake_tgtadm.calls.clear()

    exporter.unexport(extent)

    assert fake_tgtadm.targets == {}
    assert fake_tgtadm.accounts == {}
    assert ['--lld', 'iscsi', '--op', 'delete', '--force', '--mode',
            'target', '--tid', '1'] in fake_tgtadm.calls
    # The memory stays until scrub.
    assert os.path.exists(area.file_path(extent))
    # Idempotent.
    exporter.unexport(extent)
    exporter.unexport(dict(extent, chap_username='chap-1'))


def test_unexport_removes_orphan_account(exporter, fake_tgtadm):
    fake_tgtadm.accounts['chap-9'] = 'x'
    exporter.unexport(make_extent(chap_username='chap-9'))
    assert fake_tgtadm.accounts == {}


def test_scrub_removes_target_and_file(exporter, fake_tgtadm, area):
    extent = make_extent()
    _export(exporter, extent)
    path = area.file_path(extent)
    exporter.scrub(extent)
    assert not os.path.exists(path)
    assert fake_tgtadm.targets == {}
    assert fake_tgtadm.accounts == {}
    exporter.scrub(extent)  # idempotent


def test_scrub_refuses_while_another_target_serves_the_file(
        exporter, fake_tgtadm, area):
    extent = make_extent()
    _export(exporter, extent)
    fake_tgtadm.add_target(7, 'iqn.other:x',
                           luns={1: area.file_path(extent)})
    with pytest.raises(exception.DriverError, match='still serves'):
        exporter.scrub(extent)
    assert os.path.exists(area.file_path(extent))


def test_export_requires_chap_and_initiator(exporter, fake_tgtadm):
    with pytest.raises(exception.DriverError, match='CHAP'):
        exporter.export(make_extent(), INITIATOR, None, None)
    with pytest.raises(exception.DriverError, match='initiator'):
        exporter.export(make_extent(), '', 'u', SECRET)
    assert fake_tgtadm.calls == []


def test_portal_from_extent_when_config_unset(exporter):
    CONF.clear_override('portal', 'memory_node')
    extent = make_extent()
    assert _export(exporter, extent)['portal'] == '198.51.100.7:3260'
    extent = make_extent(portal=None)
    with pytest.raises(exception.DriverError, match='portal'):
        _export(exporter, extent)


def test_tgtd_down_is_explained(exporter, fake_tgtadm):
    fake_tgtadm.down = True
    with pytest.raises(exception.DriverError,
                       match='start the tgt service'):
        _export(exporter, make_extent())


def test_iser_without_the_driver_is_explained(exporter, fake_tgtadm):
    with pytest.raises(exception.DriverError) as err:
        _export(exporter, make_extent(transport='iser'))
    assert 'has no iser driver' in str(err.value)
    assert 'transport tcp' in str(err.value)


def test_unexpected_failure_is_reported(exporter, fake_tgtadm):
    fake_tgtadm.fail[('new', 'logicalunit')] = (
        22, 'tgtadm: invalid request\n')
    with pytest.raises(exception.DriverError) as err:
        _export(exporter, make_extent())
    assert 'invalid request' in str(err.value)
    assert 'exit 22' in str(err.value)


def test_secret_never_logged(exporter, fake_tgtadm, all_logs):
    extent = make_extent()
    _export(exporter, extent)
    _export(exporter, extent, secret=SECRET + '-2')
    fake_tgtadm.fail[('new', 'account')] = (
        22, 'tgtadm: bad password %s\n' % SECRET)
    with pytest.raises(exception.DriverError) as err:
        _export(exporter, make_extent())
    exporter.unexport(extent)
    text = '\n'.join(all_logs)
    assert '--password ***' in text
    assert 'tgtadm --lld iscsi --op new --mode account' in text
    assert SECRET not in text
    assert SECRET not in str(err.value)
    assert '--password ***' in str(err.value)


def test_masked_command():
    masked = priv_memory.masked_command(
        ['tgtadm', '--op', 'new', '--user', 'u', '--password', 'pw',
         '--password=pw2', '-w', 'pw3'])
    assert 'pw' not in masked.replace('--password', '')
    assert masked == ('tgtadm --op new --user u --password *** '
                      '--password=*** -w ***')


def test_privileged_tgtadm_runs_without_shell_and_masks(
        privsep_in_process, monkeypatch, all_logs):
    seen = {}

    def fake_run(argv, **kwargs):
        seen['argv'], seen['kwargs'] = argv, kwargs
        return subprocess.CompletedProcess(argv, 22, '',
                                           'tgtadm: this account already '
                                           'exists\n')

    monkeypatch.setattr(priv_memory.subprocess, 'run', fake_run)
    rc, out, err = priv_memory.tgtadm(
        ['--lld', 'iscsi', '--op', 'new', '--mode', 'account', '--user',
         'u', '--password', SECRET])
    assert rc == 22 and 'already exists' in err
    assert seen['argv'][0] == 'tgtadm'
    assert seen['argv'][-1] == SECRET
    assert seen['kwargs']['shell'] is False
    text = '\n'.join(all_logs)
    assert '--password ***' in text
    assert SECRET not in text


def test_privileged_tgtadm_refuses_a_string(privsep_in_process):
    with pytest.raises(priv_memory.MemoryNodeError) as caught:
        priv_memory.tgtadm('--op show --mode target; rm -rf /')
    assert caught.value.code is priv_memory.ErrorCode.INVALID_ARGUMENT
    assert 'must be a list of strings' in caught.value.message


def test_privileged_tgtadm_missing_binary(privsep_in_process, monkeypatch):
    monkeypatch.setattr(priv_memory, 'TGTADM', '/nonexistent/tgtadm')
    rc, _out, err = priv_memory.tgtadm(['--op', 'show'])
    assert rc == 127 and 'not found' in err


SHOW = """Target 1: iqn.2026-11.org.test:exp1
    System information:
        Driver: iscsi
        State: ready
    I_T nexus information:
        I_T nexus: 3
            Initiator: iqn.x:init1 alias: host
            Connection: 0
                IP Address: 127.0.0.1
    LUN information:
        LUN: 0
            Type: controller
            SCSI ID: IET     03850000
            Size: 0 MB, Block size: 1
            Backing store type: null
            Backing store path: None
            Backing store flags: 
        LUN: 1
            Type: disk
            Size: 8 MB, Block size: 512
            Backing store type: rdwr
            Backing store path: /tmp/mexp/f1
            Backing store flags: 
    Account information:
        u1
        u2 (outgoing)
    ACL information:
        ALL
        iqn.x:init1
Target 12: iqn.2026-11.org.test:exp2
    System information:
        Driver: iser
        State: ready
    I_T nexus information:
    LUN information:
        LUN: 0
            Backing store path: None
    Account information:
    ACL information:
"""  # noqa: W291


def test_parse_show():
    one, two = tgt.parse_show(SHOW)
    assert one == {'tid': 1, 'name': 'iqn.2026-11.org.test:exp1',
                   'driver': 'iscsi', 'luns': {0: None, 1: '/tmp/mexp/f1'},
                   'accounts': ['u1', 'u2'], 'acls': ['ALL', 'iqn.x:init1'],
                   'sessions': 1}
    assert two['tid'] == 12 and two['driver'] == 'iser'
    assert two['accounts'] == [] and two['acls'] == []
    assert tgt.parse_show('') == []


@pytest.mark.parametrize('rule,address', [
    ('ALL', True), ('192.168.0.1', True), ('10.0.0.0/8', True),
    ('fe80::1', True), ('iqn.1994-05.com.redhat:abc', False),
    ('eui.0123456789abcdef', False)])
def test_is_address_rule(rule, address):
    assert tgt.is_address_rule(rule) is address


def test_loaded_by_name():
    exporter = exporters.get_exporter('tgt', 'mem-1')
    assert isinstance(exporter, tgt.TgtExporter)
    # No runner: every tgt sequence is one privileged call.
    assert exporter._runner is None
    assert isinstance(exporter._tgt, tgt._Privileged)
    assert isinstance(exporter.area, tmpfs.TmpfsArea)
    assert isinstance(exporters.get_exporter('lio', 'mem-1'),
                      lio.LioExporter)


def test_exported_lists_the_extents_tgtd_serves(exporter, fake_tgtadm):
    one, two = make_extent(), make_extent()
    _export(exporter, one)
    _export(exporter, two)
    # A target composable did not make is none of its business.
    fake_tgtadm.add_target(9, 'iqn.2001-04.com.example:other')

    assert exporter.exported() == sorted([one['uuid'], two['uuid']])

    exporter.unexport(one)
    assert exporter.exported() == [two['uuid']]


def test_extent_uuid_of_target_names():
    extent = make_extent()
    assert base.extent_uuid_of(base.target_iqn(extent)) == extent['uuid']
    assert base.extent_uuid_of('iqn.2001-04.com.example:other') is None
    assert base.extent_uuid_of(base.TARGET_PREFIX) is None
    assert base.extent_uuid_of(None) is None


def test_agent_report_lists_the_targets_or_says_why_not(exporter,
                                                        fake_tgtadm):
    from composable.agent import manager as agent_manager
    agent = agent_manager.AgentManager('mem-1', ['memory_node'],
                                       exporter=exporter)
    extent = make_extent()
    _export(exporter, extent)

    report = agent.memory.get_memory_report(None)
    assert report['exported_extent_uuids'] == [extent['uuid']]
    assert report['extent_uuids'] == [extent['uuid']]
    # The periodic log line does not ask tgtd.
    assert 'exported_extent_uuids' not in agent.memory_node.report()

    fake_tgtadm.down = True
    report = agent.memory.get_memory_report(None)
    # Unknown is not "none": the conductor then leaves targets alone.
    assert report['exported_extent_uuids'] is None
    assert 'start the tgt service' in report['exporter_problem']
