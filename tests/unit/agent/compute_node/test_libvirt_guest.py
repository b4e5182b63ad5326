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

"""GuestMemoryAttacher against a fake libvirt connection. The real
hot-plug into a TCG guest is in
tests/functional/compute_node/test_guest_attach_real.py."""

import logging
import threading
import uuid
from xml.etree import ElementTree

import pytest

from composable.agent.compute_node import libvirt_guest
from composable.agent.compute_node import portal as iscsi_portal
from composable.common import exception
from tests.unit.agent.compute_node import fakes
from tests import waiting

INITIATOR = 'iqn.2010-10.org.openstack.composable:c1'
INSTANCE = '7f6c9e2a-3d8b-4a57-9a51-2f1f5f3b7c11'


def _extent(n=1, **kw):
    extent = {'uuid': str(uuid.UUID(int=n)), 'index': n - 1,
              'size_mb': 1024,
              'target_iqn': 'iqn.2010-10.org.openstack.composable:ext-%d' % n,
              'lun': 1, 'portal': '192.0.2.10:3260',
              'chap_username': 'user%d' % n,
              'chap_secret': 'chap-secret-%d-xyz' % n}
    extent.update(kw)
    return extent


@pytest.fixture
def conn():
    return fakes.FakeConnection()


@pytest.fixture
def domain(conn):
    return conn.add_domain(fakes.FakeDomain(INSTANCE))


def _attacher(conn, **kw):
    kw.setdefault('attach_timeout', 5)
    kw.setdefault('detach_timeout', 5)
    kw.setdefault('poll_interval', 0.01)
    return libvirt_guest.GuestMemoryAttacher(
        uri='qemu:///system', connect=lambda uri: conn, **kw)


def test_disk_xml():
    extent = _extent()
    xml = libvirt_guest.disk_xml(extent, INITIATOR, 'vdc')
    disk = ElementTree.fromstring(xml)
    assert (disk.get('type'), disk.get('device')) == ('network', 'disk')
    assert disk.find('driver').attrib == {'name': 'qemu', 'type': 'raw',
                                          'cache': 'none'}
    source = disk.find('source')
    assert source.get('protocol') == 'iscsi'
    assert source.get('name') == extent['target_iqn'] + '/1'
    assert source.find('host').attrib == {'name': '192.0.2.10',
                                          'port': '3260'}
    assert source.find('initiator/iqn').get('name') == INITIATOR
    assert source.find('auth').get('username') == 'user1'
    assert source.find('auth/secret').attrib == {
        'type': 'iscsi',
        'usage': 'composable-extent-' + extent['uuid']}
    assert disk.find('target').attrib == {'dev': 'vdc', 'bus': 'virtio'}
    assert disk.find('alias').get('name') == \
        'ua-composable-' + extent['uuid']
    assert disk.find('serial').text == \
        extent['uuid'].replace('-', '')[:20]
    assert extent['chap_secret'] not in xml


def test_disk_xml_without_chap_and_ipv6_portal():
    extent = _extent(chap_username=None, portal='[2001:db8::5]')
    disk = ElementTree.fromstring(
        libvirt_guest.disk_xml(extent, INITIATOR, 'vdb'))
    assert disk.find('source/auth') is None
    assert disk.find('source/host').attrib == {'name': '2001:db8::5',
                                               'port': '3260'}


def test_secret_xml_is_ephemeral_and_private():
    secret = ElementTree.fromstring(libvirt_guest.secret_xml('abc'))
    assert secret.get('ephemeral') == 'yes'
    assert secret.get('private') == 'yes'
    assert secret.find('usage').get('type') == 'iscsi'
    assert secret.find('usage/target').text == 'composable-extent-abc'


@pytest.mark.parametrize('portal,expected', [
    ('10.0.0.1', ('10.0.0.1', 3260)),
    ('10.0.0.1:3261', ('10.0.0.1', 3261)),
    ('[fe80::1]:3262', ('fe80::1', 3262)),
    ('node-1.example.org', ('node-1.example.org', 3260)),
])
def test_parse_portal(portal, expected):
    assert iscsi_portal.parse_portal(portal) == expected


@pytest.mark.parametrize('portal', ['', None, '10.0.0.1:x', ':3260'])
def test_parse_portal_rejects(portal):
    with pytest.raises(exception.Invalid):
        iscsi_portal.parse_portal(portal)


def test_target_devs():
    devs = list(libvirt_guest.target_devs())
    assert devs[:3] == ['vdb', 'vdc', 'vdd']
    assert devs[24:27] == ['vdz', 'vdaa', 'vdab']
    assert 'vda' not in devs


def test_attach_hot_plugs_live_with_a_private_secret(conn, domain, caplog):
    caplog.set_level(logging.DEBUG)
    one, two = _extent(1), _extent(2)

    details = _attacher(conn).attach(INSTANCE, [one, two], INITIATOR)

    assert details[one['uuid']]['target_dev'] == 'vdb'
    assert details[two['uuid']]['target_dev'] == 'vdc'
    assert details[one['uuid']]['mode'] == 'guest'
    assert details[one['uuid']]['instance_uuid'] == INSTANCE
    assert [flags for _xml, flags in domain.attach_calls] == [
        libvirt_guest.VIR_DOMAIN_AFFECT_LIVE] * 2
    for extent in (one, two):
        secret = conn.secrets['composable-extent-' + extent['uuid']]
        assert secret.value == extent['chap_secret'].encode()
        assert (secret.ephemeral, secret.private) == ('yes', 'yes')
    text = '\n'.join(r.getMessage() for r in caplog.records)
    assert one['chap_secret'] not in text
    assert two['chap_secret'] not in text


def test_attach_skips_used_target_devs(conn):
    domain = conn.add_domain(fakes.FakeDomain(INSTANCE,
                                              disks=('vda', 'vdb', 'vdd')))
    details = _attacher(conn).attach(INSTANCE, [_extent(1), _extent(2)],
                                     INITIATOR)
    assert sorted(d['target_dev'] for d in details.values()) == \
        ['vdc', 'vde']
    assert len(domain.disks) == 5


def test_attach_is_idempotent(conn, domain):
    extent = _extent()
    attacher = _attacher(conn)
    first = attacher.attach(INSTANCE, [extent], INITIATOR)

    again = attacher.attach(INSTANCE, [extent], INITIATOR)

    assert again == first
    assert len(domain.attach_calls) == 1


def test_attach_to_a_stopped_or_unknown_instance(conn):
    conn.add_domain(fakes.FakeDomain(INSTANCE, active=False))
    with pytest.raises(exception.DriverError) as info:
        _attacher(conn).attach(INSTANCE, [_extent()], INITIATOR)
    assert 'not running' in str(info.value)
    with pytest.raises(exception.DriverError) as info:
        _attacher(conn).attach(str(uuid.uuid4()), [_extent()], INITIATOR)
    assert 'no libvirt domain' in str(info.value)
    assert conn.secrets == {}


def test_failed_attach_removes_what_it_added(conn, domain):
    one, two = _extent(1), _extent(2)
    attacher = _attacher(conn)
    # A disk and a secret from before stay.
    old = _extent(3)
    attacher.attach(INSTANCE, [old], INITIATOR)
    domain.attach_error = None

    def fail_second(xml, flags, _orig=domain.attachDeviceFlags):
        if two['target_iqn'] in xml:
            raise fakes.FakeLibvirtError(
                "internal error: unable to execute QEMU command "
                "'blockdev-add': iSCSI: Failed to connect to LUN : Failed "
                "to log in to target. Status: Authentication failure(513) "
                "%s" % two['chap_secret'], 1)
        return _orig(xml, flags)
    domain.attachDeviceFlags = fail_second

    with pytest.raises(exception.DriverError) as info:
        attacher.attach(INSTANCE, [one, two], INITIATOR)

    message = str(info.value)
    assert 'could not hot-plug memory extent %s' % two['uuid'] in message
    assert 'refused the CHAP login' in message
    assert two['chap_secret'] not in message
    assert domain.disk_aliases() == ['virtio-disk0',
                                     'ua-composable-' + old['uuid']]
    assert list(conn.secrets) == ['composable-extent-' + old['uuid']]


def test_not_exported_hint(conn, domain):
    domain.attach_error = fakes.FakeLibvirtError(
        'iSCSI: Failed to connect to LUN : Failed to log in to target. '
        'Status: Target not found(515)', 1)
    with pytest.raises(exception.DriverError) as info:
        _attacher(conn).attach(INSTANCE, [_extent()], INITIATOR)
    assert 'does not export this target to initiator %s' % INITIATOR in \
        str(info.value)
    assert conn.secrets == {}


def test_attach_timeout(conn, domain):
    domain.attach_delay = 0.5
    with pytest.raises(exception.DriverTimeout) as info:
        _attacher(conn, attach_timeout=0.1).attach(INSTANCE, [_extent()],
                                                   INITIATOR)
    assert 'hot-plug of memory extent' in str(info.value)


def test_detach_waits_for_the_guest_and_drops_secrets(conn, domain):
    one, two = _extent(1), _extent(2)
    attacher = _attacher(conn)
    attacher.attach(INSTANCE, [one, two], INITIATOR)
    domain.unplug_after = 3

    attacher.detach(INSTANCE, [one, two])

    assert domain.disk_aliases() == ['virtio-disk0']
    assert [a for a, _f in domain.detach_calls] == [
        'ua-composable-' + one['uuid'], 'ua-composable-' + two['uuid']]
    assert conn.secrets == {}
    # Already gone: fine.
    attacher.detach(INSTANCE, [one, two])


def test_detach_timeout_still_drops_the_secret(conn, domain):
    extent = _extent()
    attacher = _attacher(conn, detach_timeout=0.2,
                         detach_retry_interval=0.05)
    attacher.attach(INSTANCE, [extent], INITIATOR)
    domain.unplug_after = None  # the guest never lets go

    with pytest.raises(exception.DriverTimeout) as info:
        attacher.detach(INSTANCE, [extent])

    assert 'vdb' in str(info.value)
    assert len(domain.detach_calls) >= 2  # the request was repeated
    # QEMU holds its own copy for the disk that stays; libvirt keeps no
    # secret of a lease that is being taken away.
    assert conn.secrets == {}
    # The retry finds the disk and no secret, and finishes once the guest
    # lets go.
    domain.unplug_after = 1
    attacher.detach(INSTANCE, [extent])
    assert domain.disk_aliases() == ['virtio-disk0']


def test_domain_destroyed_during_the_detach_drops_secrets(conn, domain):
    one, two = _extent(1), _extent(2)
    attacher = _attacher(conn)
    attacher.attach(INSTANCE, [one, two], INITIATOR)
    domain.unplug_after = None
    original = domain.XMLDesc
    reads = []

    def xml_then_gone(flags=0):
        reads.append(flags)
        if len(reads) > 1:
            # Destroyed, and undefined with it (a transient domain).
            conn.domains.pop(INSTANCE, None)
            raise fakes.FakeLibvirtError('Domain not found',
                                         libvirt_guest.VIR_ERR_NO_DOMAIN)
        return original(flags)
    domain.XMLDesc = xml_then_gone

    attacher.detach(INSTANCE, [one, two])

    assert conn.secrets == {}


def test_secret_that_cannot_be_removed_fails_the_detach(conn, domain):
    extent = _extent()
    attacher = _attacher(conn)
    attacher.attach(INSTANCE, [extent], INITIATOR)
    secret = conn.secrets['composable-extent-' + extent['uuid']]

    def broken():
        raise fakes.FakeLibvirtError('internal error: no connection', 1)
    secret.undefine = broken

    with pytest.raises(exception.DriverError) as info:
        attacher.detach(INSTANCE, [extent])

    assert extent['uuid'] in str(info.value)
    assert 'no connection' in str(info.value)
    assert extent['chap_secret'] not in str(info.value)
    # The disk is gone anyway; a retry removes the secret.
    assert domain.disk_aliases() == ['virtio-disk0']
    del secret.undefine
    attacher.detach(INSTANCE, [extent])
    assert conn.secrets == {}


def test_detach_finds_a_disk_by_its_lun_without_alias(conn):
    extent = _extent()
    domain = conn.add_domain(fakes.FakeDomain(INSTANCE))
    xml = libvirt_guest.disk_xml(extent, INITIATOR, 'vdb').replace(
        'ua-composable-' + extent['uuid'], 'virtio-disk1')
    domain.disks.append(ElementTree.fromstring(xml))
    removed = []
    domain.detachDeviceFlags = lambda xml, flags: removed.append(xml) or \
        domain.disks.pop()

    _attacher(conn).detach(INSTANCE, [extent])

    assert 'virtio-disk1' in removed[0]
    assert domain.disk_aliases() == ['virtio-disk0']


def test_detach_from_a_missing_or_stopped_domain_drops_secrets(conn, domain):
    extent = _extent()
    attacher = _attacher(conn)
    attacher.attach(INSTANCE, [extent], INITIATOR)
    domain.active = False
    attacher.detach(INSTANCE, [extent])
    assert conn.secrets == {}
    assert domain.detach_calls == []

    conn.secretDefineXML(libvirt_guest.secret_xml(extent['uuid']))
    attacher.detach(str(uuid.uuid4()), [extent])
    assert conn.secrets == {}


def test_reconnects_when_the_connection_died(conn, domain):
    opened = []

    def connect(uri):
        opened.append(uri)
        conn.alive = True
        return conn
    attacher = libvirt_guest.GuestMemoryAttacher(
        uri='qemu:///system', connect=connect, attach_timeout=5,
        detach_timeout=5)
    attacher.attach(INSTANCE, [_extent(1)], INITIATOR)
    conn.alive = False
    attacher.attach(INSTANCE, [_extent(2)], INITIATOR)
    assert opened == ['qemu:///system'] * 2


def test_connection_failure_is_a_clear_error():
    def connect(uri):
        raise fakes.FakeLibvirtError('Failed to connect socket', 38)
    attacher = libvirt_guest.GuestMemoryAttacher(
        uri='qemu:///system', connect=connect)
    with pytest.raises(exception.DriverError) as info:
        attacher.attach(INSTANCE, [_extent()], INITIATOR)
    assert 'cannot connect to libvirt at qemu:///system' in str(info.value)


def test_roll_back_keeps_the_secret_of_a_disk_that_stays(conn, domain):
    one, two = _extent(1), _extent(2)
    attacher = _attacher(conn, detach_timeout=0.1,
                         detach_retry_interval=0.05)
    domain.unplug_after = None  # the guest never lets go

    def fail_second(xml, flags, _orig=domain.attachDeviceFlags):
        if two['target_iqn'] in xml:
            raise fakes.FakeLibvirtError('Connection refused', 1)
        return _orig(xml, flags)
    domain.attachDeviceFlags = fail_second

    with pytest.raises(exception.DriverError) as info:
        attacher.attach(INSTANCE, [one, two], INITIATOR)

    assert 'Connection refused' in str(info.value)
    assert 'ua-composable-' + one['uuid'] in domain.disk_aliases()
    assert list(conn.secrets) == ['composable-extent-' + one['uuid']]


# ------------------------------------------------ swapoff in the guest


@pytest.fixture
def swapoff_mode():
    """Set [compute_node] guest_swapoff for one test."""
    from composable import conf
    yield lambda mode: conf.CONF.set_override('guest_swapoff', mode,
                                              'compute_node')
    conf.CONF.clear_override('guest_swapoff', 'compute_node')


@pytest.fixture
def swapon_mode():
    """Set [compute_node] guest_swapon for one test."""
    from composable import conf
    yield lambda mode: conf.CONF.set_override('guest_swapon', mode,
                                              'compute_node')
    conf.CONF.clear_override('guest_swapon', 'compute_node')


def _swap_extent(n=1):
    # Serials are the first 20 hex digits of the uuid: random uuids, so
    # that two extents' disks can be told apart in the guest.
    return _extent(n, uuid=str(uuid.uuid4()))


def _plugged_swap(conn, domain, *extents):
    attacher = _attacher(conn)
    attacher.attach(INSTANCE, list(extents), INITIATOR)
    assert attacher.wait_for_swapons(30)
    domain.agent.swaps.update(libvirt_guest.disk_serial(e['uuid'])
                              for e in extents)
    return attacher


def test_detach_turns_the_guests_swap_off_first(conn, domain, caplog):
    caplog.set_level(logging.INFO)
    one, two = _swap_extent(1), _swap_extent(2)
    attacher = _plugged_swap(conn, domain, one, two)
    domain.agent.running_polls = 2  # swapoff takes a while

    attacher.detach(INSTANCE, [one, two])

    assert domain.agent.swaps == set()
    execs = [c['arguments']['arg'][3] for c in domain.agent.commands
             if c['execute'] == 'guest-exec' and
             c['arguments']['arg'][2] == 'composable-swapoff']
    assert sorted(execs) == sorted(libvirt_guest.disk_serial(e['uuid'])
                                   for e in (one, two))
    assert domain.disk_aliases() == ['virtio-disk0']
    assert 'swapoff /dev/vdb (extent %s' % one['uuid'] in caplog.text
    assert 'swapoff /dev/vdc (extent %s' % two['uuid'] in caplog.text


def test_a_disk_that_is_not_swap_is_unplugged(conn, domain, caplog,
                                              swapon_mode):
    swapon_mode('disabled')
    caplog.set_level(logging.INFO)
    extent = _swap_extent()
    attacher = _attacher(conn)
    attacher.attach(INSTANCE, [extent], INITIATOR)
    attacher.detach(INSTANCE, [extent])
    assert domain.disk_aliases() == ['virtio-disk0']
    assert 'not-swap /dev/vdb' in caplog.text


def test_no_guest_agent_keeps_the_disk_by_default(conn, domain):
    extent = _swap_extent()
    attacher = _plugged_swap(conn, domain, extent)
    domain.agent.configured = False

    with pytest.raises(exception.DriverError) as raised:
        attacher.detach(INSTANCE, [extent])

    message = str(raised.value)
    assert 'could not be asked to stop swapping' in message
    assert 'hw_qemu_guest_agent=yes' in message
    assert 'not configured' in message
    assert extent['chap_secret'] not in message
    # The guest keeps the disk it swaps to; nothing was unplugged.
    assert domain.detach_calls == []
    assert 'ua-composable-' + extent['uuid'] in domain.disk_aliases()
    # Once the agent answers, the same detach goes through.
    domain.agent.configured = True
    attacher.detach(INSTANCE, [extent])
    assert domain.disk_aliases() == ['virtio-disk0']
    assert domain.agent.swaps == set()


def test_a_guest_agent_that_connects_late_is_waited_for(conn, domain,
                                                        caplog):
    # A guest that has just booted: its disks work, its agent port is not
    # open yet. The detach waits for it instead of giving up.
    caplog.set_level(logging.INFO)
    extent = _swap_extent()
    attacher = _plugged_swap(conn, domain, extent)
    domain.agent.connected = False
    domain.agent.connects_after = 3

    attacher.detach(INSTANCE, [extent])

    assert domain.agent.refused == 3
    assert domain.agent.swaps == set()
    assert domain.disk_aliases() == ['virtio-disk0']
    assert 'waiting up to' in caplog.text


def test_a_guest_agent_that_never_connects_keeps_the_disk(conn, domain):
    extent = _swap_extent()
    attacher = _plugged_swap(conn, domain, extent)
    attacher.detach_timeout = 0.2
    domain.agent.connected = False

    with pytest.raises(exception.DriverError) as raised:
        attacher.detach(INSTANCE, [extent])

    assert 'not connected' in str(raised.value)
    assert domain.agent.refused > 1  # asked again until the deadline
    assert domain.detach_calls == []
    assert 'ua-composable-' + extent['uuid'] in domain.disk_aliases()


@pytest.mark.parametrize('cause', ['configured', 'connected'])
def test_no_guest_agent_best_effort_unplugs_anyway(conn, domain,
                                                   swapoff_mode, caplog,
                                                   cause):
    swapoff_mode('best_effort')
    extent = _swap_extent()
    attacher = _plugged_swap(conn, domain, extent)
    attacher.detach_timeout = 0.2
    setattr(domain.agent, cause, False)
    attacher.detach(INSTANCE, [extent])
    assert domain.disk_aliases() == ['virtio-disk0']
    assert 'Unplugging anyway' in caplog.text


def test_guest_swapoff_disabled_never_asks(conn, domain, swapoff_mode):
    swapoff_mode('disabled')
    extent = _swap_extent()
    attacher = _plugged_swap(conn, domain, extent)
    asked = len(domain.agent.commands)
    attacher.detach(INSTANCE, [extent])
    assert domain.agent.commands[asked:] == []
    assert domain.disk_aliases() == ['virtio-disk0']


@pytest.mark.parametrize('mode', ['required', 'best_effort'])
def test_a_refused_swapoff_keeps_the_disk(conn, domain, swapoff_mode, mode):
    swapoff_mode(mode)
    extent = _swap_extent()
    attacher = _plugged_swap(conn, domain, extent)
    domain.agent.refuse = 255
    with pytest.raises(exception.DriverError) as raised:
        attacher.detach(INSTANCE, [extent])
    assert 'refused to stop swapping' in str(raised.value)
    assert 'exited with 255' in str(raised.value)
    assert 'Cannot allocate memory' in str(raised.value)
    assert domain.detach_calls == []


def test_a_swapoff_that_never_ends_times_out_and_keeps_the_disk(conn,
                                                                domain):
    extent = _swap_extent()
    attacher = _plugged_swap(conn, domain, extent)
    attacher.detach_timeout = 0.1
    domain.agent.running_polls = 10 ** 6
    with pytest.raises(exception.DriverTimeout):
        attacher.detach(INSTANCE, [extent])
    assert domain.detach_calls == []


def test_the_guest_exec_status_is_polled_soon_then_less_often(
        conn, domain, monkeypatch, swapon_mode):
    """A bind in required mode waits for the swapon in the guest: the
    first polls of its status come within milliseconds (a fixed
    poll_interval / 5 added up to 100 ms to every bind), and the polls
    slow down to poll_interval / 5 for a command that runs long."""
    swapon_mode('required')
    extent = _swap_extent()
    attacher = _attacher(conn, poll_interval=0.5)
    domain.agent.running_polls = 8
    waits = []
    monkeypatch.setattr(libvirt_guest.time, 'sleep', waits.append)

    details = attacher.attach(INSTANCE, [extent], INITIATOR)

    assert details[extent['uuid']]['guest_device'] == '/dev/vdb'
    assert waits == [0.005, 0.01, 0.02, 0.04, 0.08, 0.1, 0.1, 0.1]


def test_a_stopped_guest_is_not_asked(conn, domain):
    extent = _swap_extent()
    attacher = _plugged_swap(conn, domain, extent)
    asked = len(domain.agent.commands)
    domain.active = False
    domain.agent.connected = False
    attacher.detach(INSTANCE, [extent])
    assert domain.agent.commands[asked:] == []


# ------------------------------------ swap-on after the attach answered


def _reporting_attacher(conn, reports, **kw):
    return _attacher(conn, swap_reporter=lambda *args: reports.append(args),
                     **kw)


def _swapon_started(domain, extent):
    return waiting.wait_until(
        lambda: ('swapon-started', libvirt_guest.disk_serial(
            extent['uuid'])) in domain.agent.events, 30,
        'the swapon script starting in the guest')


def test_best_effort_attach_answers_before_the_guest_swaps(conn, domain,
                                                           caplog):
    caplog.set_level(logging.INFO)
    reports = []
    attacher = _reporting_attacher(conn, reports)
    gate = domain.agent.swapon_gate = threading.Event()
    extent = _swap_extent()

    details = attacher.attach(INSTANCE, [extent], INITIATOR,
                              lease_uuid='lease-1')

    # Plugged and answered; the guest has not made it swap yet.
    assert details[extent['uuid']]['target_dev'] == 'vdb'
    assert 'guest_device' not in details[extent['uuid']]
    _swapon_started(domain, extent)
    assert reports == []
    assert not attacher.wait_for_swapons(0.05)
    assert any(t.name.startswith('guest-swapon')
               for t in threading.enumerate())
    gate.set()
    assert attacher.wait_for_swapons(30)
    assert reports == [('lease-1', INSTANCE,
                        {extent['uuid']: {'guest_device': '/dev/vdb'}})]
    assert 'swapon /dev/vdb (extent %s)' % extent['uuid'] in caplog.text


def test_required_attach_waits_for_the_guest_and_reports_nothing(
        conn, domain, swapon_mode):
    swapon_mode('required')
    reports = []
    attacher = _reporting_attacher(conn, reports)
    extent = _swap_extent()
    details = attacher.attach(INSTANCE, [extent], INITIATOR,
                              lease_uuid='lease-1')
    assert details[extent['uuid']]['guest_device'] == '/dev/vdb'
    assert attacher.wait_for_swapons(0)
    assert reports == []


def test_disabled_swapon_never_asks_the_guest(conn, domain, swapon_mode):
    swapon_mode('disabled')
    reports = []
    attacher = _reporting_attacher(conn, reports)
    attacher.attach(INSTANCE, [_swap_extent()], INITIATOR,
                    lease_uuid='lease-1')
    assert attacher.wait_for_swapons(0)
    assert domain.agent.commands == [] and reports == []


@pytest.mark.parametrize('detacher', ['same', 'another'])
def test_a_detach_waits_for_a_running_swapon(conn, domain, caplog,
                                             detacher):
    """Never unplug a disk under a running mkswap: the detach of a disk
    whose swap-on runs in the guest waits for it to end, then turns the
    swap off and unplugs; also through another attacher of the process."""
    caplog.set_level(logging.INFO)
    reports = []
    attacher = _reporting_attacher(conn, reports)
    gate = domain.agent.swapon_gate = threading.Event()
    extent = _swap_extent()
    serial = libvirt_guest.disk_serial(extent['uuid'])
    attacher.attach(INSTANCE, [extent], INITIATOR, lease_uuid='lease-1')
    _swapon_started(domain, extent)
    events = domain.agent.events
    real_unplug = domain.detachDeviceAlias

    def unplug(alias, flags):
        events.append(('unplug', alias))
        return real_unplug(alias, flags)
    domain.detachDeviceAlias = unplug
    errors = []

    detaching = attacher if detacher == 'same' else _attacher(conn)

    def detach():
        try:
            detaching.detach(INSTANCE, [extent])
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)
    thread = threading.Thread(target=detach)
    thread.start()
    try:
        waiting.wait_until(lambda: 'waiting for the swap-on' in caplog.text,
                           30, 'the detach waiting for the swap-on')
        assert thread.is_alive()
        assert domain.detach_calls == []
        assert 'composable-swapoff' not in domain.agent.scripts
    finally:
        gate.set()
        thread.join(60)
    assert not thread.is_alive() and errors == []
    assert events == [('swapon-started', serial), ('swapon-exited', serial),
                      ('unplug', libvirt_guest.disk_alias(extent['uuid']))]
    assert domain.agent.scripts[-2:] == ['composable-swaps',
                                         'composable-swapoff']
    assert domain.disk_aliases() == ['virtio-disk0']
    # The swap-on finished, so its outcome was reported (the conductor
    # drops it if the lease is gone meanwhile).
    assert reports == [('lease-1', INSTANCE,
                        {extent['uuid']: {'guest_device': '/dev/vdb'}})]


def test_a_detach_gives_up_on_a_swapon_that_does_not_end(conn, domain,
                                                         monkeypatch):
    attacher = _attacher(conn, attach_timeout=30)
    gate = domain.agent.swapon_gate = threading.Event()
    extent = _swap_extent()
    attacher.attach(INSTANCE, [extent], INITIATOR)
    _swapon_started(domain, extent)
    # The job waits for its guest (30 s) longer than the detach may.
    attacher.attach_timeout = 0
    monkeypatch.setattr(libvirt_guest, 'GUEST_AGENT_TIMEOUT', 0.1)
    try:
        with pytest.raises(exception.DriverError) as raised:
            attacher.detach(INSTANCE, [extent])
    finally:
        gate.set()
    assert 'still making the leased disk(s)' in str(raised.value)
    assert domain.detach_calls == []
    assert attacher.wait_for_swapons(30)
    attacher.detach(INSTANCE, [extent])
    assert domain.disk_aliases() == ['virtio-disk0']


def test_a_swapon_not_started_is_skipped_by_a_detach(conn, domain,
                                                     swapoff_mode):
    """The guest agent is not connected yet: the swap-on waits for it;
    a detach of that disk cancels it before anything runs in the
    guest, and nothing is reported."""
    swapoff_mode('best_effort')
    reports = []
    attacher = _reporting_attacher(conn, reports, detach_timeout=0.2)
    domain.agent.connected = False
    extent = _swap_extent()
    attacher.attach(INSTANCE, [extent], INITIATOR, lease_uuid='lease-1')
    waiting.wait_until(lambda: domain.agent.refused > 0, 30,
                       'the swap-on asking the guest agent')
    attacher.detach(INSTANCE, [extent])
    assert attacher.wait_for_swapons(30)
    assert 'composable-swapon' not in domain.agent.scripts
    assert domain.disk_aliases() == ['virtio-disk0']
    assert reports == []


def test_a_guest_that_stops_during_the_swapon_is_reported(conn, domain):
    reports = []
    attacher = _reporting_attacher(conn, reports)
    gate = domain.agent.swapon_gate = threading.Event()
    one, two = _swap_extent(1), _swap_extent(2)
    attacher.attach(INSTANCE, [one, two], INITIATOR, lease_uuid='lease-1')
    _swapon_started(domain, one)
    # Destroyed: its agent answers no more.
    domain.active = False
    domain.agent.connected = False
    assert attacher.wait_for_swapons(30)
    gate.set()
    [(lease, instance, outcome)] = reports
    assert sorted(outcome) == sorted([one['uuid'], two['uuid']])
    for result in outcome.values():
        assert 'stopped before its guest made the disk swap' in \
            result['error']


def test_a_reporter_that_fails_does_not_stop_the_pool(conn, domain, caplog):
    def broken(*args):
        raise RuntimeError('no conductor')
    attacher = _attacher(conn, swap_reporter=broken)
    one, two = _swap_extent(1), _swap_extent(2)
    attacher.attach(INSTANCE, [one], INITIATOR, lease_uuid='lease-1')
    attacher.attach(INSTANCE, [two], INITIATOR, lease_uuid='lease-1')
    assert attacher.wait_for_swapons(30)
    assert domain.agent.swaps == {libvirt_guest.disk_serial(e['uuid'])
                                  for e in (one, two)}
    assert 'Could not report the swap-on of lease lease-1' in caplog.text


def test_swapon_later_reruns_the_idempotent_script(conn, domain):
    """What the agent does after a restart for the disks of the guest-mode
    leases it learns from the conductor: the script runs again, and
    reports the device of a disk that is swap already."""
    reports = []
    attacher = _reporting_attacher(conn, reports)
    extent = _swap_extent()
    attacher.attach(INSTANCE, [extent], INITIATOR, lease_uuid='lease-1')
    assert attacher.wait_for_swapons(30)
    restarted = _reporting_attacher(conn, reports)
    restarted.swapon_later(INSTANCE, [extent['uuid']], 'lease-1')
    assert restarted.wait_for_swapons(30)
    assert reports[-1] == ('lease-1', INSTANCE,
                           {extent['uuid']: {'guest_device': '/dev/vdb'}})
    assert domain.agent.scripts.count('composable-swapon') == 2


def test_a_queued_swapon_of_a_disk_detached_meanwhile_runs_nothing(
        conn, domain):
    """All the pool's threads wait on slow guests; a detach comes and
    goes before the queued job starts: it finds the disk gone and runs
    nothing in the guest."""
    reports = []
    attacher = _reporting_attacher(conn, reports)
    release = threading.Event()
    started = threading.Semaphore(0)

    def blocker():
        started.release()
        release.wait(30)
    attacher.swapon_later(INSTANCE, ['x'])  # makes the pool
    pool = attacher._swap_pool
    for _ in range(libvirt_guest.SWAPON_WORKERS):
        pool.submit(blocker)
    for _ in range(libvirt_guest.SWAPON_WORKERS):
        assert started.acquire(timeout=30)
    extent = _swap_extent()
    try:
        attacher.attach(INSTANCE, [extent], INITIATOR, lease_uuid='lease-1')
        attacher.detach(INSTANCE, [extent])
    finally:
        release.set()
    assert attacher.wait_for_swapons(30)
    assert 'composable-swapon' not in domain.agent.scripts
    assert reports == []
    assert domain.disk_aliases() == ['virtio-disk0']
