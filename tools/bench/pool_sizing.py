#!/usr/bin/env python3
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

"""Pool sizing benchmark: what pooling saves on Giraph-shaped demand.

Generates traces with tools/trace_gen.py (per-node peak : average 2.78,
aggregate 1.68, one per seed), replays each with the planner's defaults
(or the options given), then replays etc/composable/plan-sample-trace.csv,
and prints one line per trace. With ``--sweep`` it also varies the
observation window, the prediction window and the attach delay one at a
time on the first generated trace and prints an RST table.

The last line sums the generated traces:

  pool_sizing: static_mb=... pooled_mb=... ratio=... refused_pct=...
  mape_pct=... shortfall_pct=... oracle_ratio=...

oracle_ratio is what a predictor that knew the future, with an instant
attach, would need: the floor the trace itself sets.

Usage: tools/bench/pool_sizing.py [--seeds 1,2,3] [--nodes 16] [--hours 4]
       [--sweep] [planner options: --observation S --prediction S ...]
"""

import argparse
import os
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
sys.path.insert(0, ROOT)

from composable.planner import replay  # noqa: E402
from composable.planner import trace as trace_mod  # noqa: E402
from tools import trace_gen  # noqa: E402

SAMPLE = os.path.join(ROOT, 'etc', 'composable', 'plan-sample-trace.csv')

SWEEP = (
    ('observation_s', (300.0, 600.0, 1800.0)),
    ('prediction_s', (30.0, 60.0, 120.0)),
    ('attach_delay_s', (10.0, 30.0, 60.0)),
)


def generated(seed, nodes, hours):
    names, times, demand = trace_gen.generate(nodes=nodes, hours=hours,
                                              seed=seed)
    return trace_mod.Trace(nodes=names, step=float(times[1] - times[0]),
                           start=0.0, demand=demand)


def run(name, trace, params):
    started = time.monotonic()
    plan = replay.plan(trace, params)
    data = plan.as_dict()
    print('%-22s static_mb=%d pooled_mb=%d pool_mb=%d ratio=%.3f '
          'oracle_ratio=%.3f refused=%d/%d (%.2f %%) shortfall_pct=%.2f '
          'mape_pct=%.1f cost_per_used_mb=%.2f/%.2f (%.0f s)'
          % (name, data['static_mb'], data['pooled_mb'], data['pool_mb'],
             data['ratio'], data['oracle_ratio'], data['refused'],
             data['growth_requests'],
             data['refused_pct'], data['shortfall_pct'], data['mape_pct'],
             data['cost_per_used_mb_static'],
             data['cost_per_used_mb_pooled'],
             time.monotonic() - started), flush=True)
    return plan


def sweep(trace, params):
    rows = []
    for field, values in SWEEP:
        for value in values:
            varied = replay.Parameters(**dict(vars(params), **{field: value}))
            plan = replay.plan(trace, varied)
            data = plan.as_dict()
            rows.append((field[:-2].replace('_', ' ') + ' (s)',
                         '%g' % value, '%.3f' % data['ratio'],
                         '%.2f' % data['refused_pct'],
                         '%.2f' % data['shortfall_pct'],
                         '%.1f' % data['mape_pct']))
            print('sweep %s=%g ratio=%.3f refused_pct=%.2f shortfall_pct=%.2f'
                  ' mape_pct=%.1f' % ((field, value) + tuple(
                      float(x) for x in rows[-1][2:])), flush=True)
    header = ('varied', 'value', 'pooled/static', 'refused %',
              'short %', 'MAPE %')
    widths = [max(len(r[i]) for r in rows + [header])
              for i in range(len(header))]
    rule = '  '.join('=' * w for w in widths)
    print(rule)
    print('  '.join(h.ljust(w) for h, w in zip(header, widths)))
    print(rule)
    for row in rows:
        print('  '.join(c.ljust(w) for c, w in zip(row, widths)))
    print(rule)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--seeds', default='1,2,3')
    parser.add_argument('--nodes', type=int, default=16)
    parser.add_argument('--hours', type=float, default=4.0)
    parser.add_argument('--sweep', action='store_true')
    defaults = replay.Parameters()
    for field in ('observation_s', 'prediction_s', 'attach_delay_s',
                  'headroom', 'local_share', 'max_refused'):
        option = field[:-2] if field.endswith('_s') else field
        parser.add_argument('--' + option.replace('_', '-'),
                            dest=field, type=float,
                            default=getattr(defaults, field))
    parser.add_argument('--order', type=int, default=defaults.order)
    parser.add_argument('--chunk-mb', type=int, default=defaults.chunk_mb)
    args = parser.parse_args()
    params = replay.Parameters(
        local_share=args.local_share, chunk_mb=args.chunk_mb,
        order=args.order, observation_s=args.observation_s,
        prediction_s=args.prediction_s, headroom=args.headroom,
        attach_delay_s=args.attach_delay_s, max_refused=args.max_refused)
    print('parameters: %s' % vars(params), flush=True)
    plans = []
    traces = []
    for seed in [int(s) for s in args.seeds.split(',')]:
        trace = generated(seed, args.nodes, args.hours)
        node, total = trace_gen.ratios(trace.demand)
        traces.append(trace)
        plans.append(run('generated seed=%d' % seed, trace, params))
        print('  trace: node peak/avg %.2f, aggregate peak/avg %.2f'
              % (node, total))
    run('sample trace', trace_mod.load(SAMPLE), params)
    if args.sweep:
        sweep(traces[0], params)
    static = sum(p.static_mb for p in plans)
    pooled = sum(p.pooled_mb for p in plans)
    requests = sum(p.pooled.requests for p in plans)
    refused = sum(p.pooled.refused for p in plans)
    mape = sum(p.forecasts.mape_pct for p in plans) / len(plans)
    short = sum(p.pooled.shortfall_samples for p in plans) / sum(
        p.trace.demand.size for p in plans)
    oracle = sum(p.local_mb + p.oracle_pool_mb for p in plans)
    print('pool_sizing: static_mb=%d pooled_mb=%d ratio=%.3f '
          'refused_pct=%.2f mape_pct=%.1f shortfall_pct=%.2f '
          'oracle_ratio=%.3f'
          % (static, pooled, pooled / static,
             100.0 * refused / requests if requests else 0.0, mape,
             100.0 * short, oracle / static))
    return 0


if __name__ == '__main__':
    sys.exit(main())
