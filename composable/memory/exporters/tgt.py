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

"""Export extents with the Linux SCSI target framework (tgtd/tgtadm).

One target per extent, named by ``base.target_iqn(extent)``, with LUN 1
backed by the extent's tmpfs file; tgtd's LUN 0 is its controller. Access
is limited to the bound host's initiator name (``--initiator-name``; never
an address rule: an address rule such as ALL admits any initiator name)
and to the extent's CHAP account. The transport is iSER (``--lld iser``)
or iSCSI over TCP (``--lld iscsi``), from the memory node's transport.

tgtd identifies targets by small integers (tids) that the caller picks:
a free one is taken from ``tgtadm --op show``, under a lock, and picked
again when another process took it first. Tids and target names are
shared by all of tgtd's drivers, so the look shows every driver; one
that tgtd said it does not have (no iSER support) is left out of an
export's first look, which saves a tgtadm run per export. tgtd refuses a
tid or a name taken under any driver, so a refused target creation looks
at every driver again.

Order matters, so that no step ever leaves a target open: a new target
gets its CHAP account, then its initiator rule (a target without any rule
admits nobody), and its LUN last. Re-exporting binds a throw-away account
before replacing the extent's account, so the target is never without
CHAP.

Every tgtadm command goes through ``runner`` (``argv -> (exit code,
stdout, stderr)``), by default the privileged
``composable.privsep.memory.tgtadm``. CHAP passwords only travel as
arguments of the ``--password`` option and are masked in every log line
and error message.
"""

import ipaddress
import re
import secrets
import threading

from oslo_log import log as logging

from composable.common import exception
from composable import conf
from composable.memory.exporters import base
from composable.memory import tmpfs
from composable.privsep import memory as priv_memory

CONF = conf.CONF
LOG = logging.getLogger(__name__)

LUN = 1
LLDS = ('iscsi', 'iser')
TID_ATTEMPTS = 16
REKEY_SUFFIX = '-rekey'

ALREADY_EXISTS = 'already exists'
NO_TARGET = "can't find the target"
NO_ACCOUNT = "can't find the account"
NO_ACL = 'does not exist'
NO_DRIVER = "can't find the driver"

# One lock for every exporter of the process: tids are allocated from a
# single tgtd.
_LOCK = threading.RLock()

_TARGET_LINE = re.compile(r'^Target (\d+): (\S+)\s*$')


def parse_show(text):
    """The targets in ``tgtadm --op show --mode target`` output: dicts of
    tid, name, driver, luns ({lun: backing path}), accounts, acls and
    sessions (the number of I_T nexus)."""
    targets = []
    target = section = None
    lun = None
    for line in text.splitlines():
        if not line.strip():
            continue
        match = _TARGET_LINE.match(line)
        if match:
            target = {'tid': int(match.group(1)), 'name': match.group(2),
                      'driver': None, 'luns': {}, 'accounts': [],
                      'acls': [], 'sessions': 0}
            targets.append(target)
            section = None
            continue
        if target is None:
            continue
        indent = len(line) - len(line.lstrip(' '))
        text_ = line.strip()
        if indent <= 4:
            section = text_.rstrip(':')
        elif section == 'System information':
            if text_.startswith('Driver:'):
                target['driver'] = text_.split(':', 1)[1].strip()
        elif section == 'I_T nexus information':
            if text_.startswith('I_T nexus:'):
                target['sessions'] += 1
        elif section == 'LUN information':
            if text_.startswith('LUN:'):
                lun = int(text_.split(':', 1)[1])
                target['luns'][lun] = None
            elif text_.startswith('Backing store path:') and lun is not None:
                path = text_.split(':', 1)[1].strip()
                target['luns'][lun] = None if path == 'None' else path
        elif section == 'Account information' and indent == 8:
            target['accounts'].append(text_.split()[0])
        elif section == 'ACL information' and indent == 8:
            target['acls'].append(text_)
    return targets


def is_address_rule(rule):
    """True for an address ACL (ALL, an IP address or network), False for
    an initiator name."""
    if rule == 'ALL':
        return True
    try:
        ipaddress.ip_network(rule, strict=False)
    except ValueError:
        return False
    return True


def _lld_of(command):
    words = command.split()
    return words[words.index('--lld') + 1] if '--lld' in words else '?'


def lld_for(extent):
    """tgtadm's low-level driver for the extent's transport."""
    transport = extent.get('transport') or CONF.memory_node.transport
    if transport == 'iser':
        return 'iser'
    if transport in ('tcp', 'iscsi'):
        return 'iscsi'
    raise exception.DriverError(
        reason='extent %s has the unknown transport %r; use tcp or iser' %
               (extent.get('uuid'), transport))


class TgtExporter(base.MemoryExporter):
    """Memory exporter driving tgtd through tgtadm."""

    def __init__(self, node_name, runner=None, area=None):
        super().__init__(node_name)
        self._runner = runner or priv_memory.tgtadm
        self.area = area or tmpfs.TmpfsArea(node_name=node_name)
        # The drivers tgtd last answered it does not have.
        self._absent = set()

    # ------------------------------------------------------------ tgtadm

    def _tgtadm(self, args, ok=(), secret=None):
        """Run tgtadm; return ``(exit code, stderr)``. Failures whose
        message contains one of ``ok`` are returned, others raise."""
        shown = priv_memory.masked_command(['tgtadm'] + args)
        LOG.debug('tgt exporter on %(node)s: %(cmd)s',
                  {'node': self.node_name, 'cmd': shown})
        rc, _out, err = self._runner(args)
        err = (err or '').strip()
        if secret:
            err = err.replace(secret, priv_memory.MASK)
        if rc != 0 and not any(text in err for text in ok):
            raise exception.DriverError(reason=self._failure(shown, rc, err))
        return rc, err

    def _failure(self, shown, rc, err):
        if rc in (107, 111) or 'tgt daemon' in err:
            return ('tgtd does not answer on memory node %s (%s exited '
                    'with %s: %s); start the tgt service' %
                    (self.node_name, shown, rc, err))
        if NO_DRIVER in err:
            return ('tgtd on memory node %s has no %s driver (%s: %s); '
                    'iSER needs an RDMA NIC and tgt built with iSER '
                    'support, otherwise register the memory node with '
                    'transport tcp' % (self.node_name, _lld_of(shown),
                                       shown, err))
        if rc == 127:
            return ('tgtadm is not installed on memory node %s; install '
                    'the tgt package' % self.node_name)
        return ('%s failed on memory node %s (exit %s): %s' %
                (shown, self.node_name, rc, err or 'no message'))

    def _show(self, lld):
        args = ['--lld', lld, '--op', 'show', '--mode', 'target']
        shown = priv_memory.masked_command(['tgtadm'] + args)
        rc, out, err = self._runner(args)
        err = (err or '').strip()
        if rc != 0:
            if lld != 'iscsi' and NO_DRIVER in err:
                self._absent.add(lld)
                return []
            raise exception.DriverError(reason=self._failure(shown, rc, err))
        self._absent.discard(lld)
        return parse_show(out)

    def _targets(self, lld, every=True):
        """Targets of ``lld``, and also of the other driver when it is
        loaded (tids are shared by all drivers). Without ``every``, a
        driver tgtd last said it does not have is not asked again."""
        found = {t['tid']: t for t in self._show(lld)}
        for other in LLDS:
            if other != lld and (every or other not in self._absent):
                for target in self._show(other):
                    found.setdefault(target['tid'], target)
        return sorted(found.values(), key=lambda t: t['tid'])

    @staticmethod
    def _named(targets, iqn):
        return [t for t in targets if t['name'] == iqn]

    # ------------------------------------------------------------ export

    def export(self, extent, initiator_iqn, chap_username, chap_secret):
        portal = self.check_export(extent, initiator_iqn, chap_username,
                                   chap_secret)
        lld = lld_for(extent)
        iqn = base.target_iqn(extent)
        with _LOCK:
            path = self.area.create(extent)
            target, _created = self._ensure_target(lld, iqn)
            tid = str(target['tid'])
            self._ensure_account(lld, tid, target, chap_username,
                                 chap_secret)
            self._ensure_acl(lld, tid, target, initiator_iqn)
            self._ensure_lun(lld, tid, target, path)
        LOG.info('Exported extent %(extent)s (%(size)s MiB) as %(iqn)s '
                 'lun %(lun)s on %(portal)s over %(lld)s to %(initiator)s',
                 {'extent': extent['uuid'], 'size': extent['size_mb'],
                  'iqn': iqn, 'lun': LUN, 'portal': portal, 'lld': lld,
                  'initiator': initiator_iqn})
        return {'target_iqn': iqn, 'lun': LUN, 'portal': portal}

    def _ensure_target(self, lld, iqn):
        """The target named ``iqn`` (created if needed) and whether it
        was created now."""
        tried = set()
        for attempt in range(TID_ATTEMPTS):
            # After a refusal (a tid or the name taken, perhaps under a
            # driver tgtd did not have before), every driver is shown.
            targets = self._targets(lld, every=attempt > 0)
            mine = self._named(targets, iqn)
            wrong = [t for t in mine if t['driver'] and t['driver'] != lld]
            if wrong:
                for target in wrong:
                    # The node's transport changed: rebuild the target.
                    LOG.warning('Target %(iqn)s uses %(old)s, not %(new)s; '
                                'recreating it',
                                {'iqn': iqn, 'old': target['driver'],
                                 'new': lld})
                    self._delete_target(target)
                continue
            if mine:
                return mine[0], False
            used = {t['tid'] for t in targets} | tried
            tid = 1
            while tid in used:
                tid += 1
            tried.add(tid)
            rc, _err = self._tgtadm(
                ['--lld', lld, '--op', 'new', '--mode', 'target',
                 '--tid', str(tid), '--targetname', iqn],
                ok=(ALREADY_EXISTS,))
            if rc == 0:
                return {'tid': tid, 'name': iqn, 'driver': lld, 'luns': {},
                        'accounts': [], 'acls': [], 'sessions': 0}, True
            LOG.debug('tgt target id %(tid)s or the name %(iqn)s was taken '
                      'meanwhile; looking again', {'tid': tid, 'iqn': iqn})
        raise exception.DriverError(
            reason='memory node %s could not find a free tgt target id for '
                   '%s after %d attempts' % (self.node_name, iqn,
                                             TID_ATTEMPTS))

    def _new_account(self, lld, user, password):
        return self._tgtadm(
            ['--lld', lld, '--op', 'new', '--mode', 'account',
             '--user', user, '--password', password],
            ok=(ALREADY_EXISTS,), secret=password)[0]

    def _delete_account(self, lld, user):
        self._tgtadm(['--lld', lld, '--op', 'delete', '--mode', 'account',
                      '--user', user], ok=(NO_ACCOUNT,))

    def _bind_account(self, lld, tid, user):
        self._tgtadm(['--lld', lld, '--op', 'bind', '--mode', 'account',
                      '--tid', tid, '--user', user], ok=(ALREADY_EXISTS,))

    def _ensure_account(self, lld, tid, target, user, password):
        spare = None
        if self._new_account(lld, user, password) != 0:
            # The account exists and its password may differ. Keep the
            # target under CHAP while it is replaced, with a throw-away
            # account whose password nobody knows.
            spare = user + REKEY_SUFFIX
            self._delete_account(lld, spare)
            self._new_account(lld, spare, secrets.token_hex(16))
            self._bind_account(lld, tid, spare)
            self._delete_account(lld, user)
            if self._new_account(lld, user, password) != 0:
                raise exception.DriverError(
                    reason='memory node %s could not replace the CHAP '
                           'account of target %s' % (self.node_name,
                                                     target['name']))
        self._bind_account(lld, tid, user)
        if spare:
            self._delete_account(lld, spare)
        for other in target['accounts']:
            if other not in (user, spare):
                self._delete_account(lld, other)

    def _ensure_acl(self, lld, tid, target, initiator_iqn):
        for rule in target['acls']:
            if rule == initiator_iqn:
                continue
            option = ('--initiator-address' if is_address_rule(rule)
                      else '--initiator-name')
            self._tgtadm(['--lld', lld, '--op', 'unbind', '--mode',
                          'target', '--tid', tid, option, rule],
                         ok=(NO_ACL,))
        if initiator_iqn not in target['acls']:
            self._tgtadm(['--lld', lld, '--op', 'bind', '--mode', 'target',
                          '--tid', tid, '--initiator-name', initiator_iqn],
                         ok=(ALREADY_EXISTS,))

    def _ensure_lun(self, lld, tid, target, path):
        current = target['luns'].get(LUN, False)
        if current == path:
            return
        if current is not False:
            LOG.warning('LUN %(lun)s of %(iqn)s is backed by %(old)s, not '
                        '%(new)s; replacing it',
                        {'lun': LUN, 'iqn': target['name'], 'old': current,
                         'new': path})
            self._tgtadm(['--lld', lld, '--op', 'delete', '--mode',
                          'logicalunit', '--tid', tid, '--lun', str(LUN)])
        self._tgtadm(['--lld', lld, '--op', 'new', '--mode', 'logicalunit',
                      '--tid', tid, '--lun', str(LUN), '--backing-store',
                      path])

    # ---------------------------------------------------------- unexport

    def _delete_target(self, target):
        lld = target['driver'] or 'iscsi'
        for user in target['accounts']:
            self._delete_account(lld, user)
        self._tgtadm(['--lld', lld, '--op', 'delete', '--force', '--mode',
                      'target', '--tid', str(target['tid'])],
                     ok=(NO_TARGET,))

    def unexport(self, extent):
        iqn = base.target_iqn(extent)
        lld = lld_for(extent)
        with _LOCK:
            mine = self._named(self._targets(lld), iqn)
            for target in mine:
                if target['sessions']:
                    LOG.warning('Target %(iqn)s still has %(n)s session(s); '
                                'removing it anyway',
                                {'iqn': iqn, 'n': target['sessions']})
                self._delete_target(target)
            user = extent.get('chap_username')
            if user:
                self._delete_account(lld, user)
                self._delete_account(lld, user + REKEY_SUFFIX)
            if self._named(self._targets(lld), iqn):
                raise exception.DriverError(
                    reason='memory node %s: target %s is still there after '
                           'its removal' % (self.node_name, iqn))
        if mine:
            LOG.info('Unexported extent %(extent)s (target %(iqn)s)',
                     {'extent': extent['uuid'], 'iqn': iqn})

    # ---------------------------------------------------------- report

    def exported(self):
        """Extent uuids of the targets tgtd serves, over every driver."""
        with _LOCK:
            targets = self._targets(LLDS[0])
        uuids = {base.extent_uuid_of(t['name']) for t in targets}
        uuids.discard(None)
        return sorted(uuids)

    # ------------------------------------------------------------- scrub

    def scrub(self, extent):
        """Remove the target if it is still there, then the file: tmpfs
        frees the pages only once tgtd has closed it."""
        self.unexport(extent)
        path = self.area.file_path(extent)
        with _LOCK:
            holders = [t['name'] for t in self._targets(lld_for(extent))
                       if path in t['luns'].values()]
            if holders:
                raise exception.DriverError(
                    reason='memory node %s cannot scrub extent %s: target '
                           '%s still serves its file' %
                           (self.node_name, extent['uuid'],
                            ', '.join(holders)))
            self.area.remove(extent)
