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

"""The conductor's check of what memory nodes report."""

import oslo_messaging as messaging

from composable.common import states
from composable.conductor import node_reports
from composable.db import api as db_api
from tests.unit.conductor import harness as h_mod


class FakeAgents(object):
    def __init__(self, reports):
        self.reports = reports
        self.scrubbed = []

    def get_memory_report(self, context, node):
        report = self.reports[node]
        if isinstance(report, Exception):
            raise report
        return report

    def scrub_extent(self, context, node, extent):
        self.scrubbed.append((node, extent['uuid']))


def _report(uuids, total_mb=8192):
    return {'node': 'x', 'simulated': False, 'path': '/mem',
            'total_mb': total_mb, 'extent_uuids': list(uuids)}


def test_orphan_files_are_scrubbed_and_live_ones_kept(harness):
    uuid = harness.create(memory_mb=2048)
    harness.api.bind_lease(h_mod.user_context(), uuid,
                           harness.hosts['compute-0'].uuid)
    lease = harness.wait(uuid, states.BOUND)
    live = {e.uuid: e.memory_node.name for e in lease.extents}
    by_node = {'memory-0': ['feedface-0000-4000-8000-000000000001'],
               'memory-1': []}
    for extent_uuid, node in live.items():
        by_node[node].append(extent_uuid)
    agents = FakeAgents({node: _report(uuids)
                         for node, uuids in by_node.items()})

    results = node_reports.check_memory_nodes(h_mod.admin(), agents)

    assert agents.scrubbed == [('memory-0',
                                'feedface-0000-4000-8000-000000000001')]
    assert results['memory-0']['orphans'] == [
        'feedface-0000-4000-8000-000000000001']
    assert results['memory-1']['orphans'] == []

    # Once the lease is released its files are orphans too.
    harness.api.delete_lease(h_mod.user_context(), uuid)
    harness.wait(uuid, states.RELEASED)
    agents.scrubbed = []
    node_reports.check_memory_nodes(h_mod.admin(), agents)
    assert sorted(u for _n, u in agents.scrubbed) == sorted(
        list(live) + ['feedface-0000-4000-8000-000000000001'])


def test_small_tmpfs_and_silent_agents_are_reported(sqlite_db):
    harness = h_mod.Harness()
    harness.inventory(node_mb=4096)
    agents = FakeAgents({'memory-0': _report([], total_mb=1024),
                         'memory-1': messaging.MessagingTimeout('late')})
    results = node_reports.check_memory_nodes(h_mod.admin(), agents)
    assert 'holds only 1024 MiB' in results['memory-0']['problems'][0]
    assert 'did not report' in results['memory-1']['problems'][0]
    assert results['memory-1']['report'] is None
    db_api.memory_node_update(h_mod.admin(), 'memory-1',
                              {'enabled': False})
    assert set(node_reports.check_memory_nodes(
        h_mod.admin(), agents)) == {'memory-0'}


def test_simulated_nodes_are_not_checked(harness):
    results = node_reports.check_memory_nodes(h_mod.admin())
    assert results['memory-0']['report']['simulated']
    assert results['memory-0']['orphans'] == []
    assert results['memory-0']['problems'] == []
