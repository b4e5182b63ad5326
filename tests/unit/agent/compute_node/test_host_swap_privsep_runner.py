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

"""Host-mode commands run as root through oslo.privsep: PrivsepRunner
maps the command contract of HostSwap onto the privileged functions of
composable.privsep.compute, which check what they are asked to run.

The privileged functions run in this process here (as the test user);
commands that would need root or a real block device are replaced by
small scripts, or refused before anything runs."""

import contextlib
import os
import stat

import pytest

from composable.agent.compute_node import host_swap
from composable.common import exception
from composable import privsep
from composable.privsep import compute as priv_compute
from tests.unit.agent.compute_node import fakes
from tests.unit.agent.compute_node import test_host_swap as contract

SECRET = contract.SECRET


@pytest.fixture
def privsep_in_process():
    privsep.sys_admin_pctxt.set_client_mode(False)
    yield
    privsep.sys_admin_pctxt.set_client_mode(True)


class OpsOverRunner(object):
    """Privileged functions that rebuild the command they would run and
    hand it to a RecordingRunner, which plays the host and records the
    argv: what the privileged side runs is checked against the same
    contract as HostSwap's own tests."""

    def __init__(self, runner):
        self.runner = runner
        self.calls = []

    def _run(self, argv, secrets=()):
        try:
            result = self.runner(argv, ok_exit_codes=tuple(range(256)),
                                 secrets=secrets)
        except host_swap.CommandFailed as exc:
            return {'exit_code': exc.exit_code, 'stdout': exc.stdout,
                    'stderr': exc.stderr, 'timed_out': False}
        return {'exit_code': result.exit_code, 'stdout': result.stdout,
                'stderr': result.stderr, 'timed_out': False}

    def iscsiadm(self, args, timeout=None):
        self.calls.append(('iscsiadm', list(args), timeout))
        return self._run(['iscsiadm'] + list(args),
                         priv_compute.secrets_of(args))

    def mkswap(self, device, timeout=None):
        self.calls.append(('mkswap', device, timeout))
        return self._run(['mkswap', device])

    def swapon(self, device, priority, timeout=None):
        self.calls.append(('swapon', device, priority, timeout))
        return self._run(['swapon', '-p', str(priority), device])

    def swapoff(self, device, timeout=None):
        self.calls.append(('swapoff', device, timeout))
        return self._run(['swapoff', device])


class CannedOps(object):
    def __init__(self, result=None, error=None):
        self.result = result or {'exit_code': 0, 'stdout': '',
                                 'stderr': '', 'timed_out': False}
        self.error = error
        self.calls = []

    def _answer(self, *call):
        self.calls.append(call)
        if self.error is not None:
            raise self.error
        return self.result

    def iscsiadm(self, args, timeout=None):
        return self._answer('iscsiadm', args, timeout)

    def mkswap(self, device, timeout=None):
        return self._answer('mkswap', device, timeout)

    def swapon(self, device, priority, timeout=None):
        return self._answer('swapon', device, priority, timeout)

    def swapoff(self, device, timeout=None):
        return self._answer('swapoff', device, timeout)


@contextlib.contextmanager
def refused(match=None):
    """The privileged function refuses its arguments with ComputeError,
    code INVALID_ARGUMENT (as it crosses the privsep channel)."""
    with pytest.raises(priv_compute.ComputeError, match=match) as caught:
        yield caught
    assert caught.value.code is priv_compute.ErrorCode.INVALID_ARGUMENT
    assert caught.value.args == (caught.value.code.value,
                                 caught.value.message)


def test_host_swap_runs_through_privsep_by_default():
    assert isinstance(host_swap.HostSwap().runner, host_swap.PrivsepRunner)
    assert host_swap.PrivsepRunner().ops is priv_compute


def test_attach_and_detach_keep_the_command_contract(tmp_path):
    host = fakes.FakeHostState(tmp_path, initiator_iqn=contract.INITIATOR)
    recording = fakes.RecordingRunner(host)
    ops = OpsOverRunner(recording)
    swap = contract._swap(host, host_swap.PrivsepRunner(ops=ops))
    extent = contract._extent()

    details = swap.attach([extent], contract.INITIATOR)

    node = ['iscsiadm', '-m', 'node', '-T', extent['target_iqn'],
            '-p', '192.0.2.10:3260']
    real = os.path.join(host.dev, 'sdb')
    assert recording.commands == [
        node + ['-o', 'new'],
        node + ['-o', 'update', '-n', 'node.startup', '-v', 'manual'],
        node + ['-o', 'update', '-n',
                'node.session.timeo.replacement_timeout', '-v', '86400'],
        node + ['-o', 'update', '-n', 'node.session.auth.authmethod',
                '-v', 'CHAP'],
        node + ['-o', 'update', '-n', 'node.session.auth.username',
                '-v', 'user1'],
        node + ['-o', 'update', '-n', 'node.session.auth.password',
                '-v', SECRET + '1'],
        node + ['--login'],
        ['mkswap', real],
        ['swapon', '-p', '10', real],
    ]
    assert details[extent['uuid']]['swap_device'] == real
    assert ('swapon', real, 10, None) in ops.calls
    # The login waits as long as HostSwap allows, in the privsep daemon.
    assert ('iscsiadm', node[1:] + ['--login'], 30) in ops.calls

    recording.commands.clear()
    swap.detach([extent])
    assert recording.names() == ['swapoff', 'iscsiadm --logout',
                                 'iscsiadm delete']
    assert host.swaps == {} and host.sessions == set()


def test_expected_and_unexpected_exit_codes():
    ops = CannedOps({'exit_code': 15, 'stdout': '', 'timed_out': False,
                     'stderr': 'session exists, password %s' % SECRET})
    runner = host_swap.PrivsepRunner(ops=ops)
    argv = ['iscsiadm', '-m', 'node', '-T', 'iqn.x:y', '--login']
    assert runner(argv, ok_exit_codes=(0, 15)).exit_code == 15
    with pytest.raises(host_swap.CommandFailed) as info:
        runner(argv, secrets=(SECRET,))
    assert info.value.exit_code == 15
    assert SECRET not in str(info.value) and '***' in str(info.value)


def test_timeout_and_refusals_are_driver_errors():
    timed_out = CannedOps({'exit_code': None, 'stdout': '', 'stderr': '',
                           'timed_out': True})
    with pytest.raises(exception.DriverTimeout) as info:
        host_swap.PrivsepRunner(ops=timed_out)(['swapoff', '/dev/sdb'],
                                               timeout=7)
    assert 'swapoff /dev/sdb' in str(info.value) and '7' in str(info.value)

    refused = CannedOps(error=priv_compute.ComputeError(
        priv_compute.ErrorCode.INVALID_ARGUMENT, '/dev/sda1 is mounted'))
    with pytest.raises(exception.DriverError) as info:
        host_swap.PrivsepRunner(ops=refused)(['mkswap', '/dev/sda1'])
    assert 'refused to run mkswap /dev/sda1 as root' in str(info.value)


@pytest.mark.parametrize('argv', [
    ['rm', '-rf', '/'], ['mkswap', '-f', '/dev/sdb'],
    ['swapon', '/dev/sdb'], ['swapoff', '-a'], []])
def test_commands_outside_the_contract_are_refused(argv):
    ops = CannedOps()
    with pytest.raises(exception.DriverError):
        host_swap.PrivsepRunner(ops=ops)(argv)
    assert ops.calls == []


# ------------------------------------------------- the privileged side


def test_privileged_entrypoints_are_registered():
    for func in (priv_compute.iscsiadm, priv_compute.mkswap,
                 priv_compute.swapon, priv_compute.swapoff):
        assert privsep.sys_admin_pctxt.is_entrypoint(func)


def _script(tmp_path, body):
    path = tmp_path / 'fake-tool'
    path.write_text('#!/bin/sh\n' + body + '\n')
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


def test_iscsiadm_runs_node_mode_only_and_masks_the_secret(
        privsep_in_process, tmp_path, monkeypatch):
    monkeypatch.setattr(priv_compute, 'ISCSIADM', _script(
        tmp_path, 'echo "args: $*"; echo "bad: $*" >&2; exit 3'))
    args = ['-m', 'node', '-T', 'iqn.x:y', '-p', '192.0.2.1:3260', '-o',
            'update', '-n', 'node.session.auth.password', '-v', SECRET]

    result = priv_compute.iscsiadm(args, timeout=10)

    assert result['exit_code'] == 3 and not result['timed_out']
    assert 'node.session.auth.password -v ***' in result['stdout']
    assert SECRET not in result['stdout'] + result['stderr']
    for bad in (['-m', 'discovery', '-t', 'st'], ['--version'],
                '-m node', [b'-m', 'node']):
        with refused():
            priv_compute.iscsiadm(bad)


def test_missing_tool_and_timeout(privsep_in_process, tmp_path,
                                  monkeypatch):
    monkeypatch.setattr(priv_compute, 'ISCSIADM',
                        str(tmp_path / 'no-such-iscsiadm'))
    assert priv_compute.iscsiadm(['-m', 'node'])['exit_code'] == 127
    monkeypatch.setattr(priv_compute, 'ISCSIADM',
                        _script(tmp_path, 'sleep 5'))
    result = priv_compute.iscsiadm(['-m', 'node'], timeout=0.2)
    assert result['timed_out'] is True
    with refused():
        priv_compute.iscsiadm(['-m', 'node'], timeout=0)


@pytest.mark.parametrize('device', [
    'dev/sdb', '/tmp/swapfile', '/dev/null', '/dev/no-such-disk', None])
def test_swap_commands_need_a_block_device(privsep_in_process, tmp_path,
                                           device):
    for call in (lambda: priv_compute.mkswap(device),
                 lambda: priv_compute.swapon(device, 10),
                 lambda: priv_compute.swapoff(device)):
        with refused():
            call()


def test_mkswap_refuses_mounted_devices_and_active_swap(
        privsep_in_process, tmp_path, monkeypatch):
    monkeypatch.setattr(priv_compute, '_block_device', lambda d: d)
    mounts = tmp_path / 'mounts'
    mounts.write_text('/dev/sdy /srv ext4 rw 0 0\n')
    swaps = tmp_path / 'swaps'
    swaps.write_text('Filename Type Size Used Priority\n'
                     '/dev/sdz partition 1024 0 10\n')
    monkeypatch.setattr(priv_compute, 'PROC_MOUNTS', str(mounts))
    monkeypatch.setattr(priv_compute, 'PROC_SWAPS', str(swaps))
    with refused(match='mounted'):
        priv_compute.mkswap('/dev/sdy')
    with refused(match='swap already'):
        priv_compute.mkswap('/dev/sdz')


def test_swapon_priority_is_checked(privsep_in_process, monkeypatch):
    monkeypatch.setattr(priv_compute, '_block_device', lambda d: d)
    ran = []
    monkeypatch.setattr(priv_compute, '_run',
                        lambda argv, timeout, secrets=(): ran.append(argv))
    priv_compute.swapon('/dev/sdb', 10)
    assert ran == [['swapon', '-p', '10', '/dev/sdb']]
    for bad in (40000, -2, '10', True):
        with refused():
            priv_compute.swapon('/dev/sdb', bad)
