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

"""What "pip install ." gives a newcomer: the README's next command, the
openstack command with its composable commands."""

import os
import subprocess
import sys
from importlib import metadata

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.dirname(os.path.abspath(__file__))))))


def _names(path):
    names = set()
    with open(os.path.join(ROOT, path)) as f:
        for line in f:
            line = line.split('#', 1)[0].strip()
            if line:
                names.add(line.split('>')[0].split('=')[0].split('<')[0]
                          .strip().lower())
    return names


def test_the_package_itself_requires_the_openstack_command():
    assert 'python-openstackclient' in _names('requirements.txt')
    scripts = [ep for ep in metadata.distribution(
        'python-openstackclient').entry_points
        if ep.group == 'console_scripts']
    assert 'openstack' in {ep.name for ep in scripts}


def test_openstack_loads_the_composable_commands():
    command = os.path.join(os.path.dirname(sys.executable), 'openstack')
    assert os.path.exists(command), command
    env = {k: v for k, v in os.environ.items() if not k.startswith('OS_')}
    env['PYTHONPATH'] = ROOT
    # The README's command, asking for its help: no server needed.
    result = subprocess.run(
        [command, '--os-auth-type', 'none', '--os-endpoint',
         'http://127.0.0.1:6590', 'composable', 'pool', 'list', '--help'],
        capture_output=True, text=True, env=env, timeout=300,
        stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stderr
    assert 'usage: openstack composable pool list' in result.stdout, \
        result.stdout
