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

"""Replay a demand trace against static provisioning and against a pool.

Static: every node has its own peak as local memory.

Pooled: every node has ``local_share`` of its peak as local memory and one
elastic lease on a shared pool of ``pool_mb``. At each sample the lease's
controller sees the node's demand so far, asks the predictor for the peak
of the next prediction window plus headroom, and sets the lease's target
to what that exceeds the local memory by, in whole chunks, at most the
lease's maximum (``max_lease_mb``, as an elastic lease's ``max_mb``; by
default what the node's peak exceeds its local memory by, so that a node
never holds more than static provisioning gives it):

- *grow*: if the target is above what the lease holds, that is one growth
  request. The pool grants it whole or refuses it whole (a refused lease
  stays at its size, as the conductor does). Granted chunks are claimed
  from the pool at once, and usable from the first sample at least
  ``attach_delay`` seconds later: attaching takes time.
- *shrink*: rarely. Only once the target has stayed below what the lease
  holds for ``shrink_after`` seconds, with nothing still attaching, and
  only down to the largest target of that time; the chunks return to the
  pool at once.
- *shortfall*: a sample at which a node's demand exceeds its local memory
  plus its attached (not still attaching) chunks. A late grow shows here:
  the workload would page to slower storage or thrash.

The smallest pool (in whole chunks) at which at most ``max_refused`` of the
growth requests are refused is found by bisection.
"""

import dataclasses
import math

import numpy as np

from composable.conductor.elastic import predictor as predictor_mod

#: Longest trace the replay accepts, in samples of one node.
MAX_SAMPLES = 5000000


@dataclasses.dataclass(frozen=True)
class Parameters:
    """What the planner replays with; seconds and MiB."""

    local_share: float = 0.25
    chunk_mb: int = 1024
    order: int = 4
    observation_s: float = 600.0
    prediction_s: float = 30.0
    headroom: float = 0.05
    attach_delay_s: float = 30.0
    #: Defaults to the prediction window.
    shrink_after_s: float = None
    #: Fraction of growth requests that may be refused.
    max_refused: float = 0.01
    #: Price of a pooled MiB relative to a local one.
    pool_cost_factor: float = 1.0
    #: The most one lease may hold, MiB (an elastic lease's max_mb);
    #: None: each node's peak less its local memory, in whole chunks.
    max_lease_mb: float = None


@dataclasses.dataclass(frozen=True)
class Windows:
    """Parameters converted to samples of one trace."""

    observation: int
    prediction: int
    attach_delay: int
    shrink_after: int


def check(params, trace):
    """Check ``params`` against ``trace``; return its Windows.

    Raises ValueError with a message naming the bad option.
    """
    def fraction(name, value, high=1.0):
        if not (isinstance(value, (int, float)) and math.isfinite(value)
                and 0.0 <= value <= high):
            raise ValueError('%s must be between 0 and %g, not %r'
                             % (name, high, value))

    fraction('local share', params.local_share)
    fraction('max refused', params.max_refused)
    fraction('headroom', params.headroom, predictor_mod.MAX_HEADROOM)
    if not (isinstance(params.pool_cost_factor, (int, float))
            and math.isfinite(params.pool_cost_factor)
            and params.pool_cost_factor > 0):
        raise ValueError('pool cost factor must be a positive number, not '
                         '%r' % (params.pool_cost_factor,))
    if (isinstance(params.chunk_mb, bool)
            or not isinstance(params.chunk_mb, int) or params.chunk_mb < 1):
        raise ValueError('chunk must be a positive whole number of MiB, not '
                         '%r' % (params.chunk_mb,))
    if params.max_lease_mb is not None and (
            isinstance(params.max_lease_mb, bool)
            or not isinstance(params.max_lease_mb, (int, float))
            or not math.isfinite(params.max_lease_mb)
            or params.max_lease_mb < params.chunk_mb):
        raise ValueError('max lease must be a number of MiB of at least one '
                         'chunk (%d MiB), not %r'
                         % (params.chunk_mb, params.max_lease_mb))
    if (isinstance(params.order, bool) or not isinstance(params.order, int)
            or not 1 <= params.order <= 1000):
        raise ValueError('order must be a whole number from 1 to 1000, not '
                         '%r' % (params.order,))
    step = trace.step
    duration = trace.duration
    if trace.samples > MAX_SAMPLES:
        raise ValueError('the trace has %d samples per node; at most %d are '
                         'replayed: give a longer --step'
                         % (trace.samples, MAX_SAMPLES))

    def window(name, seconds, minimum, allow_zero=False):
        if not (isinstance(seconds, (int, float)) and math.isfinite(seconds)):
            raise ValueError('%s must be a number of seconds, not %r'
                             % (name, seconds))
        if seconds < 0 or (seconds == 0 and not allow_zero):
            raise ValueError('%s must be %s seconds, not %g'
                             % (name, 'at least 0' if allow_zero
                                else 'more than 0', seconds))
        if seconds > duration:
            why = (': a window as long as the workload is static '
                   'provisioning' if 'window' in name else '')
            raise ValueError('%s of %g s is longer than the trace (%g s)%s'
                             % (name, seconds, duration, why))
        samples = int(math.ceil(seconds / step - 1e-9))
        if samples < minimum:
            raise ValueError('%s of %g s is shorter than %d samples of this '
                             'trace (one every %g s)'
                             % (name, seconds, minimum, step))
        return samples

    if duration <= 0:
        raise ValueError('the trace spans a single instant; it needs '
                         'samples at two times at least')
    observation = window('observation window', params.observation_s, 2)
    prediction = window('prediction window', params.prediction_s, 1)
    attach = window('attach delay', params.attach_delay_s, 0,
                    allow_zero=True)
    shrink_s = (params.prediction_s if params.shrink_after_s is None
                else params.shrink_after_s)
    shrink = window('shrink-after time', shrink_s, 0, allow_zero=True)
    return Windows(observation=observation, prediction=prediction,
                   attach_delay=max(attach, 1), shrink_after=shrink)


@dataclasses.dataclass
class Forecasts:
    """The predictor's output over a trace; independent of the pool."""

    #: Predicted peak (no headroom), MiB, per node and sample.
    peak: np.ndarray
    #: The lease target in chunks, per node and sample.
    target_chunks: np.ndarray
    #: Local memory per node, MiB.
    local_mb: np.ndarray
    #: The most each node's lease may hold, in chunks.
    cap_chunks: np.ndarray
    #: Mean absolute percentage error of the predicted peaks against the
    #: peaks that came, in %; None if nothing could be compared.
    mape_pct: float


def lease_caps(demand, local, params):
    """The most each node's lease may hold, in chunks: ``max_lease_mb``
    (whole chunks of it), or by default what the node's peak exceeds its
    local memory by, rounded up to a chunk. Without a cap, the
    predictor's guard against runaway forecasts (no faster rise than over
    the last steps) still lets a lease reach several times what its node
    ever uses at each step of a step-shaped demand."""
    chunk = params.chunk_mb
    if params.max_lease_mb is not None:
        return np.full(demand.shape[0],
                       int(math.floor(params.max_lease_mb / chunk + 1e-9)),
                       dtype=np.int64)
    above = np.clip(demand.max(axis=1) - local, 0.0, None)
    return np.ceil(above / chunk - 1e-9).astype(np.int64)


def forecast(trace, params, windows, progress=None):
    """Run the predictor over the trace, sample by sample.

    ``progress``, if given, is called with the number of samples done
    after each node.
    """
    predictor = predictor_mod.Predictor(
        order=params.order, observation=windows.observation,
        horizon=windows.prediction, headroom=params.headroom)
    demand = trace.demand
    nodes, samples = demand.shape
    local = np.ceil(demand.max(axis=1) * params.local_share)
    cap = lease_caps(demand, local, params)
    peak = np.empty_like(demand)
    target = np.empty(demand.shape, dtype=np.int64)
    errors = []
    for node in range(nodes):
        series = demand[node]
        for t in range(samples):
            start = max(0, t + 1 - windows.observation)
            prediction = predictor.predict(series[start:t + 1])
            peak[node, t] = prediction.peak
            remote = max(prediction.provision - local[node], 0.0)
            target[node, t] = min(
                int(math.ceil(remote / params.chunk_mb - 1e-9)),
                int(cap[node]))
        # Error of each peak predicted with a full window still to come.
        horizon = windows.prediction
        if samples > horizon:
            future = np.lib.stride_tricks.sliding_window_view(
                series[1:], horizon).max(axis=1)
            came = future[:samples - horizon]
            said = peak[node, :samples - horizon]
            seen = came > 0
            errors.append(np.abs(said[seen] - came[seen]) / came[seen])
        if progress is not None:
            progress(samples)
    errors = np.concatenate(errors) if errors else np.empty(0)
    mape = float(errors.mean() * 100.0) if errors.size else None
    return Forecasts(peak=peak, target_chunks=target, local_mb=local,
                     cap_chunks=cap, mape_pct=mape)


@dataclasses.dataclass
class Replay:
    """The outcome of one pooled replay."""

    pool_chunks: int
    requests: int
    refused: int
    shortfall_samples: int
    shortfall_mb_s: float
    #: Local plus attached remote memory over time, summed over nodes.
    provisioned_mb: np.ndarray

    @property
    def refused_fraction(self):
        return self.refused / self.requests if self.requests else 0.0


def replay(trace, forecasts, windows, chunk_mb, pool_chunks):
    """Replay the pooled case with a pool of ``pool_chunks`` chunks."""
    demand = trace.demand
    nodes, samples = demand.shape
    target = forecasts.target_chunks
    local = forecasts.local_mb
    held = np.zeros(nodes, dtype=np.int64)      # claimed from the pool
    attached = np.zeros(nodes, dtype=np.int64)  # usable by the node
    arriving = np.zeros((samples + windows.attach_delay + 1, nodes),
                        dtype=np.int64)
    low_since = np.full(nodes, -1, dtype=np.int64)
    low_max = np.zeros(nodes, dtype=np.int64)
    free = int(pool_chunks)
    requests = refused = short_samples = 0
    short_mb_s = 0.0
    provisioned = np.empty(samples)
    for t in range(samples):
        attached += arriving[t]
        memory = local + attached * chunk_mb
        missing = demand[:, t] - memory
        short = missing > 0
        short_samples += int(short.sum())
        short_mb_s += float(missing[short].sum()) * trace.step
        provisioned[t] = memory.sum()

        want = target[:, t]
        # Shrinks first: they return chunks the grows of this sample may
        # take.
        below = want < held
        started = below & (low_since < 0)
        low_since[started] = t
        low_max[started] = want[started]
        low_max[below] = np.maximum(low_max[below], want[below])
        low_since[~below] = -1
        settled = held == attached
        shrink = below & settled & (t - low_since >= windows.shrink_after)
        if shrink.any():
            free += int((held[shrink] - low_max[shrink]).sum())
            held[shrink] = low_max[shrink]
            attached[shrink] = low_max[shrink]
            low_since[shrink] = -1

        grow = np.flatnonzero(want > held)
        if grow.size:
            requests += grow.size
            delta = want[grow] - held[grow]
            if int(delta.sum()) <= free:
                granted = grow
            else:
                # Not all fit: first come, first served, in node order.
                fits = []
                left = free
                for node, more in zip(grow, delta):
                    if more <= left:
                        left -= int(more)
                        fits.append(node)
                refused += grow.size - len(fits)
                granted = np.asarray(fits, dtype=np.int64)
            more = want[granted] - held[granted]
            free -= int(more.sum())
            held[granted] = want[granted]
            arriving[t + windows.attach_delay, granted] += more
    return Replay(pool_chunks=int(pool_chunks), requests=requests,
                  refused=refused, shortfall_samples=short_samples,
                  shortfall_mb_s=short_mb_s, provisioned_mb=provisioned)


def meets(result, params):
    return result.refused_fraction <= params.max_refused + 1e-12


def smallest_pool(trace, forecasts, windows, params, on_try=None):
    """Bisect for the smallest pool, in chunks, that meets the target.

    Returns (the Replay at that size, the Replay one chunk smaller or None
    when the pool is empty). A pool the size of every lease's largest
    target added up never refuses, so the search has an upper bound.
    """
    def run(chunks):
        result = replay(trace, forecasts, windows, params.chunk_mb, chunks)
        if on_try is not None:
            on_try(chunks, result)
        return result

    low = 0
    low_result = run(0)
    if meets(low_result, params):
        return low_result, None
    high = int(forecasts.target_chunks.max(axis=1).sum())
    high_result = run(high)
    if not meets(high_result, params):
        # Cannot happen: every lease's grows fit. Refuse to guess.
        raise RuntimeError('a pool of %d chunks refused %d of %d requests'
                           % (high, high_result.refused,
                              high_result.requests))
    # Invariant: low fails, high meets the target.
    while high - low > 1:
        middle = (low + high) // 2
        result = run(middle)
        if meets(result, params):
            high, high_result = middle, result
        else:
            low, low_result = middle, result
    return high_result, low_result


@dataclasses.dataclass
class Plan:
    """Everything the report shows."""

    params: Parameters
    windows: Windows
    trace: object
    forecasts: Forecasts
    pooled: Replay
    #: The replay one chunk smaller: it misses the target.
    smaller: Replay

    @property
    def static_mb(self):
        return float(self.trace.demand.max(axis=1).sum())

    @property
    def local_mb(self):
        return float(self.forecasts.local_mb.sum())

    @property
    def pool_mb(self):
        return self.pooled.pool_chunks * self.params.chunk_mb

    @property
    def pooled_mb(self):
        return self.local_mb + self.pool_mb

    @property
    def ratio(self):
        return self.pooled_mb / self.static_mb if self.static_mb else None

    @property
    def oracle_pool_mb(self):
        """The pool a perfect predictor with instant attach would need:
        the largest total, over time, of every node's demand above its
        local memory in whole chunks, with no headroom.
        """
        chunk = self.params.chunk_mb
        above = np.clip(self.trace.demand - self.forecasts.local_mb[:, None],
                        0.0, None)
        return float((np.ceil(above / chunk - 1e-9).sum(axis=0).max()
                      * chunk) if above.size else 0.0)

    @property
    def oracle_ratio(self):
        return ((self.local_mb + self.oracle_pool_mb) / self.static_mb
                if self.static_mb else None)

    def warnings(self):
        """What the reader of the plan must not miss."""
        found = []
        if self.static_mb and self.pooled_mb > self.static_mb:
            found.append(
                'pooling loses on this trace: local memory and pool need '
                '%.0f MiB, static provisioning %.0f MiB (%.2f times), where '
                'a perfect predictor would need %.2f times; the predictor '
                'does not follow this demand (try a longer --observation, '
                'a lower --headroom or a --max-lease-mb), or the demand of '
                'the nodes does not vary enough to gain from a pool'
                % (self.pooled_mb, self.static_mb, self.ratio,
                   self.oracle_ratio))
        return found

    @property
    def mean_used_mb(self):
        return float(self.trace.demand.sum(axis=0).mean())

    def cost_per_used_mb(self, pooled):
        """Effective cost: what is paid for, per MiB used on average.

        Li et al.'s argument: cost divided by utilisation. A local MiB
        costs 1, a pooled one ``pool_cost_factor``.
        """
        used = self.mean_used_mb
        if not used:
            return None
        if not pooled:
            return self.static_mb / used
        return (self.local_mb
                + self.pool_mb * self.params.pool_cost_factor) / used

    def as_dict(self):
        pooled_cost = self.cost_per_used_mb(True)
        static_cost = self.cost_per_used_mb(False)
        requests = self.pooled.requests
        return {
            'nodes': len(self.trace.nodes),
            'samples': self.trace.samples,
            'step_s': self.trace.step,
            'duration_s': self.trace.duration,
            'static_mb': self.static_mb,
            'local_mb': self.local_mb,
            'pool_mb': self.pool_mb,
            'pooled_mb': self.pooled_mb,
            'ratio': self.ratio,
            'oracle_pool_mb': self.oracle_pool_mb,
            'oracle_ratio': self.oracle_ratio,
            'growth_requests': requests,
            'refused': self.pooled.refused,
            'refused_pct': 100.0 * self.pooled.refused_fraction,
            'refused_pct_one_chunk_less': (
                None if self.smaller is None
                else 100.0 * self.smaller.refused_fraction),
            'shortfall_pct': (100.0 * self.pooled.shortfall_samples
                              / self.trace.demand.size),
            'shortfall_mb_s': self.pooled.shortfall_mb_s,
            'mape_pct': self.forecasts.mape_pct,
            'mean_used_mb': self.mean_used_mb,
            'utilisation_static': (1.0 / static_cost if static_cost
                                   else None),
            'utilisation_pooled': (self.mean_used_mb / self.pooled_mb
                                   if self.pooled_mb else None),
            'cost_per_used_mb_static': static_cost,
            'cost_per_used_mb_pooled': pooled_cost,
            'max_lease_mb': [int(c) * self.params.chunk_mb
                             for c in self.forecasts.cap_chunks],
            'warnings': self.warnings(),
            'parameters': dataclasses.asdict(self.params),
            'windows_samples': dataclasses.asdict(self.windows),
        }


def plan(trace, params, progress=None, on_try=None):
    """Check, forecast, and size the pool for ``trace``."""
    windows = check(params, trace)
    forecasts = forecast(trace, params, windows, progress=progress)
    pooled, smaller = smallest_pool(trace, forecasts, windows, params,
                                    on_try=on_try)
    return Plan(params=params, windows=windows, trace=trace,
                forecasts=forecasts, pooled=pooled, smaller=smaller)
