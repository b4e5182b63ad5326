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

"""Indexes for the lease list and the start and expiry passes

Revision ID: c5d2e7f4a913
Revises: 8d3f6b2a1c47
Create Date: 2026-11-27 19:40:00

A region keeps its released leases as history: with 100,000 leases, four
in five are released. The lease list (live leases by default, in
creation order, a page at a time) and the conductor's start and expiry
passes (every 30 seconds) read the leases by status; with an index on
the status alone, each read sorted or scanned every live lease.

* ``leases_status_created_at_idx`` (status, created_at, id) and
  ``leases_project_id_status_created_at_idx`` (project_id, status,
  created_at, id) give a page of the list from the index alone; they
  replace the indexes on status and on project_id, which are their
  prefixes.
* ``leases_status_end_at_idx`` (status, end_at) and
  ``leases_status_start_at_idx`` (status, start_at) find the leases whose
  end or start time has come, without reading the others.
"""

from alembic import op

revision = 'c5d2e7f4a913'
down_revision = '8d3f6b2a1c47'
branch_labels = None
depends_on = None


def upgrade():
    # The new ones first: the list never goes without an index.
    op.create_index('leases_status_created_at_idx', 'leases',
                    ['status', 'created_at', 'id'])
    op.create_index('leases_project_id_status_created_at_idx', 'leases',
                    ['project_id', 'status', 'created_at', 'id'])
    op.create_index('leases_status_end_at_idx', 'leases',
                    ['status', 'end_at'])
    op.create_index('leases_status_start_at_idx', 'leases',
                    ['status', 'start_at'])
    op.drop_index('leases_status_idx', table_name='leases')
    op.drop_index('leases_project_id_idx', table_name='leases')
