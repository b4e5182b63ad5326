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

"""Device bind benchmark: how long a composed GPU takes to be ready for
passthrough on its host.

Boots the compute host guest (q35 + Intel IOMMU under TCG, see
tests/functional/compute_host/image.py) under libvirt and serves the
project's Redfish emulator with that guest as its system
``compute-host``. Each cycle then composes the block ``GPU0`` into the
host through the project's Redfish driver (the emulator hot-plugs QEMU's
``edu`` function into a free root port) and runs the agent's PCI module
inside the guest, through the guest agent, as the compute agent does:
``find_function`` by the driver's locator, ``check_group_isolated``,
``bind_vfio``, ``vfio_device_node``. The time from the Redfish
AddResourceBlock request to ``/dev/vfio/<group>`` is the cycle's. Not
timed: ``release``, ``remove``, and RemoveResourceBlock, which unplugs
the function and waits for QEMU's DEVICE_DELETED.

The last line is the summary:

  device_bind: p50_ms=... p99_ms=...

Targets: p50 <= 1000 ms, p99 <= 3000 ms.

Usage: tools/bench/device_bind.py [--cycles 20] [--verbose]
"""

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__),
                                                '..', '..')))

from tests.functional.compute_host import guest_exec  # noqa: E402
from tests.functional.compute_host import image as image_mod  # noqa: E402
from tests.functional.compute_host import stack  # noqa: E402
from tests.functional.compute_node import dataplane  # noqa: E402
from tests.functional import leftovers  # noqa: E402

BLOCK = 'GPU0'


def percentile(values, pct):
    ordered = sorted(values)
    if not ordered:
        return float('nan')
    k = (len(ordered) - 1) * pct / 100.0
    lo = int(k)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def cycle(fabric, pci, known):
    """One compose -> vfio-pci -> release -> decompose; the timed part in
    ms."""
    start = time.monotonic()
    locator = fabric.bind(BLOCK)
    address = pci.call('find_function', locator=locator, known=known,
                       timeout=60, interval=0.05)
    pci.call('check_group_isolated', address=address)
    pci.call('bind_vfio', address=address)
    pci.call('vfio_device_node', address=address)
    elapsed = (time.monotonic() - start) * 1000.0
    plugged = fabric.backend.plugged[BLOCK]['id']
    seen = len(fabric.backend.deleted)
    pci.call('release', address=address)
    pci.call('remove', address=address)
    fabric.unbind(BLOCK)
    deleted = [d for d, _ in fabric.backend.deleted[seen:]]
    if deleted != [plugged]:
        raise RuntimeError('expected DEVICE_DELETED of %s, saw %s'
                           % (plugged, deleted))
    return elapsed


def run(args):
    conn = dataplane.libvirt_connection()
    try:
        with image_mod.running_host(conn) as host:
            print('host guest booted in %.1f s' % host.boot_seconds,
                  flush=True)
            with stack.fabric(host) as fabric:
                pci = guest_exec.PciRunner(guest_exec.GuestAgent(
                    host.domain))
                known = pci.call('functions')
                times = []
                for i in range(args.cycles):
                    times.append(cycle(fabric, pci, known))
                    if args.verbose:
                        print('cycle %d: %.1f ms' % (i, times[-1]),
                              flush=True)
                return times
    finally:
        conn.close()


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
