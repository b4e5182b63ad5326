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

"""What the fabric says of a device: serial, health, reachable hosts

Revision ID: 7c4e1f2a9d60
Revises: 3b9d2f4e6a81
Create Date: 2026-11-27 15:30:00

devices.serial is the serial number the fabric reports, devices.health
its health (ok, warning, critical, unknown) and devices.health_reason
why, when it is not ok. devices.reachable_hosts is a JSON list of the
names of the hosts the fabric can connect the device to; NULL means
every host of the fabric (the fabric says nothing narrower), an empty
list no host at all. Existing devices keep NULL everywhere until the
next inventory sync fills what their fabric knows.
"""

from alembic import op
import sqlalchemy as sa

# revision identifiers, used by Alembic.
revision = '7c4e1f2a9d60'
down_revision = '3b9d2f4e6a81'
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table('devices') as batch:
        batch.add_column(sa.Column('serial', sa.String(255), nullable=True))
        batch.add_column(sa.Column('health', sa.String(16), nullable=True))
        batch.add_column(sa.Column('health_reason', sa.Text(),
                                   nullable=True))
        batch.add_column(sa.Column('reachable_hosts', sa.Text(),
                                   nullable=True))
