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

"""What the resizer tests share: one pass of the elastic resizer on the
conductor harness, waited for, and a lease's resize actions."""

from composable.db import api as db_api
from tests.unit.conductor import harness as harness_mod

# Generous: the machine running the tests may be busy.
DEADLINE = 60


def run(harness, now):
    """One resizer pass at ``now``; its futures, once every resize it
    started and the conductor's workers are done."""
    futures = harness.conductor.resizer.run(harness_mod.admin(), now=now)
    for future in futures:
        future.result(timeout=DEADLINE)
    harness.idle(DEADLINE)
    return futures


def resizes(harness, uuid):
    """The lease's ``resize`` actions, oldest first."""
    return [a for a in db_api.action_list(harness_mod.admin(),
                                          harness.lease(uuid).id)
            if a.action == 'resize']
