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
``LioConfig`` (composable.privsep.lio) with the real ``rtslib_fb`` module
inside the privsep daemon. Tests give ``LioExporter`` a ``LioConfig`` over
a fake rtslib instead (``backend=``). Either way a LioError becomes a
DriverError here.

LIO configuration is not saved: after a reboot the tmpfs is empty, and
the conductor exports the extents again.
"""

import contextlib

from oslo_log import log as logging

from composable.common import exception
from composable import conf
from composable.memory.exporters import base
from composable.memory import tmpfs
from composable.privsep import lio as priv_lio
from composable.privsep import memory as priv_memory

CONF = conf.CONF
LOG = logging.getLogger(__name__)

LUN = priv_lio.LUN
DEFAULT_PORT = 3260
# The LIO work itself, run as root (composable.privsep.lio).
LioConfig = priv_lio.LioConfig


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


@contextlib.contextmanager
def _driver_errors():
    try:
        yield
    except priv_lio.LioError as exc:
        raise exception.DriverError(reason=str(exc))


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
        with _driver_errors():
            self.backend.export(iqn, path,
                                int(extent['size_mb']) * tmpfs.MiB,
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
        with _driver_errors():
            found = self.backend.unexport(iqn)
        if found:
            LOG.info('Unexported extent %(extent)s (LIO target %(iqn)s)',
                     {'extent': extent['uuid'], 'iqn': iqn})

    def exported(self):
        with _driver_errors():
            names = self.backend.target_names()
        uuids = {base.extent_uuid_of(iqn) for iqn in names}
        uuids.discard(None)
        return sorted(uuids)

    def scrub(self, extent):
        self.unexport(extent)
        path = self.area.file_path(extent)
        with _driver_errors():
            holders = self.backend.holders(path)
        if holders:
            raise exception.DriverError(
                reason='memory node %s cannot scrub extent %s: LIO '
                       'backstore %s still serves its file' %
                       (self.node_name, extent['uuid'], ', '.join(holders)))
        self.area.remove(extent)
