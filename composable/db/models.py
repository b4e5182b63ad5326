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

"""SQLAlchemy models: the whole schema of composable.

Capacity counters (``pools.used``, ``memory_nodes.allocated_mb``) and device
ownership (``devices.lease_id``) are changed only by the allocator, with
conditional UPDATEs, so concurrent claims can never over-commit (see
composable/conductor/allocator/claims.py).
"""

import json

from oslo_db.sqlalchemy import models
import sqlalchemy as sa
from sqlalchemy import orm
from sqlalchemy import types

from composable.common import states
from composable.common import utils


class JSONEncoded(types.TypeDecorator):
    """JSON in a TEXT column: portable across SQLite, MariaDB and
    PostgreSQL, and never NULL on read for the declared default type."""

    impl = sa.Text
    cache_ok = True

    def __init__(self, default_type=dict, *args, **kwargs):
        self.default_type = default_type
        super().__init__(*args, **kwargs)

    def process_bind_param(self, value, dialect):
        if value is None:
            value = self.default_type()
        return json.dumps(value, sort_keys=True)

    def process_result_value(self, value, dialect):
        if value is None:
            return self.default_type()
        return json.loads(value)


class NullableJSON(types.TypeDecorator):
    """JSON in a TEXT column where None is SQL NULL (not ``null``): for
    values whose absence means something of its own."""

    impl = sa.Text
    cache_ok = True

    def process_bind_param(self, value, dialect):
        return None if value is None else json.dumps(value, sort_keys=True)

    def process_result_value(self, value, dialect):
        return None if value is None else json.loads(value)


class Base(models.TimestampMixin, models.ModelBase):

    def as_dict(self):
        return {c.name: getattr(self, c.name) for c in self.__table__.columns}


def _table_args():
    return {'mysql_engine': 'InnoDB', 'mysql_charset': 'utf8mb4'}


Base = orm.declarative_base(cls=Base)


class Fabric(Base):
    """An interconnect domain: a PCIe switch fabric or a memory network."""
    __tablename__ = 'fabrics'
    __table_args__ = (
        sa.UniqueConstraint('uuid', name='uniq_fabrics0uuid'),
        sa.UniqueConstraint('name', name='uniq_fabrics0name'),
        _table_args())

    id = sa.Column(sa.Integer, primary_key=True)
    uuid = sa.Column(sa.String(36), nullable=False)
    name = sa.Column(sa.String(255), nullable=False)
    driver = sa.Column(sa.String(64), nullable=False)
    # Connection settings; may hold credentials: never logged or shown.
    driver_info = sa.Column(JSONEncoded(dict), nullable=True)
    # The Nova host aggregate (mirrored in Placement) of the hosts that
    # reach this fabric.
    aggregate_uuid = sa.Column(sa.String(36), nullable=True)
    description = sa.Column(sa.String(255), nullable=True)


class Host(Base):
    """A compute node on a fabric; name = the Nova compute service host."""
    __tablename__ = 'hosts'
    __table_args__ = (
        sa.UniqueConstraint('uuid', name='uniq_hosts0uuid'),
        sa.UniqueConstraint('name', name='uniq_hosts0name'),
        sa.Index('hosts_fabric_id_idx', 'fabric_id'),
        _table_args())

    id = sa.Column(sa.Integer, primary_key=True)
    uuid = sa.Column(sa.String(36), nullable=False)
    name = sa.Column(sa.String(255), nullable=False)
    fabric_id = sa.Column(sa.Integer, sa.ForeignKey('fabrics.id'),
                          nullable=False)
    initiator_iqn = sa.Column(sa.String(255), nullable=True)
    # Switch port or partition id on a PCIe fabric.
    partition_id = sa.Column(sa.String(255), nullable=True)
    properties = sa.Column(JSONEncoded(dict), nullable=True)

    fabric = orm.relationship(Fabric, lazy='joined', innerjoin=True)


class Pool(Base):
    """What is leased and reported to Placement: one resource class on one
    fabric. ``total`` follows the inventory (memory nodes or devices);
    ``used`` is the allocator's counter; ``reserved`` is headroom the
    operator keeps back (for example for Nova's double booking during cold
    migration)."""
    __tablename__ = 'pools'
    __table_args__ = (
        sa.UniqueConstraint('uuid', name='uniq_pools0uuid'),
        sa.UniqueConstraint('name', name='uniq_pools0name'),
        sa.Index('pools_fabric_id_idx', 'fabric_id'),
        sa.Index('pools_kind_idx', 'kind'),
        sa.UniqueConstraint('sriov_host_id', 'sriov_pf_address',
                            name='uniq_pools0sriov_host_id0sriov_pf_address'),
        _table_args())

    id = sa.Column(sa.Integer, primary_key=True)
    uuid = sa.Column(sa.String(36), nullable=False)
    name = sa.Column(sa.String(255), nullable=False)
    kind = sa.Column(sa.String(16), nullable=False)  # memory | gpu | pci
    resource_class = sa.Column(sa.String(255), nullable=False)
    fabric_id = sa.Column(sa.Integer, sa.ForeignKey('fabrics.id'),
                          nullable=False)
    traits = sa.Column(JSONEncoded(list), nullable=True)
    total = sa.Column(sa.BigInteger, nullable=False, default=0)
    reserved = sa.Column(sa.BigInteger, nullable=False, default=0)
    used = sa.Column(sa.BigInteger, nullable=False, default=0)
    # Memory: extent size in MiB. Devices: 1.
    step_size = sa.Column(sa.Integer, nullable=False, default=1)
    provider_uuid = sa.Column(sa.String(36), nullable=True)
    description = sa.Column(sa.String(255), nullable=True)
    # A pci pool of SR-IOV virtual functions: the host holding the
    # physical function, its PCI address there, how many VFs it gets and
    # who creates them (composable.common.sriov). NULL for other pools.
    sriov_host_id = sa.Column(
        sa.Integer, sa.ForeignKey('hosts.id',
                                  name='pools_sriov_host_id_fkey'),
        nullable=True)
    sriov_pf_address = sa.Column(sa.String(32), nullable=True)
    sriov_vf_count = sa.Column(sa.Integer, nullable=True)
    sriov_vf_mode = sa.Column(sa.String(16), nullable=True)
    # Memory pools: how the memory reaches a host (network: iSCSI exports
    # of memory nodes; cxl: CXL memory devices onlined as a NUMA node).
    # NULL for device pools.
    medium = sa.Column(sa.String(16), nullable=True)

    fabric = orm.relationship(Fabric, lazy='joined', innerjoin=True)
    sriov_host = orm.relationship(Host, lazy='joined')


class MemoryNode(Base):
    """A node that exports part of its RAM to a memory pool."""
    __tablename__ = 'memory_nodes'
    __table_args__ = (
        sa.UniqueConstraint('uuid', name='uniq_memory_nodes0uuid'),
        sa.UniqueConstraint('name', name='uniq_memory_nodes0name'),
        sa.Index('memory_nodes_pool_id_idx', 'pool_id'),
        _table_args())

    id = sa.Column(sa.Integer, primary_key=True)
    uuid = sa.Column(sa.String(36), nullable=False)
    name = sa.Column(sa.String(255), nullable=False)
    pool_id = sa.Column(sa.Integer, sa.ForeignKey('pools.id'),
                        nullable=False)
    capacity_mb = sa.Column(sa.BigInteger, nullable=False)
    reserved_mb = sa.Column(sa.BigInteger, nullable=False, default=0)
    allocated_mb = sa.Column(sa.BigInteger, nullable=False, default=0)
    exporter = sa.Column(sa.String(64), nullable=False, default='noop')
    portal = sa.Column(sa.String(255), nullable=True)
    transport = sa.Column(sa.String(16), nullable=False, default='tcp')
    enabled = sa.Column(sa.Boolean, nullable=False, default=True)

    pool = orm.relationship(Pool, lazy='joined', innerjoin=True)


class Device(Base):
    """One pooled PCIe device (GPU, NVMe, NIC, FPGA, SR-IOV function)."""
    __tablename__ = 'devices'
    __table_args__ = (
        sa.UniqueConstraint('uuid', name='uniq_devices0uuid'),
        sa.UniqueConstraint('pool_id', 'address',
                            name='uniq_devices0pool_id0address'),
        sa.Index('devices_pool_id_state_idx', 'pool_id', 'state'),
        sa.Index('devices_lease_id_idx', 'lease_id'),
        _table_args())

    id = sa.Column(sa.Integer, primary_key=True)
    uuid = sa.Column(sa.String(36), nullable=False)
    name = sa.Column(sa.String(255), nullable=True)
    pool_id = sa.Column(sa.Integer, sa.ForeignKey('pools.id'),
                        nullable=False)
    # Fabric-native id: Redfish ResourceBlock URI, Switchtec PDFID, ...
    address = sa.Column(sa.String(255), nullable=False)
    kind = sa.Column(sa.String(16), nullable=False)  # gpu nvme nic fpga ...
    vendor_id = sa.Column(sa.String(8), nullable=True)
    product_id = sa.Column(sa.String(8), nullable=True)
    model = sa.Column(sa.String(255), nullable=True)
    traits = sa.Column(JSONEncoded(list), nullable=True)
    # One of composable.common.states.DEVICE_STATES.
    state = sa.Column(sa.String(16), nullable=False,
                      default=states.DEVICE_AVAILABLE)
    # The one lease holding this device: a single column, so a device can
    # never be in two leases.
    lease_id = sa.Column(sa.Integer, sa.ForeignKey('leases.id'),
                         nullable=True)
    pci_address = sa.Column(sa.String(32), nullable=True)
    # What the fabric last reported (composable.conductor.fabric_sync):
    # the serial number, the health (composable.fabric.base DEVICE_HEALTHS)
    # and, when it is not ok, why.
    serial = sa.Column(sa.String(255), nullable=True)
    health = sa.Column(sa.String(16), nullable=True)
    health_reason = sa.Column(sa.Text, nullable=True)
    # Names of the hosts the fabric can connect the device to. NULL: every
    # host of the fabric (the fabric tells nothing narrower, so the device
    # is not stranded); [] no host at all (the fabric names its zones and
    # no host is in them). Read by the allocator and the scheduler filter.
    reachable_hosts = sa.Column(NullableJSON(), nullable=True)

    pool = orm.relationship(Pool, lazy='joined', innerjoin=True)


class Lease(Base):
    """A project's claim on pooled memory and/or devices."""
    __tablename__ = 'leases'
    __table_args__ = (
        sa.UniqueConstraint('uuid', name='uniq_leases0uuid'),
        # A name given through the API names one live lease of a
        # project: live_name is the name until the lease is released,
        # then NULL (and NULLs never collide in a unique constraint, on
        # SQLite, MariaDB and PostgreSQL alike).
        sa.UniqueConstraint('project_id', 'live_name',
                            name='uniq_leases0project_id0live_name'),
        # A page of the lease list from an index (see migration
        # c5d2e7f4a913), and the leases whose start or end time came.
        sa.Index('leases_status_created_at_idx', 'status', 'created_at',
                 'id'),
        sa.Index('leases_project_id_status_created_at_idx', 'project_id',
                 'status', 'created_at', 'id'),
        sa.Index('leases_status_end_at_idx', 'status', 'end_at'),
        sa.Index('leases_status_start_at_idx', 'status', 'start_at'),
        sa.Index('leases_reservation_idx', 'reservation'),
        sa.Index('leases_instance_uuid_idx', 'instance_uuid'),
        _table_args())

    id = sa.Column(sa.Integer, primary_key=True)
    uuid = sa.Column(sa.String(36), nullable=False)
    name = sa.Column(sa.String(255), nullable=True)
    # The name while the lease is not released, for leases named through
    # the API (a flavor's composable:lease_name is shared by its
    # instances' leases and is not unique); NULL otherwise.
    live_name = sa.Column(sa.String(255), nullable=True)
    description = sa.Column(sa.String(255), nullable=True)
    project_id = sa.Column(sa.String(255), nullable=False)
    user_id = sa.Column(sa.String(255), nullable=True)
    # What was asked.
    memory_mb = sa.Column(sa.BigInteger, nullable=False, default=0)
    device_count = sa.Column(sa.Integer, nullable=False, default=0)
    device_kind = sa.Column(sa.String(16), nullable=True)
    device_model = sa.Column(sa.String(255), nullable=True)
    device_traits = sa.Column(JSONEncoded(list), nullable=True)
    # Pools asked for explicitly (uuids), and devices asked for by uuid.
    requested_pools = sa.Column(JSONEncoded(list), nullable=True)
    requested_devices = sa.Column(JSONEncoded(list), nullable=True)
    # What was chosen.
    memory_pool_id = sa.Column(sa.Integer, sa.ForeignKey('pools.id'),
                               nullable=True)
    device_pool_id = sa.Column(sa.Integer, sa.ForeignKey('pools.id'),
                               nullable=True)
    start_at = sa.Column(sa.DateTime, nullable=True)
    end_at = sa.Column(sa.DateTime, nullable=True)
    # The consumer it is bound to.
    host_id = sa.Column(sa.Integer, sa.ForeignKey('hosts.id'), nullable=True)
    instance_uuid = sa.Column(sa.String(36), nullable=True)
    attach_mode = sa.Column(sa.String(16), nullable=False,
                            default=states.ATTACH_HOST)
    # The Placement consumer holding the lease's capacity: NULL = none of
    # its own, the lease uuid = composable's claim (released with the
    # lease), an instance uuid = Nova's claim for that instance (never
    # deleted by composable). See composable.conductor.placement.claims.
    placement_consumer = sa.Column(sa.String(36), nullable=True)
    # One of composable.common.states.
    status = sa.Column(sa.String(32), nullable=False)
    fault = sa.Column(sa.Text, nullable=True)
    # Hostname of the conductor working on this lease, or NULL.
    reservation = sa.Column(sa.String(255), nullable=True)
    # An elastic memory lease's policy (min_mb, max_mb, windows in
    # seconds, headroom); {} for a lease of fixed size.
    elastic = sa.Column(JSONEncoded(dict), nullable=True)
    # Since when the prediction of an elastic lease has stayed below its
    # size without interruption (NULL: it has not): a shrink waits for
    # [elastic]shrink_hysteresis from here.
    elastic_low_since = sa.Column(sa.DateTime, nullable=True)

    memory_pool = orm.relationship(Pool, foreign_keys=[memory_pool_id],
                                   lazy='joined')
    device_pool = orm.relationship(Pool, foreign_keys=[device_pool_id],
                                   lazy='joined')
    host = orm.relationship(Host, lazy='joined')
    devices = orm.relationship(Device, lazy='selectin',
                               order_by='Device.id',
                               foreign_keys='Device.lease_id')
    extents = orm.relationship('MemoryExtent', lazy='selectin',
                               order_by='MemoryExtent.id',
                               back_populates='lease')


class MemoryExtent(Base):
    """One slice of a memory lease on one memory node, exported as one LUN."""
    __tablename__ = 'memory_extents'
    __table_args__ = (
        sa.UniqueConstraint('uuid', name='uniq_memory_extents0uuid'),
        sa.Index('memory_extents_lease_id_idx', 'lease_id'),
        sa.Index('memory_extents_memory_node_id_idx', 'memory_node_id'),
        _table_args())

    id = sa.Column(sa.Integer, primary_key=True)
    uuid = sa.Column(sa.String(36), nullable=False)
    lease_id = sa.Column(sa.Integer, sa.ForeignKey('leases.id'),
                         nullable=False)
    memory_node_id = sa.Column(sa.Integer, sa.ForeignKey('memory_nodes.id'),
                               nullable=False)
    size_mb = sa.Column(sa.BigInteger, nullable=False)
    # Position of the extent within its lease (0-based).
    index = sa.Column(sa.Integer, nullable=False, default=0)
    target_iqn = sa.Column(sa.String(255), nullable=True)
    lun = sa.Column(sa.Integer, nullable=True)
    # CHAP credentials: admin-only in the API, never logged.
    chap_username = sa.Column(sa.String(255), nullable=True)
    chap_secret = sa.Column(sa.String(255), nullable=True)
    # One of the composable.common.states EXTENT_* states.
    export_state = sa.Column(sa.String(16), nullable=False,
                             default=states.EXTENT_ALLOCATED)

    lease = orm.relationship(Lease, back_populates='extents')
    memory_node = orm.relationship(MemoryNode, lazy='joined')


class LeaseUsage(Base):
    """One usage sample of a memory lease, as its compute agent measured
    it: how much of the lease held pages at ``taken_at``. Kept for
    ``[elastic]usage_retention`` seconds."""
    __tablename__ = 'lease_usage'
    __table_args__ = (
        sa.Index('lease_usage_lease_id_taken_at_idx', 'lease_id',
                 'taken_at'),
        sa.Index('lease_usage_taken_at_idx', 'taken_at'),
        _table_args())

    id = sa.Column(sa.Integer, primary_key=True)
    lease_id = sa.Column(sa.Integer, sa.ForeignKey('leases.id'),
                         nullable=False)
    taken_at = sa.Column(sa.DateTime, nullable=False)
    used_mb = sa.Column(sa.BigInteger, nullable=False)
    # The size of the lease as the agent saw it attached.
    size_mb = sa.Column(sa.BigInteger, nullable=False)


class Attachment(Base):
    """Where a lease is live: host-side facts of one binding."""
    __tablename__ = 'attachments'
    __table_args__ = (
        sa.UniqueConstraint('uuid', name='uniq_attachments0uuid'),
        sa.Index('attachments_lease_id_idx', 'lease_id'),
        _table_args())

    id = sa.Column(sa.Integer, primary_key=True)
    uuid = sa.Column(sa.String(36), nullable=False)
    lease_id = sa.Column(sa.Integer, sa.ForeignKey('leases.id'),
                         nullable=False)
    host_id = sa.Column(sa.Integer, sa.ForeignKey('hosts.id'),
                        nullable=False)
    instance_uuid = sa.Column(sa.String(36), nullable=True)
    mode = sa.Column(sa.String(16), nullable=False)
    # attaching | attached | detaching | detached | failed
    state = sa.Column(sa.String(16), nullable=False)
    # Session ids, device paths, swap priority, PCI addresses, per extent or
    # device uuid.
    details = sa.Column(JSONEncoded(dict), nullable=True)

    host = orm.relationship(Host, lazy='joined')


class LeaseAction(Base):
    """Who did what to a lease and how it ended (like Nova's instance
    actions)."""
    __tablename__ = 'lease_actions'
    __table_args__ = (
        sa.Index('lease_actions_lease_id_idx', 'lease_id'),
        _table_args())

    id = sa.Column(sa.Integer, primary_key=True)
    lease_id = sa.Column(sa.Integer, sa.ForeignKey('leases.id'),
                         nullable=False)
    action = sa.Column(sa.String(32), nullable=False)
    request_id = sa.Column(sa.String(255), nullable=True)
    user_id = sa.Column(sa.String(255), nullable=True)
    project_id = sa.Column(sa.String(255), nullable=True)
    start_time = sa.Column(sa.DateTime, nullable=False)
    finish_time = sa.Column(sa.DateTime, nullable=True)
    # running | success | error
    result = sa.Column(sa.String(16), nullable=False, default='running')
    message = sa.Column(sa.Text, nullable=True)


class Conductor(Base):
    """A running conductor and its heartbeat (``updated_at``)."""
    __tablename__ = 'conductors'
    __table_args__ = (
        sa.UniqueConstraint('hostname', name='uniq_conductors0hostname'),
        _table_args())

    id = sa.Column(sa.Integer, primary_key=True)
    hostname = sa.Column(sa.String(255), nullable=False)
    online = sa.Column(sa.Boolean, nullable=False, default=True)
    heartbeat_at = sa.Column(sa.DateTime, nullable=False,
                             default=utils.utcnow)
