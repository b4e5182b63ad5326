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

"""The CXL tier: DRAM saved by putting a share of memory in a CXL pool.

The measure is Pond's (Li et al., ASPLOS '23): with a share ``s`` of
memory in the pool, each node keeps ``(1 - s)`` of its own peak as local
DRAM and takes what its demand exceeds that by from a CXL pool shared by
its pool group (Pond's pools span 8 to 16 sockets); the pool is as large
as the largest sum, over time, of what the nodes of its group hold of it.
The DRAM saved is what static provisioning (every node its own peak)
needs less local memory and pools together, as a share of static.

What a CXL pool adds to the network pool's model:

chunk
    A node holds pool memory in whole chunks of the device (256 MiB by
    default): its need at each sample is rounded up to a chunk.
attach delay
    Making and onlining a region takes time, so a chunk must be claimed
    that long before it is used: at each sample a node holds the largest
    need of the next ``attach delay`` seconds (a perfect forecast; the
    network pool's replay measures what a real predictor adds). Chunks
    return as soon as the need falls.
slowdown
    A page in the pool is slower than a local one: ``slowdown`` is how
    much longer a workload whose every access goes to pool pages runs
    (1.0: as fast as local). The tier reports the share of the memory in
    use that sits in the pool and the slowdown it gives if accesses are
    spread evenly over pages, a bound Pond improves on by placing the
    memory a VM never touches in the pool first.
"""

import dataclasses
import math

import numpy as np


@dataclasses.dataclass(frozen=True)
class Parameters:
    """The CXL tier's inputs; seconds and MiB."""

    chunk_mb: int = 256
    attach_delay_s: float = 2.0
    slowdown: float = 1.25
    #: Nodes sharing one pool, in trace order (Pond: 8 to 16 sockets);
    #: 0: every node of the trace shares one pool.
    pool_nodes: int = 0


@dataclasses.dataclass
class Tier:
    """What pooling ``share`` of memory in CXL pools gives on a trace."""

    share: float
    static_mb: float
    local_mb: float
    #: One figure per pool group.
    pool_mb: list
    #: Share of the memory in use that is in a pool, over the trace.
    pooled_use: float
    #: Estimated slowdown with accesses spread evenly over pages.
    slowdown: float

    @property
    def pooled_mb(self):
        return self.local_mb + sum(self.pool_mb)

    @property
    def saved_mb(self):
        return self.static_mb - self.pooled_mb

    @property
    def saved(self):
        """Pond's DRAM savings: a share of static provisioning."""
        return self.saved_mb / self.static_mb if self.static_mb else None

    def as_dict(self):
        return {'share': self.share, 'static_mb': self.static_mb,
                'local_mb': self.local_mb, 'pool_mb': sum(self.pool_mb),
                'pools_mb': list(self.pool_mb),
                'pooled_mb': self.pooled_mb, 'saved_mb': self.saved_mb,
                'saved_pct': (None if self.saved is None
                              else 100.0 * self.saved),
                'pooled_use_pct': 100.0 * self.pooled_use,
                'slowdown': self.slowdown}


def check(params, trace, shares):
    """Raise ValueError naming the bad option; the attach delay in
    samples of ``trace``."""
    for share in shares:
        if not (isinstance(share, (int, float)) and math.isfinite(share)
                and 0.0 <= share <= 1.0):
            raise ValueError('CXL share must be between 0 and 1, not %r'
                             % (share,))
    if (isinstance(params.chunk_mb, bool) or
            not isinstance(params.chunk_mb, int) or params.chunk_mb < 1):
        raise ValueError('CXL chunk must be a positive whole number of MiB, '
                         'not %r' % (params.chunk_mb,))
    if not (isinstance(params.slowdown, (int, float)) and
            math.isfinite(params.slowdown) and params.slowdown >= 1.0):
        raise ValueError('CXL slowdown must be a number of at least 1 (1: '
                         'as fast as local memory), not %r'
                         % (params.slowdown,))
    if (isinstance(params.pool_nodes, bool) or
            not isinstance(params.pool_nodes, int) or params.pool_nodes < 0):
        raise ValueError('CXL pool nodes must be a whole number, 0 for one '
                         'pool of every node, not %r' % (params.pool_nodes,))
    delay = params.attach_delay_s
    if not (isinstance(delay, (int, float)) and math.isfinite(delay) and
            delay >= 0):
        raise ValueError('CXL attach delay must be at least 0 seconds, not '
                         '%r' % (delay,))
    return int(math.ceil(delay / trace.step - 1e-9)) if trace.step else 0


def _ahead_max(values, samples):
    """Per row, the largest value of the next ``samples`` samples and the
    current one."""
    if samples <= 0:
        return values
    padded = np.concatenate(
        [values, np.zeros((values.shape[0], samples))], axis=1)
    windows = np.lib.stride_tricks.sliding_window_view(
        padded, samples + 1, axis=1)
    return windows.max(axis=2)


def tier(trace, params, share):
    """Pond's measure of ``trace`` with ``share`` of memory pooled."""
    delay = check(params, trace, [share])
    demand = trace.demand
    peaks = demand.max(axis=1)
    local = np.ceil(peaks * (1.0 - share) - 1e-9)
    above = np.clip(demand - local[:, None], 0.0, None)
    chunk = params.chunk_mb
    need = np.ceil(above / chunk - 1e-9) * chunk
    held = _ahead_max(need, delay)
    group = params.pool_nodes or demand.shape[0]
    pools = [float(held[start:start + group].sum(axis=0).max())
             if held.size else 0.0
             for start in range(0, demand.shape[0], group)]
    used = float(demand.sum())
    pooled_use = float(above.sum()) / used if used else 0.0
    return Tier(share=float(share), static_mb=float(peaks.sum()),
                local_mb=float(local.sum()), pool_mb=pools,
                pooled_use=pooled_use,
                slowdown=1.0 + (params.slowdown - 1.0) * pooled_use)


def tiers(trace, params, shares):
    check(params, trace, shares)
    return [tier(trace, params, share) for share in shares]
