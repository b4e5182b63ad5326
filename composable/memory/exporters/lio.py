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

"""Export extents with the kernel's LIO target, through rtslib-fb.

One iSCSI target per extent (``base.target_iqn``), one TPG (tag 1) with
CHAP required (``authentication=1``) and no demo mode
(``generate_node_acls=0``: only listed initiators get in), a fileio
backstore on the extent's tmpfs file as LUN 1, one node ACL for the bound
host's initiator name carrying the extent's CHAP credentials and mapping
LUN 1, and a network portal on ``[memory_node]portal`` with
``enable_iser`` when the transport is iSER. The TPG is enabled last, so a
half-built target is never reachable.

LIO lives in configfs, so every change runs as root: ``LioExporter`` calls
the privileged ``composable.privsep.memory.lio_*`` functions, which run
``LioConfig`` with the real ``rtslib_fb`` module inside the privsep
daemon. Tests give ``LioExporter`` a ``LioConfig`` over a fake rtslib
instead (``backend=``).

LIO configuration is not saved: after a reboot the tmpfs is empty, and
the conductor exports the extents again.
"""

import importlib

from oslo_log import log as logging

from composable.common import exception
from composable import conf
from composable.memory.exporters import base
from composable.memory import tmpfs
from composable.privsep import memory as priv_memory

CONF = conf.CONF
LOG = logging.getLogger(__name__)

LUN = 1
TPG_TAG = 1
DEFAULT_PORT = 3260
BACKSTORE_PREFIX = 'composable-'


def load_rtslib():
    """The rtslib_fb module, or a DriverError saying how to get it."""
    try:
        return importlib.import_module('rtslib_fb')
    except ImportError:
        raise exception.DriverError(
            reason='the lio memory exporter needs rtslib-fb (python3-rtslib-'
                   'fb or "pip install rtslib-fb") on the memory node')


def split_portal(portal):
    """"addr:port", "[v6]:port" or "addr" -> (addr, port)."""
    if portal.startswith('['):
        addr, _sep, rest = portal[1:].partition(']')
        port = rest.lstrip(':')
    elif portal.count(':') == 1:
        addr, port = portal.split(':')
    else:
        addr, port = portal, ''
    return addr, int(port) if port else DEFAULT_PORT


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
                raise exception.DriverError(
                    reason='cannot %s iSER on portal %s:%s (%s); load the '
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
            raise exception.DriverError(
                reason='LIO target %s is still there after its removal' % iqn)
        return found

    def holders(self, path):
        """Names of the backstores serving ``path``."""
        return [so.name for so in self._root().storage_objects
                if getattr(so, 'udev_path', None) == path]

    def target_names(self):
        """The IQNs of every iSCSI target LIO has."""
        return sorted(target.wwn for target in self._root().targets)


class PrivilegedLio(object):
    """LioConfig over the real rtslib_fb, run in the privsep daemon."""

    def export(self, *args):
        return priv_memory.lio_export(*args)

    def unexport(self, iqn):
        return priv_memory.lio_unexport(iqn)

    def holders(self, path):
        return priv_memory.lio_holders(path)

    def target_names(self):
        return priv_memory.lio_target_names()


class LioExporter(base.MemoryExporter):
    """Memory exporter on the kernel's LIO target (rtslib-fb)."""

    def __init__(self, node_name, backend=None, area=None):
        super().__init__(node_name)
        self.backend = backend or PrivilegedLio()
        self.area = area or tmpfs.TmpfsArea(node_name=node_name)

    @staticmethod
    def _iser(extent):
        transport = extent.get('transport') or CONF.memory_node.transport
        if transport not in ('tcp', 'iscsi', 'iser'):
            raise exception.DriverError(
                reason='extent %s has the unknown transport %r; use tcp or '
                       'iser' % (extent.get('uuid'), transport))
        return transport == 'iser'

    def export(self, extent, initiator_iqn, chap_username, chap_secret):
        portal = self.check_export(extent, initiator_iqn, chap_username,
                                   chap_secret)
        ip, port = split_portal(portal)
        iser = self._iser(extent)
        iqn = base.target_iqn(extent)
        path = self.area.create(extent)
        self.backend.export(iqn, path, int(extent['size_mb']) * tmpfs.MiB,
                            initiator_iqn, chap_username, chap_secret,
                            ip, port, iser)
        LOG.info('Exported extent %(extent)s (%(size)s MiB) as %(iqn)s lun '
                 '%(lun)s on %(portal)s%(iser)s to %(initiator)s with LIO',
                 {'extent': extent['uuid'], 'size': extent['size_mb'],
                  'iqn': iqn, 'lun': LUN, 'portal': portal,
                  'iser': ' (iSER)' if iser else '',
                  'initiator': initiator_iqn})
        return {'target_iqn': iqn, 'lun': LUN, 'portal': portal}

    def unexport(self, extent):
        iqn = base.target_iqn(extent)
        if self.backend.unexport(iqn):
            LOG.info('Unexported extent %(extent)s (LIO target %(iqn)s)',
                     {'extent': extent['uuid'], 'iqn': iqn})

    def exported(self):
        uuids = {base.extent_uuid_of(iqn)
                 for iqn in self.backend.target_names()}
        uuids.discard(None)
        return sorted(uuids)

    def scrub(self, extent):
        self.unexport(extent)
        path = self.area.file_path(extent)
        holders = self.backend.holders(path)
        if holders:
            raise exception.DriverError(
                reason='memory node %s cannot scrub extent %s: LIO '
                       'backstore %s still serves its file' %
                       (self.node_name, extent['uuid'], ', '.join(holders)))
        self.area.remove(extent)
