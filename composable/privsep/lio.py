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

"""The LIO work of a memory node, over rtslib-fb: what the privileged
``composable.privsep.memory.lio_*`` functions run inside the privsep
daemon (composable.memory.exporters.lio describes the targets it builds).

A helper of the privileged side: it imports nothing of composable but
composable.privsep.errors, and its failures are :class:`LioError`, with
a code (composable.privsep.errors.ErrorCode), which crosses the privsep
channel as it is (rtslib's own exceptions may not exist on the other
side) and which the exporter turns into a DriverError.
"""

import importlib

from oslo_log import log as logging

from composable.privsep import errors

LOG = logging.getLogger(__name__)

LUN = 1
TPG_TAG = 1
BACKSTORE_PREFIX = 'composable-'


class LioError(errors.PrivilegedError):
    """LIO refused or failed: ``code`` says why, the message says it in
    words, never with a secret."""


ErrorCode = errors.ErrorCode


def load_rtslib():
    """The rtslib_fb module, or a LioError saying how to get it."""
    try:
        return importlib.import_module('rtslib_fb')
    except ImportError:
        raise LioError(ErrorCode.NOT_INSTALLED,
                       'the lio memory exporter needs rtslib-fb (python3-'
                       'rtslib-fb or "pip install rtslib-fb") on the memory '
                       'node')


def backstore_name(iqn):
    return BACKSTORE_PREFIX + iqn.rsplit(':', 1)[-1]


class LioConfig(object):
    """The LIO work, over an rtslib-like module ``rtslib``."""

    def __init__(self, rtslib):
        self.rtslib = rtslib

    def _root(self):
        return self.rtslib.RTSRoot()

    def _find_target(self, root, iqn):
        for target in root.targets:
            if target.wwn == iqn:
                return target
        return None

    def _find_backstore(self, root, name):
        for so in root.storage_objects:
            if so.name == name:
                return so
        return None

    def export(self, iqn, path, size_bytes, initiator_iqn, user, password,
               ip, port, iser):
        rts = self.rtslib
        root = self._root()
        name = backstore_name(iqn)
        so = self._find_backstore(root, name)
        if so is not None and so.udev_path != path:
            LOG.warning('Backstore %(name)s serves %(old)s, not %(new)s; '
                        'recreating it', {'name': name, 'old': so.udev_path,
                                          'new': path})
            target = self._find_target(root, iqn)
            if target is not None:
                target.delete()
            so.delete()
            so = None
        if so is None:
            so = rts.FileIOStorageObject(name, dev=path, size=size_bytes,
                                         write_back=False)
        target = rts.Target(rts.FabricModule('iscsi'), iqn, mode='any')
        tpg = rts.TPG(target, TPG_TAG, mode='any')
        tpg.set_attribute('authentication', '1')
        tpg.set_attribute('generate_node_acls', '0')
        tpg.set_attribute('demo_mode_write_protect', '1')

        lun = None
        for existing in tpg.luns:
            if existing.lun != LUN:
                continue
            if existing.storage_object.name == name:
                lun = existing
            else:
                existing.delete()
        if lun is None:
            lun = rts.LUN(tpg, LUN, so)

        for acl in list(tpg.node_acls):
            if acl.node_wwn != initiator_iqn:
                acl.delete()
        acl = rts.NodeACL(tpg, initiator_iqn, mode='any')
        acl.chap_userid = user
        acl.chap_password = password
        mapped = False
        for existing in list(acl.mapped_luns):
            if existing.mapped_lun == LUN and existing.tpg_lun.lun == LUN:
                mapped = True
            else:
                existing.delete()
        if not mapped:
            rts.MappedLUN(acl, LUN, lun)

        for portal in list(tpg.network_portals):
            if (portal.ip_address, portal.port) != (ip, port):
                portal.delete()
        portal = rts.NetworkPortal(tpg, ip, port, mode='any')
        if bool(portal.iser) != bool(iser):
            try:
                portal.iser = bool(iser)
            except rts.RTSLibError as exc:
                raise LioError(
                    ErrorCode.REFUSED,
                    'cannot %s iSER on portal %s:%s (%s); load the '
                    'ib_isert module and check the RDMA NIC' %
                    ('enable' if iser else 'disable', ip, port, exc))
        tpg.enable = True

    def unexport(self, iqn):
        """Remove the target and its backstore; True if there was one."""
        root = self._root()
        found = False
        target = self._find_target(root, iqn)
        if target is not None:
            target.delete()
            found = True
        so = self._find_backstore(root, backstore_name(iqn))
        if so is not None:
            so.delete()
            found = True
        if self._find_target(root, iqn) is not None:
            raise LioError(ErrorCode.BUSY, 'LIO target %s is still there '
                           'after its removal' % iqn)
        return found

    def holders(self, path):
        """Names of the backstores serving ``path``."""
        return [so.name for so in self._root().storage_objects
                if getattr(so, 'udev_path', None) == path]

    def target_names(self):
        """The IQNs of every iSCSI target LIO has."""
        return sorted(target.wwn for target in self._root().targets)
