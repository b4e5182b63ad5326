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

"""Memory pools of CXL memory through the API (microversion 1.5): the
medium, its checks, leases in whole chunks bound in host mode, the
allocator's no-over-commit guarantee and the pool's Placement inventory.
The compute agent's CXL side is simulated here ([agent]memory_exporter
noop); tests/unit/agent/compute_node/test_cxl_memory.py runs it."""

import datetime
import time

import pytest

from composable.common import context
from composable.conductor.placement import sync as placement_sync
from composable.db import api as db_api
from composable import fabric as fabric_drivers
from composable.fabric import cxl

V15 = {'OpenStack-API-Version': 'composable 1.5'}
V13 = {'OpenStack-API-Version': 'composable 1.3'}
V16 = {'OpenStack-API-Version': 'composable 1.6'}
SERVER = '9d5a1a5e-0e9b-4c3c-9b4e-2b1f2a1d2c3b'

DRIVER_INFO = {'backend': 'local', 'devices': {
    'cmm0': {'serial': '0x5A5A0001', 'capacity_mb': 1024,
             'hosts': ['compute-1']},
    'cmm1': {'serial': '0x5a5a0002', 'capacity_mb': 1024,
             'hosts': ['compute-2']}}}


@pytest.fixture
def cxl_fabric(client, api_env):
    api_env.set_override('enabled_drivers', ['fake', 'cxl'], 'fabric')
    fabric_drivers._DRIVERS['cxl'] = cxl.CxlFabricDriver()
    try:
        resp = client.post('/v1/fabrics', {'name': 'cxl1', 'driver': 'cxl',
                                           'driver_info': DRIVER_INFO})
        assert resp.status == 201, resp
        for name in ('compute-1', 'compute-2'):
            assert client.post('/v1/hosts', {
                'name': name, 'fabric': 'cxl1'}).status == 201
        yield resp.json
    finally:
        fabric_drivers.reset()
        api_env.clear_override('enabled_drivers', 'fabric')


@pytest.fixture
def cxl_pool(client, cxl_fabric):
    resp = client.post('/v1/pools', {'name': 'cxl-mem', 'kind': 'memory',
                                     'fabric': 'cxl1', 'medium': 'cxl'},
                       headers=V15)
    assert resp.status == 201, resp
    for name in ('cmm0', 'cmm1'):
        resp = client.post('/v1/memory_nodes', {
            'name': name, 'pool': 'cxl-mem', 'capacity_mb': 1024})
        assert resp.status == 201, resp
        assert resp.json['exporter'] == 'cxl'
    return client.get('/v1/pools/cxl-mem', headers=V15).json


@pytest.fixture
def network(client):
    """A fake PCIe fabric with a network memory pool and a GPU pool (its
    hosts are not needed: the CXL fabric has the hosts)."""
    for path, body in (
            ('/v1/fabrics', {'name': 'fab1', 'driver': 'fake'}),
            ('/v1/pools', {'name': 'mem1', 'kind': 'memory',
                           'fabric': 'fab1', 'step_size': 1024}),
            ('/v1/memory_nodes', {'name': 'mn1', 'pool': 'mem1',
                                  'capacity_mb': 2048}),
            ('/v1/pools', {'name': 'gpu1', 'kind': 'gpu',
                           'fabric': 'fab1'})):
        resp = client.post(path, body)
        assert resp.status == 201, resp
    return client.get('/v1/pools/mem1').json


def _wait(client, lease_uuid, statuses, timeout=20):
    deadline = time.time() + timeout
    while True:
        lease = client.get('/v1/leases/%s' % lease_uuid).json
        if lease['status'] in statuses:
            return lease
        assert time.time() < deadline, 'lease stayed %s' % lease['status']
        time.sleep(0.05)


def test_create_and_show(client, cxl_pool, network):
    assert cxl_pool['medium'] == 'cxl'
    assert cxl_pool['step_size'] == 256
    assert cxl_pool['resource_class'] == 'CUSTOM_COMPOSABLE_CXL_MEMORY_MB'
    assert cxl_pool['total'] == 2048
    # Network pools say so from 1.5 on; device pools have no medium; an
    # older client sees neither.
    assert client.get('/v1/pools/mem1', headers=V15).json[
        'medium'] == 'network'
    assert client.get('/v1/pools/gpu1', headers=V15).json['medium'] is None
    assert 'medium' not in client.get('/v1/pools/cxl-mem',
                                      headers=V13).json
    # Its Placement inventory: whole chunks, never over-committed.
    pool = db_api.pool_get(context.get_admin_context(), 'cxl-mem')
    assert placement_sync.pool_inventory(pool) == {
        'CUSTOM_COMPOSABLE_CXL_MEMORY_MB': {
            'total': 2048, 'reserved': 0, 'min_unit': 256,
            'max_unit': 2048, 'step_size': 256, 'allocation_ratio': 1.0}}


@pytest.mark.parametrize('body, headers, status, words', [
    ({'medium': 'cxl'}, V13, 400, 'need API version 1.5'),
    ({'medium': 'cxl', 'kind': 'gpu'}, V15, 400,
     'only memory pools have a medium'),
    ({'medium': 'cxl', 'fabric': 'fab1'}, V15, 400,
     'fabric fab1 has driver fake'),
    ({'medium': 'cxl', 'step_size': 300}, V15, 400,
     'multiples of the 256 MiB a CXL decoder maps, not 300'),
    ({'medium': 'tape'}, V15, 400, "'medium'"),
])
def test_bad_pools(client, cxl_fabric, network, body, headers, status,
                   words):
    request = dict({'name': 'bad', 'kind': 'memory', 'fabric': 'cxl1'},
                   **body)
    resp = client.post('/v1/pools', request, headers=headers)
    assert resp.status == status, resp
    assert words in resp.error['detail']
    assert client.get('/v1/pools/bad').status == 404


def test_bad_memory_devices(client, cxl_pool, network):
    resp = client.post('/v1/memory_nodes', {
        'name': 'cmm2', 'pool': 'cxl-mem', 'capacity_mb': 1000})
    assert resp.status == 400
    assert 'whole chunks of 256 MiB' in resp.error['detail']
    resp = client.post('/v1/memory_nodes', {
        'name': 'cmm2', 'pool': 'cxl-mem', 'capacity_mb': 1024,
        'exporter': 'tgt'})
    assert resp.status == 400
    assert 'with exporter cxl, not tgt' in resp.error['detail']
    resp = client.post('/v1/memory_nodes', {
        'name': 'mn9', 'pool': 'mem1', 'capacity_mb': 1024,
        'exporter': 'cxl'})
    assert resp.status == 400
    assert 'network pool' in resp.error['detail']


@pytest.mark.parametrize('body, words', [
    ({'memory_mb': 1000},
     'whole chunks of 256 MiB; ask for a multiple of 256 MiB (768 or '
     '1024), not 1000'),
    ({'memory_mb': 512, 'attach_mode': 'guest'},
     'onlined on the host as a NUMA node: bind it in host mode, or in '
     'virtio-mem mode to a server'),
    ({'memory_mb': 512, 'elastic': {
        'min_mb': 256, 'max_mb': 1024, 'observation_window': 60,
        'prediction_window': 60}}, 'have a fixed size'),
    ({'memory_mb': 512, 'pools': ['cxl-mem', 'mem1']},
     'name memory pools of one medium'),
])
def test_bad_leases(client, cxl_pool, network, conductor, body, words):
    member = client.as_('member')
    request = dict({'pools': ['cxl-mem']}, **body)
    resp = member.post('/v1/leases', request,
                       headers={'OpenStack-API-Version': 'composable 1.5'})
    assert resp.status == 400, resp
    assert words in resp.error['detail']
    assert member.get('/v1/leases').json['leases'] == []


def test_lease_in_chunks_bound_to_a_host(client, cxl_pool, network,
                                         conductor):
    member = client.as_('member')
    resp = member.post('/v1/leases', {'memory_mb': 768,
                                      'pools': ['cxl-mem']})
    assert resp.status == 201, resp
    lease = resp.json
    assert lease['status'] == 'reserved'
    assert lease['memory_pool_uuid'] == cxl_pool['uuid']
    assert sorted(e['size_mb'] for e in lease['extents']) == [256] * 3
    url = '/v1/leases/%s' % lease['uuid']
    # The host named too: no Nova here to say where the server runs, and
    # the refusal is the CXL rule's, checked by the conductor.
    resp = member.post(url + '/bind', {
        'host': 'compute-1',
        'server': '9d5a1a5e-0e9b-4c3c-9b4e-2b1f2a1d2c3b',
        'attach_mode': 'guest'})
    assert resp.status == 400
    assert 'bind it in host mode' in resp.error['detail']
    # Spread over both devices (the default placement); compute-1 is
    # wired to cmm0 only.
    assert {e['memory_node'] for e in lease['extents']} == {'cmm0', 'cmm1'}
    resp = member.post(url + '/bind', {'host': 'compute-1'})
    assert resp.status == 202, resp
    failed = _wait(member, lease['uuid'], ['bind_failed', 'bound'])
    assert failed['status'] == 'bind_failed'
    assert 'host compute-1 is not wired to CXL memory device cmm1 (hosts ' \
        'reaching it: compute-2)' in failed['fault']


def test_bind_and_unbind(client, cxl_fabric, network, conductor):
    info = dict(DRIVER_INFO, devices={
        name: dict(device, hosts=['compute-1', 'compute-2'])
        for name, device in DRIVER_INFO['devices'].items()})
    resp = client.patch('/v1/fabrics/cxl1', {'driver_info': info})
    assert resp.status == 200, resp
    client.post('/v1/pools', {'name': 'cxl-mem', 'kind': 'memory',
                              'fabric': 'cxl1', 'medium': 'cxl'},
                headers=V15)
    for name in ('cmm0', 'cmm1'):
        client.post('/v1/memory_nodes', {'name': name, 'pool': 'cxl-mem',
                                         'capacity_mb': 1024})
    member = client.as_('member')
    lease = member.post('/v1/leases', {'memory_mb': 512,
                                       'pools': ['cxl-mem']}).json
    url = '/v1/leases/%s' % lease['uuid']
    assert member.post(url + '/bind', {'host': 'compute-1'}).status == 202
    bound = _wait(member, lease['uuid'], ['bound', 'bind_failed'])
    assert bound['status'] == 'bound', bound['fault']
    # The agent's answer is the attachment (simulated here: no region).
    attachment = client.get(url).json
    assert attachment['host'] == 'compute-1'
    assert member.post(url + '/unbind').status == 202
    assert _wait(member, lease['uuid'], ['reserved', 'error'])[
        'status'] == 'reserved'
    assert member.delete(url).status == 204
    _wait(member, lease['uuid'], ['released'])
    assert client.get('/v1/pools/cxl-mem').json['used'] == 0


def test_no_over_commit_and_never_given_unasked(client, cxl_pool,
                                                network, conductor):
    member = client.as_('member')
    first = member.post('/v1/leases', {'memory_mb': 2048,
                                       'pools': ['cxl-mem']}).json
    assert first['status'] == 'reserved'
    second = member.post('/v1/leases', {'memory_mb': 256,
                                        'pools': ['cxl-mem']}).json
    assert second['status'] == 'alloc_failed'
    assert 'cxl-mem has 0 MiB free' in second['fault']
    assert client.get('/v1/pools/cxl-mem').json['used'] == 2048
    # A lease that names no pool gets network memory only.
    plain = member.post('/v1/leases', {'memory_mb': 1024}).json
    assert plain['memory_pool_uuid'] == network['uuid']


def test_cxl_fabric_driver_info_checked(client, api_env):
    api_env.set_override('enabled_drivers', ['fake', 'cxl'], 'fabric')
    fabric_drivers._DRIVERS['cxl'] = cxl.CxlFabricDriver()
    try:
        for info, words in (
                ({'backend': 'redfish'}, "field 'driver_info/address'"),
                ({'backend': 'redfish', 'address': 'https://fm',
                  'username': 'u', 'password': 'p', 'chunk_mode': 'x'},
                 "field 'driver_info/chunk_mode'"),
                ({'devices': {}}, 'give the memory devices'),
                ({'devices': {'a': {'serial': 'zz', 'capacity_mb': 256,
                                    'hosts': ['h']}}}, 'devices/a/serial'),
                ({'devices': {'a': {'serial': '0x1', 'capacity_mb': 100,
                                    'hosts': ['h']}}},
                 'devices/a/capacity_mb'),
                ({'devices': {'a': {'serial': '0x1', 'capacity_mb': 256,
                                    'hosts': []}}}, 'devices/a/hosts'),
                ({'devices': {
                    'a': {'serial': '0x1', 'capacity_mb': 256,
                          'hosts': ['h']},
                    'b': {'serial': '0x01', 'capacity_mb': 256,
                          'hosts': ['h']}}}, 'device a has it too')):
            resp = client.post('/v1/fabrics', {'name': 'c', 'driver': 'cxl',
                                               'driver_info': info})
            assert resp.status == 400, (info, resp)
            assert words in resp.error['detail'], resp.error['detail']
    finally:
        fabric_drivers.reset()
        api_env.clear_override('enabled_drivers', 'fabric')


@pytest.fixture
def vmem_domain():
    """The MOCK libvirt domain of tests/unit/agent/compute_node/
    fake_virtio_mem.py, which the agent's virtio-mem attacher plugs into
    whatever instance it is asked for."""
    from tests.unit.agent.compute_node import fake_virtio_mem
    return fake_virtio_mem.FakeVmemDomain(unpluggable=True)


@pytest.fixture
def cxl_host(api_env, tmp_path, monkeypatch, vmem_domain):
    """A conductor, and the compute agent of compute-1 with its CXL side
    on the emulated kernel (the MOCK of tests/unit/agent/compute_node/
    fake_cxl.py) and its virtio-mem side on a MOCK libvirt domain,
    serving RPC on the fake transport."""
    from composable.agent.compute_node import cxl_memory
    from composable.agent import manager as agent_manager
    from composable.common import rpc
    from composable.conductor import manager as conductor_manager
    from composable import privsep
    from composable.privsep import cxl as priv_cxl
    from tests.unit.agent.compute_node import fake_cxl

    kernel = fake_cxl.FakeCxlKernel(
        tmp_path / 'host',
        devices=[('0x5a5a0001', 1024 * fake_cxl.MIB, True)],
        block_size=128 * fake_cxl.MIB)
    # Generous: the machine running the tests may be busy.
    api_env.set_override('rpc_response_timeout_bind', 60)
    privsep.sys_admin_pctxt.set_client_mode(False)
    monkeypatch.setattr(priv_cxl, 'ROOT', kernel.root)
    monkeypatch.setattr(priv_cxl, 'WRITER', kernel.write)
    monkeypatch.setattr(priv_cxl, 'BOUNDED_WRITER', kernel.bounded_write)
    memory = cxl_memory.CxlHostMemory(
        ops=priv_cxl, state_file=str(tmp_path / 'cxl.json'),
        offline_interval=0)
    from tests.unit.agent.compute_node import fake_virtio_mem
    agent = agent_manager.AgentManager(
        'compute-1', roles=['compute_node'], cxl_memory=memory,
        virtio_mem_attacher=fake_virtio_mem.attacher(vmem_domain))
    agent._start_cxl()
    conductor = conductor_manager.ConductorManager('test-host')
    servers = [rpc.get_server(rpc.CONDUCTOR_TOPIC, 'test-host', [conductor]),
               rpc.get_server(rpc.AGENT_TOPIC, 'compute-1', agent.endpoints)]
    conductor.start()
    for server in servers:
        server.start()
    # The tests of elastic leases run its resizer's passes themselves.
    kernel.conductor = conductor
    try:
        yield kernel
    finally:
        for server in servers:
            server.stop()
        for server in servers:
            server.wait()
        conductor.stop()
        privsep.sys_admin_pctxt.set_client_mode(True)
        api_env.set_override('rpc_response_timeout_bind', 5)


def _one_device_pool(client):
    """The cxl pool cxl-mem of one 1 GiB device (cmm0) on fabric cxl1."""
    assert client.post('/v1/pools', {'name': 'cxl-mem', 'kind': 'memory',
                                     'fabric': 'cxl1', 'medium': 'cxl'},
                       headers=V15).status == 201
    assert client.post('/v1/memory_nodes', {
        'name': 'cmm0', 'pool': 'cxl-mem', 'capacity_mb': 1024}).status == 201


def _bind_a_cxl_lease(client):
    """A cxl pool of one 1 GiB device, and a member's 256 MiB lease of it
    asked to bind to compute-1: (member client, lease, lease URL)."""
    _one_device_pool(client)
    member = client.as_('member')
    lease = member.post('/v1/leases', {'memory_mb': 256,
                                       'pools': ['cxl-mem']}).json
    url = '/v1/leases/%s' % lease['uuid']
    assert member.post(url + '/bind', {'host': 'compute-1'}).status == 202
    return member, lease, url


def test_bind_makes_a_numa_node_and_unbind_erases_it(client, cxl_fabric,
                                                     cxl_host):
    """API to conductor to agent to (emulated) kernel and back."""
    kernel = cxl_host
    member, lease, url = _bind_a_cxl_lease(client)
    bound = _wait(member, lease['uuid'], ['bound', 'bind_failed'])
    assert bound['status'] == 'bound', bound['fault']
    [region] = kernel.regions
    assert kernel.regions[region]['size'] == 256 << 20
    assert kernel.online_blocks() == sorted(kernel.blocks)
    with open(kernel.memory_of(region), 'r+b') as f:
        f.write(b'secret')
    assert member.post(url + '/unbind').status == 202
    assert _wait(member, lease['uuid'], ['reserved', 'error'])[
        'status'] == 'reserved'
    assert kernel.regions == {} and kernel.blocks == {}
    assert kernel.sanitized == ['mem0']
    assert kernel.read_media('mem0', 0, 6) == bytes(6)
    # Bound again, then pages the kernel cannot move: the unbind fails
    # and says why, and the host keeps its memory.
    assert member.post(url + '/bind', {'host': 'compute-1'}).status == 202
    assert _wait(member, lease['uuid'], ['bound', 'bind_failed'])[
        'status'] == 'bound'
    kernel.pinned.update(kernel.blocks)
    assert member.post(url + '/unbind').status == 202
    failed = _wait(member, lease['uuid'], ['reserved', 'error'],
                   timeout=60)
    assert failed['status'] == 'error'
    assert 'could not be offlined' in failed['fault']
    assert kernel.online_blocks() == sorted(kernel.blocks)
    kernel.pinned.clear()
    assert member.delete(url).status == 204
    _wait(member, lease['uuid'], ['released'])
    assert kernel.regions == {}


def test_a_host_restart_puts_the_lease_online_again_and_says_so(
        client, cxl_fabric, cxl_host, tmp_path):
    """The host restarts with a lease bound: its agent's next start makes
    the region again (on the emulated kernel, which now puts it on NUMA
    node 2), and the lease's action log and attachment say so."""
    from composable.agent.compute_node import cxl_memory
    from composable.agent import manager as agent_manager
    from composable.common import states
    from composable.db import api as db_api
    from composable.privsep import cxl as priv_cxl
    from tests.unit.conductor import harness as h_mod

    kernel = cxl_host
    member, lease, url = _bind_a_cxl_lease(client)
    assert _wait(member, lease['uuid'], ['bound', 'bind_failed'])[
        'status'] == 'bound'

    kernel.reboot()
    kernel.node = 2
    memory = cxl_memory.CxlHostMemory(
        ops=priv_cxl, state_file=str(tmp_path / 'cxl.json'),
        offline_interval=0)
    agent_manager.AgentManager('compute-1', roles=['compute_node'],
                               cxl_memory=memory)._start_cxl()
    assert len(kernel.regions) == 1 and kernel.online_blocks()

    def restores():
        return [a for a in member.get(url + '/actions').json['actions']
                if a['action'] == 'restore']

    deadline = time.time() + 30
    while not restores():
        assert time.time() < deadline, 'no restore action was noted'
        time.sleep(0.05)
    [action] = restores()
    assert action['result'] == 'success'
    assert 'device cmm0 as NUMA node 2' in action['message']
    row = db_api.lease_get(h_mod.admin(), lease['uuid'])
    [attachment] = db_api.attachment_list(h_mod.admin(), row.id,
                                          states.LIVE_ATTACHMENT_STATES)
    assert {d['numa_node'] for d in
            attachment.details['memory'].values()} == {2}
    assert member.delete(url).status == 204
    _wait(member, lease['uuid'], ['released'])
    assert kernel.regions == {}


def test_flavor_leases_of_cxl_memory_are_host_mode():
    import types

    from composable.conductor.nova import flavor_leases
    pool = types.SimpleNamespace(uuid='p', kind='memory', medium='cxl',
                                 resource_class='CUSTOM_COMPOSABLE_CXL_'
                                                'MEMORY_MB')
    values = flavor_leases._lease_values(
        pool, 512, 'instance', 'project', 'user',
        {'composable:attach_mode': 'guest'}, None)
    assert values['attach_mode'] == 'host'
    assert values['memory_mb'] == 512
    network = types.SimpleNamespace(uuid='n', kind='memory',
                                    medium='network',
                                    resource_class='CUSTOM_COMPOSABLE_'
                                                   'MEMORY_MB')
    assert flavor_leases._lease_values(
        network, 512, 'instance', 'project', 'user',
        {'composable:attach_mode': 'guest'}, None)['attach_mode'] == 'guest'


@pytest.fixture
def redfish_cxl(client, api_env, cxl_host):
    """A cxl pool on a CXL fabric manager (the project's Redfish emulator,
    profile cxl; its CXLMem0 is the device of the agent's emulated
    kernel): (emulator, emulated kernel)."""
    import copy

    from tests.functional.fabric import redfish_emulator as emu

    config = copy.deepcopy(emu.PROFILES['cxl'])
    # The device the emulated kernel has, by its serial.
    config['cxl']['devices'][0].update(gcxlid='00-00-00-00-5A-5A-00-01:0001',
                                       size_mb=1024)
    url, stop, emulator = emu.serve(config=config)
    api_env.set_override('enabled_drivers', ['fake', 'cxl'], 'fabric')
    fabric_drivers._DRIVERS['cxl'] = cxl.CxlFabricDriver()
    try:
        resp = client.post('/v1/fabrics', {
            'name': 'cxl-rf', 'driver': 'cxl', 'driver_info': {
                'backend': 'redfish', 'address': url, 'username': 'admin',
                'password': emu.DEFAULT_CONFIG['password'],
                # HTTP Basic: a request the emulator holds past the
                # conductor's wait still carries its credentials when it
                # is answered (a session would be closed by then).
                'auth_type': 'basic',
                'poll_interval': 0.05, 'timeout': 30}})
        assert resp.status == 201, resp
        assert emu.DEFAULT_CONFIG['password'] not in resp.text
        assert client.post('/v1/hosts', {
            'name': 'compute-1', 'fabric': 'cxl-rf'}).status == 201
        client.post('/v1/pools', {'name': 'cxl-mem', 'kind': 'memory',
                                  'fabric': 'cxl-rf', 'medium': 'cxl'},
                    headers=V15)
        resp = client.post('/v1/memory_nodes', {
            'name': 'CXLMem0.1', 'pool': 'cxl-mem', 'capacity_mb': 1024})
        assert resp.status == 201, resp
        yield emulator, cxl_host
    finally:
        stop()
        fabric_drivers.reset()
        api_env.clear_override('enabled_drivers', 'fabric')


def test_lease_on_a_redfish_cxl_fabric_end_to_end(client, redfish_cxl):
    """API to conductor to the fabric manager and the agent's (emulated)
    kernel: the bind makes and connects a chunk of the lease's size, the
    host onlines it; the unbind erases the region before the chunk goes
    back."""
    emulator, kernel = redfish_cxl
    member = client.as_('member')
    lease = member.post('/v1/leases', {'memory_mb': 512,
                                       'pools': ['cxl-mem']}).json
    lease_url = '/v1/leases/%s' % lease['uuid']
    assert member.post(lease_url + '/bind',
                       {'host': 'compute-1'}).status == 202
    bound = _wait(member, lease['uuid'], ['bound', 'bind_failed'],
                  timeout=60)
    assert bound['status'] == 'bound', bound['fault']
    chunks, connections = emulator.cxl_state()
    assert list(chunks['CXLMem0'].values()) == [512]
    assert ('compute-1', 'CXLMem0') in [c[:2]
                                        for c in connections.values()]
    [region] = kernel.regions
    assert kernel.regions[region]['size'] == 512 << 20
    with open(kernel.memory_of(region), 'r+b') as f:
        f.write(b'secret')
    assert member.post(lease_url + '/unbind').status == 202
    assert _wait(member, lease['uuid'], ['reserved', 'error'],
                 timeout=60)['status'] == 'reserved'
    # Erased on the host, then taken back on the fabric.
    assert kernel.regions == {}
    assert kernel.read_media('mem0', 0, 6) == bytes(6)
    chunks, connections = emulator.cxl_state()
    assert chunks['CXLMem0'] == {}
    assert not [c for c in connections.values() if c[1] == 'CXLMem0']
    assert member.delete(lease_url).status == 204
    _wait(member, lease['uuid'], ['released'])


def test_a_redfish_cxl_bind_the_fabric_refuses_or_answers_late(
        client, api_env, redfish_cxl):
    """The fabric's refusal is the lease's fault; a chunk made after the
    conductor stopped waiting is deleted with the lease."""
    from tests import waiting

    emulator, kernel = redfish_cxl
    member = client.as_('member')
    lease = member.post('/v1/leases', {'memory_mb': 256,
                                       'pools': ['cxl-mem']}).json
    lease_url = '/v1/leases/%s' % lease['uuid']
    emulator.refuse_cxl('chunk', 'The memory device is being sanitized.')
    assert member.post(lease_url + '/bind',
                       {'host': 'compute-1'}).status == 202
    failed = _wait(member, lease['uuid'], ['bound', 'bind_failed'],
                   timeout=60)
    assert failed['status'] == 'bind_failed'
    assert 'refused to make a chunk of 256 MiB on CXL memory device ' \
           'CXLMem0.1: The memory device is being sanitized.' in \
        failed['fault']
    assert kernel.regions == {}
    emulator.refuse_cxl('chunk', None)
    # Every try of the chunk's POST outlasts the fabric call.
    emulator.inject('delay', method='POST', path='/MemoryChunks',
                    seconds=6, count=5)
    api_env.set_override('operation_timeout', 2, 'fabric')
    try:
        assert member.post(lease_url + '/bind',
                           {'host': 'compute-1'}).status == 202
        failed = _wait(member, lease['uuid'], ['bound', 'bind_failed'],
                       timeout=60)
    finally:
        api_env.clear_override('operation_timeout', 'fabric')
    assert failed['status'] == 'bind_failed', failed
    waiting.wait_until(lambda: emulator.cxl_state()[0]['CXLMem0'], 60,
                       'the late chunk to land')
    assert kernel.regions == {}
    assert member.delete(lease_url).status == 204
    _wait(member, lease['uuid'], ['released'], timeout=60)
    assert emulator.cxl_state()[0]['CXLMem0'] == {}


# ------------------------------------------------------------ virtio-mem


def test_virtio_mem_mode_needs_api_1_6(client, cxl_pool, network,
                                       conductor):
    member = client.as_('member')
    body = {'memory_mb': 512, 'pools': ['cxl-mem'],
            'attach_mode': 'virtio-mem'}
    resp = member.post('/v1/leases', body, headers=V15)
    assert resp.status == 400, resp
    assert 'attach_mode' in resp.error['detail']
    assert member.get('/v1/leases').json['leases'] == []
    resp = member.post('/v1/leases', body, headers=V16)
    assert resp.status == 201, resp
    assert resp.json['attach_mode'] == 'virtio-mem'
    url = '/v1/leases/%s/bind' % resp.json['uuid']
    # Bind in virtio-mem mode: 1.6 too, and only with the server.
    resp = member.post(url, {'host': 'compute-1', 'server': SERVER,
                             'attach_mode': 'virtio-mem'}, headers=V15)
    assert resp.status == 400, resp
    resp = member.post(url, {'host': 'compute-1'}, headers=V16)
    assert resp.status == 400, resp
    assert 'attach_mode virtio-mem attaches to a server; give its UUID' \
        in resp.error['detail']


@pytest.mark.parametrize('body, words', [
    ({'memory_mb': 1024, 'pools': ['mem1']},
     'virtio-mem needs host memory (a CXL pool) to plug into the guest; '
     'pool mem1 holds network memory'),
    ({'memory_mb': 1024},
     'virtio-mem needs host memory (a CXL pool) to plug into the guest; '
     'name the CXL pool'),
    ({'device_count': 1, 'pools': ['gpu1']},
     'virtio-mem needs host memory (a CXL pool) to plug into the guest; '
     'the lease holds no memory'),
])
def test_virtio_mem_mode_refused_without_cxl_memory(
        client, cxl_pool, network, conductor, body, words):
    member = client.as_('member')
    resp = member.post('/v1/leases', dict(body, attach_mode='virtio-mem'),
                       headers=V16)
    assert resp.status == 400, resp
    assert words in resp.error['detail']


def test_virtio_mem_bind_of_network_memory_refused_by_the_rule(
        client, cxl_pool, network, conductor):
    """The conductor's rule, under the lease's reservation, refuses a
    bind in virtio-mem mode of a lease of a network pool."""
    member = client.as_('member')
    resp = member.post('/v1/leases', {'memory_mb': 1024,
                                      'pools': ['mem1']})
    assert resp.status == 201, resp
    lease = resp.json
    resp = member.post('/v1/leases/%s/bind' % lease['uuid'], {
        'host': 'compute-1', 'server': SERVER,
        'attach_mode': 'virtio-mem'}, headers=V16)
    assert resp.status == 400, resp
    assert ('virtio-mem needs host memory (a CXL pool) to plug into the '
            'guest; pool mem1 holds network memory' in
            resp.error['detail'])
    assert member.get('/v1/leases/%s' % lease['uuid']).json[
        'status'] == 'reserved'


def test_virtio_mem_bind_plugs_the_node_into_the_guest(
        client, cxl_fabric, network, cxl_host, vmem_domain):
    """API to conductor to agent: the region is made (emulated kernel),
    then its node goes into the (MOCK) domain; unbind empties the device
    before the region goes; a domain without <maxMemory> fails the bind
    and the region is given back."""
    kernel = cxl_host
    _one_device_pool(client)
    member = client.as_('member')
    lease = member.post('/v1/leases', {'memory_mb': 256, 'pools': ['cxl-mem'],
                                       'attach_mode': 'virtio-mem'},
                        headers=V16).json
    url = '/v1/leases/%s' % lease['uuid']
    resp = member.post(url + '/bind', {'host': 'compute-1', 'server': SERVER},
                       headers=V16)
    assert resp.status == 202, resp
    bound = _wait(member, lease['uuid'], ['bound', 'bind_failed'])
    assert bound['status'] == 'bound', bound['fault']
    assert bound['attach_mode'] == 'virtio-mem'
    assert bound['instance_uuid'] == SERVER
    [region] = kernel.regions
    [device] = vmem_domain.devices.values()
    assert device['xml'].findtext('source/nodemask') == str(kernel.node)
    assert device['requested'] == 256 * 1024
    assert member.post(url + '/unbind').status == 202
    assert _wait(member, lease['uuid'], ['reserved', 'error'])[
        'status'] == 'reserved'
    assert vmem_domain.devices == {}
    assert kernel.regions == {}
    # A domain that cannot take memory devices.
    vmem_domain.max_memory = False
    assert member.post(url + '/bind', {'host': 'compute-1',
                                       'server': SERVER},
                       headers=V16).status == 202
    failed = _wait(member, lease['uuid'], ['bound', 'bind_failed'])
    assert failed['status'] == 'bind_failed'
    assert 'has no <maxMemory slots=...>' in failed['fault']
    assert kernel.regions == {}
    assert member.delete(url).status == 204
    _wait(member, lease['uuid'], ['released'])


# ------------------------------------------------------- elastic (1.7)

V17 = {'OpenStack-API-Version': 'composable 1.7'}
ELASTIC = {'min_mb': 256, 'max_mb': 1024, 'observation_window': 60,
           'prediction_window': 60}


def test_elastic_cxl_leases_from_api_1_7_in_virtio_mem_mode(
        client, cxl_pool, network, conductor):
    member = client.as_('member')
    body = {'memory_mb': 512, 'pools': ['cxl-mem'],
            'attach_mode': 'virtio-mem', 'elastic': ELASTIC}
    # Before 1.7 the old refusal stays.
    resp = member.post('/v1/leases', body, headers=V16)
    assert resp.status == 400, resp
    assert ('leases of CXL memory (pool cxl-mem) have a fixed size before '
            'API version 1.7' in resp.error['detail'])
    assert member.get('/v1/leases').json['leases'] == []
    resp = member.post('/v1/leases', body, headers=V17)
    assert resp.status == 201, resp
    lease = resp.json
    assert lease['attach_mode'] == 'virtio-mem'
    assert lease['elastic']['min_mb'] == 256
    assert lease['elastic']['max_mb'] == 1024
    assert lease['status'] == 'reserved'
    assert sorted(e['size_mb'] for e in lease['extents']) == [256, 256]
    # Bound in another mode: refused by the conductor's rule.
    resp = member.post('/v1/leases/%s/bind' % lease['uuid'],
                       {'host': 'compute-1', 'attach_mode': 'host'},
                       headers=V17)
    assert resp.status == 400, resp
    assert ('elastic CXL leases resize through virtio-mem: give '
            'attach_mode virtio-mem' in resp.error['detail'])
    assert member.get('/v1/leases/%s' % lease['uuid']).json[
        'status'] == 'reserved'


@pytest.mark.parametrize('body, words', [
    ({}, "Invalid input for field 'attach_mode': elastic CXL leases "
         "resize through virtio-mem: give attach_mode virtio-mem (the "
         "lease is then bound to a server), not host (pool cxl-mem)"),
    ({'attach_mode': 'virtio-mem',
      'elastic': dict(ELASTIC, min_mb=300)},
     "Invalid input for field 'elastic/min_mb': pool cxl-mem gives CXL "
     "memory in whole chunks of 256 MiB; 300 is not a multiple of it "
     "(256 or 512)"),
    ({'attach_mode': 'virtio-mem',
      'elastic': dict(ELASTIC, max_mb=1000)},
     "Invalid input for field 'elastic/max_mb': pool cxl-mem gives CXL "
     "memory in whole chunks of 256 MiB; 1000 is not a multiple of it "
     "(768 or 1024)"),
])
def test_elastic_cxl_leases_refused(client, cxl_pool, network, conductor,
                                    body, words):
    member = client.as_('member')
    request = dict({'memory_mb': 512, 'pools': ['cxl-mem'],
                    'elastic': ELASTIC}, **body)
    resp = member.post('/v1/leases', request, headers=V17)
    assert resp.status == 400, resp
    assert words in resp.error['detail']
    assert member.get('/v1/leases').json['leases'] == []


def test_elastic_cxl_leases_refused_on_a_composing_fabric(
        client, api_env, conductor):
    api_env.set_override('enabled_drivers', ['fake', 'cxl'], 'fabric')
    fabric_drivers._DRIVERS['cxl'] = cxl.CxlFabricDriver()
    try:
        resp = client.post('/v1/fabrics', {
            'name': 'cxl-rf', 'driver': 'cxl', 'driver_info': {
                'backend': 'redfish', 'address': 'https://fm.example.net',
                'username': 'admin', 'password': 'not-used-here'}})
        assert resp.status == 201, resp
        resp = client.post('/v1/pools', {'name': 'cxl-rf-mem',
                                         'kind': 'memory',
                                         'fabric': 'cxl-rf',
                                         'medium': 'cxl'}, headers=V15)
        assert resp.status == 201, resp
        member = client.as_('member')
        resp = member.post('/v1/leases', {
            'memory_mb': 512, 'pools': ['cxl-rf-mem'],
            'attach_mode': 'virtio-mem', 'elastic': ELASTIC}, headers=V17)
        assert resp.status == 400, resp
        detail = resp.error['detail']
        for words in ("Invalid input for field 'elastic': pool cxl-rf-mem "
                      "is on fabric cxl-rf, whose CXL back end redfish "
                      "composes memory",
                      'makes one chunk per lease and device',
                      'a Redfish MemoryChunk does not change size',
                      'dynamic capacity devices are not supported by '
                      'Linux yet',
                      'Use a pool of a fabric with back end local'):
            assert words in detail, detail
        assert member.get('/v1/leases').json['leases'] == []
    finally:
        fabric_drivers.reset()
        api_env.clear_override('enabled_drivers', 'fabric')


def _usage(lease_uuid, used_mb, size_mb, now, count=6, interval=10):
    stored, _ = db_api.usage_record(context.get_admin_context(), 'compute-1', [
        {'lease_uuid': lease_uuid, 'used_mb': used_mb, 'size_mb': size_mb,
         'taken_at': now - datetime.timedelta(
             seconds=(count - 1 - i) * interval)}
        for i in range(count)])
    assert stored == count


def _resize_pass(conductor, now):
    for future in conductor.resizer.run(context.get_admin_context(),
                                        now=now):
        future.result(timeout=60)


def test_an_elastic_virtio_mem_lease_resizes_end_to_end(
        client, api_env, cxl_fabric, network, cxl_host, vmem_domain):
    """API 1.7, the conductor's resizer and the real compute agent (its
    CXL side on the emulated kernel, its virtio-mem side on the MOCK
    domain): the device is plugged with the policy's max_mb of address
    space; a busy guest gets three more chunks as one more region and
    the device's requested size follows; an idle one gives them back,
    the guest first, then the region."""
    kernel = cxl_host
    _one_device_pool(client)
    member = client.as_('member')
    resp = member.post('/v1/leases', {
        'memory_mb': 256, 'pools': ['cxl-mem'],
        'attach_mode': 'virtio-mem', 'elastic': ELASTIC}, headers=V17)
    assert resp.status == 201, resp
    lease = resp.json
    url = '/v1/leases/%s' % lease['uuid']
    assert member.post(url + '/bind', {'host': 'compute-1',
                                       'server': SERVER},
                       headers=V17).status == 202
    bound = _wait(member, lease['uuid'], ['bound', 'bind_failed'])
    assert bound['status'] == 'bound', bound['fault']
    [device] = vmem_domain.devices.values()
    assert int(device['xml'].findtext('target/size')) == 1024 * 1024
    assert device['requested'] == 256 * 1024
    assert len(kernel.regions) == 1

    now = datetime.datetime.utcnow()
    _usage(lease['uuid'], 900, 256, now)
    _resize_pass(kernel.conductor, now)
    grown = member.get(url, headers=V17).json
    assert grown['memory_mb'] == 1024, grown
    assert device['requested'] == 1024 * 1024
    # One more region: the three chunks of the grow, on the one device.
    assert len(kernel.regions) == 2
    assert sorted(r['size'] for r in kernel.regions.values()) == [
        256 << 20, 768 << 20]

    later = now + datetime.timedelta(seconds=120)
    _usage(lease['uuid'], 10, 1024, later, count=10)
    # Low from the first pass on; shrunk on the next one.
    api_env.set_override('shrink_hysteresis', 0, 'elastic')
    try:
        _resize_pass(kernel.conductor, later)
        _resize_pass(kernel.conductor,
                     later + datetime.timedelta(seconds=1))
    finally:
        api_env.clear_override('shrink_hysteresis', 'elastic')
    shrunk = member.get(url, headers=V17).json
    assert shrunk['memory_mb'] == 256, [
        (a['action'], a['result'], a.get('message'))
        for a in member.get(url + '/actions').json['actions']]
    assert device['requested'] == 256 * 1024
    assert device['current'] <= 256 * 1024
    assert [r['size'] for r in kernel.regions.values()] == [256 << 20]
    actions = [a for a in member.get(url + '/actions').json['actions']
               if a['action'] == 'resize']
    assert [a['result'] for a in actions] == ['success', 'success'], actions

    assert member.post(url + '/unbind').status == 202
    assert _wait(member, lease['uuid'], ['reserved', 'error'])[
        'status'] == 'reserved'
    assert kernel.regions == {}
