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
import shutil
import subprocess
import textwrap

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, '..', '..', '..'))


def _write(path, text, mode=0o644):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, 'w') as f:
        f.write(textwrap.dedent(text))
    os.chmod(path, mode)


def test_a_run_survives_its_script_being_edited(tmp_path):
    # A copy of the project with the files the script reads, committed.
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
