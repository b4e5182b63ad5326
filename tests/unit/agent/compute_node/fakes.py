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

"""Fakes for the compute-node unit tests: a command runner that records
what it is asked to run and plays a host's iSCSI initiator and swap, and a
libvirt connection with domains, disks, secrets and a guest agent."""

import base64
import json
import os
import threading
import time
from xml.etree import ElementTree

from composable.agent.compute_node import host_swap
from composable.agent.compute_node import libvirt_guest

# libvirt's code for "QEMU guest agent is not configured".
VIR_ERR_ARGUMENT_UNSUPPORTED = 67
SWAPS_HEADER = 'Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n'


class FakeHostState(object):
    """/dev/disk/by-path, /proc/swaps, /proc/meminfo and
    initiatorname.iscsi of a pretend host, in a temporary directory."""

    def __init__(self, root, mem_available_kb=8 * 1024 * 1024,
                 initiator_iqn='iqn.2010-10.org.openstack.composable:c1'):
        self.root = str(root)
        self.by_path = os.path.join(self.root, 'by-path')
        self.dev = os.path.join(self.root, 'dev')
        os.makedirs(self.by_path)
        os.makedirs(self.dev)
        self.proc_swaps = os.path.join(self.root, 'swaps')
        self.proc_meminfo = os.path.join(self.root, 'meminfo')
        self.initiator_name_file = os.path.join(self.root,
                                                'initiatorname.iscsi')
        with open(self.initiator_name_file, 'w') as f:
            f.write('## generated\nInitiatorName=%s\n' % initiator_iqn)
        self.swaps = {}  # real device -> [size_kb, used_kb, priority]
        self.sessions = set()
        self.set_mem_available(mem_available_kb)
        self._write_swaps()

    def set_mem_available(self, kb):
        with open(self.proc_meminfo, 'w') as f:
            f.write('MemTotal:       16000000 kB\nMemFree:        1000 kB\n'
                    'MemAvailable:   %d kB\n' % kb)

    def _write_swaps(self):
        with open(self.proc_swaps, 'w') as f:
            f.write(SWAPS_HEADER)
            for dev, (size, used, prio) in sorted(self.swaps.items()):
                f.write('%s                               partition\t%d\t\t'
                        '%d\t\t%d\n' % (dev, size, used, prio))

    def set_used(self, device, used_kb):
        self.swaps[os.path.realpath(device)][1] = used_kb
        self._write_swaps()

    def swapon(self, device, priority):
        self.swaps[device] = [65532, 0, priority]
        self._write_swaps()

    def swapoff(self, device):
        self.swaps.pop(device, None)
        self._write_swaps()


class RecordingRunner(object):
    """Records commands; simulates iscsiadm, mkswap, swapon and swapoff
    against a FakeHostState. ``fail(word, exit_code, stderr)`` makes the
    next command containing ``word`` exit with exit_code."""

    def __init__(self, host, make_devices=True):
        self.host = host
        self.make_devices = make_devices
        self.commands = []
        self.calls = []
        self._failures = []
        self._next_sd = 0

    def fail(self, word, exit_code, stderr='', times=1):
        self._failures.append([word, exit_code, stderr, times])

    def names(self):
        """Commands as short strings: 'iscsiadm --login', 'swapon'..."""
        out = []
        for cmd in self.commands:
            if cmd[0] == 'iscsiadm':
                if '-o' in cmd:
                    op = cmd[cmd.index('-o') + 1]
                    if op == 'update':
                        out.append('iscsiadm update %s'
                                   % cmd[cmd.index('-n') + 1])
                    else:
                        out.append('iscsiadm %s' % op)
                else:
                    out.append('iscsiadm %s' % cmd[-1])
            else:
                out.append(cmd[0])
        return out

    def _by_path(self, cmd):
        iqn = cmd[cmd.index('-T') + 1]
        portal = cmd[cmd.index('-p') + 1]
        return iqn, portal

    def __call__(self, argv, ok_exit_codes=(0,), secrets=(), timeout=None):
        argv = list(argv)
        self.commands.append(argv)
        self.calls.append({'argv': argv, 'ok_exit_codes': ok_exit_codes,
                           'secrets': tuple(secrets), 'timeout': timeout})
        for failure in self._failures:
            word, exit_code, stderr, times = failure
            if times and word in argv:
                failure[3] -= 1
                if exit_code not in ok_exit_codes:
                    raise host_swap.CommandFailed(argv, exit_code,
                                                  stderr=stderr,
                                                  secrets=secrets)
                return host_swap.CommandResult(exit_code, '', stderr)
        self._simulate(argv)
        return host_swap.CommandResult(0, '', '')

    def _simulate(self, argv):
        if argv[0] == 'iscsiadm' and '--login' in argv:
            iqn, portal = self._by_path(argv)
            self.host.sessions.add((iqn, portal))
            if self.make_devices:
                real = os.path.join(self.host.dev, 'sd%s'
                                    % 'bcdefghij'[self._next_sd])
                self._next_sd += 1
                open(real, 'w').close()
                # The fake memory node exports every extent as LUN 1.
                link = os.path.join(self.host.by_path,
                                    'ip-%s-iscsi-%s-lun-1' % (portal, iqn))
                if not os.path.lexists(link):
                    os.symlink(real, link)
        elif argv[0] == 'iscsiadm' and '--logout' in argv:
            iqn, portal = self._by_path(argv)
            self.host.sessions.discard((iqn, portal))
            for name in os.listdir(self.host.by_path):
                if name.startswith('ip-%s-iscsi-%s-' % (portal, iqn)):
                    os.unlink(os.path.join(self.host.by_path, name))
        elif argv[0] == 'swapon':
            self.host.swapon(argv[-1], int(argv[argv.index('-p') + 1]))
        elif argv[0] == 'swapoff':
            self.host.swapoff(argv[-1])


# ---------------------------------------------------------------- libvirt


class FakeLibvirtError(Exception):
    def __init__(self, message, code):
        super().__init__(message)
        self.code = code

    def get_error_code(self):
        return self.code


class FakeSecret(object):
    def __init__(self, conn, xml):
        self.conn = conn
        self.xml = xml
        root = ElementTree.fromstring(xml)
        self.usage = root.find('./usage/target').text
        self.ephemeral = root.get('ephemeral')
        self.private = root.get('private')
        self.value = None

    def setValue(self, value, flags=0):
        assert isinstance(value, bytes)
        self.value = value

    def undefine(self):
        self.conn.secrets.pop(self.usage, None)


class FakeGuestAgent(object):
    """The QEMU guest agent of a FakeDomain, as far as guest-exec of the
    swapon, swapoff and swap-reading scripts goes: it keeps the guest's
    swap disks by serial (``swaps``; ``used_kb`` by serial,
    ``mem_available_kb``), runs the scripts' logic on them and records
    each command (``scripts``: their names).

    ``configured`` False: the domain has no agent channel (libvirt's
    "not configured" error); ``connected`` False: it has one but nothing
    answers on it (libvirt's "not connected" error), until
    ``connects_after`` more commands were refused, if that is set;
    ``refuse`` an exit status for swapoff (the guest lacks memory);
    ``running_polls`` how many guest-exec-status calls answer "not
    exited" first; ``refuse_swapon`` makes mkswap/swapon fail; ``hang``
    seconds each guest-exec takes; ``swapon_gate`` (a threading.Event)
    keeps the swapon script running until it is set. ``events`` records
    ('swapon-started' | 'swapon-exited', serial) in order.
    """

    def __init__(self, domain):
        self.domain = domain
        self.configured = True
        self.connected = True
        self.connects_after = None
        self.refused = 0
        self.swaps = set()
        self.refuse = None
        self.running_polls = 0
        self.commands = []
        self._results = {}
        # The scripts run, by name ('composable-swapon'...).
        self.scripts = []
        self.refuse_swapon = False
        self.used_kb = {}
        self.priorities = {}
        self.size_kb = 65532
        self.mem_available_kb = 200 * 1024
        self.mem_total_kb = 1024 * 1024
        # Seconds each guest-exec takes (a guest that hangs).
        self.hang = 0
        self.swapon_gate = None
        self.events = []

    SCRIPTS = {'composable-swapoff': libvirt_guest.GUEST_SWAPOFF_SCRIPT,
               'composable-swapon': libvirt_guest.GUEST_SWAPON_SCRIPT,
               'composable-swaps': libvirt_guest.GUEST_SWAPS_SCRIPT}

    def _composable_swapoff(self, serial):
        dev = self._serials().get(serial)
        if dev is None:
            return (0, 'no-disk\n', '')
        if serial not in self.swaps:
            return (0, 'not-swap /dev/%s\n' % dev, '')
        if self.refuse is not None:
            return (self.refuse, '',
                    'swapoff: /dev/%s: Cannot allocate memory\n' % dev)
        self.swaps.discard(serial)
        self.used_kb.pop(serial, None)
        return (0, 'swapoff /dev/%s\n' % dev, '')

    def _composable_swapon(self, serial, priority, wait_tenths):
        dev = self._serials().get(serial)
        if dev is None:
            return (libvirt_guest.NO_DISK_EXIT, 'no-disk\n', '')
        if serial in self.swaps:
            return (0, 'already-swap /dev/%s\n' % dev, '')
        if self.refuse_swapon:
            return (1, '', 'mkswap/swapon of /dev/%s failed\n' % dev)
        self.swaps.add(serial)
        self.priorities[serial] = int(priority)
        return (0, 'swapon /dev/%s\n' % dev, '')

    def _composable_swaps(self):
        lines = ['disk %s %s' % (dev, serial)
                 for serial, dev in sorted(self._serials().items())]
        lines.append('MemTotal:       %d kB' % self.mem_total_kb)
        lines.append('MemAvailable:   %d kB' % self.mem_available_kb)
        lines.append('swaps')
        lines.append(SWAPS_HEADER.rstrip('\n'))
        for serial in sorted(self.swaps):
            dev = self._serials().get(serial)
            if dev is not None:
                lines.append('/dev/%s partition\t%d\t%d\t%d' % (
                    dev, self.size_kb, self.used_kb.get(serial, 0),
                    self.priorities.get(serial, -2)))
        return (0, '\n'.join(lines) + '\n', '')

    def _serials(self):
        return {d.findtext('serial'): d.find('target').get('dev')
                for d in self.domain.disks if d.findtext('serial')}

    def command(self, request):
        if not self.configured:
            raise FakeLibvirtError(
                'argument unsupported: QEMU guest agent is not configured',
                VIR_ERR_ARGUMENT_UNSUPPORTED)
        if not self.connected and self.connects_after is not None and \
                self.refused >= self.connects_after:
            self.connected = True
        if not self.connected:
            self.refused += 1
            raise FakeLibvirtError(
                'Guest agent is not responding: QEMU guest agent is not '
                'connected', libvirt_guest.VIR_ERR_AGENT_UNRESPONSIVE)
        request = json.loads(request)
        self.commands.append(request)
        args = request['arguments']
        if request['execute'] == 'guest-exec':
            assert args['path'] == '/bin/sh' and args['capture-output']
            name = args['arg'][2]
            assert args['arg'][:2] == ['-c', self.SCRIPTS[name]]
            self.scripts.append(name)
            if self.hang:
                time.sleep(self.hang)
            result = getattr(self, '_' + name.replace('-', '_'))(
                *args['arg'][3:])
            pid = 1000 + len(self.commands)
            self._results[pid] = [self.running_polls, result, name,
                                  (args['arg'][3:] or [None])[0]]
            if name == 'composable-swapon':
                self.events.append(('swapon-started', args['arg'][3]))
            return json.dumps({'return': {'pid': pid}})
        assert request['execute'] == 'guest-exec-status'
        pending = self._results[args['pid']]
        if pending[0] > 0:
            pending[0] -= 1
            return json.dumps({'return': {'exited': False}})
        if pending[2] == 'composable-swapon':
            if self.swapon_gate is not None and \
                    not self.swapon_gate.is_set():
                return json.dumps({'return': {'exited': False}})
            if pending[1] is not None:
                self.events.append(('swapon-exited', pending[3]))
        status, out, err = pending[1]
        return json.dumps({'return': {
            'exited': True, 'exitcode': status,
            'out-data': base64.b64encode(out.encode()).decode(),
            'err-data': base64.b64encode(err.encode()).decode()}})


class FakeLibvirtQemu(object):
    """Stands in for the libvirt_qemu binding: guest agent commands go to
    the FakeDomain's agent."""

    @staticmethod
    def qemuAgentCommand(domain, request, timeout, flags):
        return domain.agent.command(request)


class FakeDomain(object):
    """A running domain whose disks are in its live XML.

    ``unplug_after`` XMLDesc calls after an unplug request the disk is
    gone (None: never, the guest ignores the request); ``attach_error``
    makes attachDeviceFlags raise; ``attach_delay`` makes it slow.
    """

    def __init__(self, uuid, disks=('vda',), active=True):
        self.uuid = uuid
        self.active = active
        self.disks = []
        for dev in disks:
            self.disks.append(ElementTree.fromstring(
                "<disk type='file' device='disk'><source file='/x/%s'/>"
                "<target dev='%s' bus='virtio'/><alias name='virtio-disk%d'/>"
                "</disk>" % (dev, dev, len(self.disks))))
        self.attach_calls = []
        self.detach_calls = []
        self.unplug_after = 1
        self._unplugging = {}
        self.attach_error = None
        self.attach_delay = 0
        self.lock = threading.Lock()
        self.agent = FakeGuestAgent(self)

    def UUIDString(self):
        return self.uuid

    def isActive(self):
        return self.active

    def XMLDesc(self, flags=0):
        with self.lock:
            for alias in list(self._unplugging):
                self._unplugging[alias] -= 1
                if self._unplugging[alias] <= 0:
                    del self._unplugging[alias]
                    self.disks = [d for d in self.disks
                                  if d.find('alias').get('name') != alias]
            devices = ''.join(ElementTree.tostring(d, encoding='unicode')
                              for d in self.disks)
        return ("<domain type='qemu'><uuid>%s</uuid><devices>%s</devices>"
                "</domain>" % (self.uuid, devices))

    def attachDeviceFlags(self, xml, flags):
        self.attach_calls.append((xml, flags))
        if self.attach_delay:
            time.sleep(self.attach_delay)
        if self.attach_error is not None:
            error, self.attach_error = self.attach_error, None
            raise error
        with self.lock:
            self.disks.append(ElementTree.fromstring(xml))

    def detachDeviceAlias(self, alias, flags):
        self.detach_calls.append((alias, flags))
        with self.lock:
            if not any(d.find('alias').get('name') == alias
                       for d in self.disks):
                raise FakeLibvirtError(
                    'device not found', libvirt_guest.VIR_ERR_DEVICE_MISSING)
            if self.unplug_after is not None:
                self._unplugging.setdefault(alias, self.unplug_after)

    def disk_aliases(self):
        with self.lock:
            return [d.find('alias').get('name') for d in self.disks]


class FakeConnection(object):
    def __init__(self):
        self.domains = {}
        self.secrets = {}
        self.alive = True

    def add_domain(self, domain):
        self.domains[domain.uuid] = domain
        return domain

    def isAlive(self):
        return self.alive

    def lookupByUUIDString(self, uuid):
        try:
            return self.domains[uuid]
        except KeyError:
            raise FakeLibvirtError('Domain not found',
                                   libvirt_guest.VIR_ERR_NO_DOMAIN)

    def secretLookupByUsage(self, usage_type, usage):
        assert usage_type == libvirt_guest.VIR_SECRET_USAGE_TYPE_ISCSI
        try:
            return self.secrets[usage]
        except KeyError:
            raise FakeLibvirtError('Secret not found',
                                   libvirt_guest.VIR_ERR_NO_SECRET)

    def secretDefineXML(self, xml, flags=0):
        secret = FakeSecret(self, xml)
        assert secret.usage not in self.secrets
        self.secrets[secret.usage] = secret
        return secret
