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

"""What a restarted compute agent asks the conductor over RPC
(ConductorAPI.host_memory_leases): the memory leases bound to its host in
host mode, each with what the agent answered when it attached each
extent, so that it reports their use again."""

from composable.common import states
from tests.unit.conductor import harness as h_mod


def _bound(harness, host, **values):
    uuid = harness.create(**values)
    harness.api.bind_lease(h_mod.user_context(), uuid,
                           harness.hosts[host].uuid)
    return harness.wait(uuid, states.BOUND)


def test_the_host_mode_memory_leases_bound_to_the_host(harness):
    harness.start_agent('compute-1')
    here = _bound(harness, 'compute-0', memory_mb=2048)
    elsewhere = _bound(harness, 'compute-1', memory_mb=1024)
    _bound(harness, 'compute-0', device_count=1)
    harness.create(memory_mb=1024)  # reserved, bound nowhere

    [summary] = harness.api.host_memory_leases(h_mod.admin(), 'compute-0')
    assert (summary['uuid'], summary['status'], summary['host'],
            summary['attach_mode']) == (here.uuid, 'bound', 'compute-0',
                                        'host')
    extents = sorted(e.uuid for e in here.extents)
    assert len(extents) == 2
    assert sorted(summary['extents']) == extents
    # The agent's own answer for each extent (the simulated data plane
    # gives the by-path device it would have used).
    assert sorted(summary['memory']) == extents
    for details in summary['memory'].values():
        assert details['mode'] == 'host'
        assert details['device'].startswith('/dev/disk/by-path/ip-')
    # No secret goes back.
    assert 'chap_secret' not in repr(summary)

    [other] = harness.api.host_memory_leases(h_mod.admin(), 'compute-1')
    assert other['uuid'] == elsewhere.uuid

    # Unbound, it is not the host's any more.
    harness.api.unbind_lease(h_mod.user_context(), here.uuid)
    harness.wait(here.uuid, states.RESERVED)
    assert harness.api.host_memory_leases(h_mod.admin(), 'compute-0') == []
