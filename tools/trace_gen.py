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

"""Synthetic memory-demand traces for ``composable-plan``.

Shaped after the Giraph TopKPagerank run of Li et al. (§9): each node
works in supersteps; in each superstep its memory climbs from a base to a
burst, holds, and falls back; nodes are out of phase with one another, so
a node's peak is far above its average (2.78 : 1 there) while the
cluster's total stays much closer to its own (1.68 : 1).

Per node: a base of ``base_share`` of its peak, one burst per period (the
superstep), a trapezoid with ramps of a fifth of its width; each burst's
height (±15 %) and width (±20 %) vary, 3 % noise on top; the node's phase
is drawn uniformly from ``spread`` of a period, and its size from
0.5–1.5 of ``peak_mb``. Two knobs are then calibrated by bisection on the
generated trace itself: the bursts' duty cycle sets the per-node
peak : average (sum of node peaks over sum of node averages), and the
phase spread sets the aggregate peak : average. The same seed gives the
same trace.

Usage::

    tools/trace_gen.py [--nodes 16] [--hours 4] [--step 10] [--seed 1]
                       [--node-ratio 2.78] [--aggregate-ratio 1.68]
                       [--output trace.csv]
"""

import argparse
import sys

import numpy as np

NOISE = 0.03


def _pulse(phase, duty, ramp):
    """Trapezoid in [0, 1] of width ``duty`` (a fraction of the period)
    starting at phase 0, with linear ramps of ``ramp`` of its width.
    """
    width = duty
    rise = width * ramp
    up = np.clip(phase / rise, 0.0, 1.0)
    down = np.clip((width - phase) / rise, 0.0, 1.0)
    return np.minimum(up, down)


def _shape(nodes, samples, step, period_s, seed):
    """Per-node random draws that calibration does not change."""
    rng = np.random.default_rng(seed)
    bursts = int(np.ceil(samples * step / period_s)) + 2
    return {
        'size': rng.uniform(0.5, 1.5, nodes),
        'phase': rng.uniform(0.0, 1.0, nodes),
        'height': rng.uniform(0.85, 1.15, (nodes, bursts)),
        'width': rng.uniform(0.8, 1.2, (nodes, bursts)),
        'noise': rng.normal(0.0, NOISE, (nodes, samples)),
    }


def _demand(draws, samples, step, period_s, duty, spread, base_share,
            peak_mb):
    nodes = draws['size'].size
    time = np.arange(samples) * step
    demand = np.empty((nodes, samples))
    for node in range(nodes):
        shifted = time / period_s + spread * draws['phase'][node]
        burst = np.floor(shifted).astype(int)
        phase = shifted - burst
        width = duty * draws['width'][node][burst]
        height = draws['height'][node][burst]
        level = _pulse(phase, width, 0.2) * height
        shape = base_share + (1.0 - base_share) * level
        shape *= 1.0 + draws['noise'][node]
        demand[node] = np.clip(shape, 0.0, None) * (
            peak_mb * draws['size'][node])
    return np.round(demand)


def ratios(demand):
    """(per-node peak : average, aggregate peak : average)."""
    node = demand.max(axis=1).sum() / demand.mean(axis=1).sum()
    total = demand.sum(axis=0)
    return float(node), float(total.max() / total.mean())


def _bisect(function, low, high, target, rounds=30):
    """x in [low, high] with function(x) ≈ target, function decreasing."""
    for _ in range(rounds):
        middle = (low + high) / 2
        if function(middle) > target:
            low = middle
        else:
            high = middle
    return (low + high) / 2


def generate(nodes=16, hours=4.0, step=10.0, seed=1, node_ratio=2.78,
             aggregate_ratio=1.68, period_s=1200.0, base_share=0.2,
             peak_mb=65536.0):
    """Return (node names, timestamps, demand array nodes × samples)."""
    if nodes < 2:
        raise ValueError('pooling needs at least two nodes')
    if not 1.0 < aggregate_ratio <= node_ratio:
        raise ValueError('the aggregate peak : average must be above 1 and '
                         'at most the per-node one')
    samples = int(hours * 3600 / step) + 1
    draws = _shape(nodes, samples, step, period_s, seed)

    def make(duty, spread):
        return _demand(draws, samples, step, period_s, duty, spread,
                       base_share, peak_mb)

    spread = 1.0
    duty = 0.2
    for _ in range(3):
        duty = _bisect(lambda d: ratios(make(d, spread))[0], 0.02, 0.95,
                       node_ratio)
        # Wider spread, flatter total: aggregate ratio falls with spread.
        spread = _bisect(lambda s: ratios(make(duty, s))[1], 0.0, 1.0,
                         aggregate_ratio)
    names = ['node-%02d' % (n + 1) for n in range(nodes)]
    return names, np.arange(samples) * step, make(duty, spread)


def write_csv(stream, names, times, demand):
    stream.write('timestamp_s,node,used_mb\n')
    for column, time in enumerate(times):
        for row, name in enumerate(names):
            stream.write('%g,%s,%d\n' % (time, name, demand[row, column]))


def main(argv=None):
    parser = argparse.ArgumentParser(
        description='Write a synthetic memory-demand trace (CSV '
                    'timestamp_s,node,used_mb) shaped after a Giraph run.')
    parser.add_argument('--nodes', type=int, default=16)
    parser.add_argument('--hours', type=float, default=4.0)
    parser.add_argument('--step', type=float, default=10.0,
                        help='seconds between samples')
    parser.add_argument('--seed', type=int, default=1)
    parser.add_argument('--node-ratio', type=float, default=2.78,
                        help='per-node peak : average')
    parser.add_argument('--aggregate-ratio', type=float, default=1.68,
                        help="the cluster total's peak : average")
    parser.add_argument('--period', type=float, default=1200.0,
                        help='seconds between one node\'s bursts')
    parser.add_argument('--peak-mb', type=float, default=65536.0,
                        help='typical node peak, MiB')
    parser.add_argument('--output', default='-',
                        help='file to write, - for standard output')
    args = parser.parse_args(argv)
    try:
        names, times, demand = generate(
            nodes=args.nodes, hours=args.hours, step=args.step,
            seed=args.seed, node_ratio=args.node_ratio,
            aggregate_ratio=args.aggregate_ratio, period_s=args.period,
            peak_mb=args.peak_mb)
    except ValueError as exc:
        parser.error(str(exc))
    node, total = ratios(demand)
    if args.output == '-':
        write_csv(sys.stdout, names, times, demand)
    else:
        with open(args.output, 'w') as stream:
            write_csv(stream, names, times, demand)
    print('trace_gen: nodes=%d samples=%d node_ratio=%.2f '
          'aggregate_ratio=%.2f' % (len(names), len(times), node, total),
          file=sys.stderr)
    return 0


if __name__ == '__main__':
    sys.exit(main())
