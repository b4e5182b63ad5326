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

"""What the functional tests and the benchmarks leave outside their own
process, found and removed.

A test that fails, times out or is interrupted must still remove what it
made on the machine: the next run would otherwise fail for reasons nobody
can see (a tmpfs still mounted, tgtd refusing to stop while it holds a
target, a guest eating a core). The fixtures clean up after themselves;
this module checks that they did, the way an operator would look:

- processes: every process started by the run carries ``TAG_VAR`` in its
  environment (set once by the run; children inherit it), so one that
  outlives the run is found wherever it was re-parented;
- mounts: ``/proc/mounts``;
- tgt targets of the machine's tgtd with composable's IQN prefixes
  (``tgtadm --op show``);
- libvirt domains named ``composable-test-*`` and libvirt secrets whose
  usage starts with ``composable-``;
- swap areas (``/proc/swaps``);
- MariaDB and PostgreSQL databases named ``composable_*``;
- RabbitMQ virtual hosts named ``composable-test-*``;
- libvirt hook files named ``50-composable-test-*``.

Everything but the processes is compared with a snapshot taken when the
run started, so the machine's own objects are never touched.
:func:`clean` removes what :func:`find` reports, in an order that works
(processes, then guests, then what they used).
"""

import contextlib
import glob
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid

TAG_VAR = 'COMPOSABLE_TEST_RUN'
# Daemons a test may start when the machine lacks them, and leaves running
# on purpose for the other tests and services of the machine.
MACHINE_DAEMONS = frozenset(['libvirtd', 'virtlogd', 'virtlockd', 'epmd'])
IQN_PREFIXES = ('iqn.2010-10.org.openstack.composable',)
DOMAIN_PREFIX = 'composable-test-'
SECRET_PREFIX = 'composable-'
DATABASE_PREFIX = 'composable_'
VHOST_PREFIX = 'composable-test-'
HOOK_GLOB = '/etc/libvirt/hooks/qemu.d/50-composable-test-*'
LIBVIRT_URI = os.environ.get('COMPOSABLE_TEST_LIBVIRT_URI',
                             'qemu:///system')
KINDS = ('process', 'libvirt domain', 'libvirt secret', 'swap',
         'tgt target', 'mount', 'database', 'rabbitmq vhost', 'hook file')


def tag_this_run():
    """Give every process started from now on the run's tag; returns it.
    Names of databases, RabbitMQ virtual hosts and libvirt domains made
    by the run carry it too, so that the check tells them from those of
    another run on the same machine."""
    return os.environ.setdefault(TAG_VAR, uuid.uuid4().hex[:10])


run_tag = tag_this_run
# The kinds whose names carry the run's tag: only those count.
TAGGED_KINDS = ('libvirt domain', 'database', 'rabbitmq vhost')


def _run(*cmd, timeout=60):
    try:
        return subprocess.run(cmd, capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return None


# ---------------------------------------------------------------- listing

def _processes():
    tag = os.environ.get(TAG_VAR)
    if not tag:
        return {}
    wanted = ('%s=%s' % (TAG_VAR, tag)).encode()
    own = os.getpid()
    found = {}
    for path in glob.glob('/proc/[0-9]*'):
        pid = int(path[6:])
        if pid == own:
            continue
        try:
            with open(path + '/environ', 'rb') as f:
                if wanted not in f.read().split(b'\0'):
                    continue
            with open(path + '/comm') as f:
                if f.read().strip() in MACHINE_DAEMONS:
                    continue
            with open(path + '/cmdline', 'rb') as f:
                cmdline = f.read().replace(b'\0', b' ').decode(
                    'utf-8', 'replace').strip()
        except OSError:
            continue  # gone, or a kernel thread
        found['%d %s' % (pid, cmdline[:200])] = pid
    return found


def _mounts():
    found = {}
    with open('/proc/mounts') as f:
        for line in f:
            fields = line.split()
            point = fields[1].replace('\\040', ' ')
            found['%s (%s)' % (point, fields[2])] = point
    return found


def _tgt_targets():
    result = _run('tgtadm', '--lld', 'iscsi', '--op', 'show', '--mode',
                  'target')
    if result is None or result.returncode:
        return {}
    found = {}
    current = None
    for line in result.stdout.splitlines():
        target = re.match(r'^Target (\d+): (\S+)$', line)
        if target:
            tid, iqn = target.groups()
            current = None
            if iqn.startswith(IQN_PREFIXES):
                current = found[iqn] = (int(tid), [])
            continue
        line = line.strip()
        if current is not None and line.startswith('Backing store path: '):
            current[1].append(line.split(': ', 1)[1])
    return found


def _libvirt():
    try:
        import libvirt
    except ImportError:
        return None
    try:
        libvirt.registerErrorHandler(lambda ctx, err: None, None)
        return libvirt.open(LIBVIRT_URI)
    except libvirt.libvirtError:
        return None


def _domains():
    conn = _libvirt()
    if conn is None:
        return {}
    try:
        return {d.name(): d.name() for d in conn.listAllDomains()
                if d.name().startswith(DOMAIN_PREFIX)}
    finally:
        conn.close()


def _secrets():
    conn = _libvirt()
    if conn is None:
        return {}
    try:
        found = {}
        for secret in conn.listAllSecrets():
            usage = secret.usageID() or ''
            if usage.startswith(SECRET_PREFIX):
                found[usage] = secret.UUIDString()
        return found
    finally:
        conn.close()


def _swaps():
    try:
        with open('/proc/swaps') as f:
            lines = f.read().splitlines()[1:]
    except OSError:
        return {}
    return {line.split()[0]: line.split()[0] for line in lines if line}


def _mariadb():
    try:
        import pymysql
        return pymysql.connect(host='127.0.0.1', user='root', password='',
                               connect_timeout=5, autocommit=True)
    except Exception:
        return None


def _postgresql():
    try:
        import psycopg2
        conn = psycopg2.connect(host='127.0.0.1', user='postgres',
                                dbname='postgres', connect_timeout=5)
        conn.autocommit = True
        return conn
    except Exception:
        return None


def _databases():
    found = {}
    for backend, connect, query in (
            ('mysql', _mariadb, 'SHOW DATABASES'),
            ('postgresql', _postgresql, 'SELECT datname FROM pg_database')):
        conn = connect()
        if conn is None:
            continue
        try:
            with conn.cursor() as cur:
                cur.execute(query)
                for (name,) in cur.fetchall():
                    if name.startswith(DATABASE_PREFIX):
                        found['%s:%s' % (backend, name)] = (backend, name)
        finally:
            conn.close()
    return found


def _vhosts():
    result = _run('rabbitmqctl', '-q', 'list_vhosts', 'name')
    if result is None or result.returncode:
        return {}
    return {line.strip(): line.strip() for line in result.stdout.splitlines()
            if line.strip().startswith(VHOST_PREFIX)}


def _hook_files():
    return {path: path for path in glob.glob(HOOK_GLOB)}


_LISTERS = {
    'process': _processes,
    'mount': _mounts,
    'tgt target': _tgt_targets,
    'libvirt domain': _domains,
    'libvirt secret': _secrets,
    'swap': _swaps,
    'database': _databases,
    'rabbitmq vhost': _vhosts,
    'hook file': _hook_files,
}


def snapshot():
    """What is there now, of every kind (processes excepted: those are
    found by the run's tag)."""
    return {kind: set(lister()) for kind, lister in _LISTERS.items()
            if kind != 'process'}


def other_runs():
    """The tags of other test runs or benchmarks alive on the machine."""
    ours = os.environ.get(TAG_VAR)
    found = set()
    for path in glob.glob('/proc/[0-9]*/environ'):
        try:
            with open(path, 'rb') as f:
                entries = f.read().split(b'\0')
        except OSError:
            continue
        for entry in entries:
            if entry.startswith(TAG_VAR.encode() + b'='):
                tag = entry.split(b'=', 1)[1].decode('ascii', 'replace')
                if tag != ours:
                    found.add(tag)
    return found


def find(before, mount_roots=()):
    """{kind: {name: handle}} of what this run made since ``before`` (a
    snapshot) and is still there.

    Processes, databases, virtual hosts and domains carry the run's tag;
    hook files carry it too, but count untagged while the run is alone.
    Mounts and tgt targets belong to the run when they (or the files a
    target serves) are under ``mount_roots`` or carry the tag. What
    cannot be told apart (libvirt secrets, swap areas, other new mounts
    and targets) counts only while no other run is alive on the machine:
    then it can only be this run's.
    """
    tag = os.environ.get(TAG_VAR) or '-'
    roots = tuple(os.path.join(str(r), '') for r in mount_roots)

    def ours(path):
        return tag in path or os.path.join(path, '').startswith(roots)

    alone = not other_runs()
    left = {}
    for kind in KINDS:
        now = _LISTERS[kind]()
        new = {name: handle for name, handle in now.items()
               if name not in before.get(kind, ())}
        if kind in TAGGED_KINDS:
            new = {name: handle for name, handle in new.items()
                   if tag in name}
        elif kind == 'mount' and not alone:
            new = {name: point for name, point in new.items()
                   if ours(point)}
        elif kind == 'tgt target' and not alone:
            new = {name: handle for name, handle in new.items()
                   if any(ours(path) for path in handle[1])}
        elif kind == 'hook file' and not alone:
            new = {name: path for name, path in new.items() if tag in name}
        elif kind in ('libvirt secret', 'swap') and not alone:
            new = {}
        if new:
            left[kind] = new
    return left


def describe(left):
    return '\n'.join('  %s: %s' % (kind, name)
                     for kind in KINDS for name in sorted(left.get(kind, {})))


# ---------------------------------------------------------------- removal

def _kill(pids):
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(
            os.path.exists('/proc/%d' % pid) and not _zombie(pid)
            for pid in pids):
        time.sleep(0.1)


def _zombie(pid):
    try:
        with open('/proc/%d/stat' % pid) as f:
            return f.read().rsplit(')', 1)[1].split()[0] == 'Z'
    except OSError:
        return True


def _on_libvirt(handles, steps_of):
    """Run, for each handle, the steps ``steps_of(conn, handle)`` gives
    (an object that is gone already has none), ignoring their errors."""
    conn = _libvirt()
    if conn is None:
        return
    try:
        for handle in handles:
            try:
                steps = steps_of(conn, handle)
            except Exception:
                continue
            for step in steps:
                try:
                    step()
                except Exception:
                    pass
    finally:
        conn.close()


def _destroy_domains(names):
    def steps(conn, name):
        domain = conn.lookupByName(name)
        return domain.destroy, domain.undefine
    _on_libvirt(names, steps)


def _undefine_secrets(uuids):
    _on_libvirt(uuids, lambda conn, secret_uuid: (
        conn.secretLookupByUUIDString(secret_uuid).undefine,))


def _umount(points):
    # Deepest first; a mount still busy is detached lazily, so that the
    # next run finds a clean machine.
    for point in sorted(points, key=len, reverse=True):
        done = _run('umount', point)
        if done is None or done.returncode:
            _run('umount', '-l', point)


def _delete_targets(handles):
    for tid, _paths in handles:
        _run('tgtadm', '--lld', 'iscsi', '--op', 'delete', '--mode',
             'target', '--force', '--tid', str(tid))


def _drop_databases(handles):
    for backend, name in handles:
        conn = _mariadb() if backend == 'mysql' else _postgresql()
        if conn is None:
            continue
        try:
            with conn.cursor() as cur:
                if backend == 'mysql':
                    cur.execute('DROP DATABASE IF EXISTS `%s`' % name)
                else:
                    cur.execute('DROP DATABASE IF EXISTS "%s" WITH (FORCE)'
                                % name)
        except Exception:
            pass
        finally:
            conn.close()


def clean(left):
    """Remove everything :func:`find` reported."""
    steps = (
        ('process', lambda h: _kill(list(h))),
        ('libvirt domain', _destroy_domains),
        ('libvirt secret', _undefine_secrets),
        ('swap', lambda h: [_run('swapoff', p) for p in h]),
        ('tgt target', _delete_targets),
        ('mount', _umount),
        ('database', _drop_databases),
        ('rabbitmq vhost',
         lambda h: [_run('rabbitmqctl', '-q', 'delete_vhost', v)
                    for v in h]),
        ('hook file', lambda h: [os.unlink(p) for p in h
                                 if os.path.exists(p)]),
    )
    for kind, remove in steps:
        if kind in left:
            remove(list(left[kind].values()))


class LeftBehind(AssertionError):
    pass


def _interrupt(signum, frame):
    raise KeyboardInterrupt('stopped by signal %d' % signum)


@contextlib.contextmanager
def guard(mount_roots=()):
    """For a program (a benchmark) that makes things on the machine: a
    SIGTERM interrupts it as Ctrl-C does, so its ``finally`` blocks run;
    afterwards whatever it left is reported on stderr and removed, and a
    run that otherwise succeeded fails with LeftBehind."""
    tag_this_run()
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _interrupt)
    before = snapshot()
    succeeded = False
    try:
        yield
        succeeded = True
    finally:
        left = find(before, mount_roots)
        if left:
            clean(left)
            message = 'left behind (removed now):\n%s' % describe(left)
            print(message, file=sys.stderr)
            if succeeded:
                raise LeftBehind(message)
