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

"""Privileged functions of a compute node (host-mode memory).

Each function runs one command as root, never through a shell, and
returns ``{"exit_code", "stdout", "stderr", "timed_out"}``: a failing
command is not an exception, the caller knows which exit codes are
expected (a session that already exists, a record already gone).

What may be run is narrow:

* ``iscsiadm`` in node mode only (``-m node ...``): the static node
  records, login and logout of composable.agent.compute_node.host_swap;
* ``mkswap``, ``swapon -p N`` and ``swapoff`` on a block device under
  ``/dev`` only. ``mkswap`` also refuses a device that is mounted or
  already swap, so a caller cannot wipe a file system with it.

The CHAP password of a node record travels as the value of
``-n node.session.auth.password -v SECRET``; it is masked in every log
line, and removed from the output returned.
"""

import os
import stat
import subprocess

from oslo_log import log as logging

from composable import privsep
from composable.privsep import errors

LOG = logging.getLogger(__name__)

MASK = '***'
ISCSIADM = 'iscsiadm'
MKSWAP = 'mkswap'
SWAPON = 'swapon'
SWAPOFF = 'swapoff'
# Node settings whose value is a secret.
SECRET_SETTINGS = ('node.session.auth.password',
                   'node.session.auth.password_in')
DEFAULT_TIMEOUT = 120
PROC_SWAPS = '/proc/swaps'
PROC_MOUNTS = '/proc/self/mounts'
# swapon(8) accepts priorities from -1 to 32767.
PRIORITY_RANGE = (-1, 32767)


class ComputeError(errors.PrivilegedError):
    """A privileged host-mode command was refused before it ran:
    ``code`` (an ErrorCode, INVALID_ARGUMENT for a device or command
    these functions do not take) says why, ``message`` in words. A
    command that ran and failed is not an error: its exit code and
    output are returned."""


ErrorCode = errors.ErrorCode
_typed = errors.typed(ComputeError)


def secrets_of(argv):
    """The secret values in an iscsiadm command."""
    found = []
    for i, arg in enumerate(argv):
        if arg == '-n' and i + 3 < len(argv) and \
                argv[i + 1] in SECRET_SETTINGS and argv[i + 2] == '-v':
            found.append(argv[i + 3])
    return [s for s in found if s]


def masked(text, secrets):
    text = str(text)
    for secret in secrets:
        text = text.replace(secret, MASK)
    return text


def _check_args(args):
    if not isinstance(args, (list, tuple)) or not all(
            isinstance(a, str) for a in args):
        raise TypeError('command arguments must be a list of strings')


def _timeout(timeout):
    return privsep.timeout_seconds(timeout, DEFAULT_TIMEOUT)


def _run(argv, timeout, secrets=()):
    shown = masked(' '.join(argv), secrets)
    try:
        proc = subprocess.run(argv, stdin=subprocess.DEVNULL,
                              capture_output=True, text=True,
                              timeout=timeout, shell=False, check=False)
    except FileNotFoundError:
        return {'exit_code': 127, 'stdout': '', 'timed_out': False,
                'stderr': '%s: command not found' % argv[0]}
    except subprocess.TimeoutExpired:
        LOG.warning('%(cmd)s did not finish within %(t)s seconds',
                    {'cmd': shown, 't': timeout})
        return {'exit_code': None, 'stdout': '', 'timed_out': True,
                'stderr': '%s timed out after %s seconds' % (argv[0],
                                                             timeout)}
    LOG.debug('Ran %(cmd)s: exit %(rc)s', {'cmd': shown,
                                           'rc': proc.returncode})
    return {'exit_code': proc.returncode, 'timed_out': False,
            'stdout': masked(proc.stdout, secrets),
            'stderr': masked(proc.stderr, secrets)}


def _proc_entries(path, column):
    """The first-column names in /proc/swaps or /proc/self/mounts,
    resolved."""
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except OSError:
        return set()
    names = set()
    for line in lines:
        fields = line.split()
        if len(fields) > column and fields[column].startswith('/'):
            name = fields[column].replace('\\040', ' ')
            names.add(os.path.realpath(name))
    return names


def _block_device(device):
    """The resolved path of ``device``, which must be a block device
    under /dev."""
    if not isinstance(device, str) or not os.path.isabs(device):
        raise ValueError('%r is not an absolute device path' % (device,))
    real = os.path.realpath(device)
    if not real.startswith('/dev/'):
        raise ValueError('%s is not a device under /dev' % device)
    try:
        mode = os.stat(real).st_mode
    except FileNotFoundError:
        raise ValueError('%s does not exist' % device)
    if not stat.S_ISBLK(mode):
        raise ValueError('%s is not a block device' % device)
    return real


@privsep.sys_admin_pctxt.entrypoint
@_typed
def iscsiadm(args, timeout=None):
    """Run ``iscsiadm -m node ...``."""
    _check_args(args)
    args = list(args)
    if args[:2] != ['-m', 'node']:
        raise ValueError('only iscsiadm -m node commands are run')
    return _run([ISCSIADM] + args, _timeout(timeout), secrets_of(args))


@privsep.sys_admin_pctxt.entrypoint
@_typed
def mkswap(device, timeout=None):
    """Write a swap signature on a block device that is neither mounted
    nor swap already."""
    real = _block_device(device)
    if real in _proc_entries(PROC_MOUNTS, 0):
        raise ValueError('%s is mounted; refusing to make it swap' % device)
    if real in _proc_entries(PROC_SWAPS, 0):
        raise ValueError('%s is swap already' % device)
    return _run([MKSWAP, real], _timeout(timeout))


@privsep.sys_admin_pctxt.entrypoint
@_typed
def swapon(device, priority, timeout=None):
    """``swapon -p priority device``."""
    real = _block_device(device)
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise TypeError('the swap priority must be an integer')
    if not PRIORITY_RANGE[0] <= priority <= PRIORITY_RANGE[1]:
        raise ValueError('swap priority %d is out of range' % priority)
    return _run([SWAPON, '-p', str(priority), real], _timeout(timeout))


@privsep.sys_admin_pctxt.entrypoint
@_typed
def swapoff(device, timeout=None):
    """``swapoff device``: it may take long, the pages come back into
    RAM."""
    real = _block_device(device)
    return _run([SWAPOFF, real], _timeout(timeout))
