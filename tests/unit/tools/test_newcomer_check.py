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

"""tools/newcomer-check.py reads the commands from the docs: what it
finds in README.rst and in a user guide page, and how it compares a
command's output with what the page shows."""

import importlib.util
import os
import subprocess
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))

_spec = importlib.util.spec_from_file_location(
    'newcomer_check', os.path.join(ROOT, 'tools', 'newcomer-check.py'))
check = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(check)


def test_readme_gives_a_run_command_with_a_venv_and_a_next_command():
    run, next_command = check.readme_commands(
        os.path.join(ROOT, 'README.rst'))
    assert run.startswith('python3 -m venv ')
    assert 'pip install .' in run
    assert run.endswith('composable-all')
    assert 'openstack' in next_command and 'composable' in next_command
    # The next command names the port the service listens on.
    assert str(check.DEFAULT_PORT) in next_command


def test_console_blocks_commands_output_and_skips(tmp_path):
    page = tmp_path / 'page.rst'
    page.write_text(textwrap.dedent('''\
        Title
        =====

        .. code-block:: console

           $ openstack composable pool list
           +------+--------+
           | Name | Kind   |
           +------+--------+
           | p1   | memory |
           +------+--------+
           $ openstack composable lease create \\
               --memory 1GiB my-memory

        Not a console block::

           $ not-a-command

        .. newcomer-check: skip needs a Heat service

        .. code-block:: console

           $ openstack stack list

        .. code-block:: ini

           [DEFAULT]
           $ not-a-command-either = 1

        .. code-block:: console

           # a root prompt is not run
           $ echo done
        '''))
    found = check.console_commands(str(page))
    assert [(c, s) for _, c, _, s in found] == [
        ('openstack composable pool list', None),
        ('openstack composable lease create \\\n    --memory 1GiB '
         'my-memory', None),
        ('openstack stack list', 'needs a Heat service'),
        ('echo done', None),
    ]
    assert found[0][0] == 6
    assert found[0][2][1] == '| Name | Kind   |'
    assert found[1][2] == []


def test_output_comparison_normalises_what_changes():
    shown = ['+--------------------------------------+-------+',
             '| Field                                | Value |',
             '+--------------------------------------+-------+',
             '| uuid   | 0b5d7e8c-3f0a-4b5e-9a57-2f1d7c6e4a10 |',
             '| created_at | 2026-11-27T10:00:00+00:00 |',
             '| name   | my-memory ... |',
             '...']
    printed = ['+-------+------+',
               '| Field | Value |',
               '| uuid | 11111111-2222-3333-4444-555555555555 |',
               '| created_at | 2027-01-02T03:04:05.123456+00:00 |',
               '| name | my-memory (4096 MiB) |',
               '| status | reserved |',
               '| size | 4096 |']
    assert check.output_matches(shown, printed)
    assert not check.output_matches(shown[:-1], printed)
    assert not check.output_matches(
        shown, [line.replace('my-memory', 'other') for line in printed])


def test_bash_session_keeps_exports_and_reports_each_status(tmp_path):
    steps = [check.Step('a'), check.Step('b'), check.Step('c')]
    check.run_session([(steps[0], 'export GREETING=hello'),
                       (steps[1], 'echo "$GREETING" world'),
                       (steps[2], 'false')],
                      str(tmp_path), dict(os.environ), 60)
    assert [s.rc for s in steps] == [0, 0, 1]
    assert steps[1].output.strip() == 'hello world'


def test_help_runs_without_the_project_installed():
    result = subprocess.run(
        ['python3', os.path.join(ROOT, 'tools', 'newcomer-check.py'),
         '--help'], capture_output=True, text=True, timeout=60,
        env={'PATH': os.environ['PATH']})
    assert result.returncode == 0, result.stderr
    assert '--port' in result.stdout
