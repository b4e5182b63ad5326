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

"""The tgtd work of a memory node, as a sequence of tgtadm commands: what
the privileged ``composable.privsep.memory.tgt_*`` functions run inside
the privsep daemon, one privileged call for a whole export or unexport
(composable.memory.exporters.tgt describes the targets it builds).

It only ever runs tgtadm; it never talks to tgtd's management socket
itself.

tgtd identifies targets by small integers (tids) that the caller picks:
a free one is taken from ``tgtadm --op show``, under a lock, and picked
again when another process took it first. Tids and target names are
shared by all of tgtd's drivers, so the look shows every driver; one the
caller says tgtd does not have (no iSER support) is left out of an
export's first look, which saves a tgtadm run per export. tgtd refuses a
tid or a name taken under any driver, so a refused target creation looks
at every driver again.

Order matters, so that no step ever leaves a target open: a new target
gets its CHAP account, then its initiator rule (a target without any rule
admits nobody), and its LUN last. Re-exporting binds a throw-away account
before replacing the extent's account, so the target is never without
CHAP. A target this export created is deleted again when a later step
fails, with the account it created.

A helper of the privileged side: it imports nothing of composable but
composable.privsep.errors. Every tgtadm command goes through ``runner``
(``argv -> (exit code, stdout, stderr)``, without the ``tgtadm`` itself).
Its failures are :class:`TgtError`, with a code (ErrorCode); CHAP
passwords only travel as arguments of the ``--password`` option and are
masked in every log line and in every error's message.
"""

import ipaddress
import re
import secrets
import threading

from oslo_log import log as logging

from composable.privsep import errors

LOG = logging.getLogger(__name__)

LUN = 1
LLDS = ('iscsi', 'iser')
TID_ATTEMPTS = 16
REKEY_SUFFIX = '-rekey'
MASK = '***'
SECRET_FLAGS = ('--password', '-w')

ALREADY_EXISTS = 'already exists'
NO_TARGET = "can't find the target"
NO_ACCOUNT = "can't find the account"
NO_ACL = 'does not exist'
NO_DRIVER = "can't find the driver"

# Exit codes of tgtadm (or of running it) the errors are typed by.
RC_NOT_INSTALLED = 127
RC_TIMED_OUT = 124
RC_NO_DAEMON = (107, 111)

ErrorCode = errors.ErrorCode

# One lock for the whole daemon: tids are allocated from a single tgtd.
_LOCK = threading.RLock()

_TARGET_LINE = re.compile(r'^Target (\d+): (\S+)\s*$')


class TgtError(errors.PrivilegedError):
    """A tgtadm step failed or tgtd cannot be used: ``code`` says why
    (NO_DEVICE: tgtd does not answer or lacks the driver; NOT_INSTALLED:
    no tgtadm; TIMED_OUT; REFUSED: tgtd refused a step; BUSY: a target
    is still there after its removal; NO_SPACE: no free tid), the message
    says it in words, never with a secret."""


def masked_command(argv):
    """The command as one string for logs, with secrets masked."""
    out = []
    hide_next = False
    for arg in argv:
        arg = str(arg)
        if hide_next:
            out.append(MASK)
            hide_next = False
            continue
        flag, sep, _value = arg.partition('=')
        if flag in SECRET_FLAGS:
            if sep:
                out.append(flag + '=' + MASK)
            else:
                out.append(arg)
                hide_next = True
            continue
        out.append(arg)
    return ' '.join(out)


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


def check_lld(lld):
    if lld not in LLDS:
        raise TgtError(ErrorCode.INVALID_ARGUMENT,
                       'unknown tgt driver %r; use one of %s' %
                       (lld, ', '.join(LLDS)))


def _check_text(what, value, optional=False):
    if optional and value is None:
        return
    if not isinstance(value, str) or not value or '\n' in value:
        raise TgtError(ErrorCode.INVALID_ARGUMENT,
                       '%s must be a non-empty one-line string' % what)


def failure(shown, rc, err):
    """The TgtError of a failed tgtadm ``shown`` (masked already)."""
    if rc in RC_NO_DAEMON or 'tgt daemon' in err:
        return TgtError(ErrorCode.NO_DEVICE,
                        'tgtd does not answer (%s exited with %s: %s); '
                        'start the tgt service' % (shown, rc, err))
    if NO_DRIVER in err:
        return TgtError(ErrorCode.NO_DEVICE,
                        'tgtd has no %s driver (%s: %s); iSER needs an '
                        'RDMA NIC and tgt built with iSER support, '
                        'otherwise register the memory node with transport '
                        'tcp' % (_lld_of(shown), shown, err))
    if rc == RC_NOT_INSTALLED:
        return TgtError(ErrorCode.NOT_INSTALLED,
                        'tgtadm is not installed; install the tgt package')
    if rc == RC_TIMED_OUT:
        return TgtError(ErrorCode.TIMED_OUT,
                        '%s did not finish in time: %s' % (shown, err))
    return TgtError(ErrorCode.REFUSED, '%s failed (exit %s): %s' %
                    (shown, rc, err or 'no message'))


class TgtConfig(object):
    """The tgtadm sequences of exports, over ``runner`` (``args ->
    (exit code, stdout, stderr)``).

    ``absent``: the drivers the caller last heard tgtd does not have;
    kept up to date here, and returned by every operation so that the
    caller can give it to the next; ``ran``: the commands run, with
    secrets masked.
    """

    def __init__(self, runner, absent=()):
        self._runner = runner
        self.absent = set(absent)
        # The commands run, masked: returned to the caller, which logs
        # them (the daemon's own debug lines may not reach its log).
        self.ran = []

    # ------------------------------------------------------------ tgtadm

    def _tgtadm(self, args, ok=(), secret=None):
        """Run tgtadm; return ``(exit code, stderr)``. Failures whose
        message contains one of ``ok`` are returned, others raise."""
        shown = masked_command(['tgtadm'] + args)
        self.ran.append(shown)
        rc, _out, err = self._runner(args)
        err = (err or '').strip()
        if secret:
            err = err.replace(secret, MASK)
        if rc != 0 and not any(text in err for text in ok):
            raise failure(shown, rc, err)
        return rc, err

    def _show(self, lld):
        args = ['--lld', lld, '--op', 'show', '--mode', 'target']
        shown = masked_command(['tgtadm'] + args)
        self.ran.append(shown)
        rc, out, err = self._runner(args)
        err = (err or '').strip()
        if rc != 0:
            if lld != 'iscsi' and NO_DRIVER in err:
                self.absent.add(lld)
                return []
            raise failure(shown, rc, err)
        self.absent.discard(lld)
        return parse_show(out)

    def targets(self, lld, every=True):
        """Targets of ``lld``, and also of the other driver when it is
        loaded (tids are shared by all drivers). Without ``every``, a
        driver tgtd last said it does not have is not asked again."""
        check_lld(lld)
        found = {t['tid']: t for t in self._show(lld)}
        for other in LLDS:
            if other != lld and (every or other not in self.absent):
                for target in self._show(other):
                    found.setdefault(target['tid'], target)
        return sorted(found.values(), key=lambda t: t['tid'])

    @staticmethod
    def _named(targets, iqn):
        return [t for t in targets if t['name'] == iqn]

    # ------------------------------------------------------------ export

    def export(self, lld, iqn, path, initiator_iqn, user, password):
        """Make target ``iqn`` serve ``path`` as LUN 1 over ``lld`` to
        ``initiator_iqn`` with the CHAP account ``user``/``password``.
        Returns the target's tid and whether it was created now.

        When a step fails after the target was created by this export,
        the target (and the account this export created) is deleted
        again before the error is raised: nothing half-built stays."""
        check_lld(lld)
        for what, value in (('the target name', iqn), ('the path', path),
                            ('the initiator name', initiator_iqn),
                            ('the CHAP user', user),
                            ('the CHAP password', password)):
            _check_text(what, value)
        try:
            return self._export(lld, iqn, path, initiator_iqn, user,
                                password)
        except TgtError as exc:
            # tgtd may repeat what it was given: the password never
            # leaves in a message.
            if password in exc.message:
                raise TgtError(exc.code,
                               exc.message.replace(password, MASK))
            raise

    def _export(self, lld, iqn, path, initiator_iqn, user, password):
        with _LOCK:
            target, created = self._ensure_target(lld, iqn)
            tid = str(target['tid'])
            account_created = []
            try:
                self._ensure_account(lld, tid, target, user, password,
                                     account_created)
                self._ensure_acl(lld, tid, target, initiator_iqn)
                self._ensure_lun(lld, tid, target, path)
            except Exception:
                if created:
                    self._roll_back(lld, target, account_created)
                raise
        return {'tid': target['tid'], 'created': created}

    def _roll_back(self, lld, target, accounts):
        LOG.warning('Export of %(iqn)s failed; deleting the target it '
                    'created (tid %(tid)s)',
                    {'iqn': target['name'], 'tid': target['tid']})
        try:
            for user in accounts:
                self._delete_account(lld, user)
            # A target created now has no accounts of its own: this
            # deletes the target only.
            self._delete_target(target)
        except TgtError as exc:
            # The export's own error is the one raised; an unexport
            # removes what is left.
            LOG.warning('Could not delete the half-built target %(iqn)s: '
                        '%(err)s', {'iqn': target['name'],
                                    'err': exc.message})

    def _ensure_target(self, lld, iqn):
        """The target named ``iqn`` (created if needed) and whether it
        was created now."""
        tried = set()
        for attempt in range(TID_ATTEMPTS):
            # After a refusal (a tid or the name taken, perhaps under a
            # driver tgtd did not have before), every driver is shown.
            targets = self.targets(lld, every=attempt > 0)
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
        raise TgtError(ErrorCode.NO_SPACE,
                       'could not find a free tgt target id for %s after '
                       '%d attempts' % (iqn, TID_ATTEMPTS))

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

    def _ensure_account(self, lld, tid, target, user, password, created):
        spare = None
        if self._new_account(lld, user, password) == 0:
            created.append(user)
        else:
            # The account exists and its password may differ. Keep the
            # target under CHAP while it is replaced, with a throw-away
            # account whose password nobody knows.
            spare = user + REKEY_SUFFIX
            self._delete_account(lld, spare)
            self._new_account(lld, spare, secrets.token_hex(16))
            self._bind_account(lld, tid, spare)
            self._delete_account(lld, user)
            if self._new_account(lld, user, password) != 0:
                raise TgtError(ErrorCode.REFUSED,
                               'could not replace the CHAP account of '
                               'target %s' % target['name'])
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

    def unexport(self, lld, iqn, user=None):
        """Delete every target named ``iqn`` (under any driver) with its
        accounts, and the account ``user`` and its throw-away one.
        Returns the number of targets deleted; BUSY when a target of
        that name is still there after."""
        check_lld(lld)
        _check_text('the target name', iqn)
        _check_text('the CHAP user', user, optional=True)
        with _LOCK:
            mine = self._named(self.targets(lld), iqn)
            for target in mine:
                if target['sessions']:
                    LOG.warning('Target %(iqn)s still has %(n)s session(s); '
                                'removing it anyway',
                                {'iqn': iqn, 'n': target['sessions']})
                self._delete_target(target)
            if user:
                self._delete_account(lld, user)
                self._delete_account(lld, user + REKEY_SUFFIX)
            if self._named(self.targets(lld), iqn):
                raise TgtError(ErrorCode.BUSY,
                               'target %s is still there after its removal'
                               % iqn)
        return len(mine)


# One operation each, as the privileged entry points and the exporter's
# in-process runner both run it: the result, the drivers tgtd lacks (for
# the caller's next call) and the commands run (masked, for its log).

def _outcome(config, **result):
    return dict(result, absent=sorted(config.absent),
                commands=list(config.ran))


def export(runner, absent, lld, iqn, path, initiator_iqn, user, password):
    """TgtConfig.export over ``runner``: the tid and whether the target
    was created now."""
    config = TgtConfig(runner, absent)
    return _outcome(config, **config.export(lld, iqn, path, initiator_iqn,
                                            user, password))


def unexport(runner, absent, lld, iqn, user=None):
    """TgtConfig.unexport over ``runner``: the number of targets
    deleted."""
    config = TgtConfig(runner, absent)
    return _outcome(config, removed=config.unexport(lld, iqn, user))


def targets(runner, absent, lld, every=True):
    """TgtConfig.targets over ``runner``."""
    config = TgtConfig(runner, absent)
    return _outcome(config, targets=config.targets(lld, every=every))
