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

"""CXL bind benchmark: how long the compute agent takes to give a host a
lease's CXL memory as a NUMA node, and to take it back erased.

It boots the CXL host guest of tests/functional/cxl_host (Linux 6.12
under QEMU 10, TCG, two emulated CXL Type-3 devices; the prefix comes
from tools/cxl-host-prefix.sh) and runs the agent's ``CxlHostMemory``
in this process, every call to ``composable/privsep/cxl.py`` running in
the guest, as on a host. It binds and unbinds one lease of
``--chunks`` 256 MiB chunks ``--cycles`` times and times:

  bind      attach() until the node is online movable (make the region,
            kmem, every block online_movable)
  unbind    detach() until the capacity is free (offline, device_dax,
            sanitize or overwrite, destroy)

and each call into the kernel by name (p50/p99 over the cycles, the
calls per bind). Each call also crosses the guest's serial port, which a
host's privsep daemon does not: the round trip of a call that does
nothing (``rtt``) is measured and given, so that it can be subtracted.
The API and conductor hops before the agent are measured by
memory_bind.py's phases (api-call .. attach-rpc), the same for every
lease kind.

The last line is the summary:

  cxl_bind: bind_p50_ms=... bind_p99_ms=... unbind_p50_ms=...
  unbind_p99_ms=... rtt_ms=... calls_per_bind=... load=... target=ok|over

(on one line). Target: bind p50 <= 2 s under TCG.

Usage: tools/bench/cxl_bind.py [--cycles 10] [--chunks 2]
"""

import argparse
import collections
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__),
                                                '..', '..')))

from composable.agent.compute_node import cxl_memory  # noqa: E402
from tests.functional.cxl_host import host  # noqa: E402

CHUNK_MB = 256
TARGET_BIND_P50_S = 2.0


def percentile(values, pct):
    ordered = sorted(values)
    index = max(0, min(len(ordered) - 1,
                       int(round(pct / 100.0 * len(ordered) + 0.5)) - 1))
    return ordered[index]


class TimedOps(object):
    """The guest's ops, each call timed by name into ``self.calls``."""

    def __init__(self, ops):
        self._ops = ops
        self.calls = collections.defaultdict(list)

    def __getattr__(self, name):
        value = getattr(self._ops, name)
        if not callable(value):
            return value

        def call(*args):
            started = time.monotonic()
            try:
                return value(*args)
            finally:
                self.calls[name].append(time.monotonic() - started)
        return call


def chunks(lease, n):
    return [{'uuid': '%s-chunk-%d' % (lease, i), 'index': i,
             'size_mb': CHUNK_MB, 'lease_uuid': lease, 'medium': 'cxl',
             'device': 'cxl-device-0',
             'locator': {'serial': hex(host.SERIALS[0])}}
            for i in range(n)]


def run(cycles, n_chunks, guest=None):
    """Measure and print; 0 when the target is met, else 1. With
    ``guest``, a CXL host guest already running (holding no region)."""
    if guest is None:
        with host.running_guest() as guest:
            print('guest booted in %.1f s' % guest.boot_seconds)
            return run(cycles, n_chunks, guest)
    load_start = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix='cxl-bind-') as where:
        rtt = []
        for _ in range(20):
            started = time.monotonic()
            guest.call('check_name', 'mem0')
            rtt.append(time.monotonic() - started)
        ops = TimedOps(guest.ops)
        memory = cxl_memory.CxlHostMemory(
            ops=ops, state_file=os.path.join(where, 'state.json'),
            offline_attempts=5, offline_interval=1, sanitize_timeout=300)
        memory.start()
        binds, unbinds, calls_per_bind = [], [], []
        for cycle in range(cycles):
            lease = {'uuid': 'bench-%d' % cycle}
            before = sum(len(v) for v in ops.calls.values())
            started = time.monotonic()
            details = memory.attach(lease, chunks(lease['uuid'], n_chunks))
            binds.append(time.monotonic() - started)
            calls_per_bind.append(
                sum(len(v) for v in ops.calls.values()) - before)
            node = next(iter(details.values()))['numa_node']
            online = guest.call('node_memory_mib', node)
            if online != n_chunks * CHUNK_MB:
                raise SystemExit('cycle %d: node %s has %s MiB online, not '
                                 '%d' % (cycle, node, online,
                                         n_chunks * CHUNK_MB))
            started = time.monotonic()
            memory.detach(lease, chunks(lease['uuid'], n_chunks))
            unbinds.append(time.monotonic() - started)
    load_end = os.getloadavg()[0]

    def ms(seconds):
        return seconds * 1000.0

    print('%-24s %8s %10s %10s' % ('phase', 'calls', 'p50_ms', 'p99_ms'))
    for name, times in sorted(ops.calls.items(),
                              key=lambda kv: -statistics.median(kv[1])):
        print('%-24s %8d %10.1f %10.1f' % (name, len(times),
                                           ms(statistics.median(times)),
                                           ms(percentile(times, 99))))
    for name, times in (('bind', binds), ('unbind', unbinds),
                        ('rtt', rtt)):
        print('%-24s %8d %10.1f %10.1f' % (name, len(times),
                                           ms(statistics.median(times)),
                                           ms(percentile(times, 99))))
    bind_p50 = statistics.median(binds)
    print('load average: %.2f at the start, %.2f at the end'
          % (load_start, load_end))
    print('cxl_bind: bind_p50_ms=%.0f bind_p99_ms=%.0f unbind_p50_ms=%.0f '
          'unbind_p99_ms=%.0f rtt_ms=%.1f calls_per_bind=%d load=%.2f '
          'target=%s' % (
              ms(bind_p50), ms(percentile(binds, 99)),
              ms(statistics.median(unbinds)), ms(percentile(unbinds, 99)),
              ms(statistics.median(rtt)), max(calls_per_bind),
              max(load_start, load_end),
              'ok' if bind_p50 <= TARGET_BIND_P50_S else 'over'))
    return 0 if bind_p50 <= TARGET_BIND_P50_S else 1


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--cycles', type=int, default=10)
    parser.add_argument('--chunks', type=int, default=2,
                        choices=range(1, host.DEVICE_MIB // CHUNK_MB + 1))
    args = parser.parse_args()
    if args.cycles < 1:
        parser.error('--cycles must be at least 1')
    return run(args.cycles, args.chunks)


if __name__ == '__main__':
    sys.exit(main())
