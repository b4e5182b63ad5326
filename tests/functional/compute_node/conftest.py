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

import os
import subprocess
import sys
import time
import uuid

import pytest

from composable import conf
from tests.functional.compute_node import dataplane

SWAP_DIR = '/var/tmp'  # tmpfs and overlayfs cannot hold swap files
SWAP_FILE_MB = 16


@pytest.fixture(scope='module')
def tgt():
    daemon = dataplane.TgtDaemon()
    yield daemon
    daemon.stop()


@pytest.fixture(scope='module')
def guest(libvirt_conn):
    """The tiny guest, booted once for the module (TCG: ~10 s here)."""
    yield from dataplane.running_tiny_guest(libvirt_conn)


def make_swap_file():
    path = os.path.join(SWAP_DIR, 'composable-test-swap-%s'
                        % uuid.uuid4().hex[:8])
    with open(path, 'wb') as f:
        f.write(b'\0' * SWAP_FILE_MB * dataplane.MiB)
    os.chmod(path, 0o600)
    return path


def swapoff_quietly(path):
    subprocess.run(['swapoff', path], capture_output=True, check=False)


@pytest.fixture(scope='module')
def swapon_allowed():
    path = make_swap_file()
    try:
        for cmd in (['mkswap', path], ['swapon', path]):
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode:
                dataplane.unavailable(
                    'this kernel/container does not allow %s: %s' % (
                        cmd[0], proc.stderr.strip()))
    finally:
        swapoff_quietly(path)
        os.unlink(path)


@pytest.fixture(scope='module')
def privsep_daemon():
    """The privileged functions run in a privsep daemon started by the
    privsep-helper of this Python (the tests run as root, so no sudo)."""
    helper = os.path.join(os.path.dirname(sys.executable), 'privsep-helper')
    if not os.path.exists(helper):
        dataplane.unavailable('privsep-helper is not installed next to %s'
                              % sys.executable)
    if os.geteuid() != 0:
        dataplane.unavailable('the privsep daemon needs root here')
    # oslo.privsep adds the context and socket arguments itself.
    conf.CONF.set_override('helper_command', helper,
                           'composable_sys_admin')
    before = _privsep_daemons()
    yield
    conf.CONF.clear_override('helper_command', 'composable_sys_admin')
    # The daemon exits once its channel is closed; wait for it, so that
    # nothing of the test outlives it.
    from composable import privsep
    privsep.sys_admin_pctxt.stop()
    deadline = time.monotonic() + 60
    while _privsep_daemons() - before and time.monotonic() < deadline:
        time.sleep(0.1)


def _privsep_daemons():
    pids = set()
    for name in os.listdir('/proc'):
        if not name.isdigit():
            continue
        try:
            with open('/proc/%s/cmdline' % name, 'rb') as f:
                cmdline = f.read()
        except OSError:
            continue
        if b'privsep-helper' in cmdline and b'sys_admin_pctxt' in cmdline:
            pids.add(int(name))
    return pids
