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

"""Fakes of the memory node's data plane for unit tests.

``FakeTgtadm`` stands in for ``tgtadm`` talking to a tgtd: it keeps the
targets, accounts, rules and LUNs a tgtd would have, answers with the exit
codes, messages and ``--op show`` layout the real tgt 1.0.85 gives, and
records every argument list it is called with.

``FakeRtslib`` stands in for the ``rtslib_fb`` module over an in-memory
configfs, with the classes and lookup/create behaviour the LIO exporter
uses.
"""

import ipaddress


def _is_address(rule):
    if rule == 'ALL':
        return True
    try:
        ipaddress.ip_network(rule, strict=False)
    except ValueError:
        return False
    return True


class FakeTgtadm(object):
    """A fake ``tgtadm`` runner: ``fake(args) -> (rc, stdout, stderr)``."""

    def __init__(self, iser=False):
        self.calls = []
        self.iser = iser          # whether the iser driver is "loaded"
        self.down = False         # tgtd not running
        self.targets = {}         # tid -> dict
        self.accounts = {}        # user -> password
        self.steal_tids = []      # tids "another process" takes first
        self.fail = {}            # (op, mode) -> (rc, stderr)

    # ----------------------------------------------------------- helpers

    def commands(self, skip_show=True):
        return [c for c in self.calls
                if not (skip_show and '--op' in c and
                        c[c.index('--op') + 1] == 'show')]

    def add_target(self, tid, name, lld='iscsi', **extra):
        target = {'tid': tid, 'name': name, 'lld': lld, 'luns': {},
                  'accounts': [], 'acls': [], 'sessions': 0}
        target.update(extra)
        self.targets[tid] = target
        return target

    @staticmethod
    def _err(msg):
        return 22, '', 'tgtadm: %s\n' % msg

    @staticmethod
    def _opts(args):
        opts, flags = {}, set()
        i = 0
        while i < len(args):
            arg = args[i]
            if arg == '--force':
                flags.add(arg)
                i += 1
                continue
            opts[arg] = args[i + 1]
            i += 2
        return opts, flags

    # -------------------------------------------------------------- call

    def __call__(self, args):
        assert isinstance(args, list), args
        assert all(isinstance(a, str) for a in args), args
        self.calls.append(list(args))
        if self.down:
            return (107, '', 'tgtadm: failed to send request hdr to tgt '
                    'daemon, Transport endpoint is not connected\n')
        opts, flags = self._opts(args)
        lld = opts.get('--lld', 'iscsi')
        if lld == 'iser' and not self.iser:
            return self._err("can't find the driver")
        key = (opts['--op'], opts['--mode'])
        if key in self.fail:
            rc, err = self.fail.pop(key)
            return rc, '', err
        handler = getattr(self, '_%s_%s' % key)
        return handler(lld, opts, flags)

    def _show_target(self, lld, opts, flags):
        out = []
        for tid in sorted(self.targets):
            t = self.targets[tid]
            if t['lld'] != lld:
                continue
            out.append('Target %d: %s' % (tid, t['name']))
            out.append('    System information:')
            out.append('        Driver: %s' % t['lld'])
            out.append('        State: ready')
            out.append('    I_T nexus information:')
            for n in range(t['sessions']):
                out.append('        I_T nexus: %d' % (n + 1))
                out.append('            Initiator: iqn.x:init alias: h')
                out.append('            Connection: 0')
                out.append('                IP Address: 127.0.0.1')
            out.append('    LUN information:')
            luns = dict(t['luns'])
            luns[0] = None
            for lun in sorted(luns):
                out.append('        LUN: %d' % lun)
                out.append('            Type: %s' %
                           ('controller' if lun == 0 else 'disk'))
                out.append('            Backing store type: %s' %
                           ('null' if lun == 0 else 'rdwr'))
                out.append('            Backing store path: %s' %
                           (luns[lun] or 'None'))
                out.append('            Backing store flags: ')
            out.append('    Account information:')
            for user in t['accounts']:
                out.append('        %s' % user)
            out.append('    ACL information:')
            for rule in t['acls']:
                out.append('        %s' % rule)
        return 0, '\n'.join(out) + ('\n' if out else ''), ''

    def _show_account(self, lld, opts, flags):
        lines = ['Account list:'] + ['    %s' % u for u in self.accounts]
        return 0, '\n'.join(lines) + '\n', ''

    def _target(self, opts):
        return self.targets.get(int(opts['--tid']))

    def _new_target(self, lld, opts, flags):
        tid = int(opts['--tid'])
        name = opts['--targetname']
        if self.steal_tids and self.steal_tids[0] == tid:
            self.steal_tids.pop(0)
            self.add_target(tid, 'iqn.other:stolen-%d' % tid)
        if tid in self.targets or any(t['name'] == name
                                      for t in self.targets.values()):
            return self._err('this target already exists')
        self.add_target(tid, name, lld)
        return 0, '', ''

    def _delete_target(self, lld, opts, flags):
        t = self._target(opts)
        if t is None:
            return self._err("can't find the target")
        if t['sessions'] and '--force' not in flags:
            return self._err('this target is still active')
        del self.targets[t['tid']]
        return 0, '', ''

    def _new_account(self, lld, opts, flags):
        if opts['--user'] in self.accounts:
            return self._err('this account already exists')
        self.accounts[opts['--user']] = opts['--password']
        return 0, '', ''

    def _delete_account(self, lld, opts, flags):
        user = opts['--user']
        if user not in self.accounts:
            return self._err("can't find the account")
        del self.accounts[user]
        for t in self.targets.values():
            if user in t['accounts']:
                t['accounts'].remove(user)
        return 0, '', ''

    def _bind_account(self, lld, opts, flags):
        t = self._target(opts)
        if t is None:
            return self._err("can't find the target")
        user = opts['--user']
        if user not in self.accounts:
            return self._err("can't find the account")
        if user in t['accounts']:
            return self._err('this account already exists')
        t['accounts'].append(user)
        return 0, '', ''

    def _rule(self, opts):
        if '--initiator-name' in opts:
            return opts['--initiator-name'], False
        if '--initiator-address' in opts:
            return opts['--initiator-address'], True
        raise AssertionError('no rule in %s' % opts)

    def _bind_target(self, lld, opts, flags):
        t = self._target(opts)
        if t is None:
            return self._err("can't find the target")
        rule, address = self._rule(opts)
        assert address == _is_address(rule), (
            '%s passed as the wrong kind of rule' % rule)
        if rule in t['acls']:
            return self._err('this access control rule already exists')
        t['acls'].append(rule)
        return 0, '', ''

    def _unbind_target(self, lld, opts, flags):
        t = self._target(opts)
        if t is None:
            return self._err("can't find the target")
        rule, address = self._rule(opts)
        if rule not in t['acls'] or address != _is_address(rule):
            return self._err('this access control rule does not exist')
        t['acls'].remove(rule)
        return 0, '', ''

    def _new_logicalunit(self, lld, opts, flags):
        t = self._target(opts)
        if t is None:
            return self._err("can't find the target")
        lun = int(opts['--lun'])
        if lun in t['luns'] or lun == 0:
            return self._err('this logical unit number already exists')
        t['luns'][lun] = opts['--backing-store']
        return 0, '', ''

    def _delete_logicalunit(self, lld, opts, flags):
        t = self._target(opts)
        if t is None:
            return self._err("can't find the target")
        lun = int(opts['--lun'])
        if lun not in t['luns']:
            return self._err("can't find the logical unit")
        del t['luns'][lun]
        return 0, '', ''


# ---------------------------------------------------------------- rtslib


class RTSLibError(Exception):
    pass


class RTSLibNotInCFSError(RTSLibError):
    pass


class _Node(object):
    deleted = False

    def delete(self):
        self.deleted = True


class FakeRtslib(object):
    """A fake ``rtslib_fb`` module over an in-memory configfs."""

    RTSLibError = RTSLibError
    RTSLibNotInCFSError = RTSLibNotInCFSError

    def __init__(self, iser_supported=True):
        self.targets = []
        self.storage_objects = []
        self.iser_supported = iser_supported
        fake = self

        class RTSRoot(object):
            @property
            def targets(self):
                return list(fake.targets)

            @property
            def storage_objects(self):
                return list(fake.storage_objects)

        class FileIOStorageObject(_Node):
            def __init__(self, name, dev=None, size=None, write_back=False):
                found = [s for s in fake.storage_objects if s.name == name]
                if dev is None:
                    if not found:
                        raise RTSLibNotInCFSError(name)
                    self.__dict__ = found[0].__dict__
                    return
                if found:
                    raise RTSLibError('storage object %s exists' % name)
                self.name, self.udev_path, self.size = name, dev, size
                self.write_back = write_back
                self.luns = []
                fake.storage_objects.append(self)

            def delete(self):
                if any(not lun.deleted for lun in self.luns):
                    raise RTSLibError('storage object %s is in use' %
                                      self.name)
                fake.storage_objects.remove(self)
                self.deleted = True

        class FabricModule(object):
            def __init__(self, name):
                assert name == 'iscsi'
                self.name = name

        class Target(_Node):
            def __new__(cls, fabric, wwn, mode='any'):
                for t in fake.targets:
                    if t.wwn == wwn:
                        assert mode in ('any', 'lookup')
                        return t
                assert mode in ('any', 'create')
                t = super().__new__(cls)
                t.wwn, t.fabric, t.tpgs = wwn, fabric, []
                fake.targets.append(t)
                return t

            def __init__(self, fabric, wwn, mode='any'):
                pass

            def delete(self):
                for tpg in list(self.tpgs):
                    tpg.delete()
                fake.targets.remove(self)
                self.deleted = True

        class TPG(_Node):
            def __new__(cls, target, tag, mode='any'):
                for tpg in target.tpgs:
                    if tpg.tag == tag:
                        return tpg
                tpg = super().__new__(cls)
                tpg.parent_target, tpg.tag = target, tag
                tpg.attributes, tpg.enable = {}, False
                tpg.luns, tpg.node_acls, tpg.network_portals = [], [], []
                target.tpgs.append(tpg)
                return tpg

            def __init__(self, target, tag, mode='any'):
                pass

            def set_attribute(self, name, value):
                self.attributes[name] = value

            def delete(self):
                for child in (list(self.node_acls) + list(self.luns) +
                              list(self.network_portals)):
                    child.delete()
                self.parent_target.tpgs.remove(self)
                self.deleted = True

        class LUN(_Node):
            def __init__(self, tpg, lun, storage_object):
                assert all(existing.lun != lun for existing in tpg.luns)
                self.parent_tpg, self.lun = tpg, lun
                self.storage_object = storage_object
                storage_object.luns.append(self)
                tpg.luns.append(self)

            def delete(self):
                self.parent_tpg.luns.remove(self)
                self.storage_object.luns.remove(self)
                self.deleted = True

        class NodeACL(_Node):
            def __new__(cls, tpg, node_wwn, mode='any'):
                for acl in tpg.node_acls:
                    if acl.node_wwn == node_wwn:
                        return acl
                acl = super().__new__(cls)
                acl.parent_tpg, acl.node_wwn = tpg, node_wwn
                acl.chap_userid = acl.chap_password = ''
                acl.mapped_luns = []
                tpg.node_acls.append(acl)
                return acl

            def __init__(self, tpg, node_wwn, mode='any'):
                pass

            def delete(self):
                self.parent_tpg.node_acls.remove(self)
                self.deleted = True

        class MappedLUN(_Node):
            def __init__(self, acl, mapped_lun, tpg_lun):
                self.parent_nodeacl, self.mapped_lun = acl, mapped_lun
                self.tpg_lun = tpg_lun
                acl.mapped_luns.append(self)

            def delete(self):
                self.parent_nodeacl.mapped_luns.remove(self)
                self.deleted = True

        class NetworkPortal(_Node):
            def __new__(cls, tpg, ip_address, port=3260, mode='any'):
                for portal in tpg.network_portals:
                    if (portal.ip_address, portal.port) == (ip_address,
                                                            port):
                        return portal
                portal = super().__new__(cls)
                portal.parent_tpg = tpg
                portal.ip_address, portal.port = ip_address, port
                portal._iser = False
                tpg.network_portals.append(portal)
                return portal

            def __init__(self, tpg, ip_address, port=3260, mode='any'):
                pass

            @property
            def iser(self):
                return self._iser

            @iser.setter
            def iser(self, value):
                if value and not fake.iser_supported:
                    raise RTSLibError('Cannot change iser')
                self._iser = value

            def delete(self):
                self.parent_tpg.network_portals.remove(self)
                self.deleted = True

        self.RTSRoot = RTSRoot
        self.FileIOStorageObject = FileIOStorageObject
        self.FabricModule = FabricModule
        self.Target = Target
        self.TPG = TPG
        self.LUN = LUN
        self.NodeACL = NodeACL
        self.MappedLUN = MappedLUN
        self.NetworkPortal = NetworkPortal
