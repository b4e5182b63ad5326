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

"""The medium of a memory pool

Revision ID: 8d3f6b2a1c47
Revises: 7c4e1f2a9d60
Create Date: 2026-11-27 15:30:00

pools.medium says how a memory pool's memory reaches a host: ``network``
(RAM of memory nodes exported over iSCSI, every memory pool so far) or
``cxl`` (CXL Type-3 memory devices, onlined on the host as a CPU-less
NUMA node). NULL for gpu and pci pools.
"""

from alembic import op
import sqlalchemy as sa

revision = '8d3f6b2a1c47'
down_revision = '7c4e1f2a9d60'
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table('pools') as batch:
        batch.add_column(sa.Column('medium', sa.String(16), nullable=True))
    pools = sa.table('pools', sa.column('kind', sa.String),
                     sa.column('medium', sa.String))
    op.get_bind().execute(pools.update().where(
        pools.c.kind == 'memory').values(medium='network'))
