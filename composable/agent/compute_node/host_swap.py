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

"""Host-mode memory: leased extents as swap of the compute node itself.

Each extent is an iSCSI LUN on a memory node. The host's open-iscsi
initiator logs in to it and the LUN becomes a swap device with the same
priority for all extents, so Linux spreads pages over them; the libvirt
memory tuning of the guests (elsewhere) decides whose cold pages go
there. The command contract, per extent::

    iscsiadm -m node -T IQN -p PORTAL [-I iser] -o new
    iscsiadm -m node -T IQN -p PORTAL -o update -n node.startup -v manual
    iscsiadm ... -o update -n node.session.timeo.replacement_timeout -v N
    iscsiadm ... -o update -n node.session.auth.authmethod -v CHAP
    iscsiadm ... -o update -n node.session.auth.username -v USER
    iscsiadm ... -o update -n node.session.auth.password -v SECRET
    iscsiadm -m node -T IQN -p PORTAL --login
    (wait for /dev/disk/by-path/ip-PORTAL-iscsi-IQN-lun-LUN)
    mkswap DEVICE
    swapon -p PRIORITY DEVICE

and back::

    (refuse if the pages on the device do not fit into MemAvailable)
    swapoff DEVICE
    iscsiadm -m node -T IQN -p PORTAL --logout
    iscsiadm -m node -T IQN -p PORTAL -o delete

The node record is created statically (``-o new``), as os-brick does,
rather than by SendTargets discovery: discovery would record every
target the memory node shows this initiator and needs discovery
credentials of its own, while a static record holds exactly the extent
and its CHAP credentials. A long replacement timeout makes the kernel
queue swap I/O while a session is re-established instead of failing it
(failed swap I/O kills processes). node.startup is manual: after a
reboot the host does not log in again by itself; the lease is attached
again through composable.

Commands go through an injectable runner (``runner(argv,
ok_exit_codes=(0,), secrets=(), timeout=None)``); CHAP secrets are
masked in everything logged or raised. The default runner,
PrivsepRunner, hands each command to the privileged function of its
kind in composable.privsep.compute (run by the oslo.privsep daemon), so
the agent itself needs no root: the argv above stays the contract, and
the privileged side checks what it is asked to run.
"""

import collections
import os
import time

from oslo_log import log as logging

from composable.agent.compute_node import portal as iscsi_portal
from composable.common import exception
from composable.common import states
from composable import conf
from composable.privsep import compute as priv_compute

CONF = conf.CONF
LOG = logging.getLogger(__name__)

BY_PATH_DIR = '/dev/disk/by-path'
PROC_SWAPS = '/proc/swaps'
PROC_MEMINFO = '/proc/meminfo'
INITIATOR_NAME_FILE = '/etc/iscsi/initiatorname.iscsi'
POLL_INTERVAL = 0.5

# iscsiadm exit codes (open-iscsi include/iscsi_err.h).
ISCSI_ERR_LOGIN = 5
ISCSI_ERR_SESS_EXISTS = 15
ISCSI_ERR_FATAL_LOGIN = 19
ISCSI_ERR_NO_OBJS_FOUND = 21
ISCSI_ERR_LOGIN_AUTH_FAILED = 24

MASK = '***'

CommandResult = collections.namedtuple('CommandResult',
                                       ['exit_code', 'stdout', 'stderr'])

SwapEntry = collections.namedtuple('SwapEntry', ['filename', 'type',
                                                 'size_kb', 'used_kb',
                                                 'priority'])


def _mask(text, secrets):
    text = str(text)
    for secret in secrets:
        if secret:
            text = text.replace(secret, MASK)
    return text


class CommandFailed(exception.DriverError):
    msg_fmt = '%(cmd)s failed with exit code %(exit_code)s: %(stderr)s'

    def __init__(self, cmd, exit_code, stdout='', stderr='', secrets=()):
        self.cmd = _mask(' '.join(cmd), secrets)
        self.exit_code = exit_code
        self.stdout = _mask(stdout, secrets)
        self.stderr = _mask(stderr, secrets).strip()
        super().__init__(cmd=self.cmd, exit_code=exit_code,
                         stderr=self.stderr or '(no output)')


class SwapoffWouldNotFit(exception.DriverError):
    """swapoff would have to bring back more pages than RAM can hold."""
    code = 409
    error_code = 'composable.swap.would_not_fit'


class PrivsepRunner(object):
    """Runs the host-mode commands as root through the privsep daemon.

    Each command of the contract maps to one privileged function
    (``ops``, composable.privsep.compute by default); anything else is
    refused here, and the privileged side refuses arguments it does not
    accept (a device that is not a block device, an iscsiadm command
    that is not in node mode...).
    """

    def __init__(self, ops=None):
        self.ops = ops or priv_compute

    def _dispatch(self, argv, timeout):
        name = argv[0] if argv else None
        if name in ('mkswap', 'swapon', 'swapoff') and \
                not argv[-1].startswith('/'):
            # Options (swapoff -a, mkswap -f...) are not part of the
            # contract: the last argument is always a device path.
            return None
        if name == 'iscsiadm':
            return self.ops.iscsiadm(argv[1:], timeout)
        if name == 'mkswap' and len(argv) == 2:
            return self.ops.mkswap(argv[1], timeout)
        if name == 'swapon' and len(argv) == 4 and argv[1] == '-p':
            return self.ops.swapon(argv[3], int(argv[2]), timeout)
        if name == 'swapoff' and len(argv) == 2:
            return self.ops.swapoff(argv[1], timeout)
        return None

    def __call__(self, argv, ok_exit_codes=(0,), secrets=(), timeout=None):
        argv = [str(a) for a in argv]
        shown = _mask(' '.join(argv), secrets)
        LOG.debug('Running %s', shown)
        try:
            result = self._dispatch(argv, timeout)
        except (priv_compute.ComputeError, ValueError) as exc:
            # ValueError: a swap priority that is not a number.
            raise exception.DriverError(
                reason='refused to run %s as root: %s' % (
                    shown, _mask(exc, secrets)))
        if result is None:
            raise exception.DriverError(
                reason='%s is not a command this agent runs as root' %
                shown)
        if result.get('timed_out'):
            raise exception.DriverTimeout(
                what=shown, timeout=timeout or priv_compute.DEFAULT_TIMEOUT)
        if result['exit_code'] not in ok_exit_codes:
            raise CommandFailed(argv, result['exit_code'],
                                result.get('stdout') or '',
                                result.get('stderr') or '',
                                secrets=secrets)
        return CommandResult(result['exit_code'],
                             _mask(result.get('stdout') or '', secrets),
                             _mask(result.get('stderr') or '', secrets))


def read_swaps(path=PROC_SWAPS):
    """The active swap areas, from /proc/swaps."""
    entries = []
    with open(path) as f:
        lines = f.read().splitlines()
    for line in lines[1:]:
        parts = line.split()
        if len(parts) < 5:
            continue
        # A name with spaces is escaped as \040 by the kernel.
        name = parts[0].replace('\\040', ' ')
        entries.append(SwapEntry(name, parts[1], int(parts[2]),
                                 int(parts[3]), int(parts[4])))
    return entries


def read_mem_available_kb(path=PROC_MEMINFO):
    with open(path) as f:
        for line in f:
            if line.startswith('MemAvailable:'):
                return int(line.split()[1])
    raise exception.DriverError(reason='no MemAvailable in %s' % path)


class HostSwap(object):
    """Leased memory as swap of this host, over the kernel initiator."""

    def __init__(self, runner=None, priority=None, attach_timeout=None,
                 detach_timeout=None, replacement_timeout=None,
                 headroom_mb=None, by_path_dir=BY_PATH_DIR,
                 proc_swaps=PROC_SWAPS, proc_meminfo=PROC_MEMINFO,
                 initiator_name_file=INITIATOR_NAME_FILE,
                 poll_interval=POLL_INTERVAL, sleep=time.sleep,
                 clock=time.monotonic):
        opts = CONF.compute_node
        self.runner = runner or PrivsepRunner()
        self.priority = priority if priority is not None \
            else opts.swap_priority
        self.attach_timeout = attach_timeout or opts.attach_timeout
        self.detach_timeout = detach_timeout or opts.detach_timeout
        self.replacement_timeout = (
            replacement_timeout if replacement_timeout is not None
            else opts.iscsi_replacement_timeout)
        self.headroom_kb = 1024 * (headroom_mb if headroom_mb is not None
                                   else opts.swapoff_headroom_mb)
        self.by_path_dir = by_path_dir
        self.proc_swaps = proc_swaps
        self.proc_meminfo = proc_meminfo
        self.initiator_name_file = initiator_name_file
        self.poll_interval = poll_interval
        self._sleep = sleep
        self._clock = clock

    # ------------------------------------------------------------ paths

    def device_path(self, extent):
        """The udev by-path link of the extent's LUN."""
        return os.path.join(self.by_path_dir, 'ip-%s-iscsi-%s-lun-%s' % (
            iscsi_portal.format_portal(extent.get('portal')),
            extent['target_iqn'],
            extent['lun']))

    def _node(self, extent):
        cmd = ['iscsiadm', '-m', 'node', '-T', extent['target_iqn'],
               '-p', iscsi_portal.format_portal(extent.get('portal'))]
        if extent.get('transport') == 'iser':
            cmd += ['-I', 'iser']
        return cmd

    # ------------------------------------------------------------- swap

    def swaps(self):
        return read_swaps(self.proc_swaps)

    def swap_entry(self, device):
        """The /proc/swaps entry of device (any path to it), or None."""
        real = os.path.realpath(device)
        for entry in self.swaps():
            if entry.filename in (device, real) or \
                    os.path.realpath(entry.filename) == real:
                return entry
        return None

    def enable_swap(self, device, priority=None):
        """mkswap + swapon -p; nothing to do if device is swap already."""
        priority = self.priority if priority is None else priority
        real = os.path.realpath(device)
        if self.swap_entry(real) is not None:
            LOG.info('%s is already active swap', real)
            return real
        self.runner(['mkswap', real])
        self.runner(['swapon', '-p', str(priority), real])
        LOG.info('%(dev)s is swap now, priority %(prio)d',
                 {'dev': real, 'prio': priority})
        return real

    def check_swapoff_fits(self, entries, what=None):
        """Refuse (SwapoffWouldNotFit) when the pages on the swap areas
        would not fit into MemAvailable with the headroom to spare."""
        used_kb = sum(e.used_kb for e in entries)
        available_kb = read_mem_available_kb(self.proc_meminfo)
        if used_kb + self.headroom_kb > available_kb:
            raise SwapoffWouldNotFit(
                reason='Refusing to swapoff %(what)s: it holds %(used)d MiB '
                       'of swapped-out pages but this host has only '
                       '%(avail)d MiB available (MemAvailable) and keeps '
                       '%(head)d MiB spare ([compute_node]'
                       'swapoff_headroom_mb). Free memory on the host (stop '
                       'or shrink workloads) and detach again.' % {
                           'what': what or ', '.join(
                               e.filename for e in entries),
                           'used': (used_kb + 1023) // 1024,
                           'avail': available_kb // 1024,
                           'head': self.headroom_kb // 1024})

    def disable_swap(self, device, check_memory=True):
        """swapoff device if it is active swap; refuse if it won't fit."""
        entry = self.swap_entry(device)
        if entry is None:
            return False
        if check_memory:
            self.check_swapoff_fits([entry])
        self.runner(['swapoff', entry.filename],
                    timeout=self.detach_timeout)
        LOG.info('swapoff %s done', entry.filename)
        return True

    # ----------------------------------------------------------- attach

    def _check_initiator(self, initiator_iqn):
        """open-iscsi logs in with the name in initiatorname.iscsi: it has
        to be the one the exports are restricted to."""
        if not initiator_iqn or not self.initiator_name_file:
            return
        try:
            with open(self.initiator_name_file) as f:
                content = f.read()
        except OSError as exc:
            raise exception.DriverError(
                reason='open-iscsi is not configured on this host (%s: %s); '
                       'set InitiatorName=%s there' % (
                           self.initiator_name_file, exc.strerror,
                           initiator_iqn))
        names = [line.split('=', 1)[1].strip()
                 for line in content.splitlines()
                 if line.strip().startswith('InitiatorName=')]
        if initiator_iqn not in names:
            raise exception.DriverError(
                reason='open-iscsi logs in as %s (%s) but the memory is '
                       'exported to %s ([compute_node]initiator_iqn and the '
                       'host\'s initiator_iqn); make them the same' % (
                           ', '.join(names) or '(no InitiatorName)',
                           self.initiator_name_file, initiator_iqn))

    def attach(self, extents, initiator_iqn=None):
        """Log in to each extent and make it swap.

        Returns {extent_uuid: {"mode": "host", "device": by-path link,
        "swap_device": /dev/sdX, "swap_priority": N}}. If an extent fails,
        the extents this call set up are torn down again.
        """
        initiator_iqn = initiator_iqn or CONF.compute_node.initiator_iqn
        self._check_initiator(initiator_iqn)
        details = {}
        done = []
        try:
            for extent in extents:
                details[extent['uuid']] = self.attach_extent(extent)
                done.append(extent)
        except Exception:
            for extent in reversed(done):
                try:
                    self.detach_extent(extent, check_memory=False)
                except Exception:
                    LOG.exception('Could not undo the attach of extent %s',
                                  extent['uuid'])
            raise
        return details

    def attach_extent(self, extent):
        node = self._node(extent)
        secret = extent.get('chap_secret')
        secrets = (secret,) if secret else ()
        path = self.device_path(extent)
        LOG.info('Logging in to target %(iqn)s lun %(lun)s at %(portal)s '
                 'for extent %(extent)s',
                 {'iqn': extent['target_iqn'], 'lun': extent['lun'],
                  'portal': extent.get('portal'), 'extent': extent['uuid']})
        self.runner(node + ['-o', 'new'],
                    ok_exit_codes=(0, ISCSI_ERR_SESS_EXISTS))
        settings = [
            ('node.startup', 'manual'),
            ('node.session.timeo.replacement_timeout',
             str(self.replacement_timeout)),
        ]
        if extent.get('chap_username'):
            settings += [
                ('node.session.auth.authmethod', 'CHAP'),
                ('node.session.auth.username', extent['chap_username']),
                ('node.session.auth.password', secret or ''),
            ]
        else:
            settings.append(('node.session.auth.authmethod', 'None'))
        for name, value in settings:
            self.runner(node + ['-o', 'update', '-n', name, '-v', value],
                        secrets=secrets)
        try:
            self.runner(node + ['--login'],
                        ok_exit_codes=(0, ISCSI_ERR_SESS_EXISTS),
                        secrets=secrets, timeout=self.attach_timeout)
        except CommandFailed as exc:
            raise exception.DriverError(
                reason='iSCSI login to target %s at %s for extent %s '
                       'failed: %s; %s' % (
                           extent['target_iqn'], extent.get('portal'),
                           extent['uuid'], exc.message,
                           self._login_hint(exc.exit_code)))
        device = self._wait_for_device(path, extent)
        real = self.enable_swap(device)
        return {'mode': states.ATTACH_HOST, 'device': path,
                'swap_device': real, 'swap_priority': self.priority}

    @staticmethod
    def _login_hint(exit_code):
        if exit_code == ISCSI_ERR_LOGIN_AUTH_FAILED:
            return ('the target refused the CHAP login: the credentials '
                    'of the extent do not match its export')
        if exit_code in (ISCSI_ERR_FATAL_LOGIN, ISCSI_ERR_LOGIN):
            return ('the memory node refused the login: check that it '
                    'exports the extent to this host\'s initiator')
        return 'check that the memory node is reachable at the portal'

    def _wait_for_device(self, path, extent):
        deadline = self._clock() + self.attach_timeout
        while not os.path.exists(path):
            if self._clock() >= deadline:
                raise exception.DriverTimeout(
                    what='Block device %s of extent %s' % (
                        path, extent['uuid']),
                    timeout=self.attach_timeout)
            self._sleep(self.poll_interval)
        return path

    # ----------------------------------------------------------- detach

    def detach(self, extents):
        """swapoff and log out of each extent, after checking that all of
        their swapped-out pages fit into memory. Idempotent."""
        active = []
        for extent in extents:
            path = self.device_path(extent)
            entry = self.swap_entry(path) if os.path.exists(path) else None
            if entry is not None:
                active.append(entry)
        if active:
            self.check_swapoff_fits(
                active, what='the swap of extents %s' % ', '.join(
                    e['uuid'] for e in extents))
        for extent in extents:
            self.detach_extent(extent, check_memory=False)

    def detach_extent(self, extent, check_memory=True):
        path = self.device_path(extent)
        if os.path.exists(path):
            self.disable_swap(path, check_memory=check_memory)
        node = self._node(extent)
        self.runner(node + ['--logout'],
                    ok_exit_codes=(0, ISCSI_ERR_NO_OBJS_FOUND),
                    timeout=self.detach_timeout)
        self.runner(node + ['-o', 'delete'],
                    ok_exit_codes=(0, ISCSI_ERR_NO_OBJS_FOUND))
        LOG.info('Logged out of target %(iqn)s (extent %(extent)s)',
                 {'iqn': extent['target_iqn'], 'extent': extent['uuid']})
