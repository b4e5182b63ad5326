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

"""Faults in the memory data plane, with the real processes.

A private tgtd (so the machine's own is never killed) exports the memory
node's tmpfs; a tiny guest on compute-0 gets the leases. Something is
killed in the middle of a bind, an unbind or a release. Afterwards, with
no request on the lease, the conductor's reconciler (run every
RECONCILE_INTERVAL seconds here) converges: a failed bind gives back
what it held, a failed release is finished once the memory agent is
back. Then nothing is orphaned: no target of the lease (tgtadm --op
show), no extent file of a released lease (the tmpfs), no disk (virsh
domblklist), no libvirt secret, no host swap (/proc/swaps).

The memory agent's tgtadm can be made slow at the LUN step
(DataPlaneStack.slow_lun), which is where the kills land.
"""

import os
import time

import pytest

from tests.functional.compute_node import dataplane
from tests.functional.dataplane import env
from tests.functional.dataplane import test_guest_memory_lease as e2e

LEASE_MB = e2e.LEASE_MB
BIND_TIMEOUT = 20
RECONCILE_INTERVAL = 2


@pytest.fixture(scope='module')
def private_tgt():
    tgt = env.Tgt(private=True)
    yield tgt
    tgt.stop()


@pytest.fixture(scope='module')
def fdp(tmp_path_factory, private_tgt, libvirt_conn):
    stack = env.DataPlaneStack(tmp_path_factory.mktemp('faults'),
                               private_tgt, bind_timeout=BIND_TIMEOUT,
                               reconcile_interval=RECONCILE_INTERVAL)
    try:
        stack.start()
        yield stack
    finally:
        stack.stop()


@pytest.fixture(autouse=True)
def each_test_alone(request):
    """A test that failed halfway leaves leases, files and capacity
    behind; they are released before the next test, which would
    otherwise fail for them. The failed test's own report stands."""
    yield
    if 'fdp' in request.fixturenames:
        dp = request.getfixturevalue('fdp')
        dp.fast_lun()
        dp.release_all()


def _wait_file(path, timeout=300):
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        assert time.monotonic() < deadline, 'the export never got to %s' % (
            path)
        time.sleep(0.05)


def _lease(dp, name):
    return dp.user.post('/leases', {'name': name, 'memory_mb': LEASE_MB,
                                    'attach_mode': 'guest'},
                        expect=201).json()


def _post_bind(dp, lease, guest):
    dp.user.post('/leases/%s/bind' % lease['uuid'],
                 {'server': guest.uuid, 'host': env.COMPUTE,
                  'attach_mode': 'guest'}, expect=202)


def _release(dp, lease):
    dp.user.delete('/leases/%s' % lease['uuid'])
    done = dp.user.wait_lease(lease['uuid'], ('released', 'error'),
                              timeout=300)
    assert done['status'] == 'released', done['fault']


def _extent_uuids(dp, lease):
    # Read while the lease holds them: a released lease has none.
    uuids = [e['uuid'] for e in dp.admin.get(
        '/leases/%s' % lease['uuid']).json()['extents']]
    assert uuids
    return uuids


def _converged(dp, guest, lease, uuids, swaps, statuses):
    """Wait for the reconciler, with no request on the lease, then check
    that nothing of the lease is left exported or attached."""
    done = dp.wait_reconciled(lease['uuid'], statuses, uuids)
    assert dp.tgt.targets_of(uuids) == []
    assert dataplane.domblklist(guest.uuid) == []
    for extent_uuid in uuids:
        assert not e2e._secret_defined(guest.conn, extent_uuid)
    assert env.host_swaps() == swaps
    if done['status'] == 'released':
        assert not [f for f in dp.extent_files()
                    if any(u in f for u in uuids)]
    return done


def _bind_failing(dp, guest, lease, lun_delay, kill, *in_fault):
    """Bind ``lease`` to the guest, run ``kill`` once the memory agent is
    at the (slowed) LUN step, and wait for the bind to fail with a fault
    naming ``in_fault``; the guest gets no disk."""
    reached = dp.slow_lun(lun_delay)
    _post_bind(dp, lease, guest)
    _wait_file(reached)
    kill()
    failed = dp.user.wait_lease(lease['uuid'], ('bind_failed', 'bound'),
                                timeout=300)
    assert failed['status'] == 'bind_failed'
    for word in in_fault:
        assert word in failed['fault']
    assert dataplane.domblklist(guest.uuid) == []
    return failed


def _bind_unbind_release(dp, guest, lease, uuids, swaps):
    """Bind the lease again (the guest swaps on it), unbind it, release
    it: nothing of it is left."""
    since = guest.mark()
    bound = e2e._bind(dp, lease, guest)
    e2e._guest_swaps_on(guest, bound['extents'][0]['uuid'], LEASE_MB,
                        since)
    dp.user.post('/leases/%s/unbind' % lease['uuid'], {}, expect=202)
    assert dp.user.wait_lease(lease['uuid'], ('reserved', 'error'),
                              timeout=300)['status'] == 'reserved'
    _release(dp, lease)
    e2e.assert_nothing_left(dp, guest, uuids, swaps)


def test_tgtd_killed_during_bind(fdp, guest):
    swaps = env.host_swaps()
    lease = _lease(fdp, 'tgtd-killed')
    uuids = _extent_uuids(fdp, lease)
    _bind_failing(fdp, guest, lease, 3, fdp.tgt.kill, 'tgtd', 'memory-0')
    # The failed bind could not unexport from a dead tgtd.
    assert fdp.marked_exports(lease['uuid']) == uuids

    # tgtd is back (empty, as after any restart): the reconciler clears
    # what the bind left marked, and the lease waits in bind_failed.
    fdp.fast_lun()
    fdp.tgt.restart()
    _converged(fdp, guest, lease, uuids, swaps, ('bind_failed',))
    assert ('reconcile', 'success') in fdp.actions(lease['uuid'])

    # Binding again works.
    _bind_unbind_release(fdp, guest, lease, uuids, swaps)


def test_memory_agent_killed_during_bind(fdp, guest):
    swaps = env.host_swaps()
    lease = _lease(fdp, 'memory-agent-killed')
    uuids = _extent_uuids(fdp, lease)
    _bind_failing(fdp, guest, lease, BIND_TIMEOUT * 3,
                  lambda: fdp.stack.kill(env.MEMORY), 'memory-0')
    # The agent died with the target half built, and nobody could ask
    # it to remove it.
    assert fdp.tgt.targets_of(uuids) == uuids

    # Once the agent is back the reconciler removes the target.
    fdp.fast_lun()
    fdp.start_agent(env.MEMORY)
    _converged(fdp, guest, lease, uuids, swaps, ('bind_failed',))
    assert ('reconcile', 'success') in fdp.actions(lease['uuid'])

    # Deleting the lease scrubs the memory the bind reserved.
    _release(fdp, lease)
    e2e.assert_nothing_left(fdp, guest, uuids, swaps)


def test_compute_agent_killed_during_bind(fdp, guest):
    swaps = env.host_swaps()
    lease = _lease(fdp, 'compute-agent-killed')
    uuids = _extent_uuids(fdp, lease)
    # The export goes on; the attach finds no agent.
    _bind_failing(fdp, guest, lease, 2,
                  lambda: fdp.stack.kill(env.COMPUTE), 'compute-0')
    # The failed bind took back the exports of the host that did not
    # answer.
    assert fdp.tgt.targets_of(uuids) == []
    fdp.fast_lun()
    # The attach request that was never answered is not carried out
    # late by the new agent (the broker drops a call whose timeout has
    # passed): from the moment it takes requests, the guest gets no disk.
    fdp.start_agent(env.COMPUTE, wait=True)
    watch_until = time.monotonic() + 3
    while time.monotonic() < watch_until:
        assert dataplane.domblklist(guest.uuid) == []
        time.sleep(0.5)
    _converged(fdp, guest, lease, uuids, swaps, ('bind_failed',))
    _bind_unbind_release(fdp, guest, lease, uuids, swaps)


def test_conductor_restarted_during_unbind(fdp, guest):
    swaps = env.host_swaps()
    lease = _lease(fdp, 'conductor-restarted')
    uuids = _extent_uuids(fdp, lease)
    since = guest.mark()
    bound = e2e._bind(fdp, lease, guest)
    name = e2e._guest_swaps_on(guest, bound['extents'][0]['uuid'],
                               LEASE_MB, since)

    since = guest.mark()
    fdp.user.post('/leases/%s/unbind' % lease['uuid'], {}, expect=202)
    fdp.stack.kill('conductor-0')
    assert fdp.user.get('/leases/%s' % lease['uuid']).json()[
        'status'] == 'unbinding'
    # The same conductor comes back: it drops what its previous life
    # held and finishes the unbind.
    fdp.stack.start_conductor('conductor-0')
    done = fdp.user.wait_lease(lease['uuid'], ('reserved', 'error'),
                               timeout=300)
    assert done['status'] == 'reserved', done['fault']
    guest.wait_for_line(r'^disk-gone %s$' % name, e2e.GUEST_TIMEOUT,
                        since=since)
    _converged(fdp, guest, lease, uuids, swaps, ('reserved',))
    _release(fdp, lease)
    e2e.assert_nothing_left(fdp, guest, uuids, swaps)


def test_release_with_the_memory_agent_down_is_finished_by_the_reconciler(
        fdp, guest):
    swaps = env.host_swaps()
    lease = _lease(fdp, 'release-retried')
    uuids = _extent_uuids(fdp, lease)
    since = guest.mark()
    bound = e2e._bind(fdp, lease, guest)
    name = e2e._guest_swaps_on(guest, bound['extents'][0]['uuid'],
                               LEASE_MB, since)

    fdp.stack.kill(env.MEMORY)
    since = guest.mark()
    fdp.user.delete('/leases/%s' % lease['uuid'])
    failed = fdp.user.wait_lease(lease['uuid'], ('error', 'released'),
                                 timeout=300)
    assert failed['status'] == 'error', failed
    assert 'memory-0' in failed['fault']
    # The guest let go of its disk before the unexport failed; the lease
    # keeps its capacity until its memory is scrubbed.
    guest.wait_for_line(r'^disk-gone %s$' % name, e2e.GUEST_TIMEOUT,
                        since=since)
    pools = {p['name']: p for p in fdp.admin.get('/pools').json()['pools']}
    assert pools['memory-pool']['used'] == LEASE_MB
    assert fdp.extent_files() == ['extent-%s' % u for u in uuids]

    # The memory agent comes back; nobody asks anything of the lease.
    fdp.start_agent(env.MEMORY)
    _converged(fdp, guest, lease, uuids, swaps, ('released',))
    actions = fdp.actions(lease['uuid'])
    assert ('delete', 'error') in actions
    assert actions[-1] == ('reconcile', 'success')
    e2e.assert_nothing_left(fdp, guest, uuids, swaps)
    pools = {p['name']: p for p in fdp.admin.get('/pools').json()['pools']}
    assert pools['memory-pool']['used'] == 0
