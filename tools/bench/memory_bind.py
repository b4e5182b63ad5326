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

"""Memory bind benchmark: how long a memory lease takes to become usable.

Starts composable-api, composable-conductor and two composable-agents as
real processes (over RabbitMQ, on MariaDB), the memory node exporting from
its tmpfs through the machine's tgtd (127.0.0.1:3260) and the compute node
hot-plugging into a tiny guest running under libvirt/QEMU (TCG). Then it
binds and unbinds one guest-mode memory lease N times through the REST
API and times each bind from the POST of the bind request until the API
shows the lease ``bound``: the extent is exported (tgtd target with CHAP,
restricted to the host's initiator) and attached (the guest's QEMU logged
in to it and the disk is plugged into the guest). Between binds, not
timed, the guest shows on its serial console that it got a disk of the
lease's size and swaps on it, and that the disk is gone after unbind.

The first bind of a lease also reserves its memory in the tmpfs
(fallocate); it is timed like the others. The last line is the summary:

  memory_bind: p50_ms=... p99_ms=...

Targets: p50 <= 250 ms, p99 <= 1 s.

Usage: tools/bench/memory_bind.py [--cycles 50] [--memory-mb 128]
       [--per-guest 16] [--verbose]
"""

import argparse
import os
import statistics
import sys
import tempfile
import time

import requests

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__),
                                                '..', '..')))

from composable.agent.compute_node import libvirt_guest  # noqa: E402
from tests.functional import leftovers  # noqa: E402
from tests.functional.compute_node import dataplane  # noqa: E402
from tests.functional.dataplane import env  # noqa: E402
from tests.functional.guest import build  # noqa: E402


def percentile(values, pct):
    ordered = sorted(values)
    if not ordered:
        return float('nan')
    k = (len(ordered) - 1) * pct / 100.0
    lo = int(k)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def wait_status(session, url, headers, statuses, timeout=120, poll=0.02):
    deadline = time.monotonic() + timeout
    while True:
        lease = session.get(url, headers=headers, timeout=30).json()
        if lease['status'] in statuses:
            return lease
        if time.monotonic() > deadline:
            raise RuntimeError('lease stayed %s (fault: %s)' %
                               (lease['status'], lease.get('fault')))
        time.sleep(poll)


def run(args):
    workdir = tempfile.mkdtemp(prefix='composable-bench-bind-')
    tgt = env.Tgt()
    dp = env.DataPlaneStack(workdir, tgt, memory_mb=args.memory_mb * 2,
                            step_mb=args.memory_mb)
    conn = dataplane.libvirt_connection()
    try:
        dp.start()
        lease = dp.user.post('/leases', {
            'name': 'bench', 'memory_mb': args.memory_mb,
            'attach_mode': 'guest'}, expect=201).json()
        times = []
        while len(times) < args.cycles:
            # A disk pulled from under the guest stays in its swap table
            # (Linux has room for about 25 swap areas), so a fresh guest
            # takes over every --per-guest cycles.
            count = min(args.per_guest, args.cycles - len(times))
            with build.running_guest(conn) as guest:
                times += cycles(dp, guest, args, lease, count, len(times))
        dp.user.delete('/leases/%s' % lease['uuid'])
        dp.user.wait_lease(lease['uuid'], ('released',), timeout=120)
        files_left = dp.extent_files()
        if files_left:
            raise RuntimeError('extent files left after release: %s' %
                               files_left)
        return times
    finally:
        dp.stop()
        conn.close()


def cycles(dp, guest, args, lease, count, first):
    session = requests.Session()
    headers = dict(dp.user.headers)
    url = dp.user.endpoint + '/leases/%s' % lease['uuid']
    body = {'server': guest.uuid, 'host': env.COMPUTE,
            'attach_mode': 'guest'}
    serial = libvirt_guest.disk_serial(lease['extents'][0]['uuid'])
    size = args.memory_mb * 1024 * 1024
    times = []
    for i in range(first, first + count):
        since = guest.mark()
        start = time.monotonic()
        resp = session.post(url + '/bind', json=body, headers=headers,
                            timeout=60)
        if resp.status_code != 202:
            raise RuntimeError('bind: %s %s' % (resp.status_code,
                                                resp.text))
        accepted = (time.monotonic() - start) * 1000.0
        bound = wait_status(session, url, headers, ('bound', 'bind_failed'))
        elapsed = (time.monotonic() - start) * 1000.0
        if bound['status'] != 'bound':
            raise RuntimeError('bind %d failed: %s' % (i, bound['fault']))
        times.append(elapsed)
        # Not timed: the guest sees the disk and swaps on it, as a user
        # of the lease would; the disk is unplugged only after that (a
        # disk pulled while the guest runs mkswap on it is not a case
        # this benchmark measures).
        seen = guest.wait_for_line(
            r'^new-disk (vd[a-z]+) bytes=%d serial=%s$' % (size, serial),
            60, since=since)
        guest.wait_for_line(r'^swap-on %s ok$' % seen.group(1), 60,
                            since=since)
        since = guest.mark()
        resp = session.post(url + '/unbind', json={}, headers=headers,
                            timeout=60)
        if resp.status_code != 202:
            raise RuntimeError('unbind: %s %s' % (resp.status_code,
                                                  resp.text))
        done = wait_status(session, url, headers, ('reserved', 'error'),
                           poll=0.05)
        if done['status'] != 'reserved':
            raise RuntimeError('unbind %d failed: %s' % (i, done['fault']))
        guest.wait_for_line(r'^disk-gone %s$' % seen.group(1), 60,
                            since=since)
        if args.verbose:
            print('cycle %d: bind %.1f ms (202 after %.1f ms)' % (
                i, elapsed, accepted), flush=True)
    return times


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--cycles', type=int, default=50)
    parser.add_argument('--memory-mb', type=int, default=128)
    parser.add_argument('--per-guest', type=int, default=16)
    parser.add_argument('--verbose', action='store_true')
    args = parser.parse_args(argv)
    times = run(args)
    print('binds: %d, min %.1f ms, mean %.1f ms, max %.1f ms' % (
        len(times), min(times), statistics.mean(times), max(times)))
    print('memory_bind: p50_ms=%.1f p99_ms=%.1f' % (
        percentile(times, 50), percentile(times, 99)))
    return 0


if __name__ == '__main__':
    # Whatever the run leaves on the machine (mounts, targets, guests,
    # processes, databases) fails it, and is removed.
    with leftovers.guard():
        rc = main()
    sys.exit(rc)
