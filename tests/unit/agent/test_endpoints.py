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

"""The agent's RPC endpoints (composable.agent.endpoints), one per role,
reached the way the conductor reaches them: the conductor's AgentAPI
client over oslo.messaging's in-process transport, to the RPC server the
agent's entry point builds from ``AgentManager.endpoints``. The pieces
behind the endpoints are recording stand-ins, named as such."""

import inspect
import threading

from oslo_messaging import conffixture
import pytest

from composable.agent.compute_node import backends
from composable.agent import endpoints
from composable.agent import manager
from composable.agent import rpcapi
from composable.common import context as ctx_mod
from composable.common import rpc
from composable.common import service
from composable import conf

CONF = conf.CONF
NODE = 'node-1'
LEASE = {'uuid': 'lease-1'}
EXTENT = {'uuid': 'e1', 'index': 0, 'size_mb': 1024, 'lease_uuid': 'lease-1',
          'target_iqn': 'iqn.x:e1', 'lun': 1, 'portal': '10.0.0.5:3260',
          'chap_username': 'u', 'chap_secret': 'very-secret-value'}


class RecordingExporter(object):
    """Stand-in for a memory exporter (tgt/lio run in the functional
    tests): records what it is asked."""

    def __init__(self):
        self.calls = []

    def export(self, extent, initiator_iqn, chap_username, chap_secret):
        self.calls.append(('export', extent['uuid'], initiator_iqn))
        return {'target_iqn': 'iqn.x:' + extent['uuid'], 'lun': 1}

    def unexport(self, extent):
        self.calls.append(('unexport', extent['uuid']))

    def scrub(self, extent):
        self.calls.append(('scrub', extent['uuid']))

    def exported(self):
        return ['e1']


class RecordingHostSwap(object):
    """Stand-in for HostSwap (iSCSI login and swapon need a kernel
    initiator): records the extents."""

    def __init__(self):
        self.calls = []

    def attach(self, extents, initiator):
        self.calls.append(('attach', [e['uuid'] for e in extents],
                           initiator))
        return {e['uuid']: {'mode': 'host', 'swap_device': '/dev/sdz'}
                for e in extents}

    def detach(self, extents):
        self.calls.append(('detach', [e['uuid'] for e in extents]))


@pytest.fixture
def transport():
    messaging = conffixture.ConfFixture(CONF, transport_url='fake:/')
    messaging.setUp()
    CONF.set_override('rpc_response_timeout_bind', 30)
    rpc.cleanup()
    rpc.init(CONF)
    try:
        yield
    finally:
        rpc.cleanup()
        CONF.clear_override('rpc_response_timeout_bind')
        messaging.cleanUp()


def _serve(agent, name=NODE):
    # What composable-agent serves (composable/cmd/agent.py).
    server = service.RPCService(rpc.AGENT_TOPIC, name, agent.endpoints)
    server.start()
    return server


@pytest.fixture
def served(transport):
    servers = []

    def serve(agent, name=NODE):
        servers.append(_serve(agent, name))
        return rpcapi.AgentAPI()
    yield serve
    for server in servers:
        server.stop()
    for server in servers:
        server.wait()


def _ctx():
    return ctx_mod.get_admin_context()


def test_the_endpoints_serve_exactly_the_agent_rpc_api():
    """One endpoint per role; together they answer every method the
    conductor's client sends, under the same version, and nothing else
    (the manager's start, stop and reports are not reachable)."""
    agent = manager.AgentManager(NODE, ['memory_node', 'compute_node'])
    memory, compute = agent.endpoints
    assert isinstance(memory, endpoints.MemoryNodeEndpoint)
    assert isinstance(compute, endpoints.ComputeNodeEndpoint)
    sent = {name for name, _ in inspect.getmembers(
        rpcapi.AgentAPI, inspect.isfunction) if not name.startswith('_')}

    def served(endpoint):
        return {name for name, _ in inspect.getmembers(
            endpoint, inspect.ismethod) if not name.startswith('_')}
    assert served(memory) == {'export_extent', 'unexport_extent',
                              'scrub_extent', 'get_memory_report'}
    assert served(memory) | served(compute) == sent
    assert not served(memory) & served(compute)
    for endpoint in agent.endpoints:
        assert endpoint.target.version == '1.4'
        assert endpoint.target.namespace is None
    assert not hasattr(agent, 'target')


def test_memory_endpoint_delegates_to_the_exporter(served):
    exporter = RecordingExporter()
    api = served(manager.AgentManager(NODE, ['memory_node'],
                                      exporter=exporter))
    assert api.export_extent(_ctx(), NODE, EXTENT, 'iqn.x:host', 'u',
                             'very-secret-value') == {
        'target_iqn': 'iqn.x:e1', 'lun': 1}
    api.unexport_extent(_ctx(), NODE, EXTENT)
    api.scrub_extent(_ctx(), NODE, EXTENT)
    assert exporter.calls == [('export', 'e1', 'iqn.x:host'),
                              ('unexport', 'e1'), ('scrub', 'e1')]
    report = api.get_memory_report(_ctx(), NODE)
    assert report['node'] == NODE
    assert report['exported_extent_uuids'] == ['e1']


def test_compute_endpoint_delegates_to_the_configured_back_ends(served):
    swap = RecordingHostSwap()
    agent = manager.AgentManager(NODE, ['compute_node'], host_swap=swap,
                                 guest_attacher=object())
    assert isinstance(agent.parts.memory, backends.IscsiMemory)
    api = served(agent)
    CONF.set_override('initiator_iqn', 'iqn.x:node-1', 'compute_node')
    try:
        details = api.attach_memory(_ctx(), NODE, LEASE, [EXTENT], 'host')
        assert details == {'e1': {'mode': 'host',
                                  'swap_device': '/dev/sdz'}}
        assert agent.memory_attachments == {'lease-1': details}
        api.detach_memory(_ctx(), NODE, LEASE, [EXTENT], 'host')
    finally:
        CONF.clear_override('initiator_iqn', 'compute_node')
    assert swap.calls == [('attach', ['e1'], 'iqn.x:node-1'),
                          ('detach', ['e1'])]
    assert agent.memory_attachments == {}
    # The devices of this node are simulated (no host_pci, noop backend):
    # the 1.1 and 1.2 calls reach the same endpoint.
    assert api.set_sriov_vfs(_ctx(), NODE, '0000:41:00.0', 2) == {
        'pf_address': '0000:41:00.0', 'vfs': [], 'simulated': True}
    vf = {'uuid': 'vf-1', 'pci_address': '0000:41:00.2',
          'sriov': {'pf_address': '0000:41:00.0'}}
    assert api.attach_devices(_ctx(), NODE, LEASE, [vf]) == {
        'vf-1': '0000:41:00.2'}
    api.detach_devices(_ctx(), NODE, LEASE, [vf])
    assert agent.device_attachments == {}


def test_a_role_the_node_lacks_is_refused_over_rpc(served):
    exporter = RecordingExporter()
    api = served(manager.AgentManager(NODE, ['memory_node'],
                                      exporter=exporter))
    with pytest.raises(Exception) as info:
        api.attach_memory(_ctx(), NODE, LEASE, [EXTENT], 'host')
    assert ('composable-agent on node-1 does not have the compute_node '
            'role' in str(info.value))
    # The refused call left the memory side alone.
    assert exporter.calls == []


def test_the_push_of_an_instances_leases_reaches_a_memory_node(served):
    """instance_leases_changed is a fanout to every agent: a memory node
    takes it without a refusal (there is no hook server to tell)."""
    agent = manager.AgentManager(NODE, ['memory_node'])
    served(agent)
    agent.compute.instance_leases_changed(_ctx(), 'i-1', ['lease-1'])
    assert agent.hook_server is None


@pytest.mark.parametrize('exporter,pci,cxl,expect', [
    ('noop', '', '', (backends.SimulatedMemory, backends.SimulatedDevices,
                      backends.SimulatedCxlMemory)),
    ('tgt', '', '', (backends.IscsiMemory, backends.HostDevices,
                     backends.CxlMemory)),
    ('noop', 'sysfs', '', (backends.SimulatedMemory, backends.HostDevices,
                           backends.SimulatedCxlMemory)),
    ('tgt', 'noop', 'noop', (backends.IscsiMemory,
                             backends.SimulatedDevices,
                             backends.SimulatedCxlMemory)),
])
def test_the_simulator_is_a_back_end_chosen_by_configuration(
        exporter, pci, cxl, expect):
    CONF.set_override('memory_exporter', exporter, 'agent')
    CONF.set_override('pci_backend', pci or None, 'compute_node')
    CONF.set_override('cxl_backend', cxl or None, 'compute_node')
    try:
        agent = manager.AgentManager(NODE, ['compute_node'])
    finally:
        CONF.clear_override('memory_exporter', 'agent')
        CONF.clear_override('pci_backend', 'compute_node')
        CONF.clear_override('cxl_backend', 'compute_node')
    parts = agent.parts
    assert (type(parts.memory), type(parts.devices),
            type(parts.cxl)) == expect
    assert agent.simulate == expect[0].simulated
    assert agent.simulate_devices == expect[1].simulated
    # Choosing a real back end makes none of its workers yet: a node
    # loads libvirt and sysfs only when it first attaches.
    assert (parts._guest, parts._devices, parts._host_pci,
            parts._connection) == (None, None, None, None)


def _made_in_a_thread(make):
    # A worker that makes the workers it needs must not wait for itself:
    # a deadlock fails the test instead of hanging it.
    made = []
    thread = threading.Thread(target=lambda: made.append(make()),
                              daemon=True)
    thread.start()
    thread.join(60)
    assert not thread.is_alive(), 'making the worker deadlocked'
    return made[0]


def test_the_attachers_share_the_one_libvirt_connection():
    agent = manager.AgentManager(NODE, ['compute_node'], simulate=False)
    # The tuner first: it makes the guest attacher, which makes the
    # connection, each under the parts' lock.
    tuner = _made_in_a_thread(lambda: agent.memory_tuner)
    assert tuner is agent.memory_tuner
    connection = agent.parts.connection
    assert agent.guest_attacher.connection is connection
    device_attacher = _made_in_a_thread(lambda: agent.device_attacher)
    assert device_attacher.connection is connection
    # Made once: libvirt is not opened by making them.
    assert connection.opened == 0


class RecordingClient(object):
    """Stand-in for the oslo.messaging RPC client: records the version
    each call is pinned to and its arguments."""

    def __init__(self):
        self.calls = []

    def prepare(self, **kwargs):
        client = self

        class Prepared(object):
            def call(self, context, method, **args):
                client.calls.append((kwargs.get('version'), method, args))
        return Prepared()


@pytest.mark.parametrize('method', ['attach_memory', 'detach_memory'])
def test_part_of_a_virtio_mem_lease_needs_agent_1_4(method):
    api = rpcapi.AgentAPI.__new__(rpcapi.AgentAPI)
    api.client = RecordingClient()
    call = getattr(api, method)
    call(_ctx(), NODE, LEASE, [EXTENT], 'virtio-mem', 'inst-1',
         partial=True)
    call(_ctx(), NODE, LEASE, [EXTENT], 'virtio-mem', 'inst-1')
    call(_ctx(), NODE, LEASE, [EXTENT], 'host')
    (v1, m1, a1), (v2, _, a2), (v3, _, a3) = api.client.calls
    assert (v1, m1, a1['partial']) == ('1.4', method, True)
    # Not sent unless set: an agent before 1.4 takes the call.
    assert (v2, v3) == ('1.3', None)
    assert 'partial' not in a2 and 'partial' not in a3


def test_a_virtio_mem_lease_grows_and_shrinks_over_rpc(served):
    """Simulated CXL memory: the 1.4 calls reach the endpoint, which
    answers the new chunk's details only and keeps the others."""
    CONF.set_override('cxl_backend', 'noop', 'compute_node')
    try:
        agent = manager.AgentManager(NODE, ['compute_node'])
        api = served(agent)
        chunks = [{'uuid': 'c%d' % i, 'size_mb': 256, 'medium': 'cxl',
                   'device': 'cmm0'} for i in range(3)]
        lease = {'uuid': 'lease-1', 'max_mb': 1024}
        api.attach_memory(_ctx(), NODE, lease, chunks[:2], 'virtio-mem',
                          'inst-1')
        grown = api.attach_memory(_ctx(), NODE, lease, chunks[2:],
                                  'virtio-mem', 'inst-1', partial=True)
        assert list(grown) == ['c2']
        assert grown['c2']['mode'] == 'virtio-mem'
        assert sorted(agent.memory_attachments['lease-1']) == ['c0', 'c1',
                                                               'c2']
        api.detach_memory(_ctx(), NODE, lease, chunks[1:], 'virtio-mem',
                          'inst-1', partial=True)
        assert sorted(agent.memory_attachments['lease-1']) == ['c0']
        api.detach_memory(_ctx(), NODE, lease, chunks[:1], 'virtio-mem',
                          'inst-1')
        assert agent.memory_attachments == {}
    finally:
        CONF.clear_override('cxl_backend', 'compute_node')
