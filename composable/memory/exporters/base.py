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

"""The interface of memory exporters, run by composable-agent on memory
nodes.

An exporter makes one extent (a file on tmpfs of ``size_mb``) reachable as
one iSCSI LUN, for one initiator only, with per-extent CHAP credentials.
All three operations are idempotent. ``extent`` is a plain dict (uuid,
index, size_mb, lease_uuid, memory_node, portal, transport). CHAP secrets
are never logged.
"""

import abc

from composable.common import exception
from composable import conf

CONF = conf.CONF


class MemoryExporter(object, metaclass=abc.ABCMeta):

    def __init__(self, node_name):
        self.node_name = node_name

    def check_export(self, extent, initiator_iqn, chap_username,
                     chap_secret):
        """Refuse (DriverError) an export of ``extent`` without the
        host's initiator name or CHAP credentials; the portal to export
        it on."""
        if not initiator_iqn:
            raise exception.DriverError(
                reason='extent %s cannot be exported without the initiator '
                       'name of the host' % extent['uuid'])
        if not chap_username or not chap_secret:
            raise exception.DriverError(
                reason='extent %s cannot be exported without CHAP '
                       'credentials' % extent['uuid'])
        portal = CONF.memory_node.portal or extent.get('portal')
        if not portal:
            raise exception.DriverError(
                reason='memory node %s has no iSCSI portal: set '
                       '[memory_node]portal or register the portal of the '
                       'memory node' % self.node_name)
        return portal

    @abc.abstractmethod
    def export(self, extent, initiator_iqn, chap_username, chap_secret):
        """Export the extent to ``initiator_iqn``; return
        ``{"target_iqn": ..., "lun": ..., "portal": ...}``. Exporting an
        extent again returns the same target."""

    @abc.abstractmethod
    def unexport(self, extent):
        """Remove the target of the extent; the backing memory stays."""

    @abc.abstractmethod
    def scrub(self, extent):
        """Destroy the extent's contents and free its memory, so nothing a
        lease wrote can be read by the next one."""

    def exported(self):
        """The uuids of the extents this node serves a target for, or None
        when the exporter cannot tell. The conductor compares them with
        the database to remove targets nobody leases any more."""
        return None


TARGET_PREFIX = 'iqn.2026-11.org.openstack.composable:extent-'


def target_iqn(extent):
    """The target IQN of an extent: derived from its uuid, so exporting it
    twice names the same target."""
    return TARGET_PREFIX + str(extent['uuid'])


def extent_uuid_of(iqn):
    """The extent uuid a target IQN was made for, or None for a target
    composable did not make."""
    if iqn and iqn.startswith(TARGET_PREFIX):
        return iqn[len(TARGET_PREFIX):] or None
    return None
