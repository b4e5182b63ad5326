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

"""The compute agent's one libvirt connection
(composable.agent.compute_node.libvirt_connection): opened once however
many threads ask at once, opened again when libvirtd restarted, the
listeners (the device attacher's event callbacks) told of every
connection. libvirt's own test driver (test:///default) is the real
libvirt here; the stand-in connections are named as such."""

import threading

import pytest

from composable.agent.compute_node import hostdev
from composable.agent.compute_node import libvirt_connection
from composable.agent.compute_node import libvirt_guest
from composable.common import exception
from tests.unit.agent.compute_node import fake_vfio
from tests.unit.agent.compute_node import fakes

libvirt = pytest.importorskip('libvirt')

DEADLINE = 60
INSTANCE = '00000000-0000-0000-0000-000000000001'


class StandInLibvirtd(object):
    """Stand-in for libvirtd's side of libvirt.open: hands out
    connections (fakes.FakeConnection), counts the opens made at the same
    time, and can "restart" (every open connection dies)."""

    def __init__(self, overlap_wait=1.0, make=fakes.FakeConnection):
        self.make = make
        self.connections = []
        self.inside = 0
        self.most_inside = 0
        self._lock = threading.Lock()
        self._second = threading.Event()
        self.overlap_wait = overlap_wait
        self.refuse = None

    def open(self, uri):
        with self._lock:
            self.inside += 1
            self.most_inside = max(self.most_inside, self.inside)
            first = self.inside == 1
            if not first:
                self._second.set()
        try:
            if first:
                # Give a second, unlocked, opener the time to come in:
                # with the lock it never does, and this waits in vain.
                self._second.wait(self.overlap_wait)
            if self.refuse:
                raise fakes.FakeLibvirtError(self.refuse, 38)
            conn = self.make()
            with self._lock:
                self.connections.append(conn)
            return conn
        finally:
            with self._lock:
                self.inside -= 1

    def restart(self):
        for conn in self.connections:
            conn.alive = False


def _join(threads):
    for thread in threads:
        thread.join(DEADLINE)
        assert not thread.is_alive()


def _ask_at_once(connection, count):
    """What ``count`` threads released together get from ``connection``."""
    got = []
    start = threading.Barrier(count)

    def ask():
        start.wait(DEADLINE)
        got.append(connection.get())

    threads = [threading.Thread(target=ask) for _ in range(count)]
    for thread in threads:
        thread.start()
    _join(threads)
    assert len(got) == count
    return got


@pytest.mark.parametrize('count,restarted', [(2, False), (8, True)],
                         ids=['two-threads-first-open',
                              'eight-threads-after-a-restart'])
def test_threads_asking_at_once_open_one_connection(count, restarted):
    libvirtd = StandInLibvirtd(overlap_wait=0.5 if restarted else 1.0)
    connection = libvirt_connection.LibvirtConnection(
        'qemu:///test', connect=libvirtd.open)
    first = None
    if restarted:
        first = connection.get()
        libvirtd.restart()
    got = _ask_at_once(connection, count)
    assert {id(conn) for conn in got} == {id(libvirtd.connections[-1])}
    assert got[0] is not first and got[0].isAlive()
    # Without the lock a second opener comes in while the first waits.
    assert libvirtd.most_inside == 1
    assert len(libvirtd.connections) == connection.opened
    assert connection.opened == (2 if restarted else 1)


def test_reconnects_when_libvirtd_restarted_and_tells_the_listeners():
    libvirtd = StandInLibvirtd(overlap_wait=0)
    connection = libvirt_connection.LibvirtConnection(
        'qemu:///test', connect=libvirtd.open)
    heard = []
    connection.add_listener(heard.append)
    first = connection.get()
    assert connection.get() is first
    assert heard == [first]
    libvirtd.restart()
    second = connection.get()
    assert second is not first
    assert heard == [first, second]
    # A listener added later hears of the open connection at once.
    late = []
    connection.add_listener(late.append)
    assert late == [second]


def test_a_connection_whose_liveness_check_raises_is_replaced():
    libvirtd = StandInLibvirtd(overlap_wait=0)
    connection = libvirt_connection.LibvirtConnection(
        'qemu:///test', connect=libvirtd.open)
    first = connection.get()

    def broken():
        raise fakes.FakeLibvirtError('End of file while reading data', 38)
    first.isAlive = broken
    assert connection.get() is not first
    assert connection.opened == 2


def test_libvirtd_down_is_a_clear_error_and_the_next_call_retries():
    libvirtd = StandInLibvirtd(overlap_wait=0)
    libvirtd.refuse = 'Failed to connect socket: No such file or directory'
    connection = libvirt_connection.LibvirtConnection(
        'qemu:///test', connect=libvirtd.open)
    with pytest.raises(exception.DriverError) as info:
        connection.get()
    assert 'cannot connect to libvirt at qemu:///test' in info.value.message
    assert 'libvirtd runs' in info.value.message
    assert connection.opened == 0
    libvirtd.refuse = None
    assert connection.get().isAlive()
    assert connection.opened == 1


def test_a_missing_binding_says_what_cannot_be_done(monkeypatch):
    monkeypatch.setattr(libvirt_connection, 'libvirt', None)
    connection = libvirt_connection.LibvirtConnection('qemu:///test')
    with pytest.raises(exception.DriverError) as info:
        connection.get('guest-mode memory cannot be attached on this host')
    assert info.value.message == (
        'the libvirt Python binding (libvirt-python) is not installed, so '
        'guest-mode memory cannot be attached on this host')


def test_real_libvirt_connection_is_opened_again_after_it_closed():
    """libvirt's test driver: a closed connection is not alive, as one
    whose libvirtd restarted; the next use opens a new one, which works."""
    connection = libvirt_connection.LibvirtConnection('test:///default')
    first = connection.get()
    assert first.lookupByName('test').name() == 'test'
    first.close()
    second = connection.get()
    assert second is not first
    assert second.isAlive()
    assert second.lookupByName('test').name() == 'test'
    assert connection.opened == 2
    second.close()


def test_both_attachers_use_the_shared_connection_and_reopen_together():
    """The memory and the device attacher of one agent: one open for
    both, one reopen for both after a restart, and the device events are
    registered on the reopened connection."""
    libvirtd = StandInLibvirtd(overlap_wait=0,
                               make=fake_vfio.VfioStandInConnection)
    connection = libvirt_connection.LibvirtConnection(
        'qemu:///test', connect=libvirtd.open)
    memory = libvirt_guest.GuestMemoryAttacher(connection=connection)
    devices = hostdev.GuestDeviceAttacher(connection=connection)
    assert memory.domain(INSTANCE, missing_ok=True) is None
    assert devices.present(INSTANCE, ['d1']) == {'d1'}
    assert connection.opened == 1
    assert devices.events.registered_on is libvirtd.connections[0]
    libvirtd.restart()
    assert devices.present(INSTANCE, ['d1']) == {'d1'}
    assert memory.domain(INSTANCE, missing_ok=True) is None
    assert connection.opened == 2
    fresh = libvirtd.connections[1]
    assert devices.events.registered_on is fresh
    assert libvirt.VIR_DOMAIN_EVENT_ID_DEVICE_REMOVED in fresh.callbacks
