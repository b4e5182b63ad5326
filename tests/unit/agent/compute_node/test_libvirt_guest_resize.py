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

"""Guest-mode leases that grow and shrink by extents: the new disk is
made swap through the guest agent, a shrink takes only the extents it
names, and is refused, nothing changed, when their pages would not fit
back into the guest's free memory."""

import logging
import uuid

import pytest

from composable.agent.compute_node import libvirt_guest
from composable.common import exception
from composable import conf
from tests.unit.agent.compute_node import fakes

INITIATOR = 'iqn.2010-10.org.openstack.composable:c1'
INSTANCE = '7f6c9e2a-3d8b-4a57-9a51-2f1f5f3b7c11'


def _extent(n):
    return {'uuid': str(uuid.uuid4()), 'index': n - 1, 'size_mb': 64,
            'target_iqn': 'iqn.2010-10.org.openstack.composable:ext-%d' % n,
            'lun': 1, 'portal': '192.0.2.10:3260',
            'chap_username': 'user%d' % n,
            'chap_secret': 'chap-secret-%d-xyz' % n}


def _serial(extent):
    return libvirt_guest.disk_serial(extent['uuid'])


@pytest.fixture
def conn():
    return fakes.FakeConnection()


@pytest.fixture
def domain(conn):
    return conn.add_domain(fakes.FakeDomain(INSTANCE))


@pytest.fixture
def reports():
    """What the attacher reports of its background swap-ons."""
    return []


@pytest.fixture
def attacher(conn, reports):
    attacher = libvirt_guest.GuestMemoryAttacher(
        uri='qemu:///system', connect=lambda uri: conn, attach_timeout=5,
        detach_timeout=5, poll_interval=0.01,
        swap_reporter=lambda *args: reports.append(args))
    yield attacher
    assert attacher.wait_for_swapons(30)


def _settled(attacher):
    """Wait for the background swap-ons (guest_swapon = best_effort)."""
    assert attacher.wait_for_swapons(30)


@pytest.fixture
def option():
    set_ = []

    def _set(name, value):
        conf.CONF.set_override(name, value, 'compute_node')
        set_.append(name)
    yield _set
    for name in set_:
        conf.CONF.clear_override(name, 'compute_node')


def test_grow_plugs_and_swaps_only_the_new_extent(attacher, domain, option,
                                                  reports):
    option('swap_priority', 7)
    first, second = _extent(1), _extent(2)
    details = attacher.attach(INSTANCE, [first], INITIATOR, lease_uuid='L')
    # Answered once plugged; the guest makes it swap afterwards.
    assert 'guest_device' not in details[first['uuid']]
    _settled(attacher)
    assert reports == [('L', INSTANCE,
                        {first['uuid']: {'guest_device': '/dev/vdb'}})]
    assert domain.agent.swaps == {_serial(first)}
    plugged = len(domain.attach_calls)

    grown = attacher.attach(INSTANCE, [second], INITIATOR, lease_uuid='L')
    _settled(attacher)

    # One more disk, made swap at the lease's priority; the first one is
    # neither plugged nor touched again.
    assert len(domain.attach_calls) == plugged + 1
    assert list(grown) == [second['uuid']]
    assert grown[second['uuid']]['target_dev'] == 'vdc'
    assert domain.agent.swaps == {_serial(first), _serial(second)}
    assert domain.agent.priorities[_serial(second)] == 7
    swapons = [c['arguments']['arg'][3] for c in domain.agent.commands
               if c['execute'] == 'guest-exec' and
               c['arguments']['arg'][2] == 'composable-swapon']
    assert swapons == [_serial(first), _serial(second)]
    assert reports[-1] == ('L', INSTANCE,
                           {second['uuid']: {'guest_device': '/dev/vdc'}})


def test_a_grow_in_required_mode_answers_with_the_guest_device(
        attacher, domain, option, reports):
    option('guest_swapon', 'required')
    first, second = _extent(1), _extent(2)
    details = attacher.attach(INSTANCE, [first], INITIATOR, lease_uuid='L')
    assert details[first['uuid']]['guest_device'] == '/dev/vdb'
    grown = attacher.attach(INSTANCE, [second], INITIATOR, lease_uuid='L')
    assert grown[second['uuid']]['guest_device'] == '/dev/vdc'
    assert domain.agent.swaps == {_serial(first), _serial(second)}
    # Nothing in the background, nothing reported.
    _settled(attacher)
    assert reports == []


def test_a_disk_the_guest_made_swap_itself_is_left_alone(attacher, domain,
                                                         reports):
    extent = _extent(1)
    # The image's own rule was quicker.
    domain.agent.swaps.add(_serial(extent))
    attacher.attach(INSTANCE, [extent], INITIATOR, lease_uuid='L')
    _settled(attacher)
    assert reports == [('L', INSTANCE,
                        {extent['uuid']: {'guest_device': '/dev/vdb'}})]
    assert _serial(extent) not in domain.agent.priorities


def test_shrink_takes_only_the_named_extents(attacher, domain):
    first, second = _extent(1), _extent(2)
    attacher.attach(INSTANCE, [first, second], INITIATOR)
    _settled(attacher)
    domain.agent.used_kb[_serial(second)] = 10 * 1024

    attacher.detach(INSTANCE, [second])

    assert domain.agent.swaps == {_serial(first)}
    assert domain.disk_aliases() == ['virtio-disk0',
                                     libvirt_guest.disk_alias(first['uuid'])]


def test_shrink_refused_when_the_pages_do_not_fit(attacher, domain, conn,
                                                  option):
    option('swapoff_headroom_mb', 16)
    first, second, third = _extent(1), _extent(2), _extent(3)
    attacher.attach(INSTANCE, [first, second, third], INITIATOR)
    _settled(attacher)
    # 40 + 50 MiB on the two disks to go, 100 MiB available, 16 spare:
    # each alone would fit, both together do not.
    domain.agent.used_kb[_serial(second)] = 40 * 1024
    domain.agent.used_kb[_serial(third)] = 50 * 1024
    domain.agent.mem_available_kb = 100 * 1024
    plugged = domain.disk_aliases()

    with pytest.raises(libvirt_guest.GuestSwapoffWouldNotFit) as raised:
        attacher.detach(INSTANCE, [second, third])

    message = str(raised.value)
    assert 'keeps 90 MiB of swapped-out pages' in message
    assert 'only 100 MiB available' in message
    assert 'Nothing was changed' in message
    assert raised.value.code == 409
    # Everything stays: disks, swap, and no swapoff was even tried.
    assert domain.disk_aliases() == plugged
    assert domain.detach_calls == []
    assert domain.agent.swaps == {
        _serial(e) for e in (first, second, third)}
    assert 'composable-swapoff' not in domain.agent.scripts
    for extent in (first, second, third):
        assert extent['chap_secret'] not in message

    # Once the guest freed memory, the same shrink goes through.
    domain.agent.mem_available_kb = 200 * 1024
    attacher.detach(INSTANCE, [second, third])
    assert domain.agent.swaps == {_serial(first)}


def test_a_swapoff_failing_halfway_turns_the_first_back_on(attacher,
                                                           domain):
    first, second = _extent(1), _extent(2)
    attacher.attach(INSTANCE, [first, second], INITIATOR)
    _settled(attacher)
    agent = domain.agent
    real_swapoff = agent._composable_swapoff
    calls = []

    def swapoff_once(serial):
        calls.append(serial)
        if len(calls) == 2:
            return (255, '', 'swapoff: Cannot allocate memory\n')
        return real_swapoff(serial)
    agent._composable_swapoff = swapoff_once

    with pytest.raises(exception.DriverError) as raised:
        attacher.detach(INSTANCE, [first, second])

    assert 'refused to stop swapping' in str(raised.value)
    # The one turned off is swap again; both disks stay.
    assert agent.swaps == {_serial(first), _serial(second)}
    assert domain.detach_calls == []


def test_required_swapon_without_agent_unplugs_what_it_plugged(
        attacher, domain, option, conn):
    option('guest_swapon', 'required')
    domain.agent.configured = False
    extent = _extent(1)
    with pytest.raises(exception.DriverError) as raised:
        attacher.attach(INSTANCE, [extent], INITIATOR)
    assert 'could not be asked to make the leased disk' in str(raised.value)
    assert domain.disk_aliases() == ['virtio-disk0']
    assert conn.secrets == {}


def test_best_effort_swapon_without_agent_keeps_the_disk(attacher, domain,
                                                         caplog, reports):
    caplog.set_level(logging.WARNING)
    domain.agent.configured = False
    extent = _extent(1)
    details = attacher.attach(INSTANCE, [extent], INITIATOR, lease_uuid='L')
    assert 'guest_device' not in details[extent['uuid']]
    _settled(attacher)
    assert libvirt_guest.disk_alias(extent['uuid']) in domain.disk_aliases()
    assert 'guest_swapon = best_effort' in caplog.text
    [(lease, instance, outcome)] = reports
    assert (lease, instance, list(outcome)) == ('L', INSTANCE,
                                                [extent['uuid']])
    assert 'not configured' in outcome[extent['uuid']]['error']
    assert 'stays plugged' in outcome[extent['uuid']]['error']


def test_a_swapon_the_guest_refuses_fails_a_required_attach(attacher,
                                                            domain, option):
    option('guest_swapon', 'required')
    domain.agent.refuse_swapon = True
    extent = _extent(1)
    with pytest.raises(exception.DriverError) as raised:
        attacher.attach(INSTANCE, [extent], INITIATOR)
    assert 'could not make the leased disk of extent %s swap' % (
        extent['uuid']) in str(raised.value)
    assert domain.disk_aliases() == ['virtio-disk0']


def test_a_swapon_the_guest_refuses_is_reported_in_best_effort(
        attacher, domain, reports):
    domain.agent.refuse_swapon = True
    extent = _extent(1)
    attacher.attach(INSTANCE, [extent], INITIATOR, lease_uuid='L')
    _settled(attacher)
    # The bind stands: the disk stays plugged, the error is reported.
    assert libvirt_guest.disk_alias(extent['uuid']) in domain.disk_aliases()
    [(_lease, _instance, outcome)] = reports
    assert 'could not make the leased disk of extent %s swap' % (
        extent['uuid']) in outcome[extent['uuid']]['error']
    assert 'mkswap/swapon exited with 1' in outcome[extent['uuid']]['error']


def test_guest_swaps_reads_disks_and_swap(attacher, domain):
    first, second = _extent(1), _extent(2)
    attacher.attach(INSTANCE, [first, second], INITIATOR)
    _settled(attacher)
    domain.agent.used_kb[_serial(first)] = 3000
    swaps = attacher.guest_swaps(INSTANCE, timeout=5)
    assert swaps.mem_available_kb == 200 * 1024
    assert swaps.entry_of(_serial(first))[3] == 3000
    assert swaps.entry_of(_serial(second))[3] == 0
    assert swaps.entry_of('nosuchserial') is None
    domain.active = False
    assert attacher.guest_swaps(INSTANCE, timeout=5) is None


def test_guest_swaps_parse_rejects_garbage():
    with pytest.raises(ValueError):
        libvirt_guest.GuestSwaps.parse('sh: cat: not found\n')
    swaps = libvirt_guest.GuestSwaps.parse(
        'disk vda abc\nMemAvailable:   1000 kB\nswaps\n'
        'Filename Type Size Used Priority\n'
        '/dev/vda partition 65532 12 -2\n')
    assert swaps.entry_of('abc') == ('/dev/vda', 'partition', 65532, 12,
                                     -2)


def test_a_swapon_that_never_ends_keeps_the_disk(conn, domain, option):
    """The guest may still turn the disk into swap after the time-out:
    while it does not answer, the disk is not pulled from under it. The
    conductor's detach of the failed grow takes it once the guest
    answers."""
    attacher = libvirt_guest.GuestMemoryAttacher(
        uri='qemu:///system', connect=lambda uri: conn, attach_timeout=0.3,
        detach_timeout=5, poll_interval=0.01)
    option('guest_swapon', 'required')
    domain.agent.running_polls = 10 ** 6  # the guest never finishes
    extent = _extent(1)
    with pytest.raises(exception.DriverTimeout) as raised:
        attacher.attach(INSTANCE, [extent], INITIATOR)
    assert 'swapon in the guest' in str(raised.value)
    assert libvirt_guest.disk_alias(extent['uuid']) in domain.disk_aliases()
    domain.agent.running_polls = 0
    attacher.detach(INSTANCE, [extent])
    assert domain.disk_aliases() == ['virtio-disk0']
    assert conn.secrets == {}
