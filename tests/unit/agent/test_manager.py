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

import logging

import pytest

from composable.agent import manager
from composable.common import exception
from composable.memory.exporters import noop

EXTENT = {'uuid': 'e1', 'index': 0, 'size_mb': 1024, 'lease_uuid': 'l1',
          'memory_node': 'memory-0', 'portal': '10.0.0.5:3260',
          'transport': 'tcp'}
LEASE = {'uuid': 'l1'}


def test_memory_node_exports_with_noop(caplog):
    caplog.set_level(logging.DEBUG)
    agent = manager.AgentManager('memory-0', ['memory_node'])
    assert isinstance(agent.exporter, noop.NoopExporter)
    result = agent.memory.export_extent(None, EXTENT, 'iqn.x:host', 'user',
                                        'very-secret-value')
    assert result['target_iqn'].endswith('e1')
    assert result['portal'] == '10.0.0.5:3260'
    assert result == agent.memory.export_extent(None, EXTENT, 'iqn.x:host',
                                                'user', 'very-secret-value')
    assert 'noop exporter: nothing is exported' in caplog.text
    assert 'very-secret-value' not in caplog.text
    agent.memory.unexport_extent(None, EXTENT)
    agent.memory.unexport_extent(None, EXTENT)
    assert agent.exporter.exports == {}
    assert agent.exporter.backed == {'e1'}
    agent.memory.scrub_extent(None, EXTENT)
    agent.memory.scrub_extent(None, EXTENT)
    assert agent.exporter.backed == set()


def test_compute_node_attach_detach(caplog):
    caplog.set_level(logging.DEBUG)
    agent = manager.AgentManager('compute-0', ['compute_node'])
    extent = dict(EXTENT, target_iqn='iqn.t:e1', lun=1,
                  chap_username='u', chap_secret='very-secret-value')
    details = agent.compute.attach_memory(None, LEASE, [extent], 'host', None)
    assert details['e1']['device'].startswith('/dev/disk/by-path/')
    assert 'very-secret-value' not in caplog.text
    agent.compute.detach_memory(None, LEASE, [extent], 'host', None)
    agent.compute.detach_memory(None, LEASE, [extent], 'host', None)
    assert agent.memory_attachments == {}
    devices = [{'uuid': 'd1', 'pci_address': '0000:41:00.0'}]
    assert agent.compute.attach_devices(None, LEASE, devices) == {
        'd1': '0000:41:00.0'}
    agent.compute.detach_devices(None, LEASE, devices)
    assert agent.device_attachments == {}


@pytest.mark.parametrize('roles,method,args', [
    (['compute_node'], 'export_extent', (EXTENT, 'iqn', 'u', 's')),
    (['compute_node'], 'scrub_extent', (EXTENT,)),
    (['memory_node'], 'attach_memory', (LEASE, [EXTENT], 'host', None)),
    (['memory_node'], 'attach_devices', (LEASE, [])),
])
def test_refuses_a_role_it_does_not_have(roles, method, args):
    agent = manager.AgentManager('node-x', roles)
    with pytest.raises(exception.DriverError) as info:
        endpoint, = [e for e in agent.endpoints if hasattr(e, method)]
        getattr(endpoint, method)(None, *args)
    assert 'node-x' in info.value.message
    assert 'role' in info.value.message


def test_unknown_role_is_refused():
    with pytest.raises(exception.Invalid):
        manager.AgentManager('node-x', ['gpu_node'])


# ------------------------------------------------ the real data plane


class FakeAttacher(object):
    def __init__(self):
        self.calls = []

    def attach(self, *args, **kwargs):
        self.calls.append(('attach',) + args +
                          ((kwargs,) if kwargs else ()))
        extents = args[1] if len(args) == 3 else args[0]
        return {e['uuid']: {'dev': 'x'} for e in extents}

    def detach(self, *args):
        self.calls.append(('detach',) + args)


class FakeArea(object):
    def __init__(self):
        self.ready = 0

    def ensure_ready(self):
        self.ready += 1

    def list(self):
        return [{'uuid': 'e2', 'size_mb': 1024, 'allocated_mb': 1024},
                {'uuid': 'e1', 'size_mb': 1024, 'allocated_mb': 1024}]

    def usage(self):
        return {'path': '/mem', 'extents': 2, 'extent_mb': 2048,
                'allocated_mb': 2048, 'total_mb': 4096, 'used_mb': 2048,
                'free_mb': 2048, 'overcommit': False}


class FakeExporter(object):
    def __init__(self):
        self.area = FakeArea()


@pytest.fixture
def real_conf():
    from composable import conf
    conf.CONF.set_override('memory_exporter', 'tgt', 'agent')
    conf.CONF.set_override('initiator_iqn', 'iqn.x:compute-0',
                           'compute_node')
    yield conf.CONF
    conf.CONF.clear_override('memory_exporter', 'agent')
    conf.CONF.clear_override('initiator_iqn', 'compute_node')


def _real_agent(guest=None, swap=None):
    return manager.AgentManager('compute-0', ['compute_node'],
                                guest_attacher=guest or FakeAttacher(),
                                host_swap=swap or FakeAttacher())


def test_guest_mode_goes_to_the_guest_attacher(real_conf):
    guest, swap = FakeAttacher(), FakeAttacher()
    agent = _real_agent(guest, swap)
    assert not agent.simulate
    extent = dict(EXTENT, target_iqn='iqn.t:e1', lun=1)
    lease = dict(LEASE, initiator_iqn='iqn.x:compute-0')
    details = agent.compute.attach_memory(None, lease, [extent], 'guest',
                                          'dom-1')
    assert details == {'e1': {'dev': 'x'}}
    assert guest.calls == [('attach', 'dom-1', [extent], 'iqn.x:compute-0',
                            {'lease_uuid': 'l1'})]
    assert agent.memory_attachments == {'l1': details}
    agent.compute.detach_memory(None, lease, [extent], 'guest', 'dom-1')
    assert guest.calls[-1] == ('detach', 'dom-1', [extent])
    assert swap.calls == []
    assert agent.memory_attachments == {}


def test_guest_mode_needs_a_server(real_conf):
    agent = _real_agent()
    with pytest.raises(exception.DriverError) as info:
        agent.compute.attach_memory(None, LEASE, [EXTENT], 'guest', None)
    assert 'server' in info.value.message


def test_host_mode_goes_to_host_swap(real_conf):
    guest, swap = FakeAttacher(), FakeAttacher()
    agent = _real_agent(guest, swap)
    extent = dict(EXTENT, target_iqn='iqn.t:e1', lun=1)
    never = dict(EXTENT, uuid='e2', target_iqn=None, lun=None)
    agent.compute.attach_memory(None, LEASE, [extent], 'host', None)
    assert swap.calls == [('attach', [extent], 'iqn.x:compute-0')]
    # An extent that was never exported was never logged in to.
    agent.compute.detach_memory(None, LEASE, [extent, never], 'host', None)
    assert swap.calls[-1] == ('detach', [extent])
    assert guest.calls == []


class FakeTuner(object):
    def __init__(self, calls):
        self.calls = calls

    def apply(self, *args):
        self.calls.append(('tune',) + args)

    def clear(self, *args):
        self.calls.append(('untune',) + args)


def test_host_mode_for_an_instance_tunes_its_memory(real_conf):
    swap = FakeAttacher()
    tuner = FakeTuner(swap.calls)
    agent = manager.AgentManager('compute-0', ['compute_node'],
                                 guest_attacher=FakeAttacher(),
                                 host_swap=swap, memory_tuner=tuner)
    extent = dict(EXTENT, target_iqn='iqn.t:e1', lun=1)
    lease = dict(LEASE, memory_mb=1024)
    agent.compute.attach_memory(None, lease, [extent], 'host', 'inst-1')
    # The swap exists before the guest is pushed towards it ...
    assert swap.calls == [('attach', [extent], 'iqn.x:compute-0'),
                          ('tune', 'inst-1', 'l1', 1024)]
    agent.compute.detach_memory(None, lease, [extent], 'host', 'inst-1')
    # ... and the guest's limit is lifted before swapoff.
    assert swap.calls[2:] == [('untune', 'inst-1', 'l1'),
                              ('detach', [extent])]
    # Host mode for the host itself: no instance, no tuning.
    agent.compute.attach_memory(None, lease, [extent], 'host', None)
    agent.compute.detach_memory(None, lease, [extent], 'host', None)
    assert [c[0] for c in swap.calls[4:]] == ['attach', 'detach']


def test_initiator_must_be_the_registered_one(real_conf):
    agent = _real_agent()
    lease = dict(LEASE, initiator_iqn='iqn.x:somebody-else')
    with pytest.raises(exception.DriverError) as info:
        agent.compute.attach_memory(None, lease, [EXTENT], 'guest', 'dom-1')
    assert 'iqn.x:somebody-else' in info.value.message
    assert 'iqn.x:compute-0' in info.value.message


def test_noop_exporter_simulates_the_compute_side():
    agent = manager.AgentManager('compute-0', ['compute_node'])
    assert agent.simulate


def test_unknown_mode_is_refused(real_conf):
    with pytest.raises(exception.DriverError):
        _real_agent().compute.attach_memory(None, LEASE, [EXTENT],
                                            'sideways', None)


def test_start_readies_the_area_and_reports(real_conf, caplog):
    caplog.set_level(logging.INFO)
    exporter = FakeExporter()
    agent = manager.AgentManager('memory-0', ['memory_node'],
                                 exporter=exporter)
    agent.start()
    try:
        assert exporter.area.ready == 1
        report = agent.memory.get_memory_report(None)
        assert report['total_mb'] == 4096 and report['free_mb'] == 2048
        assert report['node'] == 'memory-0' and not report['simulated']
        assert report['extent_uuids'] == ['e1', 'e2']
        assert 'Memory node memory-0: 2 extent(s)' in caplog.text
    finally:
        agent.stop()


def test_noop_report_is_simulated():
    agent = manager.AgentManager('memory-0', ['memory_node'])
    agent.memory.export_extent(None, EXTENT, 'iqn.x:host', 'user', 'secret')
    report = agent.memory.get_memory_report(None)
    assert report['simulated'] and report['extents'] == 1
    assert report['extent_uuids'] == ['e1']


def test_loads_the_configured_exporter(real_conf, tmp_path):
    from composable.memory.exporters import tgt
    agent = manager.AgentManager('memory-0', ['memory_node'])
    assert isinstance(agent.exporter, tgt.TgtExporter)
    assert agent.area is agent.exporter.area
    assert agent.area.node_name == 'memory-0'


class _FactsConductor(object):

    def __init__(self, fail=False):
        self.reports = []
        self.fail = fail

    def report_host_facts(self, context, host, facts):
        if self.fail:
            raise RuntimeError('no conductor answers')
        self.reports.append((host, facts))


def test_compute_agent_reports_its_dmi_uuid(tmp_path, monkeypatch, caplog):
    path = tmp_path / 'product_uuid'
    path.write_text('4C4C4544-0042-3510-8052-B4C04F4E3432\n')
    monkeypatch.setattr(manager, 'DMI_UUID_PATH', str(path))
    agent = manager.AgentManager('compute-0', ['compute_node'])
    agent._conductor = _FactsConductor()
    assert agent.report_host_facts()
    assert agent._conductor.reports == [
        ('compute-0', {'dmi_uuid': '4C4C4544-0042-3510-8052-B4C04F4E3432'})]
    # A conductor that cannot be told does not stop the agent.
    agent._conductor = _FactsConductor(fail=True)
    assert not agent.report_host_facts()
    assert 'no conductor answers' in caplog.text


def test_without_a_readable_dmi_uuid_nothing_is_reported(tmp_path,
                                                         monkeypatch,
                                                         caplog):
    caplog.set_level(logging.INFO)
    monkeypatch.setattr(manager, 'DMI_UUID_PATH',
                        str(tmp_path / 'missing'))
    agent = manager.AgentManager('compute-0', ['compute_node'])
    agent._conductor = _FactsConductor()
    assert not agent.report_host_facts()
    assert agent._conductor.reports == []
    assert 'DMI UUID of compute-0 cannot be read' in caplog.text


class _Conductor(object):
    """A ConductorAPI that records report_guest_swap and answers
    ``sent`` (False: a conductor capped below 1.7)."""

    def __init__(self, sent=True):
        self.sent = sent
        self.reports = []

    def report_guest_swap(self, context, host, lease, instance, outcome):
        self.reports.append((host, lease, instance, outcome))
        return self.sent


def test_the_guest_attacher_reports_its_swapons_to_the_conductor(
        real_conf, monkeypatch):
    from composable.agent.compute_node import libvirt_guest
    from tests.unit.agent.compute_node import fakes

    monkeypatch.setattr(libvirt_guest, 'libvirt_qemu', fakes.FakeLibvirtQemu)
    conn = fakes.FakeConnection()
    domain = conn.add_domain(fakes.FakeDomain('dom-1'))
    guest = libvirt_guest.GuestMemoryAttacher(
        uri='qemu:///system', connect=lambda uri: conn, attach_timeout=5,
        poll_interval=0.01)
    conductor = _Conductor()
    agent = manager.AgentManager('compute-0', ['compute_node'],
                                 guest_attacher=guest,
                                 host_swap=FakeAttacher(),
                                 conductor_api=conductor)
    extent = dict(EXTENT, uuid='0c8c6c2e-1f0e-4a35-9b8e-000000000001',
                  target_iqn='iqn.t:e1', lun=1, portal='192.0.2.1:3260')
    lease = dict(LEASE, initiator_iqn='iqn.x:compute-0')
    details = agent.compute.attach_memory(None, lease, [extent], 'guest',
                                          'dom-1')
    assert 'guest_device' not in details[extent['uuid']]
    assert guest.wait_for_swapons(30)
    assert conductor.reports == [
        ('compute-0', 'l1', 'dom-1',
         {extent['uuid']: {'guest_device': '/dev/vdb'}})]
    assert domain.agent.scripts == ['composable-swapon']


def test_an_older_conductor_is_not_told_of_the_swapon(caplog):
    caplog.set_level(logging.INFO)
    conductor = _Conductor(sent=False)
    agent = manager.AgentManager('compute-0', ['compute_node'],
                                 conductor_api=conductor)
    outcome = {'e1': {'guest_device': '/dev/vdb'}}
    assert agent.report_guest_swap('l1', 'dom-1', outcome) is False
    assert conductor.reports == [('compute-0', 'l1', 'dom-1', outcome)]
    assert 'not recorded: the conductor is older' in caplog.text
    # A conductor that cannot be reached: logged, the agent goes on.
    conductor.report_guest_swap = None
    assert agent.report_guest_swap('l1', 'dom-1', outcome) is False
    assert 'Could not tell the conductor' in caplog.text


def test_after_a_restart_the_guest_swapon_runs_again(real_conf,
                                                     monkeypatch):
    """A swap-on the previous process left running, or never reported:
    the restarted agent learns the guest-mode leases bound here from the
    conductor and runs the idempotent script again, and reports."""
    from composable.agent.compute_node import libvirt_guest
    from tests.unit.agent.compute_node import fakes

    monkeypatch.setattr(libvirt_guest, 'libvirt_qemu', fakes.FakeLibvirtQemu)
    conn = fakes.FakeConnection()
    domain = conn.add_domain(fakes.FakeDomain('dom-1'))
    extent = dict(EXTENT, uuid='0c8c6c2e-1f0e-4a35-9b8e-000000000001',
                  target_iqn='iqn.t:e1', lun=1, portal='192.0.2.1:3260')
    before = libvirt_guest.GuestMemoryAttacher(
        uri='qemu:///system', connect=lambda uri: conn, attach_timeout=5,
        poll_interval=0.01)
    before.attach('dom-1', [extent], 'iqn.x:compute-0')
    assert before.wait_for_swapons(30)
    guest = libvirt_guest.GuestMemoryAttacher(
        uri='qemu:///system', connect=lambda uri: conn, attach_timeout=5,
        poll_interval=0.01)

    class Conductor(_Conductor):
        def host_memory_leases(self, ctx, host):
            return []

        def instance_leases(self, ctx, host):
            return {'dom-1': ['l1']}

        def instance_status(self, ctx, instance, host):
            return [{'uuid': 'l1', 'status': 'bound', 'host': 'compute-0',
                     'attach_mode': 'guest', 'extents': [extent['uuid']]}]
    conductor = Conductor()
    agent = manager.AgentManager('compute-0', ['compute_node'],
                                 guest_attacher=guest,
                                 host_swap=FakeAttacher(),
                                 conductor_api=conductor)
    assert agent.recover_memory_leases(conductor) == 1
    assert guest.wait_for_swapons(30)
    assert conductor.reports == [
        ('compute-0', 'l1', 'dom-1',
         {extent['uuid']: {'guest_device': '/dev/vdb'}})]
    assert domain.agent.scripts == ['composable-swapon'] * 2
    # Learnt once: a second recovery runs nothing again.
    assert agent.recover_memory_leases(conductor) == 0
    assert guest.wait_for_swapons(30)
    assert len(conductor.reports) == 1
