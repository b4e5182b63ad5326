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

"""The real memory data plane under the real composable processes.

``DataPlaneStack`` runs composable-api, composable-conductor and two
composable-agents (``memory-0`` with the memory_node role and the ``tgt``
exporter; ``compute-0`` with the compute_node role) over RabbitMQ on
MariaDB. The memory node mounts a tmpfs of its own under the stack's work
directory and exports through a tgtd; the compute node hot-plugs leased
memory into libvirt guests (QEMU/TCG) on this machine.

The tgtd is the machine's own (127.0.0.1:3260, control port 0), or a
private one (``tgtd -f -C N --iscsi portal=127.0.0.1:P``) when a test is
going to kill it. Whatever cannot run here skips the tests, or fails them
when COMPOSABLE_REQUIRE_DATAPLANE=1.

Checks for leftovers look where an operator would: ``tgtadm --op show``,
the tmpfs directory, ``/proc/swaps`` and ``virsh domblklist``.
"""

import os
import re
import shutil
import socket
import subprocess
import sys
import time
import uuid

from tests.functional.compute_node import dataplane
from tests.functional import leftovers
from tests.functional import stack as stack_mod

RABBIT = os.environ.get('COMPOSABLE_TRANSPORT_URL',
                        'rabbit://guest:guest@127.0.0.1:5672/')
COMPUTE = 'compute-0'
MEMORY = 'memory-0'
INITIATOR = 'iqn.2026-11.org.openstack:%s' % COMPUTE
PRIVSEP_HELPER = ('privsep-helper --privsep_context '
                  'composable.privsep.sys_admin_pctxt')
SHARED_PORTAL = '127.0.0.1:3260'
TGTADM_WRAPPER = '''#!/bin/sh
case "$*" in
*"--op new --mode logicalunit"*)
    if [ -f %(flags)s/slow-lun ]; then
        touch %(flags)s/lun-reached
        sleep "$(cat %(flags)s/slow-lun)"
    fi
    ;;
esac
exec %(tgtadm)s -C %(port)s "$@"
'''
MiB = 1024 * 1024


def _listening(port):
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(('127.0.0.1', port)) == 0


def check_tools():
    """Skip (or fail) unless the data plane can run here."""
    if os.geteuid() != 0:
        dataplane.unavailable('the data-plane tests need root')
    # The agents' privsep daemons are started by the privsep-helper of
    # this Python's environment (tox puts it on PATH; a benchmark run with
    # the environment's interpreter directly does not).
    bindir = os.path.dirname(sys.executable)
    if bindir not in os.environ.get('PATH', '').split(os.pathsep):
        os.environ['PATH'] = bindir + os.pathsep + os.environ.get('PATH',
                                                                  '')
    for tool in ('tgtd', 'tgtadm', 'privsep-helper', 'virsh'):
        if not shutil.which(tool):
            dataplane.unavailable('%s is not installed' % tool)
    try:
        socket.create_connection(('127.0.0.1', 5672), timeout=2).close()
    except OSError:
        dataplane.unavailable('RabbitMQ is not running on 127.0.0.1:5672')


def mariadb_database():
    """(url, drop) of a new MariaDB database."""
    try:
        import pymysql
        conn = pymysql.connect(host='127.0.0.1', user='root', password='')
    except Exception as exc:
        dataplane.unavailable('MariaDB unreachable: %s' % exc)
    name = 'composable_dp_%s_%s' % (leftovers.run_tag(), uuid.uuid4().hex[:6])
    conn.cursor().execute('CREATE DATABASE %s CHARACTER SET utf8mb4' % name)

    def drop():
        conn.cursor().execute('DROP DATABASE IF EXISTS %s' % name)
        conn.close()
    return 'mysql+pymysql://root@127.0.0.1/%s?charset=utf8mb4' % name, drop


class Tgt(object):
    """tgtadm against one tgtd: the shared one (control port 0) or a
    private one started here."""

    def __init__(self, private=False):
        self.daemon = None
        if private:
            self.daemon = dataplane.TgtDaemon()
            self.control_port = self.daemon.control_port
            self.portal = self.daemon.portal
        else:
            if not _listening(3260):
                dataplane.unavailable('no tgtd listens on %s' %
                                      SHARED_PORTAL)
            self.control_port = 0
            self.portal = SHARED_PORTAL

    def show(self):
        out = subprocess.run(
            ['tgtadm', '-C', str(self.control_port), '--lld', 'iscsi',
             '--op', 'show', '--mode', 'target'],
            capture_output=True, text=True, timeout=30)
        return out.stdout if out.returncode == 0 else ''

    def delete_targets_under(self, directory):
        """Delete every target of this tgtd with a LUN backed by a file
        under ``directory``."""
        prefix = os.path.join(directory, '')
        tid = None
        doomed = set()
        for line in self.show().splitlines():
            found = re.match(r'^Target (\d+): ', line)
            if found:
                tid = found.group(1)
                continue
            line = line.strip()
            if tid and line.startswith('Backing store path: ') and \
                    line.split(': ', 1)[1].startswith(prefix):
                doomed.add(tid)
        for tid in sorted(doomed):
            subprocess.run(
                ['tgtadm', '-C', str(self.control_port), '--lld', 'iscsi',
                 '--op', 'delete', '--mode', 'target', '--force', '--tid',
                 tid], capture_output=True, timeout=30)
        return sorted(doomed)

    def targets_of(self, extent_uuids):
        text = self.show()
        return [u for u in extent_uuids if u in text]

    def kill(self):
        self.daemon.proc.kill()
        self.daemon.proc.wait(10)

    def restart(self):
        """Start the private tgtd again on the same ports."""
        log = open(self.daemon.log_path, 'ab')
        self.daemon.proc = subprocess.Popen(
            ['tgtd', '-f', '-C', str(self.control_port), '--iscsi',
             'portal=%s' % self.portal], stdout=log,
            stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 15
        port = int(self.portal.rsplit(':', 1)[1])
        while not (_listening(port) and self._answers()):
            if time.monotonic() > deadline:
                raise RuntimeError('tgtd did not restart')
            time.sleep(0.2)

    def _answers(self):
        return subprocess.run(
            ['tgtadm', '-C', str(self.control_port), '--op', 'show',
             '--mode', 'target'], capture_output=True,
            timeout=30).returncode == 0

    def stop(self):
        if self.daemon is not None:
            self.daemon.stop()


class DataPlaneStack(object):
    """The processes, the inventory, and the checks."""

    def __init__(self, workdir, tgt, memory_mb=512, step_mb=128,
                 bind_timeout=60, reconcile_interval=None,
                 reconcile_backoff=1, reconcile_max_backoff=8,
                 options=None):
        check_tools()
        self.workdir = str(workdir)
        self.tgt = tgt
        self.tmpfs = os.path.join(self.workdir, 'memory')
        os.makedirs(self.tmpfs, exist_ok=True)
        self.db_url, self._drop = mariadb_database()
        extra = {
            'agent': {'memory_exporter': 'tgt', 'report_interval': 5},
            'memory_node': {'tmpfs_path': self.tmpfs,
                            'tmpfs_size_mb': memory_mb + 64,
                            'manage_mount': 'true',
                            'portal': tgt.portal},
            'compute_node': {'initiator_iqn': INITIATOR,
                             'libvirt_uri': dataplane.LIBVIRT_URI,
                             'attach_timeout': 30,
                             'detach_timeout': 30,
                             # Real memory, simulated devices: the fake
                             # fabric composes nothing into this machine.
                             'pci_backend': 'noop'},
            'composable_sys_admin': {
                'helper_command': self._helper_command()},
        }
        if reconcile_interval is not None:
            # Short waits, so a test sees the reconciler converge within
            # seconds of a fault.
            extra['conductor'] = {
                'reconcile_interval': reconcile_interval,
                'reconcile_retry_backoff': reconcile_backoff,
                'reconcile_retry_max_backoff': reconcile_max_backoff}
        # More options of the processes, by group; they win over the
        # ones above.
        for group, values in (options or {}).items():
            extra.setdefault(group, {}).update(values)
        self.stack = stack_mod.Stack(self.workdir, self.db_url, RABBIT,
                                     bind_timeout=bind_timeout, extra=extra)
        self.memory_mb = memory_mb
        self.step_mb = step_mb
        self.endpoint = self.stack.endpoint

    def _helper_command(self):
        """The privsep daemon of the memory agent; with a private tgtd,
        it finds a ``tgtadm`` first on its PATH that talks to that tgtd
        (``-C``) and that can be made slow (``slow_lun``), so a test can
        kill something in the middle of an export."""
        if self.tgt.control_port == 0:
            return PRIVSEP_HELPER
        bindir = os.path.join(self.workdir, 'bin')
        os.makedirs(bindir, exist_ok=True)
        self.flags = os.path.join(self.workdir, 'flags')
        os.makedirs(self.flags, exist_ok=True)
        wrapper = os.path.join(bindir, 'tgtadm')
        with open(wrapper, 'w') as f:
            f.write(TGTADM_WRAPPER % {'flags': self.flags,
                                      'tgtadm': shutil.which('tgtadm'),
                                      'port': self.tgt.control_port})
        os.chmod(wrapper, 0o755)
        return 'env PATH=%s:%s %s' % (bindir, os.environ.get('PATH', ''),
                                      PRIVSEP_HELPER)

    def slow_lun(self, seconds):
        """Make the next LUN creations take ``seconds`` more; returns
        the file that appears once one is under way."""
        reached = os.path.join(self.flags, 'lun-reached')
        if os.path.exists(reached):
            os.unlink(reached)
        with open(os.path.join(self.flags, 'slow-lun'), 'w') as f:
            f.write(str(seconds))
        return reached

    def fast_lun(self):
        for name in ('slow-lun', 'lun-reached'):
            path = os.path.join(self.flags, name)
            if os.path.exists(path):
                os.unlink(path)

    def start(self):
        s = self.stack
        s.dbsync()
        s.start_conductor('conductor-0')
        s.wait_conductor('conductor-0')
        self.start_agents()
        s.start_api()
        self.admin = stack_mod.Client(s.endpoint, project='admin')
        self.user = stack_mod.Client(s.endpoint, project='project-a',
                                     roles='member,reader')
        self.admin.post('/fabrics', {'name': 'fabric-0', 'driver': 'fake'},
                        expect=201)
        self.admin.post('/hosts', {'name': COMPUTE, 'fabric': 'fabric-0',
                                   'initiator_iqn': INITIATOR}, expect=201)
        self.admin.post('/pools', {'name': 'memory-pool', 'kind': 'memory',
                                   'fabric': 'fabric-0',
                                   'step_size': self.step_mb}, expect=201)
        self.admin.post('/memory_nodes', {
            'name': MEMORY, 'pool': 'memory-pool',
            'capacity_mb': self.memory_mb, 'exporter': 'tgt',
            'portal': self.tgt.portal}, expect=201)
        self.wait_mounted()
        return self

    def start_agents(self):
        self.start_agent(MEMORY)
        self.start_agent(COMPUTE)

    def start_agent(self, name, wait=False, timeout=300):
        """Start the agent ``name``; with ``wait``, return once it takes
        RPC requests (a call sent before its queue exists is lost)."""
        roles = 'memory_node' if name == MEMORY else 'compute_node'
        serving = 'Serving RPC topic composable-agent as %s' % name
        before = '\n'.join(self.stack.log(name)).count(serving)
        proc = self.stack.start_agent(name, roles=roles)
        deadline = time.monotonic() + timeout
        while wait and '\n'.join(self.stack.log(name)).count(
                serving) <= before:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError('agent %s does not take requests:\n%s'
                                     % (name, self.logs(name)))
            time.sleep(0.2)
        return proc

    def wait_mounted(self, timeout=120):
        deadline = time.monotonic() + timeout
        while not os.path.ismount(self.tmpfs):
            if self.stack.procs[MEMORY].poll() is not None or \
                    time.monotonic() > deadline:
                raise AssertionError('the memory agent did not mount its '
                                     'tmpfs:\n%s' % self.logs(MEMORY))
            time.sleep(0.2)

    def logs(self, name):
        return '\n'.join(text[-4000:] for text in self.stack.log(name))

    def stop(self):
        """Stop the processes, then remove what they may have left even
        after a failed test: targets serving files of the tmpfs (tgtd
        keeps those open, and the tmpfs busy), the tmpfs, the database.
        Each step runs whatever happened to the one before."""
        try:
            self.stack.stop()
        finally:
            try:
                self.tgt.delete_targets_under(self.tmpfs)
            finally:
                try:
                    self._umount()
                finally:
                    self._drop()

    def _umount(self, timeout=30):
        deadline = time.monotonic() + timeout
        while os.path.ismount(self.tmpfs):
            done = subprocess.run(['umount', self.tmpfs], timeout=30,
                                  capture_output=True, text=True)
            if done.returncode == 0:
                return
            if time.monotonic() > deadline:
                raise AssertionError('the tmpfs %s stays busy: %s' % (
                    self.tmpfs, done.stderr.strip()))
            time.sleep(0.5)

    # ------------------------------------------------------------ checks

    def extent_files(self, extent_uuids=None):
        """The extent files in the memory node's tmpfs; those of
        ``extent_uuids`` only when given."""
        return sorted(f for f in os.listdir(self.tmpfs)
                      if f.startswith('extent-') and (
                          extent_uuids is None or
                          f[len('extent-'):] in extent_uuids))

    def release_all(self, timeout=300):
        """Delete every lease that is not released and wait until they
        are: what a test that failed halfway left does not spill into the
        next one."""
        # A test that failed with a process killed left it dead.
        for name in (MEMORY, COMPUTE):
            if name not in self.stack.procs:
                self.start_agent(name, wait=True)
        if 'conductor-0' not in self.stack.procs:
            self.stack.start_conductor('conductor-0')
        if self.tgt.daemon is not None and \
                self.tgt.daemon.proc.poll() is not None:
            self.tgt.restart()
        leases = self.user.get('/leases?limit=1000').json()['leases']
        left = [lease['uuid'] for lease in leases
                if lease['status'] != 'released']
        for lease_uuid in left:
            self.user.delete('/leases/%s' % lease_uuid, expect=None)
        for lease_uuid in left:
            self.user.wait_lease(lease_uuid, ('released',), timeout=timeout)

    def actions(self, lease_uuid):
        """(action, result) of the lease, oldest first."""
        return [(a['action'], a['result']) for a in self.admin.get(
            '/leases/%s/actions' % lease_uuid).json()['actions']]

    def marked_exports(self, lease_uuid):
        """The extents of the lease the database says may be exported:
        exported, or with CHAP credentials (given just before an export
        is asked for, taken away once it is removed)."""
        return [e['uuid'] for e in self.extent_secrets(lease_uuid)
                if e['export_state'] == 'exported' or e['chap_username']]

    def wait_reconciled(self, lease_uuid, statuses, extent_uuids,
                        timeout=300):
        """Wait, without any request on the lease, until the lease is in
        one of ``statuses``, nothing of it may be exported any more, and
        tgtd serves no target of its extents (``extent_uuids``: a
        released lease has no extent rows any more); returns the
        lease."""
        deadline = time.monotonic() + timeout
        uuids = list(extent_uuids)
        while True:
            lease = self.admin.get('/leases/%s' % lease_uuid).json()
            # A repair is over once its action has ended too: the marks
            # are cleared before the action is, so they alone would let
            # the test read the log in between.
            if lease['status'] in statuses and \
                    not self.marked_exports(lease_uuid) and \
                    not self.tgt.targets_of(uuids) and \
                    not [a for a in self.actions(lease_uuid)
                         if a[1] == 'running']:
                return lease
            if time.monotonic() > deadline:
                raise AssertionError(
                    'the reconciler did not converge on lease %s: %s '
                    '(fault %s), marked exports %s, targets %s, actions %s'
                    % (lease_uuid, lease['status'], lease.get('fault'),
                       self.marked_exports(lease_uuid),
                       self.tgt.targets_of(uuids),
                       self.actions(lease_uuid)))
            time.sleep(0.5)

    def extent_secrets(self, lease_uuid):
        """(username, secret) of each extent, read from the database as
        an operator could; the API never shows them."""
        import sqlalchemy as sa
        engine = sa.create_engine(self.db_url)
        try:
            with engine.connect() as conn:
                rows = conn.execute(sa.text(
                    'SELECT e.uuid, e.chap_username, e.chap_secret, '
                    'e.target_iqn, e.lun, e.export_state FROM '
                    'memory_extents e JOIN '
                    'leases l ON e.lease_id = l.id WHERE l.uuid = :u '
                    'ORDER BY e.`index`'), {'u': lease_uuid}).fetchall()
        finally:
            engine.dispose()
        return [dict(r._mapping) for r in rows]


def host_swaps():
    with open('/proc/swaps') as f:
        return f.read().splitlines()[1:]
