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

"""The leftover check finds what a run left on the machine, and removes
it: a process started by the run that outlived its parent, a tmpfs
mounted under the run's directory, a database named for the run."""

import os
import subprocess
import sys
import time
import uuid

import pytest

from tests.functional import leftovers


def _alive(pid):
    try:
        with open('/proc/%d/stat' % pid) as f:
            return f.read().rsplit(')', 1)[1].split()[0] != 'Z'
    except OSError:
        return False


def _only(processes, pids):
    return {name: pid for name, pid in processes.items() if pid in pids}


def test_a_process_of_the_run_is_found_and_killed():
    before = leftovers.snapshot()
    # A child that starts a grandchild and exits: the grandchild is
    # re-parented, and found by the run's tag in its environment.
    out = subprocess.run(
        [sys.executable, '-c',
         'import subprocess, sys; p = subprocess.Popen([sys.executable, '
         '"-c", "import time; time.sleep(600)"], '
         'stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL); '
         'print(p.pid)'],
        capture_output=True, text=True, check=True, timeout=60)
    pid = int(out.stdout)
    try:
        left = leftovers.find(before)
        assert pid in left['process'].values()
        # Only the process this test made: the run's long-lived services
        # (a session's Keystone, say) carry the same tag.
        leftovers.clean({'process': _only(left['process'], [pid])})
        assert not _alive(pid)
        assert pid not in leftovers.find(before).get(
            'process', {}).values()
    finally:
        if _alive(pid):
            os.kill(pid, 9)


def test_a_mount_under_the_run_is_found_and_unmounted(tmp_path):
    if os.geteuid() != 0:
        pytest.skip('mounting needs root')
    before = leftovers.snapshot()
    point = tmp_path / 'area'
    point.mkdir()
    subprocess.run(['mount', '-t', 'tmpfs', '-o', 'size=1m', 'tmpfs',
                    str(point)], check=True, timeout=30)
    try:
        # Busy: a process of the run keeps a file open on it.
        holder = subprocess.Popen(
            ['sh', '-c', 'exec 3>%s/held; exec sleep 600' % point])
        deadline = time.monotonic() + 60
        while not (point / 'held').exists():
            assert time.monotonic() < deadline
            time.sleep(0.1)
        left = leftovers.find(before, mount_roots=[tmp_path])
        assert [p for p in left['mount'].values()] == [str(point)]
        assert holder.pid in left['process'].values()
        left['process'] = _only(left['process'], [holder.pid])
        leftovers.clean(left)
        holder.wait(timeout=30)
        assert not os.path.ismount(str(point))
        after = leftovers.find(before, mount_roots=[tmp_path])
        assert 'mount' not in after
        assert holder.pid not in after.get('process', {}).values()
    finally:
        if os.path.ismount(str(point)):
            subprocess.run(['umount', '-l', str(point)], timeout=30)


def test_a_database_of_the_run_is_found_and_dropped():
    pymysql = pytest.importorskip('pymysql')
    try:
        conn = pymysql.connect(host='127.0.0.1', user='root', password='',
                               autocommit=True)
    except Exception as exc:
        if os.environ.get('COMPOSABLE_REQUIRE_DBS') == '1':
            pytest.fail('MariaDB is required but unreachable: %s' % exc)
        pytest.skip('MariaDB unreachable: %s' % exc)
    before = leftovers.snapshot()
    ours = 'composable_left_%s_%s' % (leftovers.run_tag(),
                                      uuid.uuid4().hex[:6])
    # Another run's database is never touched.
    theirs = 'composable_left_%s' % uuid.uuid4().hex[:10]
    try:
        with conn.cursor() as cur:
            cur.execute('CREATE DATABASE `%s`' % ours)
            cur.execute('CREATE DATABASE `%s`' % theirs)
        left = leftovers.find(before)
        assert list(left['database']) == ['mysql:%s' % ours]
        leftovers.clean({'database': left['database']})
        with conn.cursor() as cur:
            cur.execute('SHOW DATABASES')
            names = {row[0] for row in cur.fetchall()}
        assert ours not in names
        assert theirs in names
    finally:
        with conn.cursor() as cur:
            cur.execute('DROP DATABASE IF EXISTS `%s`' % ours)
            cur.execute('DROP DATABASE IF EXISTS `%s`' % theirs)
        conn.close()
