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

"""Pools of SR-IOV virtual functions

Revision ID: 5e0c2b7d9a31
Revises: 5e1a7c93b2d4
Create Date: 2026-11-25 15:00:00

A pci pool may be made of the virtual functions of one physical function
of one host: pools.sriov_host_id names the host, sriov_pf_address the
physical function's PCI address there, sriov_vf_count how many virtual
functions it gets, and sriov_vf_mode whether the conductor creates them
with the first bound lease and removes them with the last
(``on_demand``) or the host's agent creates them at start
(``precreated``). All NULL for any other pool.
"""

from alembic import op
import sqlalchemy as sa

# revision identifiers, used by Alembic.
revision = '5e0c2b7d9a31'
down_revision = '5e1a7c93b2d4'
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table('pools') as batch:
        batch.add_column(sa.Column('sriov_host_id', sa.Integer(),
                                   nullable=True))
        batch.add_column(sa.Column('sriov_pf_address', sa.String(32),
                                   nullable=True))
        batch.add_column(sa.Column('sriov_vf_count', sa.Integer(),
                                   nullable=True))
        batch.add_column(sa.Column('sriov_vf_mode', sa.String(16),
                                   nullable=True))
        batch.create_foreign_key('pools_sriov_host_id_fkey', 'hosts',
                                 ['sriov_host_id'], ['id'])
        # One pool per physical function: two pools handing out the same
        # VFs would give one VF to two leases.
        batch.create_unique_constraint(
            'uniq_pools0sriov_host_id0sriov_pf_address',
            ['sriov_host_id', 'sriov_pf_address'])
