#!/usr/bin/env python3
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

"""The first hour of a newcomer, as a check: the README's commands, then
the user guide's, as written.

1. A copy of the source tree in a temporary directory, a HOME of its own
   (so the service's state and configuration start empty), and a machine
   on which nothing can be compiled: pip takes wheels only
   (PIP_ONLY_BINARY=:all:, the project itself excepted: it is pure
   Python), and the compiler and pkg-config are /bin/false.
2. The README's run command, taken from README.rst (the first literal
   block after "Run the service"), run as is with bash in that copy: it
   makes the virtualenv, installs the project and starts composable-all.
   The check waits, with a deadline, for the service to answer.
3. The README's next command (the inline literal that follows, the one
   with ``openstack``), run as is.
4. The user guide's commands, from doc/source/user/*.rst in the order of
   the guide's table of contents: every line that starts with ``$ `` in a
   ``.. code-block:: console`` block (with its continuation lines), in one
   bash session (so that ``export`` and ``cd`` carry over, as in a
   terminal) whose PATH starts with the virtualenv's bin directory, as
   after ``. .venv/bin/activate``. A block right after a comment
   ``.. newcomer-check: skip <reason>`` is not run. Lines of a block that
   follow a command and are not commands are the output the guide shows:
   when there are some, the command's output must match them once UUIDs,
   times, request ids and table borders are normalised away; ``...`` in
   the guide stands for anything.

Any command that exits non-zero, or whose output differs, fails the check.
The last line printed is a one-line summary; the exit status is 0 only
when everything passed. ``--junit-xml`` writes one test case per step.

Run it from the source tree: ``python3 tools/newcomer-check.py``
(``--help`` for the options). It takes a few minutes, most of them pip's.
"""

import argparse
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from xml.etree import ElementTree

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_PORT = 6590
SKIP_MARK = re.compile(r'^\.\.\s+newcomer-check:\s*skip\b\s*(.*)$')
CONSOLE_BLOCK = re.compile(r'^(\s*)\.\.\s+code-block::\s+console\s*$')
IGNORED = ('.tox', '.venv', '.git', 'doc/build', 'api-ref/build',
           'releasenotes/build', '__pycache__', '.eggs', 'build', 'dist')


class Step(object):
    """One thing the newcomer does: a name, a command, what happened."""

    def __init__(self, name, command=None, where=None):
        self.name = name
        self.command = command
        self.where = where
        self.ok = None
        self.skipped = None
        self.detail = ''
        self.seconds = 0.0
        # A user guide command's exit status, output, and the output the
        # guide shows for it.
        self.rc = None
        self.output = ''
        self.expected = []

    def passed(self, detail=''):
        self.ok, self.detail = True, detail
        return self

    def failed(self, detail):
        self.ok, self.detail = False, detail
        return self

    def skip(self, reason):
        self.ok, self.skipped, self.detail = True, reason, reason
        return self


# ------------------------------------------------------------- reading docs

def readme_commands(path):
    """(run command, next command) of README.rst: the first literal block
    after the paragraph that says "Run the service", and the first inline
    literal with ``openstack`` after it."""
    with open(path) as f:
        lines = f.read().splitlines()
    start = next(i for i, line in enumerate(lines)
                 if line.startswith('Run the service'))
    i = start
    while not lines[i].rstrip().endswith('::'):
        i += 1
    i += 1
    while not lines[i].strip():
        i += 1
    indent = len(lines[i]) - len(lines[i].lstrip())
    block = []
    while i < len(lines) and (not lines[i].strip() or
                              lines[i].startswith(' ' * indent)):
        block.append(lines[i].strip())
        i += 1
    run = ' '.join(part for part in block if part)
    rest = '\n'.join(lines[i:])
    match = re.search(r'``([^`]*\bopenstack\b[^`]*)``', rest)
    if not match:
        raise ValueError('no ``openstack ...`` command after the run '
                         'command in %s' % path)
    return run, ' '.join(match.group(1).split())


def guide_files(user_dir):
    """The guide's pages in the order of its toctree (index.rst), then any
    page the toctree does not list."""
    order = []
    index = os.path.join(user_dir, 'index.rst')
    if os.path.exists(index):
        with open(index) as f:
            in_tree = False
            for line in f:
                if line.strip().startswith('.. toctree::'):
                    in_tree = True
                    continue
                if in_tree:
                    if line.strip().startswith(':') or not line.strip():
                        continue
                    if not line.startswith(' '):
                        in_tree = False
                        continue
                    order.append(line.strip() + '.rst')
    others = sorted(name for name in os.listdir(user_dir)
                    if name.endswith('.rst') and name not in order)
    return [os.path.join(user_dir, name) for name in order + others
            if os.path.exists(os.path.join(user_dir, name))]


def console_commands(path):
    """[(line number, command, expected output lines, skip reason)] of the
    ``$`` lines of the console blocks of ``path``."""
    with open(path) as f:
        lines = f.read().splitlines()
    found = []
    skip_reason = None
    i = 0
    while i < len(lines):
        line = lines[i]
        mark = SKIP_MARK.match(line.strip())
        if mark:
            skip_reason = mark.group(1).strip() or 'skipped'
            i += 1
            continue
        block = CONSOLE_BLOCK.match(line)
        if not block:
            if line.strip() and not line.strip().startswith('..'):
                # A paragraph between the mark and a block ends the mark.
                if not line.startswith(' '):
                    skip_reason = None
            i += 1
            continue
        base = len(block.group(1))
        i += 1
        body = []
        while i < len(lines):
            text = lines[i]
            if text.strip() and len(text) - len(text.lstrip()) <= base:
                break
            body.append((i + 1, text))
            i += 1
        while body and not body[-1][1].strip():
            body.pop()
        found.extend(_block_commands(body, skip_reason))
        skip_reason = None
    return found


def _block_commands(body, skip_reason):
    indent = min((len(t) - len(t.lstrip()) for _, t in body if t.strip()),
                 default=0)
    commands = []
    current = None
    continued = False
    for number, text in body:
        text = text[indent:] if text.strip() else ''
        if continued:
            current[1] += '\n' + text
            continued = text.rstrip().endswith('\\')
            continue
        if text.startswith('$ ') or text == '$':
            current = [number, text[2:], [], skip_reason]
            commands.append(current)
            continued = text.rstrip().endswith('\\')
        elif current is not None and text.strip():
            current[2].append(text)
    return [tuple(c) for c in commands]


# ------------------------------------------------------------ comparing

UUID = re.compile(r'\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-'
                  r'[0-9a-f]{12}\b', re.I)
REQ_ID = re.compile(r'\breq-<uuid>')
TIMESTAMP = re.compile(r'\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?'
                       r'(Z|[+-]\d{2}:?\d{2})?')
BORDER = re.compile(r'^[+\-=| ]+$')


def normalise(lines):
    out = []
    for line in lines:
        line = TIMESTAMP.sub('<time>', UUID.sub('<uuid>', line))
        line = REQ_ID.sub('<request-id>', line)
        if not line.strip() or BORDER.match(line):
            continue
        if '|' in line:
            cells = [cell.strip() for cell in line.strip().strip('|')
                     .split('|')]
            line = ' | '.join(cells)
        else:
            line = ' '.join(line.split())
        out.append(line)
    return out


def output_matches(expected, actual):
    """Whether ``actual`` shows what the guide shows: line by line after
    normalising; ``...`` in an expected line matches anything, and a line
    that is only ``...`` matches any number of lines."""
    want = normalise(expected)
    have = normalise(actual)

    def match(wi, hi):
        if wi == len(want):
            return hi == len(have)
        if want[wi] == '...':
            return any(match(wi + 1, k) for k in range(hi, len(have) + 1))
        if hi == len(have):
            return False
        pattern = '.*'.join(re.escape(part)
                            for part in want[wi].split('...'))
        return bool(re.fullmatch(pattern, have[hi])) and \
            match(wi + 1, hi + 1)

    return match(0, 0)


# ------------------------------------------------------------ running

def copy_tree(dest):
    def ignore(directory, names):
        rel = os.path.relpath(directory, ROOT)
        skipped = []
        for name in names:
            path = os.path.normpath(os.path.join(rel, name))
            if name in IGNORED or path in IGNORED or \
                    name.endswith(('.egg-info', '.pyc')) or \
                    name.startswith('junit-'):
                # .git is copied when it is a worktree's file: pbr asks
                # git for the version.
                if name == '.git' and rel == '.':
                    continue
                skipped.append(name)
        return skipped
    shutil.copytree(ROOT, dest, ignore=ignore, symlinks=True)


def no_compiler_env(home, pip_cache):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(('OS_', 'VIRTUAL_ENV', 'PYTHON', 'PIP_',
                                'XDG_', 'COMPOSABLE_'))}
    env.update({
        'HOME': home,
        'PIP_ONLY_BINARY': ':all:',
        'PIP_DISABLE_PIP_VERSION_CHECK': '1',
        'PIP_NO_INPUT': '1',
        # Whatever might still try to build C finds no compiler and no
        # library headers.
        'CC': '/bin/false', 'CXX': '/bin/false', 'LDSHARED': '/bin/false',
        'PKG_CONFIG': '/bin/false', 'PKG_CONFIG_PATH': '/nonexistent',
        'CPATH': '', 'C_INCLUDE_PATH': '',
    })
    if pip_cache:
        env['PIP_CACHE_DIR'] = pip_cache
    for name in ('PIP_INDEX_URL', 'PIP_EXTRA_INDEX_URL', 'PIP_FIND_LINKS',
                 'PIP_TRUSTED_HOST'):
        if name in os.environ:
            env[name] = os.environ[name]
    return env


def free_port():
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        return sock.getsockname()[1]


def port_taken(port):
    with socket.socket() as sock:
        return sock.connect_ex(('127.0.0.1', port)) == 0


def port_text(text, port):
    return text if port == DEFAULT_PORT else text.replace(
        str(DEFAULT_PORT), str(port))


def wait_for_service(proc, url, deadline):
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                return response.status
        except (urllib.error.URLError, ConnectionError, OSError):
            pass
        if proc.poll() is not None:
            return None
        if time.monotonic() > deadline:
            return None
        time.sleep(1)


def stop_group(proc, timeout=60):
    if proc.poll() is not None:
        return proc.returncode
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return None


def tail(text, lines=15):
    return '\n'.join(text.rstrip().splitlines()[-lines:])


def run_session(commands, cwd, env, timeout):
    """Run ``commands`` [(step, command)] in one bash process, each
    framed by markers; fill in each step's output and exit status."""
    script = ['exec 2>&1']
    for n, (_, command) in enumerate(commands):
        script.append("printf '\\n@@newcomer-begin %d\\n'" % n)
        script.append(command)
        script.append("printf '\\n@@newcomer-end %d %%d\\n' \"$?\"" % n)
    started = time.monotonic()
    try:
        result = subprocess.run(
            ['bash', '-c', '\n'.join(script)], cwd=cwd, env=env,
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, timeout=timeout,
            start_new_session=True)
        output = result.stdout.decode('utf-8', 'replace')
    except subprocess.TimeoutExpired as exc:
        output = (exc.stdout or b'').decode('utf-8', 'replace')
    elapsed = time.monotonic() - started
    results = {}
    for match in re.finditer(r'\n@@newcomer-begin (\d+)\n(.*?)'
                             r'\n@@newcomer-end \1 (\d+)\n', output, re.S):
        results[int(match.group(1))] = (int(match.group(3)),
                                        match.group(2))
    started_n = [int(n) for n in re.findall(r'@@newcomer-begin (\d+)',
                                            output)]
    for n, (step, _) in enumerate(commands):
        step.seconds = elapsed / max(1, len(commands))
        if n in results:
            step.rc, step.output = results[n]
        elif started_n and n == started_n[-1]:
            step.rc, step.output = None, output.split(
                '@@newcomer-begin %d\n' % n, 1)[-1]
        else:
            step.rc, step.output = None, ''
    return elapsed


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--port', type=int, default=DEFAULT_PORT,
                        help='Serve on this port instead of %d, written '
                             'in the service\'s configuration file and '
                             'replacing %d in the commands (for a machine '
                             'where that port is taken). Default: %d, '
                             'the commands exactly as written; 0: any '
                             'free port.' %
                             (DEFAULT_PORT, DEFAULT_PORT, DEFAULT_PORT))
    parser.add_argument('--pip-cache', default=os.path.join(
        os.path.expanduser('~'), '.cache', 'pip'),
        help='pip\'s cache (downloads only count: source packages are '
             'never used). "" for none. Default: %(default)s')
    parser.add_argument('--install-timeout', type=int, default=900,
                        help='Seconds for the install and the service to '
                             'answer (default %(default)s).')
    parser.add_argument('--command-timeout', type=int, default=120,
                        help='Seconds per command of the user guide '
                             '(default %(default)s).')
    parser.add_argument('--keep', action='store_true',
                        help='Keep the temporary directory.')
    parser.add_argument('--junit-xml', help='Write the steps as JUnit XML.')
    args = parser.parse_args(argv)

    steps = []
    started = time.monotonic()
    work = tempfile.mkdtemp(prefix='newcomer-check-')
    tree = os.path.join(work, 'composable')
    home = os.path.join(work, 'home')
    service = None
    log_path = os.path.join(work, 'service.log')
    try:
        copy_tree(tree)
        os.makedirs(home)
        env = no_compiler_env(home, args.pip_cache)
        if args.port == 0:
            args.port = free_port()
        if port_taken(args.port):
            raise RuntimeError(
                'something listens on 127.0.0.1:%d already: stop it, or '
                'give --port another port (0: any free one)' % args.port)
        if args.port != DEFAULT_PORT:
            os.makedirs(os.path.join(home, '.composable'))
            with open(os.path.join(home, '.composable',
                                   'composable.conf'), 'w') as f:
                f.write('[api]\nport = %d\n' % args.port)

        run_command, next_command = readme_commands(
            os.path.join(tree, 'README.rst'))
        run_command = port_text(run_command, args.port)
        next_command = port_text(next_command, args.port)

        # 2. The README's run command: install and start.
        step = Step('README: run the service', run_command, 'README.rst')
        steps.append(step)
        print('$ ' + run_command, flush=True)
        t0 = time.monotonic()
        with open(log_path, 'wb') as log:
            service = subprocess.Popen(
                ['bash', '-c', run_command], cwd=tree, env=env,
                stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT, start_new_session=True)
        url = 'http://127.0.0.1:%d/' % args.port
        status = wait_for_service(service, url,
                                  t0 + args.install_timeout)
        step.seconds = time.monotonic() - t0
        with open(log_path, errors='replace') as f:
            service_log = f.read()
        if status is None:
            why = ('exited with %s' % service.returncode
                   if service.poll() is not None else
                   'did not answer within %d s' % args.install_timeout)
            step.failed('%s; last lines:\n%s' % (why, tail(service_log)))
        else:
            # What composable-all printed, after pip's last line.
            started_log = service_log.split('Successfully installed', 1)[-1]
            started_log = started_log.split('\n', 1)[-1]
            venv = os.path.join(tree, '.venv')
            libvirt = subprocess.run(
                [os.path.join(venv, 'bin', 'python'), '-c',
                 'import libvirt'], capture_output=True, env=env)
            if libvirt.returncode == 0:
                step.failed('libvirt-python was installed, so compiled or '
                            'found: the default install must not need it')
            elif 'Traceback' in started_log or 'Warning' in started_log:
                step.failed('the service printed a traceback or a '
                            'warning:\n%s' % tail(started_log, 30))
            else:
                step.passed('installed and answering in %.0f s' %
                            step.seconds)
        print('   %s' % ('ok: ' + step.detail if step.ok else
                         'FAILED: ' + step.detail), flush=True)

        if step.ok:
            # 3. The README's next command, in the same directory.
            step = Step('README: next command', next_command, 'README.rst')
            steps.append(step)
            print('$ ' + next_command, flush=True)
            t0 = time.monotonic()
            result = subprocess.run(
                ['bash', '-c', next_command], cwd=tree,
                env=dict(env, PIP_ONLY_BINARY=''),
                stdin=subprocess.DEVNULL, capture_output=True, text=True,
                timeout=args.command_timeout)
            step.seconds = time.monotonic() - t0
            if result.returncode:
                step.failed('exit status %d:\n%s' % (
                    result.returncode, tail(result.stdout + result.stderr)))
            else:
                step.passed()
            print(result.stdout.rstrip())
            print('   %s' % ('ok' if step.ok else 'FAILED: ' + step.detail),
                  flush=True)

            # 4. The user guide, in one terminal with the venv active.
            guide_env = dict(env)
            for name in ('PIP_ONLY_BINARY', 'CC', 'CXX', 'LDSHARED',
                         'PKG_CONFIG', 'PKG_CONFIG_PATH', 'CPATH',
                         'C_INCLUDE_PATH'):
                guide_env.pop(name, None)
            guide_env['VIRTUAL_ENV'] = os.path.join(tree, '.venv')
            guide_env['PATH'] = os.path.join(tree, '.venv', 'bin') + \
                os.pathsep + env.get('PATH', '')
            to_run = []
            for path in guide_files(os.path.join(tree, 'doc', 'source',
                                                 'user')):
                rel = os.path.relpath(path, tree)
                for number, command, expected, skip in \
                        console_commands(path):
                    command = port_text(command, args.port)
                    step = Step('%s:%d' % (rel, number), command,
                                '%s:%d' % (rel, number))
                    step.expected = expected
                    steps.append(step)
                    if skip:
                        step.skip(skip)
                    else:
                        to_run.append((step, command))
            if to_run:
                run_session(to_run, tree, guide_env,
                            args.command_timeout * len(to_run))
            for step in steps[2:]:
                if not step.skipped:
                    if step.rc is None:
                        step.failed('did not finish (the session timed '
                                    'out):\n%s' % tail(step.output))
                    elif step.rc:
                        step.failed('exit status %d:\n%s' % (
                            step.rc, tail(step.output)))
                    elif step.expected and not output_matches(
                            step.expected, step.output.splitlines()):
                        step.failed('output differs from the guide; it '
                                    'shows:\n%s\nthe command printed:\n%s'
                                    % ('\n'.join(step.expected),
                                       tail(step.output, 30)))
                    else:
                        step.passed()
                print('%s: $ %s' % (step.where, step.command))
                if step.skipped:
                    print('   skipped: %s' % step.skipped)
                else:
                    print('   %s' % ('ok' if step.ok else
                                     'FAILED: ' + step.detail))
            sys.stdout.flush()
    except Exception as exc:
        step = Step('newcomer-check itself')
        steps.append(step.failed('%s: %s' % (exc.__class__.__name__, exc)))
        print('FAILED: %s' % step.detail)
    finally:
        if service is not None:
            code = stop_group(service)
            stop = Step('the service stops on SIGTERM')
            steps.append(stop)
            if code not in (0, -signal.SIGTERM, 128 + signal.SIGTERM):
                with open(log_path, errors='replace') as f:
                    stop.failed('exit status %s; last lines:\n%s' %
                                (code, tail(f.read())))
                print('FAILED: %s' % stop.detail)
            else:
                stop.passed()
        if args.keep:
            print('kept %s' % work)
        else:
            shutil.rmtree(work, ignore_errors=True)

    total = time.monotonic() - started
    if args.junit_xml:
        write_junit(args.junit_xml, steps, total)
    failed = [s for s in steps if not s.ok]
    skipped = [s for s in steps if s.skipped]
    ran = len(steps) - len(skipped)
    if failed:
        first = [line.strip() for line in failed[0].detail.splitlines()
                 if line.strip()][:2]
        print('newcomer-check: FAILED %d of %d steps (%d skipped) in %.0f '
              's; first failure: %s: %s' % (
                  len(failed), ran, len(skipped), total, failed[0].name,
                  ' '.join(first)))
        return 1
    print('newcomer-check: all %d steps passed (%d skipped) in %.0f s' % (
        ran, len(skipped), total))
    return 0


def write_junit(path, steps, total):
    suite = ElementTree.Element('testsuite', {
        'name': 'newcomer-check', 'tests': str(len(steps)),
        'failures': str(sum(1 for s in steps if not s.ok)),
        'errors': '0',
        'skipped': str(sum(1 for s in steps if s.skipped)),
        'time': '%.3f' % total})
    for step in steps:
        case = ElementTree.SubElement(suite, 'testcase', {
            'classname': 'newcomer-check', 'name': step.name,
            'time': '%.3f' % step.seconds})
        if step.skipped:
            ElementTree.SubElement(case, 'skipped',
                                   {'message': step.skipped})
        elif not step.ok:
            failure = ElementTree.SubElement(case, 'failure', {
                'message': (step.detail or '').splitlines()[0]
                if step.detail else 'failed'})
            failure.text = '$ %s\n%s' % (step.command or '', step.detail)
    ElementTree.ElementTree(suite).write(path, encoding='utf-8',
                                         xml_declaration=True)


if __name__ == '__main__':
    sys.exit(main())
