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

"""The single privileged tgt call: a whole export or unexport is one
call of composable.privsep.memory.tgt_export / tgt_unexport, which runs
the tgtadm sequence inside the privsep daemon (here in-process, over a
fake tgtadm: tgtd is shared by the whole machine; the real one is in
tests/functional/memory/test_tgt_real.py), rolls a half-built target back
and fails with TgtError of a typed code, never with a secret."""

import os

import pytest

from composable.common import exception
from composable.memory.exporters import base
from composable.memory.exporters import tgt
from composable.privsep import errors
from composable.privsep import memory as priv_memory
from composable.privsep import tgt as priv_tgt
from tests.unit.memory.conftest import INITIATOR
from tests.unit.memory.conftest import make_extent
from tests.unit.memory.conftest import SECRET
from tests.unit.memory import fakes

Code = errors.ErrorCode
IQN = 'iqn.2026-11.org.openstack.composable:extent-x'
PATH = '/srv/composable/extent-x'


@pytest.fixture
def fake(monkeypatch, privsep_in_process):
    """tgtadm, as the privileged functions run it, is the fake."""
    fake = fakes.FakeTgtadm()
    monkeypatch.setattr(priv_memory, '_run_tgtadm', fake)
    return fake


@pytest.fixture
def counted(monkeypatch):
    """The privileged calls the exporter makes, by name; a tgtadm call
    of its own (one privileged call per command) fails the test."""
    calls = []
    for name in ('tgt_export', 'tgt_unexport', 'tgt_targets',
                 'create_extent_file', 'remove_extent_file'):
        real = getattr(priv_memory, name)

        def count(*args, _real=real, _name=name, **kwargs):
            calls.append(_name)
            return _real(*args, **kwargs)
        monkeypatch.setattr(priv_memory, name, count)

    def no_tgtadm(args):
        raise AssertionError('one privileged call per tgtadm command: %s'
                             % (args,))
    monkeypatch.setattr(priv_memory, 'tgtadm', no_tgtadm)
    return calls


@pytest.fixture
def exporter(area, memory_conf):
    return tgt.TgtExporter('mem-1', area=area)


def test_export_and_unexport_are_one_privileged_call_each(
        exporter, fake, counted, area):
    extent = make_extent()
    iqn = base.target_iqn(extent)
    path = area.file_path(extent)

    result = exporter.export(extent, INITIATOR, 'chap-1', SECRET)

    assert result['target_iqn'] == iqn
    # The extent's file, then the whole tgtadm sequence in one call.
    assert counted == ['create_extent_file', 'tgt_export']
    assert fake.calls == [
        ['--lld', 'iscsi', '--op', 'show', '--mode', 'target'],
        ['--lld', 'iser', '--op', 'show', '--mode', 'target'],
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
    # What tgtd lacks came back from the call: the next export's look
    # leaves the iser driver out.
    assert exporter._absent == {'iser'}
    del counted[:]
    fake.calls.clear()
    exporter.export(make_extent(), INITIATOR, 'chap-2', SECRET)
    assert [c for c in fake.calls if c[3] == 'show'] == [
        ['--lld', 'iscsi', '--op', 'show', '--mode', 'target']]

    del counted[:]
    exporter.unexport(dict(extent, chap_username='chap-1'))
    assert counted == ['tgt_unexport']
    assert [t['name'] for t in fake.targets.values()] != [iqn]
    assert 'chap-1' not in fake.accounts

    del counted[:]
    exporter.scrub(extent)
    assert counted == ['tgt_unexport', 'tgt_targets', 'remove_extent_file']
    assert not os.path.exists(path)


def test_the_reply_carries_no_secret(fake):
    # The daemon logs its replies at debug level.
    reply = priv_memory.tgt_export('iscsi', IQN, PATH, INITIATOR, 'chap-1',
                                   SECRET)
    commands = reply.pop('commands')
    assert reply == {'tid': 1, 'created': True, 'absent': ['iser']}
    # The commands run, for the caller's log, with the password masked.
    assert len(commands) == 7
    assert commands[3] == ('tgtadm --lld iscsi --op new --mode account '
                           '--user chap-1 --password ***')
    assert SECRET not in repr(reply) + repr(commands)


@pytest.mark.parametrize('step', [('bind', 'account'), ('bind', 'target'),
                                  ('new', 'logicalunit')])
def test_a_failed_step_rolls_the_new_target_back(fake, step):
    fake.fail[step] = (22, 'tgtadm: invalid request\n')

    with pytest.raises(priv_tgt.TgtError) as caught:
        priv_memory.tgt_export('iscsi', IQN, PATH, INITIATOR, 'chap-1',
                               SECRET)

    assert caught.value.code is Code.REFUSED
    assert 'exit 22' in caught.value.message
    assert 'invalid request' in caught.value.message
    # Nothing half-built stays: the target and the account it made are
    # deleted again, after the failed step.
    assert fake.targets == {}
    assert fake.accounts == {}
    assert fake.commands()[-2:] == [
        ['--lld', 'iscsi', '--op', 'delete', '--mode', 'account', '--user',
         'chap-1'],
        ['--lld', 'iscsi', '--op', 'delete', '--force', '--mode', 'target',
         '--tid', '1']]


def test_a_failed_re_export_keeps_the_target_it_found(fake):
    # The target was there before (a live bind re-exported): the failure
    # is reported and the target left as it is, for the flow to decide.
    priv_memory.tgt_export('iscsi', IQN, PATH, INITIATOR, 'chap-1', SECRET)
    fake.fail[('bind', 'target')] = (22, 'tgtadm: invalid request\n')
    with pytest.raises(priv_tgt.TgtError):
        priv_memory.tgt_export('iscsi', IQN, PATH, 'iqn.x:compute-2',
                               'chap-1', SECRET)
    assert [t['name'] for t in fake.targets.values()] == [IQN]
    assert fake.targets[1]['accounts'] == ['chap-1']
    assert fake.targets[1]['luns'] == {1: PATH}


def test_a_failed_rollback_still_raises_the_export_error(fake, caplog):
    fake.fail[('new', 'logicalunit')] = (22, 'tgtadm: invalid request\n')
    fake.fail[('delete', 'target')] = (22, 'tgtadm: busy\n')
    with pytest.raises(priv_tgt.TgtError) as caught:
        priv_memory.tgt_export('iscsi', IQN, PATH, INITIATOR, 'chap-1',
                               SECRET)
    assert 'logicalunit' in caught.value.message
    assert 'half-built' in caplog.text


def test_a_secret_tgtd_repeats_is_masked(fake, caplog):
    caplog.set_level('DEBUG')
    fake.fail[('new', 'logicalunit')] = (
        22, 'tgtadm: no, account chap-1 with %s\n' % SECRET)
    with pytest.raises(priv_tgt.TgtError) as caught:
        priv_memory.tgt_export('iscsi', IQN, PATH, INITIATOR, 'chap-1',
                               SECRET)
    assert SECRET not in caught.value.message
    assert SECRET not in str(caught.value.args)
    assert priv_tgt.MASK in caught.value.message
    assert SECRET not in caplog.text


@pytest.mark.parametrize('rc,err,code,text', [
    (107, 'tgtadm: failed to send request hdr to tgt daemon',
     Code.NO_DEVICE, 'start the tgt service'),
    (22, "tgtadm: can't find the driver", Code.NO_DEVICE,
     'transport tcp'),
    (127, 'tgtadm: command not found', Code.NOT_INSTALLED,
     'install the tgt package'),
    (124, 'tgtadm timed out after 60 seconds', Code.TIMED_OUT,
     'did not finish in time'),
    (22, 'tgtadm: out of memory', Code.REFUSED, 'exit 22'),
])
def test_failures_have_typed_codes(fake, rc, err, code, text):
    fake.fail[('show', 'target')] = (rc, err)
    with pytest.raises(priv_tgt.TgtError) as caught:
        priv_memory.tgt_export('iscsi', IQN, PATH, INITIATOR, 'chap-1',
                               SECRET)
    assert caught.value.code is code
    assert text in caught.value.message
    # Across the privsep channel the error is rebuilt from its args.
    again = priv_tgt.TgtError(*caught.value.args)
    assert again.code is code and again.message == caught.value.message


def test_no_free_tid_is_no_space(fake):
    fake.steal_tids = list(range(1, 100))
    with pytest.raises(priv_tgt.TgtError) as caught:
        priv_memory.tgt_export('iscsi', IQN, PATH, INITIATOR, 'chap-1',
                               SECRET)
    assert caught.value.code is Code.NO_SPACE


def test_a_target_that_stays_is_busy(fake, monkeypatch):
    priv_memory.tgt_export('iscsi', IQN, PATH, INITIATOR, 'chap-1', SECRET)
    # tgtd answers the delete but keeps the target.
    fake.fail[('delete', 'target')] = (0, '')
    with pytest.raises(priv_tgt.TgtError) as caught:
        priv_memory.tgt_unexport('iscsi', IQN, 'chap-1')
    assert caught.value.code is Code.BUSY


@pytest.mark.parametrize('args', [
    ('fc', IQN, PATH, INITIATOR, 'chap-1', SECRET),
    ('iscsi', IQN, PATH, INITIATOR, 'chap-1', None),
    ('iscsi', IQN, PATH, 'iqn.x:a\n--op delete', 'chap-1', SECRET),
    ('iscsi', '', PATH, INITIATOR, 'chap-1', SECRET),
])
def test_bad_arguments_are_refused_before_any_tgtadm(fake, args):
    with pytest.raises(priv_tgt.TgtError) as caught:
        priv_memory.tgt_export(*args)
    assert caught.value.code is Code.INVALID_ARGUMENT
    assert fake.calls == []


def test_the_exporter_reports_a_typed_failure_with_its_node(
        exporter, fake, area):
    fake.down = True
    with pytest.raises(exception.DriverError) as caught:
        exporter.export(make_extent(), INITIATOR, 'chap-1', SECRET)
    assert str(caught.value).startswith('memory node mem-1: tgtd does not '
                                        'answer')
    assert SECRET not in str(caught.value)


def test_unexport_and_targets_in_one_call(fake):
    priv_memory.tgt_export('iscsi', IQN, PATH, INITIATOR, 'chap-1', SECRET)
    shown = priv_memory.tgt_targets('iscsi', absent=['iser'])
    assert [t['name'] for t in shown['targets']] == [IQN]
    assert shown['targets'][0]['luns'] == {0: None, 1: PATH}
    removed = priv_memory.tgt_unexport('iscsi', IQN, 'chap-1')
    assert removed['removed'] == 1 and removed['absent'] == ['iser']
    assert fake.targets == {} and fake.accounts == {}
    # Idempotent.
    assert priv_memory.tgt_unexport('iscsi', IQN, 'chap-1')['removed'] == 0
