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

import numpy as np
import pytest

from composable.planner import replay
from composable.planner import trace as trace_mod
from tools import trace_gen


def _trace(*rows, step=10.0):
    return trace_mod.Trace(nodes=['n%d' % i for i in range(len(rows))],
                           step=step, start=0.0,
                           demand=np.array(rows, dtype=float))


def _params(**kwargs):
    args = dict(local_share=0.25, chunk_mb=100, order=1,
                observation_s=40.0, prediction_s=10.0, headroom=0.0,
                attach_delay_s=10.0, shrink_after_s=0.0, max_refused=0.0)
    args.update(kwargs)
    return replay.Parameters(**args)


def _run(trace, params, pool_chunks):
    windows = replay.check(params, trace)
    forecasts = replay.forecast(trace, params, windows)
    return replay.replay(trace, forecasts, windows, params.chunk_mb,
                         pool_chunks), forecasts


def test_static_and_pooled_memory_are_accounted():
    # Two nodes out of phase: each peaks at 800, the sum at 1000.
    flat = [200.0] * 6
    trace = _trace(flat + [800.0] * 4 + flat, flat + flat + [800.0] * 4)
    params = _params()
    plan = replay.plan(trace, params)
    assert plan.static_mb == 1600.0
    assert plan.local_mb == 400.0     # a quarter of each peak
    assert plan.pool_mb == plan.pooled.pool_chunks * 100
    assert plan.pooled_mb == plan.local_mb + plan.pool_mb
    assert plan.ratio == pytest.approx(plan.pooled_mb / 1600.0)
    # One node's burst at a time: its 600 above local, in 6 chunks.
    assert plan.oracle_pool_mb == 600.0
    assert plan.pool_mb >= plan.oracle_pool_mb
    data = plan.as_dict()
    assert data['mean_used_mb'] == pytest.approx(trace.demand.sum(0).mean())
    assert data['cost_per_used_mb_static'] == pytest.approx(
        1600.0 / data['mean_used_mb'])
    assert data['cost_per_used_mb_pooled'] == pytest.approx(
        plan.pooled_mb / data['mean_used_mb'])


def test_a_full_pool_refuses_growth_and_leaves_the_lease():
    # Both nodes grow to 400 (3 chunks above their local 100) at once.
    row = [100.0] * 3 + [400.0] * 5
    trace = _trace(row, row)
    result, forecasts = _run(trace, _params(), pool_chunks=4)
    assert forecasts.target_chunks[:, 3].tolist() == [3, 3]
    # n0 is granted its 3 chunks; n1's 3 do not fit in the 1 left, and
    # it asks again at each later sample, refused each time.
    assert result.requests == 1 + 5
    assert result.refused == 5
    # n1 never got memory: short at every sample of its burst.
    assert result.shortfall_samples >= 5
    enough, _ = _run(trace, _params(), pool_chunks=6)
    assert enough.refused == 0
    assert enough.requests == 2


@pytest.mark.parametrize('delay_s, short_samples', [
    (0.0, 1), (10.0, 1), (25.0, 3), (40.0, 4)])
def test_attach_delay_turns_a_late_grow_into_a_shortfall(delay_s,
                                                         short_samples):
    # A step up the predictor cannot see coming: seen at sample 4,
    # granted then, usable only once attached.
    trace = _trace([100.0] * 4 + [500.0] * 8)
    params = _params(attach_delay_s=delay_s)
    result, _ = _run(trace, params, pool_chunks=10)
    assert result.refused == 0
    assert result.shortfall_samples == short_samples
    assert result.shortfall_mb_s == pytest.approx(
        short_samples * (500.0 - 125.0) * 10.0)
    # Local 125 + 4 chunks once attached.
    assert result.provisioned_mb[-1] == 125.0 + 400.0


def test_shrink_waits_for_the_prediction_to_stay_low():
    trace = _trace([100.0] * 3 + [600.0] * 3 + [100.0] * 8)
    quick, _ = _run(trace, _params(shrink_after_s=0.0), pool_chunks=20)
    slow, _ = _run(trace, _params(shrink_after_s=40.0), pool_chunks=20)
    local = 150.0
    # Both end at the local memory alone once shrunk.
    assert quick.provisioned_mb[-1] == local
    assert slow.provisioned_mb[-1] == local
    # The slow one holds its chunks 4 samples longer.
    assert quick.provisioned_mb.sum() < slow.provisioned_mb.sum()
    held_quick = int(np.sum(quick.provisioned_mb > local))
    held_slow = int(np.sum(slow.provisioned_mb > local))
    assert held_slow - held_quick == 4


def test_bisection_finds_the_smallest_pool():
    names, times, demand = trace_gen.generate(nodes=3, hours=0.25, step=10,
                                              seed=5, period_s=300.0)
    trace = trace_mod.Trace(nodes=names, step=10.0, start=0.0,
                            demand=demand)
    params = replay.Parameters(chunk_mb=2048, observation_s=120.0,
                               prediction_s=30.0, attach_delay_s=10.0,
                               max_refused=0.02)
    plan = replay.plan(trace, params)
    assert plan.pooled.pool_chunks > 0
    assert plan.pooled.refused_fraction <= 0.02
    # One chunk less misses the target: the pool is the smallest.
    windows = replay.check(params, trace)
    smaller = replay.replay(trace, plan.forecasts, windows, 2048,
                            plan.pooled.pool_chunks - 1)
    assert smaller.refused_fraction > 0.02
    assert plan.smaller.pool_chunks == plan.pooled.pool_chunks - 1
    assert plan.as_dict()['refused_pct_one_chunk_less'] == pytest.approx(
        100 * smaller.refused_fraction)


def test_no_growth_needs_no_pool():
    trace = _trace([100.0] * 10, [50.0] * 10)
    plan = replay.plan(trace, _params(local_share=1.0))
    assert plan.pooled.pool_chunks == 0
    assert plan.pooled.requests == 0
    assert plan.ratio == 1.0
    assert plan.smaller is None


def test_mape_compares_predicted_and_actual_peaks():
    trace = _trace([300.0] * 10)
    _, forecasts = _run(trace, _params(), pool_chunks=5)
    assert forecasts.mape_pct == 0.0
    ramp = _trace(list(100.0 + 10 * np.arange(12)))
    _, forecasts = _run(ramp, _params(order=1), pool_chunks=50)
    assert forecasts.mape_pct < 5.0


@pytest.mark.parametrize('kwargs, message', [
    (dict(local_share=-0.1), 'local share must be between 0 and 1'),
    (dict(local_share=1.5), 'local share'),
    (dict(max_refused=2.0), 'max refused'),
    (dict(headroom=-1.0), 'headroom'),
    (dict(chunk_mb=0), 'chunk must be a positive'),
    (dict(order=0), 'order must be'),
    (dict(observation_s=0.0), 'observation window must be more than 0'),
    (dict(observation_s=10.0), 'shorter than 2 samples'),
    (dict(prediction_s=0.0), 'prediction window must be more than 0'),
    (dict(prediction_s=-5.0), 'prediction window'),
    (dict(prediction_s=1e9), 'longer than the trace'),
    (dict(observation_s=float('inf')), 'observation window must be a'),
    (dict(attach_delay_s=-1.0), 'attach delay must be at least 0'),
    (dict(shrink_after_s=-1.0), 'shrink-after'),
    (dict(pool_cost_factor=0.0), 'pool cost factor'),
])
def test_bad_parameters_are_refused(kwargs, message):
    trace = _trace([100.0] * 20)
    with pytest.raises(ValueError, match=message):
        replay.check(_params(**kwargs), trace)


def test_a_trace_of_one_instant_is_refused():
    with pytest.raises(ValueError, match='single instant'):
        replay.check(_params(), _trace([100.0]))


def _steps(step=10.0, turn_s=300.0, hours=1.0, high=8192.0, low=2048.0):
    """Three nodes taking turns at ``high`` (the others at ``low``): the
    total is flat, each node jumps at its turn."""
    samples = int(hours * 3600 / step)
    turn = (np.arange(samples) * step // turn_s).astype(int) % 3
    demand = np.array([np.where(turn == node, high, low)
                       for node in range(3)])
    return trace_mod.Trace(nodes=['n0', 'n1', 'n2'], step=step, start=0.0,
                           demand=demand)


def test_step_demand_is_capped_at_each_lease_maximum():
    trace = _steps()
    plan = replay.plan(trace, replay.Parameters())
    # Local memory is 2 GiB per node; the largest lease a node needs is
    # 6 GiB. The predictor's guard lets a jump of 6 GiB be forecast to go
    # on for the prediction window (some 26 GiB): the cap stops it there.
    assert list(plan.forecasts.cap_chunks) == [6, 6, 6]
    assert plan.forecasts.target_chunks.max() == 6
    assert plan.as_dict()['max_lease_mb'] == [6144, 6144, 6144]
    # Never worse than giving each node its peak.
    assert plan.ratio <= 1.0
    assert plan.warnings() == []
    assert plan.pool_mb <= 3 * 6144
    # An explicit maximum, in whole chunks, for every lease.
    capped = replay.plan(trace, replay.Parameters(max_lease_mb=4500.0))
    assert list(capped.forecasts.cap_chunks) == [4, 4, 4]
    assert capped.forecasts.target_chunks.max() == 4


def test_a_plan_where_pooling_loses_warns():
    # Flat demand: nothing to gain from a pool, and the headroom above a
    # lease maximum this high makes it lose.
    trace = _trace([8192.0] * 60)
    plan = replay.plan(trace, _params(chunk_mb=1024, headroom=0.05,
                                      max_lease_mb=32768.0))
    assert plan.ratio > 1.0
    (warning,) = plan.warnings()
    assert 'pooling loses on this trace' in warning
    assert plan.as_dict()['warnings'] == [warning]
    # The default maximum (the node's peak less its local memory) keeps
    # it at static provisioning.
    even = replay.plan(trace, _params(chunk_mb=1024, headroom=0.05))
    assert even.ratio == 1.0
    assert even.warnings() == []


def test_a_lease_maximum_below_one_chunk_is_refused():
    with pytest.raises(ValueError, match='max lease must be'):
        replay.check(_params(chunk_mb=100, max_lease_mb=50.0),
                     _trace([100.0] * 20))
