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

"""A conductor, a compute agent with the simulated host side, the API in
process and a Redfish fabric on the project's emulator: what the Redfish
lease and fault tests share."""

import contextlib

from composable.api import app as api_app
from composable.conductor import fabric_sync
from composable import conf
from composable.db import api as dbapi
from composable import fabric as fabric_drivers
from composable import policies
from tests.functional.fabric import redfish_emulator
from tests.unit.api import base as api_base
from tests.unit.conductor import harness as harness_mod

CONF = conf.CONF

HOST = 'rf-compute-0'
SYSTEM = redfish_emulator.SYSTEMS + '/compute-0'


@contextlib.contextmanager
def running(tmp_path, emulator):
    """(harness, API client as admin, emulator URL, emulator)."""
    url, emu = emulator
    CONF.set_override('connection',
                      'sqlite:///%s' % (tmp_path / 't.sqlite'), 'database')
    dbapi.reset_facade()
    dbapi.create_schema_for_tests()
    CONF.set_override('enabled_drivers', ['fake', 'redfish'], 'fabric')
    h = harness_mod.Harness(rpc_timeout=10, fabric_timeout=60)
    try:
        h.start()
        h.start_agent(HOST)
        policies.reset()
        api = api_base.Client(api_app.setup_app('noauth'), 'admin')
        yield h, api, url, emu
    finally:
        h.stop()
        fabric_drivers.reset()
        CONF.clear_override('enabled_drivers', 'fabric')
        dbapi.reset_facade()
        CONF.clear_override('connection', 'database')


def driver_info(url, **more):
    info = {'address': url, 'username': 'admin',
            'password': 'redfish-secret',
            'system_map': {HOST: SYSTEM},
            'poll_interval': 0.05, 'timeout': 30}
    info.update(more)
    return info


def inventory(api, url, **info):
    made = api.post('/v1/fabrics', {'name': 'rf', 'driver': 'redfish',
                                    'driver_info': driver_info(url, **info)})
    assert made.status == 201, made
    # Credentials are never shown back, not even to the admin.
    assert 'redfish-secret' not in made.text
    host = api.post('/v1/hosts', {
        'name': HOST, 'fabric': 'rf',
        'initiator_iqn': 'iqn.2026-11.org.openstack:%s' % HOST})
    assert host.status == 201, host
    pool = api.post('/v1/pools', {'name': 'rf-gpu', 'kind': 'gpu',
                                  'fabric': 'rf'})
    assert pool.status == 201, pool
    fabric = dbapi.fabric_get(harness_mod.admin(), 'rf')
    summary = fabric_sync.FabricSync('cond-0').sync(harness_mod.admin(),
                                                    fabric)
    # The emulator's two GPU blocks join the GPU pool; its NVMe drive and
    # NIC have no pool on this fabric.
    assert len(summary['added']) == 2, summary
    devices = api.get('/v1/devices?pool=rf-gpu').json['devices']
    return {d['address']: d for d in devices}


def block(emu, block_id):
    with emu.locked() as state:
        block = state.blocks[block_id]
        return block['state'], block.get('system')


def wait(h, uuid, statuses):
    return h.wait(uuid, statuses, timeout=120)


def composed_into(emu, system_id):
    with emu.locked() as state:
        return list(state.systems[system_id]['blocks'])
