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

* the program is named ``switchtec`` (a bare name looked up on PATH, or
  an absolute path);
* the command is one of ``fabric gfms_bind``, ``fabric gfms_unbind``,
  ``fabric gfms_dump -t PAX_ALL|HVD_DETAIL``, ``port-bind``,
  ``port-unbind`` and ``port-bind-info`` (``-`` or ``_`` in the names, as
  the CLI accepts), followed by the device;
* only the options those commands take, each once, with numbers for
  values. Nothing that writes a file or flashes firmware can be asked
  for.
"""

import os
import re
import subprocess

from oslo_log import log as logging

from composable import privsep

LOG = logging.getLogger(__name__)

SWITCHTEC = 'switchtec'
DEFAULT_TIMEOUT = 30

_NUMBER = r'(?:0[xX][0-9a-fA-F]+|[0-9]+)'
_INT = re.compile(_NUMBER + '$')
_INT_LIST = re.compile(_NUMBER + '(?:,' + _NUMBER + ')*$')
_DUMP_TYPES = re.compile('(?:PAX_ALL|HVD_DETAIL)$')
# A character device path, or a remote device as the CLI spells it
# ("host:port" style, "id@device").
_DEVICE = re.compile(r'[A-Za-z0-9_./:@\[\]][A-Za-z0-9_./:@\[\]-]*$')

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


def check_argv(argv):
    """Raise ValueError unless ``argv`` is a switchtec command this
    module runs."""
    if not isinstance(argv, (list, tuple)) or not all(
            isinstance(a, str) for a in argv):
        raise TypeError('the command must be a list of strings')
    argv = list(argv)
    if not argv:
        raise ValueError('an empty command')
    program = argv[0]
    if os.path.basename(program) != SWITCHTEC or (
            program != SWITCHTEC and not os.path.isabs(program)):
        raise ValueError('only the switchtec CLI is run, by its name or '
                         'an absolute path')
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
    if not rest or not _DEVICE.match(rest[0]):
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
        if not pattern.match(value):
            raise ValueError('%r is not a valid value of %s' %
                             (value, option))
    return argv


def _timeout(timeout):
    return privsep.timeout_seconds(timeout, DEFAULT_TIMEOUT)


def run_switchtec(argv, timeout=None):
    """The unprivileged body of :func:`switchtec` (argv checked)."""
    argv = check_argv(argv)
    timeout = _timeout(timeout)
    shown = ' '.join(argv)
    try:
        proc = subprocess.run(argv, stdin=subprocess.DEVNULL,
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
def switchtec(argv, timeout=None):
    """Run one switchtec CLI command; ``(exit_code, stdout, stderr)``."""
    return run_switchtec(argv, timeout)
