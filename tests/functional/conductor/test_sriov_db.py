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

"""Leases of SR-IOV virtual functions on every database backend (SQLite,
MariaDB, PostgreSQL): concurrent requests never give one VF to two leases
nor more VFs than the pool has, concurrent binds make the VFs once, and a
physical function serves one pool. The compute agent's PCI work is real
code on a fake sysfs (tests/unit/conductor/sriov_harness)."""

import pytest

from composable.common import exception
from composable.db import api as db_api
from tests.unit.conductor import harness as h_mod
from tests.unit.conductor import sriov_harness
from tests.unit.scenarios.lease_flows import test_sriov_flows as cases


@pytest.fixture
def harness(db_backend, tmp_path):
    h = sriov_harness.SriovHarness(rpc_timeout=10, fabric_timeout=10)
    h.start(tmp_path)
    yield h
    h.stop()


def test_lease_life_on_demand(harness):
    cases.check_lease_life_on_demand(harness)


def test_one_vf_per_lease_under_races(harness):
    cases.check_one_vf_per_lease_under_races(harness)


def test_a_pf_serves_one_pool(harness):
    ctx = h_mod.admin()
    with pytest.raises(exception.Conflict):
        db_api.sriov_pool_create(ctx, {
            'name': 'nic-vfs-again', 'kind': 'pci',
            'fabric_id': harness.fabric.id,
            'resource_class': 'CUSTOM_COMPOSABLE_PCI_NIC',
            'sriov_host_id': harness.hosts[sriov_harness.HOST].id,
            'sriov_pf_address': sriov_harness.PF, 'sriov_vf_count': 1,
            'sriov_vf_mode': 'on_demand'}, 'nic')
    # Nothing of the refused pool stays.
    assert [p.name for p in db_api.pool_list(
        ctx, filters={'kind': 'pci'})] == ['nic-vfs']
    assert len(db_api.device_list(ctx, filters={
        'pool_id': harness.sriov_pool.id})) == 2
    # The pool's host cannot go while the pool is there.
    with pytest.raises(exception.InUse) as in_use:
        db_api.host_delete(ctx, sriov_harness.HOST)
    assert 'nic-vfs' in in_use.value.message
