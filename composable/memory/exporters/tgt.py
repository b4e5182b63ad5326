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

The tgtadm sequences (the tid search, the order of the steps that never
leaves a target open, the CHAP re-keying, the rollback of a half-built
target) are composable.privsep.tgt's, run inside the privsep daemon:
one privileged call per export, unexport or look at the targets
(``composable.privsep.memory.tgt_*``), instead of one per tgtadm
command. With a ``runner`` (``argv -> (exit code, stdout, stderr)``,
tests) the same sequences run in this process over it.

CHAP passwords only travel as arguments of the ``--password`` option and
are masked in every log line and error message.
"""

import threading

from oslo_log import log as logging

from composable.common import exception
from composable import conf
from composable.memory.exporters import base
from composable.memory import tmpfs
from composable.privsep import memory as priv_memory
from composable.privsep import tgt as priv_tgt

CONF = conf.CONF
LOG = logging.getLogger(__name__)

LUN = priv_tgt.LUN
LLDS = priv_tgt.LLDS
TID_ATTEMPTS = priv_tgt.TID_ATTEMPTS
REKEY_SUFFIX = priv_tgt.REKEY_SUFFIX
parse_show = priv_tgt.parse_show
is_address_rule = priv_tgt.is_address_rule

# One lock for every exporter of the process: tids are allocated from a
# single tgtd (the privileged side holds its own lock as well).
_LOCK = threading.RLock()


class _Privileged(object):
    """The tgt sequences as privileged calls, one per operation."""

    @staticmethod
    def export(absent, *args):
        return priv_memory.tgt_export(*args, absent=sorted(absent))

    @staticmethod
    def unexport(absent, lld, iqn, user):
        return priv_memory.tgt_unexport(lld, iqn, user,
                                        absent=sorted(absent))

    @staticmethod
    def targets(absent, lld):
        return priv_memory.tgt_targets(lld, absent=sorted(absent))


class _InProcess(object):
    """The same sequences in this process, over a tgtadm ``runner``."""

    def __init__(self, runner):
        self.runner = runner

    def export(self, absent, *args):
        return priv_tgt.export(self.runner, absent, *args)

    def unexport(self, absent, lld, iqn, user):
        return priv_tgt.unexport(self.runner, absent, lld, iqn, user)

    def targets(self, absent, lld):
        return priv_tgt.targets(self.runner, absent, lld)


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
        self._runner = runner
        self._tgt = _InProcess(runner) if runner else _Privileged()
        self.area = area or tmpfs.TmpfsArea(node_name=node_name)
        # The drivers tgtd last answered it does not have: left out of
        # an export's first look.
        self._absent = set()

    def _do(self, operation, *args):
        """``operation`` of the tgt sequences, in one privileged call; a
        TgtError becomes the DriverError the agent reports."""
        try:
            result = getattr(self._tgt, operation)(self._absent, *args)
        except priv_tgt.TgtError as exc:
            raise exception.DriverError(
                reason='memory node %s: %s' % (self.node_name, exc.message))
        self._absent = set(result.get('absent') or ())
        LOG.debug('tgt exporter on %(node)s: %(cmds)s',
                  {'node': self.node_name,
                   'cmds': '; '.join(result.get('commands') or ())})
        return result

    def _targets(self, lld):
        return self._do('targets', lld)['targets']

    # ------------------------------------------------------------ export

    def export(self, extent, initiator_iqn, chap_username, chap_secret):
        portal = self.check_export(extent, initiator_iqn, chap_username,
                                   chap_secret)
        lld = lld_for(extent)
        iqn = base.target_iqn(extent)
        with _LOCK:
            path = self.area.create(extent)
            self._do('export', lld, iqn, path, initiator_iqn,
                     chap_username, chap_secret)
        LOG.info('Exported extent %(extent)s (%(size)s MiB) as %(iqn)s '
                 'lun %(lun)s on %(portal)s over %(lld)s to %(initiator)s',
                 {'extent': extent['uuid'], 'size': extent['size_mb'],
                  'iqn': iqn, 'lun': LUN, 'portal': portal, 'lld': lld,
                  'initiator': initiator_iqn})
        return {'target_iqn': iqn, 'lun': LUN, 'portal': portal}

    # ---------------------------------------------------------- unexport

    def unexport(self, extent):
        iqn = base.target_iqn(extent)
        lld = lld_for(extent)
        with _LOCK:
            removed = self._do('unexport', lld, iqn,
                               extent.get('chap_username') or None)
        if removed['removed']:
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
