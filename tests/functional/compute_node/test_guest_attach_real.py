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

"""Guest-mode memory on the real data plane.

A private tgtd exports tmpfs-backed LUNs restricted to one initiator name
and a CHAP account; the tiny guest runs under the system libvirtd with
QEMU TCG; GuestMemoryAttacher hot-plugs the LUNs as network disks and the
guest, which makes every new virtio disk swap, says on its serial console
what it saw. Skipped with the reason when libvirtd, QEMU or tgtd cannot
run here, unless COMPOSABLE_REQUIRE_DATAPLANE=1.
"""

import logging
import uuid

import pytest

from composable.agent.compute_node import libvirt_guest
from composable.common import exception
from tests.functional.compute_node import dataplane

INITIATOR = 'iqn.2010-10.org.openstack.composable.test:compute-1'
SIZE_MB = 64
GUEST_TIMEOUT = 240


def _extent(tgt, size_mb=SIZE_MB, index=0, chap_secret=None,
            export_secret=None):
    username = 'u%s' % uuid.uuid4().hex[:10]
    secret = uuid.uuid4().hex
    target_iqn, lun = tgt.export(size_mb, INITIATOR, username,
                                 export_secret or secret)
    extent = {'uuid': str(uuid.uuid4()), 'index': index,
              'size_mb': size_mb, 'target_iqn': target_iqn, 'lun': lun,
              'portal': tgt.portal, 'chap_username': username,
              'chap_secret': chap_secret or secret}
    _created.append(extent)
    return extent


_created = []


def _attacher():
    return libvirt_guest.GuestMemoryAttacher(
        uri=dataplane.LIBVIRT_URI, attach_timeout=180, detach_timeout=180)


@pytest.fixture(autouse=True)
def _clean_up(request):
    """Whatever a failed test left plugged in or defined goes away."""
    del _created[:]
    yield
    if _created and 'guest' in request.fixturenames:
        guest = request.getfixturevalue('guest')
        try:
            _attacher().detach(guest.uuid, list(_created))
        except Exception:
            pass


def _secret_exists(conn, extent):
    import libvirt
    try:
        conn.secretLookupByUsage(libvirt.VIR_SECRET_USAGE_TYPE_ISCSI,
                                 libvirt_guest.secret_usage(extent['uuid']))
    except libvirt.libvirtError as exc:
        assert exc.get_error_code() == libvirt.VIR_ERR_NO_SECRET
        return False
    return True


def _guest_saw(guest, extent, since):
    """Wait until the guest made the extent's disk swap; its guest name."""
    serial = libvirt_guest.disk_serial(extent['uuid'])
    seen = guest.wait_for_line(
        r'^new-disk (vd[a-z]+) bytes=(\d+) serial=%s$' % serial,
        GUEST_TIMEOUT, what='the disk of extent %s' % extent['uuid'],
        since=since)
    name, size = seen.group(1), int(seen.group(2))
    assert size == extent['size_mb'] * dataplane.MiB
    guest.wait_for_line(r'^swap-on %s ok$' % name, GUEST_TIMEOUT,
                        since=since)
    # The size less mkswap's header page, in KiB.
    guest.wait_for_line(r'^swaps /dev/%s partition %d ' % (
        name, extent['size_mb'] * 1024 - 4), GUEST_TIMEOUT, since=since)
    return name


def _assert_no_secret_logged(caplog, *extents):
    text = '\n'.join(r.getMessage() for r in caplog.records)
    for extent in extents:
        assert extent['chap_secret'] not in text


def test_attach_makes_guest_swap_and_detach_removes_it(
        libvirt_conn, tgt, guest, caplog):
    import libvirt
    caplog.set_level(logging.DEBUG)
    extent = _extent(tgt)
    attacher = _attacher()
    since = guest.mark()

    details = attacher.attach(guest.uuid, [extent], INITIATOR)

    dev = details[extent['uuid']]['target_dev']
    assert dev == 'vdb'
    assert dev in dataplane.domblklist(guest.uuid)
    name = _guest_saw(guest, extent, since)
    # Live only: Nova owns the persistent definition.
    persistent = libvirt_guest.live_disks(
        guest.domain.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE))
    assert libvirt_guest.find_disk(persistent, extent) is None
    # The CHAP secret is in libvirt, private: not readable back.
    assert _secret_exists(libvirt_conn, extent)
    secret = libvirt_conn.secretLookupByUsage(
        libvirt.VIR_SECRET_USAGE_TYPE_ISCSI,
        libvirt_guest.secret_usage(extent['uuid']))
    with pytest.raises(libvirt.libvirtError):
        secret.value()

    # Attaching again changes nothing.
    again = attacher.attach(guest.uuid, [extent], INITIATOR)
    assert again[extent['uuid']]['target_dev'] == dev
    assert dataplane.domblklist(guest.uuid).count(dev) == 1

    since = guest.mark()
    attacher.detach(guest.uuid, [extent])

    # The guest's own agent turned its swap off before the unplug: what
    # the swapoff script printed in the guest.
    assert 'swapoff /dev/%s (extent %s' % (name, extent['uuid']) in \
        caplog.text
    assert dev not in dataplane.domblklist(guest.uuid)
    gone = guest.wait_for_line(r'^disk-gone %s$' % name, GUEST_TIMEOUT,
                               since=since)
    assert gone
    assert not _secret_exists(libvirt_conn, extent)
    # Detaching again is fine.
    attacher.detach(guest.uuid, [extent])
    _assert_no_secret_logged(caplog, extent)


def test_two_extents_become_two_swap_disks(libvirt_conn, tgt, guest):
    extents = [_extent(tgt, size_mb=32, index=0),
               _extent(tgt, size_mb=32, index=1)]
    attacher = _attacher()
    since = guest.mark()

    details = attacher.attach(guest.uuid, extents, INITIATOR)

    devs = [details[e['uuid']]['target_dev'] for e in extents]
    assert len(set(devs)) == 2
    listed = dataplane.domblklist(guest.uuid)
    assert set(devs) <= set(listed)
    names = [_guest_saw(guest, e, since) for e in extents]
    assert len(set(names)) == 2

    since = guest.mark()
    attacher.detach(guest.uuid, extents)

    listed = dataplane.domblklist(guest.uuid)
    for dev, name in zip(devs, names):
        assert dev not in listed
        guest.wait_for_line(r'^disk-gone %s$' % name, GUEST_TIMEOUT,
                            since=since)
    for extent in extents:
        assert not _secret_exists(libvirt_conn, extent)


def test_wrong_chap_secret_fails_clearly_and_leaves_nothing(
        libvirt_conn, tgt, guest, caplog):
    caplog.set_level(logging.DEBUG)
    extent = _extent(tgt, export_secret='the-right-secret-1234')
    assert extent['chap_secret'] != 'the-right-secret-1234'
    before = dataplane.domblklist(guest.uuid)

    with pytest.raises(exception.DriverError) as info:
        _attacher().attach(guest.uuid, [extent], INITIATOR)

    message = str(info.value)
    assert extent['uuid'] in message
    assert 'could not hot-plug' in message
    assert 'refused the CHAP login' in message
    assert extent['chap_secret'] not in message
    assert dataplane.domblklist(guest.uuid) == before
    assert not _secret_exists(libvirt_conn, extent)
    _assert_no_secret_logged(caplog, extent)


def test_initiator_not_allowed_fails_and_leaves_nothing(
        libvirt_conn, tgt, guest):
    extent = _extent(tgt)
    before = dataplane.domblklist(guest.uuid)

    with pytest.raises(exception.DriverError) as info:
        _attacher().attach(guest.uuid, [extent],
                           'iqn.2010-10.org.openstack.composable.test:other')

    message = str(info.value)
    assert 'could not hot-plug' in message
    assert 'does not export' in message
    assert 'iqn.2010-10.org.openstack.composable.test:other' in message
    assert dataplane.domblklist(guest.uuid) == before
    assert not _secret_exists(libvirt_conn, extent)


def test_detach_from_unknown_instance_is_a_no_op(libvirt_conn):
    extent = {'uuid': str(uuid.uuid4()), 'target_iqn': 'iqn.x:y', 'lun': 1}
    _attacher().detach(str(uuid.uuid4()), [extent])


@pytest.mark.parametrize('undefine', [False, True],
                         ids=['destroyed', 'destroyed-and-undefined'])
def test_detach_after_the_domain_was_destroyed_leaves_no_secret(
        libvirt_conn, tgt, undefine):
    """Nova destroys a guest (delete, failed start...) before the lease is
    taken away: the detach finds no running domain, or none at all, and
    still removes the extent's libvirt secret."""
    from tests.functional.guest import build
    image = build.build()
    extent = _extent(tgt, size_mb=16)
    usage = libvirt_guest.secret_usage(extent['uuid'])
    with build.running_guest(libvirt_conn, image=image,
                             memory_mib=128) as doomed:
        attacher = _attacher()
        attacher.attach(doomed.uuid, [extent], INITIATOR)
        assert any(usage in u for u in dataplane.secret_usages())

        doomed.domain.destroy()
        if undefine:
            doomed.domain.undefine()

        attacher.detach(doomed.uuid, [extent])

        assert not _secret_exists(libvirt_conn, extent)
        assert not any(usage in u for u in dataplane.secret_usages())
        # Detaching again is fine.
        attacher.detach(doomed.uuid, [extent])


def test_detach_that_times_out_still_removes_the_secret(
        libvirt_conn, tgt, guest):
    """The detach gives up (a zero timeout here) before the guest lets go
    of the disk, during its swapoff or after the unplug was asked for:
    the secret goes anyway, and a later detach finishes the unplug."""
    extent = _extent(tgt, size_mb=16)
    since = guest.mark()
    details = _attacher().attach(guest.uuid, [extent], INITIATOR)
    dev = details[extent['uuid']]['target_dev']
    name = _guest_saw(guest, extent, since)
    impatient = libvirt_guest.GuestMemoryAttacher(
        uri=dataplane.LIBVIRT_URI, attach_timeout=60, detach_timeout=0)

    since = guest.mark()
    with pytest.raises(exception.DriverTimeout):
        impatient.detach(guest.uuid, [extent])

    assert not _secret_exists(libvirt_conn, extent)
    usage = libvirt_guest.secret_usage(extent['uuid'])
    assert not any(usage in u for u in dataplane.secret_usages())
    # The unplug that was asked for completes; detaching again is fine.
    _attacher().detach(guest.uuid, [extent])
    assert dev not in dataplane.domblklist(guest.uuid)
    guest.wait_for_line(r'^disk-gone %s$' % name, GUEST_TIMEOUT,
                        since=since)


def test_a_guest_without_agent_keeps_its_swap_disk(libvirt_conn, tgt):
    """No guest agent channel: by default (guest_swapoff = required) the
    disk the guest swaps to is not pulled, and the error says what to do;
    with best_effort it is unplugged anyway."""
    from composable import conf
    from tests.functional.guest import build
    with build.running_guest(libvirt_conn, agent=False) as bare:
        extent = _extent(tgt, size_mb=16)
        since = bare.mark()
        details = _attacher().attach(bare.uuid, [extent], INITIATOR)
        dev = details[extent['uuid']]['target_dev']
        name = _guest_saw(bare, extent, since)

        with pytest.raises(exception.DriverError) as raised:
            _attacher().detach(bare.uuid, [extent])
        assert 'could not be asked to stop swapping' in str(raised.value)
        assert 'hw_qemu_guest_agent=yes' in str(raised.value)
        assert dev in dataplane.domblklist(bare.uuid)

        conf.CONF.set_override('guest_swapoff', 'best_effort',
                               'compute_node')
        try:
            since = bare.mark()
            _attacher().detach(bare.uuid, [extent])
        finally:
            conf.CONF.clear_override('guest_swapoff', 'compute_node')
        assert dev not in dataplane.domblklist(bare.uuid)
        bare.wait_for_line(r'^disk-gone %s$' % name, GUEST_TIMEOUT,
                           since=since)
