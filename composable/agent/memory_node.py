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

"""The memory side of one memory node: its exporter and its tmpfs area.

The exporter named by ``[agent]memory_exporter`` (``tgt``, ``lio``, or
``noop``, which simulates) serves the extents of this node, each a file
in the node's tmpfs area (composable.memory.tmpfs). start() mounts or
checks the area, so a node whose tmpfs is missing says so when the agent
starts, not at the first bind. The capacity and usage of the area are
logged every ``[agent]report_interval`` seconds.
"""

import threading

from oslo_log import log as logging

from composable.common import exception
from composable import conf
from composable.memory import exporters

CONF = conf.CONF
LOG = logging.getLogger(__name__)


class MemoryNode(object):

    def __init__(self, host, exporter=None):
        self.host = host
        self._exporter = exporter
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._reporter = None

    @property
    def exporter(self):
        if self._exporter is None:
            with self._lock:
                if self._exporter is None:
                    self._exporter = exporters.get_exporter(
                        CONF.agent.memory_exporter, self.host)
        return self._exporter

    @property
    def exporter_made(self):
        """Whether the exporter was made yet (nothing was exported by a
        node that never made it)."""
        return self._exporter is not None

    @property
    def area(self):
        """The tmpfs area of the exporter, or None (noop)."""
        return getattr(self.exporter, 'area', None)

    def start(self):
        self._stopping.clear()
        area = self.area
        if area is not None:
            area.ensure_ready()
        self.report()
        self._reporter = threading.Thread(
            target=self._report_loop, name='agent-report', daemon=True)
        self._reporter.start()

    def stop(self):
        self._stopping.set()
        if self._reporter is not None:
            self._reporter.join(5)
            self._reporter = None

    def _report_loop(self):
        while not self._stopping.wait(CONF.agent.report_interval):
            try:
                self.report()
            except Exception:
                LOG.exception('Could not report the memory of %s',
                              self.host)

    def memory_report(self, targets=False):
        """Capacity and usage of this memory node, in MiB; with
        ``targets``, also the extents the exporter serves a target for
        (``exported_extent_uuids``, None when it cannot tell)."""
        report = {'node': self.host,
                  'exporter': CONF.agent.memory_exporter}
        area = self.area
        if area is None:
            backed = sorted(getattr(self.exporter, 'backed', ()))
            report.update({'simulated': True, 'extents': len(backed),
                           'extent_uuids': backed, 'total_mb': None,
                           'used_mb': None, 'free_mb': None})
        else:
            report.update(area.usage())
            report['extent_uuids'] = sorted(f['uuid'] for f in area.list())
            report['simulated'] = False
        if targets:
            exported = getattr(self.exporter, 'exported', None)
            try:
                report['exported_extent_uuids'] = (
                    exported() if exported is not None else None)
            except exception.ComposableException as exc:
                # Unknown, not empty: the conductor then leaves every
                # target alone.
                report['exported_extent_uuids'] = None
                report['exporter_problem'] = exc.message
        return report

    def report(self):
        report = self.memory_report()
        LOG.info('Memory node %(node)s: %(extents)s extent(s), tmpfs '
                 '%(used)s of %(total)s MiB used, %(free)s MiB free '
                 '(exporter %(exporter)s)',
                 {'node': report['node'], 'extents': report['extents'],
                  'used': report.get('used_mb'),
                  'total': report.get('total_mb'),
                  'free': report.get('free_mb'),
                  'exporter': report['exporter']})
        return report
