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

"""Scrubbing on release: memory that a lease could have written is always
scrubbed before its capacity returns; memory never handed to a memory node
needs no scrub, so releasing it does not wait for that node's agent."""

from composable.common import states
from tests.unit.conductor import harness as h_mod


def test_release_of_a_never_bound_lease_asks_no_memory_node(bare_harness):
    # No agent runs at all: any call to a memory node would fail the
    # release (error), so reaching released proves none was made.
    uuid = bare_harness.create(memory_mb=2048)
    bare_harness.api.delete_lease(h_mod.user_context(), uuid)
    lease = bare_harness.wait(uuid, (states.RELEASED, states.ERROR))
    assert lease.status == states.RELEASED, lease.fault
    assert bare_harness.pool(bare_harness.memory_pool).used == 0


def test_unbound_extents_keep_their_data_until_release_scrubs_it(harness):
    uuid = harness.create(memory_mb=2048)
    harness.api.bind_lease(h_mod.user_context(), uuid,
                           harness.hosts['compute-0'].uuid)
    harness.wait(uuid, states.BOUND)
    extent_ids = {e.uuid for e in harness.lease(uuid).extents}
    backed = set().union(*harness.backed().values())
    assert extent_ids <= backed

    harness.api.unbind_lease(h_mod.user_context(), uuid)
    lease = harness.wait(uuid, states.RESERVED)
    # No target serves them any more, but their files may hold what the
    # lease wrote: they are marked for scrubbing, not as untouched.
    assert {e.export_state for e in lease.extents} == {'unexported'}
    assert extent_ids <= set().union(*harness.backed().values())

    harness.api.delete_lease(h_mod.user_context(), uuid)
    harness.wait(uuid, states.RELEASED)
    assert not extent_ids & set().union(*harness.backed().values())
