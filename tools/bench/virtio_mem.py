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

"""virtio-mem benchmark: how fast a guest takes and gives back the memory
of a virtio-mem lease, per 512 MiB.

It boots the tiny guest of tests/functional/guest (the machine's cloud
kernel with its virtio_mem module, hot-plugged memory onlined movable)
under the system libvirtd (QEMU TCG), with ``<maxMemory>`` and one guest
NUMA cell, and has the agent's VirtioMemAttacher plug one device of
``--mib`` MiB pinned to host NUMA node ``--node`` (0 here: the machine
has no CXL node; on a CXL host it is the region's node). Then, ``--cycles``
times:

  grow      resize() to all of it, until QEMU's device has it all plugged
            (its ``size`` property, read over QMP every 10 ms: the guest
            asked for every block)
  shrink    resize() to 0, until QEMU's device has none plugged

and, as the agent sees them, the same two until libvirt's ``<current>``
says so (``grow_libvirt``, and ``shrink_libvirt``: what resize() waits
for). libvirt learns the plugged size from QEMU's
MEMORY_DEVICE_SIZE_CHANGE event, which QEMU sends at most once a second
per device, so those figures lag up to a second behind the guest.

All are given per 512 MiB (p50/p99 over the cycles), with the load
average. The last line is the summary:

  virtio_mem: grow_p50_ms_per_512mib=... grow_p99_ms_per_512mib=...
  shrink_p50_ms_per_512mib=... shrink_p99_ms_per_512mib=...
  grow_libvirt_p50_ms=... shrink_libvirt_p50_ms=... mib=... cycles=...
  load=... target=ok|over

(on one line). Targets under TCG: grow <= 1 s and shrink <= 5 s per
512 MiB (p50).

Usage: tools/bench/virtio_mem.py [--cycles 10] [--mib 512] [--node 0]
"""

import argparse
import os
import statistics
import sys
import threading
import time
import uuid

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__),
                                                '..', '..')))

from composable.agent.compute_node import libvirt_connection  # noqa: E402
from composable.agent.compute_node import virtio_mem  # noqa: E402
from tests.functional.guest import build  # noqa: E402

BOOT_MIB = 256
GROW_TARGET_MS = 1000
SHRINK_TARGET_MS = 5000
URI = 'qemu:///system'


def percentile(values, pct):
    ordered = sorted(values)
    index = max(0, min(len(ordered) - 1,
                       int(round(pct / 100.0 * len(ordered) + 0.5)) - 1))
    return ordered[index]


def _qemu_size(domain, alias):
    """The plugged size of the device as QEMU has it, in KiB (QMP
    qom-get; libvirt names the QEMU device by its alias)."""
    import json
    import libvirt_qemu
    answer = libvirt_qemu.qemuMonitorCommand(domain, json.dumps({
        'execute': 'qom-get', 'arguments': {
            'path': '/machine/peripheral/%s' % alias,
            'property': 'size'}}), 0)
    return json.loads(answer)['return'] // 1024


def _wait_qemu(domain, alias, kib, timeout):
    deadline = time.monotonic() + timeout
    while _qemu_size(domain, alias) != kib:
        if time.monotonic() > deadline:
            raise RuntimeError('QEMU did not have %d KiB plugged within %ds'
                               % (kib, timeout))
        time.sleep(0.01)


def _current_kib(domain, alias):
    device = virtio_mem.DomainMemory(domain.XMLDesc(0)).devices[alias]
    return device.current_kib or 0


def _wait_current(domain, alias, kib, timeout):
    deadline = time.monotonic() + timeout
    while _current_kib(domain, alias) != kib:
        if time.monotonic() > deadline:
            raise RuntimeError('the guest did not plug %d KiB within %ds'
                               % (kib, timeout))
        time.sleep(0.01)


def run(cycles, mib, node, timeout):
    import libvirt
    libvirt.registerErrorHandler(lambda ctx, err: None, None)
    conn = libvirt.open(URI)
    image = build.build(
        extra_modules=('virtio_mem',),
        cmdline=build.KERNEL_CMDLINE + ' memhp_default_state=online_movable')
    lease = str(uuid.uuid4())
    alias = virtio_mem.device_alias(lease)
    grows = []
    shrinks = []
    grows_libvirt = []
    shrinks_libvirt = []
    load_start = os.getloadavg()[0]
    with build.running_guest(conn, image=image, memory_mib=BOOT_MIB,
                             max_memory_mib=BOOT_MIB + mib,
                             autoswap=False) as guest:
        attacher = virtio_mem.VirtioMemAttacher(
            connection=libvirt_connection.LibvirtConnection(URI),
            shrink_timeout=timeout, poll_interval=0.01)
        # Plugged empty: each cycle then times a grow and a shrink.
        attacher.attach(guest.uuid, lease, [node], mib, requested_mib=0)
        per_512 = 512.0 / mib
        for _ in range(cycles):
            start = time.monotonic()
            attacher.resize(guest.uuid, lease, mib)
            _wait_qemu(guest.domain, alias, mib * 1024, timeout)
            grows.append((time.monotonic() - start) * per_512)
            _wait_current(guest.domain, alias, mib * 1024, timeout)
            grows_libvirt.append((time.monotonic() - start) * per_512)
            start = time.monotonic()
            shrinker = threading.Thread(
                target=attacher.resize, args=(guest.uuid, lease, 0))
            shrinker.start()
            _wait_qemu(guest.domain, alias, 0, timeout)
            shrinks.append((time.monotonic() - start) * per_512)
            shrinker.join()
            shrinks_libvirt.append((time.monotonic() - start) * per_512)
    load_end = os.getloadavg()[0]
    conn.close()

    def ms(seconds):
        return seconds * 1000.0

    grow_p50 = ms(statistics.median(grows))
    shrink_p50 = ms(statistics.median(shrinks))
    for name, values in (('grow', grows), ('shrink', shrinks),
                         ('grow_libvirt', grows_libvirt),
                         ('shrink_libvirt', shrinks_libvirt)):
        print('%-14s per 512 MiB: p50 %5.0f ms  p99 %5.0f ms  (%s)' % (
            name, ms(statistics.median(values)), ms(percentile(values, 99)),
            ' '.join('%.0f' % ms(v) for v in values)))
    ok = grow_p50 <= GROW_TARGET_MS and shrink_p50 <= SHRINK_TARGET_MS
    print('virtio_mem: grow_p50_ms_per_512mib=%.0f '
          'grow_p99_ms_per_512mib=%.0f shrink_p50_ms_per_512mib=%.0f '
          'shrink_p99_ms_per_512mib=%.0f grow_libvirt_p50_ms=%.0f '
          'shrink_libvirt_p50_ms=%.0f mib=%d cycles=%d load=%.2f '
          'target=%s' % (
              grow_p50, ms(percentile(grows, 99)), shrink_p50,
              ms(percentile(shrinks, 99)),
              ms(statistics.median(grows_libvirt)),
              ms(statistics.median(shrinks_libvirt)), mib, cycles,
              max(load_start, load_end), 'ok' if ok else 'over'))
    return 0 if ok else 1


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--cycles', type=int, default=10)
    parser.add_argument('--mib', type=int, default=512,
                        help='size of the device (a multiple of 2)')
    parser.add_argument('--node', type=int, default=0,
                        help='host NUMA node the device is pinned to')
    parser.add_argument('--timeout', type=int, default=120)
    args = parser.parse_args()
    return run(args.cycles, args.mib, args.node, args.timeout)


if __name__ == '__main__':
    sys.exit(main())
