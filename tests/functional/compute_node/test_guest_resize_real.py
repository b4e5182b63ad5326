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

"""Guest-mode leases that grow and shrink, in the real TCG guest.

The compute agent's AgentManager drives a real GuestMemoryAttacher:
extents are tmpfs LUNs of a private tgtd, hot-plugged into the tiny guest
under the system libvirtd. The guest here does not make new disks swap
by itself (``composable_autoswap=0``): the agent does, through the QEMU
guest agent, after the attach answered (``[compute_node]guest_swapon =
best_effort``, the default), and reports how it went; the tests wait for
it. A detach that comes while it runs waits for it. The usage
sampler reads the guest's swap through the same agent. A shrink whose
pages would not fit back into the guest's memory is refused with
everything left in place; memhog, a program in the guest, makes the
guest swap.
"""

import uuid

import pytest

from composable.agent.compute_node import libvirt_guest
from composable.agent.compute_node import usage
from composable.agent import manager
from composable import conf
from tests.functional.compute_node import dataplane
from tests.functional.guest import build
from tests.functional.guest import programs
from tests import waiting

INITIATOR = 'iqn.2010-10.org.openstack.composable.test:compute-resize'
GUEST_TIMEOUT = 240
GUEST_MB = 256
EXTENT_MB = 64


@pytest.fixture(scope='module')
def guest(libvirt_conn):
    """The tiny guest, without its own swap rule: the agent makes leased
    disks swap."""
    yield from dataplane.running_tiny_guest(libvirt_conn,
                                            memory_mib=GUEST_MB,
                                            autoswap=False)


@pytest.fixture
def options():
    values = {'initiator_iqn': INITIATOR, 'guest_swapon': 'best_effort',
              'guest_swapoff': 'required', 'swapoff_headroom_mb': 16}
    for name, value in values.items():
        conf.CONF.set_override(name, value, 'compute_node')
    yield
    for name in values:
        conf.CONF.clear_override(name, 'compute_node')


class _Recorder(object):
    def __init__(self):
        self.casts = []
        self.swaps = []

    def report_lease_usage(self, context, host, samples):
        self.casts.append((host, samples))

    def report_guest_swap(self, context, host, lease, instance, outcome):
        self.swaps.append((lease, instance, outcome))
        return True

    def swapped(self, lease_uuid, extent):
        """What the agent reported of the extent's swap-on, or None."""
        for lease, _instance, outcome in self.swaps:
            if lease == lease_uuid and extent['uuid'] in outcome:
                return outcome[extent['uuid']]
        return None


@pytest.fixture
def agent(options, guest):
    attacher = libvirt_guest.GuestMemoryAttacher(
        uri=dataplane.LIBVIRT_URI, attach_timeout=180, detach_timeout=180)
    agent = manager.AgentManager('compute-resize', ['compute_node'],
                                 guest_attacher=attacher,
                                 host_swap=object(),
                                 conductor_api=_Recorder())
    yield agent
    attacher.wait_for_swapons(GUEST_TIMEOUT)
    # Whatever a failed test left attached goes.
    for lease_uuid, details in list(agent.memory_attachments.items()):
        extents = [{'uuid': e} for e in details]
        try:
            attacher.detach(guest.uuid, extents)
        except Exception:
            conf.CONF.set_override('guest_swapoff', 'disabled',
                                   'compute_node')
            attacher.detach(guest.uuid, extents)


@pytest.fixture
def shell(guest):
    shell = programs.GuestShell(guest.domain)
    free_file = '/tmp/memhog-free-%s' % uuid.uuid4().hex[:6]
    shell.free_file = free_file
    yield shell
    # A memhog a failed test left running lets go of its memory.
    try:
        shell.run('/bin/touch', free_file)
    except Exception:
        pass


def _extent(tgt, index):
    username = 'u%s' % uuid.uuid4().hex[:10]
    secret = uuid.uuid4().hex
    target_iqn, lun = tgt.export(EXTENT_MB, INITIATOR, username, secret)
    return {'uuid': str(uuid.uuid4()), 'index': index,
            'size_mb': EXTENT_MB, 'target_iqn': target_iqn, 'lun': lun,
            'portal': tgt.portal, 'chap_username': username,
            'chap_secret': secret}


def _swap_of(agent, guest, extent):
    swaps = agent.guest_attacher.guest_swaps(guest.uuid, timeout=60)
    return swaps.entry_of(libvirt_guest.disk_serial(extent['uuid']))


def _swapped_on(agent, guest, lease, extent):
    """Wait until the agent reported that the guest made the extent's
    disk swap (after the attach answered); its swap entry."""
    reported = waiting.wait_until(
        lambda: agent.conductor.swapped(lease['uuid'], extent),
        GUEST_TIMEOUT, 'the swap-on of extent %s' % extent['uuid'],
        interval=0.5)
    assert reported.get('guest_device', '').startswith('/dev/vd'), reported
    entry = _swap_of(agent, guest, extent)
    assert entry is not None and entry[0] == reported['guest_device']
    return entry


def _sampler(agent):
    return usage.UsageSampler(agent, conductor=_Recorder(), interval=1,
                              timeout=60)


def _attach(agent, guest, lease, extents):
    return agent.compute.attach_memory(None, lease, extents, 'guest',
                                       guest.uuid)


def _detach(agent, guest, lease, extents):
    agent.compute.detach_memory(None, lease, extents, 'guest', guest.uuid)


def test_grow_then_shrink_in_the_guest(agent, guest, tgt, libvirt_conn):
    lease = {'uuid': str(uuid.uuid4())}
    first, second = _extent(tgt, 0), _extent(tgt, 1)
    since = guest.mark()

    details = _attach(agent, guest, lease, [first])

    # Answered once plugged: the guest device comes with the report.
    assert 'guest_device' not in details[first['uuid']]
    # The guest saw the disk and did not make it swap itself; the agent
    # did, through the guest agent.
    guest.wait_for_line(r'^new-disk vd[a-z]+ bytes=%d serial=%s$' % (
        EXTENT_MB * dataplane.MiB, libvirt_guest.disk_serial(first['uuid'])),
        GUEST_TIMEOUT, since=since)
    entry = _swapped_on(agent, guest, lease, first)
    assert entry[2] == EXTENT_MB * 1024 - 4
    assert [line for line in guest.marker_lines()[since:]
            if line.startswith('swap-on')] == []
    [sample] = _sampler(agent).sample()
    assert sample['lease_uuid'] == lease['uuid']
    assert sample['size_mb'] == EXTENT_MB

    # Grow: only the new extent is given, and only it is plugged.
    grown = _attach(agent, guest, lease, [second])

    assert list(grown) == [second['uuid']]
    assert len(dataplane.domblklist(guest.uuid)) == 2
    assert _swapped_on(agent, guest, lease, second) is not None
    assert _swap_of(agent, guest, first) is not None
    assert set(agent.memory_attachments[lease['uuid']]) == {
        first['uuid'], second['uuid']}
    [sample] = _sampler(agent).sample()
    assert sample['size_mb'] == 2 * EXTENT_MB

    # Shrink: the second extent goes, the first stays swap.
    _detach(agent, guest, lease, [second])

    first_dev = agent.memory_attachments[lease['uuid']][first['uuid']][
        'target_dev']
    assert dataplane.domblklist(guest.uuid) == [first_dev]
    assert _swap_of(agent, guest, second) is None
    assert _swap_of(agent, guest, first) is not None
    [sample] = _sampler(agent).sample()
    assert sample['size_mb'] == EXTENT_MB

    _detach(agent, guest, lease, [first])

    assert dataplane.domblklist(guest.uuid) == []
    assert agent.memory_attachments == {}
    usages = dataplane.secret_usages()
    for extent in (first, second):
        assert not any(extent['uuid'] in u for u in usages)
    assert _sampler(agent).sample() == []


def test_shrink_refused_while_the_guest_needs_the_pages(agent, guest, tgt,
                                                        shell):
    try:
        programs.build_memhog()
    except build.GuestUnavailable as exc:
        dataplane.unavailable(str(exc))
    lease = {'uuid': str(uuid.uuid4())}
    extents = [_extent(tgt, 0), _extent(tgt, 1)]
    _attach(agent, guest, lease, extents)
    for extent in extents:
        _swapped_on(agent, guest, lease, extent)
    since = guest.mark()

    # More than the guest's RAM: part of it has to go to the lease.
    programs.start_memhog(shell, step_mb=16, interval_ms=300,
                          peak_mb=GUEST_MB, free_file=shell.free_file)
    guest.wait_for_line(r'^memhog peak %d MiB$' % GUEST_MB, 600,
                        since=since)
    used_kb = shell.swap_used_kb()
    assert used_kb > 32 * 1024

    with pytest.raises(libvirt_guest.GuestSwapoffWouldNotFit) as raised:
        _detach(agent, guest, lease, extents)

    assert 'Nothing was changed' in str(raised.value)
    # Everything is as it was: both disks plugged and swap, the lease's
    # record whole, the workload alive.
    assert len(dataplane.domblklist(guest.uuid)) == 2
    assert all(_swap_of(agent, guest, e) is not None for e in extents)
    assert set(agent.memory_attachments[lease['uuid']]) == {
        e['uuid'] for e in extents}
    [sample] = _sampler(agent).sample()
    assert sample['used_mb'] >= 16

    # Once the workload let go, the same shrink goes through.
    since = guest.mark()
    shell.run('/bin/touch', shell.free_file)
    guest.wait_for_line(r'^memhog freed \d+ MiB$', 300, since=since)
    _detach(agent, guest, lease, extents)
    assert dataplane.domblklist(guest.uuid) == []
    assert shell.oom_lines() == []


def test_a_detach_right_after_the_attach_waits_for_the_swapon(agent, guest,
                                                              tgt):
    """The disk is not pulled from under a running mkswap: a detach that
    comes while the guest still makes the disk swap waits for it, then
    turns the swap off and unplugs."""
    lease = {'uuid': str(uuid.uuid4())}
    extent = _extent(tgt, 0)

    _attach(agent, guest, lease, [extent])
    _detach(agent, guest, lease, [extent])

    assert dataplane.domblklist(guest.uuid) == []
    assert _swap_of(agent, guest, extent) is None
    assert agent.guest_attacher.wait_for_swapons(GUEST_TIMEOUT)
    # The swap-on ended before the unplug: it made the disk swap (then
    # the detach turned that off) or, if the detach came first, never
    # ran; it did not fail under an unplug.
    reported = agent.conductor.swapped(lease['uuid'], extent)
    assert reported is None or 'guest_device' in reported, reported
