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

With ``[compute_node]guest_swapon = best_effort`` (the default) the bind
answers once the disk is plugged: the guest agent's mkswap and swapon
run after ``bound``, and are measured as their own phase, ``swap-on
(after bound)``, from the conductor's ``bound`` to the compute agent's
mark of the swap-on; it is not part of the bind's total. With a tree
whose bind waits for the swap-on (``required``, or a tree before that
change), the marks come before ``attach-ack`` and the phase is
``guest-swap``, inside the bind.

The first bind of a lease also reserves its memory in the tmpfs
(fallocate); it is timed like the others.

Each bind is cut into phases by the timestamps the processes log (their
log files, millisecond resolution, one clock: everything runs on this
machine). The composable loggers that mark the phases at debug level
are turned on, nothing else; a phase whose marks an older tree does not
log is merged into the next one. The phases, each ending at its mark:

  api-call    POST /bind until the conductor moved the lease to binding
              (API checks, the RPC call to the conductor, the transition)
  handoff     until the conductor's worker starts the bind flow
  prepare     until the memory node starts the export (attachment rows,
              CHAP credentials, the RPC to the memory node)
  export      tgtd target, LUN, CHAP account and initiator ACL
  export-ack  until the conductor has the export's answer and records
  attach-rpc  until the compute node starts the attach
  attach-prep until the hot-plug starts (libvirt secret, live XML)
  hotplug     libvirt attachDeviceFlags: QEMU logs in to the target
  (guest-swap the guest sees the disk and makes it swap (guest agent),
              only where the bind waits for it)
  attach-ack  until the conductor has the attach's answer
  bound       until the lease is bound in the database
  seen        until the benchmark's GET shows it bound: the benchmark's
              own overhead, not the service's. It follows the
              conductor's log for the lease's transition out of binding
              (a few ms apart) and then GETs the lease, instead of
              polling GET all along: its GETs would otherwise take CPU
              and database time from the bind they time (a GET is ten
              ms and more of the API's and the database's time on a
              loaded 2-core machine), and a poll finds ``bound`` half a
              poll late on average. The GET still decides: until it
              shows the lease out of binding, it is polled as before.

and after the bind answered, not in its total:

  swap-on (after bound)  from bound until the guest agent's mkswap and
              swapon ended (the agent's mark)

The table gives p50 and p99 of each phase and of the whole bind, and the
load average at the start and the end of the run. Each phase has a
budget for its p50 and the whole bind one for its p50 and p99, scaled
by the machine's load (x (1 + 1-minute load average / CPUs), or
--budget-scale); a phase past its budget is named and the run exits 1.
The last lines are the summaries:

  memory_bind: swap-on-after-bound p50_ms=... p99_ms=... budget=...
  memory_bind: p50_ms=... p99_ms=... load=... budget=ok|over:<phases>

Targets of the bind: p50 <= 60 ms, p99 <= 150 ms on a quiet machine
(TOTAL_BUDGET). The TCG test guest's swap-on takes seconds (see
BUDGETS); where the bind waits for it, the bind's budget cannot hold.

Usage: tools/bench/memory_bind.py [--cycles 50] [--memory-mb 128]
       [--per-guest 16] [--budget-scale X | --no-budget] [--verbose]
"""

import argparse
import os
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
from tools.bench import phases  # noqa: E402


# The guest agent's swap-on: a phase of the bind where the bind waits for
# it, else measured after bound as AFTER_BOUND.
GUEST_SWAP = 'guest-swap'
AFTER_BOUND = 'swap-on (after bound)'
# The phases of a bind, in order: (name, process whose log has the mark
# that ends it, regex of the mark). The first starts at the POST, the
# last ends when the benchmark sees the lease bound.
PHASES = (
    ('api-call', 'conductor-0', r'Lease \S+: reserved -bind-> binding'),
    ('handoff', 'conductor-0', r'Lease \S+: bind started'),
    ('prepare', env.MEMORY, r'Exporting extent '),
    ('export', env.MEMORY, r'Exported extent '),
    ('export-ack', 'conductor-0', r'Lease \S+: extents exported'),
    ('attach-rpc', env.COMPUTE, r'Attaching \d+ extent'),
    ('attach-prep', env.COMPUTE, r'Hot-plugging memory extent '),
    ('hotplug', env.COMPUTE, r'Hot-plugged extent '),
    (GUEST_SWAP, env.COMPUTE, r'Instance \S+: (swapon|already-swap) '),
    ('attach-ack', 'conductor-0', r'Lease \S+: memory attached on '),
    ('bound', 'conductor-0', r'Lease \S+: binding -done-> bound'),
    ('seen', None, None),
)
# The loggers of those marks at debug level (the others keep their
# level: the benchmark must not pay for debug logging elsewhere).
TIMING_LOGGERS = ('composable.db.api', 'composable.conductor.flows')
# Budgets of the p50 of each phase and of the whole bind (p50, p99), in
# ms on a quiet machine, multiplied by the load scale (see
# --budget-scale). From runs on a 2-core machine at load averages 10 to
# 16 (scale 6 to 9), about twice what was measured there divided by the
# scale. The swap-on (guest-swap, or AFTER_BOUND) is mostly the TCG
# guest's own time: the ACPI interrupt link of the new PCI slot, the
# virtio disk's probe, mkswap and swapon, every instruction emulated.
BUDGETS = {
    'api-call': 60, 'handoff': 40, 'prepare': 30, 'export': 40,
    'export-ack': 40, 'attach-rpc': 20, 'attach-prep': 20, 'hotplug': 60,
    GUEST_SWAP: 1200, 'attach-ack': 20, 'bound': 25, 'seen': 40,
    AFTER_BOUND: 1200,
}
# The whole bind's p50 and p99: the target on a quiet machine.
TOTAL_BUDGET = (60, 150)
# The conductor's mark of a lease leaving binding (bound or bind_failed),
# logged once the transition is committed.
_BIND_ENDED = phases.BIND_ENDED
log_marks = phases.log_marks
percentile = phases.percentile
LogFollower = phases.LogFollower


def log_levels():
    """default_log_levels for the processes: the service's own, with
    the loggers of the marks at debug."""
    return phases.log_levels(TIMING_LOGGERS)


def phase_times(logs, windows):
    """({phase: [ms per bind]}, {after-bound phase: [ms per bind]}) from
    the processes' logs ({name: log marks}) and each bind's (posted,
    seen, end of its window, end of its unbind) wall times. A mark
    missing from any bind (a tree that does not log it) merges its phase
    into the next one for every bind, so all binds have the same phases
    and each bind's phases add up to its total. The swap-on mark is a
    phase of the bind when every bind's comes before its attach-ack (the
    bind waited for it); otherwise it is measured from the bound mark,
    looked for until the unbind ended (a detach waits for it)."""
    found = phases.first_marks(
        logs, PHASES, windows,
        limit=lambda name, window: window[3 if name == GUEST_SWAP else 2])
    waited = all(GUEST_SWAP in when and 'attach-ack' in when and
                 when[GUEST_SWAP] <= when['attach-ack'] for when in found)
    chain = [p[0] for p in PHASES if p[0] != GUEST_SWAP or waited]
    times = phases.chain_times(chain, found, windows)
    after = {}
    if not waited and all(GUEST_SWAP in when for when in found):
        after[AFTER_BOUND] = [
            (when[GUEST_SWAP] - min(when.get('bound', seen), seen)) * 1000.0
            for (posted, seen, end, unbound), when in zip(windows, found)]
    return times, after


def budget_of(phase):
    """The p50 budget of a phase, merged ones included."""
    return phases.budget_of(phase, BUDGETS)


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
    # (Through the stack's options, as older trees' stacks take them.)
    dp.stack.extra.setdefault('DEFAULT', {})['default_log_levels'] = (
        log_levels())
    conn = dataplane.libvirt_connection()
    try:
        dp.start()
        lease = dp.user.post('/leases', {
            'name': 'bench', 'memory_mb': args.memory_mb,
            'attach_mode': 'guest'}, expect=201).json()
        times = []
        windows = []
        while len(times) < args.cycles:
            # A disk pulled from under the guest stays in its swap table
            # (Linux has room for about 25 swap areas), so a fresh guest
            # takes over every --per-guest cycles.
            count = min(args.per_guest, args.cycles - len(times))
            with build.running_guest(conn) as guest:
                times += cycles(dp, guest, args, lease, count, len(times),
                                windows)
        logs = {name: log_marks(os.path.join(workdir, name + '.log'))
                for name in set(p[1] for p in PHASES if p[1])}
        dp.user.delete('/leases/%s' % lease['uuid'])
        dp.user.wait_lease(lease['uuid'], ('released',), timeout=120)
        files_left = dp.extent_files()
        if files_left:
            raise RuntimeError('extent files left after release: %s' %
                               files_left)
        return (times,) + phase_times(logs, windows)
    finally:
        dp.stop()
        conn.close()


def cycles(dp, guest, args, lease, count, first, windows):
    session = requests.Session()
    headers = dict(dp.user.headers)
    url = dp.user.endpoint + '/leases/%s' % lease['uuid']
    body = {'server': guest.uuid, 'host': env.COMPUTE,
            'attach_mode': 'guest'}
    serial = libvirt_guest.disk_serial(lease['extents'][0]['uuid'])
    size = args.memory_mb * 1024 * 1024
    conductor_log = os.path.join(dp.workdir, 'conductor-0.log')
    times = []
    for i in range(first, first + count):
        since = guest.mark()
        log = LogFollower(conductor_log)
        posted = time.time()
        start = time.monotonic()
        resp = session.post(url + '/bind', json=body, headers=headers,
                            timeout=60)
        if resp.status_code != 202:
            raise RuntimeError('bind: %s %s' % (resp.status_code,
                                                resp.text))
        accepted = (time.monotonic() - start) * 1000.0
        # The GET decides; the log only says when to ask (see seen).
        log.wait_for(_BIND_ENDED, 120)
        bound = wait_status(session, url, headers, ('bound', 'bind_failed'))
        elapsed = (time.monotonic() - start) * 1000.0
        seen_at = posted + elapsed / 1000.0
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
        unbind_at = time.time()
        resp = session.post(url + '/unbind', json={}, headers=headers,
                            timeout=60)
        if resp.status_code != 202:
            raise RuntimeError('unbind: %s %s' % (resp.status_code,
                                                  resp.text))
        done = wait_status(session, url, headers, ('reserved', 'error'),
                           poll=0.05)
        if done['status'] != 'reserved':
            raise RuntimeError('unbind %d failed: %s' % (i, done['fault']))
        windows.append((posted, seen_at, unbind_at, time.time()))
        guest.wait_for_line(r'^disk-gone %s$' % seen.group(1), 60,
                            since=since)
        if args.verbose:
            print('cycle %d: bind %.1f ms (202 after %.1f ms)' % (
                i, elapsed, accepted), flush=True)
    return times


def report(times, phase_ms, loads, scale, after=None):
    """Print the table and the summary lines; the phases over budget
    (None without budgets). ``after``: the phases after bound."""
    return phases.report('memory_bind', times, phase_ms, loads, scale,
                         BUDGETS, TOTAL_BUDGET, after)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--cycles', type=int, default=50)
    parser.add_argument('--memory-mb', type=int, default=128)
    parser.add_argument('--per-guest', type=int, default=16)
    phases.add_budget_arguments(parser)
    parser.add_argument('--verbose', action='store_true')
    args = parser.parse_args(argv)
    start_load = os.getloadavg()
    times, phase_ms, after = run(args)
    loads = (start_load, os.getloadavg())
    over = report(times, phase_ms, loads, phases.budget_scale(args, loads),
                  after)
    return 1 if over else 0


if __name__ == '__main__':
    # Whatever the run leaves on the machine (mounts, targets, guests,
    # processes, databases) fails it, and is removed.
    with leftovers.guard():
        rc = main()
    sys.exit(rc)
