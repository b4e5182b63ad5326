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

"""Render a plan: a table, JSON, or a plot (matplotlib, optional)."""

import json
import os

import numpy

EXTRA_HINT = "install the planner's extra: pip install 'composable[planner]'"


class MissingDependency(RuntimeError):
    """An optional library the asked output needs is not installed."""


def _fmt(value, unit=''):
    if value is None:
        return 'n/a'
    if isinstance(value, float):
        text = '%.0f' % value if abs(value) >= 1000 else '%.3g' % value
    else:
        text = str(value)
    return text + unit


def table(plan, cxl_tiers=()):
    """The plan as a plain-text table; with the CXL tier's rows, one per
    share of memory pooled."""
    data = plan.as_dict()
    params = data['parameters']
    rows = [
        ('trace', '%d nodes, %d samples every %g s (%g s)'
         % (data['nodes'], data['samples'], data['step_s'],
            data['duration_s'])),
        ('static memory (sum of node peaks)', _fmt(data['static_mb'],
                                                   ' MiB')),
        ('local memory (%g %% of each peak)'
         % (100 * params['local_share']), _fmt(data['local_mb'], ' MiB')),
        ('smallest pool', '%s (%d chunks of %d MiB)'
         % (_fmt(data['pool_mb'], ' MiB'), plan.pooled.pool_chunks,
            params['chunk_mb'])),
        ('pooled memory (local + pool)', _fmt(data['pooled_mb'], ' MiB')),
        ('largest lease allowed', _fmt(
            float(max(data['max_lease_mb'] or [0])), ' MiB')
         if params['max_lease_mb'] is not None else
         "node's peak less its local memory (at most %s)" % _fmt(
             float(max(data['max_lease_mb'] or [0])), ' MiB')),
        ('pooled / static', _fmt(data['ratio'])),
        ('same, with perfect prediction', _fmt(data['oracle_ratio'])),
        ('growth requests refused', '%d of %d (%s %%; limit %g %%)'
         % (data['refused'], data['growth_requests'],
            _fmt(data['refused_pct']), 100 * params['max_refused'])),
        ('refused with one chunk less', _fmt(
            data['refused_pct_one_chunk_less'], ' %')),
        ('samples short of memory', _fmt(data['shortfall_pct'], ' %')),
        ('prediction error (MAPE of peaks)', _fmt(data['mape_pct'], ' %')),
        ('mean memory used', _fmt(data['mean_used_mb'], ' MiB')),
        ('utilisation static / pooled', '%s / %s'
         % (_fmt(data['utilisation_static']),
            _fmt(data['utilisation_pooled']))),
        ('cost per used MiB static / pooled', '%s / %s'
         % (_fmt(data['cost_per_used_mb_static']),
            _fmt(data['cost_per_used_mb_pooled']))),
    ]
    for tier in cxl_tiers:
        got = tier.as_dict()
        rows.append((
            'CXL, %g %% of memory pooled' % (100 * tier.share),
            'DRAM saved %s (%s %%): local %s + pool %s vs static %s; '
            '%s %% of used memory pooled, slowdown x%.3f'
            % (_fmt(got['saved_mb'], ' MiB'), _fmt(got['saved_pct']),
               _fmt(got['local_mb'], ' MiB'), _fmt(got['pool_mb'], ' MiB'),
               _fmt(got['static_mb'], ' MiB'), _fmt(got['pooled_use_pct']),
               got['slowdown'])))
    rows.extend(('WARNING', text) for text in data['warnings'])
    width = max(len(name) for name, _ in rows)
    return '\n'.join('%-*s  %s' % (width, name, value)
                     for name, value in rows)


def to_json(plan, cxl_tiers=()):
    data = plan.as_dict()
    if cxl_tiers:
        data['cxl'] = [tier.as_dict() for tier in cxl_tiers]
    return json.dumps(data, indent=2, sort_keys=True)


def plot(plan, path):
    """Write a PNG of demand, prediction and provisioned memory."""
    try:
        import matplotlib
    except ImportError:
        raise MissingDependency('--plot needs matplotlib: ' + EXTRA_HINT)
    matplotlib.use('Agg')
    from matplotlib import pyplot

    trace = plan.trace
    hours = (trace.start + trace.step * numpy.arange(trace.samples)) / 3600.0
    gib = 1024.0
    demand = trace.demand.sum(axis=0) / gib
    predicted = plan.forecasts.peak.sum(axis=0) / gib
    provisioned = plan.pooled.provisioned_mb / gib
    figure, axes = pyplot.subplots(figsize=(9, 4.5), dpi=80)
    axes.plot(hours, demand, color='black', linewidth=1.0,
              label='demand (all nodes)')
    axes.plot(hours, predicted, color='tab:orange', linewidth=0.8,
              label='predicted peak, next window')
    axes.plot(hours, provisioned, color='tab:blue', linewidth=1.0,
              label='local + attached pool memory')
    axes.axhline(plan.pooled_mb / gib, color='tab:blue', linestyle='--',
                 linewidth=1.0, label='local + pool size')
    axes.axhline(plan.static_mb / gib, color='tab:red', linestyle=':',
                 linewidth=1.2, label='static (sum of node peaks)')
    axes.set_xlabel('time (h)')
    axes.set_ylabel('memory (GiB)')
    axes.set_title('pool %.0f GiB, pooled/static %.2f, refused %.2f %%'
                   % (plan.pool_mb / gib, plan.ratio or 0.0,
                      100 * plan.pooled.refused_fraction))
    axes.legend(loc='lower center', fontsize='small', ncol=3)
    axes.set_ylim(bottom=0)
    figure.tight_layout()
    # Written aside and renamed, so an interrupted run leaves no
    # truncated picture under the name asked for.
    partial = '%s.partial' % path
    try:
        figure.savefig(partial, format='png')
        os.replace(partial, path)
    finally:
        pyplot.close(figure)
        if os.path.exists(partial):
            os.unlink(partial)
