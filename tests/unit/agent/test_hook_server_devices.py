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

"""Leased devices and the libvirt hook: plugged into the guest after
``started``, re-applied at every start, nothing touched while libvirtd
holds the domain, refusals of live migration. A real AgentManager,
HookServer and GuestDeviceAttacher; the guest is the VFIO stand-in of
tests/unit/agent/compute_node/fake_vfio.py (VFIO cannot run on this machine),
the conductor the recording one of test_hook_server."""

import logging

import pytest

from composable.agent.compute_node import backends
from composable.agent.compute_node import hostdev
from composable.agent import hook_server
from composable.agent import manager as agent_manager
from composable.common import context as ctx_mod
from composable.common import exception
from composable.common import states
from tests.unit.agent.compute_node import fake_vfio
from tests.unit.agent import test_hook_server as base

INSTANCE = base.INSTANCE
LEASE = base.LEASE
HOST = base.HOST
GPU_A = '7e1f0d2c-3b4a-4c5d-8e6f-0a1b2c3d4e01'
GPU_B = '7e1f0d2c-3b4a-4c5d-8e6f-0a1b2c3d4e02'
ADDRESSES = {GPU_A: '0000:41:00.0', GPU_B: '0000:42:00.0'}


def _lease():
    return {'uuid': LEASE, 'attach_mode': 'host', 'instance_uuid': INSTANCE,
            'memory_mb': 0, 'device_count': 2}


def _into_guest(agent, lease, addresses):
    """What attach_devices does once the host bound the functions."""
    agent.parts.devices.into_guest(lease, addresses, agent.hook_server)


def _out_of_guest(agent, lease, devices):
    """What detach_devices does before the host releases them."""
    agent.parts.devices.out_of_guest(lease, devices, agent.hook_server)


def _summary(**kwargs):
    summary = base._summary(attach_mode='host', memory_mb=0, extents=[],
                            device_count=2, devices=[GPU_A, GPU_B])
    summary.update(kwargs)
    return summary


@pytest.fixture
def vfio():
    return fake_vfio.VfioStandInConnection()


class RecordingHostPci(object):
    """The host side (composable.agent.compute_node.host_pci, tested on
    its own): binds a function to vfio-pci at the address the fabric
    gave, and records the calls."""

    def __init__(self):
        self.calls = []

    def attach(self, lease, devices):
        self.calls.append(('attach', [d['uuid'] for d in devices]))
        return {d['uuid']: d['pci_address'] for d in devices}

    def detach(self, lease, devices):
        self.calls.append(('detach', [d['uuid'] for d in devices]))


@pytest.fixture
def agent(vfio):
    devices = hostdev.GuestDeviceAttacher(
        uri='test:///', connect=vfio.open, attach_timeout=10,
        detach_timeout=10, detach_attempts=2)
    return agent_manager.AgentManager(HOST, ['compute_node'],
                                      guest_attacher=object(),
                                      host_swap=object(), simulate=False,
                                      host_pci=RecordingHostPci(),
                                      device_attacher=devices)


@pytest.fixture
def conductor():
    conductor = base.FakeConductor()
    conductor.prepare_result = {'ok': True, 'message': '',
                                'leases': [_summary()]}
    conductor.release_result = {'ok': True, 'message': '',
                                'leases': [_summary(status='reserved',
                                                    host=None)]}
    return conductor


@pytest.fixture
def server(agent, conductor, tmp_path, monkeypatch):
    monkeypatch.setattr(hook_server, 'ATTACH_RETRY_DELAY', 0.01)
    monkeypatch.setattr(hook_server, 'FIRST_LOAD_WAIT', 0.01)
    srv = hook_server.HookServer(agent.parts, path=str(tmp_path / 'hook.sock'),
                                 group='', conductor=conductor,
                                 refresh_interval=0)
    agent.hook_server = srv
    conductor.mapping = {INSTANCE: [LEASE]}
    srv.refresh()
    yield srv
    srv.stop()


def _no_domain_calls(vfio):
    def refuse(uuid):
        raise AssertionError('libvirt domain call while the hook holds '
                             'the domain')
    vfio.lookupByUUIDString = refuse


def _allow_domain_calls(vfio):
    del vfio.lookupByUUIDString


def _bind_flow(agent):
    """What the bind flow does on this host while the prepare hook waits,
    once the host side bound the functions to vfio-pci."""
    return lambda: _into_guest(agent, _lease(), ADDRESSES)


def _unbind_flow(agent):
    return lambda: _out_of_guest(agent, _lease(), [{'uuid': GPU_A},
                                                   {'uuid': GPU_B}])


def _start(server, conductor, agent, vfio, guest=None):
    conductor.on_prepare = _bind_flow(agent)
    _no_domain_calls(vfio)
    assert server.handle(base._request('prepare'))['ok']
    _allow_domain_calls(vfio)
    domain = vfio.domains.get(INSTANCE) or vfio.add(
        guest or fake_vfio.VfioStandInDomain(INSTANCE))
    reply = server.handle(base._request('started'))
    assert reply['ok']
    base._join(server)
    return domain


def test_devices_go_in_after_started_and_at_every_start(server, conductor,
                                                        agent, vfio):
    domain = _start(server, conductor, agent, vfio)
    assert sorted(domain.aliases()) == sorted(
        hostdev.device_alias(u) for u in ADDRESSES)
    # Stop: the unbind flow's detach arrives while libvirtd holds the
    # domain; QEMU is gone, no libvirt call is made.
    conductor.on_release = _unbind_flow(agent)
    _no_domain_calls(vfio)
    assert server.handle(base._request('stopped'))['ok']
    _allow_domain_calls(vfio)
    assert domain.detach_calls == []
    # Nova regenerates the domain at the next start: a new QEMU without
    # the devices; the hook path plugs them again.
    vfio.domains.pop(INSTANCE)
    again = _start(server, conductor, agent, vfio)
    assert again is not domain
    assert sorted(again.aliases()) == sorted(
        hostdev.device_alias(u) for u in ADDRESSES)
    assert len(again.attach_calls) == 2


def test_reapplying_to_a_guest_that_kept_them_is_idempotent(
        server, conductor, agent, vfio):
    domain = _start(server, conductor, agent, vfio)
    _start(server, conductor, agent, vfio)
    assert len(domain.attach_calls) == 2
    assert len(domain.aliases()) == 2


def test_no_free_slot_unbinds_the_lease_with_a_fault(server, conductor,
                                                     agent, vfio):
    guest = fake_vfio.VfioStandInDomain(INSTANCE, free_slots=1)
    domain = _start(server, conductor, agent, vfio, guest=guest)
    # No retry of what cannot work; the plugged half was taken out.
    assert len(domain.attach_calls) == 2
    domain.wait_timers()
    assert domain.aliases() == []
    [(_, _, kwargs)] = [c for c in conductor.calls
                        if c[0] == 'release_instance']
    assert kwargs['leases'] == [LEASE]
    assert 'no free PCIe hot-plug slot' in kwargs['fault']
    assert 'num_pcie_ports' in kwargs['fault']
    assert INSTANCE in kwargs['fault'] and HOST in kwargs['fault']


def test_a_stop_before_started_drops_the_devices(server, conductor, agent,
                                                 vfio):
    conductor.on_prepare = _bind_flow(agent)
    server.handle(base._request('prepare'))
    server.handle(base._request('stopped'))
    domain = vfio.add(fake_vfio.VfioStandInDomain(INSTANCE))
    server.handle(base._request('started'))
    base._join(server)
    assert domain.attach_calls == []


def test_hot_add_and_remove_on_a_running_server(server, agent, vfio):
    domain = vfio.add(fake_vfio.VfioStandInDomain(INSTANCE))
    _into_guest(agent, _lease(), ADDRESSES)
    assert len(domain.aliases()) == 2
    _out_of_guest(agent, _lease(), [{'uuid': GPU_A}, {'uuid': GPU_B}])
    assert domain.aliases() == []


def test_guest_detach_comes_before_the_host_releases(server, agent, vfio):
    """detach_devices: the guest lets go first; a guest that does not
    keeps the function on the host (nothing pulled from under it)."""
    domain = vfio.add(fake_vfio.VfioStandInDomain(INSTANCE))
    devices = [{'uuid': u, 'pci_address': a} for u, a in ADDRESSES.items()]
    ctx = ctx_mod.get_admin_context()
    agent.compute.attach_devices(ctx, _lease(), devices)
    assert len(domain.aliases()) == 2
    domain.guest[hostdev.device_alias(GPU_B)] = fake_vfio.IGNORES
    agent.device_attacher.detach_timeout = 0.2
    with pytest.raises(exception.DriverError) as info:
        agent.compute.detach_devices(ctx, _lease(), devices)
    assert GPU_B in info.value.message
    # The host did not release anything.
    assert [c[0] for c in agent.host_pci.calls] == ['attach']
    assert agent.device_attachments[LEASE] == ADDRESSES
    domain.guest.clear()
    agent.compute.detach_devices(ctx, _lease(), devices)
    assert domain.aliases() == []
    assert [c[0] for c in agent.host_pci.calls] == ['attach', 'detach']
    assert agent.device_attachments == {}


def test_stopped_or_deleted_guest_has_nothing_to_detach(server, agent,
                                                        vfio):
    devices = [{'uuid': GPU_A}, {'uuid': GPU_B}]
    # Deleted: no domain at all.
    _out_of_guest(agent, _lease(), devices)
    domain = vfio.add(fake_vfio.VfioStandInDomain(INSTANCE))
    domain.active = False
    _out_of_guest(agent, _lease(), devices)
    assert domain.detach_calls == []


def test_reconnect_binds_again_devices_the_guest_lost(server, conductor,
                                                      vfio):
    vfio.add(fake_vfio.VfioStandInDomain(INSTANCE))
    conductor.status = [_summary()]
    assert server.handle(base._request('reconnect'))['ok']
    base._join(server)
    assert conductor.names() == ['instance_status', 'release_instance',
                                 'prepare_instance']
    assert conductor.calls[-1][2]['leases'] == [LEASE]


def test_reconnect_leaves_a_guest_with_its_devices_alone(server, conductor,
                                                         agent, vfio):
    vfio.add(fake_vfio.VfioStandInDomain(INSTANCE))
    _into_guest(agent, _lease(), ADDRESSES)
    conductor.status = [_summary()]
    server.handle(base._request('reconnect'))
    base._join(server)
    assert conductor.names() == ['instance_status']


# ------------------------------------------------------- live migration

@pytest.mark.parametrize('status', sorted(states.HOLDS_CAPACITY))
def test_live_migration_refused_in_every_holding_state(server, conductor,
                                                       status):
    conductor.status = [_summary(status=status)]
    reply = server.handle(base._request('migrate'))
    assert reply['ok'] is False and reply['abort'] is True
    assert 'passed through' in reply['message']
    assert LEASE in reply['message']


def test_live_migration_refused_for_a_lease_this_host_does_not_reach(
        server, conductor):
    # The lease's pool is on another fabric: not in this host's cache.
    conductor.mapping = {}
    server.refresh()
    conductor.status = [_summary()]
    reply = server.handle(base._request('migrate'))
    assert reply['abort'] is True
    assert conductor.names() == ['instance_status']


class _NoGuest(object):
    def __getattr__(self, name):
        raise AssertionError('a simulated compute side touched a guest')


def test_simulated_compute_side_touches_no_guest(caplog):
    caplog.set_level(logging.DEBUG)
    agent = agent_manager.AgentManager(HOST, ['compute_node'],
                                       device_attacher=_NoGuest())
    assert agent.simulate
    devices = [{'uuid': GPU_A, 'pci_address': ADDRESSES[GPU_A]}]
    assert agent.compute.attach_devices(None, _lease(), devices) == {
        GPU_A: ADDRESSES[GPU_A]}
    assert 'would hot-plug device(s) %s' % GPU_A in caplog.text
    agent.compute.detach_devices(None, _lease(), devices)
    assert agent.device_attachments == {}


def test_an_unbind_during_the_started_plug_wins(server, conductor, agent,
                                                vfio, monkeypatch):
    """The unbind's detach and the started thread's plug race: the plug
    is asked under the domain's lock whether it is still wanted."""
    conductor.on_prepare = _bind_flow(agent)
    server.handle(base._request('prepare'))
    domain = vfio.add(fake_vfio.VfioStandInDomain(INSTANCE))
    held = []
    monkeypatch.setattr(server, '_spawn',
                        lambda name, target, *args: held.append(
                            (target, args)))
    assert server.handle(base._request('started'))['ok']
    [(plug, args)] = held
    # The unbind arrives before the thread plugs anything.
    _out_of_guest(agent, _lease(), [{'uuid': GPU_A}, {'uuid': GPU_B}])
    plug(*args)
    assert domain.attach_calls == []
    assert 'release_instance' not in conductor.names()
    assert server._plugging == {}


def test_simulated_devices_are_not_looked_for_in_the_guest(server,
                                                           conductor, agent,
                                                           vfio,
                                                           monkeypatch):
    """Real guest-mode memory, simulated devices: a device lease is not
    bound again for lacking a hostdev it never had."""
    monkeypatch.setattr(agent.parts, 'devices',
                        backends.SimulatedDevices(HOST))
    vfio.add(fake_vfio.VfioStandInDomain(INSTANCE))
    conductor.status = [_summary()]
    server.handle(base._request('reconnect'))
    base._join(server)
    assert conductor.names() == ['instance_status']
