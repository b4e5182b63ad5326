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

"""An exporter that exports nothing, for demos and tests.

It answers like a real exporter and keeps the targets it pretends to serve
in memory (so tests can see nothing is left behind), and says in the log
that nothing is exported.
"""

import threading

from oslo_log import log as logging

from composable.memory.exporters import base

LOG = logging.getLogger(__name__)

NOTHING = 'noop exporter: nothing is exported'

DEFAULT_PORTAL = '127.0.0.1:3260'


class NoopExporter(base.MemoryExporter):

    def __init__(self, node_name):
        super().__init__(node_name)
        self._lock = threading.Lock()
        # extent uuid -> (target iqn, initiator iqn)
        self.exports = {}
        # extent uuids whose memory exists (exported once, not scrubbed)
        self.backed = set()
        # Said once; each simulated step is logged at DEBUG.
        LOG.warning('%(nothing)s from %(node)s: its extents are simulated',
                    {'nothing': NOTHING, 'node': node_name})

    def export(self, extent, initiator_iqn, chap_username, chap_secret):
        # The CHAP credentials are deliberately not logged.
        LOG.debug('%(nothing)s: would export extent %(extent)s '
                  '(%(size)s MiB) on %(node)s to %(initiator)s',
                  {'nothing': NOTHING, 'extent': extent['uuid'],
                   'size': extent.get('size_mb'), 'node': self.node_name,
                   'initiator': initiator_iqn})
        iqn = base.target_iqn(extent)
        with self._lock:
            self.exports[extent['uuid']] = (iqn, initiator_iqn)
            self.backed.add(extent['uuid'])
        return {'target_iqn': iqn, 'lun': 1,
                'portal': extent.get('portal') or DEFAULT_PORTAL}

    def unexport(self, extent):
        LOG.debug('%(nothing)s: would remove the target of extent '
                  '%(extent)s on %(node)s',
                  {'nothing': NOTHING, 'extent': extent['uuid'],
                   'node': self.node_name})
        with self._lock:
            self.exports.pop(extent['uuid'], None)

    def exported(self):
        with self._lock:
            return sorted(self.exports)

    def scrub(self, extent):
        LOG.debug('%(nothing)s: would delete the backing file of extent '
                  '%(extent)s on %(node)s',
                  {'nothing': NOTHING, 'extent': extent['uuid'],
                   'node': self.node_name})
        with self._lock:
            self.exports.pop(extent['uuid'], None)
            self.backed.discard(extent['uuid'])
