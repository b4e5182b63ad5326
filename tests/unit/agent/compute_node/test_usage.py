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

"""The compute agent's usage samples of memory leases: host mode from
/proc/swaps, guest mode through the guest agent, one cast per report,
and a guest that does not answer holds up no one."""

import threading
import time
import uuid

import pytest

from composable.agent.compute_node import host_swap
from composable.agent.compute_node import libvirt_guest
from composable.agent.compute_node import usage
from composable.agent import manager
from composable import conf
from tests.unit.agent.compute_node import fakes

INITIATOR = 'iqn.x:compute-0'
NOW = '2026-11-25T14:00:00.000000Z'


class RecordingConductor(object):
    def __init__(self):
        self.casts = []

    def report_lease_usage(self, context, host, samples):
        self.casts.append((host, samples))


def _extent(n):
    return {'uuid': str(uuid.uuid4()), 'index': n - 1, 'size_mb': 64,
            'target_iqn': 'iqn.2010-10.org.openstack.composable:e%d' % n,
            'lun': 1, 'portal': '192.0.2.10:3260',
            'chap_username': 'u%d' % n, 'chap_secret': 'secret-%d-xyz' % n}


@pytest.fixture
def real_conf():
    conf.CONF.set_override('memory_exporter', 'tgt', 'agent')
    conf.CONF.set_override('initiator_iqn', INITIATOR, 'compute_node')
    yield conf.CONF
    conf.CONF.clear_override('memory_exporter', 'agent')
    conf.CONF.clear_override('initiator_iqn', 'compute_node')


@pytest.fixture
def host(tmp_path):
    return fakes.FakeHostState(tmp_path / 'host', initiator_iqn=INITIATOR)


@pytest.fixture
def conn():
    return fakes.FakeConnection()


@pytest.fixture
def agent(real_conf, host, conn):
    swap = host_swap.HostSwap(
        runner=fakes.RecordingRunner(host), by_path_dir=host.by_path,
        proc_swaps=host.proc_swaps, proc_meminfo=host.proc_meminfo,
        initiator_name_file=host.initiator_name_file, attach_timeout=5,
        poll_interval=0.01)
    guest = libvirt_guest.GuestMemoryAttacher(
        uri='qemu:///system', connect=lambda uri: conn, attach_timeout=5,
        detach_timeout=5, poll_interval=0.01)
    return manager.AgentManager('compute-0', ['compute_node'],
                                guest_attacher=guest, host_swap=swap)


def _sampler(agent, host, conductor=None, timeout=5):
    return usage.UsageSampler(agent, conductor=conductor or
                              RecordingConductor(), interval=1,
                              timeout=timeout, proc_swaps=host.proc_swaps,
                              clock=lambda: NOW)


def _attach_host(agent, lease_uuid, *extents):
    return agent.compute.attach_memory(None, {'uuid': lease_uuid},
                                       list(extents), 'host')


def _attach_guest(agent, conn, instance, lease_uuid, *extents):
    if instance not in conn.domains:
        conn.add_domain(fakes.FakeDomain(instance))
    return agent.compute.attach_memory(None, {'uuid': lease_uuid},
                                       list(extents), 'guest', instance)


def test_host_mode_sums_the_lease_swap_devices(agent, host):
    one, two = _extent(1), _extent(2)
    details = _attach_host(agent, 'lease-a', one)
    _attach_host(agent, 'lease-a', two)  # grown by one extent
    other = _attach_host(agent, 'lease-b', _extent(3))
    assert set(agent.memory_attachments['lease-a']) == {one['uuid'],
                                                        two['uuid']}
    devices = {d['swap_device'] for d in
               agent.memory_attachments['lease-a'].values()}
    assert len(devices) == 2
    for n, device in enumerate(sorted(devices)):
        host.set_used(device, (n + 1) * 10 * 1024)
    host.set_used(list(other.values())[0]['swap_device'], 700)
    assert details  # the first extent's details came back

    samples = _sampler(agent, host).sample()

    # 64 MiB extents: 65532 KiB of swap each plus the header page.
    assert samples == [
        {'lease_uuid': 'lease-a', 'taken_at': NOW, 'used_mb': 30,
         'size_mb': 128},
        {'lease_uuid': 'lease-b', 'taken_at': NOW, 'used_mb': 1,
         'size_mb': 64}]


def test_a_shrunk_host_lease_reports_what_is_left(agent, host):
    one, two = _extent(1), _extent(2)
    _attach_host(agent, 'lease-a', one, two)
    agent.compute.detach_memory(None, {'uuid': 'lease-a'}, [two], 'host')
    assert list(agent.memory_attachments['lease-a']) == [one['uuid']]
    [sample] = _sampler(agent, host).sample()
    assert sample['size_mb'] == 64
    agent.compute.detach_memory(None, {'uuid': 'lease-a'}, [one], 'host')
    assert agent.memory_attachments == {}
    assert _sampler(agent, host).sample() == []


def test_host_shrink_refused_keeps_every_extent(agent, host):
    one, two = _extent(1), _extent(2)
    _attach_host(agent, 'lease-a', one, two)
    device = agent.memory_attachments['lease-a'][two['uuid']]['swap_device']
    host.set_used(device, 100 * 1024)
    host.set_mem_available(50 * 1024)
    with pytest.raises(host_swap.SwapoffWouldNotFit):
        agent.compute.detach_memory(None, {'uuid': 'lease-a'}, [two], 'host')
    assert set(agent.memory_attachments['lease-a']) == {one['uuid'],
                                                        two['uuid']}
    assert len(host.swaps) == 2


def test_guest_mode_reads_the_guest(agent, host, conn):
    instance = str(uuid.uuid4())
    one, two = _extent(1), _extent(2)
    _attach_guest(agent, conn, instance, 'lease-g', one)
    _attach_guest(agent, conn, instance, 'lease-g', two)
    guest_agent = conn.domains[instance].agent
    guest_agent.used_kb[libvirt_guest.disk_serial(one['uuid'])] = 5 * 1024
    guest_agent.used_kb[libvirt_guest.disk_serial(two['uuid'])] = 2 * 1024

    [sample] = _sampler(agent, host).sample()

    assert sample == {'lease_uuid': 'lease-g', 'taken_at': NOW,
                      'used_mb': 7, 'size_mb': 128}
    # One guest-exec for the guest, whatever the number of its leases.
    assert guest_agent.scripts.count('composable-swaps') == 1


def test_report_casts_once_with_every_sample(agent, host, conn):
    conductor = RecordingConductor()
    _attach_host(agent, 'lease-a', _extent(1))
    _attach_guest(agent, conn, str(uuid.uuid4()), 'lease-g', _extent(2))
    sent = _sampler(agent, host, conductor).report()
    assert conductor.casts == [('compute-0', sent)]
    assert sorted(s['lease_uuid'] for s in sent) == ['lease-a', 'lease-g']
    # No lease, no cast.
    empty = manager.AgentManager('compute-1', ['compute_node'],
                                 guest_attacher=agent.guest_attacher,
                                 host_swap=agent.host_swap)
    conductor2 = RecordingConductor()
    assert _sampler(empty, host, conductor2).report() == []
    assert conductor2.casts == []


def test_a_hung_guest_holds_up_no_one(agent, host, conn):
    hung, fine = str(uuid.uuid4()), str(uuid.uuid4())
    _attach_guest(agent, conn, hung, 'lease-hung', _extent(1))
    _attach_guest(agent, conn, fine, 'lease-fine', _extent(2))
    _attach_host(agent, 'lease-host', _extent(3))
    release = threading.Event()
    real_command = conn.domains[hung].agent.command

    def blocked(request):
        release.wait(30)
        return real_command(request)
    conn.domains[hung].agent.command = blocked
    sampler = _sampler(agent, host, timeout=1)
    try:
        started = time.monotonic()
        samples = sampler.sample()
        took = time.monotonic() - started
        assert sorted(s['lease_uuid'] for s in samples) == [
            'lease-fine', 'lease-host']
        # Bounded by the sample timeout, not by the hung guest.
        assert took < 10
        # While its question is still open, it is not asked again.
        again = sampler.sample()
        assert sorted(s['lease_uuid'] for s in again) == [
            'lease-fine', 'lease-host']
        assert len(sampler._asking) == 1
    finally:
        release.set()
        sampler.stop()


def test_a_guest_without_agent_is_left_out(agent, host, conn):
    instance = str(uuid.uuid4())
    _attach_guest(agent, conn, instance, 'lease-g', _extent(1))
    conn.domains[instance].agent.configured = False
    assert _sampler(agent, host).sample() == []


def test_interval_zero_reports_nothing(agent, host):
    sampler = usage.UsageSampler(agent, conductor=RecordingConductor(),
                                 interval=0)
    assert sampler.start() is False
    assert sampler._thread is None


def test_the_loop_reports_every_interval(agent, host):
    conductor = RecordingConductor()
    _attach_host(agent, 'lease-a', _extent(1))
    sampler = usage.UsageSampler(agent, conductor=conductor,
                                 interval=0.05, timeout=5,
                                 proc_swaps=host.proc_swaps)
    assert sampler.start()
    try:
        deadline = time.monotonic() + 60
        while len(conductor.casts) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        sampler.stop()
    assert len(conductor.casts) >= 2
    taken_at = conductor.casts[0][1][0]['taken_at']
    assert taken_at.endswith('Z') and 'T' in taken_at


class _BindingConductor(RecordingConductor):
    """What the conductor knows of the leases of this host's guests."""

    def __init__(self, mapping, status, fail=0, host_leases=()):
        super().__init__()
        self.mapping = mapping
        self.status = status
        self.fail = fail
        self.host_leases = list(host_leases)

    def host_memory_leases(self, context, host):
        if self.fail:
            self.fail -= 1
            raise RuntimeError('MessagingTimeout')
        return [lease for lease in self.host_leases
                if lease['host'] == host]

    def instance_leases(self, context, host):
        if self.fail:
            self.fail -= 1
            raise RuntimeError('MessagingTimeout')
        return self.mapping

    def instance_status(self, context, instance_uuid, host=None):
        return self.status.get(instance_uuid, [])


def test_a_restarted_agent_reports_the_guest_leases_again(agent, host,
                                                          conn):
    instance, gone = str(uuid.uuid4()), str(uuid.uuid4())
    extent = _extent(1)
    _attach_guest(agent, conn, instance, 'lease-g', extent)
    conn.domains[instance].agent.used_kb[
        libvirt_guest.disk_serial(extent['uuid'])] = 4 * 1024
    # The agent restarts: the disk is still in the guest, the record gone.
    restarted = manager.AgentManager('compute-0', ['compute_node'],
                                     guest_attacher=agent.guest_attacher,
                                     host_swap=agent.host_swap)
    summary = {'uuid': 'lease-g', 'status': 'bound', 'host': 'compute-0',
               'attach_mode': 'guest', 'instance_uuid': instance,
               'extents': [extent['uuid']]}
    conductor = _BindingConductor(
        {instance: ['lease-g', 'lease-other'], gone: ['lease-gone']},
        {instance: [summary,
                    dict(summary, uuid='lease-other', host='compute-9')],
         gone: [dict(summary, uuid='lease-gone', instance_uuid=gone)]},
        fail=1)
    sampler = usage.UsageSampler(restarted, conductor=conductor, interval=1,
                                 timeout=5, proc_swaps=host.proc_swaps,
                                 clock=lambda: NOW)

    # The conductor does not answer at first: asked again next time.
    assert sampler.recover() is False
    assert sampler.recover() is True

    # Only the lease bound here, of a guest running here.
    assert list(restarted.memory_attachments) == ['lease-g']
    assert sampler.report() == [{'lease_uuid': 'lease-g', 'taken_at': NOW,
                                 'used_mb': 4, 'size_mb': 64}]
    # Its detach works from what was learnt.
    restarted.compute.detach_memory(None, {'uuid': 'lease-g'}, [extent],
                                    'guest', instance)
    assert restarted.memory_attachments == {}
    assert conn.domains[instance].disk_aliases() == ['virtio-disk0']


def test_a_restarted_agent_reports_the_host_leases_again(agent, host):
    one, two, gone = _extent(1), _extent(2), _extent(3)
    first = _attach_host(agent, 'lease-h', one, two)
    other = _attach_host(agent, 'lease-off', gone)
    for n, details in enumerate(first.values()):
        host.set_used(details['swap_device'], (n + 1) * 10 * 1024)
    before = _sampler(agent, host).sample()
    assert [s['lease_uuid'] for s in before] == ['lease-h', 'lease-off']
    # The agent restarts; while it is away the swap of lease-off goes
    # (a host restart, say). The conductor knows what the agent answered
    # when it attached each extent.
    host.swapoff(other[gone['uuid']]['swap_device'])
    restarted = manager.AgentManager('compute-0', ['compute_node'],
                                     guest_attacher=agent.guest_attacher,
                                     host_swap=agent.host_swap)
    summary = {'uuid': 'lease-h', 'status': 'bound', 'host': 'compute-0',
               'attach_mode': 'host', 'instance_uuid': None,
               'extents': [one['uuid'], two['uuid']], 'memory': first}
    conductor = _BindingConductor({}, {}, fail=1, host_leases=[
        summary,
        dict(summary, uuid='lease-off', extents=[gone['uuid']],
             memory=other),
        dict(summary, uuid='lease-elsewhere', host='compute-9')])
    sampler = usage.UsageSampler(restarted, conductor=conductor, interval=1,
                                 timeout=5, proc_swaps=host.proc_swaps,
                                 clock=lambda: NOW)
    # Nothing known before the conductor is asked: the history would stop.
    assert sampler.report() == []
    assert sampler.recover() is False
    assert sampler.recover() is True

    assert list(restarted.memory_attachments) == ['lease-h']
    # The lease's history goes on, as before the restart.
    assert sampler.report() == [before[0]]
    assert conductor.casts == [('compute-0', [before[0]])]
    # A shrink and the detach work from what was learnt.
    restarted.compute.detach_memory(None, {'uuid': 'lease-h'}, [two], 'host')
    [sample] = sampler.report()
    assert (sample['used_mb'], sample['size_mb']) == (10, 64)
    restarted.compute.detach_memory(None, {'uuid': 'lease-h'}, [one], 'host')
    assert restarted.memory_attachments == {}
    assert sampler.report() == []


# ------------------------------------------------------ virtio-mem mode


def _vmem_agent(real_conf, host, conn, agent):
    """An agent whose virtio-mem devices are in the MOCK FakeVmemDomain
    (fake_virtio_mem) and whose guest agent is that of a FakeDomain of
    the same instance."""
    from tests.unit.agent.compute_node import fake_virtio_mem
    domain = fake_virtio_mem.FakeVmemDomain()
    vmem = fake_virtio_mem.attacher(domain)
    vmem_agent = manager.AgentManager(
        'compute-0', ['compute_node'], guest_attacher=agent.guest_attacher,
        host_swap=agent.host_swap, virtio_mem_attacher=vmem)
    instance = fake_virtio_mem.INSTANCE
    conn.add_domain(fakes.FakeDomain(instance))
    return vmem_agent, vmem, domain, instance


def _vmem_lease(agent, vmem, domain, instance, lease_uuid, plugged_mb,
                max_mb=1024):
    vmem.attach(instance, lease_uuid, [0], max_mb, requested_mib=plugged_mb)
    for _ in range(16):
        domain.XMLDesc()  # the guest plugs what is requested
    agent.parts.attachments.memory_attached(
        lease_uuid, {lease_uuid + '-c0': {'mode': 'virtio-mem',
                                          'size_mb': plugged_mb}},
        {'uuid': lease_uuid, 'attach_mode': 'virtio-mem',
         'instance_uuid': instance})


@pytest.mark.parametrize('available_mb, used_mb', [
    (100, 412),   # 668 MiB used, 256 of them in the base memory
    (600, 0),     # the workload fits in the base memory
    (0, 512),     # it needs all it has
])
def test_virtio_mem_use_is_what_the_base_memory_cannot_hold(
        real_conf, host, conn, agent, available_mb, used_mb):
    vmem_agent, vmem, domain, instance = _vmem_agent(real_conf, host, conn,
                                                     agent)
    _vmem_lease(vmem_agent, vmem, domain, instance, 'lease-v', 512)
    guest_agent = conn.domains[instance].agent
    guest_agent.mem_total_kb = (256 + 512) * 1024
    guest_agent.mem_available_kb = available_mb * 1024
    [sample] = _sampler(vmem_agent, host).sample()
    assert sample == {'lease_uuid': 'lease-v', 'taken_at': NOW,
                      'used_mb': used_mb, 'size_mb': 512}


def test_virtio_mem_size_is_what_the_device_has_plugged_now(
        real_conf, host, conn, agent):
    vmem_agent, vmem, domain, instance = _vmem_agent(real_conf, host, conn,
                                                     agent)
    _vmem_lease(vmem_agent, vmem, domain, instance, 'lease-v', 512)
    vmem.resize(instance, 'lease-v', 256)
    guest_agent = conn.domains[instance].agent
    guest_agent.mem_total_kb = 512 * 1024
    guest_agent.mem_available_kb = 0
    [sample] = _sampler(vmem_agent, host).sample()
    assert (sample['used_mb'], sample['size_mb']) == (256, 256)


def test_one_guest_exec_for_swap_and_virtio_mem_leases_of_a_guest(
        real_conf, host, conn, agent):
    vmem_agent, vmem, domain, instance = _vmem_agent(real_conf, host, conn,
                                                     agent)
    _vmem_lease(vmem_agent, vmem, domain, instance, 'lease-v', 512)
    _vmem_lease(vmem_agent, vmem, domain, instance, 'lease-w', 256)
    extent = _extent(1)
    _attach_guest(vmem_agent, conn, instance, 'lease-g', extent)
    guest_agent = conn.domains[instance].agent
    guest_agent.used_kb[libvirt_guest.disk_serial(extent['uuid'])] = 3 * 1024
    # 1024 MiB in all, 768 plugged: base 256; 768 used, 512 beyond it,
    # shared out by the plugged sizes.
    guest_agent.mem_total_kb = 1024 * 1024
    guest_agent.mem_available_kb = 256 * 1024
    samples = _sampler(vmem_agent, host).sample()
    assert [(s['lease_uuid'], s['used_mb'], s['size_mb'])
            for s in samples] == [('lease-v', 341, 512),
                                  ('lease-w', 171, 256),
                                  ('lease-g', 3, 64)]
    assert guest_agent.scripts.count('composable-swaps') == 1


def test_a_virtio_mem_device_not_plugged_is_left_out(real_conf, host, conn,
                                                     agent):
    vmem_agent, vmem, domain, instance = _vmem_agent(real_conf, host, conn,
                                                     agent)
    _vmem_lease(vmem_agent, vmem, domain, instance, 'lease-v', 512)
    domain.devices.clear()
    assert _sampler(vmem_agent, host).sample() == []


def test_a_restarted_agent_reports_the_virtio_mem_leases_again(
        real_conf, host, conn, agent):
    vmem_agent, vmem, domain, instance = _vmem_agent(real_conf, host, conn,
                                                     agent)
    vmem.attach(instance, 'lease-v', [0], 512, requested_mib=512)
    for _ in range(16):
        domain.XMLDesc()
    guest_agent = conn.domains[instance].agent
    guest_agent.mem_total_kb = 768 * 1024
    guest_agent.mem_available_kb = 0
    summary = {'uuid': 'lease-v', 'status': 'bound', 'host': 'compute-0',
               'attach_mode': 'virtio-mem', 'instance_uuid': instance,
               'extents': ['c0', 'c1']}
    conductor = _BindingConductor({instance: ['lease-v']},
                                  {instance: [summary]})
    sampler = usage.UsageSampler(vmem_agent, conductor=conductor,
                                 interval=1, timeout=5,
                                 proc_swaps=host.proc_swaps,
                                 clock=lambda: NOW)
    assert sampler.recover() is True
    assert sorted(vmem_agent.memory_attachments['lease-v']) == ['c0', 'c1']
    assert sampler.report() == [{'lease_uuid': 'lease-v', 'taken_at': NOW,
                                 'used_mb': 512, 'size_mb': 512}]


def test_simulated_virtio_mem_leases_get_simulated_samples():
    """The demo: simulated CXL memory bound in virtio-mem mode."""
    from composable.agent.compute_node import parts as parts_mod
    conf.CONF.set_override('cxl_backend', 'noop', 'compute_node')
    try:
        simulated = manager.AgentManager('compute-0', ['compute_node'])
        assert simulated.parts.cxl.simulated
        assert isinstance(simulated.parts, parts_mod.ComputeNodeParts)
        chunks = [{'uuid': 'c%d' % i, 'size_mb': 256, 'medium': 'cxl',
                   'device': 'cmm0'} for i in range(2)]
        lease = {'uuid': 'lease-v', 'max_mb': 1024}
        simulated.compute.attach_memory(None, lease, chunks, 'virtio-mem',
                                        'inst-1')
        simulated.compute.attach_memory(
            None, lease, [dict(chunks[0], uuid='c2')], 'virtio-mem',
            'inst-1', partial=True)
    finally:
        conf.CONF.clear_override('cxl_backend', 'compute_node')
    sampler = usage.SimulatedUsageSampler(simulated,
                                          conductor=RecordingConductor(),
                                          interval=1, clock=lambda: NOW,
                                          now=lambda: 0.0)
    [sample] = sampler.sample()
    assert sample['lease_uuid'] == 'lease-v'
    assert sample['size_mb'] == 768
    assert sample['simulated'] is True
    assert 0 < sample['used_mb'] <= 768
