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

"""Programs run inside a guest through its QEMU guest agent.

``GuestAgent`` copies files in (``guest-file-open``/``-write``/
``-close``) and runs commands (``guest-exec``, then ``guest-exec-status``
polled until the command exits or a deadline passes). ``PciRunner``
copies the compute agent's stdlib-only PCI module into the guest and runs
its JSON command line there, as the agent's privileged code would on a
real host.
"""

import base64
import hashlib
import json
import os
import time

from composable.privsep import pci_sysfs
from tests.functional.compute_host import image as image_mod

GUEST_MODULE_DIR = '/tmp/composable'
GUEST_PCI_MODULE = GUEST_MODULE_DIR + '/pci.py'
# Imported rather than run as a script, so that the guest compiles it
# once and keeps the bytecode (TCG makes every compilation count).
_RUN_PCI = ('import sys; sys.path.insert(0, %r); import pci; '
            'sys.exit(pci.main())')
# What a command may add to the timeout it was given: the interpreter's
# start under TCG on a busy machine.
START_MARGIN = 60
CHUNK = 48 * 1024


class AgentError(Exception):
    """The guest agent did not do what it was asked."""


class CommandTimeout(AgentError):
    """A command in the guest did not exit before its deadline."""


class PciCommandError(Exception):
    """pci.py in the guest answered an error: ``error`` is its code as
    printed, ``code`` that code as a pci_sysfs.ErrorCode, ``message`` its
    text."""

    def __init__(self, command, error, message):
        super().__init__('pci.py %s: %s: %s' % (command, error, message))
        self.command = command
        self.error = error
        self.code = pci_sysfs.ErrorCode.parse(error)
        self.message = message


class GuestAgent(object):

    def __init__(self, domain, timeout=30):
        self.domain = domain
        self.timeout = timeout

    def command(self, execute, timeout=None, **arguments):
        """One agent command; its ``return`` value."""
        import libvirt
        import libvirt_qemu
        request = {'execute': execute}
        if arguments:
            request['arguments'] = arguments
        try:
            answer = libvirt_qemu.qemuAgentCommand(
                self.domain, json.dumps(request),
                int(timeout or self.timeout), 0)
        except libvirt.libvirtError as exc:
            raise AgentError('guest agent of %s: %s failed: %s'
                             % (self.domain.name(), execute, exc))
        return json.loads(answer).get('return')

    def write_file(self, path, data, mode='w'):
        handle = self.command('guest-file-open', path=path, mode=mode)
        try:
            for start in range(0, len(data), CHUNK):
                chunk = data[start:start + CHUNK]
                self.command('guest-file-write', handle=handle,
                             **{'buf-b64': base64.b64encode(chunk)
                                .decode()})
        finally:
            self.command('guest-file-close', handle=handle)

    def read_file(self, path):
        handle = self.command('guest-file-open', path=path, mode='r')
        data = b''
        try:
            while True:
                got = self.command('guest-file-read', handle=handle,
                                   count=CHUNK)
                data += base64.b64decode(got.get('buf-b64', ''))
                if got.get('eof') or not got.get('count'):
                    return data
        finally:
            self.command('guest-file-close', handle=handle)

    def run(self, argv, timeout, interval=0.02):
        """Run ``argv`` in the guest and wait for it: (exit status, stdout
        bytes, stderr bytes). CommandTimeout when it is still running at
        the deadline (the guest then kills it)."""
        started = self.command('guest-exec', path=argv[0], arg=argv[1:],
                               **{'capture-output': True})
        pid = started['pid']
        deadline = time.monotonic() + timeout
        while True:
            status = self.command('guest-exec-status', pid=pid)
            if status.get('exited'):
                return (status.get('exitcode', status.get('signal', -1)),
                        base64.b64decode(status.get('out-data', '')),
                        base64.b64decode(status.get('err-data', '')))
            if time.monotonic() > deadline:
                try:
                    self.command('guest-exec', path='/bin/kill',
                                 arg=['-9', str(pid)])
                except AgentError:
                    pass
                raise CommandTimeout('%s did not exit within %s s in %s'
                                     % (' '.join(argv), timeout,
                                        self.domain.name()))
            time.sleep(interval)

    def shell(self, script, timeout=60):
        """``sh -c script``; its stdout as text, AgentError when it
        fails."""
        code, out, err = self.run(['/bin/sh', '-c', script], timeout)
        if code != 0:
            raise AgentError('%r exited %s in %s: %s' % (
                script, code, self.domain.name(),
                err.decode(errors='replace').strip()))
        return out.decode(errors='replace')


def _answer(command, code, out, err):
    """The JSON answer pci.py printed last; a PciCommandError for the
    error it reported, an AgentError when it printed none."""
    text = out.decode(errors='replace').strip()
    try:
        answer = json.loads(text.splitlines()[-1])
    except (ValueError, IndexError):
        raise AgentError('pci.py %s exited %s without a JSON answer: '
                         'stdout %r, stderr %r'
                         % (command, code, text,
                            err.decode(errors='replace')))
    if 'error' in answer:
        raise PciCommandError(command, answer['error'],
                              answer.get('message'))
    return answer


class PciRunner(object):
    """The agent's PCI module inside the guest: ``call(command, **kwargs)``
    runs its command line (``pci.py command '<json kwargs>'``) there and
    returns its result, or raises PciCommandError with the error it
    printed."""

    def __init__(self, agent, module=image_mod.PCI_MODULE,
                 python=image_mod.PYTHON, directory=GUEST_MODULE_DIR):
        # directory: where the module goes in the guest; two runners
        # working at once (a test and an agent) each have their own.
        self.agent = agent
        self.python = python
        self.directory = directory
        with open(module, 'rb') as f:
            self.source = f.read()
        self._installed = None

    def install(self):
        """Copy the module in, unless the guest has this version."""
        digest = hashlib.sha256(self.source).hexdigest()
        if self._installed == digest:
            return
        self.agent.shell('mkdir -p %s && rm -rf %s/__pycache__'
                         % (self.directory, self.directory))
        self.agent.write_file(self.directory + '/pci.py', self.source)
        self._installed = digest

    def call(self, command, **kwargs):
        """``kwargs`` go to the command; the guest is given its
        ``timeout`` (if any) and START_MARGIN to answer."""
        self.install()
        argv = [self.python, '-I', '-S', '-c', _RUN_PCI % self.directory,
                command,
                json.dumps(kwargs)]
        limit = START_MARGIN + kwargs.get('timeout', 0)
        code, out, err = self.agent.run(argv, limit)
        answer = _answer(command, code, out, err)
        if code != 0:
            raise AgentError('pci.py %s exited %s: %r'
                             % (command, code, answer))
        return answer['result']

    def forget(self):
        """The guest restarted: copy the module again next time."""
        self._installed = None


# The client of pci_server: exit status NOT_SERVING when no server runs.
NOT_SERVING = 75
# Shell builtins where busybox has them (read, kill, printf): every
# process the client forks is milliseconds of emulated guest time. The
# answer is one line.
_CLIENT = r'''d=%(dir)s
[ -p $d/requests ] && [ -f $d/server.pid ] || exit %(not_serving)d
# (No newline ends the pid: read answers 1 and sets it all the same.)
read -r p < $d/server.pid
kill -0 "$p" 2>/dev/null || exit %(not_serving)d
f=$d/answer.$$
rm -f $f
mkfifo $f || exit 1
printf '%%s %%s\n' "$f" "$1" > $d/requests
IFS= read -r a < $f
printf '%%s\n' "$a"
rm -f $f
'''
SERVER_MODULE = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                             'pci_server.py')


class PciServerRunner(PciRunner):
    """PciRunner whose commands go to one Python process kept running in
    the guest (pci_server), through a busybox shell client: one
    ``guest-exec`` of a shell per command instead of a Python start. The
    server is started at the first command, and again when the guest
    restarted. Not thread-safe: the caller serialises commands."""

    def __init__(self, agent, start_timeout=120, **kwargs):
        super().__init__(agent, **kwargs)
        with open(SERVER_MODULE, 'rb') as f:
            self.server_source = f.read()
        self.start_timeout = start_timeout

    def install(self):
        digest = hashlib.sha256(self.source + self.server_source).hexdigest()
        if self._installed == digest:
            return
        self.agent.shell('mkdir -p %s && rm -rf %s/__pycache__'
                         % (self.directory, self.directory))
        self.agent.write_file(self.directory + '/pci.py', self.source)
        self.agent.write_file(self.directory + '/pci_server.py',
                              self.server_source)
        self._installed = digest

    def _start_server(self):
        self.agent.command('guest-exec', path=self.python, arg=[
            '-I', '-S', self.directory + '/pci_server.py', self.directory])

    def call(self, command, **kwargs):
        self.install()
        line = '%s %s' % (command, json.dumps(kwargs))
        client = _CLIENT % {'dir': self.directory,
                            'not_serving': NOT_SERVING}
        limit = START_MARGIN + kwargs.get('timeout', 0)
        deadline = time.monotonic() + self.start_timeout
        started = False
        while True:
            code, out, err = self.agent.run(['/bin/sh', '-c', client, 'sh',
                                             line], limit)
            if code != NOT_SERVING:
                break
            if time.monotonic() > deadline:
                raise AgentError('the PCI module server did not start in '
                                 '%s within %s s' % (self.agent.domain.name(),
                                                     self.start_timeout))
            if not started:
                # A guest that restarted lost the module with its /tmp.
                self.forget()
                self.install()
                self._start_server()
                started = True
            time.sleep(0.05)
        answer = _answer(command, code, out, err)
        return answer['result']
