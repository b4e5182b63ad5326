"""The composable-agent RPC endpoint.

One agent runs per memory node and per compute node, with the roles its
node has. In this release the memory side uses the configured exporter
("noop" by default) and the compute side only logs what it would do (log in
to iSCSI targets, mkswap/swapon, hot-plug PCI devices): the privileged work
comes with the privsep layer. Every method is idempotent, because the
conductor repeats calls after timeouts and when it resumes work.

CHAP credentials arrive in ``extent`` dicts and in export_extent's
arguments; they are never logged.
"""

import threading

from oslo_log import log as logging
import oslo_messaging as messaging

from composable.common import exception
from composable import conf
from composable.memory import exporters

CONF = conf.CONF
LOG = logging.getLogger(__name__)

MEMORY_NODE = 'memory_node'
COMPUTE_NODE = 'compute_node'
ROLES = (MEMORY_NODE, COMPUTE_NODE)

NOOP_ATTACH = 'noop attach: nothing is attached on this host'

# Swap devices of leased memory all get the same priority so Linux
# round-robins pages over the extents of a lease.
SWAP_PRIORITY = 10


def _public(extent):
    """An extent dict without its CHAP credentials, for logs."""
    return {k: v for k, v in extent.items()
            if k not in ('chap_username', 'chap_secret')}


class AgentManager(object):

    target = messaging.Target(version='1.0')

    def __init__(self, host, roles=None, exporter=None):
        self.host = host
        self.roles = tuple(roles if roles is not None else CONF.agent.roles)
        unknown = set(self.roles) - set(ROLES)
        if unknown:
            raise exception.Invalid(
                reason='unknown agent roles %s' % ', '.join(sorted(unknown)))
        self._exporter = exporter
        self._lock = threading.Lock()
        # What this node would have live, by lease uuid; kept so repeated
        # calls answer the same and tests can check nothing is left over.
        self.memory_attachments = {}
        self.device_attachments = {}

    @property
    def exporter(self):
        if self._exporter is None:
            self._exporter = exporters.get_exporter(
                CONF.agent.memory_exporter, self.host)
        return self._exporter

    def _require(self, role, what):
        if role not in self.roles:
            raise exception.DriverError(
                reason='composable-agent on %s does not have the %s role '
                       '([agent]roles = %s), so it cannot %s; check that '
                       'the node is registered as the right kind' %
                       (self.host, role, ','.join(self.roles) or '(none)',
                        what))

    # ------------------------------------------------------- memory_node

    def export_extent(self, context, extent, initiator_iqn, chap_username,
                      chap_secret):
        self._require(MEMORY_NODE, 'export memory')
        LOG.info('Exporting extent %(extent)s of lease %(lease)s to '
                 '%(initiator)s', {'extent': extent['uuid'],
                                   'lease': extent.get('lease_uuid'),
                                   'initiator': initiator_iqn})
        return self.exporter.export(extent, initiator_iqn, chap_username,
                                    chap_secret)

    def unexport_extent(self, context, extent):
        self._require(MEMORY_NODE, 'unexport memory')
        LOG.info('Unexporting extent %s', extent['uuid'])
        self.exporter.unexport(extent)

    def scrub_extent(self, context, extent):
        self._require(MEMORY_NODE, 'scrub memory')
        LOG.info('Scrubbing extent %s', extent['uuid'])
        self.exporter.scrub(extent)

    # ------------------------------------------------------ compute_node

    def attach_memory(self, context, lease, extents, mode,
                      instance_uuid=None):
        self._require(COMPUTE_NODE, 'attach memory')
        details = {}
        for extent in extents:
            public = _public(extent)
            if mode == 'guest':
                LOG.warning('%(noop)s: would hot-plug an iSCSI disk for '
                            'target %(iqn)s lun %(lun)s at %(portal)s into '
                            'instance %(instance)s',
                            {'noop': NOOP_ATTACH,
                             'iqn': public.get('target_iqn'),
                             'lun': public.get('lun'),
                             'portal': public.get('portal'),
                             'instance': instance_uuid})
                details[extent['uuid']] = {
                    'mode': 'guest', 'instance_uuid': instance_uuid,
                    'target_iqn': public.get('target_iqn'),
                    'lun': public.get('lun')}
            else:
                path = ('/dev/disk/by-path/ip-%s-iscsi-%s-lun-%s' %
                        (public.get('portal'), public.get('target_iqn'),
                         public.get('lun')))
                LOG.warning('%(noop)s: would log in to target %(iqn)s at '
                            '%(portal)s and swapon -p %(prio)d %(path)s',
                            {'noop': NOOP_ATTACH,
                             'iqn': public.get('target_iqn'),
                             'portal': public.get('portal'),
                             'prio': SWAP_PRIORITY, 'path': path})
                details[extent['uuid']] = {'mode': 'host', 'device': path,
                                           'swap_priority': SWAP_PRIORITY}
        with self._lock:
            self.memory_attachments[lease['uuid']] = details
        return details

    def detach_memory(self, context, lease, extents, mode,
                      instance_uuid=None):
        self._require(COMPUTE_NODE, 'detach memory')
        for extent in extents:
            LOG.warning('%(noop)s: would swapoff and log out of target '
                        '%(iqn)s (lease %(lease)s)',
                        {'noop': NOOP_ATTACH,
                         'iqn': extent.get('target_iqn'),
                         'lease': lease['uuid']})
        with self._lock:
            self.memory_attachments.pop(lease['uuid'], None)

    def attach_devices(self, context, lease, devices):
        self._require(COMPUTE_NODE, 'attach devices')
        result = {}
        for device in devices:
            LOG.warning('%(noop)s: would rescan PCI and bind device '
                        '%(dev)s at %(pci)s (lease %(lease)s)',
                        {'noop': NOOP_ATTACH, 'dev': device['uuid'],
                         'pci': device.get('pci_address'),
                         'lease': lease['uuid']})
            result[device['uuid']] = device.get('pci_address')
        with self._lock:
            self.device_attachments.setdefault(lease['uuid'], {}).update(
                result)
        return result

    def detach_devices(self, context, lease, devices):
        self._require(COMPUTE_NODE, 'detach devices')
        with self._lock:
            held = self.device_attachments.get(lease['uuid'], {})
            for device in devices:
                LOG.warning('%(noop)s: would remove device %(dev)s from PCI '
                            '(lease %(lease)s)',
                            {'noop': NOOP_ATTACH, 'dev': device['uuid'],
                             'lease': lease['uuid']})
                held.pop(device['uuid'], None)
            if not held:
                self.device_attachments.pop(lease['uuid'], None)
