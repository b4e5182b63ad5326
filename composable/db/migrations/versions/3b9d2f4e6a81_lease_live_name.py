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


"""Unique names among a project's live leases

Revision ID: 3b9d2f4e6a81
Revises: 5e0c2b7d9a31
Create Date: 2026-11-27 11:20:00

leases.live_name holds the name of a lease named through the API until
the lease is released, NULL otherwise; a unique constraint on
(project_id, live_name) makes a name denote one live lease of a project
on every database (NULLs never collide). Existing live leases get their
name there, except where several live leases of a project share one:
the oldest keeps it, the others stay reachable by UUID (and by name the
ambiguity is reported, as before) until they are released or renamed.
"""

from alembic import op
import sqlalchemy as sa

# revision identifiers, used by Alembic.
revision = '3b9d2f4e6a81'
down_revision = '5e0c2b7d9a31'
branch_labels = None
depends_on = None

RELEASED = 'released'


def upgrade():
    with op.batch_alter_table('leases') as batch:
        batch.add_column(sa.Column('live_name', sa.String(255),
                                   nullable=True))
    leases = sa.table('leases', sa.column('id', sa.Integer),
                      sa.column('name', sa.String),
                      sa.column('project_id', sa.String),
                      sa.column('status', sa.String),
                      sa.column('live_name', sa.String))
    bind = op.get_bind()
    rows = bind.execute(
        sa.select(leases.c.id, leases.c.project_id, leases.c.name).where(
            leases.c.name.isnot(None),
            leases.c.status != RELEASED).order_by(leases.c.id)).all()
    seen = set()
    for row in rows:
        key = (row.project_id, row.name)
        if key in seen:
            continue
        seen.add(key)
        bind.execute(leases.update().where(leases.c.id == row.id).values(
            live_name=row.name))
    with op.batch_alter_table('leases') as batch:
        batch.create_unique_constraint('uniq_leases0project_id0live_name',
                                       ['project_id', 'live_name'])
