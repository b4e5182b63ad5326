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

"""The console scripts as an operator meets them, each in a process of
its own: where the state lives, one clear line (not a traceback) for what
stops a command, and no warning printed on the way.

The scripts are run as ``python -c`` with the name of the entry point in
sys.argv[0], from the entry points setup.cfg declares, so that the tree
under test is what runs whatever the environment installed."""

import configparser
import os
import signal
import socket
import subprocess
import sys

import pytest

from tests import waiting

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.dirname(os.path.abspath(__file__))))))


def _console_scripts():
    parser = configparser.ConfigParser()
    parser.read(os.path.join(ROOT, 'setup.cfg'))
    scripts = {}
    for line in parser['entry_points']['console_scripts'].splitlines():
        if '=' in line:
            name, target = (part.strip() for part in line.split('=', 1))
            scripts[name] = target
    return scripts


SCRIPTS = _console_scripts()


def _env(tmp_path, **extra):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(('OS_', 'PYTHONWARNINGS', 'XDG_'))}
    env['PYTHONPATH'] = ROOT
    env['HOME'] = str(tmp_path / 'home')
    env.update(extra)
    return env


def _command(name, *args):
    module, func = SCRIPTS[name].split(':')
    code = ('import sys; sys.argv[0] = %r; from %s import %s as main; '
            'sys.exit(main())' % (name, module, func))
    return [sys.executable, '-c', code] + list(args)


def _run(tmp_path, name, *args, env=None, timeout=300):
    os.makedirs(tmp_path / 'cwd', exist_ok=True)
    return subprocess.run(
        _command(name, *args), capture_output=True, text=True,
        env=env or _env(tmp_path), cwd=str(tmp_path / 'cwd'),
        timeout=timeout, stdin=subprocess.DEVNULL)


def _free_port():
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        return sock.getsockname()[1]


@pytest.mark.parametrize('name', sorted(SCRIPTS))
def test_help_prints_no_warning(tmp_path, name):
    result = _run(tmp_path, name, '--help')
    assert result.returncode == 0, result.stderr
    assert 'usage' in result.stdout.lower()
    assert 'Warning' not in result.stderr, result.stderr
    assert 'eventlet' not in (result.stdout + result.stderr).lower()


def test_only_dnssec_dsa_deprecations_are_silenced(tmp_path):
    """cryptography 51 deprecates DSA, and dnspython (imported through
    eventlet by oslo.messaging) reads its DSA classes at import: four
    warnings at every start of every service. Once composable.cmd is
    imported those are hidden, and the same text from any other module is
    still shown."""
    code = (
        'import warnings, composable.cmd\n'
        'for module in ("dns.dnssecalgs.dsa", "composable.elsewhere"):\n'
        '    warnings.warn_explicit("DSA is deprecated and support will be '
        'removed", UserWarning, module.replace(".", "/") + ".py", 14, '
        'module=module)\n')
    result = subprocess.run(
        [sys.executable, '-c', code], capture_output=True, text=True,
        env=_env(tmp_path), timeout=300, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stderr
    assert 'dns/dnssecalgs/dsa.py' not in result.stderr, result.stderr
    assert 'composable/elsewhere.py:14: UserWarning: DSA' in result.stderr, \
        result.stderr


def test_dbsync_and_status_on_the_default_state(tmp_path):
    """The database is in the state directory whatever the current
    directory; dbsync makes it, status reads it, neither warns."""
    state = tmp_path / 'state'
    env = _env(tmp_path, XDG_STATE_HOME=str(state))
    database = state / 'composable' / 'composable.sqlite'

    status = _run(tmp_path, 'composable-status', 'upgrade', 'check',
                  env=env)
    assert status.returncode == 2, status
    lines = status.stderr.strip().splitlines()
    assert len(lines) == 1, status.stderr
    assert str(database) in lines[0]
    assert 'composable-dbsync upgrade' in lines[0]
    assert not database.exists()
    assert not state.exists()

    sync = _run(tmp_path, 'composable-dbsync', 'upgrade', env=env)
    assert sync.returncode == 0, sync.stderr
    assert database.exists()
    assert os.listdir(tmp_path / 'cwd') == []
    # No alembic INFO lines, no warning: only dbsync's own line.
    assert sync.stderr.strip() == '', sync.stderr
    assert sync.stdout.startswith('Database schema upgraded to ')

    status = _run(tmp_path, 'composable-status', 'upgrade', 'check',
                  env=env)
    assert status.returncode == 0, status.stdout + status.stderr
    assert 'Database schema is at' in status.stdout
    assert status.stderr.strip() == '', status.stderr


@pytest.mark.parametrize('name,args', [
    ('composable-dbsync', ['upgrade']),
    ('composable-status', ['upgrade', 'check']),
    ('composable-conductor', []),
    ('composable-api', []),
    ('composable-all', []),
])
def test_missing_config_file_is_one_line(tmp_path, name, args):
    missing = str(tmp_path / 'etc' / 'composable.conf')
    result = _run(tmp_path, name, '--config-file', missing, *args)
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert 'Traceback' not in result.stderr
    assert lines[0].startswith(name + ': ')
    assert missing in lines[0] and 'does not exist' in lines[0]


def test_compute_agent_without_libvirt_names_the_extra(tmp_path):
    config = tmp_path / 'agent.conf'
    config.write_text('[DEFAULT]\nhost = compute-x\n'
                      '[agent]\nroles = compute_node\n'
                      'memory_exporter = tgt\n')
    module, func = SCRIPTS['composable-agent'].split(':')
    # A machine without the binding: importing libvirt fails.
    code = ("import sys; sys.modules['libvirt'] = None; "
            "sys.argv[0] = 'composable-agent'; from %s import %s as main; "
            "sys.exit(main())" % (module, func))
    result = subprocess.run(
        [sys.executable, '-c', code, '--config-file', str(config)],
        capture_output=True, text=True, env=_env(tmp_path), timeout=300,
        stdin=subprocess.DEVNULL, cwd=str(tmp_path))
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "composable[compute]" in lines[0]
    for package in ('gcc', 'pkg-config', 'libvirt-dev', 'python3-dev'):
        assert package in lines[0]


def test_composable_all_says_where_its_state_is_and_refuses_a_twin(
        tmp_path):
    port = _free_port()
    state = tmp_path / 'state'
    env = _env(tmp_path, XDG_STATE_HOME=str(state))
    config = tmp_path / 'all.conf'
    config.write_text('[DEFAULT]\nhost = all-state-test\n'
                      '[api]\nport = %d\n' % port)
    os.makedirs(tmp_path / 'cwd')
    log_path = tmp_path / 'first.log'
    with open(log_path, 'wb') as out:
        first = subprocess.Popen(
            _command('composable-all', '--config-file', str(config)),
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            cwd=str(tmp_path / 'cwd'), env=env)
    try:
        waiting.wait_until(
            lambda: 'composable-all listening on' in log_path.read_text()
            or first.poll() is not None,
            120, 'composable-all listening', describe=log_path.read_text)
        assert first.poll() is None, log_path.read_text()
        database = state / 'composable' / 'composable.sqlite'
        log = log_path.read_text()
        assert ('State: SQLite database %s (the default' % database) in log
        assert database.exists()
        assert os.listdir(tmp_path / 'cwd') == []
        # Nothing noisy at start: no warning of a library, no alembic.
        assert 'EventletDeprecationWarning' not in log
        assert 'alembic' not in log

        second = _run(tmp_path, 'composable-all', '--config-file',
                      str(config), env=env)
        assert second.returncode == 1
        lines = second.stderr.strip().splitlines()
        assert len(lines) == 1, second.stderr
        assert '127.0.0.1:%d' % port in lines[0]
        assert 'another composable-all' in lines[0]
        assert first.poll() is None
    finally:
        first.send_signal(signal.SIGTERM)
        try:
            code = first.wait(timeout=60)
        except subprocess.TimeoutExpired:
            first.kill()
            first.wait()
            raise
    assert code == 0, log_path.read_text()
