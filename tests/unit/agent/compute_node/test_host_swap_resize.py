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

"""Host-mode leases that grow and shrink, at the command contract: a
grow logs in to the new extent only and makes it swap at the lease's
priority; a shrink swaps off and logs out of the named extents only, and
is refused before any command when their pages would not fit."""

import pytest

from composable.agent.compute_node import host_swap
from composable.agent import manager
from composable import conf
from tests.unit.agent.compute_node import fakes

INITIATOR = 'iqn.x:compute-0'
LEASE = {'uuid': 'lease-1'}


def _extent(n):
    return {'uuid': 'e%d' % n, 'index': n - 1, 'size_mb': 64,
            'target_iqn': 'iqn.2010-10.org.openstack.composable:e%d' % n,
            'lun': 1, 'portal': '192.0.2.10:3260',
            'chap_username': 'u%d' % n, 'chap_secret': 'secret-%d-xyz' % n}


@pytest.fixture
def host(tmp_path):
    return fakes.FakeHostState(tmp_path / 'host', initiator_iqn=INITIATOR)


@pytest.fixture
def runner(host):
    return fakes.RecordingRunner(host)


@pytest.fixture
def agent(host, runner):
    conf.CONF.set_override('memory_exporter', 'tgt', 'agent')
    conf.CONF.set_override('initiator_iqn', INITIATOR, 'compute_node')
    swap = host_swap.HostSwap(
        runner=runner, priority=12, by_path_dir=host.by_path,
        proc_swaps=host.proc_swaps, proc_meminfo=host.proc_meminfo,
        initiator_name_file=host.initiator_name_file, attach_timeout=5,
        poll_interval=0.01, headroom_mb=64)
    yield manager.AgentManager('compute-0', ['compute_node'],
                               guest_attacher=object(), host_swap=swap)
    conf.CONF.clear_override('memory_exporter', 'agent')
    conf.CONF.clear_override('initiator_iqn', 'compute_node')


def _targets(runner, start, word):
    return [c[c.index('-T') + 1] for c in runner.commands[start:]
            if c[0] == 'iscsiadm' and word in c]


def test_grow_adds_one_swap_device_at_the_lease_priority(agent, host,
                                                         runner):
    agent.compute.attach_memory(None, LEASE, [_extent(1)], 'host')
    before = len(runner.commands)

    grown = agent.compute.attach_memory(None, LEASE, [_extent(2)], 'host')

    assert list(grown) == ['e2']
    assert _targets(runner, before, '--login') == [_extent(2)['target_iqn']]
    assert [c[0] for c in runner.commands[before:]
            if c[0] != 'iscsiadm'] == ['mkswap', 'swapon']
    assert runner.commands[-1][:3] == ['swapon', '-p', '12']
    assert sorted(p for _s, _u, p in host.swaps.values()) == [12, 12]
    assert set(agent.memory_attachments['lease-1']) == {'e1', 'e2'}


def test_shrink_removes_only_the_named_extents(agent, host, runner):
    agent.compute.attach_memory(None, LEASE,
                                [_extent(1), _extent(2), _extent(3)], 'host')
    kept = agent.memory_attachments['lease-1']['e1']['swap_device']
    before = len(runner.commands)

    agent.compute.detach_memory(None, LEASE, [_extent(2), _extent(3)], 'host')

    assert _targets(runner, before, '--logout') == [
        _extent(2)['target_iqn'], _extent(3)['target_iqn']]
    swapoffs = [c[-1] for c in runner.commands[before:]
                if c[0] == 'swapoff']
    assert len(swapoffs) == 2 and kept not in swapoffs
    assert list(host.swaps) == [kept]
    assert list(agent.memory_attachments['lease-1']) == ['e1']


def test_shrink_that_does_not_fit_runs_nothing(agent, host, runner):
    agent.compute.attach_memory(None, LEASE, [_extent(1), _extent(2)], 'host')
    details = agent.memory_attachments['lease-1']
    host.set_used(details['e2']['swap_device'], 200 * 1024)
    host.set_mem_available(100 * 1024)
    before = len(runner.commands)

    with pytest.raises(host_swap.SwapoffWouldNotFit) as raised:
        agent.compute.detach_memory(None, LEASE, [_extent(2)], 'host')

    assert 'holds 200 MiB' in str(raised.value)
    assert runner.commands[before:] == []
    assert len(host.swaps) == 2
    assert set(agent.memory_attachments['lease-1']) == {'e1', 'e2'}


def test_concurrent_grows_of_one_lease_keep_every_extent(agent, host):
    """Two attaches of new extents of the same lease at once (a retry of
    the conductor next to the elastic task): both are recorded, neither
    overwrites the other."""
    import threading
    barrier = threading.Barrier(2)
    errors = []

    def grow(n):
        try:
            barrier.wait(30)
            agent.compute.attach_memory(None, LEASE, [_extent(n)], 'host')
        except Exception as exc:  # reported below
            errors.append(exc)
    threads = [threading.Thread(target=grow, args=(n,)) for n in (1, 2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []
    assert set(agent.memory_attachments['lease-1']) == {'e1', 'e2'}
    assert len(host.swaps) == 2
