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

"""Initial schema

Revision ID: a4c1d5e2f0b7
Revises:
Create Date: 2026-11-22 05:04:06

Fabrics, hosts, pools and their inventory (memory nodes, devices), leases
and what hangs off them (memory extents, attachments, actions), and the
conductors' heartbeats. JSON values are stored as TEXT.
"""

from alembic import op
import sqlalchemy as sa

# revision identifiers, used by Alembic.
revision = 'a4c1d5e2f0b7'
down_revision = None
branch_labels = None
depends_on = None

_TABLE_OPTS = {'mysql_engine': 'InnoDB', 'mysql_charset': 'utf8mb4'}


def _id():
    return sa.Column('id', sa.Integer(), primary_key=True, nullable=False)


def _timestamps():
    return [sa.Column('created_at', sa.DateTime(), nullable=True),
            sa.Column('updated_at', sa.DateTime(), nullable=True)]


def upgrade():
    op.create_table(
        'fabrics',
        _id(),
        sa.Column('uuid', sa.String(36), nullable=False),
        sa.Column('name', sa.String(255), nullable=False),
        sa.Column('driver', sa.String(64), nullable=False),
        sa.Column('driver_info', sa.Text(), nullable=True),
        sa.Column('aggregate_uuid', sa.String(36), nullable=True),
        sa.Column('description', sa.String(255), nullable=True),
        *_timestamps(),
        sa.UniqueConstraint('uuid', name='uniq_fabrics0uuid'),
        sa.UniqueConstraint('name', name='uniq_fabrics0name'),
        **_TABLE_OPTS)

    op.create_table(
        'hosts',
        _id(),
        sa.Column('uuid', sa.String(36), nullable=False),
        sa.Column('name', sa.String(255), nullable=False),
        sa.Column('fabric_id', sa.Integer(), sa.ForeignKey('fabrics.id'),
                  nullable=False),
        sa.Column('initiator_iqn', sa.String(255), nullable=True),
        sa.Column('partition_id', sa.String(255), nullable=True),
        sa.Column('properties', sa.Text(), nullable=True),
        *_timestamps(),
        sa.UniqueConstraint('uuid', name='uniq_hosts0uuid'),
        sa.UniqueConstraint('name', name='uniq_hosts0name'),
        sa.Index('hosts_fabric_id_idx', 'fabric_id'),
        **_TABLE_OPTS)

    op.create_table(
        'pools',
        _id(),
        sa.Column('uuid', sa.String(36), nullable=False),
        sa.Column('name', sa.String(255), nullable=False),
        sa.Column('kind', sa.String(16), nullable=False),
        sa.Column('resource_class', sa.String(255), nullable=False),
        sa.Column('fabric_id', sa.Integer(), sa.ForeignKey('fabrics.id'),
                  nullable=False),
        sa.Column('traits', sa.Text(), nullable=True),
        sa.Column('total', sa.BigInteger(), nullable=False),
        sa.Column('reserved', sa.BigInteger(), nullable=False),
        sa.Column('used', sa.BigInteger(), nullable=False),
        sa.Column('step_size', sa.Integer(), nullable=False),
        sa.Column('provider_uuid', sa.String(36), nullable=True),
        sa.Column('description', sa.String(255), nullable=True),
        *_timestamps(),
        sa.UniqueConstraint('uuid', name='uniq_pools0uuid'),
        sa.UniqueConstraint('name', name='uniq_pools0name'),
        sa.Index('pools_fabric_id_idx', 'fabric_id'),
        sa.Index('pools_kind_idx', 'kind'),
        **_TABLE_OPTS)

    op.create_table(
        'memory_nodes',
        _id(),
        sa.Column('uuid', sa.String(36), nullable=False),
        sa.Column('name', sa.String(255), nullable=False),
        sa.Column('pool_id', sa.Integer(), sa.ForeignKey('pools.id'),
                  nullable=False),
        sa.Column('capacity_mb', sa.BigInteger(), nullable=False),
        sa.Column('reserved_mb', sa.BigInteger(), nullable=False),
        sa.Column('allocated_mb', sa.BigInteger(), nullable=False),
        sa.Column('exporter', sa.String(64), nullable=False),
        sa.Column('portal', sa.String(255), nullable=True),
        sa.Column('transport', sa.String(16), nullable=False),
        sa.Column('enabled', sa.Boolean(), nullable=False),
        *_timestamps(),
        sa.UniqueConstraint('uuid', name='uniq_memory_nodes0uuid'),
        sa.UniqueConstraint('name', name='uniq_memory_nodes0name'),
        sa.Index('memory_nodes_pool_id_idx', 'pool_id'),
        **_TABLE_OPTS)

    op.create_table(
        'leases',
        _id(),
        sa.Column('uuid', sa.String(36), nullable=False),
        sa.Column('name', sa.String(255), nullable=True),
        sa.Column('description', sa.String(255), nullable=True),
        sa.Column('project_id', sa.String(255), nullable=False),
        sa.Column('user_id', sa.String(255), nullable=True),
        sa.Column('memory_mb', sa.BigInteger(), nullable=False),
        sa.Column('device_count', sa.Integer(), nullable=False),
        sa.Column('device_kind', sa.String(16), nullable=True),
        sa.Column('device_model', sa.String(255), nullable=True),
        sa.Column('device_traits', sa.Text(), nullable=True),
        sa.Column('requested_pools', sa.Text(), nullable=True),
        sa.Column('requested_devices', sa.Text(), nullable=True),
        sa.Column('memory_pool_id', sa.Integer(), sa.ForeignKey('pools.id'),
                  nullable=True),
        sa.Column('device_pool_id', sa.Integer(), sa.ForeignKey('pools.id'),
                  nullable=True),
        sa.Column('start_at', sa.DateTime(), nullable=True),
        sa.Column('end_at', sa.DateTime(), nullable=True),
        sa.Column('host_id', sa.Integer(), sa.ForeignKey('hosts.id'),
                  nullable=True),
        sa.Column('instance_uuid', sa.String(36), nullable=True),
        sa.Column('attach_mode', sa.String(16), nullable=False),
        sa.Column('status', sa.String(32), nullable=False),
        sa.Column('fault', sa.Text(), nullable=True),
        sa.Column('reservation', sa.String(255), nullable=True),
        *_timestamps(),
        sa.UniqueConstraint('uuid', name='uniq_leases0uuid'),
        sa.Index('leases_project_id_idx', 'project_id'),
        sa.Index('leases_status_idx', 'status'),
        sa.Index('leases_reservation_idx', 'reservation'),
        sa.Index('leases_instance_uuid_idx', 'instance_uuid'),
        **_TABLE_OPTS)

    op.create_table(
        'devices',
        _id(),
        sa.Column('uuid', sa.String(36), nullable=False),
        sa.Column('name', sa.String(255), nullable=True),
        sa.Column('pool_id', sa.Integer(), sa.ForeignKey('pools.id'),
                  nullable=False),
        sa.Column('address', sa.String(255), nullable=False),
        sa.Column('kind', sa.String(16), nullable=False),
        sa.Column('vendor_id', sa.String(8), nullable=True),
        sa.Column('product_id', sa.String(8), nullable=True),
        sa.Column('model', sa.String(255), nullable=True),
        sa.Column('traits', sa.Text(), nullable=True),
        sa.Column('state', sa.String(16), nullable=False),
        sa.Column('lease_id', sa.Integer(), sa.ForeignKey('leases.id'),
                  nullable=True),
        sa.Column('pci_address', sa.String(32), nullable=True),
        *_timestamps(),
        sa.UniqueConstraint('uuid', name='uniq_devices0uuid'),
        sa.UniqueConstraint('pool_id', 'address',
                            name='uniq_devices0pool_id0address'),
        sa.Index('devices_pool_id_state_idx', 'pool_id', 'state'),
        sa.Index('devices_lease_id_idx', 'lease_id'),
        **_TABLE_OPTS)

    op.create_table(
        'memory_extents',
        _id(),
        sa.Column('uuid', sa.String(36), nullable=False),
        sa.Column('lease_id', sa.Integer(), sa.ForeignKey('leases.id'),
                  nullable=False),
        sa.Column('memory_node_id', sa.Integer(),
                  sa.ForeignKey('memory_nodes.id'), nullable=False),
        sa.Column('size_mb', sa.BigInteger(), nullable=False),
        sa.Column('index', sa.Integer(), nullable=False),
        sa.Column('target_iqn', sa.String(255), nullable=True),
        sa.Column('lun', sa.Integer(), nullable=True),
        sa.Column('chap_username', sa.String(255), nullable=True),
        sa.Column('chap_secret', sa.String(255), nullable=True),
        sa.Column('export_state', sa.String(16), nullable=False),
        *_timestamps(),
        sa.UniqueConstraint('uuid', name='uniq_memory_extents0uuid'),
        sa.Index('memory_extents_lease_id_idx', 'lease_id'),
        sa.Index('memory_extents_memory_node_id_idx', 'memory_node_id'),
        **_TABLE_OPTS)

    op.create_table(
        'attachments',
        _id(),
        sa.Column('uuid', sa.String(36), nullable=False),
        sa.Column('lease_id', sa.Integer(), sa.ForeignKey('leases.id'),
                  nullable=False),
        sa.Column('host_id', sa.Integer(), sa.ForeignKey('hosts.id'),
                  nullable=False),
        sa.Column('instance_uuid', sa.String(36), nullable=True),
        sa.Column('mode', sa.String(16), nullable=False),
        sa.Column('state', sa.String(16), nullable=False),
        sa.Column('details', sa.Text(), nullable=True),
        *_timestamps(),
        sa.UniqueConstraint('uuid', name='uniq_attachments0uuid'),
        sa.Index('attachments_lease_id_idx', 'lease_id'),
        **_TABLE_OPTS)

    op.create_table(
        'lease_actions',
        _id(),
        sa.Column('lease_id', sa.Integer(), sa.ForeignKey('leases.id'),
                  nullable=False),
        sa.Column('action', sa.String(32), nullable=False),
        sa.Column('request_id', sa.String(255), nullable=True),
        sa.Column('user_id', sa.String(255), nullable=True),
        sa.Column('project_id', sa.String(255), nullable=True),
        sa.Column('start_time', sa.DateTime(), nullable=False),
        sa.Column('finish_time', sa.DateTime(), nullable=True),
        sa.Column('result', sa.String(16), nullable=False),
        sa.Column('message', sa.Text(), nullable=True),
        *_timestamps(),
        sa.Index('lease_actions_lease_id_idx', 'lease_id'),
        **_TABLE_OPTS)

    op.create_table(
        'conductors',
        _id(),
        sa.Column('hostname', sa.String(255), nullable=False),
        sa.Column('online', sa.Boolean(), nullable=False),
        sa.Column('heartbeat_at', sa.DateTime(), nullable=False),
        *_timestamps(),
        sa.UniqueConstraint('hostname', name='uniq_conductors0hostname'),
        **_TABLE_OPTS)
