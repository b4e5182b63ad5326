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

"""Programs for the tiny guest, and running them through its agent.

``memhog`` (memhog.c) is a workload whose need for anonymous memory
grows in steps and then goes away; it is compiled here, statically with
the machine's gcc (the guest has no C library), cached next to the guest
images, and copied into a running guest through the QEMU guest agent
(``guest-file-*``), so the guest image itself does not change.

``GuestShell`` runs commands in the guest (``guest-exec``) and reads the
kernel log, e.g. to tell whether the OOM killer ever ran.
"""

import base64
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import time

from tests.functional.guest import build

HERE = os.path.dirname(os.path.abspath(__file__))
MEMHOG_SOURCE = os.path.join(HERE, 'memhog.c')
GUEST_MEMHOG = '/tmp/memhog'
# What the guest kernel prints when it runs out of memory.
OOM_PATTERN = re.compile(r'invoked oom-killer|Out of memory|oom-kill:',
                         re.IGNORECASE)
# guest-file-write carries base64 in one JSON message: keep them small.
CHUNK = 48 * 1024


def build_memhog(cache=None):
    """The path of the static memhog binary, built if need be."""
    gcc = shutil.which('gcc')
    if not gcc:
        raise build.GuestUnavailable('gcc is not installed (needed to '
                                     'build the guest workload memhog)')
    with open(MEMHOG_SOURCE, 'rb') as f:
        source = f.read()
    version = subprocess.run([gcc, '-dumpfullversion'], capture_output=True,
                             text=True).stdout.strip()
    key = hashlib.sha256(source + version.encode()).hexdigest()[:16]
    cache = cache or build.cache_dir()
    target = os.path.join(cache, 'memhog-%s' % key)
    if os.path.exists(target):
        return target
    build._world_readable_dir(cache)
    fd, work = tempfile.mkstemp(prefix='memhog-build-', dir=cache)
    os.close(fd)
    try:
        done = subprocess.run([gcc, '-static', '-O2', '-o', work,
                               MEMHOG_SOURCE], capture_output=True,
                              text=True, timeout=300)
        if done.returncode:
            raise build.GuestUnavailable(
                'cannot build memhog statically (libc6-dev?): %s'
                % done.stderr.strip()[-500:])
        os.chmod(work, 0o755)
        os.rename(work, target)
    finally:
        if os.path.exists(work):
            os.unlink(work)
    return target


class GuestShell(object):
    """Commands in a running guest, through its QEMU guest agent."""

    def __init__(self, domain, agent_timeout=30):
        self.domain = domain
        self.agent_timeout = agent_timeout

    def agent(self, command, **arguments):
        import libvirt_qemu
        request = {'execute': command}
        if arguments:
            request['arguments'] = arguments
        answer = libvirt_qemu.qemuAgentCommand(
            self.domain, json.dumps(request), self.agent_timeout, 0)
        return json.loads(answer)['return']

    def spawn(self, path, *args):
        """Start ``path args`` in the guest; its pid (no waiting)."""
        return self.agent('guest-exec', path=path, arg=list(args),
                          **{'capture-output': True})['pid']

    def status(self, pid):
        """(exited, exit code, stdout, stderr) of a spawned command."""
        st = self.agent('guest-exec-status', pid=pid)
        out = base64.b64decode(st.get('out-data') or '').decode(
            'utf-8', 'replace')
        err = base64.b64decode(st.get('err-data') or '').decode(
            'utf-8', 'replace')
        return (st.get('exited', False),
                st.get('exitcode', st.get('signal')), out, err)

    def run(self, path, *args, timeout=120):
        """Run ``path args`` in the guest; (exit code, stdout, stderr)."""
        pid = self.spawn(path, *args)
        deadline = time.monotonic() + timeout
        while True:
            exited, code, out, err = self.status(pid)
            if exited:
                return code, out, err
            if time.monotonic() > deadline:
                raise AssertionError('%s %s did not end in the guest '
                                     'within %ss' % (path, args, timeout))
            time.sleep(0.2)

    def sh(self, script, timeout=120):
        return self.run('/bin/sh', '-c', script, timeout=timeout)

    def upload(self, local, remote, mode='755'):
        """Copy a file of this machine into the guest."""
        with open(local, 'rb') as f:
            data = f.read()
        handle = self.agent('guest-file-open', path=remote, mode='w')
        try:
            for off in range(0, len(data), CHUNK):
                chunk = data[off:off + CHUNK]
                self.agent('guest-file-write', handle=handle,
                           **{'buf-b64': base64.b64encode(chunk).decode()})
        finally:
            self.agent('guest-file-close', handle=handle)
        code, _out, err = self.run('/bin/chmod', mode, remote)
        assert code == 0, err

    def kernel_log(self):
        code, out, err = self.run('/bin/dmesg')
        assert code == 0, err
        return out

    def oom_lines(self):
        """The kernel's lines about running out of memory (none is
        good)."""
        return [line for line in self.kernel_log().splitlines()
                if OOM_PATTERN.search(line)]

    def meminfo(self):
        code, out, err = self.run('/bin/cat', '/proc/meminfo')
        assert code == 0, err
        info = {}
        for line in out.splitlines():
            name, _, rest = line.partition(':')
            if rest.split():
                info[name] = int(rest.split()[0])
        return info

    def swap_used_kb(self):
        code, out, err = self.run('/bin/cat', '/proc/swaps')
        assert code == 0, err
        return sum(int(line.split()[3]) for line in out.splitlines()[1:]
                   if len(line.split()) >= 5)


def start_memhog(shell, step_mb, interval_ms, peak_mb, free_file,
                 binary=None):
    """Copy memhog into the guest and start it; its guest pid."""
    shell.upload(binary or build_memhog(), GUEST_MEMHOG)
    shell.run('/bin/rm', '-f', free_file)
    return shell.spawn(GUEST_MEMHOG, str(step_mb), str(interval_ms),
                       str(peak_mb), free_file)
