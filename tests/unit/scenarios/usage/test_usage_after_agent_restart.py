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

"""A host-mode memory lease's usage history goes on when the compute
agent restarts, from the agent's swap areas to the samples the API
serves.

The conductor, the agents' RPC servers and the database are real (the
harness: in-process message transport, SQLite); the compute agent is
composable's real one with its real host-swap and usage code, on a
pretend host (tests/unit/agent/compute_node/fakes: iscsiadm, mkswap, swapon
simulated against a temporary directory whose ``swaps`` file is the
host's /proc/swaps). The memory nodes' exports are simulated.
"""

import datetime
import time

import pytest

from composable.agent.compute_node import host_swap
from composable.agent.compute_node import usage
from composable.agent import manager as agent_manager
from composable.common import rpc
from composable.common import service
from composable.common import states
from composable import conf
from composable.db import api as db_api
from tests.unit.agent.compute_node import fakes
from tests.unit.conductor import harness as h_mod

HOST = 'compute-0'
INITIATOR = 'iqn.2026-11.org.openstack:%s' % HOST
START = datetime.datetime(2026, 11, 25, 14, 0, 0)


class SwapHarness(h_mod.Harness):
    """The harness, compute-0's agent attaching host-mode memory as swap
    on a pretend host, restartable (a new AgentManager on the same
    host)."""

    def start(self, tmp_path):
        self.host_state = fakes.FakeHostState(tmp_path / 'host',
                                              initiator_iqn=INITIATOR)
        self.swap = host_swap.HostSwap(
            runner=fakes.RecordingRunner(self.host_state),
            by_path_dir=self.host_state.by_path,
            proc_swaps=self.host_state.proc_swaps,
            proc_meminfo=self.host_state.proc_meminfo,
            initiator_name_file=self.host_state.initiator_name_file,
            attach_timeout=5, poll_interval=0.01)
        return super().start()

    def start_agent(self, name):
        if name != HOST:
            return super().start_agent(name)
        agent = agent_manager.AgentManager(name, ['compute_node'],
                                           host_swap=self.swap,
                                           simulate=False)
        svc = service.RPCService(rpc.AGENT_TOPIC, name, agent.endpoints)
        svc.start()
        self.agents[name] = agent
        self.agent_services[name] = svc
        return agent

    def sampler(self, clock):
        return usage.UsageSampler(self.agents[HOST], conductor=self.api,
                                  interval=1, timeout=5,
                                  proc_swaps=self.host_state.proc_swaps,
                                  clock=clock)


@pytest.fixture
def harness(sqlite_db, tmp_path):
    # What compute-0 is registered with (harness.inventory).
    conf.CONF.set_override('initiator_iqn', INITIATOR, 'compute_node')
    h = SwapHarness(rpc_timeout=10, fabric_timeout=10)
    try:
        h.start(tmp_path)
        yield h
    finally:
        h.stop()
        conf.CONF.clear_override('initiator_iqn', 'compute_node')


class Clock(object):
    """taken_at of the samples: ten seconds apart, in the past."""

    def __init__(self):
        self.now = START

    def __call__(self):
        self.now += datetime.timedelta(seconds=10)
        return self.now.strftime('%Y-%m-%dT%H:%M:%SZ')


def _history(lease):
    return [(s.taken_at, s.used_mb, s.size_mb)
            for s in db_api.usage_list(h_mod.admin(), lease.id)]


def _wait_for_samples(harness, lease, count, timeout=30):
    """The lease's stored samples, once there are ``count`` (a report is
    a cast: the conductor stores it in its own time)."""
    end = time.monotonic() + timeout
    while len(_history(lease)) < count:
        assert time.monotonic() < end, (
            'the conductor stored %d sample(s) of lease %s, not %d' % (
                len(_history(lease)), lease.uuid, count))
        time.sleep(0.05)
    return _history(lease)


def test_usage_history_goes_on_after_an_agent_restart(harness):
    made = harness.create(memory_mb=2048)
    harness.api.bind_lease(h_mod.user_context(), made,
                           harness.hosts[HOST].uuid)
    lease = harness.wait(made, [states.BOUND, states.BIND_FAILED])
    assert lease.status == states.BOUND, lease.fault
    assert lease.attach_mode == states.ATTACH_HOST
    agent = harness.agents[HOST]
    details = agent.memory_attachments[lease.uuid]
    devices = sorted(d['swap_device'] for d in details.values())
    assert len(devices) == 2  # two 1024 MiB extents, swap each

    clock = Clock()
    harness.host_state.set_used(devices[0], 30 * 1024)
    before = harness.sampler(clock).report()
    assert [(s['lease_uuid'], s['used_mb']) for s in before] == [
        (lease.uuid, 30)]
    _wait_for_samples(harness, lease, 1)

    # The agent restarts (its process is new, the host's swap is not):
    # until it has asked the conductor, it knows of no lease.
    harness.stop_agent(HOST)
    harness.agents.pop(HOST)
    restarted = harness.start_agent(HOST)
    assert restarted.memory_attachments == {}
    sampler = harness.sampler(clock)
    assert sampler.report() == []
    # The conductor answers over RPC with what the agent said when it
    # attached each extent.
    assert sampler.recover() is True
    assert list(restarted.memory_attachments) == [lease.uuid]

    harness.host_state.set_used(devices[1], 20 * 1024)
    after = sampler.report()
    assert [(s['lease_uuid'], s['used_mb']) for s in after] == [
        (lease.uuid, 50)]
    history = _wait_for_samples(harness, lease, 2)
    # One history, on after the restart: the same size, the new use.
    assert [used for _at, used, _size in history] == [30, 50]
    assert history[0][2] == history[1][2]
    assert history[1][0] > history[0][0]

    # What was learnt is enough to take the lease apart: the swap goes.
    harness.api.unbind_lease(h_mod.user_context(), lease.uuid)
    harness.wait(lease.uuid, states.RESERVED)
    assert restarted.memory_attachments == {}
    assert harness.host_state.swaps == {}
    assert sampler.report() == []
