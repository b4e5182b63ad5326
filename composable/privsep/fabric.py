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

"""Privileged functions of the conductor's fabric drivers.

``switchtec`` runs the Switchtec management CLI (switchtec-user) as root,
never through a shell, and returns ``(exit_code, stdout, stderr)``;
``exit_code`` is None when the command did not finish in time (it is
killed). A failing command is not an exception: the driver reads the
error the CLI printed.

What may be run is narrow, and checked here, on the privileged side:

* the program is ``[fabric]switchtec_command`` of the service's own
  configuration, and nothing else (a bare name is looked up on a fixed
  PATH, :data:`SAFE_PATH`, never on the caller's);
* the command is one of ``fabric gfms_bind``, ``fabric gfms_unbind``,
  ``fabric gfms_dump -t PAX_ALL|HVD_DETAIL``, ``port-bind``,
  ``port-unbind`` and ``port-bind-info`` (``-`` or ``_`` in the names, as
  the CLI accepts), followed by the device;
* the device is ``/dev/switchtec<N>`` or one of the remote forms of the
  CLI (:data:`DEVICE_PATTERN`);
* only the options those commands take, each once, with numbers for
  values. Nothing that writes a file or flashes firmware can be asked
  for.

Every pattern must match its whole argument (``re.fullmatch``): a
trailing newline or anything after the value is refused.
"""

import os
import re
import shutil
import subprocess

from oslo_log import log as logging

from composable import conf
from composable import privsep
from composable.privsep import errors

LOG = logging.getLogger(__name__)

CONF = conf.CONF

SWITCHTEC = 'switchtec'
DEFAULT_TIMEOUT = 30
# The longest a command may run: a switch that does not answer within
# ten minutes will not answer.
MAX_TIMEOUT = 600
# Where a bare [fabric]switchtec_command is looked up; the PATH of the
# process asking is never used.
SAFE_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'

_NUMBER = r'(?:0[xX][0-9a-fA-F]+|[0-9]+)'
_INT = re.compile(_NUMBER)
_INT_LIST = re.compile(_NUMBER + '(?:,' + _NUMBER + ')*')
_DUMP_TYPES = re.compile('PAX_ALL|HVD_DETAIL')
# The switch as the CLI opens it: the character device
# (/dev/switchtec<N>), with the PAX ID in front on a PAX fabric
# (<pax id>@/dev/switchtec<N>), or a remote management interface: an
# I2C adapter and slave address (/dev/i2c-<N>@<addr>, /dev/i2c-<N>:<addr>,
# <adapter>@<addr>) or an Ethernet endpoint (<host>:<instance>). Used
# with fullmatch, here and by the driver's driver_info check.
DEVICE_PATTERN = re.compile(
    r'(?:[0-9]+@)?/dev/switchtec[0-9]+'
    r'|/dev/i2c-[0-9]+[@:]' + _NUMBER +
    r'|[0-9]+@' + _NUMBER +
    r'|[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?:[0-9]+')

# (words of the command, with "_") -> {option: pattern of its value}
COMMANDS = {
    ('fabric', 'gfms_bind'): {'-s': _INT, '-p': _INT, '-l': _INT,
                              '-f': _INT_LIST},
    ('fabric', 'gfms_unbind'): {'-s': _INT, '-p': _INT, '-l': _INT},
    ('fabric', 'gfms_dump'): {'-t': _DUMP_TYPES, '-d': _INT},
    ('port_bind',): {'-p': _INT, '-l': _INT, '-f': _INT},
    ('port_unbind',): {'-p': _INT, '-l': _INT},
    ('port_bind_info',): {'-f': _INT},
}


class FabricError(errors.PrivilegedError):
    """The privileged switchtec command was refused before it ran:
    ``code`` (an ErrorCode, INVALID_ARGUMENT for a command it does not
    run) says why, ``message`` in words. A command that ran and failed
    is not an error: its exit code and output are returned."""


ErrorCode = errors.ErrorCode
_typed = errors.typed(FabricError)


def configured_command():
    """``[fabric]switchtec_command`` as configured; ValueError unless it
    is a bare name or an absolute path."""
    command = CONF.fabric.switchtec_command
    if not command or not (os.path.isabs(command) or
                           os.sep not in command):
        raise ValueError('[fabric]switchtec_command must be a bare '
                         'program name or an absolute path')
    return command


def resolve_command(command):
    """The absolute path ``command`` runs, a bare name looked up on
    :data:`SAFE_PATH`; None when there is no such program."""
    if os.path.isabs(command):
        return command
    return shutil.which(command, path=SAFE_PATH)


def check_argv(argv):
    """Raise ValueError unless ``argv`` is a switchtec command this
    module runs."""
    if not isinstance(argv, (list, tuple)) or not all(
            isinstance(a, str) for a in argv):
        raise TypeError('the command must be a list of strings')
    argv = list(argv)
    if not argv:
        raise ValueError('an empty command')
    if argv[0] != configured_command():
        raise ValueError('only the switchtec CLI of [fabric]'
                         'switchtec_command is run')
    rest = argv[1:]
    options = None
    for words, allowed in COMMANDS.items():
        given = [w.replace('-', '_') for w in rest[:len(words)]]
        if tuple(given) == words:
            options = allowed
            rest = rest[len(words):]
            break
    if options is None:
        raise ValueError('switchtec %s is not a command that is run' %
                         ' '.join(rest[:2]))
    if not rest or not DEVICE_PATTERN.fullmatch(rest[0]):
        raise ValueError('the command does not name a switchtec device')
    rest = rest[1:]
    if len(rest) % 2:
        raise ValueError('every option takes one value')
    seen = set()
    for option, value in zip(rest[::2], rest[1::2]):
        pattern = options.get(option)
        if pattern is None:
            raise ValueError('option %s is not allowed here' % option)
        if option in seen:
            raise ValueError('option %s is given twice' % option)
        seen.add(option)
        if not pattern.fullmatch(value):
            raise ValueError('%r is not a valid value of %s' %
                             (value, option))
    return argv


def _timeout(timeout):
    # Finite, positive and at most an hour (privsep's rule), and never
    # more than a switch operation may take.
    return min(privsep.timeout_seconds(timeout, DEFAULT_TIMEOUT),
               MAX_TIMEOUT)


def run_switchtec(argv, timeout=None):
    """The unprivileged body of :func:`switchtec` (argv checked)."""
    argv = check_argv(argv)
    timeout = _timeout(timeout)
    shown = ' '.join(argv)
    program = resolve_command(argv[0])
    if program is None:
        return 127, '', '%s: command not found' % argv[0]
    try:
        proc = subprocess.run([program] + argv[1:],
                              stdin=subprocess.DEVNULL,
                              capture_output=True, text=True,
                              errors='replace', timeout=timeout,
                              shell=False, check=False)
    except FileNotFoundError:
        return 127, '', '%s: command not found' % argv[0]
    except subprocess.TimeoutExpired:
        LOG.warning('%(cmd)s did not finish within %(t)s seconds',
                    {'cmd': shown, 't': timeout})
        return None, '', '%s timed out after %s seconds' % (argv[0],
                                                            timeout)
    LOG.debug('Ran %(cmd)s: exit %(rc)s', {'cmd': shown,
                                           'rc': proc.returncode})
    return proc.returncode, proc.stdout, proc.stderr


@privsep.sys_admin_pctxt.entrypoint
@_typed
def switchtec(argv, timeout=None):
    """Run one switchtec CLI command; ``(exit_code, stdout, stderr)``."""
    return run_switchtec(argv, timeout)
