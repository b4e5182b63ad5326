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

"""virtio-mem mode for real: the compute agent's endpoint plugs the CXL
memory of a lease into a running guest of the system libvirtd (QEMU TCG)
as a virtio-mem device, grows and shrinks it, grows and shrinks an
elastic lease (a device as large as its max_mb) by chunks, plugs it again
through the libvirt hook server when the domain starts again, and waits
for a guest that keeps its memory (its virtio_mem driver unloaded) and
then fails without unplugging anything or giving back any region.

Real: libvirtd and QEMU (Debian 12: QEMU 7.2, libvirt 9), the guest
(the machine's cloud kernel with its virtio_mem module, memory hot-plugged
online movable), the agent's endpoint, back ends, virtio-mem attacher and
hook server, and the memory the guest sees (MemTotal, read through its
guest agent).

FAKES: this machine has no CXL memory device, so the CXL side runs on the
emulated kernel sysfs of tests/unit/agent/compute_node/fake_cxl.py, set to give
the regions' memory NUMA node 0, a node the host has: the virtio-mem
device's backend is pinned (``<nodemask>``) to the node the CXL layer
reports, as it would be to the CXL node on a CXL host. The conductor the
hook server asks is a fake too (FakeConductor), which does what the bind
and unbind flows ask of the agent: attach_memory and detach_memory.
"""

import re
import time
import uuid

import pytest

from composable.agent.compute_node import cxl_memory
from composable.agent.compute_node import libvirt_connection
from composable.agent.compute_node import parts as parts_mod
from composable.agent.compute_node import virtio_mem
from composable.agent import endpoints
from composable.agent import hook_server as hook_server_mod
from composable import privsep
from composable.privsep import cxl as priv_cxl
from tests.functional.compute_node import dataplane
from tests.functional.guest import build
from tests.functional.guest import programs
from tests.unit.agent.compute_node import fake_cxl

MIB = fake_cxl.MIB
BOOT_MIB = 256
CHUNK_MB = 256
LEASE_MB = 256
# Generous: TCG on a busy machine.
GUEST_TIMEOUT = 120
BOOT_TIMEOUT = 300
CMDLINE = build.KERNEL_CMDLINE + ' memhp_default_state=online_movable'


def _image():
    try:
        return build.build(extra_modules=('virtio_mem',), cmdline=CMDLINE)
    except build.GuestUnavailable as exc:
        dataplane.unavailable(str(exc))


@pytest.fixture(scope='module')
def vm(libvirt_conn):
    """The tiny guest with room for memory devices: <maxMemory> and one
    guest NUMA cell. QEMU 7.2 cannot unplug a virtio-mem device, so each
    test's lease leaves an empty one behind, which still counts against
    <maxMemory> and its slots: room for the 256 and 512 MiB devices the
    tests plug before the restart test starts the domain anew, and for
    those after it."""
    image = _image()
    with build.running_guest(libvirt_conn, image=image, memory_mib=BOOT_MIB,
                             boot_timeout=BOOT_TIMEOUT,
                             max_memory_mib=BOOT_MIB + 4 * LEASE_MB,
                             memory_slots=4,
                             autoswap=False) as guest:
        line = guest.wait_for_line('^module virtio_mem ', 30)
        assert line.string.endswith('loaded'), line.string
        yield guest


@pytest.fixture
def kernel(tmp_path, monkeypatch):
    """FAKE CXL sysfs: one device of 512 MiB (two chunks), regions on
    node 0."""
    k = fake_cxl.FakeCxlKernel(
        tmp_path / 'host', devices=[('0x5a5a0001', 2 * LEASE_MB * MIB,
                                     True)],
        block_size=128 * MIB, node=0)
    privsep.sys_admin_pctxt.set_client_mode(False)
    monkeypatch.setattr(priv_cxl, 'ROOT', k.root)
    monkeypatch.setattr(priv_cxl, 'WRITER', k.write)
    monkeypatch.setattr(priv_cxl, 'BOUNDED_WRITER', k.bounded_write)
    yield k
    privsep.sys_admin_pctxt.set_client_mode(True)


@pytest.fixture
def compute(kernel, tmp_path):
    """The compute agent's endpoint: real libvirt, FAKE CXL kernel."""
    memory = cxl_memory.CxlHostMemory(
        ops=priv_cxl, state_file=str(tmp_path / 'cxl.json'),
        offline_interval=0)
    memory.start()
    connection = libvirt_connection.LibvirtConnection(dataplane.LIBVIRT_URI)
    attacher = virtio_mem.VirtioMemAttacher(connection=connection,
                                            shrink_timeout=GUEST_TIMEOUT)
    parts = parts_mod.ComputeNodeParts(
        'compute-1', cxl_memory=memory, connection=connection,
        virtio_mem_attacher=attacher)
    return endpoints.ComputeNodeEndpoint('compute-1', ['compute_node'],
                                         parts)


def _chunks(lease_uuid, n=LEASE_MB // CHUNK_MB, first=0):
    return [{'uuid': '%s-chunk-%d' % (lease_uuid[:8], i), 'index': i,
             'size_mb': CHUNK_MB, 'lease_uuid': lease_uuid, 'medium': 'cxl',
             'device': 'cmm0', 'locator': {'serial': '0x5a5a0001'}}
            for i in range(first, first + n)]


def _mem_total_mib(guest):
    shell = programs.GuestShell(guest.domain)
    status, out, err = shell.run('/bin/sh', '-c',
                                 'grep ^MemTotal: /proc/meminfo')
    assert status == 0, err
    return int(re.search(r'(\d+)', out).group(1)) // 1024


def _wait(predicate, what, timeout=GUEST_TIMEOUT):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, 'no %s within %ds' % (what,
                                                                  timeout)
        time.sleep(0.2)


def _device(guest, lease_uuid):
    return virtio_mem.DomainMemory(guest.domain.XMLDesc(0)).devices.get(
        virtio_mem.device_alias(lease_uuid))


@pytest.fixture
def lease(vm, compute):
    """A lease's uuid; whatever it left in the guest is emptied after the
    test, and its region given back (by the endpoint, as an unbind)."""
    lease_uuid = str(uuid.uuid4())
    yield lease_uuid
    try:
        programs.GuestShell(vm.domain).sh(
            'rm -f /mnt/fill; umount /mnt 2>/dev/null; true')
    except Exception:
        pass  # a guest that is not running has nothing to free
    try:
        # Every chunk a test may have given the lease: an unbind.
        compute.detach_memory(None, {'uuid': lease_uuid},
                              _chunks(lease_uuid, 2), 'virtio-mem', vm.uuid)
    except Exception:
        pass


def test_grow_and_shrink(vm, compute, kernel, lease):
    before = _mem_total_mib(vm)
    started = time.monotonic()
    details = compute.attach_memory(None, {'uuid': lease}, _chunks(lease),
                                    'virtio-mem', vm.uuid)
    assert {d['mode'] for d in details.values()} == {'virtio-mem'}
    assert {d['numa_node'] for d in details.values()} == {0}
    device = _device(vm, lease)
    assert device.nodemask == '0'
    assert device.size_kib == LEASE_MB * 1024
    # The guest plugs it all and onlines it: MemTotal grows by the lease.
    _wait(lambda: (_device(vm, lease).current_kib or 0) ==
          LEASE_MB * 1024, 'plugged memory')
    grown = _wait(lambda: _mem_total_mib(vm) >= before + LEASE_MB - 1 and
                  _mem_total_mib(vm), 'larger MemTotal')
    grow_secs = time.monotonic() - started
    assert grown - before == pytest.approx(LEASE_MB, abs=1)
    # Shrink by half, then grow back.
    parts = compute._parts
    assert parts.virtio_mem.resize({'uuid': lease}, vm.uuid,
                                   LEASE_MB // 2) == LEASE_MB // 2
    _wait(lambda: _mem_total_mib(vm) <= before + LEASE_MB // 2 + 1,
          'smaller MemTotal')
    parts.virtio_mem.resize({'uuid': lease}, vm.uuid, LEASE_MB)
    _wait(lambda: _mem_total_mib(vm) >= before + LEASE_MB - 1,
          'MemTotal grown again')
    # Unbind: the guest gives it all back, then the host region goes.
    assert kernel.regions
    compute.detach_memory(None, {'uuid': lease}, _chunks(lease),
                          'virtio-mem', vm.uuid)
    device = _device(vm, lease)
    # QEMU 7.2 cannot unplug a virtio-mem device: it stays, empty.
    assert device is None or device.current_kib == 0
    assert _mem_total_mib(vm) <= before + 1
    assert not kernel.regions
    print('bind and grow of %d MiB: %.1f s' % (LEASE_MB, grow_secs))


def test_an_elastic_lease_grows_and_shrinks_by_chunks(vm, compute, kernel,
                                                      lease):
    """The lease's max_mb sizes the device (guest address space only);
    a chunk attached later grows what the guest is asked for, a partial
    detach shrinks it (the guest gives the memory back first) and gives
    back that chunk's region only."""
    # A max_mb the domain's <maxMemory> cannot take: refused up front,
    # naming the sizes; the region made for it goes back.
    with pytest.raises(virtio_mem.NoMaxMemory) as refused:
        compute.attach_memory(None, {'uuid': lease, 'max_mb': 65536},
                              _chunks(lease), 'virtio-mem', vm.uuid)
    assert ('cannot take the 65536 MiB virtio-mem device of lease %s'
            % lease) in refused.value.message
    assert 'Give the domain a <maxMemory> at least' in \
        refused.value.message
    assert _device(vm, lease) is None
    assert not kernel.regions

    before = _mem_total_mib(vm)
    view = {'uuid': lease, 'max_mb': 2 * CHUNK_MB}
    [first] = _chunks(lease)
    [second] = _chunks(lease, 1, first=1)
    compute.attach_memory(None, view, [first], 'virtio-mem', vm.uuid)
    device = _device(vm, lease)
    assert device.size_kib == 2 * CHUNK_MB * 1024
    assert device.requested_kib == CHUNK_MB * 1024
    _wait(lambda: (_device(vm, lease).current_kib or 0) == CHUNK_MB * 1024,
          'plugged memory')
    # Grow: the second chunk's region, then the guest is asked for more.
    grown = compute.attach_memory(None, view, [second], 'virtio-mem',
                                  vm.uuid, partial=True)
    assert list(grown) == [second['uuid']]
    assert grown[second['uuid']]['requested_mb'] == 2 * CHUNK_MB
    assert len(kernel.regions) == 2
    _wait(lambda: (_device(vm, lease).current_kib or 0) ==
          2 * CHUNK_MB * 1024, 'the grown device plugged')
    _wait(lambda: _mem_total_mib(vm) >= before + 2 * CHUNK_MB - 1,
          'MemTotal grown by both chunks')
    # Repeated (a conductor retry): nothing more.
    compute.attach_memory(None, view, [second], 'virtio-mem', vm.uuid,
                          partial=True)
    assert _device(vm, lease).requested_kib == 2 * CHUNK_MB * 1024
    assert len(kernel.regions) == 2
    # Shrink: the guest gives the second chunk's size back, then its
    # region goes; the device and the first region stay.
    compute.detach_memory(None, view, [second], 'virtio-mem', vm.uuid,
                          partial=True)
    device = _device(vm, lease)
    assert device.requested_kib == device.current_kib == CHUNK_MB * 1024
    assert len(kernel.regions) == 1
    assert sorted(compute._parts.attachments.memory[lease]) == [
        first['uuid']]
    _wait(lambda: _mem_total_mib(vm) <= before + CHUNK_MB + 1,
          'MemTotal shrunk by one chunk')


class FakeConductor(object):
    """FAKE composable-conductor for the hook server: what its bind and
    unbind flows ask of this agent for one lease in virtio-mem mode."""

    def __init__(self, endpoint, lease_uuid):
        self.endpoint = endpoint
        self.lease_uuid = lease_uuid
        self.faults = []

    def _answer(self):
        return {'ok': True, 'leases': [{'uuid': self.lease_uuid}]}

    def prepare_instance(self, context, instance, host, **kwargs):
        self.endpoint.attach_memory(context, {'uuid': self.lease_uuid},
                                    _chunks(self.lease_uuid), 'virtio-mem',
                                    instance)
        return self._answer()

    def release_instance(self, context, instance, host, **kwargs):
        if kwargs.get('fault'):
            self.faults.append(kwargs['fault'])
        self.endpoint.detach_memory(context, {'uuid': self.lease_uuid},
                                    _chunks(self.lease_uuid), 'virtio-mem',
                                    instance)
        return self._answer()

    def instance_status(self, context, instance, host):
        return []


def test_a_restart_plugs_the_device_again(vm, compute, kernel, lease):
    """Stopped: the hook's release gives the region back (QEMU and its
    device are gone). Started again: prepare makes the region, the
    device waits for ``started``, which plugs it into the new QEMU."""
    conductor = FakeConductor(compute, lease)
    hook = hook_server_mod.HookServer(compute._parts, path='/nonexistent',
                                      conductor=conductor)
    compute.hook_server = hook
    hook.cache.set(vm.uuid, [lease])
    hook._loaded.set()
    try:
        compute.attach_memory(None, {'uuid': lease}, _chunks(lease),
                              'virtio-mem', vm.uuid)
        _wait(lambda: (_device(vm, lease).current_kib or 0) ==
              LEASE_MB * 1024, 'plugged memory')
        vm.domain.destroy()
        answer = hook.handle({'op': 'stopped', 'instance': vm.uuid})
        assert answer['ok'], answer
        assert not kernel.regions
        answer = hook.handle({'op': 'prepare', 'instance': vm.uuid})
        assert answer['ok'], answer
        assert kernel.regions
        # QEMU starts the serial log afresh: its lines are this boot's.
        vm.domain.create()
        vm.wait_for_line('^booted$', BOOT_TIMEOUT, 'its boot marker')
        build.wait_guest_agent(vm.domain, BOOT_TIMEOUT)
        before = _mem_total_mib(vm)
        assert _device(vm, lease) is None
        assert hook.handle({'op': 'started', 'instance': vm.uuid})['ok']
        _wait(lambda: _device(vm, lease) is not None, 'the device again')
        _wait(lambda: _mem_total_mib(vm) >= before + LEASE_MB - 1,
              'MemTotal grown after the restart')
        assert conductor.faults == []
    finally:
        hook._stopping.set()
        for thread in hook._threads:
            thread.join(GUEST_TIMEOUT)
        compute.hook_server = None


def test_guest_that_does_not_give_memory_back(vm, compute, kernel, lease):
    """The guest's virtio_mem driver is unloaded: nothing in the guest
    answers the device any more, so it keeps what it has. The unbind
    waits its bounded time, fails naming the sizes, unplugs nothing, and
    the host keeps its region. The same for a partial detach of an
    elastic lease: the guest keeps its size and the host both regions.
    (Last in the module: the guest cannot take memory again until it
    restarts.)"""
    compute._parts.virtio_mem_attacher.shrink_timeout = 5
    view = {'uuid': lease, 'max_mb': 2 * CHUNK_MB}
    [first] = _chunks(lease)
    [second] = _chunks(lease, 1, first=1)
    compute.attach_memory(None, view, [first], 'virtio-mem', vm.uuid)
    compute.attach_memory(None, view, [second], 'virtio-mem', vm.uuid,
                          partial=True)
    size_mb = 2 * CHUNK_MB
    _wait(lambda: (_device(vm, lease).current_kib or 0) ==
          size_mb * 1024, 'plugged memory')
    before = _mem_total_mib(vm)
    status, out, err = programs.GuestShell(vm.domain).sh(
        'rmmod virtio_mem', timeout=GUEST_TIMEOUT)
    assert status == 0, (out, err)
    regions = dict(kernel.regions)
    assert len(regions) == 2

    def kept_everything():
        device = _device(vm, lease)
        assert device.requested_kib == size_mb * 1024
        assert device.current_kib == size_mb * 1024
        assert _mem_total_mib(vm) == before
        assert kernel.regions.keys() == regions.keys()
        assert sorted(compute._parts.attachments.memory[lease]) == sorted(
            [first['uuid'], second['uuid']])

    with pytest.raises(virtio_mem.ShrinkRefused) as refused:
        compute.detach_memory(None, view, [second], 'virtio-mem', vm.uuid,
                              partial=True)
    assert ('it still has %d MiB of it, %d MiB were requested' % (
        size_mb, CHUNK_MB)) in refused.value.message
    kept_everything()

    started = time.monotonic()
    with pytest.raises(virtio_mem.ShrinkRefused) as refused:
        compute.detach_memory(None, view, [first, second], 'virtio-mem',
                              vm.uuid)
    waited = time.monotonic() - started
    assert 5 <= waited < 5 + 60
    message = refused.value.message
    assert 'within 5 s' in message
    assert ('it still has %d MiB of it, 0 MiB were requested' % size_mb
            in message), message
    assert 'Nothing was unplugged by force' in message
    # Asked for all of it again; the guest has it all; the device and
    # the host regions stay.
    kept_everything()
