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

"""Test-only: write a lease's row directly, past every rule.

Tests use it to put a lease where time or a failure would have put it: a
start or an end already passed, a reservation held by a conductor that
died, the status a crash left behind. composable itself never writes a
lease this way: there a lease's status changes by its state machine only
(composable.conductor.task, db_api.lease_transition), and its other
fields by the named functions of composable.db.api, none of which can
change the status.
"""

import sqlalchemy as sa

from composable.common import states
from composable.common import utils
from composable.db import api as db_api
from composable.db import models


def write(context, lease_id, values, expected_status=None):
    """Set ``values`` (any columns, ``status`` included) on the lease;
    with ``expected_status`` (a state or a list) only if the lease is in
    it. True when the row was written.

    A new ``name`` takes the name among the project's live leases, as a
    rename does (DBDuplicateEntry when a live lease has it).
    """
    values = dict(values, updated_at=utils.utcnow())
    if 'name' in values and 'live_name' not in values:
        values['live_name'] = sa.case(
            (models.Lease.status == states.RELEASED, None),
            else_=sa.literal(values['name'], sa.String(255)))
    with db_api.writer(context) as session:
        query = session.query(models.Lease).filter(
            models.Lease.id == lease_id)
        if expected_status is not None:
            if isinstance(expected_status, str):
                expected_status = [expected_status]
            query = query.filter(
                models.Lease.status.in_(list(expected_status)))
        return query.update(values, synchronize_session=False) == 1
