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

"""composable-plan: size a memory pool from a demand trace.

::

    composable-plan TRACE.csv [--local-share 25%] [--chunk-mb 1024]
        [--observation 600] [--prediction 30] [--order 4] [--headroom 5%]
        [--attach-delay 30] [--shrink-after S] [--max-refused 1%]
        [--pool-cost-factor 1] [--max-lease-mb MB] [--step S]
        [--cxl-share 10%,25%] [--cxl-chunk-mb 256] [--cxl-attach-delay 2]
        [--cxl-slowdown 1.25] [--cxl-pool-nodes N]
        [--format table|json]
        [--plot FILE.png] [--progress]

Works offline: no configuration file, database or service. Exit status 0
with the plan, 2 for a malformed trace (naming the line), a bad option or a
plot that cannot be written, 130 when interrupted. A plan in which pooling
needs more memory than static provisioning is printed with a warning (also
on standard error). Output cut short by its reader (``| head``) ends the
command quietly.
See doc/source/admin/pool-sizing.rst.
"""

import argparse
import importlib.util
import os
import sys

from composable.planner import cxl
from composable.planner import replay
from composable.planner import report
from composable.planner import trace as trace_mod

EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130


def share(text):
    """A fraction: ``0.25`` or ``25%``."""
    text = text.strip()
    try:
        if text.endswith('%'):
            value = float(text[:-1]) / 100.0
        else:
            value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            '%r is not a fraction (0.25) or a percentage (25%%)' % text)
    return value


def shares(text):
    """Fractions separated by commas: ``10%,25%`` or ``0.1,0.25``."""
    return [share(part) for part in text.split(',') if part.strip()]


def seconds(text):
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError('%r is not a number of seconds'
                                         % text)


def build_parser():
    defaults = replay.Parameters()
    parser = argparse.ArgumentParser(
        prog='composable-plan',
        description='Replay a memory-demand trace (CSV timestamp_s,node,'
                    'used_mb) against static provisioning and against a '
                    'pool of elastic leases, and find the smallest pool '
                    'that refuses at most --max-refused of the growth '
                    'requests.')
    parser.add_argument('trace', help='CSV file: a header line '
                        'timestamp_s,node,used_mb, then one sample a line')
    parser.add_argument('--local-share', type=share,
                        default=defaults.local_share,
                        help="each node's local memory, as a share of its "
                             "peak (default 25%%)")
    parser.add_argument('--chunk-mb', type=int, default=defaults.chunk_mb,
                        help='allocation unit of the pool in MiB '
                             '(default %(default)s)')
    parser.add_argument('--observation', type=seconds,
                        default=defaults.observation_s,
                        help='seconds of history the predictor fits '
                             '(default %(default)g)')
    parser.add_argument('--prediction', type=seconds,
                        default=defaults.prediction_s,
                        help='seconds ahead whose peak is predicted '
                             '(default %(default)g)')
    parser.add_argument('--order', type=int, default=defaults.order,
                        help='w, lagged samples in the autoregressive '
                             'model (default %(default)s)')
    parser.add_argument('--headroom', type=share, default=defaults.headroom,
                        help='added to the predicted peak, as a share of '
                             'it (default 5%%)')
    parser.add_argument('--attach-delay', type=seconds,
                        default=defaults.attach_delay_s,
                        help='seconds from a granted grow until the memory '
                             'is usable (default %(default)g)')
    parser.add_argument('--shrink-after', type=seconds, default=None,
                        help='seconds a lease must be predicted to need '
                             'less before it shrinks (default: the '
                             'prediction window)')
    parser.add_argument('--max-refused', type=share,
                        default=defaults.max_refused,
                        help='share of growth requests the pool may refuse '
                             '(default 1%%)')
    parser.add_argument('--pool-cost-factor', type=float,
                        default=defaults.pool_cost_factor,
                        help='price of a pooled MiB relative to a local '
                             'one, for the cost per used MiB (default 1)')
    parser.add_argument('--max-lease-mb', type=float, default=None,
                        help="the most one node's lease may hold, in MiB, "
                             "as an elastic lease's max_mb (default: what "
                             "the node's peak exceeds its local memory by)")
    parser.add_argument('--step', type=seconds, default=None,
                        help='seconds between samples (default: the median '
                             'interval between a node\'s samples)')
    cxl_defaults = cxl.Parameters()
    parser.add_argument('--cxl-share', type=shares, default=[],
                        help="also report the CXL tier: the DRAM saved "
                             "(Pond's measure) with these shares of memory "
                             "in CXL pools, e.g. 10%%,25%%")
    parser.add_argument('--cxl-chunk-mb', type=int,
                        default=cxl_defaults.chunk_mb,
                        help='allocation unit of a CXL pool in MiB '
                             '(default %(default)s)')
    parser.add_argument('--cxl-attach-delay', type=seconds,
                        default=cxl_defaults.attach_delay_s,
                        help='seconds to make and online a CXL region '
                             '(default %(default)g)')
    parser.add_argument('--cxl-slowdown', type=float,
                        default=cxl_defaults.slowdown,
                        help='how much longer a workload runs with every '
                             'access on CXL pool pages (default '
                             '%(default)g)')
    parser.add_argument('--cxl-pool-nodes', type=int,
                        default=cxl_defaults.pool_nodes,
                        help='nodes sharing one CXL pool, in trace order '
                             '(default: all)')
    parser.add_argument('--format', choices=('table', 'json'),
                        default='table')
    parser.add_argument('--plot', metavar='FILE.png',
                        help='write a plot of demand, prediction and '
                             'provisioned memory (needs matplotlib)')
    parser.add_argument('--progress', action='store_true',
                        help='show a progress bar even when standard error '
                             'is not a terminal (needs tqdm)')
    return parser


def _fail(message):
    print('composable-plan: error: %s' % message, file=sys.stderr)
    return EXIT_BAD_INPUT


def _progress_bar(total, wanted):
    """A tqdm bar on a terminal or when asked, else None."""
    if not (wanted or sys.stderr.isatty()):
        return None
    try:
        import tqdm
    except ImportError:
        if wanted:
            raise report.MissingDependency('--progress needs tqdm: '
                                           + report.EXTRA_HINT)
        return None
    return tqdm.tqdm(total=total, unit='sample', desc='predicting',
                     file=sys.stderr)


def main(argv=None):
    args = build_parser().parse_args(argv)
    if args.plot:
        if importlib.util.find_spec('matplotlib') is None:
            return _fail('--plot needs matplotlib: ' + report.EXTRA_HINT)
        folder = os.path.dirname(os.path.abspath(args.plot))
        if not os.path.isdir(folder):
            return _fail('cannot write the plot: no folder %s' % folder)
    try:
        trace = trace_mod.load(args.trace, step=args.step)
    except trace_mod.TraceError as exc:
        return _fail(str(exc))
    params = replay.Parameters(
        local_share=args.local_share, chunk_mb=args.chunk_mb,
        order=args.order, observation_s=args.observation,
        prediction_s=args.prediction, headroom=args.headroom,
        attach_delay_s=args.attach_delay, shrink_after_s=args.shrink_after,
        max_refused=args.max_refused,
        pool_cost_factor=args.pool_cost_factor,
        max_lease_mb=args.max_lease_mb)
    cxl_params = cxl.Parameters(
        chunk_mb=args.cxl_chunk_mb, attach_delay_s=args.cxl_attach_delay,
        slowdown=args.cxl_slowdown, pool_nodes=args.cxl_pool_nodes)
    try:
        replay.check(params, trace)
        cxl.check(cxl_params, trace, args.cxl_share)
        bar = _progress_bar(trace.demand.size, args.progress)
    except (ValueError, report.MissingDependency) as exc:
        return _fail(str(exc))
    try:
        plan = replay.plan(trace, params,
                           progress=bar.update if bar else None)
        if args.plot:
            report.plot(plan, args.plot)
    except KeyboardInterrupt:
        print('composable-plan: interrupted', file=sys.stderr)
        return EXIT_INTERRUPTED
    except OSError as exc:
        return _fail('cannot write the plot: %s' % exc)
    finally:
        if bar is not None:
            bar.close()
    for warning in plan.warnings():
        print('composable-plan: warning: %s' % warning, file=sys.stderr)
    tiers = cxl.tiers(trace, cxl_params, args.cxl_share)
    text = (report.to_json(plan, tiers) if args.format == 'json'
            else report.table(plan, tiers))
    return _write(text)


def _write(text):
    """Print the plan; a reader that stops reading (``| head``) ends the
    command quietly, as with other command line tools."""
    try:
        sys.stdout.write(text + '\n')
        sys.stdout.flush()
    except BrokenPipeError:
        # Python flushes stdout again at exit, which would fail the same
        # way: point it at /dev/null first.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return 0
    return 0


if __name__ == '__main__':
    sys.exit(main())
