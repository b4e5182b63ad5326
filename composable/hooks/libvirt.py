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

"""composable-libvirt-hook: the libvirt qemu hook of a compute node.

libvirtd runs every executable of /etc/libvirt/hooks/qemu.d/ as::

    <hook> <domain name> <operation> <sub-operation> <extra>

with the domain XML on standard input, for every domain it starts, stops,
migrates or reconnects to. This hook tells the local composable-agent
(compute_node role) about the instance over a unix socket, one JSON line
each way, and lets the agent do the work:

``prepare``
    the agent has the conductor bind the instance's leases to this host
    and waits until they are bound. If that fails, the hook exits 1 and
    its message (standard error) is what ``virsh start`` and Nova show,
    unless the failure policy says the domain starts without them.
``started``
    the agent hot-plugs guest-mode memory into the guest, in a thread of
    its own once this hook has returned.
``stopped``, ``release``
    the agent has the conductor unbind the instance's leases from this
    host; the leases stay the instance's. Never fails.
``migrate``
    (on the destination of a live migration) refused, exit 1, when the
    instance holds passed-through devices or guest-mode memory, which
    cannot follow it; the migration fails and the guest runs on where it
    is. Otherwise, and whenever the agent cannot tell, exit 0.
``restore``, ``reconnect``, ``attach``, anything else
    never fail (exit 0): a running guest must not be harmed by a hook.

What the hook may not do: call the libvirt API (libvirtd runs hooks while
it holds the domain, so a call back into it deadlocks), import anything
heavy (it runs at every start and stop of every domain on the host), or
read composable's configuration with oslo.config. It imports only the
standard library; what it needs from the configuration file
(``[compute_node]hook_socket``, ``hook_failure``, ``hook_prepare_timeout``
and ``hook_release_timeout``) is read with a plain line scanner.

Where it looks, first match wins:

* the socket: ``$COMPOSABLE_HOOK_SOCKET``, ``[compute_node]hook_socket``
  of the configuration file, /run/composable/libvirt-hook.sock;
* the configuration file: ``$COMPOSABLE_CONFIG_FILE``, the file given to
  ``--install``, /etc/composable/composable.conf.

libvirtd runs hooks with a cleaned environment, so in production the
configuration file is what counts; the variables are for tests and tools.

Install it with ``composable-libvirt-hook --install``, which writes a
small launcher at /etc/libvirt/hooks/qemu.d/50-composable that starts this
module with ``python3 -I -S`` (no site-packages scan: a domain without
leases costs a few tens of milliseconds).
"""

import os
import sys

from composable.hooks import wire

NOVA_NS = 'http://openstack.org/xmlns/libvirt/nova/1.1'
DEFAULT_SOCKET = '/run/composable/libvirt-hook.sock'
DEFAULT_CONFIG = '/etc/composable/composable.conf'
DEFAULT_HOOK_PATH = '/etc/libvirt/hooks/qemu.d/50-composable'
ENV_SOCKET = 'COMPOSABLE_HOOK_SOCKET'
ENV_CONFIG = 'COMPOSABLE_CONFIG_FILE'
PROTOCOL = wire.PROTOCOL

# The operations for which libvirtd writes the domain XML to stdin.
XML_OPS = frozenset(['prepare', 'start', 'started', 'stopped', 'release',
                     'migrate', 'restore', 'reconnect', 'attach'])
# The operations the agent hears about.
AGENT_OPS = frozenset(['prepare', 'started', 'stopped', 'release',
                       'reconnect', 'migrate'])
# Defaults of the [compute_node] options the hook reads (the same as in
# composable/conf/compute.py, which this module must not import).
DEFAULTS = {'hook_failure': 'abort', 'hook_prepare_timeout': 120,
            'hook_release_timeout': 60}
# Seconds to connect to the agent, and to wait for answers that need no
# conductor (started, reconnect, migrate).
CONNECT_TIMEOUT = 5.0
QUICK_TIMEOUT = 10.0
# What the agent's own bounded wait may overrun by (RPC round trips).
MARGIN = 30.0
MAX_REPLY = 1 << 20

ABORT = 'abort'
CONTINUE = 'continue'
# composable:on_bind_failure (flavor extra spec) -> policy.
_FLAVOR_POLICY = {'fail': ABORT, 'ignore': CONTINUE}
# composable.common.resource_classes.PREFIX, copied: this module imports
# nothing of the service.
RESOURCE_PREFIX = 'CUSTOM_COMPOSABLE_'

EXIT_OK = 0
EXIT_ABORT = 1
EXIT_USAGE = 2


class HookError(Exception):
    """The agent could not be asked, or did not answer in time."""


# ------------------------------------------------------------- the XML

def parse_domain(xml):
    """What the hook needs from a domain XML (bytes or str).

    Returns a dict: ``uuid``, ``name``, ``nova`` (True when the domain
    carries Nova's instance metadata), ``project_id``, ``user_id``,
    ``flavor``, ``extra_specs`` (the flavor's, as Nova writes them into
    the metadata; ``None`` when this Nova does not write them).
    Raises ValueError on XML that does not parse.

    pyexpat directly, not ElementTree: it is what ElementTree uses
    underneath, and importing it alone is cheaper.
    """
    import pyexpat

    info = {'uuid': None, 'name': None, 'nova': False, 'project_id': None,
            'user_id': None, 'flavor': None, 'extra_specs': None}
    stack = []
    text = []
    spec = [None]
    nova_prefix = NOVA_NS + ' '

    def start(name, attrs):
        stack.append(name)
        del text[:]
        depth = len(stack)
        if not name.startswith(nova_prefix):
            return
        local = name[len(nova_prefix):]
        parent = stack[-2] if depth > 1 else ''
        if local == 'instance' and parent == 'metadata':
            info['nova'] = True
        elif local == 'flavor':
            info['flavor'] = attrs.get('name')
        elif local == 'extraSpecs':
            info['extra_specs'] = {}
        elif local == 'extraSpec':
            spec[0] = attrs.get('name')
        elif local == 'project' and parent == nova_prefix + 'owner':
            info['project_id'] = attrs.get('uuid')
        elif local == 'user' and parent == nova_prefix + 'owner':
            info['user_id'] = attrs.get('uuid')

    def end(name):
        depth = len(stack)
        value = ''.join(text).strip()
        if depth == 2 and stack[0] == 'domain':
            if name == 'uuid':
                info['uuid'] = value.lower()
            elif name == 'name':
                info['name'] = value
        elif name == nova_prefix + 'extraSpec' and spec[0]:
            if info['extra_specs'] is None:
                info['extra_specs'] = {}
            info['extra_specs'][spec[0]] = value
            spec[0] = None
        stack.pop()
        del text[:]

    parser = pyexpat.ParserCreate(namespace_separator=' ')
    parser.StartElementHandler = start
    parser.EndElementHandler = end
    parser.CharacterDataHandler = text.append
    try:
        parser.Parse(xml, True)
    except pyexpat.ExpatError as exc:
        raise ValueError('the domain XML does not parse: %s' % exc)
    return info


def composable_specs(extra_specs):
    """The flavor's extra specs composable cares about: its own
    ``composable:*`` keys and Placement resources of composable's
    resource classes (``resources[N]:CUSTOM_COMPOSABLE_*``)."""
    found = {}
    for key, value in (extra_specs or {}).items():
        if key.startswith('composable:'):
            found[key] = value
            continue
        prefix, _, rc = key.partition(':')
        if prefix.startswith('resources') and rc.startswith(
                RESOURCE_PREFIX):
            found[key] = value
    return found


def flavor_wants_resources(specs):
    """True when the flavor asks Placement for composable resources: the
    instance then has flavor-driven leases, created at its first start."""
    for key, value in specs.items():
        if key.startswith('composable:'):
            continue
        try:
            if int(value) > 0:
                return True
        except (TypeError, ValueError):
            continue
    return False


# ------------------------------------------------------- configuration

def read_options(path, section='compute_node', names=None):
    """``{name: value}`` of the options of one section of an ini file.

    A plain line scanner (configparser costs more to import than this
    whole hook needs): ``name = value`` lines, ``#`` and ``;`` comments,
    the last value wins. A missing or unreadable file reads as empty.
    """
    values = {}
    try:
        with open(path, encoding='utf-8', errors='replace') as f:
            lines = f.read().splitlines()
    except OSError:
        return values
    current = None
    for line in lines:
        line = line.strip()
        if not line or line[0] in '#;':
            continue
        if line[0] == '[':
            current = line[1:line.find(']')].strip()
            continue
        if current != section:
            continue
        name, sep, value = line.partition('=')
        if not sep:
            continue
        name = name.strip()
        if names is None or name in names:
            values[name] = value.strip()
    return values


class Settings(object):
    """What the hook needs to know, from the environment and the
    configuration file."""

    def __init__(self, env=None, config_file=None):
        env = os.environ if env is None else env
        self.config_file = (env.get(ENV_CONFIG) or config_file or
                            DEFAULT_CONFIG)
        opts = read_options(self.config_file, names=(
            'hook_socket', 'hook_failure', 'hook_prepare_timeout',
            'hook_release_timeout'))
        self.socket = (env.get(ENV_SOCKET) or opts.get('hook_socket') or
                       DEFAULT_SOCKET)
        failure = opts.get('hook_failure', DEFAULTS['hook_failure'])
        self.failure = failure if failure in (ABORT, CONTINUE) else ABORT
        self.prepare_timeout = _number(opts.get('hook_prepare_timeout'),
                                       DEFAULTS['hook_prepare_timeout'])
        self.release_timeout = _number(opts.get('hook_release_timeout'),
                                       DEFAULTS['hook_release_timeout'])

    def reply_timeout(self, op):
        """How long to wait for the agent's answer: its own bound on the
        work plus a margin, so that the agent, not the hook, is the one
        that decides and explains a timeout."""
        if op == 'prepare':
            return self.prepare_timeout + MARGIN
        if op in ('stopped', 'release'):
            return self.release_timeout + MARGIN
        return QUICK_TIMEOUT


def _number(value, default):
    try:
        number = float(value)
    except (TypeError, ValueError):
        return float(default)
    return number if number > 0 else float(default)


# ------------------------------------------------------------ the agent

def ask_agent(path, request, timeout, connect_timeout=CONNECT_TIMEOUT):
    """Send one JSON line, read one JSON line back. HookError when the
    agent cannot be reached or does not answer within ``timeout``.

    _socket, not socket: the socket module imports enum and selectors,
    which this hook does not need.
    """
    import _socket

    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        sock.settimeout(connect_timeout)
        try:
            sock.connect(path)
        except OSError as exc:
            raise HookError('the composable-agent does not listen on %s '
                            '(%s)' % (path, exc.strerror or exc))
        sock.settimeout(timeout)
        data = wire.encode_line(request)
        chunks = []
        size = 0
        try:
            sock.sendall(data)
            while True:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
                if chunk.endswith(b'\n') or size > MAX_REPLY:
                    break
        except TimeoutError:
            raise HookError('the composable-agent did not answer within '
                            '%d s' % timeout)
        except OSError as exc:
            raise HookError('talking to the composable-agent on %s failed '
                            '(%s)' % (path, exc.strerror or exc))
    finally:
        sock.close()
    line = b''.join(chunks).split(b'\n', 1)[0]
    if not line:
        raise HookError('the composable-agent closed the connection '
                        'without answering; see its log')
    try:
        reply = wire.decode_line(line)
    except ValueError:
        raise HookError('the composable-agent answered something that is '
                        'not JSON')
    if not isinstance(reply, dict):
        raise HookError('the composable-agent answered something that is '
                        'not a JSON object')
    return reply


# ------------------------------------------------------------- the hook

def _say(stream, message):
    try:
        stream.write('composable: %s\n' % message)
        stream.flush()
    except Exception:
        pass


def _policy(settings, specs):
    return _FLAVOR_POLICY.get(specs.get('composable:on_bind_failure'),
                              settings.failure)


def run(argv, stdin, stderr, env=None, config_file=None):
    """Run the hook; returns the exit status."""
    if len(argv) < 2:
        _say(stderr, 'usage: composable-libvirt-hook <domain> <operation> '
                     '<sub-operation> <extra> (libvirt runs it), or '
                     'composable-libvirt-hook --install [--help]')
        return EXIT_USAGE
    domain, op = argv[0], argv[1]
    sub_op = argv[2] if len(argv) > 2 else '-'
    xml = b''
    if op in XML_OPS:
        # Read all of it even when it is not needed: libvirtd writes the
        # whole document to the pipe.
        xml = stdin.read()
    if op not in AGENT_OPS:
        return EXIT_OK
    try:
        info = parse_domain(xml) if xml else {}
    except ValueError as exc:
        _say(stderr, 'domain %s: %s; nothing done' % (domain, exc))
        return EXIT_OK
    instance = info.get('uuid')
    if not instance:
        return EXIT_OK
    settings = Settings(env=env, config_file=config_file)
    specs = composable_specs(info.get('extra_specs'))
    wants = flavor_wants_resources(specs)
    request = {'v': PROTOCOL, 'op': op, 'sub_op': sub_op,
               'domain': domain, 'instance': instance,
               'nova': info.get('nova', False),
               'project_id': info.get('project_id'),
               'user_id': info.get('user_id'),
               'flavor': info.get('flavor'),
               'specs': specs, 'flavor_resources': wants,
               'extra_specs_known': info.get('extra_specs') is not None}
    try:
        reply = ask_agent(settings.socket, request,
                          settings.reply_timeout(op))
    except HookError as exc:
        if op == 'prepare' and wants and _policy(settings, specs) == ABORT:
            _say(stderr, 'instance %s (domain %s) needs composable '
                         'resources (flavor %s), but %s' %
                 (instance, domain, info.get('flavor'), exc))
            return EXIT_ABORT
        if op == 'prepare' or info.get('nova'):
            _say(stderr, 'instance %s (domain %s), %s: %s; going on '
                         'without composable' % (instance, domain, op, exc))
        return EXIT_OK
    message = reply.get('message')
    if reply.get('ok', False):
        return EXIT_OK
    if op in ('prepare', 'migrate') and reply.get('abort'):
        _say(stderr, message or 'the leases of instance %s could not be '
                                'bound to this host' % instance)
        return EXIT_ABORT
    if message:
        _say(stderr, message)
    return EXIT_OK


# ---------------------------------------------------------- installing

LAUNCHER = '''#!%(python)s -IS
# composable libvirt hook, written by "composable-libvirt-hook --install".
# libvirtd runs it for every domain; it talks to the local composable-agent.
# Run the install again after moving or upgrading composable.
import sys
sys.path.insert(0, %(path)r)
from composable.hooks import libvirt
sys.exit(libvirt.main(config_file=%(config)r))
'''


def launcher(python=None, package_parent=None, config_file=None):
    """The text of the launcher --install writes."""
    if package_parent is None:
        here = os.path.dirname(os.path.abspath(__file__))
        package_parent = os.path.dirname(os.path.dirname(here))
    return LAUNCHER % {'python': python or sys.executable,
                       'path': package_parent,
                       'config': config_file or DEFAULT_CONFIG}


def install(argv, stdout):
    import argparse

    parser = argparse.ArgumentParser(
        prog='composable-libvirt-hook',
        description='Install (or remove) the composable libvirt qemu hook. '
                    'libvirtd notices a hook in a qemu.d directory that '
                    'had none only when it starts or reloads (SIGHUP).')
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument('--install', action='store_true',
                        help='write the launcher')
    action.add_argument('--uninstall', action='store_true',
                        help='remove the launcher')
    parser.add_argument('--hook', default=DEFAULT_HOOK_PATH,
                        help='where (default: %(default)s)')
    parser.add_argument('--config-file', default=DEFAULT_CONFIG,
                        help='the composable configuration file the hook '
                             'reads its [compute_node] options from '
                             '(default: %(default)s)')
    parser.add_argument('--python', default=sys.executable,
                        help='the Python that has composable installed '
                             '(default: this one, %(default)s)')
    args = parser.parse_args(argv)
    if args.uninstall:
        try:
            os.unlink(args.hook)
        except FileNotFoundError:
            pass
        stdout.write('removed %s\n' % args.hook)
        return EXIT_OK
    directory = os.path.dirname(os.path.abspath(args.hook))
    os.makedirs(directory, mode=0o755, exist_ok=True)
    text = launcher(python=args.python, config_file=args.config_file)
    tmp = '%s.tmp-%d' % (args.hook, os.getpid())
    with open(tmp, 'w') as f:
        f.write(text)
    os.chmod(tmp, 0o755)
    # A rename: libvirtd never runs a half-written hook.
    os.rename(tmp, args.hook)
    stdout.write('installed %s (configuration %s)\n' %
                 (args.hook, args.config_file))
    return EXIT_OK


def main(argv=None, config_file=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in ('--install', '--uninstall', '-h', '--help') \
            and len(argv) != 4:
        return install(argv, sys.stdout)
    try:
        return run(argv, sys.stdin.buffer, sys.stderr,
                   config_file=config_file)
    except Exception as exc:
        # A bug here must not keep domains from starting or stopping.
        _say(sys.stderr, 'unexpected error in the libvirt hook (%s: %s); '
                         'going on without composable' %
             (type(exc).__name__, exc))
        return EXIT_OK


if __name__ == '__main__':
    sys.exit(main())
