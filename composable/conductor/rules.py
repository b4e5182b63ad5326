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

"""The rules a change of a lease must keep, each written once.

The conductor checks them on the lease read under its reservation
(composable.conductor.task), where nothing else changes the lease
meanwhile. The API checks only the shape of a request and that what it
names exists, and answers with the refusal raised here: Invalid (400)
for a request that can never succeed as given, Conflict or InvalidState
(409) for one that the lease or the host it names stands against now.
"""

from composable.common import exception
from composable.common import media
from composable.common import sriov
from composable.common import states
from composable.common import utils


def check_end(lease, end_at, now=None):
    """``end_at`` (naive UTC, or None for no end) may become the end of
    ``lease``: the lease is not being released, and the end is ahead of
    now and after the lease's start."""
    if lease.status in (states.RELEASING, states.RELEASED):
        raise exception.InvalidState(lease=lease.uuid, status=lease.status,
                                     action='changing end_at')
    if end_at is None:
        return
    if end_at <= (now or utils.utcnow()):
        raise exception.Invalid(
            "Invalid input for field 'end_at': %s is not in the future"
            % utils.isotime(end_at))
    if lease.start_at is not None and end_at <= lease.start_at:
        raise exception.Invalid(
            "Invalid input for field 'end_at': it must be after start_at")


# ------------------------------------------------------------------ bind

def check_attach_mode(mode, instance_uuid):
    """A lease attached in guest or virtio-mem mode is attached to a
    server: binding it so needs the server."""
    if mode in states.SERVER_ATTACH_MODES and not instance_uuid:
        raise exception.Invalid(
            "Invalid input for field 'server': attach_mode %s attaches to "
            "a server; give its UUID" % mode)


def attach_medium_refusal(mode, pool):
    """Why memory of ``pool`` (None: a lease without memory) cannot be
    attached in ``mode``, or None. CXL memory is onlined on the host as a
    NUMA node: it goes to the host or, through virtio-mem, into a guest,
    never as a disk. virtio-mem plugs host memory into a guest: it needs
    memory that the host has, a CXL pool's."""
    cxl = pool is not None and media.is_cxl(pool)
    if mode == states.ATTACH_GUEST and cxl:
        return ("Invalid input for field 'attach_mode': CXL memory (pool "
                "%s) is onlined on the host as a NUMA node: bind it in host "
                "mode, or in virtio-mem mode to a server" % pool.name)
    if mode == states.ATTACH_VIRTIO_MEM and not cxl:
        return ("Invalid input for field 'attach_mode': virtio-mem needs "
                "host memory (a CXL pool) to plug into the guest; %s. Use "
                "guest mode (swap disks) for network memory" % (
                    'pool %s holds network memory' % pool.name
                    if pool is not None else 'the lease holds no memory'))
    return None


def check_cxl_host_mode(lease, mode):
    """The lease's memory may be bound in ``mode`` (attach_medium_refusal
    of its memory pool)."""
    refusal = attach_medium_refusal(mode, lease.memory_pool)
    if refusal:
        raise exception.Invalid(refusal + ' (lease %s)' % lease.uuid)


def cxl_backend(pool):
    """The back end of the CXL fabric of ``pool``: ``local`` (devices
    wired to their hosts, nothing composed) or ``redfish`` (a fabric
    manager composes a chunk per lease and device); see
    composable.fabric.cxl."""
    fabric = getattr(pool, 'fabric', None)
    info = (getattr(fabric, 'driver_info', None) or {}) if fabric else {}
    return info.get('backend') or 'local'


def elastic_cxl_refusal(pool, attach_mode, elastic=None):
    """Why a lease of CXL pool ``pool`` attached in ``attach_mode`` cannot
    be elastic (``elastic``: its policy, whose min_mb and max_mb are
    checked too when given), or None. An elastic CXL lease grows and
    shrinks by whole chunks plugged into (and out of) its guest through
    virtio-mem, on devices wired to the host: a host-mode NUMA node has
    no one to give memory back on demand, and a fabric manager's chunk
    does not change size."""
    if attach_mode != states.ATTACH_VIRTIO_MEM:
        return ("Invalid input for field 'attach_mode': elastic CXL "
                "leases resize through virtio-mem: give attach_mode "
                "virtio-mem (the lease is then bound to a server), not %s "
                "(pool %s)" % (attach_mode or states.ATTACH_HOST,
                               pool.name))
    backend = cxl_backend(pool)
    if backend != 'local':
        return ("Invalid input for field 'elastic': pool %s is on fabric "
                "%s, whose CXL back end %s composes memory: its fabric "
                "manager makes one chunk per lease and device, a Redfish "
                "MemoryChunk does not change size, and dynamic capacity "
                "devices are not supported by Linux yet, so a lease of it "
                "cannot grow or shrink. Use a pool of a fabric with back "
                "end local, or a lease of fixed size" % (
                    pool.name, pool.fabric.name, backend))
    step = pool.step_size or media.CXL_GRANULE_MB
    for name in ('min_mb', 'max_mb'):
        value = (elastic or {}).get(name)
        if value is not None and int(value) % step:
            return ("Invalid input for field 'elastic/%s': pool %s gives "
                    "CXL memory in whole chunks of %d MiB; %d is not a "
                    "multiple of it (%d or %d)" % (
                        name, pool.name, step, value,
                        value // step * step or step,
                        (value // step + 1) * step))
    return None


def check_elastic_cxl_mode(lease, mode):
    """An elastic lease of CXL memory is bound in virtio-mem mode only
    (elastic_cxl_refusal)."""
    pool = lease.memory_pool
    if not lease.elastic or pool is None or not media.is_cxl(pool):
        return
    if mode != states.ATTACH_VIRTIO_MEM:
        raise exception.Invalid(
            elastic_cxl_refusal(pool, mode) + ' (lease %s)' % lease.uuid)


def check_fabric(lease, host):
    """The host is on the fabric of the lease's pools (a lease that holds
    nothing yet binds anywhere)."""
    fabrics = {pool.fabric_id: pool.fabric.name
               for pool in (lease.memory_pool, lease.device_pool)
               if pool is not None}
    if fabrics and host.fabric_id not in fabrics:
        raise exception.Conflict(
            reason='host %s is on fabric %s, but the resources of lease %s '
                   'are on fabric %s; bind it to a host of that fabric'
                   % (host.name, host.fabric.name, lease.uuid,
                      ', '.join(sorted(fabrics.values()))))


def sriov_host_refusal(lease, host, pool=None):
    """Why ``lease`` may not be bound to ``host`` as it holds a virtual
    function of the SR-IOV pool ``pool`` (default: the lease's device
    pool), which lives on the host of its physical function only; None
    when it may."""
    pool = pool if pool is not None else lease.device_pool
    if (pool is None or not sriov.is_sriov_pool(pool) or
            pool.sriov_host_id == host.id):
        return None
    return ('lease %s holds a virtual function of %s on host %s (pool %s); '
            'it can be bound to that host only, not to %s'
            % (lease.uuid, pool.sriov_pf_address, pool.sriov_host.name,
               pool.name, host.name))


def check_sriov_host(lease, host):
    """See sriov_host_refusal."""
    refusal = sriov_host_refusal(lease, host)
    if refusal:
        raise exception.Conflict(reason=refusal)


# ------------------------------------------------------------ unbind

def check_cxl_unbind(lease, host_name, inventory, used):
    """Taking the CXL memory of ``lease`` off compute node ``host_name``
    leaves room for what instances hold of its MEMORY_MB: ``inventory``
    is that inventory in Placement (total, reserved, allocation_ratio),
    ``used`` its usage. Placement's capacity is (total - reserved) x
    allocation_ratio; without the lease's memory_mb the usage must still
    fit it, or the unbind would take memory that running guests use."""
    total = int(inventory['total'])
    reserved = int(inventory.get('reserved') or 0)
    ratio = float(inventory.get('allocation_ratio') or 1.0)
    size = int(lease.memory_mb or 0)
    # Below 0 when Placement never counted the lease (a bind Placement
    # missed): nothing remains, and only an unused node lets it go.
    remaining = max((total - size - reserved) * ratio, 0.0)
    if used <= remaining:
        return
    raise exception.HostMemoryInUse(
        reason='lease %(lease)s gives compute node %(host)s %(size)d MiB '
               'of CXL memory that instances need: they use %(used)d MiB '
               'of its MEMORY_MB (total %(total)d MiB, reserved '
               '%(reserved)d MiB, allocation ratio %(ratio)g), and without '
               'the lease it would offer %(remaining)d MiB; stop or move '
               'instances holding at least %(short)d MiB there, then '
               'unbind it again' % {
                   'lease': lease.uuid, 'host': host_name, 'size': size,
                   'used': used, 'total': total, 'reserved': reserved,
                   'ratio': ratio, 'remaining': int(remaining),
                   'short': used - int(remaining)})
