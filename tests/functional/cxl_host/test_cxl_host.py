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

"""The compute agent's CXL memory code against a real kernel's CXL
regions: Linux 6.12 in a TCG guest with two emulated CXL Type-3 memory
devices (tests/functional/cxl_host/host.py).

``CxlHostMemory`` runs here, in the test process, exactly as in the
agent; every call it makes to ``composable.privsep.cxl`` runs that
module's code in the guest, as root against the guest's sysfs. The
emulated part is the memory device itself (QEMU's cxl-type3): what a
real device would be.
"""

import json
import shutil
import tempfile
import time

import pytest

from composable.agent.compute_node import cxl_memory
from composable.common import exception
from tests.functional.compute_node import dataplane
from tests.functional.cxl_host import host
from tests.functional.guest import build

CHUNK_MB = 256
SECRET = b'the previous tenant\'s secret, 0123456789'
MIB = 1 << 20


class Killed(BaseException):
    """The agent's process dying at a chosen call (nothing after it in
    the process runs; what the guest's kernel did stays done)."""


class DiesAfter(object):
    """The guest's ops, but the process 'dies' once ``name`` returned."""

    def __init__(self, ops, name):
        self._ops = ops
        self._name = name

    def __getattr__(self, name):
        value = getattr(self._ops, name)
        if name != self._name:
            return value

        def call(*args):
            value(*args)
            raise Killed(name)
        return call


def serial(index):
    return hex(host.SERIALS[index])


def chunks(lease, n, device=0):
    return [{'uuid': '%s-chunk-%d' % (lease, i), 'index': i,
             'size_mb': CHUNK_MB, 'lease_uuid': lease, 'medium': 'cxl',
             'device': 'cxl-device-%d' % device,
             'locator': {'serial': serial(device)}}
            for i in range(n)]


def agent(ops, state_file):
    memory = cxl_memory.CxlHostMemory(
        ops=ops, state_file=state_file, offline_attempts=5,
        offline_interval=1, sanitize_timeout=300)
    memory.start()
    return memory


@pytest.fixture
def state_file(tmp_path):
    return str(tmp_path / 'cxl-regions.json')


@pytest.fixture
def guest(cxl_guest):
    """The guest, checked to hold no region before and after the test
    (a test that fails leaves none for the next either)."""
    ops = cxl_guest.ops
    assert _regions(ops) == [], 'a region was left before this test'
    try:
        yield cxl_guest
    finally:
        for region in _regions(ops):
            info = ops.region_info(region) or {}
            ops.offline_region(region)
            ops.release_dax(region)
            ops.destroy_region(region, (info.get('targets') or [None])[0],
                               ops.root_decoders()[0])
        for index in range(len(host.SERIALS)):
            ops.release_idle_decoders(ops.memdev_by_serial(serial(index)))


def _regions(ops):
    regions = set(ops.untargeted_regions())
    for index in range(len(host.SERIALS)):
        regions.update(ops.regions_of(ops.memdev_by_serial(serial(index))))
    return sorted(regions)


def _scratch_region(ops, index, size):
    """A region made directly on device ``index`` (no agent), its DAX
    device taken back to device_dax so the test can read the bytes (the
    kernel gives a new RAM region's DAX device to kmem by itself, and
    onlines its memory)."""
    made = ops.make_region(ops.memdev_by_serial(serial(index)), size)
    assert ops.offline_region(made['region']) == []
    dax = ops.release_dax(made['region'])
    assert dax and ops.dax_driver(dax) == 'device_dax'
    return made, dax


def _destroy(ops, made):
    ops.destroy_region(made['region'], made['decoder'],
                       made['root_decoder'])


def test_device_memory_outlives_a_region_unless_erased(guest):
    """The control for the scrub tests: bytes written through one region
    are read back through the next one on the same device capacity, so
    finding no secret later means the agent erased it."""
    ops = guest.ops
    made, dax = _scratch_region(ops, 1, CHUNK_MB * MIB)
    guest.call('dax_write', dax, 12345, SECRET.hex())
    _destroy(ops, made)
    made, dax = _scratch_region(ops, 1, CHUNK_MB * MIB)
    try:
        assert guest.call('dax_find', dax, SECRET.hex()) == 12345
    finally:
        _destroy(ops, made)


def test_bind_onlines_a_movable_node_and_unbind_sanitizes(guest,
                                                          state_file):
    ops = guest.ops
    memory = agent(ops, state_file)
    details = memory.attach({'uuid': 'lease-1'}, chunks('lease-1', 2))
    node = details['lease-1-chunk-0']['numa_node']
    region = details['lease-1-chunk-0']['region']
    assert node is not None and node > 0
    assert details['lease-1-chunk-1']['region'] == region
    # The host has the lease's memory as a CPU-less node, all of it
    # movable (the kernel onlined it as normal memory first).
    assert guest.call('node_memory_mib', node) == 2 * CHUNK_MB
    assert ops.node_cpus(node) == ''
    dax = ops.dax_of(region)
    blocks = ops.memory_blocks(dax)
    assert blocks and {ops.block_zone(b) for b in blocks} == {'Movable'}
    with open(state_file) as f:
        assert json.load(f)['regions']['lease-1/cxl-device-0']['step'] == \
            'online'

    # A tenant uses the memory and leaves its bytes in it.
    guest.call('numa_fill', node, 16 * MIB, SECRET.hex())
    memory.detach({'uuid': 'lease-1'}, chunks('lease-1', 2))
    assert guest.call('node_memory_mib', node) == 0
    assert _regions(ops) == []
    # The only region of the device: erased by the device's sanitize
    # (QEMU's Type-3 device has one).
    assert ops.can_sanitize(ops.memdev_by_serial(serial(0)))
    made, dax = _scratch_region(ops, 0, 2 * CHUNK_MB * MIB)
    try:
        assert guest.call('dax_find', dax, SECRET.hex()) == -1
    finally:
        _destroy(ops, made)

    # The capacity goes to the next lease.
    details = memory.attach({'uuid': 'lease-2'}, chunks('lease-2', 2))
    node = details['lease-2-chunk-0']['numa_node']
    assert guest.call('node_memory_mib', node) == 2 * CHUNK_MB
    memory.detach({'uuid': 'lease-2'}, chunks('lease-2', 2))
    assert _regions(ops) == []


def test_shared_device_is_overwritten_not_sanitized(guest, state_file):
    """Two leases on one device. Neither unbind can sanitize the device
    (the other region maps it): each overwrites its own region. The
    kernel frees a device's decoders last-made first, so the first
    lease's region, offline and erased, stays until the second one has
    gone; the second lease keeps its memory meanwhile."""
    ops = guest.ops
    memory = agent(ops, state_file)
    first = memory.attach({'uuid': 'lease-a'}, chunks('lease-a', 1, 1))
    second = memory.attach({'uuid': 'lease-b'}, chunks('lease-b', 1, 1))
    node_a = first['lease-a-chunk-0']['numa_node']
    node_b = second['lease-b-chunk-0']['numa_node']
    assert first['lease-a-chunk-0']['region'] != \
        second['lease-b-chunk-0']['region']
    # Linux gives every region of one CXL memory window the window's
    # NUMA node: two leases on one host share it.
    assert node_a == node_b
    assert guest.call('node_memory_mib', node_a) == 2 * CHUNK_MB
    guest.call('numa_fill', node_a, 16 * MIB, SECRET.hex())
    with pytest.raises(exception.DriverError) as error:
        memory.detach({'uuid': 'lease-a'}, chunks('lease-a', 1, 1))
    assert 'last-made first' in error.value.message
    assert guest.call('node_memory_mib', node_b) == CHUNK_MB
    with open(state_file) as f:
        assert json.load(f)['regions']['lease-a/cxl-device-1']['step'] == \
            'scrubbed'

    memory.detach({'uuid': 'lease-b'}, chunks('lease-b', 1, 1))
    memory.detach({'uuid': 'lease-a'}, chunks('lease-a', 1, 1))
    assert _regions(ops) == []
    made, dax = _scratch_region(ops, 1, 2 * CHUNK_MB * MIB)
    try:
        assert guest.call('dax_find', dax, SECRET.hex()) == -1
    finally:
        _destroy(ops, made)


@pytest.mark.parametrize('dies_after', ['make_region', 'online_region'])
def test_agent_killed_during_bind_is_undone_at_restart(guest, state_file,
                                                       dies_after):
    ops = guest.ops
    memory = agent(DiesAfter(ops, dies_after), state_file)
    with pytest.raises(Killed):
        memory.attach({'uuid': 'lease-k'}, chunks('lease-k', 1))
    assert len(_regions(ops)) == 1

    restarted = cxl_memory.CxlHostMemory(
        ops=ops, state_file=state_file, offline_attempts=5,
        offline_interval=1, sanitize_timeout=300)
    assert restarted.start() == {'lease-k/cxl-device-0': 'undone'}
    assert _regions(ops) == []
    # Nothing of the device is held: the whole of it can be bound.
    details = restarted.attach({'uuid': 'lease-k'}, chunks('lease-k', 2))
    assert guest.call('node_memory_mib',
                      details['lease-k-chunk-0']['numa_node']) == \
        2 * CHUNK_MB
    restarted.detach({'uuid': 'lease-k'}, chunks('lease-k', 2))
    assert _regions(ops) == []


def test_agent_killed_during_unbind_finishes_at_restart(guest, state_file):
    ops = guest.ops
    memory = agent(ops, state_file)
    details = memory.attach({'uuid': 'lease-u'}, chunks('lease-u', 1))
    node = details['lease-u-chunk-0']['numa_node']
    guest.call('numa_fill', node, 16 * MIB, SECRET.hex())
    dying = agent(DiesAfter(ops, 'offline_region'), state_file)
    with pytest.raises(Killed):
        dying.detach({'uuid': 'lease-u'}, chunks('lease-u', 1))

    restarted = agent(ops, state_file)
    assert guest.call('node_memory_mib', node) == 0
    assert _regions(ops) == []
    with open(state_file) as f:
        assert json.load(f)['regions'] == {}
    made, dax = _scratch_region(ops, 0, CHUNK_MB * MIB)
    try:
        assert guest.call('dax_find', dax, SECRET.hex()) == -1
    finally:
        _destroy(ops, made)
    assert restarted.records.regions == {}


def test_host_restart_puts_bound_memory_back_and_erases_the_rest(
        state_file):
    """The host restarts (its QEMU is stopped and started again) while
    the devices keep their memory (file-backed, as a pooled device stays
    powered). Lease a was bound; lease b's unbind was cut short by the
    restart. The agent's next start makes both regions again in their
    first order: a is online again, b is erased and given back; the
    device's untouched capacity shows the bytes do outlive the restart."""
    try:
        image = host.build_image()
    except host.CxlHostUnavailable as exc:
        dataplane.unavailable(str(exc))
    # The devices' memory files (up to 2 x 512 MiB once sanitized) go
    # whatever happens.
    memory_dir = tempfile.mkdtemp(prefix='cxl-device-memory-',
                                  dir=build.cache_dir())
    try:
        _restart_host(image, memory_dir, state_file)
    finally:
        shutil.rmtree(memory_dir, ignore_errors=True)


def _restart_host(image, memory_dir, state_file):
    control = b'written before the restart, left there on purpose'
    with host.running_guest(image, device_memory_dir=memory_dir) \
            as first:
        ops = first.ops
        first_boot = ops.boot_id()
        memory = agent(ops, state_file)
        node_a = memory.attach({'uuid': 'a'}, chunks('a', 1))[
            'a-chunk-0']['numa_node']
        region_b = memory.attach({'uuid': 'b'}, chunks('b', 1))[
            'b-chunk-0']['region']
        dying = agent(DiesAfter(ops, 'release_dax'), state_file)
        with pytest.raises(Killed):
            dying.detach({'uuid': 'b'}, chunks('b', 1))
        # Cut after b's memory went offline and to device_dax, before
        # the erase: what the tenant left is still in b's capacity.
        first.call('dax_write', ops.dax_of(region_b), 8192, SECRET.hex())
        # The control, on the other device: bytes left through a region
        # that is then destroyed without an erase.
        made, dax = _scratch_region(ops, 1, CHUNK_MB * MIB)
        first.call('dax_write', dax, 4096, control.hex())
        _destroy(ops, made)
        assert node_a is not None

    with host.running_guest(image, device_memory_dir=memory_dir) \
            as second:
        ops = second.ops
        assert ops.boot_id() != first_boot
        assert _regions(ops) == []
        restarted = cxl_memory.CxlHostMemory(
            ops=ops, state_file=state_file, offline_attempts=5,
            offline_interval=1, sanitize_timeout=300)
        outcome = restarted.start()
        node = restarted.records.regions['a/cxl-device-0']['numa_node']
        assert outcome == {
            'a/cxl-device-0': 'online again as NUMA node %s' % node,
            'b/cxl-device-0': 'erased and given back'}
        assert second.call('node_memory_mib', node) == CHUNK_MB
        assert list(restarted.records.regions) == ['a/cxl-device-0']
        # b's capacity (after a's on the device: a scratch region made
        # now gets it) holds no secret.
        made, dax = _scratch_region(ops, 0, CHUNK_MB * MIB)
        try:
            assert second.call('dax_find', dax, SECRET.hex()) == -1
        finally:
            _destroy(ops, made)
        # The control: the other device's bytes survived.
        made, dax = _scratch_region(ops, 1, CHUNK_MB * MIB)
        try:
            assert second.call('dax_find', dax, control.hex()) == 4096
            second.call('dax_write', dax, 4096,
                        bytes(len(control)).hex())
        finally:
            _destroy(ops, made)
        restarted.detach({'uuid': 'a'}, chunks('a', 1))
        assert _regions(ops) == []


def test_refusals_name_what_is_wrong(guest, state_file):
    ops = guest.ops
    memory = agent(ops, state_file)
    # A device this host is not wired to.
    stranger = chunks('lease-x', 1)
    stranger[0]['locator'] = {'serial': '0x7777'}
    with pytest.raises(exception.DriverError) as error:
        memory.attach({'uuid': 'lease-x'}, stranger)
    assert 'serial 0x7777' in str(error.value.message)
    # More than the device holds: the kernel refuses, nothing is left.
    with pytest.raises(exception.DriverError) as error:
        memory.attach({'uuid': 'lease-y'}, chunks('lease-y', 3))
    assert 'failed' in error.value.message
    assert _regions(ops) == []
    with open(state_file) as f:
        assert json.load(f)['regions'] == {}


def test_bind_benchmark_runs(guest, capsys):
    """tools/bench/cxl_bind.py on this guest, one cycle: it measures
    what it says and its summary line is whole."""
    import importlib.util
    import os
    spec = importlib.util.spec_from_file_location(
        'cxl_bind', os.path.join(host.REPO, 'tools', 'bench', 'cxl_bind.py'))
    cxl_bind = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cxl_bind)
    status = cxl_bind.run(1, 1, guest=guest)
    summary = capsys.readouterr().out.strip().splitlines()[-1]
    assert summary.startswith('cxl_bind: bind_p50_ms=')
    fields = dict(item.split('=') for item in summary.split()[1:])
    assert float(fields['bind_p50_ms']) > 0
    assert float(fields['unbind_p50_ms']) > 0
    assert int(fields['calls_per_bind']) >= 3
    assert status == (0 if fields['target'] == 'ok' else 1)
    assert _regions(guest.ops) == []
    # Through composable's REST API, conductor and agent: the lease is
    # bound (its node online, checked by the tool) and unbound.
    status = cxl_bind.run(1, 1, guest=guest, api=True)
    summary = capsys.readouterr().out.strip().splitlines()[-1]
    assert summary.startswith('cxl_bind_api: bind_p50_ms=')
    fields = dict(item.split('=') for item in summary.split()[1:])
    assert float(fields['bind_p50_ms']) > 0
    assert float(fields['unbind_p50_ms']) > 0
    assert status == (0 if fields['target'] == 'ok' else 1)
    assert _regions(guest.ops) == []


def test_unbind_of_memory_whose_pages_cannot_move_fails_in_bounded_time(
        guest, state_file):
    """What Linux 6.12 does with ``offline`` written to a memory block
    whose pages cannot be migrated now: the write does not return. Its
    offline_pages() retries the migration, with no time limit, until the
    writer has a signal pending; meanwhile the block reads
    ``going-offline``. A signal ends the write with EINTR once the
    migration pass under way is over, and the block is online again;
    what had already been migrated stays where it went. Seen in this
    guest (TCG): a handled SIGUSR1 5 s into the write: write() returned
    -1, EINTR, 7.5 s later (the pass was still moving the other pages);
    SIGTERM 20 s in, when only unmovable pages were left: the writer
    was gone within 0.03 s. The cases seen:

    * pages with an extra reference (one page in every 2 MiB of a
      200 MiB fill spliced into a pipe, as I/O in flight holds them):
      every other page is migrated to node 0, then the write blocks (20
      s, until the signal). This test uses this case;
    * the host's other memory full (a process holding 240 MiB on the
      region's node and all but 24 MiB of node 0): the write had not
      returned after 20 s either; the migration had filled node 0 down
      to its minimum watermark, so the next allocation in the guest (the
      runner opening a sysfs file) needed the OOM killer, found nothing
      it may kill (the runner and that process exempt) and the kernel
      panicked ("System is deadlocked on memory"). On a host, an offline
      on a full host pushes it to the OOM killer; that is the kernel's.

    Before the fix the agent's unbind blocked for ever in that write.
    Now each block's write is killed after ``offline_block_timeout``,
    counted busy, and the unbind fails after its attempts naming the
    region, the blocks and the process holding the pages; the memory
    stays online and the process keeps it. Once the process ends, the
    unbind goes through and the device is erased.
    """
    ops = guest.ops
    memory = cxl_memory.CxlHostMemory(
        ops=ops, state_file=state_file, offline_attempts=2,
        offline_interval=1, sanitize_timeout=300, offline_block_timeout=5)
    memory.start()
    details = memory.attach({'uuid': 'lease-h'}, chunks('lease-h', 1))
    node = details['lease-h-chunk-0']['numa_node']
    region = details['lease-h-chunk-0']['region']
    blocks = ops.memory_blocks(ops.dax_of(region))
    assert len(blocks) >= 2
    guest.call('numa_fill', node, 16 * MIB, SECRET.hex())
    pid, pinned = guest.call('hog_start', node, 200, 2, -1)
    try:
        assert pinned == 100
        # The kernel itself: a plain write blocks until a signal.
        seen = guest.call('offline_probe', blocks[0], 5)
        assert seen['blocked'], seen
        assert seen['state_while_blocked'] == 'going-offline', seen
        assert (seen['result'], seen['errno']) == (-1, 'EINTR'), seen
        assert seen['ended_after_signal'] < 60, seen
        assert seen['state'] == 'online', seen

        started = time.monotonic()
        with pytest.raises(exception.DriverError) as error:
            memory.detach({'uuid': 'lease-h'}, chunks('lease-h', 1))
        took = time.monotonic() - started
        message = error.value.message
        # 2 attempts x 2 blocks x 5 s, and the calls around them (seen:
        # 26 s).
        assert took < 20 + 120, took
        assert 'CXL region %s (NUMA node %s)' % (region, node) in message
        assert 'after 2 attempts' in message
        assert any(block in message for block in blocks), message
        assert 'python3.11 (pid %d,' % pid in message, message
        # Nothing taken from under the process.
        assert {ops.block_state(b) for b in blocks} == {'online'}
        assert {ops.block_zone(b) for b in blocks} == {'Movable'}
        assert guest.call('node_memory_mib', node) == CHUNK_MB
        assert guest.call('hog_alive', pid)
        with open(state_file) as f:
            assert json.load(f)['regions']['lease-h/cxl-device-0'][
                'step'] == 'online'
    finally:
        assert guest.call('hog_stop', pid) == 0

    memory.detach({'uuid': 'lease-h'}, chunks('lease-h', 1))
    assert guest.call('node_memory_mib', node) == 0
    assert _regions(ops) == []
    made, dax = _scratch_region(ops, 0, CHUNK_MB * MIB)
    try:
        assert guest.call('dax_find', dax, SECRET.hex()) == -1
    finally:
        _destroy(ops, made)
