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

"""Property-based tests of the allocator, through the conductor.

hypothesis drives random sequences of creates (memory, GPUs, both, more
than the pools hold), binds, unbinds, deletes and conductor deaths in the
middle of a bind, an unbind or a release (the lease left in its
transitional state under the reservation of a conductor whose heartbeat
stopped, then taken over) against a conductor and real agent RPC servers
on SQLite, with small pools: two memory nodes of 4 GiB in 1 GiB extents,
two GPUs. After every step, read from the rows themselves, not from the
allocator's counters:

- no memory node holds more extents than its capacity, and the counters
  agree with the extents;
- a lease holding capacity has exactly the devices it asked for, a lease
  that holds none has no device, and the GPU pool's counter agrees;
- the fake fabric binds a device to at most one host, and only for a
  lease that is bound (or being bound);
- once every lease is deleted, both pools are empty and nothing is
  exported, attached or bound.
"""

import os
import shutil
import tempfile

from hypothesis import HealthCheck
from hypothesis import settings
from hypothesis import stateful
from hypothesis import strategies as st
import sqlalchemy as sa

from composable.common import states
from composable import conf
from composable.db import api as db_api
from composable.db import models
from composable.fabric import fake as fake_fabric
from tests import lease_rows
from tests.unit.conductor import harness as harness_mod

CONF = conf.CONF
RESTING = (states.RESERVED, states.ALLOC_FAILED, states.BOUND,
           states.BIND_FAILED, states.RELEASED, states.ERROR)
DEAD = 'cond-dead'


def _admin():
    return harness_mod.admin()


class LeaseMachine(stateful.RuleBasedStateMachine):

    leases = stateful.Bundle('leases')

    def __init__(self):
        super(LeaseMachine, self).__init__()
        self.tmp = tempfile.mkdtemp(prefix='composable-prop-')
        CONF.set_override('connection', 'sqlite:///%s' % os.path.join(
            self.tmp, 't.sqlite'), 'database')
        db_api.reset_facade()
        db_api.create_schema_for_tests()
        self.h = harness_mod.Harness(rpc_timeout=10, fabric_timeout=10)
        self.h.start(agents=harness_mod.HOSTS + harness_mod.MEMORY_NODES)
        self.h.set_conductor_heartbeat(DEAD, age_seconds=3600)

    def teardown(self):
        try:
            self._delete_everything()
        finally:
            self.h.stop()
            db_api.reset_facade()
            CONF.clear_override('connection', 'database')
            shutil.rmtree(self.tmp, ignore_errors=True)

    # ------------------------------------------------------------ helpers

    def _settle(self, uuid):
        return self.h.wait(uuid, RESTING, timeout=60)

    def _call(self, method, *args):
        """An RPC the conductor may refuse (a lease in the wrong state):
        True when it was accepted."""
        try:
            method(harness_mod.user_context(), *args)
        except Exception as exc:
            assert type(exc).__name__ in (
                'InvalidState', 'LeaseLocked', 'Conflict', 'NotFound',
                'RemoteError'), exc
            return False
        return True

    def _delete_everything(self):
        with db_api.reader(_admin()) as session:
            leases = session.query(models.Lease.uuid,
                                   models.Lease.status).all()
        for uuid, status in leases:
            if status in (states.RELEASED, states.ALLOC_FAILED):
                continue
            self._call(self.h.api.delete_lease, uuid)
            assert self.h.wait(uuid, (states.RELEASED,),
                               timeout=60).status == states.RELEASED
        for pool in (self.h.memory_pool, self.h.gpu_pool):
            assert self.h.pool(pool).used == 0
        assert set(self.h.node_allocated().values()) == {0}
        with db_api.reader(_admin()) as session:
            assert session.query(models.MemoryExtent).count() == 0
            assert session.query(models.Device).filter(
                models.Device.lease_id.isnot(None)).count() == 0
        self.h.assert_nothing_live()

    def _die_during(self, uuid, status, action, **values):
        """What a conductor killed in the middle of ``action`` leaves:
        the lease in ``status`` under its reservation, the action
        running. The live conductor's periodic task takes it over."""
        lease = self.h.lease(uuid)
        values.update(status=status, reservation=DEAD)
        lease_rows.write(_admin(), lease.id, values)
        db_api.action_start(_admin(), lease.id, action)
        self.h.conductor.run_periodic_tasks()
        self.h.idle(timeout=60)
        self._settle(uuid)

    # ------------------------------------------------------------ rules

    @stateful.rule(target=leases,
                   memory_mb=st.sampled_from([0, 1024, 2048, 4096, 9216]),
                   gpus=st.integers(min_value=0, max_value=3))
    def create(self, memory_mb, gpus):
        values = {}
        if memory_mb or not gpus:
            values['memory_mb'] = memory_mb or 1024
        if gpus:
            values['device_count'] = gpus
        created = self.h.create(**values)
        uuid = created['uuid'] if isinstance(created, dict) else created
        lease = self._settle(uuid)
        assert lease.status in (states.RESERVED, states.ALLOC_FAILED)
        return uuid

    @stateful.rule(uuid=leases,
                   host=st.sampled_from(harness_mod.HOSTS))
    def bind(self, uuid, host):
        if self._call(self.h.api.bind_lease, uuid,
                      self.h.hosts[host].uuid):
            self._settle(uuid)

    @stateful.rule(uuid=leases)
    def unbind(self, uuid):
        if self._call(self.h.api.unbind_lease, uuid):
            self._settle(uuid)

    @stateful.rule(uuid=stateful.consumes(leases))
    def delete(self, uuid):
        if self._call(self.h.api.delete_lease, uuid):
            assert self._settle(uuid).status in (states.RELEASED,
                                                 states.ERROR)

    @stateful.rule(uuid=leases,
                   host=st.sampled_from(harness_mod.HOSTS))
    def conductor_dies_binding(self, uuid, host):
        if self.h.lease(uuid).status == states.RESERVED:
            self._die_during(uuid, states.BINDING, 'bind',
                             host_id=self.h.hosts[host].id)

    @stateful.rule(uuid=leases)
    def conductor_dies_unbinding(self, uuid):
        if self.h.lease(uuid).status == states.BOUND:
            self._die_during(uuid, states.UNBINDING, 'unbind')

    @stateful.rule(uuid=stateful.consumes(leases))
    def conductor_dies_releasing(self, uuid):
        if self.h.lease(uuid).status in (states.RESERVED, states.BOUND,
                                         states.BIND_FAILED):
            self._die_during(uuid, states.RELEASING, 'delete')

    # ------------------------------------------------------------ checks

    # The checks read columns, not mapped objects: a Lease or an extent
    # loaded whole brings its pools, fabric, host, devices and node along,
    # and the checks run after every step.

    @stateful.invariant()
    def memory_is_never_over_committed(self):
        extent = models.MemoryExtent
        with db_api.reader(_admin()) as session:
            held_by_node = dict(session.query(
                extent.memory_node_id, sa.func.sum(extent.size_mb)).group_by(
                    extent.memory_node_id))
            for name, node_id, capacity_mb, allocated_mb in session.query(
                    models.MemoryNode.name, models.MemoryNode.id,
                    models.MemoryNode.capacity_mb,
                    models.MemoryNode.allocated_mb):
                held = held_by_node.get(node_id, 0)
                assert held <= capacity_mb, (name, held)
                assert held == allocated_mb, (name, held)
            total = sum(held_by_node.values())
            pool_used = session.query(models.Pool.used).filter(
                models.Pool.id == self.h.memory_pool.id).scalar()
            assert total == pool_used

    @stateful.invariant()
    def a_device_is_in_one_lease_at_most(self):
        with db_api.reader(_admin()) as session:
            devices = session.query(models.Device.address,
                                    models.Device.lease_id).all()
            leases = session.query(models.Lease.id, models.Lease.uuid,
                                   models.Lease.status,
                                   models.Lease.device_count).all()
            gpu_pool_used = session.query(models.Pool.used).filter(
                models.Pool.id == self.h.gpu_pool.id).scalar()
        owners = {}
        for address, lease_id in devices:
            if lease_id is not None:
                owners.setdefault(lease_id, []).append(address)
        for lease_id, uuid, status, device_count in leases:
            held = owners.get(lease_id, [])
            if status in states.HOLDS_CAPACITY:
                assert len(held) == device_count, (uuid, status, held)
            else:
                assert held == [], (uuid, status, held)
        assert gpu_pool_used == sum(len(v) for v in owners.values())
        assert gpu_pool_used <= len(devices)
        lease_of = dict(devices)
        statuses = {lease_id: status for lease_id, _u, status, _c in leases}
        for (_fabric, address), _host in \
                fake_fabric.FakeFabricDriver.bindings().items():
            lease_id = lease_of[address]
            assert statuses.get(lease_id) in (
                states.BINDING, states.BOUND, states.UNBINDING), (
                address, statuses.get(lease_id))


LeaseMachine.TestCase.settings = settings(
    max_examples=int(os.environ.get('COMPOSABLE_PROPERTY_EXAMPLES', 12)),
    stateful_step_count=12, deadline=None, derandomize=True,
    database=None, suppress_health_check=list(HealthCheck))
TestLeaseMachine = LeaseMachine.TestCase
