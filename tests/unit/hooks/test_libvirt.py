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

"""composable-libvirt-hook: the program libvirtd runs for every domain.

The agent's side is a stub socket (agent_stub.StubAgent); what the agent
itself answers is tested in test_hook_server.py.
"""

import io
import os
import subprocess
import sys
import uuid

import pytest

from composable.hooks import libvirt as hook
from composable.hooks import wire
from tests.functional.hooks import nova_domain
from tests.unit.hooks import agent_stub

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..',
                                    '..'))
INSTANCE = '8c4bd6c2-6f2e-4d0e-9a55-0b7f9a3a1c11'
MEMORY_FLAVOR = {'resources:CUSTOM_COMPOSABLE_MEMORY_MB': '4096',
                 'composable:attach_mode': 'guest',
                 'hw:cpu_policy': 'shared'}


def _xml(instance=INSTANCE, **kwargs):
    return nova_domain.realistic_domain(instance.upper(),
                                        **kwargs).encode()


@pytest.fixture
def sock(tmp_path):
    return str(tmp_path / 'hook.sock')


@pytest.fixture
def conf_file(tmp_path, sock):
    path = tmp_path / 'composable.conf'
    path.write_text('[DEFAULT]\nhook_socket = /elsewhere\n'
                    '[compute_node]\nhook_socket = %s\n'
                    'hook_failure = abort\nhook_prepare_timeout = 1\n' % sock)
    return str(path)


@pytest.fixture
def agent(sock):
    stub = agent_stub.StubAgent(sock)
    yield stub
    stub.close()


def _run(args, xml=b'', conf=None, env=None):
    stderr = io.StringIO()
    env = dict(env or {})
    if conf:
        env.setdefault(hook.ENV_CONFIG, conf)
    code = hook.run(args, io.BytesIO(xml), stderr, env=env)
    return code, stderr.getvalue()


# ------------------------------------------------------------- the XML

def test_parse_what_nova_writes():
    info = hook.parse_domain(_xml(extra_specs=MEMORY_FLAVOR))
    assert info['uuid'] == INSTANCE
    assert info['name'] == 'instance-0000002a'
    assert info['nova'] is True
    assert info['project_id'] == nova_domain.PROJECT_ID
    assert info['user_id'] == nova_domain.USER_ID
    assert info['flavor'] == 'm1.composable'
    assert info['extra_specs'] == MEMORY_FLAVOR


def test_parse_a_domain_nova_did_not_make():
    info = hook.parse_domain(b"<domain type='qemu'><name>x</name>"
                             b"<uuid>" + INSTANCE.encode() + b"</uuid>"
                             b"<devices/></domain>")
    assert info['uuid'] == INSTANCE
    assert info['nova'] is False
    assert info['extra_specs'] is None
    assert info['project_id'] is None


def test_parse_nova_without_extra_specs_in_the_metadata():
    # Older Nova wrote no <nova:extraSpecs>: "unknown", not "none".
    info = hook.parse_domain(_xml(with_extra_specs=False))
    assert info['nova'] is True
    assert info['extra_specs'] is None
    info = hook.parse_domain(_xml())
    assert info['extra_specs'] == {}


def test_parse_ignores_uuids_elsewhere():
    # <nova:root uuid=...> and <entry name='uuid'> are not the domain's.
    info = hook.parse_domain(_xml(extra_specs={}))
    assert info['uuid'] == INSTANCE


def test_bad_xml():
    with pytest.raises(ValueError):
        hook.parse_domain(b'<domain><uuid>')


@pytest.mark.parametrize('specs,wants', [
    ({'resources:CUSTOM_COMPOSABLE_MEMORY_MB': '4096'}, True),
    ({'resources1:CUSTOM_COMPOSABLE_GPU': '1'}, True),
    ({'resources_gpu:CUSTOM_COMPOSABLE_PCI_NVME': '2'}, True),
    ({'resources:CUSTOM_COMPOSABLE_GPU': '0'}, False),
    ({'resources:VCPU': '2', 'hw:mem_page_size': 'large'}, False),
    ({'composable:attach_mode': 'guest'}, False),
    ({'resources:CUSTOM_COMPOSABLE_GPU': 'x'}, False),
])
def test_flavor_wants_resources(specs, wants):
    found = hook.composable_specs(specs)
    assert set(found) <= set(specs)
    assert 'hw:mem_page_size' not in found and 'resources:VCPU' not in found
    assert hook.flavor_wants_resources(found) is wants


@pytest.mark.parametrize('value', [
    {'v': 1, 'ok': True, 'message': 'caf\xe9 "q" \\ \n\u2603', 'n': None,
     'leases': [{'uuid': 'x', 'memory_mb': 128, 'f': 1.5}], 'e': []},
    [], {}, 'x', -3, 0.001, True])
def test_the_wire_format(value):
    import json
    assert json.loads(wire.encode(value)) == value
    assert wire.decode(json.dumps(value)) == value
    assert wire.decode(json.dumps(value, indent=2)) == value
    assert wire.decode_line(wire.encode_line(value)) == value
    assert wire.encode_line(value).count(b'\n') == 1


@pytest.mark.parametrize('text', ['', '{', '{"a" 1}', '[1,]', 'nul',
                                  '{"a": 1} x', '"open', '{"a": }'])
def test_not_json(text):
    with pytest.raises(ValueError):
        wire.decode(text)


# ------------------------------------------------------- configuration

def test_read_options(tmp_path):
    path = tmp_path / 'c.conf'
    path.write_text('# comment\n[compute_node]\nhook_socket = /a\n'
                    '; other comment\nhook_socket=/b\nno value line\n'
                    '[agent]\nhook_socket = /c\n[compute_node]\n'
                    'hook_failure = continue\n')
    assert hook.read_options(str(path)) == {'hook_socket': '/b',
                                            'hook_failure': 'continue'}
    assert hook.read_options(str(tmp_path / 'missing')) == {}


def test_settings_from_file_and_environment(conf_file, tmp_path):
    settings = hook.Settings(env={hook.ENV_CONFIG: conf_file})
    assert settings.socket.endswith('hook.sock')
    assert settings.failure == 'abort'
    assert settings.prepare_timeout == 1
    assert settings.reply_timeout('prepare') == 1 + hook.MARGIN
    assert settings.reply_timeout('started') == hook.QUICK_TIMEOUT
    settings = hook.Settings(env={hook.ENV_CONFIG: conf_file,
                                  hook.ENV_SOCKET: '/x.sock'})
    assert settings.socket == '/x.sock'
    settings = hook.Settings(env={}, config_file=str(tmp_path / 'none'))
    assert settings.socket == hook.DEFAULT_SOCKET
    assert settings.failure == 'abort'
    assert settings.prepare_timeout == 120


# ------------------------------------------------------------- the hook

def test_usage():
    code, err = _run([])
    assert code == hook.EXIT_USAGE
    assert 'usage' in err


@pytest.mark.parametrize('op', ['start', 'restore', 'attach', 'frobnicate'])
def test_operations_the_agent_does_not_hear_about(op, agent, conf_file):
    stdin = io.BytesIO(_xml())
    code = hook.run(['instance-1', op, 'begin', '-'], stdin, io.StringIO(),
                    env={hook.ENV_CONFIG: conf_file})
    assert code == 0
    assert agent.requests == []
    if op in hook.XML_OPS:
        # libvirtd's pipe is read to the end.
        assert stdin.read() == b''


def test_prepare_asks_the_agent(agent, conf_file):
    code, err = _run(['instance-1', 'prepare', 'begin', '-'],
                     _xml(extra_specs=MEMORY_FLAVOR), conf_file)
    assert (code, err) == (0, '')
    [request] = agent.requests
    assert request['op'] == 'prepare'
    assert request['instance'] == INSTANCE
    assert request['domain'] == 'instance-1'
    assert request['nova'] is True
    assert request['project_id'] == nova_domain.PROJECT_ID
    assert request['flavor_resources'] is True
    assert request['specs'] == {
        'resources:CUSTOM_COMPOSABLE_MEMORY_MB': '4096',
        'composable:attach_mode': 'guest'}
    assert request['extra_specs_known'] is True


def test_a_refused_prepare_aborts_the_start(agent, conf_file):
    agent.reply = {'v': 1, 'ok': False, 'abort': True,
                   'message': 'lease L: it holds no resources'}
    code, err = _run(['instance-1', 'prepare', 'begin', '-'], _xml(),
                     conf_file)
    assert code == hook.EXIT_ABORT
    assert err == 'composable: lease L: it holds no resources\n'


def test_a_refused_prepare_the_agent_lets_go_on(agent, conf_file):
    agent.reply = {'v': 1, 'ok': False, 'abort': False,
                   'message': 'starts without them'}
    code, err = _run(['instance-1', 'prepare', 'begin', '-'], _xml(),
                     conf_file)
    assert code == 0
    assert 'starts without them' in err


@pytest.mark.parametrize('op', ['stopped', 'release', 'reconnect',
                                'started'])
def test_other_operations_never_fail(op, agent, conf_file):
    agent.reply = {'v': 1, 'ok': False, 'abort': True, 'message': 'bad'}
    code, err = _run(['instance-1', op, 'end', '-'], _xml(), conf_file)
    assert code == 0
    assert agent.requests[0]['op'] == op
    assert 'bad' in err


def test_a_refused_migration_fails(agent, conf_file):
    agent.reply = {'v': 1, 'ok': False, 'abort': True,
                   'message': 'composable refuses the live migration'}
    code, err = _run(['instance-1', 'migrate', 'begin', '-'], _xml(),
                     conf_file)
    assert code == hook.EXIT_ABORT
    assert 'refuses the live migration' in err


def test_a_domain_without_uuid_is_left_alone(agent, conf_file):
    code, _ = _run(['x', 'prepare', 'begin', '-'], b'<domain><name>x'
                   b'</name></domain>', conf_file)
    assert code == 0
    assert agent.requests == []


def test_xml_that_does_not_parse(agent, conf_file):
    code, err = _run(['x', 'prepare', 'begin', '-'], b'<domain>', conf_file)
    assert code == 0
    assert 'does not parse' in err
    assert agent.requests == []


def test_no_agent_and_a_flavor_that_asks_for_resources(conf_file):
    # The socket of the configuration file does not exist.
    code, err = _run(['instance-1', 'prepare', 'begin', '-'],
                     _xml(extra_specs=MEMORY_FLAVOR), conf_file)
    assert code == hook.EXIT_ABORT
    assert 'needs composable resources' in err
    assert 'does not listen' in err


def test_no_agent_and_the_continue_policy(tmp_path, sock):
    conf = tmp_path / 'c.conf'
    conf.write_text('[compute_node]\nhook_socket = %s\n'
                    'hook_failure = continue\n' % sock)
    code, err = _run(['instance-1', 'prepare', 'begin', '-'],
                     _xml(extra_specs=MEMORY_FLAVOR), str(conf))
    assert code == 0
    assert 'going on without composable' in err


def test_no_agent_and_the_flavor_says_ignore(conf_file):
    specs = dict(MEMORY_FLAVOR)
    specs['composable:on_bind_failure'] = 'ignore'
    code, _ = _run(['instance-1', 'prepare', 'begin', '-'],
                   _xml(extra_specs=specs), conf_file)
    assert code == 0


def test_no_agent_and_no_composable_flavor(conf_file):
    # A lease-first instance cannot be told from one without leases when
    # the agent is down: it starts.
    code, err = _run(['instance-1', 'prepare', 'begin', '-'], _xml(),
                     conf_file)
    assert code == 0
    assert 'does not listen' in err


def test_an_agent_that_does_not_answer(sock, conf_file, monkeypatch):
    monkeypatch.setattr(hook, 'MARGIN', 0.3)
    stub = agent_stub.StubAgent(sock, silent=True)
    try:
        code, err = _run(['instance-1', 'prepare', 'begin', '-'],
                         _xml(extra_specs=MEMORY_FLAVOR), conf_file)
    finally:
        stub.close()
    assert code == hook.EXIT_ABORT
    assert 'did not answer within 1 s' in err


def test_main_survives_its_own_bugs(monkeypatch, capsys):
    def boom(*args, **kwargs):
        raise RuntimeError('bug')
    monkeypatch.setattr(hook, 'run', boom)
    assert hook.main(['x', 'prepare', 'begin', '-']) == 0
    assert 'unexpected error' in capsys.readouterr().err


# ---------------------------------------------------------- installing

def test_install_and_run_the_launcher(tmp_path, agent, conf_file):
    target = tmp_path / 'qemu.d' / '50-composable'
    out = io.StringIO()
    assert hook.install(['--install', '--hook', str(target),
                         '--config-file', conf_file], out) == 0
    assert 'installed' in out.getvalue()
    assert os.stat(target).st_mode & 0o777 == 0o755
    text = target.read_text()
    assert text.startswith('#!%s -IS\n' % sys.executable)
    assert repr(conf_file) in text
    # libvirtd runs it: argv, the XML on stdin, a cleaned environment.
    result = subprocess.run(
        [str(target), 'instance-1', 'prepare', 'begin', '-'],
        input=_xml(), capture_output=True, env={'PATH': '/usr/bin:/bin'},
        timeout=60)
    assert result.returncode == 0, result.stderr
    assert agent.requests[-1]['instance'] == INSTANCE
    agent.reply = {'v': 1, 'ok': False, 'abort': True, 'message': 'nope'}
    result = subprocess.run(
        [str(target), 'instance-1', 'prepare', 'begin', '-'],
        input=_xml(), capture_output=True, env={'PATH': '/usr/bin:/bin'},
        timeout=60)
    assert result.returncode == 1
    assert result.stderr == b'composable: nope\n'
    assert hook.install(['--uninstall', '--hook', str(target)], out) == 0
    assert not target.exists()


def test_the_hook_imports_only_the_standard_library(agent, conf_file):
    """No oslo, no composable.conf, not even socket (its imports cost
    more than the rest): libvirtd runs it for every domain."""
    code = ('import sys, io; sys.path.insert(0, %r)\n'
            'from composable.hooks import libvirt as h\n'
            'rc = h.run(["i", "prepare", "begin", "-"], '
            'io.BytesIO(sys.stdin.buffer.read()), sys.stderr, '
            'env={%r: %r})\n'
            'print(rc, sorted(m for m in sys.modules if m.startswith('
            '("oslo", "composable.conf", "composable.agent", "sqlalchemy", '
            '"libvirt", "socket", "selectors"))))' % (
                REPO, hook.ENV_CONFIG, conf_file))
    result = subprocess.run([sys.executable, '-I', '-S', '-c', code],
                            input=_xml(extra_specs=MEMORY_FLAVOR),
                            capture_output=True, text=False, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.decode().split() == ['0', '[]']
    assert agent.requests


def test_a_domain_named_like_an_option_is_still_a_domain(agent, conf_file,
                                                         monkeypatch):
    # libvirtd always passes four arguments.
    monkeypatch.setenv(hook.ENV_CONFIG, conf_file)
    monkeypatch.setattr(sys, 'stdin', io.TextIOWrapper(io.BytesIO(_xml())))
    assert hook.main(['--install', 'prepare', 'begin', '-']) == 0
    assert agent.requests[0]['domain'] == '--install'


def test_uuid_of_any_case_is_lowered():
    upper = str(uuid.uuid4()).upper()
    assert hook.parse_domain(_xml(instance=upper))['uuid'] == upper.lower()
