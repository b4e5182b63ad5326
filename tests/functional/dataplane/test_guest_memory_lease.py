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

"""Guest-mode memory leases end to end, through the API.

A user creates a memory lease and binds it to a running guest (the tiny
TCG guest of tests/functional/guest) on compute-0. The conductor has the
memory node's agent export the lease's extent from its tmpfs through tgtd
(CHAP, restricted to compute-0's initiator name), and compute-0's agent
hot-plug it into the guest as an iSCSI network disk. The guest reports on
its serial console a disk of the lease's size and makes it swap. Unbind
takes it away again; delete scrubs the memory. Nothing is left behind:
no target (tgtadm), no extent file (the tmpfs), no disk (virsh
domblklist), no libvirt secret, no host swap (/proc/swaps).
"""

import shutil
import subprocess

from composable.agent.compute_node import libvirt_guest
from tests.functional.compute_node import dataplane
from tests.functional.dataplane import env

GUEST_TIMEOUT = 240
LEASE_MB = 128


def _bind(dp, lease, guest):
    dp.user.post('/leases/%s/bind' % lease['uuid'],
                 {'server': guest.uuid, 'host': env.COMPUTE,
                  'attach_mode': 'guest'}, expect=202)
    bound = dp.user.wait_lease(lease['uuid'], ('bound', 'bind_failed'),
                               timeout=300)
    assert bound['status'] == 'bound', (bound['fault'],
                                        dp.logs(env.COMPUTE))
    return bound


def _guest_swaps_on(guest, extent_uuid, size_mb, since):
    serial = libvirt_guest.disk_serial(extent_uuid)
    seen = guest.wait_for_line(
        r'^new-disk (vd[a-z]+) bytes=(\d+) serial=%s$' % serial,
        GUEST_TIMEOUT, what='the disk of extent %s' % extent_uuid,
        since=since)
    name, size = seen.group(1), int(seen.group(2))
    assert size == size_mb * env.MiB
    guest.wait_for_line(r'^swap-on %s ok$' % name, GUEST_TIMEOUT,
                        since=since)
    # The size less mkswap's header page, in KiB.
    guest.wait_for_line(r'^swaps /dev/%s partition %d ' % (
        name, size_mb * 1024 - 4), GUEST_TIMEOUT, since=since)
    return name


def _secret_defined(conn, extent_uuid):
    import libvirt
    try:
        conn.secretLookupByUsage(libvirt.VIR_SECRET_USAGE_TYPE_ISCSI,
                                 libvirt_guest.secret_usage(extent_uuid))
    except libvirt.libvirtError:
        return False
    return True


def assert_nothing_left(dp, guest, extent_uuids, swaps_before):
    assert dp.tgt.targets_of(extent_uuids) == []
    assert dp.extent_files(extent_uuids) == []
    assert dataplane.domblklist(guest.uuid) == []
    for extent_uuid in extent_uuids:
        assert not _secret_defined(guest.conn, extent_uuid)
    assert env.host_swaps() == swaps_before


def test_bind_through_the_api_gives_the_guest_swap(dp, guest):
    swaps_before = env.host_swaps()
    lease = dp.user.post('/leases', {'name': 'guest-swap',
                                     'memory_mb': LEASE_MB,
                                     'attach_mode': 'guest'},
                         expect=201).json()
    assert lease['status'] == 'reserved', lease
    since = guest.mark()

    bound = _bind(dp, lease, guest)

    assert bound['instance_uuid'] == guest.uuid
    assert bound['host'] == env.COMPUTE
    [extent] = bound['extents']
    assert extent['export_state'] == 'exported'
    assert 'chap_secret' not in extent
    # The export is real: tgtd serves the extent's file from the tmpfs.
    assert dp.tgt.targets_of([extent['uuid']]) == [extent['uuid']]
    assert dp.extent_files() == ['extent-%s' % extent['uuid']]
    # The guest got a disk of the lease's size and swaps on it.
    assert dataplane.domblklist(guest.uuid) == ['vdb']
    name = _guest_swaps_on(guest, extent['uuid'], LEASE_MB, since)
    # The memory node's tmpfs holds the extent's pages: the memory is
    # reserved, not promised.
    out = subprocess.run(['du', '-m', '-s', dp.tmpfs], capture_output=True,
                         text=True).stdout
    assert int(out.split()[0]) >= LEASE_MB

    since = guest.mark()
    dp.user.post('/leases/%s/unbind' % lease['uuid'], {}, expect=202)
    unbound = dp.user.wait_lease(lease['uuid'], ('reserved', 'error'),
                                 timeout=300)
    assert unbound['status'] == 'reserved', unbound['fault']
    guest.wait_for_line(r'^disk-gone %s$' % name, GUEST_TIMEOUT,
                        since=since)
    assert dataplane.domblklist(guest.uuid) == []
    assert dp.tgt.targets_of([extent['uuid']]) == []
    # Unbound but not released: the memory is kept for the next bind.
    assert dp.extent_files() == ['extent-%s' % extent['uuid']]

    dp.user.delete('/leases/%s' % lease['uuid'])
    released = dp.user.wait_lease(lease['uuid'], ('released', 'error'),
                                  timeout=300)
    assert released['status'] == 'released', released['fault']
    assert_nothing_left(dp, guest, [extent['uuid']], swaps_before)
    pools = {p['name']: p for p in dp.user.get('/pools').json()['pools']}
    assert pools['memory-pool']['used'] == 0


def _qemu_io(dp, secrets, command):
    """qemu-io through a lease's export, as the initiator the export is
    restricted to, with the extent's CHAP account (read from the
    database, as an operator could)."""
    return subprocess.run(
        ['qemu-io', '--object',
         'secret,id=chap0,data=%s' % secrets['chap_secret'],
         '--image-opts',
         'driver=iscsi,transport=tcp,portal=%s,target=%s,lun=%s,user=%s,'
         'password-secret=chap0,initiator-name=%s' % (
             dp.tgt.portal, secrets['target_iqn'], secrets['lun'],
             secrets['chap_username'], env.INITIATOR),
         '-c', command], capture_output=True, text=True, timeout=60)


def _lease_on_guest(dp, guest, name):
    lease = dp.user.post('/leases', {'name': name, 'memory_mb': LEASE_MB,
                                     'attach_mode': 'guest'},
                         expect=201).json()
    since = guest.mark()
    bound = _bind(dp, lease, guest)
    _guest_swaps_on(guest, bound['extents'][0]['uuid'], LEASE_MB, since)
    [secrets] = dp.extent_secrets(lease['uuid'])
    return bound, secrets


def _release(dp, guest, lease):
    dp.user.delete('/leases/%s' % lease['uuid'])
    done = dp.user.wait_lease(lease['uuid'], ('released', 'error'),
                              timeout=300)
    assert done['status'] == 'released', done['fault']


def test_memory_is_scrubbed_between_leases(dp, guest):
    """A pattern written through one lease is never readable through the
    next lease on the same memory node."""
    if not shutil.which('qemu-io'):
        dataplane.unavailable('qemu-io is not installed (qemu-utils)')
    swaps_before = env.host_swaps()
    # Far from the swap header the guest writes at the start of the disk.
    where = '%dM 1M' % (LEASE_MB // 2)
    first, secrets = _lease_on_guest(dp, guest, 'first')
    wrote = _qemu_io(dp, secrets, 'write -P 0xab %s' % where)
    assert wrote.returncode == 0, wrote.stdout + wrote.stderr
    check = _qemu_io(dp, secrets, 'read -P 0xab %s' % where)
    assert 'Pattern verification failed' not in check.stdout, check.stdout
    _release(dp, guest, first)
    assert_nothing_left(dp, guest, [first['extents'][0]['uuid']],
                        swaps_before)

    second, secrets2 = _lease_on_guest(dp, guest, 'second')
    assert secrets2['chap_secret'] != secrets['chap_secret']
    # The old account opens nothing any more.
    old = _qemu_io(dp, dict(secrets, target_iqn=secrets2['target_iqn']),
                   'read 0 4k')
    assert old.returncode != 0 or 'failed' in (old.stdout + old.stderr)
    zeros = _qemu_io(dp, secrets2, 'read -P 0 %s' % where)
    assert zeros.returncode == 0, zeros.stderr
    assert 'Pattern verification failed' not in zeros.stdout, zeros.stdout
    _release(dp, guest, second)
    assert_nothing_left(dp, guest, [second['extents'][0]['uuid']],
                        swaps_before)
