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

"""The demo's simulated usage (composable-all: the noop exporter attaches
nothing, [compute_node]simulated_usage makes up a workload): its samples,
and an elastic lease growing and shrinking on them with composable-all's
demo intervals, driven step by step through the conductor's real resizing
task, agent RPC servers and a SQLite database."""

import datetime

import pytest

from composable.agent.compute_node import usage as usage_mod
from composable.agent import manager as agent_manager
from composable.cmd import all as cmd_all
from composable.common import states
from composable.common import utils
from composable import conf
from composable.conductor.elastic import usage as lease_usage
from tests.unit.conductor import harness as harness_mod

CONF = conf.CONF
admin = harness_mod.admin
HOST = harness_mod.HOSTS[0]
DEADLINE = 60


class _Agent(object):
    host = 'compute-x'

    def __init__(self, leases):
        self.leases = leases

    def memory_leases(self):
        return self.leases


def _extents(*sizes):
    return {'e%d' % i: {'mode': 'host', 'size_mb': size}
            for i, size in enumerate(sizes)}


def test_simulated_samples_follow_a_wave_within_the_lease():
    lease = '6d2f5d0e-1b7a-4c39-8f4a-0d9c3b1e2a77'
    now = [0.0]
    agent = _Agent({lease: ({'uuid': lease}, _extents(1024))})
    sampler = usage_mod.SimulatedUsageSampler(
        agent, conductor=object(), interval=5, now=lambda: now[0])
    seen = []
    for step in range(0, usage_mod.SIMULATED_PERIOD, 5):
        now[0] = 1e9 + step
        (sample,) = sampler.sample()
        assert sample['simulated'] is True
        assert sample['size_mb'] == 1024
        assert 0 < sample['used_mb'] <= 1024
        lease_usage.parse_sample(sample)   # what the conductor accepts
        seen.append(sample['used_mb'])
    # From a quarter of the lease up to full, and back, in one period.
    assert min(seen) == pytest.approx(256, abs=30)
    assert max(seen) == 1024
    # Its workload keeps the scale of the lease's first size: grown to
    # 4 GiB, the lease holds all of it at the top of the wave (3 GiB).
    agent.leases[lease] = ({'uuid': lease}, _extents(*[1024] * 4))
    peaks = []
    for step in range(0, usage_mod.SIMULATED_PERIOD, 5):
        now[0] = 1e9 + step
        peaks.append(sampler.sample()[0]['used_mb'])
    assert max(peaks) == pytest.approx(3072, abs=30)
    # A lease that is gone is forgotten.
    agent.leases.clear()
    assert sampler.sample() == []
    assert sampler._base == {}


def test_the_agent_simulates_usage_only_when_asked(harness):
    agent = agent_manager.AgentManager('compute-sim', ['compute_node'])
    assert agent.simulate
    agent.start_usage()
    assert agent._usage is None
    CONF.set_override('simulated_usage', True, 'compute_node')
    try:
        agent.start_usage()
        assert isinstance(agent._usage, usage_mod.SimulatedUsageSampler)
    finally:
        agent.stop()
        CONF.clear_override('simulated_usage', 'compute_node')


@pytest.fixture
def demo_intervals():
    """composable-all's demo defaults, on the global options."""
    saved = [(group, name, CONF[group][name])
             for group, name, _ in cmd_all.DEMO_DEFAULTS]
    for group, name, value in cmd_all.DEMO_DEFAULTS:
        CONF.set_override(name, value, group)
    yield
    for group, name, _ in saved:
        CONF.clear_override(name, group)


def test_an_elastic_lease_grows_and_shrinks_on_the_demo(harness,
                                                        demo_intervals):
    policy = {'min_mb': 1024, 'max_mb': 4096, 'observation_window': 60,
              'prediction_window': 30, 'headroom': 0.2}
    uuid = harness.create(memory_mb=1024, elastic=dict(policy))
    harness.api.bind_lease(harness_mod.user_context(), uuid,
                           harness.hosts[HOST].uuid)
    harness.wait(uuid, states.BOUND)
    agent = harness.agents[HOST]
    interval = CONF.compute_node.usage_report_interval
    assert interval == CONF.elastic.sample_interval == 5
    # Simulated time: two periods of the wave, a sample and a resizing
    # pass every 5 s as in the demo (the past, so no sample is "in the
    # future" of the database's clock).
    start = utils.utcnow() - datetime.timedelta(
        seconds=2 * usage_mod.SIMULATED_PERIOD + 60)
    clock = {'now': start}
    sampler = usage_mod.SimulatedUsageSampler(
        agent, conductor=object(), interval=interval,
        clock=lambda: clock['now'].strftime('%Y-%m-%dT%H:%M:%S.%fZ'),
        now=lambda: (clock['now'] - datetime.datetime(1970, 1, 1))
        .total_seconds())
    sizes = []
    for step in range(2 * usage_mod.SIMULATED_PERIOD // interval):
        clock['now'] = start + datetime.timedelta(seconds=step * interval)
        samples = sampler.sample()
        assert lease_usage.record(admin(), HOST, samples) == 1
        for future in harness.conductor.resizer.run(admin(),
                                                    now=clock['now']):
            future.result(timeout=DEADLINE)
        harness.idle(DEADLINE)
        sizes.append(harness.lease(uuid).memory_mb)
    assert harness.lease(uuid).status == states.BOUND
    top = max(sizes)
    assert top > 1024, sizes
    # It came down again after its peak.
    assert min(sizes[sizes.index(top):]) < top, sizes
