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

"""HostSwap at its command contract: the kernel iSCSI initiator cannot run
on the test machines, so a recording runner plays the host."""

import logging
import os

import pytest

from composable.agent.compute_node import host_swap
from composable.agent.compute_node import portal as iscsi_portal
from composable.common import exception
from tests.unit.agent.compute_node import fakes

INITIATOR = 'iqn.2010-10.org.openstack.composable:c1'
SECRET = 'Sup3r-s3cret-chap'


def _extent(n=1, **kw):
    extent = {'uuid': '00000000-0000-0000-0000-00000000000%d' % n,
              'index': n - 1, 'size_mb': 1024,
              'target_iqn': 'iqn.2010-10.org.openstack.composable:ext-%d' % n,
              'lun': 1, 'portal': '192.0.2.10:3260',
              'chap_username': 'user%d' % n, 'chap_secret': SECRET + str(n)}
    extent.update(kw)
    return extent


@pytest.fixture
def host(tmp_path):
    return fakes.FakeHostState(tmp_path, initiator_iqn=INITIATOR)


@pytest.fixture
def runner(host):
    return fakes.RecordingRunner(host)


class FakeClock(object):
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def sleep(self, secs):
        self.now += secs


def _swap(host, runner, **kw):
    clock = FakeClock()
    kw.setdefault('priority', 10)
    kw.setdefault('replacement_timeout', 86400)
    kw.setdefault('headroom_mb', 64)
    return host_swap.HostSwap(
        runner=runner, attach_timeout=30, detach_timeout=30,
        by_path_dir=host.by_path, proc_swaps=host.proc_swaps,
        proc_meminfo=host.proc_meminfo,
        initiator_name_file=host.initiator_name_file,
        sleep=clock.sleep, clock=clock, **kw)


def test_attach_runs_the_command_contract(host, runner, caplog):
    caplog.set_level(logging.DEBUG)
    extent = _extent()
    swap = _swap(host, runner)

    details = swap.attach([extent], INITIATOR)

    node = ['iscsiadm', '-m', 'node', '-T', extent['target_iqn'],
            '-p', '192.0.2.10:3260']
    assert runner.commands[:7] == [
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
    ]
    real = os.path.join(host.dev, 'sdb')
    assert runner.commands[7:] == [['mkswap', real],
                                   ['swapon', '-p', '10', real]]
    path = os.path.join(host.by_path, 'ip-192.0.2.10:3260-iscsi-%s-lun-1'
                        % extent['target_iqn'])
    assert details == {extent['uuid']: {
        'mode': 'host', 'device': path, 'swap_device': real,
        'swap_priority': 10}}
    assert host.swaps[real][2] == 10
    # The secret is passed to the runner for masking, and never logged.
    password_call = runner.calls[5]
    assert password_call['secrets'] == (SECRET + '1',)
    assert all(SECRET not in r.getMessage() for r in caplog.records)


def test_attach_is_idempotent(host, runner):
    extent = _extent()
    swap = _swap(host, runner)
    first = swap.attach([extent], INITIATOR)
    runner.commands.clear()
    runner.fail('--login', host_swap.ISCSI_ERR_SESS_EXISTS,
                'session exists')

    again = swap.attach([extent], INITIATOR)

    assert again == first
    names = runner.names()
    assert 'mkswap' not in names and 'swapon' not in names
    assert names[-1] == 'iscsiadm --login'


def test_iser_and_default_port(host, runner):
    extent = _extent(portal='192.0.2.10', transport='iser')
    _swap(host, runner).attach([extent], INITIATOR)
    assert runner.commands[0] == [
        'iscsiadm', '-m', 'node', '-T', extent['target_iqn'], '-p',
        '192.0.2.10:3260', '-I', 'iser', '-o', 'new']


def test_attach_without_chap(host, runner):
    extent = _extent(chap_username=None, chap_secret=None)
    _swap(host, runner).attach([extent], INITIATOR)
    updates = [c for c in runner.commands if 'update' in c]
    assert updates[-1][-3:] == ['node.session.auth.authmethod', '-v',
                                'None']
    assert not any('node.session.auth.password' in c for c in updates)


def test_chap_refused_is_a_clear_error_without_the_secret(host, runner):
    extent = _extent()
    runner.fail('--login', host_swap.ISCSI_ERR_LOGIN_AUTH_FAILED,
                'iscsiadm: Login failed to authenticate with target '
                '(password %s)' % extent['chap_secret'])

    with pytest.raises(exception.DriverError) as info:
        _swap(host, runner).attach([extent], INITIATOR)

    message = str(info.value)
    assert 'refused the CHAP login' in message
    assert extent['uuid'] in message
    assert extent['chap_secret'] not in message
    assert 'mkswap' not in runner.names()


def test_device_that_never_appears_times_out(host):
    runner = fakes.RecordingRunner(host, make_devices=False)
    with pytest.raises(exception.DriverTimeout) as info:
        _swap(host, runner).attach([_extent()], INITIATOR)
    assert 'by-path' in str(info.value)


def test_wrong_open_iscsi_initiator_name_is_refused_before_login(
        host, runner):
    with pytest.raises(exception.DriverError) as info:
        _swap(host, runner).attach([_extent()], 'iqn.2010-10.org.x:other')
    assert INITIATOR in str(info.value)
    assert runner.commands == []


def test_failed_second_extent_undoes_the_first(host, runner):
    one, two = _extent(1), _extent(2)
    runner.fail(two['target_iqn'], 1, 'iscsiadm: cannot make connection')

    with pytest.raises(host_swap.CommandFailed):
        _swap(host, runner).attach([one, two], INITIATOR)

    assert host.swaps == {}
    assert host.sessions == set()
    assert runner.names()[-3:] == ['swapoff', 'iscsiadm --logout',
                                   'iscsiadm delete']


def test_detach_swapoff_then_logout_and_is_idempotent(host, runner):
    extent = _extent()
    swap = _swap(host, runner)
    swap.attach([extent], INITIATOR)
    runner.commands.clear()

    swap.detach([extent])

    assert runner.names() == ['swapoff', 'iscsiadm --logout',
                              'iscsiadm delete']
    assert host.swaps == {}
    runner.commands.clear()
    runner.fail('--logout', host_swap.ISCSI_ERR_NO_OBJS_FOUND,
                'No matching sessions found')
    runner.fail('delete', host_swap.ISCSI_ERR_NO_OBJS_FOUND,
                'No records found')

    swap.detach([extent])

    assert runner.names() == ['iscsiadm --logout', 'iscsiadm delete']


def test_detach_refused_when_swapped_pages_do_not_fit(host, runner):
    extent = _extent()
    swap = _swap(host, runner)
    details = swap.attach([extent], INITIATOR)
    host.set_used(details[extent['uuid']]['swap_device'], 600 * 1024)
    host.set_mem_available(500 * 1024)
    runner.commands.clear()

    with pytest.raises(host_swap.SwapoffWouldNotFit) as info:
        swap.detach([extent])

    message = str(info.value)
    assert 'Refusing to swapoff' in message
    assert '600 MiB' in message and '500 MiB' in message
    assert info.value.code == 409
    assert runner.commands == []
    assert host.swaps


def test_detach_checks_the_sum_of_all_extents(host, runner):
    one, two = _extent(1), _extent(2)
    swap = _swap(host, runner, headroom_mb=0)
    details = swap.attach([one, two], INITIATOR)
    for extent in (one, two):
        host.set_used(details[extent['uuid']]['swap_device'], 300 * 1024)
    host.set_mem_available(500 * 1024)
    runner.commands.clear()

    with pytest.raises(host_swap.SwapoffWouldNotFit):
        swap.detach([one, two])
    assert runner.commands == []

    host.set_mem_available(700 * 1024)
    swap.detach([one, two])
    assert host.swaps == {}


def test_headroom_counts(host, runner):
    extent = _extent()
    swap = _swap(host, runner, headroom_mb=64)
    details = swap.attach([extent], INITIATOR)
    host.set_used(details[extent['uuid']]['swap_device'], 100 * 1024)
    host.set_mem_available(150 * 1024)
    with pytest.raises(host_swap.SwapoffWouldNotFit):
        swap.detach([extent])
    host.set_mem_available(170 * 1024)
    swap.detach([extent])


@pytest.mark.parametrize('portal,expected', [
    ('192.0.2.1', '192.0.2.1:3260'),
    ('192.0.2.1:3261', '192.0.2.1:3261'),
    ('[2001:db8::1]:3262', '[2001:db8::1]:3262'),
    ('[2001:db8::1]', '[2001:db8::1]:3260'),
    ('2001:db8::1', '[2001:db8::1]:3260'),
])
def test_format_portal(portal, expected):
    assert iscsi_portal.format_portal(portal) == expected


def test_read_swaps(tmp_path):
    path = tmp_path / 'swaps'
    path.write_text(
        'Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n'
        '/dev/sdb                                partition\t1048572\t\t'
        '2048\t\t10\n'
        '/var/tmp/my\\040swap                     file\t\t16380\t\t0\t\t-2\n')
    swaps = host_swap.read_swaps(str(path))
    assert swaps == [
        host_swap.SwapEntry('/dev/sdb', 'partition', 1048572, 2048, 10),
        host_swap.SwapEntry('/var/tmp/my swap', 'file', 16380, 0, -2)]
