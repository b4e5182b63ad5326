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

"""CXL memory on a compute host: region, kmem, movable NUMA node, and back
with the memory erased; restarts that finish or undo; a host that cannot.

The kernel is the MOCK of tests/unit/agent/compute_node/fake_cxl.py (an
emulated sysfs in a temporary directory, scaled down: 4 MiB chunks on a
16 MiB device): no CXL hardware or 6.3+ kernel runs here. The privileged
functions run in-process on it.
"""

import errno
import json
import os
import time

import pytest

from composable.agent.compute_node import cxl_memory
from composable.common import exception
from composable import privsep
from composable.privsep import cxl as priv_cxl
from tests.unit.agent.compute_node import fake_cxl

MIB = fake_cxl.MIB
SERIAL = '0x5a5a0001'
CHUNK_MB = 4
LEASE = {'uuid': 'lease-1'}
SECRET = b'the previous tenant\'s secret'


def chunks(lease='lease-1', n=1, device='cmm0', serial=SERIAL):
    return [{'uuid': '%s-chunk-%d' % (lease, i), 'index': i,
             'size_mb': CHUNK_MB, 'lease_uuid': lease, 'medium': 'cxl',
             'device': device, 'locator': {'serial': serial}}
            for i in range(n)]


@pytest.fixture
def kernel(tmp_path):
    return fake_cxl.FakeCxlKernel(tmp_path / 'host')


@pytest.fixture
def privileged(kernel, monkeypatch):
    privsep.sys_admin_pctxt.set_client_mode(False)
    monkeypatch.setattr(priv_cxl, 'ROOT', kernel.root)
    monkeypatch.setattr(priv_cxl, 'WRITER', kernel.write)
    monkeypatch.setattr(priv_cxl, 'BOUNDED_WRITER', kernel.bounded_write,
                        raising=False)
    yield priv_cxl
    privsep.sys_admin_pctxt.set_client_mode(True)


@pytest.fixture
def state_file(tmp_path):
    return str(tmp_path / 'state' / 'cxl-regions.json')


def host(privileged, state_file, **kwargs):
    memory = cxl_memory.CxlHostMemory(ops=privileged, state_file=state_file,
                                      offline_interval=0, **kwargs)
    memory.start()
    return memory


def records(state_file):
    try:
        with open(state_file) as f:
            return json.load(f)['regions']
    except FileNotFoundError:
        return {}


def assert_nothing_left(kernel, state_file):
    assert kernel.regions == {}
    assert all(d['size'] == 0 for d in kernel.decoders.values())
    assert kernel.blocks == {} and kernel.dax == {}
    assert records(state_file) == {}


def test_bind_onlines_a_movable_numa_node_and_unbind_erases(
        kernel, privileged, state_file):
    memory = host(privileged, state_file)
    details = memory.attach(LEASE, chunks(n=2))
    assert set(details) == {'lease-1-chunk-0', 'lease-1-chunk-1'}
    first = details['lease-1-chunk-0']
    assert first['numa_node'] == fake_cxl.NODE
    assert first['medium'] == 'cxl' and first['mode'] == 'host'
    region = first['region']
    # One region of both chunks, its memory online movable.
    assert kernel.regions[region]['size'] == 2 * CHUNK_MB * MIB
    assert kernel.online_blocks() and all(
        kernel.blocks[b]['zone'] == 'Movable' for b in kernel.blocks)
    assert len(kernel.blocks) == 2 * CHUNK_MB * MIB // kernel.block_size
    assert records(state_file)['lease-1/cmm0']['step'] == 'online'
    # Repeated (the conductor resumes): the same answer, nothing more.
    writes = len(kernel.writes)
    assert memory.attach(LEASE, chunks(n=2)) == details
    assert len(kernel.writes) == writes

    # The host uses the memory.
    with open(kernel.memory_of(region), 'r+b') as f:
        f.write(SECRET)
    memory.detach(LEASE, chunks(n=2))
    assert_nothing_left(kernel, state_file)
    # The only region of a device with sanitize: sanitized, after the
    # region was gone (the kernel refuses it before).
    assert kernel.sanitized == ['mem0']
    assert kernel.read_media('mem0', 0, len(SECRET)) == bytes(len(SECRET))
    # Detach again: nothing to do.
    memory.detach(LEASE, chunks(n=2))


def test_overwrite_when_the_device_cannot_sanitize_or_is_shared(
        tmp_path, monkeypatch, state_file):
    kernel = fake_cxl.FakeCxlKernel(
        tmp_path / 'host', devices=[(SERIAL, 16 * MIB, False)])
    privsep.sys_admin_pctxt.set_client_mode(False)
    monkeypatch.setattr(priv_cxl, 'ROOT', kernel.root)
    monkeypatch.setattr(priv_cxl, 'WRITER', kernel.write)
    monkeypatch.setattr(priv_cxl, 'BOUNDED_WRITER', kernel.bounded_write,
                        raising=False)
    try:
        memory = host(priv_cxl, state_file)
        region = memory.attach(LEASE, chunks())['lease-1-chunk-0']['region']
        other = {'uuid': 'lease-2'}
        memory.attach(other, chunks('lease-2'))
        with open(kernel.memory_of(region), 'r+b') as f:
            f.write(SECRET)
        offset = kernel.decoders[kernel.regions[region]['targets'][0]][
            'dpa']
        memory.detach(LEASE, chunks())
        assert kernel.sanitized == []
        assert kernel.read_media('mem0', offset, len(SECRET)) == bytes(
            len(SECRET))
        # The next lease on that capacity reads zeros.
        again = memory.attach({'uuid': 'lease-3'}, chunks('lease-3'))
        with open(kernel.memory_of(again['lease-3-chunk-0']['region']),
                  'rb') as f:
            assert f.read(len(SECRET)) == bytes(len(SECRET))
        memory.detach({'uuid': 'lease-3'}, chunks('lease-3'))
        memory.detach(other, chunks('lease-2'))
        assert_nothing_left(kernel, state_file)
    finally:
        privsep.sys_admin_pctxt.set_client_mode(True)


def test_memory_onlined_normal_by_the_kernel_is_made_movable(
        tmp_path, monkeypatch, state_file):
    kernel = fake_cxl.FakeCxlKernel(tmp_path / 'host', auto_online='online')
    privsep.sys_admin_pctxt.set_client_mode(False)
    monkeypatch.setattr(priv_cxl, 'ROOT', kernel.root)
    monkeypatch.setattr(priv_cxl, 'WRITER', kernel.write)
    monkeypatch.setattr(priv_cxl, 'BOUNDED_WRITER', kernel.bounded_write,
                        raising=False)
    try:
        memory = host(priv_cxl, state_file)
        memory.attach(LEASE, chunks())
        assert {b['zone'] for b in kernel.blocks.values()} == {'Movable'}
        memory.detach(LEASE, chunks())
        assert_nothing_left(kernel, state_file)
    finally:
        privsep.sys_admin_pctxt.set_client_mode(True)


@pytest.mark.parametrize('why', ['stuck', 'pinned'],
                         ids=['no-room-elsewhere-write-blocks',
                              'unmovable-pages-ebusy'])
def test_unbind_refused_while_pages_cannot_move(kernel, privileged,
                                                state_file, why):
    """Pages that cannot move: unmovable ones (EBUSY at once), or, what
    a real kernel (6.12) does when the rest of the host's memory is full,
    an offline write that blocks until its writer is interrupted. Each
    attempt's write is interrupted after the block deadline, the unbind
    fails after its attempts naming the blocks and the holders, nothing
    is taken from under the host."""
    memory = host(privileged, state_file, offline_attempts=3,
                  offline_block_timeout=7.5)
    memory.attach(LEASE, chunks())
    held = sorted(kernel.blocks)[1]
    getattr(kernel, why).add(held)
    kernel.add_process(4242, 'qemu-system-x86', 20480)
    with pytest.raises(exception.DriverError) as caught:
        memory.detach(LEASE, chunks())
    message = caught.value.message
    assert 'after 3 attempts' in message and held in message
    assert 'qemu-system-x86 (pid 4242, 80 MiB)' in message
    assert 'NUMA node 1' in message
    assert '7.5 seconds' in message
    # Nothing taken from under the host: all of it online again.
    assert kernel.online_blocks() == sorted(kernel.blocks)
    assert records(state_file)['lease-1/cmm0']['step'] == 'online'
    offline_tries = [w for w in kernel.writes
                     if w == ('sys/devices/system/memory/%s/state' % held,
                              'offline')]
    assert len(offline_tries) == 3
    if why == 'stuck':
        # Every write to that block was given the deadline and cut.
        assert kernel.interrupted == [(held, 7.5)] * 3
    # Once the pages can move, the unbind goes through.
    getattr(kernel, why).clear()
    memory.detach(LEASE, chunks())
    assert_nothing_left(kernel, state_file)


def test_offline_write_that_blocks_is_interrupted_at_its_deadline(
        tmp_path):
    """The real writer (a child process): a write that blocks (here to a
    FIFO no one reads, as the kernel's offline of a block whose pages
    cannot move) ends with EINTR soon after the deadline, and its child
    is gone."""
    fifo = str(tmp_path / 'state')
    os.mkfifo(fifo)
    started = time.monotonic()
    with pytest.raises(OSError) as caught:
        priv_cxl._write_with_deadline(fifo, 'offline', 1.5)
    assert caught.value.errno == errno.EINTR
    assert 1.5 <= time.monotonic() - started < 60
    # A write that the kernel does: done; one it refuses: its errno.
    done = tmp_path / 'done'
    done.write_text('')
    priv_cxl._write_with_deadline(str(done), 'offline', 60)
    assert done.read_text() == 'offline'
    with pytest.raises(OSError) as caught:
        priv_cxl._write_with_deadline(str(tmp_path / 'no' / 'such'),
                                      'offline', 60)
    assert caught.value.errno == errno.ENOENT


def test_device_not_on_this_host(kernel, privileged, state_file):
    memory = host(privileged, state_file)
    with pytest.raises(exception.DriverError) as caught:
        memory.attach(LEASE, chunks(serial='0x77'))
    assert 'serial 0x77' in caught.value.message
    assert "not on this host's CXL bus" in caught.value.message
    assert_nothing_left(kernel, state_file)


def test_failed_make_is_undone(kernel, privileged, state_file):
    memory = host(privileged, state_file)
    # Two decoders on the device: the third region finds none free.
    memory.attach({'uuid': 'a'}, chunks('a'))
    memory.attach({'uuid': 'b'}, chunks('b'))
    with pytest.raises(exception.DriverError) as caught:
        memory.attach({'uuid': 'c'}, chunks('c'))
    assert 'no free endpoint decoder' in caught.value.message
    assert set(records(state_file)) == {'a/cmm0', 'b/cmm0'}
    memory.detach({'uuid': 'a'}, chunks('a'))
    memory.detach({'uuid': 'b'}, chunks('b'))
    assert_nothing_left(kernel, state_file)


@pytest.mark.parametrize('writes', [1, 2, 3, 4, 8, 9, 10, 11, 12])
def test_agent_killed_while_making_the_region(kernel, privileged,
                                              state_file, writes):
    """Killed after ``writes`` sysfs writes of the bind (mode, dpa_size,
    create_ram_region, ..., commit, region bind, kmem bind, onlines):
    the next start undoes all of it."""
    memory = host(privileged, state_file)
    kernel.kill_after(writes)
    with pytest.raises(fake_cxl.Killed):
        memory.attach(LEASE, chunks(n=2))
    assert records(state_file)['lease-1/cmm0']['step'] in (
        'making', 'onlining')
    restarted = host(privileged, state_file)
    assert_nothing_left(kernel, state_file)
    # And the conductor's bind, repeated, makes it afresh.
    details = restarted.attach(LEASE, chunks(n=2))
    assert details['lease-1-chunk-0']['numa_node'] == fake_cxl.NODE
    restarted.detach(LEASE, chunks(n=2))
    assert_nothing_left(kernel, state_file)


def test_agent_killed_while_giving_back(kernel, privileged, state_file):
    memory = host(privileged, state_file)
    region = memory.attach(LEASE, chunks())['lease-1-chunk-0']['region']
    with open(kernel.memory_of(region), 'r+b') as f:
        f.write(SECRET)
    # Killed after the memory went offline and back to device_dax.
    kernel.kill_after(len(kernel.blocks) + 3)
    with pytest.raises(fake_cxl.Killed):
        memory.detach(LEASE, chunks())
    assert records(state_file)['lease-1/cmm0']['step'] == 'detaching'
    host(privileged, state_file)
    assert_nothing_left(kernel, state_file)
    assert kernel.read_media('mem0', 0, len(SECRET)) == bytes(len(SECRET))


def test_a_bound_region_survives_a_restart(kernel, privileged, state_file):
    memory = host(privileged, state_file)
    details = memory.attach(LEASE, chunks())
    restarted = host(privileged, state_file)
    assert restarted.attach(LEASE, chunks()) == details
    restarted.detach(LEASE, chunks())
    assert_nothing_left(kernel, state_file)


# ---------------------------------------------------------- host restarts


def _write_into(kernel, region, data):
    with open(kernel.memory_of(region), 'r+b') as f:
        f.write(data)


def _memory_reads(kernel, region, length):
    with open(kernel.memory_of(region), 'rb') as f:
        return f.read(length)


@pytest.fixture
def kernel_online(tmp_path, monkeypatch):
    """A kernel that onlines hot-added memory by itself (the default of
    many distributions' udev rules)."""
    kernel = fake_cxl.FakeCxlKernel(tmp_path / 'host', auto_online='online')
    privsep.sys_admin_pctxt.set_client_mode(False)
    monkeypatch.setattr(priv_cxl, 'ROOT', kernel.root)
    monkeypatch.setattr(priv_cxl, 'WRITER', kernel.write)
    monkeypatch.setattr(priv_cxl, 'BOUNDED_WRITER', kernel.bounded_write,
                        raising=False)
    yield kernel
    privsep.sys_admin_pctxt.set_client_mode(True)


@pytest.mark.parametrize('auto_online', [False, True],
                         ids=['kernel-leaves-memory-offline',
                              'kernel-onlines-memory'])
def test_bound_regions_are_online_again_after_the_host_restarts(
        request, state_file, auto_online):
    """After a restart the kernel has no region; the device still holds
    what they held. Both leases get their memory back, each on the same
    capacity as before (made again in the order first made), erased."""
    if auto_online:
        kernel = request.getfixturevalue('kernel_online')
        ops = priv_cxl
    else:
        kernel = request.getfixturevalue('kernel')
        ops = request.getfixturevalue('privileged')
    memory = host(ops, state_file)
    first = memory.attach({'uuid': 'a'}, chunks('a'))['a-chunk-0']
    second = memory.attach({'uuid': 'b'}, chunks('b', n=2))['b-chunk-0']
    places = {lease: kernel.decoders[kernel.regions[d['region']][
        'targets'][0]]['dpa'] for lease, d in (('a', first), ('b', second))}
    _write_into(kernel, first['region'], SECRET)
    _write_into(kernel, second['region'], SECRET)
    kernel.reboot()
    assert kernel.regions == {}

    restarted = cxl_memory.CxlHostMemory(ops=ops, state_file=state_file,
                                         offline_interval=0)
    outcome = restarted.start()
    assert outcome == {'a/cmm0': 'online again as NUMA node 1',
                       'b/cmm0': 'online again as NUMA node 1'}
    saved = records(state_file)
    # What the conductor is told: both leases, their chunks, the node.
    assert restarted.restored == [
        {'lease_uuid': 'a', 'device': 'cmm0', 'ok': True,
         'numa_node': 1, 'extents': ['a-chunk-0'], 'message': None},
        {'lease_uuid': 'b', 'device': 'cmm0', 'ok': True,
         'numa_node': 1, 'extents': ['b-chunk-0', 'b-chunk-1'],
         'message': None}]
    assert {r['step'] for r in saved.values()} == {'online'}
    assert {r['boot'] for r in saved.values()} == {kernel._boot_id()}
    for key, lease in (('a/cmm0', 'a'), ('b/cmm0', 'b')):
        region = saved[key]['region']
        assert kernel.decoders[kernel.regions[region]['targets'][0]][
            'dpa'] == places[lease]
        # What the earlier boot left there is gone.
        assert _memory_reads(kernel, region, len(SECRET)) == bytes(
            len(SECRET))
    assert {b['zone'] for b in kernel.blocks.values()} == {'Movable'}
    assert kernel.online_blocks() == sorted(kernel.blocks)
    # The conductor's bind, repeated, finds them as they are.
    again = restarted.attach({'uuid': 'b'}, chunks('b', n=2))
    assert again['b-chunk-0']['region'] == saved['b/cmm0']['region']
    restarted.detach({'uuid': 'b'}, chunks('b', n=2))
    restarted.detach({'uuid': 'a'}, chunks('a'))
    assert_nothing_left(kernel, state_file)


def test_a_give_back_cut_by_a_restart_is_finished_and_erased(
        kernel, privileged, state_file):
    memory = host(privileged, state_file)
    region = memory.attach(LEASE, chunks())['lease-1-chunk-0']['region']
    _write_into(kernel, region, SECRET)
    # The host went down after the memory was offline and with
    # device_dax, before it was erased.
    kernel.kill_after(len(kernel.blocks) + 3)
    with pytest.raises(fake_cxl.Killed):
        memory.detach(LEASE, chunks())
    assert records(state_file)['lease-1/cmm0']['step'] == 'detaching'
    kernel.reboot()
    assert kernel.read_media('mem0', 0, len(SECRET)) == SECRET

    restarted = host(privileged, state_file)
    # b was being given back: nothing to tell the conductor.
    assert restarted.restored == []
    assert restarted.rebuild_after_restart() == {}  # start() did it
    assert_nothing_left(kernel, state_file)
    assert kernel.read_media('mem0', 0, len(SECRET)) == bytes(len(SECRET))


def test_a_region_cut_before_its_decoder_was_recorded_is_dropped(
        kernel, privileged, state_file):
    memory = host(privileged, state_file)
    kernel.kill_after(2)
    with pytest.raises(fake_cxl.Killed):
        memory.attach(LEASE, chunks())
    kernel.reboot()
    restarted = cxl_memory.CxlHostMemory(ops=privileged,
                                         state_file=state_file)
    assert restarted.start() == {'lease-1/cmm0': 'dropped'}
    assert_nothing_left(kernel, state_file)


def test_a_device_gone_at_the_restart_keeps_its_records_until_it_is_back(
        kernel, privileged, state_file):
    memory = host(privileged, state_file)
    region = memory.attach(LEASE, chunks())['lease-1-chunk-0']['region']
    _write_into(kernel, region, SECRET)
    kernel.reboot(keep_devices=())

    restarted = cxl_memory.CxlHostMemory(ops=privileged,
                                         state_file=state_file)
    outcome = restarted.start()
    assert "is not on this host's CXL bus since the host restarted" in \
        outcome['lease-1/cmm0']
    assert records(state_file)['lease-1/cmm0']['step'] == 'online'
    [told] = restarted.restored
    assert told['lease_uuid'] == 'lease-1' and told['ok'] is False
    assert told['numa_node'] is None
    assert 'since the host restarted' in told['message']
    # Nothing new is made on the device before the old region is erased,
    # and an unbind says why it cannot be done yet.
    with pytest.raises(exception.DriverError) as caught:
        restarted.attach({'uuid': 'c'}, chunks('c'))
    assert 'previous boot' in caught.value.message
    with pytest.raises(exception.DriverError) as caught:
        restarted.detach(LEASE, chunks())
    assert 'since the host restarted' in caught.value.message
    assert kernel.read_media('mem0', 0, len(SECRET)) == SECRET

    # The device is back: the unbind makes the region again, erases it
    # and gives it back.
    kernel.plug_back('mem0')
    restarted.detach(LEASE, chunks())
    assert_nothing_left(kernel, state_file)
    assert kernel.read_media('mem0', 0, len(SECRET)) == bytes(len(SECRET))
    assert kernel.sanitized == ['mem0']


@pytest.mark.parametrize('missing, named', [
    ('sys/bus/cxl/drivers/cxl_region', 'CONFIG_CXL_REGION'),
    ('sys/bus/cxl/drivers/cxl_dax_region', 'CONFIG_DEV_DAX_CXL'),
    ('sys/bus/dax/drivers/kmem', 'CONFIG_DEV_DAX_KMEM'),
    ('sys/devices/system/memory/block_size_bytes', 'CONFIG_MEMORY_HOTPLUG'),
])
def test_kernel_too_old_is_named_at_start(tmp_path, monkeypatch,
                                          state_file, missing, named):
    kernel = fake_cxl.FakeCxlKernel(tmp_path / 'host', missing=(missing,))
    monkeypatch.setattr(priv_cxl, 'ROOT', kernel.root)
    memory = cxl_memory.CxlHostMemory(ops=priv_cxl, state_file=state_file)
    with pytest.raises(exception.DriverError) as caught:
        memory.start()
    assert named in caught.value.message
    assert 'cannot take CXL memory' in caught.value.message
    # Its binds say the same.
    with pytest.raises(exception.DriverError) as caught:
        memory.attach(LEASE, chunks())
    assert named in caught.value.message


def test_names_are_checked_before_they_become_paths(privileged):
    for bad in ('../../etc', 'region0/../x', 'mem', '', None):
        with pytest.raises(ValueError):
            priv_cxl.check_name(bad)
    with pytest.raises(ValueError):
        priv_cxl.memdev_by_serial('0x1/../..')
    # A privileged function refuses it with its error type and code.
    with pytest.raises(priv_cxl.CxlError) as caught:
        priv_cxl.make_region('mem0', -1)
    assert caught.value.code is priv_cxl.ErrorCode.INVALID_ARGUMENT
    assert 'a region size is a positive number of bytes' in str(
        caught.value)


def test_a_lease_grows_by_a_region_and_gives_back_parts_last_made_first(
        kernel, privileged, state_file, monkeypatch):
    """An elastic lease (virtio-mem mode) gets chunks in several attaches:
    one region per attach on the device, given back by the chunks it
    holds, whole, the last made first."""
    memory = host(privileged, state_file)
    first, second, third = [[c] for c in chunks(n=3)]
    base = memory.attach(LEASE, first)
    grown = memory.attach(LEASE, second + third)
    assert set(grown) == {'lease-1-chunk-1', 'lease-1-chunk-2'}
    assert grown['lease-1-chunk-1']['region'] != \
        base['lease-1-chunk-0']['region']
    assert grown['lease-1-chunk-1']['numa_node'] == fake_cxl.NODE
    assert len(kernel.regions) == 2
    assert sorted(records(state_file)) == ['lease-1/cmm0', 'lease-1/cmm0/2']
    assert memory.extents_of('lease-1') == [
        'lease-1-chunk-0', 'lease-1-chunk-1', 'lease-1-chunk-2']
    # Repeated: the same regions, nothing made.
    writes = len(kernel.writes)
    assert memory.attach(LEASE, second) == {
        'lease-1-chunk-1': grown['lease-1-chunk-1']}
    assert len(kernel.writes) == writes
    # A region goes whole: half of one is refused, nothing changed.
    with pytest.raises(exception.DriverError) as err:
        memory.check_detach(LEASE, third)
    assert 'holds chunks lease-1-chunk-1, lease-1-chunk-2' in \
        err.value.message
    with pytest.raises(exception.DriverError):
        memory.detach(LEASE, third)
    assert len(kernel.regions) == 2
    memory.detach(LEASE, second + third)
    assert list(kernel.regions) == [base['lease-1-chunk-0']['region']]
    assert memory.extents_of('lease-1') == ['lease-1-chunk-0']
    # Gone already: nothing to do.
    memory.detach(LEASE, second)
    # All of it at once (an unbind): the kernel frees a device's decoders
    # last-made first, so the regions go in that order.
    again = memory.attach(LEASE, second)['lease-1-chunk-1']['region']
    destroyed = []
    destroy = privileged.destroy_region

    def recording(region, *args):
        destroyed.append(region)
        return destroy(region, *args)
    monkeypatch.setattr(privileged, 'destroy_region', recording)
    memory.detach(LEASE, first + second)
    assert destroyed == [again, base['lease-1-chunk-0']['region']]
    assert_nothing_left(kernel, state_file)


# The errors of the privileged functions: one type, CxlError, whose code
# the agent decides by (what crosses the privsep channel).

def test_a_kernel_refusal_is_a_cxl_error_with_its_code(kernel, privileged):
    made = priv_cxl.make_region('mem0', CHUNK_MB * MIB)
    priv_cxl.online_region(made['region'])
    # The kernel's EBUSY (the DAX device is system RAM) and an error the
    # function raises itself: both CxlError, each with its code.
    with pytest.raises(priv_cxl.CxlError) as caught:
        priv_cxl.overwrite(made['region'])
    assert caught.value.code is priv_cxl.ErrorCode.BUSY
    assert 'is not with device_dax (kmem)' in caught.value.message
    with pytest.raises(priv_cxl.CxlError) as caught:
        priv_cxl.make_region('mem0', 64 * MIB)
    # The kernel's ENOSPC: its text, without the errno number.
    assert caught.value.code is priv_cxl.ErrorCode.NO_SPACE
    assert caught.value.message.startswith('No space left on device: ')
    assert caught.value.args == (caught.value.code.value,
                                 caught.value.message)


def test_a_cxl_error_crosses_the_privsep_channel_with_its_code(
        kernel, privileged):
    # oslo.privsep's daemon side answers the error as (class path,
    # arguments); its channel carries them; its client rebuilds the
    # error from them.
    import socket

    from oslo_privsep import comm
    from oslo_privsep import daemon
    from oslo_utils import importutils

    server = daemon.Daemon(None, privsep.sys_admin_pctxt)
    reply = server._process_cmd(
        'msg-1', comm.Message.CALL, 'composable.privsep.cxl.overwrite',
        ('region9',), {})
    assert reply[0] == comm.Message.ERR.value
    left, right = socket.socketpair()
    try:
        comm.Serializer(left).send(reply)
        received = next(iter(comm.Deserializer(right)))
    finally:
        left.close()
        right.close()
    rebuilt = importutils.import_class(received[1])(*received[2])
    assert isinstance(rebuilt, priv_cxl.CxlError)
    assert rebuilt.code is priv_cxl.ErrorCode.NO_DEVICE
    assert rebuilt.message == 'region region9 has no DAX device'


class _RefusingDestroy(object):
    """The privileged functions, with destroy_region refused busy once
    (as Linux refuses to reset a decoder committed before another)."""

    def __init__(self, privileged):
        self.privileged = privileged
        self.refused = 0

    def __getattr__(self, name):
        return getattr(self.privileged, name)

    def destroy_region(self, *args):
        if not self.refused:
            self.refused += 1
            raise priv_cxl.CxlError(priv_cxl.ErrorCode.BUSY,
                                    'decoder2.0 is busy')
        return self.privileged.destroy_region(*args)


def test_a_region_the_kernel_cannot_free_yet_waits_scrubbed(
        tmp_path, monkeypatch, state_file):
    # A device without sanitize: its region is overwritten, then
    # destroyed; the kernel's busy answer to the destroy (the code BUSY)
    # keeps it, erased, for a later unbind.
    kernel = fake_cxl.FakeCxlKernel(
        tmp_path / 'host', devices=[(SERIAL, 16 * MIB, False)])
    privsep.sys_admin_pctxt.set_client_mode(False)
    monkeypatch.setattr(priv_cxl, 'ROOT', kernel.root)
    monkeypatch.setattr(priv_cxl, 'WRITER', kernel.write)
    monkeypatch.setattr(priv_cxl, 'BOUNDED_WRITER', kernel.bounded_write,
                        raising=False)
    try:
        ops = _RefusingDestroy(priv_cxl)
        memory = host(ops, state_file)
        memory.attach(LEASE, chunks())
        with pytest.raises(exception.DriverError) as caught:
            memory.detach(LEASE, chunks())
        assert ops.refused == 1
        assert 'is offline and erased, but the kernel frees a device\'s ' \
            'decoders last-made first' in caught.value.message
        assert '(decoder2.0 is busy)' in caught.value.message
        assert records(state_file)['lease-1/cmm0']['step'] == 'scrubbed'
        memory.detach(LEASE, chunks())
        assert_nothing_left(kernel, state_file)
    finally:
        privsep.sys_admin_pctxt.set_client_mode(True)
