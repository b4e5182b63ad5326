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

"""Usage samples of memory leases, and elastic leases

Revision ID: 5e1a7c93b2d4
Revises: 16ac42513eb7
Create Date: 2026-11-25 14:58:00

lease_usage holds the usage samples compute agents report per bound
memory lease (pruned after [elastic]usage_retention). leases.elastic holds
an elastic lease's policy as JSON ({} for a lease of fixed size), and
leases.elastic_low_since when its prediction went below its size (the
start of a shrink's hysteresis).
"""

from alembic import op
import sqlalchemy as sa

# revision identifiers, used by Alembic.
revision = '5e1a7c93b2d4'
down_revision = '16ac42513eb7'
branch_labels = None
depends_on = None


def upgrade():
    op.add_column('leases', sa.Column('elastic', sa.Text(), nullable=True))
    op.add_column('leases', sa.Column('elastic_low_since', sa.DateTime(),
                                      nullable=True))
    op.create_table(
        'lease_usage',
        sa.Column('id', sa.Integer(), primary_key=True, nullable=False),
        sa.Column('lease_id', sa.Integer(), sa.ForeignKey('leases.id'),
                  nullable=False),
        sa.Column('taken_at', sa.DateTime(), nullable=False),
        sa.Column('used_mb', sa.BigInteger(), nullable=False),
        sa.Column('size_mb', sa.BigInteger(), nullable=False),
        sa.Column('created_at', sa.DateTime(), nullable=True),
        sa.Column('updated_at', sa.DateTime(), nullable=True),
        sa.Index('lease_usage_lease_id_taken_at_idx', 'lease_id',
                 'taken_at'),
        sa.Index('lease_usage_taken_at_idx', 'taken_at'),
        mysql_engine='InnoDB', mysql_charset='utf8mb4')
