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

"""How much of each memory lease bound to this compute node is in use.

Leased network memory is swap, so its use is the swap used on the
lease's extents:

host mode
    the lease's swap devices in this host's /proc/swaps (one read for
    all leases);
guest mode
    the same, read inside the guest by its QEMU guest agent (one
    ``guest-exec`` per guest, for all of its leases; disks are matched by
    their serial).

virtio-mem mode (CXL memory plugged into the guest as RAM) has no swap
to measure: a guest does not say which of its pages sit on which memory.
Its use is modelled instead as the part of the guest's used memory that
its own base memory cannot hold. The guest's ``/proc/meminfo`` is read by
the same ``guest-exec`` as its swap (so still one per guest) and the
memory the device has plugged now, ``plugged``, is the ``<current>`` of
the lease's device in the live domain XML::

    used  = MemTotal - MemAvailable      what the guest uses
    base  = MemTotal - plugged           the guest's own memory
    sample: used_mb = clamp(used - base, 0, plugged)
            size_mb = plugged

So a guest whose workload fits in its base memory uses none of the lease
(the lease could shrink), one that needs all it has uses all of it (the
lease could grow). A guest with several such leases has one base: the
part beyond it is shared out over its leases by their plugged sizes. A
guest that shows no MemTotal (an old agent script) or a device that is
not plugged is left out of the report.

Every ``[compute_node]usage_report_interval`` seconds the samples of all
leases go to the conductor in one cast (``report_lease_usage``), which
keeps the history and feeds elastic resizing. Guests are asked in
parallel and waited for at most ``[compute_node]usage_sample_timeout``
seconds: a guest that does not answer in time (hung, no agent) is left
out of that report, with a warning, and not asked again while its
question is still open, so one guest never holds up the others.

An agent that restarts has its host's swap and its guests' disks and
virtio-mem devices still plugged but no record of them: before its first
report it asks the conductor which host-mode leases are bound to its host
(with what it answered when it attached them; those whose swap is still
on are kept) and which guest-mode and virtio-mem leases are bound to the
running guests of its host, and reports them as before.

A sample: ``{'lease_uuid', 'taken_at' (ISO 8601, UTC), 'used_mb',
'size_mb'}``; ``size_mb`` is what the kernel has as swap on the lease's
extents (a swap area's size plus its header page), or for virtio-mem
what its device has plugged.

SimulatedUsageSampler reports made-up use instead, for the simulated
memory of the noop exporter (``[compute_node]simulated_usage``, which
composable-all's demo turns on): a workload per lease that rises and falls
over SIMULATED_PERIOD seconds, so the demo shows usage history and elastic
leases growing and shrinking. It samples network and CXL leases alike,
virtio-mem ones included (their size is that of their chunks). Its
samples say ``'simulated': True`` and its start is logged as SIMULATED.
"""

from concurrent import futures
import datetime
import math
import os
import threading
import time
import zlib

from oslo_log import log as logging

from composable.agent.compute_node import host_swap
from composable.agent.compute_node import libvirt_guest
from composable.common import context as composable_context
from composable.common import states
from composable import conf

CONF = conf.CONF
LOG = logging.getLogger(__name__)

# The header page mkswap writes is not part of the swap area's size in
# /proc/swaps, but it is part of the extent.
SWAP_HEADER_KB = 4
GUEST_WORKERS = 4


def _mb_up(kb):
    return (kb + 1023) // 1024


def _mb_nearest(kb):
    return (kb + 512) // 1024


def utc_now_iso():
    return datetime.datetime.now(datetime.timezone.utc).strftime(
        '%Y-%m-%dT%H:%M:%S.%fZ')


def sample_of(lease_uuid, entries, taken_at):
    """A sample from the swap areas (host_swap.SwapEntry-like tuples:
    filename, type, size_kb, used_kb, priority) of a lease's extents."""
    return {'lease_uuid': lease_uuid, 'taken_at': taken_at,
            'used_mb': _mb_nearest(sum(e[3] for e in entries)),
            'size_mb': sum(_mb_up(e[2] + SWAP_HEADER_KB) for e in entries)}


def vmem_samples(instance, meminfo, plugged, taken_at):
    """The samples of a guest's virtio-mem leases (see the module's doc):
    ``meminfo`` has ``mem_total_kb`` and ``mem_available_kb``,
    ``plugged`` is {lease uuid: KiB its device has plugged, or None}."""
    plugged = {lease: kib for lease, kib in plugged.items()
               if kib is not None}
    if not plugged:
        return []
    if meminfo.mem_total_kb is None:
        LOG.debug('The guest of instance %s did not say its MemTotal; its '
                  'virtio-mem leases are left out', instance)
        return []
    total_plugged = sum(plugged.values())
    used = meminfo.mem_total_kb - meminfo.mem_available_kb
    base = meminfo.mem_total_kb - total_plugged
    beyond = min(max(used - base, 0), total_plugged)
    samples = []
    for lease_uuid, kib in sorted(plugged.items()):
        share = beyond * kib // total_plugged if total_plugged else 0
        samples.append({'lease_uuid': lease_uuid, 'taken_at': taken_at,
                        'used_mb': _mb_nearest(share),
                        'size_mb': _mb_nearest(kib)})
    return samples


class UsageSampler(object):
    """Samples the memory leases an AgentManager has attached, and
    reports them to the conductor.

    ``conductor`` (a ConductorAPI), ``guest_attacher``, ``proc_swaps``
    and the interval and timeout can be injected; by default they come
    from the agent and the [compute_node] options.
    """

    def __init__(self, agent, conductor=None, interval=None, timeout=None,
                 proc_swaps=host_swap.PROC_SWAPS, clock=utc_now_iso):
        self.agent = agent
        self._conductor = conductor
        self.interval = (interval if interval is not None
                         else CONF.compute_node.usage_report_interval)
        self.timeout = (timeout if timeout is not None
                        else CONF.compute_node.usage_sample_timeout)
        self.proc_swaps = proc_swaps
        self._clock = clock
        self._pool = futures.ThreadPoolExecutor(
            max_workers=GUEST_WORKERS, thread_name_prefix='usage-guest')
        # instance uuid -> the future of the read still under way.
        self._asking = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread = None
        self.reports = 0
        self.recovered = False

    @property
    def conductor(self):
        if self._conductor is None:
            from composable.conductor import rpcapi
            self._conductor = rpcapi.ConductorAPI()
        return self._conductor

    # ------------------------------------------------------------- life

    def start(self):
        if self.interval <= 0:
            LOG.info('[compute_node]usage_report_interval is 0: the use '
                     'of leased memory on %s is not reported',
                     self.agent.host)
            return False
        self._stopping.clear()
        self._thread = threading.Thread(target=self._loop,
                                        name='usage-report', daemon=True)
        self._thread.start()
        return True

    def stop(self):
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(self.timeout + 5)
            self._thread = None
        self._pool.shutdown(wait=False)

    def _loop(self):
        while not self._stopping.wait(self.interval):
            if not self.recovered:
                self.recover()
            try:
                self.report()
            except Exception:
                LOG.exception('Could not report the use of leased memory '
                              'on %s', self.agent.host)

    def recover(self):
        """After a restart, learn the host-mode and guest-mode leases
        attached before it (AgentManager.recover_memory_leases); tried
        again at the next report while the conductor cannot be asked."""
        try:
            self.agent.recover_memory_leases(self.conductor)
        except Exception as exc:
            LOG.warning('Could not ask the conductor which memory leases '
                        'are bound to the guests of %(host)s (%(exc)s); '
                        'asking again at the next report',
                        {'host': self.agent.host, 'exc': exc})
            return False
        self.recovered = True
        return True

    # ---------------------------------------------------------- samples

    def report(self):
        """Sample every lease and cast the samples to the conductor;
        the samples sent."""
        samples = self.sample()
        if samples:
            self.conductor.report_lease_usage(
                composable_context.get_admin_context(), self.agent.host,
                samples)
            self.reports += 1
        return samples

    def sample(self):
        """One sample per memory lease attached here that could be
        read."""
        leases = self.agent.memory_leases()
        host_leases = {}
        # {instance: {lease uuid: details}}: guest-mode and virtio-mem
        # leases, both read in the guest.
        guests = {}
        vmem = set()
        for lease_uuid, (lease, details) in leases.items():
            mode = lease.get('attach_mode')
            if mode in (states.ATTACH_GUEST, states.ATTACH_VIRTIO_MEM):
                instance = lease.get('instance_uuid')
                if instance:
                    guests.setdefault(instance, {})[lease_uuid] = details
                    if mode == states.ATTACH_VIRTIO_MEM:
                        vmem.add(lease_uuid)
            else:
                host_leases[lease_uuid] = details
        samples = []
        if guests:
            asked = self._ask_guests(guests, vmem)
        if host_leases:
            samples.extend(self._host_samples(host_leases))
        if guests:
            samples.extend(self._guest_samples(guests, asked, vmem))
        return samples

    def _host_samples(self, leases):
        taken_at = self._clock()
        try:
            swaps = host_swap.read_swaps(self.proc_swaps)
        except OSError as exc:
            LOG.warning('Cannot read %(path)s for the use of leased '
                        'memory: %(exc)s', {'path': self.proc_swaps,
                                            'exc': exc})
            return []
        by_device = {}
        for entry in swaps:
            by_device[entry.filename] = entry
            by_device.setdefault(os.path.realpath(entry.filename), entry)
        samples = []
        for lease_uuid, details in sorted(leases.items()):
            entries = []
            for extent_details in details.values():
                device = (extent_details or {}).get('swap_device') or \
                    (extent_details or {}).get('device')
                if not device:
                    continue
                entry = by_device.get(device) or by_device.get(
                    os.path.realpath(device))
                if entry is not None:
                    entries.append(entry)
            if entries:
                samples.append(sample_of(lease_uuid, entries, taken_at))
            else:
                LOG.debug('Lease %s has no swap on this host to sample',
                          lease_uuid)
        return samples

    def _read_guest(self, instance, vmem_leases):
        """What the guest of ``instance`` says (GuestSwaps, or None when
        it does not run here) and {lease uuid: KiB its virtio-mem device
        has plugged, or None} of ``vmem_leases``."""
        swaps = self.agent.guest_attacher.guest_swaps(instance,
                                                      self.timeout)
        plugged = {}
        if swaps is not None and vmem_leases:
            attacher = self.agent.parts.virtio_mem_attacher
            for lease_uuid in vmem_leases:
                device = attacher.device(instance, lease_uuid)
                plugged[lease_uuid] = (None if device is None
                                       else device.current_kib or 0)
        return swaps, plugged

    def _ask_guests(self, guests, vmem=()):
        """Start a read of each guest's swap and memory, unless the last
        one is still under way; {instance uuid: future}."""
        asked = {}
        with self._lock:
            for instance in sorted(guests):
                running = self._asking.get(instance)
                if running is not None and not running.done():
                    LOG.warning('The guest of instance %(instance)s has '
                                'not answered the last usage sample yet; '
                                'its leases %(leases)s are left out of '
                                'this report',
                                {'instance': instance,
                                 'leases': ', '.join(sorted(
                                     guests[instance]))})
                    continue
                future = self._pool.submit(
                    self._read_guest, instance,
                    sorted(set(guests[instance]) & set(vmem)))
                self._asking[instance] = future
                asked[instance] = future
        return asked

    def _guest_samples(self, guests, asked, vmem=()):
        done, late = futures.wait(list(asked.values()),
                                  timeout=self.timeout)
        taken_at = self._clock()
        samples = []
        for instance, future in sorted(asked.items()):
            leases = guests[instance]
            if future in late:
                LOG.warning('The guest of instance %(instance)s did not '
                            'say within %(timeout)s s how much of its '
                            'leased memory is in use; leases %(leases)s '
                            'are left out of this report',
                            {'instance': instance, 'timeout': self.timeout,
                             'leases': ', '.join(sorted(leases))})
                continue
            with self._lock:
                if self._asking.get(instance) is future:
                    del self._asking[instance]
            try:
                swaps, plugged = future.result()
            except Exception as exc:
                LOG.warning('Could not read the swap of the guest of '
                            'instance %(instance)s for the use of leases '
                            '%(leases)s: %(exc)s',
                            {'instance': instance, 'exc': exc,
                             'leases': ', '.join(sorted(leases))})
                continue
            if swaps is None:
                continue  # not running here (any more)
            samples.extend(vmem_samples(instance, swaps, plugged, taken_at))
            for lease_uuid, details in sorted(leases.items()):
                if lease_uuid in vmem:
                    continue
                entries = [swaps.entry_of(libvirt_guest.disk_serial(e))
                           for e in details]
                entries = [e for e in entries if e is not None]
                if entries:
                    samples.append(sample_of(lease_uuid, entries, taken_at))
                else:
                    LOG.debug('The guest of instance %(instance)s does not '
                              'swap to lease %(lease)s (yet)',
                              {'instance': instance, 'lease': lease_uuid})
        return samples


#: Seconds one cycle of the simulated workload takes.
SIMULATED_PERIOD = 240
#: The simulated workload of a lease goes from this share of the size
#: the lease had when first attached...
SIMULATED_LOW = 0.25
#: ... up to this multiple of it: an elastic lease has to grow to hold
#: it, a fixed one is simply full at the top of the cycle.
SIMULATED_HIGH = 3.0
SIMULATED = 'SIMULATED usage'


def simulated_demand_mb(base_mb, lease_uuid, now):
    """The simulated workload's demand, in MiB, of a lease that was
    ``base_mb`` when first attached, at time ``now`` (seconds): a smooth
    wave from SIMULATED_LOW to SIMULATED_HIGH times ``base_mb`` over
    SIMULATED_PERIOD seconds, its phase set by the lease so that leases
    do not all peak together."""
    phase = (zlib.crc32(lease_uuid.encode('utf-8')) % 1000) / 1000.0
    position = (now / SIMULATED_PERIOD + phase) % 1.0
    wave = (1.0 - math.cos(2.0 * math.pi * position)) / 2.0  # 0..1
    share = SIMULATED_LOW + (SIMULATED_HIGH - SIMULATED_LOW) * wave
    return base_mb * share


class SimulatedUsageSampler(UsageSampler):
    """Reports a SIMULATED use of the memory leases attached by the noop
    exporter's simulation (nothing is attached, so nothing can be
    measured): ``min(size, simulated_demand_mb(...))`` per lease."""

    def __init__(self, agent, conductor=None, interval=None,
                 clock=utc_now_iso, now=time.time):
        super(SimulatedUsageSampler, self).__init__(
            agent, conductor=conductor, interval=interval, clock=clock)
        self._now = now
        # lease uuid -> its size when first sampled: the scale of its
        # simulated workload, which does not follow the lease's resizes.
        self._base = {}

    def start(self):
        started = super(SimulatedUsageSampler, self).start()
        if started:
            LOG.warning('%(sim)s: the use of leased memory reported by '
                        '%(host)s every %(interval)s s is made up '
                        '([compute_node]simulated_usage; leased memory is '
                        'simulated by the noop exporter)',
                        {'sim': SIMULATED, 'host': self.agent.host,
                         'interval': self.interval})
        return started

    def sample(self):
        leases = self.agent.memory_leases()
        taken_at = self._clock()
        now = self._now()
        samples = []
        for lease_uuid, (lease, details) in sorted(leases.items()):
            size = sum(int((d or {}).get('size_mb') or 0)
                       for d in details.values())
            if size <= 0:
                continue
            base = self._base.setdefault(lease_uuid, size)
            demand = simulated_demand_mb(base, lease_uuid, now)
            samples.append({'lease_uuid': lease_uuid, 'taken_at': taken_at,
                            'used_mb': int(min(size, round(demand))),
                            'size_mb': size, 'simulated': True})
        for gone in set(self._base) - set(leases):
            del self._base[gone]
        return samples
