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

"""The Placement consumer of a lease

Revision ID: 16ac42513eb7
Revises: a4c1d5e2f0b7
Create Date: 2026-11-24 09:12:40

leases.placement_consumer names the Placement consumer whose allocation
holds the lease's capacity: NULL when the lease has no claim of its own in
Placement, the lease's uuid when composable claimed it (a lease created
through the API), or an instance uuid when Nova's scheduler claimed the
capacity for that instance (a flavor-driven lease). Release deletes only
allocations of the first kind.
"""

from alembic import op
import sqlalchemy as sa

# revision identifiers, used by Alembic.
revision = '16ac42513eb7'
down_revision = 'a4c1d5e2f0b7'
branch_labels = None
depends_on = None


def upgrade():
    op.add_column('leases', sa.Column('placement_consumer', sa.String(36),
                                      nullable=True))
