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

"""The tgt exporter against a real tgtd, checked with libiscsi's tools.

Needs root (it mounts a tmpfs and drives tgtd), tgtd/tgtadm (package
``tgt``) and iscsi-ls/iscsi-readcapacity16 (package ``libiscsi-bin``);
the scrub test also needs qemu-io with the iSCSI block driver (packages
``qemu-utils`` and ``qemu-block-extra``). Tests are skipped when these are
missing, and fail instead when COMPOSABLE_REQUIRE_DATAPLANE=1.

A tgtd already listening on 127.0.0.1:3260 is used as it is (and left
running); otherwise the fixture starts ``tgtd -f`` and stops it after.
The tests only look at the targets and accounts they created, so they can
share a tgtd with others.

Privileged functions run in-process (the tests are root), except in
test_through_the_privsep_daemon, which starts the real privsep daemon.
"""

import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import uuid

import pytest

from composable.common import exception
from composable import conf
from composable.memory.exporters import base
from composable.memory.exporters import tgt
from composable.memory import tmpfs
from composable import privsep
from composable.privsep import memory as priv_memory

CONF = conf.CONF
MiB = 1024 * 1024
PORTAL = '127.0.0.1:3260'
INITIATOR = 'iqn.2026-11.org.openstack.composable.test:compute-%s' % (
    uuid.uuid4().hex[:8])
REQUIRED = os.environ.get('COMPOSABLE_REQUIRE_DATAPLANE') == '1'


def _missing(why):
    if REQUIRED:
        pytest.fail('COMPOSABLE_REQUIRE_DATAPLANE=1 but %s' % why)
    pytest.skip(why)


def _listening(port=3260):
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(('127.0.0.1', port)) == 0


def _tgtadm(*args):
    return subprocess.run(['tgtadm'] + list(args), capture_output=True,
                          text=True, timeout=30)


@pytest.fixture(scope='module')
def tgtd():
    for tool in ('tgtd', 'tgtadm'):
        if not shutil.which(tool):
            _missing('%s is not installed (Debian package tgt)' % tool)
    for tool in ('iscsi-ls', 'iscsi-readcapacity16'):
        if not shutil.which(tool):
            _missing('%s is not installed (Debian package libiscsi-bin)' %
                     tool)
    if os.geteuid() != 0:
        _missing('the data plane tests need root (tmpfs mounts, tgtd)')
    started = None
    if not _listening():
        started = subprocess.Popen(['tgtd', '-f'],
                                   stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 15
        while not (_listening() and
                   _tgtadm('--op', 'show', '--mode', 'target').returncode
                   == 0):
            if started.poll() is not None or time.monotonic() > deadline:
                started.kill()
                pytest.fail('tgtd -f did not start listening on 3260')
            time.sleep(0.2)
    yield started
    if started is not None:
        started.terminate()
        try:
            started.wait(10)
        except subprocess.TimeoutExpired:
            started.kill()
            started.wait(5)


@pytest.fixture
def in_process():
    privsep.sys_admin_pctxt.set_client_mode(False)
    yield
    privsep.sys_admin_pctxt.set_client_mode(True)


@pytest.fixture
def area_dir():
    """An empty directory under /tmp that the area mounts a tmpfs on."""
    path = tempfile.mkdtemp(prefix='composable-mem-')
    yield path
    if os.path.ismount(path):
        subprocess.run(['umount', path], check=True, timeout=30)
    os.rmdir(path)


def _area(path, size_mb=64, overcommit=False):
    return tmpfs.TmpfsArea(path=path, size_mb=size_mb, manage_mount=True,
                           allow_overcommit=overcommit, node_name='mem-t')


@pytest.fixture
def exporter(tgtd, in_process, area_dir):
    CONF.set_override('portal', PORTAL, 'memory_node')
    exp = tgt.TgtExporter('mem-t', area=_area(area_dir))
    made = []
    yield exp, made
    for extent in made:
        try:
            exp.scrub(extent)
        except exception.DriverError:
            pass
    CONF.clear_override('portal', 'memory_node')


def _extent(made, size_mb=16):
    extent = {'uuid': str(uuid.uuid4()), 'index': len(made),
              'size_mb': size_mb, 'lease_uuid': str(uuid.uuid4()),
              'memory_node': 'mem-t', 'portal': PORTAL, 'transport': 'tcp'}
    made.append(extent)
    return extent


def _creds():
    return 'chap-%s' % uuid.uuid4().hex[:12], uuid.uuid4().hex


def _url(iqn, user=None, secret=None, lun=1):
    auth = '%s%%%s@' % (user, secret) if user else ''
    return 'iscsi://%s%s/%s/%d' % (auth, PORTAL, iqn, lun)


def _capacity(iqn, user, secret, initiator=INITIATOR):
    proc = subprocess.run(['iscsi-readcapacity16', '-i', initiator,
                           _url(iqn, user, secret)],
                          capture_output=True, text=True, timeout=30)
    return proc.returncode, proc.stdout + proc.stderr


def _total_size(output):
    for line in output.splitlines():
        if line.startswith('Total size:'):
            return int(line.split(':', 1)[1])
    return None


def _ours(iqn):
    out = _tgtadm('--lld', 'iscsi', '--op', 'show', '--mode',
                  'target').stdout
    return [t for t in tgt.parse_show(out) if t['name'] == iqn]


def _accounts():
    out = _tgtadm('--lld', 'iscsi', '--op', 'show', '--mode',
                  'account').stdout
    return [line.strip() for line in out.splitlines()[1:]]


def test_export_serves_exact_size_to_the_host_only(exporter):
    exp, made = exporter
    extent = _extent(made, size_mb=16)
    user, secret = _creds()

    result = exp.export(extent, INITIATOR, user, secret)

    iqn = base.target_iqn(extent)
    assert result == {'target_iqn': iqn, 'lun': 1, 'portal': PORTAL}
    (target,) = _ours(iqn)
    assert target['acls'] == [INITIATOR]
    assert target['accounts'] == [user]
    assert target['luns'][1] == exp.area.file_path(extent)

    listing = subprocess.run(
        ['iscsi-ls', '-s', '-i', INITIATOR,
         'iscsi://%s%%%s@%s' % (user, secret, PORTAL)],
        capture_output=True, text=True, timeout=30)
    assert listing.returncode == 0, listing.stderr
    assert 'Target:%s' % iqn in listing.stdout
    assert 'Lun:1' in listing.stdout

    rc, out = _capacity(iqn, user, secret)
    assert rc == 0, out
    assert _total_size(out) == 16 * MiB

    # Another initiator name does not even see the target.
    rc, out = _capacity(iqn, user, secret, initiator=INITIATOR + '-other')
    assert rc != 0 and 'Target not found' in out, out
    other = subprocess.run(
        ['iscsi-ls', '-i', INITIATOR + '-other', 'iscsi://%s' % PORTAL],
        capture_output=True, text=True, timeout=30)
    assert iqn not in other.stdout
    # A wrong CHAP secret, or none, is refused.
    rc, out = _capacity(iqn, user, 'not-the-secret')
    assert rc != 0 and 'Authentication failure' in out, out
    rc, out = _capacity(iqn, None, None)
    assert rc != 0 and 'Authentication failure' in out, out


def test_export_again_reapplies_chap_and_rule(exporter):
    exp, made = exporter
    extent = _extent(made, size_mb=8)
    user, secret = _creds()
    exp.export(extent, INITIATOR, user, secret)
    iqn = base.target_iqn(extent)
    (first,) = _ours(iqn)
    # Somebody opened the target to everyone meanwhile.
    assert _tgtadm('--lld', 'iscsi', '--op', 'bind', '--mode', 'target',
                   '--tid', str(first['tid']), '--initiator-address',
                   'ALL').returncode == 0

    new_secret = uuid.uuid4().hex
    exp.export(extent, INITIATOR, user, new_secret)

    (again,) = _ours(iqn)
    assert again['tid'] == first['tid']
    assert again['acls'] == [INITIATOR]
    assert again['accounts'] == [user]
    assert user + tgt.REKEY_SUFFIX not in _accounts()
    assert _capacity(iqn, user, new_secret)[0] == 0
    rc, out = _capacity(iqn, user, secret)
    assert rc != 0 and 'Authentication failure' in out
    rc, out = _capacity(iqn, user, new_secret,
                        initiator=INITIATOR + '-other')
    assert rc != 0 and 'Target not found' in out


def test_unexport_and_scrub_leave_nothing(exporter):
    exp, made = exporter
    extent = _extent(made, size_mb=8)
    user, secret = _creds()
    exp.export(extent, INITIATOR, user, secret)
    iqn = base.target_iqn(extent)
    assert exp.area.usage()['used_mb'] == 8

    exp.unexport(extent)
    show = _tgtadm('--op', 'show', '--mode', 'target').stdout
    assert iqn not in show
    assert user not in _accounts()
    assert os.path.exists(exp.area.file_path(extent))
    rc, out = _capacity(iqn, user, secret)
    assert rc != 0 and 'Total size' not in out, out

    exp.scrub(extent)
    assert not os.path.exists(exp.area.file_path(extent))
    assert exp.area.usage()['used_mb'] == 0
    exp.unexport(extent)
    exp.scrub(extent)


def _qemu_io(iqn, user, secret, command):
    return subprocess.run(
        ['qemu-io', '--object', 'secret,id=chap0,data=%s' % secret,
         '--image-opts',
         'driver=iscsi,transport=tcp,portal=%s,target=%s,lun=1,user=%s,'
         'password-secret=chap0,initiator-name=%s' % (PORTAL, iqn, user,
                                                      INITIATOR),
         '-c', command], capture_output=True, text=True, timeout=60)


def test_scrub_erases_what_a_lease_wrote(exporter):
    if not shutil.which('qemu-io'):
        _missing('qemu-io is not installed (qemu-utils, qemu-block-extra)')
    exp, made = exporter
    first = _extent(made, size_mb=8)
    user, secret = _creds()
    exp.export(first, INITIATOR, user, secret)
    iqn = base.target_iqn(first)
    wrote = _qemu_io(iqn, user, secret, 'write -P 0xab 0 8M')
    if 'Unknown driver' in wrote.stderr or 'Unknown protocol' in wrote.stderr:
        _missing('qemu-io has no iscsi driver (qemu-block-extra)')
    assert wrote.returncode == 0, wrote.stderr
    check = _qemu_io(iqn, user, secret, 'read -P 0xab 0 8M')
    assert check.returncode == 0, check.stdout + check.stderr
    assert 'Pattern verification failed' not in check.stdout

    # The lease is released: unexport, scrub.
    exp.unexport(first)
    exp.scrub(first)
    assert exp.area.usage()['used_mb'] == 0

    # A new lease gets an extent on the same node: all zeros.
    second = _extent(made, size_mb=8)
    user2, secret2 = _creds()
    exp.export(second, INITIATOR, user2, secret2)
    iqn2 = base.target_iqn(second)
    zeros = _qemu_io(iqn2, user2, secret2, 'read -P 0x00 0 8M')
    assert zeros.returncode == 0, zeros.stdout + zeros.stderr
    assert 'Pattern verification failed' not in zeros.stdout
    old = _qemu_io(iqn2, user2, secret2, 'read -P 0xab 0 1M')
    assert 'Pattern verification failed' in old.stdout

    # The same extent exported again after its scrub is zero too.
    exp.export(first, INITIATOR, user, secret)
    again = _qemu_io(iqn, user, secret, 'read -P 0x00 0 8M')
    assert again.returncode == 0, again.stdout + again.stderr
    assert 'Pattern verification failed' not in again.stdout


def test_memory_is_reserved_and_overbooking_refused(exporter):
    exp, made = exporter
    big = _extent(made, size_mb=40)
    exp.export(big, INITIATOR, *_creds())
    usage = exp.area.usage()
    assert usage['allocated_mb'] == 40 and usage['used_mb'] == 40

    too_much = _extent(made, size_mb=40)
    with pytest.raises(exception.DriverError) as err:
        exp.export(too_much, INITIATOR, *_creds())
    assert 'needs 40 MiB' in str(err.value)
    assert not os.path.exists(exp.area.file_path(too_much))
    assert not _ours(base.target_iqn(too_much))


def test_overcommit_makes_sparse_extents(tgtd, in_process, area_dir):
    area = _area(area_dir, size_mb=16, overcommit=True)
    made = []
    for _ in range(2):
        extent = _extent(made, size_mb=12)
        area.create(extent)
    usage = area.usage()
    assert usage['extent_mb'] == 24
    assert usage['allocated_mb'] == 0
    for extent in made:
        area.remove(extent)


def test_parallel_exports_get_distinct_targets(exporter):
    exp, made = exporter
    extents = [_extent(made, size_mb=2) for _ in range(6)]
    creds = [_creds() for _ in extents]
    # Separate exporters: the lock is per process, not per instance.
    exporters = [tgt.TgtExporter('mem-t', area=exp.area) for _ in extents]
    errors = []

    def run(i):
        try:
            exporters[i].export(extents[i], INITIATOR, *creds[i])
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,))
               for i in range(len(extents))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    tids = set()
    for extent, (user, secret) in zip(extents, creds):
        (target,) = _ours(base.target_iqn(extent))
        tids.add(target['tid'])
        rc, out = _capacity(target['name'], user, secret)
        assert rc == 0 and _total_size(out) == 2 * MiB, out
    assert len(tids) == len(extents)


def test_through_the_privsep_daemon(tgtd, area_dir, caplog):
    """The production path: privileged functions in the privsep daemon."""
    if not shutil.which('privsep-helper'):
        _missing('privsep-helper (oslo.privsep) is not on PATH')
    context = privsep.sys_admin_pctxt
    # The tests run as root: no sudo in front of the helper.
    CONF.set_override('helper_command',
                      'privsep-helper --privsep_context '
                      'composable.privsep.sys_admin_pctxt',
                      'composable_sys_admin')
    CONF.set_override('portal', PORTAL, 'memory_node')
    context.set_client_mode(True)
    exp = tgt.TgtExporter('mem-t', area=_area(area_dir))
    extent = _extent([], size_mb=4)
    user, secret = _creds()
    try:
        with caplog.at_level('DEBUG'):
            exp.export(extent, INITIATOR, user, secret)
            rc, out = _capacity(base.target_iqn(extent), user, secret)
            assert rc == 0 and _total_size(out) == 4 * MiB, out
            assert context.channel is not None
            exp.scrub(extent)
        assert not _ours(base.target_iqn(extent))
        assert exp.area.list() == []
        assert secret not in caplog.text
        assert '--password ***' in caplog.text
    finally:
        context.stop()
        CONF.clear_override('helper_command', 'composable_sys_admin')
        CONF.clear_override('portal', 'memory_node')


def test_privileged_tgtadm_reaches_tgtd(tgtd, in_process):
    rc, out, _err = priv_memory.tgtadm(['--lld', 'iscsi', '--op', 'show',
                                        '--mode', 'target'])
    assert rc == 0
    rc, _out, err = priv_memory.tgtadm(['--lld', 'iscsi', '--op', 'delete',
                                        '--mode', 'target', '--tid',
                                        '999999'])
    assert rc != 0 and "can't find the target" in err
