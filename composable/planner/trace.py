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

"""Demand traces: CSV ``timestamp_s,node,used_mb``.

One header line naming the three columns, then one row per sample: the time
in seconds (any origin, fractions allowed), the node's name, and the memory
it used at that time in MiB. Blank lines and lines starting with ``#`` are
ignored. Each node's timestamps must increase; nodes may be sampled at
different times. The trace is laid on an even time grid (``step`` seconds,
by default the median interval between a node's samples): a node's demand
at a grid point is its last sample at or before it, and 0 before its
first sample.
"""

import collections
import csv
import dataclasses
import math

import numpy as np

COLUMNS = ('timestamp_s', 'node', 'used_mb')

#: Grid points times nodes above which a trace is refused: 20 million
#: float64 values are 160 MB for the demand alone.
MAX_CELLS = 20000000


class TraceError(ValueError):
    """A trace that cannot be read; names the line when there is one."""

    def __init__(self, source, line, message):
        self.source = source
        self.line = line
        self.message = message
        where = '%s:%d' % (source, line) if line else source
        super().__init__('%s: %s' % (where, message))


@dataclasses.dataclass
class Trace:
    """A demand trace on an even time grid."""

    nodes: list
    #: Seconds between grid points.
    step: float
    #: Time of the first grid point.
    start: float
    #: MiB used, one row per node, one column per grid point.
    demand: np.ndarray

    @property
    def samples(self):
        return self.demand.shape[1]

    @property
    def duration(self):
        return self.step * (self.samples - 1)


def _number(text, source, line, column):
    try:
        value = float(text)
    except ValueError:
        raise TraceError(source, line, '%s %r is not a number'
                         % (column, text))
    if not math.isfinite(value):
        raise TraceError(source, line, '%s %r is not a finite number'
                         % (column, text))
    if value < 0:
        raise TraceError(source, line, '%s %r is negative' % (column, text))
    return value


def parse(lines, source='<trace>'):
    """Read rows from ``lines`` (an iterable of text lines).

    Returns {node: [(timestamp, used_mb), …]} in file order. Raises
    TraceError naming the line of the first problem.
    """
    reader = csv.reader(lines)
    header_seen = False
    samples = collections.OrderedDict()
    last_line = 0
    for row in reader:
        line = reader.line_num
        last_line = line
        if not row or not ''.join(row).strip():
            continue
        if row[0].lstrip().startswith('#'):
            continue
        fields = [field.strip() for field in row]
        if not header_seen:
            if tuple(fields) != COLUMNS:
                raise TraceError(source, line,
                                 'the header must be %r, found %r'
                                 % (','.join(COLUMNS), ','.join(fields)))
            header_seen = True
            continue
        if len(fields) != len(COLUMNS):
            raise TraceError(source, line, 'expected %d fields (%s), found %d'
                             % (len(COLUMNS), ','.join(COLUMNS),
                                len(fields)))
        timestamp = _number(fields[0], source, line, 'timestamp_s')
        node = fields[1]
        if not node:
            raise TraceError(source, line, 'the node name is empty')
        used = _number(fields[2], source, line, 'used_mb')
        rows = samples.setdefault(node, [])
        if rows and timestamp <= rows[-1][0]:
            raise TraceError(source, line,
                             'timestamp %s of node %r is not after its '
                             'previous sample (%s)'
                             % (fields[0], node, '%g' % rows[-1][0]))
        rows.append((timestamp, used))
    if not header_seen:
        raise TraceError(source, last_line,
                         'no header line %r' % ','.join(COLUMNS))
    if not samples:
        raise TraceError(source, last_line, 'the trace holds no sample')
    return samples


def infer_step(samples):
    """The median interval between consecutive samples of a node."""
    gaps = [b[0] - a[0] for rows in samples.values()
            for a, b in zip(rows, rows[1:])]
    if not gaps:
        return None
    return float(np.median(gaps))


def to_grid(samples, step=None, source='<trace>'):
    """Lay parsed samples on an even grid; see the module's docstring."""
    if step is None:
        step = infer_step(samples)
        if step is None:
            raise TraceError(source, 0, 'every node has a single sample: '
                             'give the sampling interval (--step)')
    if not math.isfinite(step) or step <= 0:
        raise TraceError(source, 0, 'the sampling interval must be a '
                         'positive number of seconds, not %r' % step)
    start = min(rows[0][0] for rows in samples.values())
    end = max(rows[-1][0] for rows in samples.values())
    points = int(math.floor((end - start) / step + 1e-9)) + 1
    if points * len(samples) > MAX_CELLS:
        raise TraceError(source, 0, '%d nodes over %d grid points of %g s '
                         'is more than %d values: give a longer --step'
                         % (len(samples), points, step, MAX_CELLS))
    grid = start + step * np.arange(points)
    demand = np.zeros((len(samples), points))
    for index, rows in enumerate(samples.values()):
        times = np.array([r[0] for r in rows])
        values = np.array([r[1] for r in rows])
        # The last sample at or before each grid point (tolerating float
        # noise in the grid), 0 before the first.
        position = np.searchsorted(times, grid + step * 1e-9,
                                   side='right') - 1
        demand[index] = np.where(position >= 0,
                                 values[np.clip(position, 0, None)], 0.0)
    return Trace(nodes=list(samples), step=float(step), start=float(start),
                 demand=demand)


def load(path, step=None):
    """Read the trace file at ``path``; raise TraceError if it is bad."""
    try:
        with open(path, newline='', encoding='utf-8') as stream:
            samples = parse(stream, source=str(path))
    except UnicodeDecodeError as exc:
        raise TraceError(str(path), 0, 'not UTF-8 text (%s)' % exc.reason)
    except OSError as exc:
        raise TraceError(str(path), 0, exc.strerror or str(exc))
    return to_grid(samples, step=step, source=str(path))
