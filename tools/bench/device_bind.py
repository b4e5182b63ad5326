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
guest agent, one run of the PCI module per attach and per detach.

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

The last line is the summary:

  device_bind: p50_ms=... p99_ms=...

Targets: p50 <= 1000 ms, p99 <= 3000 ms.

Usage: tools/bench/device_bind.py [--cycles 20] [--verbose]
"""

import argparse
import os
import statistics
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

BLOCK = 'GPU0'
POLL = 0.01
TIMEOUT = 300


def percentile(values, pct):
    ordered = sorted(values)
    if not ordered:
        return float('nan')
    k = (len(ordered) - 1) * pct / 100.0
    lo = int(k)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


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


def cycle(running, pci, uuid, marks):
    """One bind -> vfio-pci -> unbind; the timed part in ms."""
    del marks[:]
    start = time.monotonic()
    running.bind(uuid)
    lease = _wait_status(running.user, uuid, ('bound', 'bind_failed'))
    elapsed = (time.monotonic() - start) * 1000.0
    if marks:
        marks[:] = [(marks[0] - start) * 1000.0]
    if lease['status'] != 'bound':
        raise RuntimeError('the bind failed: %s' % lease.get('fault'))
    address = running.attachment_address(uuid)
    driver = pci.call('driver', address=address)
    if driver != 'vfio-pci':
        raise RuntimeError('%s is on %s in the host, not vfio-pci'
                           % (address, driver))
    running.unbind(uuid)
    lease = _wait_status(running.user, uuid, ('reserved', 'error'))
    if lease['status'] != 'reserved':
        raise RuntimeError('the unbind failed: %s' % lease.get('fault'))
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
                try:
                    running.start()
                    pci = guest_exec.PciRunner(guest_exec.GuestAgent(
                        host.domain))
                    uuid = running.gpu_lease(BLOCK)
                    marks = []

                    def at_add(record):
                        if record['method'] == 'POST' and \
                                'AddResourceBlock' in record['path']:
                            marks.append(time.monotonic())
                    fabric.emulator.observe(at_add)
                    times = []
                    for i in range(args.cycles):
                        times.append(cycle(running, pci, uuid, marks))
                        if args.verbose:
                            print('cycle %d: %.1f ms (AddResourceBlock '
                                  'at %s ms)' % (i, times[-1], ', '.join(
                                      '%.0f' % m for m in marks)),
                                  flush=True)
                    if args.verbose:
                        for line in running.logs().splitlines():
                            if 'PCI module attach_function' in line:
                                print(line.split('guest_bus ', 1)[-1])
                    running.delete(uuid)
                    running.wait(uuid, ['released'])
                    return times
                finally:
                    running.stop()
    finally:
        conn.close()
        import shutil
        shutil.rmtree(workdir, ignore_errors=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--cycles', type=int, default=20)
    parser.add_argument('--verbose', action='store_true')
    args = parser.parse_args(argv)
    times = run(args)
    print('binds: %d, min %.1f ms, mean %.1f ms, max %.1f ms' % (
        len(times), min(times), statistics.mean(times), max(times)))
    print('device_bind: p50_ms=%.1f p99_ms=%.1f' % (
        percentile(times, 50), percentile(times, 99)))
    return 0


if __name__ == '__main__':
    # Whatever the run leaves on the machine (guests, processes) fails
    # it, and is removed.
    with leftovers.guard():
        rc = main()
    sys.exit(rc)
