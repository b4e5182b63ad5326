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


"""tools/devstack-check.sh outside a container: the container recipe is
replaced by stubs (run.sh, start-ds.sh, stop-ds.sh, ds-exec), so what is
checked is the script's own behaviour, not DevStack's."""

import os
import signal
import shutil
import subprocess
import textwrap
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, '..', '..', '..'))


def _write(path, text, mode=0o644):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, 'w') as f:
        f.write(textwrap.dedent(text))
    os.chmod(path, mode)


def _project(tmp_path):
    """A copy of the project with the files the script reads, committed,
    and a folder of (empty) mirrors."""
    tree = tmp_path / 'composable'
    for rel in ('tools/devstack-check.sh', 'devstack/settings',
                'doc/source/install/samples/devstack-local.conf'):
        os.makedirs(os.path.dirname(tree / rel), exist_ok=True)
        shutil.copy(os.path.join(ROOT, rel), tree / rel)
    script = tree / 'tools' / 'devstack-check.sh'
    env = dict(os.environ, GIT_AUTHOR_NAME='t', GIT_AUTHOR_EMAIL='t@t',
               GIT_COMMITTER_NAME='t', GIT_COMMITTER_EMAIL='t@t')
    for cmd in (['init', '-q', '-b', 'check'], ['add', '.'],
                ['commit', '-q', '-m', 'tree']):
        subprocess.run(['git', '-C', str(tree)] + cmd, env=env, check=True,
                       capture_output=True)
    mirrors = tmp_path / 'mirrors'
    for project in ('devstack', 'requirements', 'keystone', 'placement',
                    'nova', 'glance', 'neutron'):
        (mirrors / ('openstack+%s' % project) / 'repo').mkdir(parents=True)
    return tree, script, mirrors


def test_a_run_survives_its_script_being_edited(tmp_path):
    tree, script, mirrors = _project(tmp_path)
    root = tmp_path / 'rootfs'
    # The recipe's stubs. Starting the container rewrites the script in
    # place, as an edit or a checkout in the working tree does while a
    # run lasts; the commands "inside" it read their input and succeed.
    recipe = tmp_path / 'recipe'
    _write(recipe / 'run.sh', '#!/bin/bash\nexit 0\n', 0o755)
    _write(recipe / 'start-ds.sh', '''\
        #!/bin/bash
        mkdir -p "$DS_ROOT/opt/stack/devstack"
        printf 'exit 7\\n' > %s
        ''' % script, 0o755)
    _write(recipe / 'stop-ds.sh', '#!/bin/bash\nexit 0\n', 0o755)
    _write(recipe / 'ds-exec', '#!/bin/bash\ncat >/dev/null\nexit 0\n',
           0o755)

    proc = subprocess.run(
        ['bash', str(script), '--mirrors', str(mirrors), '--recipe',
         str(recipe), '--repo', str(tree), '--branch', 'check'],
        env=dict(os.environ, DS_ROOT=str(root),
                 DS_STATE=str(tmp_path / 'state')),
        capture_output=True, text=True, timeout=120)

    # The script ran to its end as it was when it started: every phase
    # ran and the summary line is the last.
    assert open(script).read() == 'exit 7\n'
    lines = proc.stdout.strip().splitlines()
    assert lines, proc.stderr
    assert lines[-1].startswith(
        'devstack-check: stack=ok selfcheck=ok user_path=ok '), (
        proc.stdout[-2000:], proc.stderr[-2000:])


def test_the_selfcheck_waits_for_nova_compute_to_be_enabled(tmp_path):
    # The container's local.sh, last in stack.sh, restarts libvirtd:
    # nova-compute disables its service until it has reconnected, and
    # Placement then offers no host for a server.
    tree, script, mirrors = _project(tmp_path)
    root = tmp_path / 'rootfs'
    stubs = tmp_path / 'stubs'
    calls = tmp_path / 'calls'
    devstack = root / 'opt' / 'stack' / 'devstack'
    for name in ('stack.sh', 'unstack.sh', 'clean.sh'):
        _write(devstack / name, '#!/bin/bash\nexit 0\n', 0o755)
    _write(root / 'opt' / 'stack' / 'composable' / 'devstack' /
           'selfcheck.sh', '#!/bin/bash\necho selfcheck >> %s\n' % calls,
           0o755)
    # nova-compute answers disabled twice, then enabled.
    _write(stubs / 'openstack', '''\
        #!/bin/bash
        echo "openstack $*" >> %s
        if [[ "$*" == "compute service list"* ]]; then
            n=$(grep -c "compute service list" %s)
            if [[ $n -le 2 ]]; then echo "disabled up"
            else echo "enabled up"; fi
        fi
        ''' % (calls, calls), 0o755)
    _write(stubs / 'sleep', '#!/bin/bash\nexit 0\n', 0o755)
    recipe = tmp_path / 'recipe'
    _write(recipe / 'run.sh', '#!/bin/bash\nexit 0\n', 0o755)
    _write(recipe / 'start-ds.sh', '#!/bin/bash\nexit 0\n', 0o755)
    _write(recipe / 'stop-ds.sh', '#!/bin/bash\nexit 0\n', 0o755)
    # "Inside the container": the DevStack user's scripts run here, with
    # /opt/stack in the rootfs and the stubs first on PATH.
    _write(recipe / 'ds-exec', '''\
        #!/bin/bash
        if [[ "$1" == su ]]; then
            script=$(sed "s|/opt/stack|%s/opt/stack|g")
            PATH=%s:$PATH exec bash -c "$script"
        fi
        [[ "$1" == bash ]] && cat >/dev/null
        exit 0
        ''' % (root, stubs), 0o755)

    proc = subprocess.run(
        ['bash', str(script), '--mirrors', str(mirrors), '--recipe',
         str(recipe), '--repo', str(tree), '--branch', 'check'],
        env=dict(os.environ, DS_ROOT=str(root),
                 DS_STATE=str(tmp_path / 'state')),
        capture_output=True, text=True, timeout=120)

    assert 'selfcheck=ok' in proc.stdout, (proc.stdout[-2000:],
                                           proc.stderr[-2000:])
    lines = calls.read_text().splitlines()
    asked = [line for line in lines if 'compute service list' in line]
    assert len(asked) == 3
    assert lines.index('selfcheck') > lines.index(asked[-1])


def _running(pid):
    """Whether process pid still runs (a zombie does not)."""
    try:
        with open('/proc/%d/status' % pid) as f:
            return 'State:\tZ' not in f.read()
    except FileNotFoundError:
        return False


def test_an_interrupted_run_still_ends_with_its_summary(tmp_path):
    # A run stopped by a signal in the middle of stack.sh stops what the
    # phase started and the container, and its last line is still the
    # summary, naming the phase that was interrupted.
    tree, script, mirrors = _project(tmp_path)
    root = tmp_path / 'rootfs'
    stopped = tmp_path / 'stopped'
    inner = tmp_path / 'inner.pid'
    recipe = tmp_path / 'recipe'
    _write(recipe / 'run.sh', '#!/bin/bash\nexit 0\n', 0o755)
    _write(recipe / 'start-ds.sh',
           '#!/bin/bash\nmkdir -p "$DS_ROOT/opt/stack/devstack"\n', 0o755)
    _write(recipe / 'stop-ds.sh', '#!/bin/bash\ntouch %s\n' % stopped,
           0o755)
    # stack.sh "inside the container" runs until it is stopped.
    _write(recipe / 'ds-exec', '''\
        #!/bin/bash
        if [[ "$1" == su ]]; then
            cat >/dev/null
            sleep 600 &
            echo $! > %s
            wait
        fi
        [[ "$1" == bash ]] && cat >/dev/null
        exit 0
        ''' % inner, 0o755)

    proc = subprocess.Popen(
        ['bash', str(script), '--mirrors', str(mirrors), '--recipe',
         str(recipe), '--repo', str(tree), '--branch', 'check'],
        env=dict(os.environ, DS_ROOT=str(root),
                 DS_STATE=str(tmp_path / 'state')),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not (inner.exists() and inner.read_text().strip()):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, 'stack.sh never started'
            time.sleep(0.1)
        pid = int(inner.read_text())
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()

    lines = out.strip().splitlines()
    assert lines, err
    assert lines[-1].startswith(
        'devstack-check: stack=interrupted selfcheck=skipped '
        'user_path=skipped unstack_leftovers=unknown wall_s='), (
        out[-2000:], err[-2000:])
    assert proc.returncode == 128 + signal.SIGTERM
    assert stopped.exists()
    assert not _running(pid)


def test_local_conf_gives_services_time_on_a_busy_host(tmp_path):
    # DevStack's default SERVICE_TIMEOUT is 60 s: in a real run on two
    # shared cores keystone's uWSGI workers took longer to load, and
    # stack.sh died with "keystone did not start".
    tree, script, mirrors = _project(tmp_path)
    root = tmp_path / 'rootfs'
    recipe = tmp_path / 'recipe'
    _write(recipe / 'run.sh', '#!/bin/bash\nexit 0\n', 0o755)
    _write(recipe / 'start-ds.sh',
           '#!/bin/bash\nmkdir -p "$DS_ROOT/opt/stack/devstack"\n', 0o755)
    _write(recipe / 'stop-ds.sh', '#!/bin/bash\nexit 0\n', 0o755)
    _write(recipe / 'ds-exec', '#!/bin/bash\ncat >/dev/null\nexit 0\n',
           0o755)

    subprocess.run(
        ['bash', str(script), '--mirrors', str(mirrors), '--recipe',
         str(recipe), '--repo', str(tree), '--branch', 'check'],
        env=dict(os.environ, DS_ROOT=str(root),
                 DS_STATE=str(tmp_path / 'state')),
        capture_output=True, text=True, timeout=120)

    local_conf = (root / 'opt' / 'stack' / 'devstack' /
                  'local.conf').read_text()
    timeouts = [int(line.split('=', 1)[1])
                for line in local_conf.splitlines()
                if line.startswith('SERVICE_TIMEOUT=')]
    assert timeouts and timeouts[-1] >= 300, local_conf
