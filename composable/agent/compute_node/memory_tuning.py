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

"""Host-mode memory: let a guest's cold pages go to the lease's swap.

A host-mode memory lease bound for a Nova instance becomes swap on the
compute node (composable.agent.compute_node.host_swap). That swap helps
the instance only if the kernel pushes the instance's own cold pages to it
instead of someone else's. libvirt's memory tuning does that: the
domain's ``soft_limit`` (cgroup v2 ``memory.high``; cgroup v1
``memory.soft_limit_in_bytes``) is lowered by the size of the instance's
host-mode leases, so the kernel reclaims the guest's pages above that
level (the cold ones first) to swap, where the lease's extents have the
highest priority.

The limit never drops below ``[compute_node]min_resident_percent`` of
the guest's memory: a guest squeezed to nothing would only thrash. When
the last lease of the instance goes, the limit is lifted again, before
swapoff, so the pages can come back to RAM first.

The limit is set on the live domain only: Nova regenerates the domain
definition at every hard reboot or move, and the libvirt hook binds the
leases (and sets the limit) again at every start.
"""

import threading

from oslo_log import log as logging

from composable import conf

try:
    import libvirt
except ImportError:  # pragma: no cover - checked where libvirt is used
    libvirt = None

CONF = conf.CONF
LOG = logging.getLogger(__name__)

# libvirt's VIR_DOMAIN_MEMORY_PARAM_UNLIMITED, in KiB.
UNLIMITED_KIB = 9007199254740991
VIR_DOMAIN_AFFECT_LIVE = 1


def soft_limit_kib(guest_kib, leased_mb, min_resident_percent):
    """The soft limit for a guest of ``guest_kib`` KiB whose host-mode
    leases hold ``leased_mb`` MiB of swap."""
    if leased_mb <= 0:
        return UNLIMITED_KIB
    floor = guest_kib * min_resident_percent // 100
    return max(guest_kib - leased_mb * 1024, floor)


class GuestMemoryTuner(object):
    """Keeps each instance's soft limit in line with its host-mode leases.

    ``domains`` finds a live domain by instance uuid:
    ``domains.domain(instance_uuid, missing_ok=True)`` (the guest-mode
    attacher has that). Thread-safe; what each instance holds is kept in
    memory, and set again by the next bind after an agent restart.
    """

    def __init__(self, domains, min_resident_percent=None):
        self._domains = domains
        self.min_resident_percent = (
            min_resident_percent if min_resident_percent is not None
            else CONF.compute_node.min_resident_percent)
        self._leased = {}
        self._lock = threading.Lock()

    def leased_mb(self, instance_uuid):
        with self._lock:
            return sum(self._leased.get(instance_uuid, {}).values())

    def apply(self, instance_uuid, lease_uuid, memory_mb):
        """Count ``memory_mb`` of lease ``lease_uuid`` for the instance and
        set its soft limit. Returns the limit set (KiB), or None when the
        instance has no live domain here or libvirt refused (logged: the
        swap works without it, only less aimed)."""
        with self._lock:
            self._leased.setdefault(instance_uuid, {})[lease_uuid] = (
                memory_mb)
            total = sum(self._leased[instance_uuid].values())
        return self._set(instance_uuid, total)

    def clear(self, instance_uuid, lease_uuid):
        """Stop counting the lease; the limit follows what is left (lifted
        when nothing is). Returns the limit set, or None."""
        with self._lock:
            held = self._leased.get(instance_uuid, {})
            held.pop(lease_uuid, None)
            total = sum(held.values())
            if not held:
                self._leased.pop(instance_uuid, None)
        return self._set(instance_uuid, total)

    def _set(self, instance_uuid, leased_mb):
        try:
            domain = self._domains.domain(instance_uuid, missing_ok=True)
            if domain is None:
                LOG.info('Instance %s has no live domain here; its memory '
                         'limit is set when it starts', instance_uuid)
                return None
            limit = soft_limit_kib(domain.maxMemory(), leased_mb,
                                   self.min_resident_percent)
            domain.setMemoryParameters({'soft_limit': limit},
                                       VIR_DOMAIN_AFFECT_LIVE)
        except Exception as exc:
            LOG.warning('Could not set the memory soft limit of instance '
                        '%(inst)s (%(err)s); its host-mode swap works, but '
                        'the kernel will not aim it at this guest\'s cold '
                        'pages', {'inst': instance_uuid, 'err': exc})
            return None
        LOG.info('Instance %(inst)s: memory soft limit %(limit)s '
                 '(%(mb)d MiB of host-mode leases)',
                 {'inst': instance_uuid,
                  'limit': ('unlimited' if limit == UNLIMITED_KIB
                            else '%d KiB' % limit), 'mb': leased_mb})
        return limit
