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

"""An elastic guest-mode memory lease follows its workload, end to end.

The real processes (API, conductor, a memory agent exporting through
tgtd, a compute agent) over RabbitMQ and MariaDB, and the tiny TCG guest
under the system libvirtd. The guest does not make new disks swap by
itself: the compute agent does, through the QEMU guest agent.

A user creates an elastic lease (microversion 1.2) at its minimum and
binds it to the guest. memhog, a program in the guest, then allocates and
touches anonymous memory in steps until it holds more than the guest's
RAM. The compute agent reports the swap the guest uses on the lease every
couple of seconds; the conductor's elastic task predicts the next
window's peak and grows the lease, one more hot-plugged disk at a time,
ahead of the need: the guest swaps out more than the lease's minimum and
its kernel never runs the OOM killer. (A usage sample may show the
lease full for a moment when a busy machine delays a grow: the guest
then reclaims other pages for a while, which is not a failure of the
workload; the test prints how many samples did.) When memhog frees its
memory, the prediction stays low and the lease shrinks back to its
minimum. Deleting it leaves nothing behind.
"""

import time

import pytest

from tests import waiting
from tests.functional.compute_node import dataplane
from tests.functional.dataplane import env
from tests.functional.dataplane import test_guest_memory_lease as guest_lease
from tests.functional.guest import build
from tests.functional.guest import programs

GUEST_MB = 256
STEP_MB = 32
# Two extents to start with: the guest swaps nothing until its RAM is
# used up, so the first prediction above the minimum comes only once the
# lease is in use; the second extent is the time it has to come true on
# a busy machine.
MIN_MB = 2 * STEP_MB
MAX_MB = 8 * STEP_MB
# memhog: 8 MiB every 4 s up to more than the guest's RAM.
HOG_STEP_MB = 8
HOG_INTERVAL_MS = 4000
HOG_PEAK_MB = GUEST_MB + 32
FREE_FILE = '/tmp/memhog-free'
RAMP_TIMEOUT = 900
SHRINK_TIMEOUT = 600


@pytest.fixture(scope='module')
def guest(libvirt_conn):
    yield from dataplane.running_tiny_guest(libvirt_conn,
                                            memory_mib=GUEST_MB,
                                            autoswap=False)


@pytest.fixture(scope='module')
def dp(tmp_path_factory, shared_tgt, libvirt_conn):
    options = {
        'compute_node': {'usage_report_interval': 2,
                         'usage_sample_timeout': 20,
                         'guest_swapon': 'required',
                         'swapoff_headroom_mb': 16},
        # A shrink needs the prediction low for a minute: longer than
        # memhog's flat stretches between steps, so the lease does not
        # shrink while the workload still ramps up.
        'elastic': {'sample_interval': 2, 'resize_interval': 3,
                    'shrink_hysteresis': 60, 'model_order': 2,
                    'min_samples': 3},
    }
    stack = env.DataPlaneStack(tmp_path_factory.mktemp('elastic'),
                               shared_tgt, memory_mb=MAX_MB + 2 * STEP_MB,
                               step_mb=STEP_MB, options=options)
    try:
        stack.start()
        yield stack
    finally:
        stack.stop()


@pytest.fixture
def shell(guest, leases):
    """The guest's shell; after the test, a memhog it left running lets
    go of its memory before the leases are released (set up after
    ``leases``, so torn down before): the guest could not take its pages
    back otherwise."""
    shell = programs.GuestShell(guest.domain)
    shell.memhog = None
    yield shell
    try:
        shell.run('/bin/touch', FREE_FILE)
        deadline = time.monotonic() + 300
        while shell.memhog is not None and \
                not shell.status(shell.memhog)[0] and \
                time.monotonic() < deadline:
            time.sleep(1)
    except Exception:
        pass


@pytest.fixture
def leases(dp):
    """Leases of the test; whatever it leaves is released, so that the
    module's clean-up finds no target or extent."""
    made = []
    yield made
    dp.release_all()


def _lease(dp, lease_uuid):
    return dp.user.get('/leases/%s' % lease_uuid).json()


def _usage(dp, lease_uuid):
    """Every usage sample of the lease, page after page."""
    samples = []
    page = dp.user.get('/leases/%s/usage' % lease_uuid).json()
    while True:
        samples.extend(page['usage'])
        following = [link['href'] for link in page.get('links', ())
                     if link['rel'] == 'next']
        if not following or not page['usage']:
            return samples
        page = dp.user.get(following[0].split('/v1', 1)[1]).json()


def test_elastic_lease_follows_the_workload(dp, guest, leases, shell):
    try:
        programs.build_memhog()
    except build.GuestUnavailable as exc:
        dataplane.unavailable(str(exc))
    dp.user.headers['OpenStack-API-Version'] = 'composable 1.2'
    swaps_before = env.host_swaps()
    lease = dp.user.post('/leases', {
        'name': 'elastic-guest', 'memory_mb': MIN_MB, 'attach_mode': 'guest',
        'elastic': {'min_mb': MIN_MB, 'max_mb': MAX_MB,
                    'observation_window': 20, 'prediction_window': 10,
                    'headroom': 0.5}}, expect=201).json()
    leases.append(lease['uuid'])
    assert lease['elastic']['min_mb'] == MIN_MB
    since = guest.mark()
    bound = guest_lease._bind(dp, lease, guest)
    assert bound['memory_mb'] == MIN_MB
    assert len(bound['extents']) == MIN_MB // STEP_MB
    guest.wait_for_line(r'^new-disk vd[a-z]+ bytes=%d serial=' % (
        STEP_MB * env.MiB), guest_lease.GUEST_TIMEOUT, since=since)
    assert len(dataplane.domblklist(guest.uuid)) == MIN_MB // STEP_MB
    kept = [e['uuid'] for e in bound['extents']]

    # The compute agent reports the lease's use; idle, the lease stays at
    # its minimum.
    waiting.wait_until(lambda: len(_usage(dp, lease['uuid'])) >= 3, 120,
                       'the first usage samples', interval=1)
    assert _lease(dp, lease['uuid'])['memory_mb'] == MIN_MB

    # The workload: more than the guest's RAM, in steps.
    since = guest.mark()
    pid = shell.memhog = programs.start_memhog(
        shell, HOG_STEP_MB, HOG_INTERVAL_MS, HOG_PEAK_MB, FREE_FILE)
    sizes = [MIN_MB]

    def peaked():
        sizes.append(_lease(dp, lease['uuid'])['memory_mb'])
        exited, code, out, err = shell.status(pid)
        assert not exited, 'memhog ended early (%s): %s %s\n%s' % (
            code, out, err, '\n'.join(guest.marker_lines()[since:][-20:]))
        return any(line == 'memhog peak %d MiB' % HOG_PEAK_MB
                   for line in guest.marker_lines()[since:])
    waiting.wait_until(
        peaked, RAMP_TIMEOUT, 'memhog reaching its peak', interval=2,
        describe=lambda: 'lease sizes %s, last lines %s' % (
            sorted(set(sizes)), guest.marker_lines()[-5:]))

    # The lease grew while the workload did, and the guest never ran out.
    grown = max(sizes)
    assert grown > MIN_MB, sizes
    # The guest holds one disk per extent of the lease as it is now (a
    # resize still running settles first).
    waiting.wait_until(
        lambda: len(dataplane.domblklist(guest.uuid)) ==
        _lease(dp, lease['uuid'])['memory_mb'] // STEP_MB, 120,
        'one disk in the guest per extent of the lease', interval=1,
        describe=lambda: '%s disks, lease of %s MiB' % (
            len(dataplane.domblklist(guest.uuid)),
            _lease(dp, lease['uuid'])['memory_mb']))
    samples = _usage(dp, lease['uuid'])
    assert max(s['used_mb'] for s in samples) > MIN_MB, samples
    full = [s for s in samples if s['used_mb'] >= s['size_mb']]
    assert shell.oom_lines() == []

    # The workload lets go; the lease shrinks back to its minimum.
    since = guest.mark()
    shell.run('/bin/touch', FREE_FILE)
    guest.wait_for_line(r'^memhog freed %d MiB$' % HOG_PEAK_MB, 300,
                        since=since)
    waiting.wait_until(
        lambda: _lease(dp, lease['uuid'])['memory_mb'] == MIN_MB,
        SHRINK_TIMEOUT, 'the lease shrinking to its minimum', interval=2,
        describe=lambda: '%s; actions %s' % (
            _lease(dp, lease['uuid'])['memory_mb'],
            dp.actions(lease['uuid'])))
    shrunk = _lease(dp, lease['uuid'])
    assert shrunk['status'] == 'bound'
    assert [e['uuid'] for e in shrunk['extents']] == kept
    waiting.wait_until(
        lambda: len(dataplane.domblklist(guest.uuid)) == len(kept), 120,
        'the guest letting go of the disks of the shrink', interval=1)
    assert shell.oom_lines() == []

    # Every resize is in the lease's log with the prediction behind it.
    messages = [a for a in dp.admin.get(
        '/leases/%s/actions' % lease['uuid']).json()['actions']
        if a['action'] == 'resize']
    grows = [a for a in messages if a['result'] == 'success' and
             'Growing' in (a.get('message') or '')]
    shrinks = [a for a in messages if a['result'] == 'success' and
               'Shrinking' in (a.get('message') or '')]
    assert grows and shrinks, messages
    assert 'predicted peak' in grows[0]['message']
    # For whoever runs it with -s: what the lease went through.
    print('elastic_guest_lease: min_mb=%d max_size_mb=%d peak_used_mb=%d '
          'grows=%d shrinks=%d samples=%d full_samples=%d' % (
              MIN_MB, grown, max(s['used_mb'] for s in samples), len(grows),
              len(shrinks), len(samples), len(full)))

    # Nothing is left behind.
    extent_uuids = [e['uuid'] for e in bound['extents']]
    dp.user.delete('/leases/%s' % lease['uuid'])
    released = dp.user.wait_lease(lease['uuid'], ('released', 'error'),
                                  timeout=300)
    assert released['status'] == 'released', released['fault']
    assert dp.extent_files() == []
    assert dataplane.domblklist(guest.uuid) == []
    guest_lease.assert_nothing_left(dp, guest, extent_uuids, swaps_before)
    pools = {p['name']: p for p in dp.user.get('/pools').json()['pools']}
    assert pools['memory-pool']['used'] == 0
