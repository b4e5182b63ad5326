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

"""The libvirt hook under the machine's real libvirtd.

composable-libvirt-hook is installed into /etc/libvirt/hooks/qemu.d/
(``--install``, the launcher an operator installs), reading the
configuration file of this stack's compute-0 agent, and libvirtd is told
to look at its hooks again (SIGHUP; restored at the end). The processes
are those of the data-plane tests (tests/functional/dataplane/env.py:
API, conductor, a memory agent exporting through tgtd, compute-0's agent
answering the hook); the guest is the tiny TCG guest of
tests/functional/guest, defined with the metadata Nova writes into its
domains.

What is checked, as an operator would see it:

* a guest-mode memory lease linked to an instance is bound when its
  domain starts (the export is made at prepare, the disk appears in the
  guest once it runs: its serial console says so), unbound when it stops
  (the lease is ``reserved`` again and still the instance's, the export is
  gone), and bound again at the next start;
* a domain without Nova metadata and without lease starts untouched;
* a lease that cannot be bound makes ``virsh start`` fail with the
  reason (``[compute_node]hook_failure = abort``).

libvirtd, QEMU, tgtd, RabbitMQ and MariaDB are real; whatever is missing
skips the tests, or fails them with COMPOSABLE_REQUIRE_DATAPLANE=1.
"""

import contextlib
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import uuid

import pytest

from composable.agent.compute_node import libvirt_guest
from composable.hooks import libvirt as hook
from tests.functional.compute_node import dataplane
from tests.functional.dataplane import env
from tests.functional.guest import build
from tests.functional.hooks import nova_domain
from tests.functional import leftovers

HOOKS_DIR = '/etc/libvirt/hooks'
QEMU_D = os.path.join(HOOKS_DIR, 'qemu.d')
LEASE_MB = 128
GUEST_TIMEOUT = 300
# The agent re-reads which instances have leases this often; links made
# in the database behind its back (as the scheduler hint's are) are seen
# within that time.
REFRESH = 1


def _libvirtd_pid():
    for name in ('libvirtd', 'virtqemud'):
        out = subprocess.run(['pgrep', '-x', name], capture_output=True,
                             text=True).stdout.split()
        if out:
            return int(out[0])
    return None


def _hooks_present():
    """Does libvirtd find a qemu hook at all (it only looks at start and
    on SIGHUP)?"""
    main = os.path.join(HOOKS_DIR, 'qemu')
    if os.access(main, os.X_OK) and os.path.isfile(main):
        return True
    if not os.path.isdir(QEMU_D):
        return False
    return any(os.access(os.path.join(QEMU_D, name), os.X_OK)
               for name in os.listdir(QEMU_D))


def _reload_libvirtd():
    pid = _libvirtd_pid()
    if pid is None:
        dataplane.unavailable('no libvirtd runs')
    os.kill(pid, signal.SIGHUP)
    # The reload runs in a thread of libvirtd; wait until it answers.
    deadline = time.monotonic() + 30
    time.sleep(1)
    while subprocess.run(['virsh', '-c', dataplane.LIBVIRT_URI, 'version'],
                         capture_output=True).returncode:
        assert time.monotonic() < deadline, 'libvirtd did not come back'
        time.sleep(0.5)


@contextlib.contextmanager
def installed_hook(config_file):
    """The hook in qemu.d for the block; libvirtd as it was afterwards."""
    if os.geteuid() != 0:
        dataplane.unavailable('installing a libvirt hook needs root')
    made_dirs = [d for d in (HOOKS_DIR, QEMU_D) if not os.path.isdir(d)]
    had_hooks = _hooks_present()
    # The run's tag in the name: another run's leftover check, on the same
    # machine, leaves this file alone.
    path = os.path.join(QEMU_D, '50-composable-test-%s-%s' % (
        leftovers.run_tag(), uuid.uuid4().hex[:8]))
    hook.install(['--install', '--hook', path, '--config-file', config_file],
                 open(os.devnull, 'w'))
    try:
        if not had_hooks:
            _reload_libvirtd()
        yield path
    finally:
        os.unlink(path)
        for directory in reversed(made_dirs):
            try:
                os.rmdir(directory)
            except OSError:
                pass
        if not had_hooks:
            _reload_libvirtd()


@pytest.fixture(scope='module')
def image():
    try:
        return build.build()
    except build.GuestUnavailable as exc:
        dataplane.unavailable(str(exc))


@pytest.fixture(scope='module')
def hdp(tmp_path_factory, libvirt_conn):
    """The processes, compute-0's agent answering the hook, and the hook
    installed in libvirtd."""
    workdir = tmp_path_factory.mktemp('hook')
    stack = env.DataPlaneStack(workdir, env.Tgt())
    extra = stack.stack.extra
    extra['compute_node'].update({
        'hook_socket': os.path.join(str(workdir), 'hook.sock'),
        'hook_failure': 'abort', 'hook_prepare_timeout': 90,
        'hook_release_timeout': 60,
        'hook_cache_refresh_interval': REFRESH})
    extra.setdefault('DEFAULT', {})['debug'] = 'true'
    try:
        stack.start()
        # The hook reads [compute_node] from the agent's own file.
        with installed_hook(os.path.join(str(workdir), '%s.conf' %
                                         env.COMPUTE)):
            yield stack
    finally:
        stack.stop()


class NovaGuest(build.RunningGuest):
    """The tiny guest, defined as Nova would (its metadata), not
    started."""

    def start(self, timeout=GUEST_TIMEOUT):
        """Start the domain and wait for the guest to boot; returns the
        mark of its serial log to wait for its later lines from."""
        # QEMU truncates the serial log at each start.
        if os.path.exists(self.serial_log):
            os.unlink(self.serial_log)
        self.domain.create()
        self.wait_for_line('^booted$', timeout, 'its boot marker')
        return 0

    def stop(self):
        self.domain.destroy()


@contextlib.contextmanager
def nova_guest(conn, image, nova=True, **metadata):
    name = 'composable-test-hook-%s-%s' % (leftovers.run_tag(),
                                           uuid.uuid4().hex[:6])
    run_dir = tempfile.mkdtemp(prefix='run-%s-' % name,
                               dir=build.cache_dir())
    os.chmod(run_dir, 0o755)
    serial_log = os.path.join(run_dir, 'serial.log')
    xml = build.domain_xml(name, image, serial_log, memory_mib=256,
                           domain_uuid=str(uuid.uuid4()))
    if nova:
        xml = nova_domain.add_metadata(xml, name='server-%s' % name,
                                       **metadata)
    guest = NovaGuest(conn, conn.defineXML(xml), serial_log, run_dir)
    try:
        yield guest
    finally:
        guest.destroy()
        shutil.rmtree(run_dir, ignore_errors=True)


def _agent_log(dp):
    return '\n'.join(dp.stack.log(env.COMPUTE))


def _wait_log(dp, pattern, timeout=300):
    deadline = time.monotonic() + timeout
    while not re.search(pattern, _agent_log(dp)):
        assert time.monotonic() < deadline, (
            'the agent never logged %r:\n%s' % (pattern,
                                                _agent_log(dp)[-3000:]))
        time.sleep(0.2)


REFRESHED = re.compile(r'instance\(s\) have leases reachable from')


def _link(dp, lease_uuid, instance_uuid, timeout=300):
    """Link a reserved lease to an instance in the database, as the
    composable_lease scheduler hint does (the conductor does it when Nova
    tells it the instance was created), and wait until the agent's hook
    cache has been refreshed from the database since."""
    import sqlalchemy as sa
    refreshes = len(REFRESHED.findall(_agent_log(dp)))
    engine = sa.create_engine(dp.db_url)
    try:
        with engine.begin() as conn:
            conn.execute(sa.text('UPDATE leases SET instance_uuid = :i '
                                 'WHERE uuid = :u'),
                         {'i': instance_uuid, 'u': lease_uuid})
    finally:
        engine.dispose()
    # The refresh that ends second from now started after the update.
    deadline = time.monotonic() + timeout
    while len(REFRESHED.findall(_agent_log(dp))) < refreshes + 2:
        assert time.monotonic() < deadline, (
            'the agent did not refresh its hook cache:\n%s' %
            _agent_log(dp)[-3000:])
        time.sleep(0.2)


def _secret_defined(conn, extent_uuid):
    import libvirt
    try:
        conn.secretLookupByUsage(libvirt.VIR_SECRET_USAGE_TYPE_ISCSI,
                                 libvirt_guest.secret_usage(extent_uuid))
    except libvirt.libvirtError:
        return False
    return True


def _guest_got(guest, extent_uuid, since):
    serial = libvirt_guest.disk_serial(extent_uuid)
    seen = guest.wait_for_line(
        r'^new-disk (vd[a-z]+) bytes=(\d+) serial=%s$' % serial,
        GUEST_TIMEOUT, what='the disk of extent %s' % extent_uuid,
        since=since)
    assert int(seen.group(2)) == LEASE_MB * env.MiB
    guest.wait_for_line(r'^swap-on %s ok$' % seen.group(1), GUEST_TIMEOUT,
                        since=since)


def test_a_domain_without_nova_or_lease_starts_untouched(hdp, libvirt_conn,
                                                         image):
    with nova_guest(libvirt_conn, image, nova=False) as guest:
        started = time.monotonic()
        guest.start()
        _wait_log(hdp, 'libvirt hook prepare: instance %s has no lease' %
                  guest.uuid)
        assert dataplane.domblklist(guest.uuid) == []
        guest.stop()
        _wait_log(hdp, 'libvirt hook stopped: instance %s has no lease' %
                  guest.uuid)
        assert time.monotonic() - started < GUEST_TIMEOUT
    assert hdp.user.get('/leases').json()['leases'] == []


def test_a_lease_that_cannot_be_bound_stops_the_start(hdp, libvirt_conn,
                                                      image):
    # The pool is full when the lease is made: it holds nothing.
    everything = hdp.user.post('/leases', {'name': 'everything',
                                           'memory_mb': hdp.memory_mb},
                               expect=201).json()
    lease = hdp.user.post('/leases', {'name': 'too-late',
                                      'memory_mb': LEASE_MB,
                                      'attach_mode': 'guest'},
                          expect=201).json()
    assert lease['status'] == 'alloc_failed'
    hdp.user.delete('/leases/%s' % everything['uuid'])
    with nova_guest(libvirt_conn, image) as guest:
        _link(hdp, lease['uuid'], guest.uuid)
        result = subprocess.run(['virsh', '-c', dataplane.LIBVIRT_URI,
                                 'start', guest.name], capture_output=True,
                                text=True, timeout=180)
        assert result.returncode != 0, result.stdout
        # What Nova would show: libvirt passes the hook's message on.
        assert 'Hook script execution failed' in result.stderr, result.stderr
        assert 'composable:' in result.stderr, result.stderr
        assert lease['uuid'] in result.stderr
        assert 'holds no resources' in result.stderr
        assert not guest.domain.isActive()
    hdp.user.delete('/leases/%s' % lease['uuid'])


def test_leases_follow_the_domain_start_stop_start(hdp, libvirt_conn,
                                                   image):
    swaps_before = env.host_swaps()
    lease = hdp.user.post('/leases', {'name': 'hooked',
                                      'memory_mb': LEASE_MB,
                                      'attach_mode': 'guest'},
                          expect=201).json()
    assert lease['status'] == 'reserved', lease
    [extent] = lease['extents']
    with nova_guest(libvirt_conn, image) as guest:
        _link(hdp, lease['uuid'], guest.uuid)

        # Start: bound at prepare, plugged once the guest runs.
        since = guest.start()
        bound = hdp.user.get('/leases/%s' % lease['uuid']).json()
        assert bound['status'] == 'bound', bound['fault']
        assert bound['host'] == env.COMPUTE
        assert bound['instance_uuid'] == guest.uuid
        assert hdp.tgt.targets_of([extent['uuid']]) == [extent['uuid']]
        _guest_got(guest, extent['uuid'], since)
        assert dataplane.domblklist(guest.uuid) == ['vdb']

        # Stop: unbound, back to reserved, still the instance's.
        guest.stop()
        stopped = hdp.user.wait_lease(lease['uuid'], ('reserved', 'error'),
                                      timeout=300)
        assert stopped['status'] == 'reserved', stopped['fault']
        assert stopped['instance_uuid'] == guest.uuid
        assert stopped['host'] is None
        assert hdp.tgt.targets_of([extent['uuid']]) == []
        assert not _secret_defined(libvirt_conn, extent['uuid'])
        # The memory is kept (not released) for the next start.
        assert hdp.extent_files() == ['extent-%s' % extent['uuid']]

        # Start again: bound again.
        since = guest.start()
        again = hdp.user.get('/leases/%s' % lease['uuid']).json()
        assert again['status'] == 'bound', again['fault']
        assert hdp.tgt.targets_of([extent['uuid']]) == [extent['uuid']]
        _guest_got(guest, extent['uuid'], since)
        guest.stop()
        final = hdp.user.wait_lease(lease['uuid'], ('reserved', 'error'),
                                    timeout=300)
        assert final['status'] == 'reserved', final['fault']
        actions = [(a['action'], a['result']) for a in hdp.user.get(
            '/leases/%s/actions' % lease['uuid']).json()['actions']]
        # The domain stopping unbinds the lease as 'stop': it stays the
        # instance's.
        assert actions == [('create', 'success'), ('bind', 'success'),
                           ('stop', 'success'), ('bind', 'success'),
                           ('stop', 'success')]

    hdp.user.delete('/leases/%s' % lease['uuid'])
    released = hdp.user.wait_lease(lease['uuid'], ('released', 'error'),
                                   timeout=300)
    assert released['status'] == 'released', released['fault']
    assert hdp.tgt.targets_of([extent['uuid']]) == []
    assert hdp.extent_files() == []
    assert env.host_swaps() == swaps_before
