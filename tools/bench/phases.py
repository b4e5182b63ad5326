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

"""The phase breakdown of the bind benchmarks (memory_bind.py,
device_bind.py): each bind cut into phases by the timestamps the
service's processes log (their log files, millisecond resolution, one
clock: everything runs on this machine), p50 and p99 of each phase, and
a budget per phase scaled by the machine's load; a phase past its
budget is named and fails the run.

A phase is ``(name, process, regex)``: it ends at the first line of the
process's log matching the regex after the bind's POST (the first phase
starts at the POST). A regex may name groups ``before...``: milliseconds
the line says were spent before it was logged (a step timed inside one
call that logs once), so the phase ends that long before the line. The
last phase, ``seen``, has no mark: it ends when the benchmark saw the
lease bound. A mark missing from any bind (a tree that does not log it)
merges its phase into the next one for every bind, so all binds have the
same phases and each bind's phases add up to its total.
"""

import bisect
import datetime
import os
import re
import sys
import time

SEEN = 'seen'
LOG_TIME = re.compile(r'^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}) ')
# The conductor's mark of a lease leaving binding (bound or bind_failed),
# logged once the transition is committed (composable.db.api).
BIND_ENDED = re.compile(r'Lease \S+: binding -\S+-> ')
# Seconds between two looks at a log being followed.
LOG_POLL = 0.002


def log_levels(loggers):
    """default_log_levels for the processes: the service's own, with
    ``loggers`` (those of the marks) at debug; the others keep their
    level, so a benchmark does not pay for debug logging elsewhere."""
    from oslo_log import log as logging
    return ','.join(logging.get_default_log_levels() + [
        'pecan=WARN', 'routes=WARN', 'stevedore=INFO'] + [
        '%s=DEBUG' % name for name in loggers])


def log_marks(path):
    """[(wall time, line)] of a process's log file."""
    marks = []
    try:
        with open(path, errors='replace') as f:
            for line in f:
                found = LOG_TIME.match(line)
                if found:
                    when = datetime.datetime.strptime(
                        found.group(1), '%Y-%m-%d %H:%M:%S.%f').timestamp()
                    marks.append((when, line))
    except FileNotFoundError:
        pass
    return marks


def _before(match):
    """Seconds a mark says were spent before it was logged."""
    return sum(float(value) for name, value in match.groupdict().items()
               if name.startswith('before') and value) / 1000.0


def first_marks(logs, phases, windows, limit=None):
    """For each bind, ``{phase: wall time of its end}`` from the first
    line matching the phase's mark in its process's log (``logs``:
    {process: log_marks}) between the bind's POST and ``limit(name,
    window)`` (default: the window's third time, the end of the bind's
    window). ``windows``: per bind, (posted, seen, end, ...) wall times.
    """
    regexes = {name: re.compile(pattern)
               for name, proc, pattern in phases if pattern}
    found = []
    for window in windows:
        posted = window[0]
        when = {}
        for name, proc, pattern in phases:
            if not pattern:
                continue
            marks = logs.get(proc, ())
            end = limit(name, window) if limit else window[2]
            first = bisect.bisect_left(marks, (posted - 0.002,))
            for at, line in marks[first:]:
                if at >= end:
                    break
                match = regexes[name].search(line)
                if match:
                    when[name] = at - _before(match)
                    break
        found.append(when)
    return found


def chain_times(chain, found, windows):
    """{phase (merged): [ms per bind]} of the phases named by ``chain``
    (in order, the last one ``seen``), from first_marks' ``found`` and
    the binds' windows: a phase whose mark some bind lacks is merged
    into the next (named ``a+b``), and a mark logged after the benchmark
    saw the lease bound ends there."""
    kept = [name for name in chain[:-1]
            if all(name in when for when in found)] + [chain[-1]]
    merged = {}
    pending = []
    for name in chain:
        pending.append(name)
        if name in kept:
            merged[name] = '+'.join(pending)
            pending = []
    times = {merged[name]: [] for name in kept}
    for window, when in zip(windows, found):
        posted, seen = window[0], window[1]
        previous = posted
        for name in kept:
            at = seen if name == chain[-1] else max(min(when[name], seen),
                                                    previous)
            times[merged[name]].append((at - previous) * 1000.0)
            previous = at
    return times


def phase_times(logs, phases, windows):
    """chain_times of ``phases`` (the last one ``seen``, without a
    mark)."""
    return chain_times([p[0] for p in phases],
                       first_marks(logs, phases, windows), windows)


def budget_of(phase, budgets):
    """The p50 budget of a phase, merged ones included."""
    return sum(budgets.get(part, 0) for part in phase.split('+'))


def percentile(values, pct):
    ordered = sorted(values)
    if not ordered:
        return float('nan')
    k = (len(ordered) - 1) * pct / 100.0
    lo = int(k)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


class LogFollower(object):
    """Follows a log file from where it ends now."""

    def __init__(self, path):
        self.path = path
        try:
            self.offset = os.path.getsize(path)
        except FileNotFoundError:
            self.offset = 0
        self.pending = ''

    def wait_for(self, regex, timeout, poll=LOG_POLL):
        """Wait until a line matching ``regex`` is written; False after
        ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                with open(self.path, errors='replace') as f:
                    f.seek(self.offset)
                    text = f.read()
                    self.offset = f.tell()
            except FileNotFoundError:
                text = ''
            lines = (self.pending + text).split('\n')
            self.pending = lines.pop()
            if any(regex.search(line) for line in lines):
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(poll)


def add_budget_arguments(parser):
    parser.add_argument('--budget-scale', type=float, default=None,
                        help='multiply the budgets by this (default: 1 + '
                             'the 1-minute load average / CPUs, the larger '
                             'of the start and the end of the run)')
    parser.add_argument('--no-budget', action='store_true',
                        help='report the phases, check no budget')


def budget_scale(args, loads):
    """The factor of the budgets (None: no budget) for the run's load
    averages (start, end)."""
    if args.no_budget:
        return None
    if args.budget_scale is not None:
        return args.budget_scale
    return 1 + max(loads[0][0], loads[1][0]) / (os.cpu_count() or 1)


def report(bench, times, phases, loads, scale, budgets, total_budget,
           after=None):
    """Print the table and the summary lines of benchmark ``bench``;
    returns the phases over budget (none without budgets: ``scale``
    None). ``phases``: {phase: [ms per bind]}; ``times``: the binds'
    totals; ``total_budget``: (p50, p99) of the whole bind; ``after``:
    phases measured after bound, not in the total."""
    over = []
    print('%-26s %9s %9s %9s' % ('phase', 'p50_ms', 'p99_ms', 'budget'))
    for phase, values in phases.items():
        p50 = percentile(values, 50)
        limit = None if scale is None else budget_of(phase, budgets) * scale
        if limit is not None and p50 > limit:
            over.append(phase)
        print('%-26s %9.1f %9.1f %9s%s' % (
            phase, p50, percentile(values, 99),
            '-' if limit is None else '%.0f' % limit,
            '  OVER BUDGET' if phase in over else ''))
    p50, p99 = percentile(times, 50), percentile(times, 99)
    if scale is not None:
        if p50 > total_budget[0] * scale:
            over.append('total-p50')
        if p99 > total_budget[1] * scale:
            over.append('total-p99')
    print('%-26s %9.1f %9.1f %9s' % (
        'total', p50, p99, '-' if scale is None else '%.0f/%.0f' % (
            total_budget[0] * scale, total_budget[1] * scale)))
    after_lines = []
    for phase, values in (after or {}).items():
        a50, a99 = percentile(values, 50), percentile(values, 99)
        limit = None if scale is None else budget_of(phase, budgets) * scale
        # One word in the summary line: swap-on-after-bound.
        token = re.sub(r'[^a-z0-9+]+', '-', phase).strip('-')
        late = limit is not None and a50 > limit
        if late:
            over.append(token)
        print('%-26s %9.1f %9.1f %9s%s  (after bound, not in the total)' % (
            phase, a50, a99, '-' if limit is None else '%.0f' % limit,
            '  OVER BUDGET' if late else ''))
        after_lines.append(
            '%s: %s p50_ms=%.1f p99_ms=%.1f budget=%s' % (
                bench, token, a50, a99, 'off' if limit is None else
                ('over' if late else 'ok')))
    print('binds: %d, min %.1f ms, mean %.1f ms, max %.1f ms' % (
        len(times), min(times), sum(times) / len(times), max(times)))
    print('load average: start %s, end %s (%d CPUs); budget scale %s' % (
        '/'.join('%.2f' % x for x in loads[0]),
        '/'.join('%.2f' % x for x in loads[1]), os.cpu_count() or 1,
        'off' if scale is None else '%.2f' % scale))
    for phase in over:
        print('%s: %s is over its budget' % (bench, phase), file=sys.stderr)
    for line in after_lines:
        print(line)
    print('%s: p50_ms=%.1f p99_ms=%.1f load=%.2f budget=%s' % (
        bench, p50, p99, max(loads[0][0], loads[1][0]),
        'off' if scale is None else
        ('over:' + ','.join(over) if over else 'ok')))
    return over
