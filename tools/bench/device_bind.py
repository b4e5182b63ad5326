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

"""Device bind benchmark: how long a GPU lease takes, through the API,
to be ready for passthrough on its host.

Boots the compute host guest (q35 + Intel IOMMU under TCG, see
tests/functional/compute_host/image.py) under libvirt, serves the
project's Redfish emulator with that guest as its system
``compute-host``, and runs composable-api, -conductor and -agent as real
processes over RabbitMQ on MariaDB (tests/functional/compute_host/
services.py); the agent's PCI work runs inside the guest through its
guest agent, one call of the PCI module (kept running in the guest) per
attach and per detach.

Each cycle binds a one-GPU lease to ``compute-host`` through the API
(POST /v1/leases/<uuid>/bind): the conductor composes block ``GPU0``
through the Redfish driver (the emulator hot-plugs QEMU's ``edu``
function into a free root port of the guest), the agent finds the
function in the guest, checks its IOMMU group and binds it to vfio-pci.
The time from the bind request to the lease reading ``bound`` (which the
conductor writes once the agent answered that the function is on
vfio-pci) is the cycle's; the guest is then checked to have the function
on vfio-pci (not timed). The unbind that follows (off the host's bus,
then RemoveResourceBlock) is not timed.

Each bind is cut into phases by the timestamps the processes log, as in
memory_bind.py (tools/bench/phases.py): the debug-level marks of the
conductor, the Redfish driver and the agent, nothing else at debug; a
phase whose marks an older tree does not log is merged into the next
one. The phases, each ending at its mark:

  api-call      POST /bind until the conductor moved the lease to binding
  handoff       until the conductor's worker starts the bind flow
  fabric-call   until the Redfish driver starts (device view, driver)
  fabric-reads  the driver's reads of the block, the system, the zones,
                until it posts AddResourceBlock
  hot-plug      AddResourceBlock: the emulator hot-plugs ``edu`` into the
                guest (QMP device_add) and answers
  compose-wait  until the driver reads the block composed
  attach-rpc    until the agent starts the attach (the device's state in
                the database, the RPC to the agent)
  pci-call      the PCI module call's own cost: here a guest-exec round
                trip to the module's server in the guest (on a host, the
                privsep daemon's), the call's time less the two below
  rescan        the module's search: rescan, until the function is there
                (the guest's pciehp usually enumerated it already)
  vfio-bind     IOMMU group check, driver_override, probe by vfio-pci,
                the check that it is on vfio-pci with /dev/vfio/<group>
  attach-ack    until the conductor has the agent's answer (merged into
                bound while the conductor logs no mark of it)
  bound         until the lease is bound in the database
  seen          until the benchmark's GET shows it bound: it follows the
                conductor's log for the lease's transition out of
                binding, then GETs the lease (see memory_bind.py)

pci-call, rescan and vfio-bind are one call of the module, which says
how long its search and its bind took (the agent logs that after the
call): they end that long before the agent's mark.

The table gives p50 and p99 of each phase and of the whole bind, and the
load average at the start and the end of the run. Each phase has a
budget for its p50 and the whole bind one for its p50 and p99, scaled
by the machine's load (x (1 + 1-minute load average / CPUs), or
--budget-scale); a phase past its budget is named and the run exits 1.
The last line is the summary:

  device_bind: p50_ms=... p99_ms=... load=... budget=ok|over:<phases>

Targets: p50 <= 500 ms, p99 <= 1500 ms under TCG on a quiet machine
(TOTAL_BUDGET).

Usage: tools/bench/device_bind.py [--cycles 20] [--budget-scale X |
       --no-budget] [--verbose]
"""

import argparse
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__),
                                                '..', '..')))

from tests.functional.compute_host import guest_exec  # noqa: E402
from tests.functional.compute_host import image as image_mod  # noqa: E402
from tests.functional.compute_host import services  # noqa: E402
from tests.functional.compute_host import stack  # noqa: E402
from tests.functional.compute_node import dataplane  # noqa: E402
from tests.functional import leftovers  # noqa: E402
from tools.bench import phases  # noqa: E402

BLOCK = 'GPU0'
POLL = 0.01
TIMEOUT = 300
CONDUCTOR = 'conductor-0'
HOST = services.HOST
_FOUND = (r'Device \S+ of lease \S+: found at \S+ in %s ms, IOMMU group '
          r'and vfio-pci in %s ms')
_MS = r'[0-9.]+'
# The phases of a bind, in order: (name, process whose log has the mark
# that ends it, regex of the mark; groups named before... are ms spent
# before the mark). The first starts at the POST, the last ends when the
# benchmark sees the lease bound.
PHASES = (
    ('api-call', CONDUCTOR, r'Lease \S+: reserved -bind-> binding'),
    ('handoff', CONDUCTOR, r'Lease \S+: bind started'),
    ('fabric-call', CONDUCTOR, r'Composing resource block \S+ for host '),
    ('fabric-reads', CONDUCTOR,
     r'Resource block \S+: ComputerSystem.AddResourceBlock on system '),
    ('hot-plug', CONDUCTOR,
     r'Resource block \S+: ComputerSystem.AddResourceBlock answered'),
    ('compose-wait', CONDUCTOR, r'Resource block \S+ composed into system '),
    ('attach-rpc', HOST, r'Lease \S+: attaching \d+ device'),
    ('pci-call', HOST, _FOUND % ('(?P<before_find>%s)' % _MS,
                                 '(?P<before_bind>%s)' % _MS)),
    ('rescan', HOST, _FOUND % (_MS, '(?P<before_bind>%s)' % _MS)),
    ('vfio-bind', HOST, _FOUND % (_MS, _MS)),
    ('attach-ack', CONDUCTOR, r'Lease \S+: devices attached on '),
    ('bound', CONDUCTOR, r'Lease \S+: binding -done-> bound'),
    (phases.SEEN, None, None),
)
# The loggers of those marks at debug level.
TIMING_LOGGERS = ('composable.db.api', 'composable.conductor.flows',
                  'composable.fabric.redfish.driver',
                  'composable.agent.compute_node.host_pci')
# Budgets of the p50 of each phase, in ms on a quiet machine, multiplied
# by the load scale (see --budget-scale): about twice what runs on a
# 2-core machine measured, at a load average of about 2 (scale 2). The
# hot-plug and the PCI call are the TCG guest's: QEMU's device_add and
# the guest's pciehp, a guest-exec round trip with every instruction of
# the guest emulated.
BUDGETS = {
    'api-call': 25, 'handoff': 15, 'fabric-call': 10, 'fabric-reads': 30,
    'hot-plug': 40, 'compose-wait': 15, 'attach-rpc': 15, 'pci-call': 60,
    'rescan': 15, 'vfio-bind': 30, 'attach-ack': 15, 'bound': 15,
    phases.SEEN: 15,
}
# The whole bind's p50 and p99 under TCG on a quiet machine.
TOTAL_BUDGET = (500, 1500)


def phase_times(logs, windows):
    """{phase: [ms per bind]} from the processes' logs ({name: log
    marks}) and each bind's (posted, seen, unbind started, unbound) wall
    times (see phases.phase_times)."""
    return phases.phase_times(logs, PHASES, windows)


def budget_of(phase):
    return phases.budget_of(phase, BUDGETS)


def report(times, phase_ms, loads, scale):
    """Print the table and the summary line; the phases over budget."""
    return phases.report('device_bind', times, phase_ms, loads, scale,
                         BUDGETS, TOTAL_BUDGET)


def _wait_status(client, uuid, statuses):
    deadline = time.monotonic() + TIMEOUT
    while True:
        lease = client.get('/leases/%s' % uuid).json()
        if lease['status'] in statuses:
            return lease
        if time.monotonic() > deadline:
            raise RuntimeError('lease %s stayed %s' % (uuid,
                                                       lease['status']))
        time.sleep(POLL)


def cycle(running, pci, uuid, windows):
    """One bind -> vfio-pci -> unbind; the timed part in ms. Its window
    (posted, seen, unbind started, unbound) is appended to ``windows``."""
    log = phases.LogFollower(os.path.join(running.workdir,
                                          CONDUCTOR + '.log'))
    posted = time.time()
    start = time.monotonic()
    running.bind(uuid)
    # The GET decides; the log only says when to ask (see seen).
    log.wait_for(phases.BIND_ENDED, TIMEOUT)
    lease = _wait_status(running.user, uuid, ('bound', 'bind_failed'))
    elapsed = (time.monotonic() - start) * 1000.0
    seen = posted + elapsed / 1000.0
    if lease['status'] != 'bound':
        raise RuntimeError('the bind failed: %s' % lease.get('fault'))
    address = running.attachment_address(uuid)
    driver = pci.call('driver', address=address)
    if driver != 'vfio-pci':
        raise RuntimeError('%s is on %s in the host, not vfio-pci'
                           % (address, driver))
    unbind_at = time.time()
    running.unbind(uuid)
    lease = _wait_status(running.user, uuid, ('reserved', 'error'))
    if lease['status'] != 'reserved':
        raise RuntimeError('the unbind failed: %s' % lease.get('fault'))
    windows.append((posted, seen, unbind_at, time.time()))
    if address in pci.call('functions'):
        raise RuntimeError('%s is still on the host after the unbind'
                           % address)
    return elapsed


def run(args):
    conn = dataplane.libvirt_connection()
    workdir = tempfile.mkdtemp(prefix='composable-device-bind-')
    try:
        with image_mod.running_host(conn) as host:
            print('host guest booted in %.1f s' % host.boot_seconds,
                  flush=True)
            with stack.fabric(host) as fabric:
                running = services.HostServices(workdir, host, fabric)
                running.stack.extra.setdefault('DEFAULT', {})[
                    'default_log_levels'] = phases.log_levels(
                        TIMING_LOGGERS)
                try:
                    running.start()
                    pci = guest_exec.PciRunner(guest_exec.GuestAgent(
                        host.domain))
                    uuid = running.gpu_lease(BLOCK)
                    times = []
                    windows = []
                    for i in range(args.cycles):
                        times.append(cycle(running, pci, uuid, windows))
                        if args.verbose:
                            print('cycle %d: %.1f ms' % (i, times[-1]),
                                  flush=True)
                    logs = {name: phases.log_marks(
                        os.path.join(workdir, name + '.log'))
                        for name in (CONDUCTOR, HOST)}
                    running.delete(uuid)
                    running.wait(uuid, ['released'])
                    return times, phase_times(logs, windows)
                finally:
                    running.stop()
    finally:
        conn.close()
        shutil.rmtree(workdir, ignore_errors=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--cycles', type=int, default=20)
    phases.add_budget_arguments(parser)
    parser.add_argument('--verbose', action='store_true')
    args = parser.parse_args(argv)
    start_load = os.getloadavg()
    times, phase_ms = run(args)
    loads = (start_load, os.getloadavg())
    over = report(times, phase_ms, loads, phases.budget_scale(args, loads))
    return 1 if over else 0


if __name__ == '__main__':
    # Whatever the run leaves on the machine (guests, processes) fails
    # it, and is removed.
    with leftovers.guard():
        rc = main()
    sys.exit(rc)
