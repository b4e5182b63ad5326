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

"""virtio-mem mode in the compute agent: the device XML, plugging,
growing, the bounded wait for a shrink, and the endpoint's order (the
guest gives the memory back before the host region goes).

libvirt is the MOCK FakeVmemDomain of fake_virtio_mem.py: it keeps the
live XML libvirt would show, and plays the guest's part (``<current>``
follows ``<requested>`` a step per read, down to what the guest lets go
of).
tests/functional/compute_node/test_virtio_mem_real.py runs the same code
against the real libvirtd and a real guest.
"""

from xml.etree import ElementTree

import pytest

from composable.agent.compute_node import backends
from composable.agent.compute_node import virtio_mem
from composable.agent import endpoints
from composable.common import exception
from composable.common import states
from composable.conductor import rules
from tests.unit.agent.compute_node import fake_virtio_mem

LEASE = '4c98a3b0-dfe4-4cb7-a067-000000000001'
INSTANCE = fake_virtio_mem.INSTANCE
MIB = fake_virtio_mem.MIB


# ------------------------------------------------------------ XML


def test_device_xml():
    xml = virtio_mem.device_xml(LEASE, [3, 1, 3], 512, 256, guest_node=0,
                                pagesize_kib=2048)
    element = ElementTree.fromstring(xml)
    assert element.tag == 'memory'
    assert element.get('model') == 'virtio-mem'
    assert element.findtext('source/nodemask') == '1,3'
    assert element.find('source/pagesize').get('unit') == 'KiB'
    assert element.findtext('source/pagesize') == '2048'
    assert element.findtext('target/size') == str(512 * MIB)
    assert element.findtext('target/node') == '0'
    assert element.findtext('target/block') == '2048'
    assert element.findtext('target/requested') == str(256 * MIB)
    assert element.find('alias').get('name') == \
        'ua-composable-vmem-' + LEASE
    # No page size unless asked: the host's default backs it.
    plain = ElementTree.fromstring(virtio_mem.device_xml(LEASE, [0], 256,
                                                         256))
    assert plain.find('source/pagesize') is None
    with pytest.raises(ValueError):
        virtio_mem.device_xml(LEASE, [], 256, 256)


def test_live_device_and_update_xml():
    root = ElementTree.fromstring(
        "<memory model='virtio-mem'><source><nodemask>0</nodemask>"
        "</source><target><size unit='MiB'>256</size><node>0</node>"
        "<block unit='KiB'>2048</block><requested unit='GiB'>0</requested>"
        "<current unit='KiB'>131072</current></target>"
        "<alias name='ua-composable-vmem-x'/></memory>")
    device = virtio_mem.LiveDevice(root)
    assert (device.alias, device.nodemask) == ('ua-composable-vmem-x', '0')
    assert (device.size_kib, device.requested_kib, device.current_kib) == (
        256 * MIB, 0, 128 * MIB)
    update = ElementTree.fromstring(device.with_requested(64 * MIB))
    assert update.find('target/current') is None
    assert update.findtext('target/requested') == str(64 * MIB)
    assert update.find('target/requested').get('unit') == 'KiB'


# ------------------------------------------------------------ attach


def test_domain_without_max_memory_is_refused_naming_it():
    domain = fake_virtio_mem.FakeVmemDomain(max_memory=False)
    with pytest.raises(virtio_mem.NoMaxMemory) as err:
        fake_virtio_mem.attacher(domain).attach(INSTANCE, LEASE, [0], 256)
    assert err.value.code == 409
    assert ('domain vm-1 (instance %s) has no <maxMemory slots=...>'
            % INSTANCE) in err.value.message
    assert 'Nova does not write one' in err.value.message
    assert domain.devices == {}


def test_domain_without_guest_numa_is_refused():
    domain = fake_virtio_mem.FakeVmemDomain(numa=False)
    with pytest.raises(virtio_mem.NoMaxMemory) as err:
        fake_virtio_mem.attacher(domain).attach(INSTANCE, LEASE, [0], 256)
    assert 'no guest NUMA cell' in err.value.message


def test_attach_grows_the_guest_and_is_idempotent():
    domain = fake_virtio_mem.FakeVmemDomain()
    vmem = fake_virtio_mem.attacher(domain)
    details = vmem.attach(INSTANCE, LEASE, [1], 512)
    assert details == {'mode': states.ATTACH_VIRTIO_MEM,
                       'instance_uuid': INSTANCE,
                       'alias': 'ua-composable-vmem-' + LEASE,
                       'numa_nodes': [1], 'size_mb': 512,
                       'requested_mb': 512}
    assert vmem.device(INSTANCE, LEASE).requested_kib == 512 * MIB
    # Again (the conductor repeats calls): the same device, no update.
    vmem.attach(INSTANCE, LEASE, [1], 512)
    assert len(domain.devices) == 1 and domain.updates == []
    assert vmem.present(INSTANCE, LEASE)
    assert not vmem.present(INSTANCE, 'another-lease')


def test_an_emptied_device_on_another_node_is_not_reused():
    domain = fake_virtio_mem.FakeVmemDomain()
    vmem = fake_virtio_mem.attacher(domain)
    vmem.attach(INSTANCE, LEASE, [1], 256)
    vmem.detach(INSTANCE, LEASE)   # QEMU 7.2: the empty device stays
    with pytest.raises(exception.DriverError) as err:
        vmem.attach(INSTANCE, LEASE, [2], 256)
    assert 'on host NUMA node(s) 1' in err.value.message
    assert 'now on node(s) 2' in err.value.message
    # On the node it is on, a bind again grows it back.
    vmem.attach(INSTANCE, LEASE, [1], 256)
    assert vmem.device(INSTANCE, LEASE).requested_kib == 256 * MIB


# ------------------------------------------------------------ resize


def test_grow_returns_at_once_and_shrink_waits_for_the_guest():
    domain = fake_virtio_mem.FakeVmemDomain()
    vmem = fake_virtio_mem.attacher(domain)
    vmem.attach(INSTANCE, LEASE, [0], 512, requested_mib=128)
    # Grow: not waited for.
    vmem.resize(INSTANCE, LEASE, 512)
    assert domain.updates == [512]
    # Shrink: returns once <current> is down to the request.
    assert vmem.resize(INSTANCE, LEASE, 128) == 128
    assert domain.devices['ua-composable-vmem-' + LEASE]['current'] == \
        128 * MIB
    with pytest.raises(exception.Invalid):
        vmem.resize(INSTANCE, LEASE, 1024)


def test_a_guest_that_keeps_its_memory_fails_the_shrink_in_time():
    domain = fake_virtio_mem.FakeVmemDomain()
    vmem = fake_virtio_mem.attacher(domain, timeout=0.3)
    vmem.attach(INSTANCE, LEASE, [0], 512)
    for _ in range(8):
        domain.XMLDesc()  # the guest plugs it all
    domain.guest_floor_kib = 384 * MIB  # ... and uses 384 MiB of it
    with pytest.raises(virtio_mem.ShrinkRefused) as err:
        vmem.resize(INSTANCE, LEASE, 0)
    message = err.value.message
    assert 'did not give back the virtio-mem memory of lease %s within ' \
        '0.3 s' % LEASE in message
    assert 'it still has 384 MiB of it, 0 MiB were requested' in message
    assert 'Nothing was unplugged by force' in message
    # The guest is asked for what it had; nothing was unplugged.
    assert domain.updates == [0, 512]
    assert domain.unplug_requests == []


def test_unbind_is_a_shrink_to_zero_then_the_unplug():
    domain = fake_virtio_mem.FakeVmemDomain(unpluggable=True)
    vmem = fake_virtio_mem.attacher(domain)
    vmem.attach(INSTANCE, LEASE, [0], 256)
    vmem.detach(INSTANCE, LEASE)
    assert domain.updates == [0]
    assert domain.unplug_requests == ['ua-composable-vmem-' + LEASE]
    assert domain.devices == {}
    # Idempotent; a domain gone has no device.
    vmem.detach(INSTANCE, LEASE)
    vmem.connection.domain = None
    vmem.detach(INSTANCE, LEASE)


def test_unbind_refused_by_the_guest_unplugs_nothing():
    domain = fake_virtio_mem.FakeVmemDomain(unpluggable=True)
    vmem = fake_virtio_mem.attacher(domain, timeout=0.2)
    vmem.attach(INSTANCE, LEASE, [0], 256)
    for _ in range(4):
        domain.XMLDesc()
    domain.guest_floor_kib = 256 * MIB
    with pytest.raises(virtio_mem.ShrinkRefused):
        vmem.detach(INSTANCE, LEASE)
    assert domain.unplug_requests == []
    assert domain.devices['ua-composable-vmem-' + LEASE]['requested'] == \
        256 * MIB


# ------------------------------------------------------------ endpoint


class RecordingCxl(object):
    """MOCK of the CXL back end: regions onlined as ``node`` (0), one
    per extent, recorded as the real one records them."""

    simulated = False

    def __init__(self):
        self.calls = []
        self.node = 0
        # {lease uuid: {extent uuid: numa node}}
        self.regions = {}
        self.refuse_split = None

    def attach(self, lease, extents):
        self.calls.append('attach')
        held = self.regions.setdefault(lease['uuid'], {})
        for e in extents:
            held.setdefault(e['uuid'], self.node)
        return {e['uuid']: {'mode': states.ATTACH_HOST, 'medium': 'cxl',
                            'numa_node': held[e['uuid']],
                            'size_mb': e['size_mb']}
                for e in extents}

    def check_detach(self, lease, extents):
        if self.refuse_split:
            raise exception.DriverError(reason=self.refuse_split)

    def detach(self, lease, extents):
        self.check_detach(lease, extents)
        self.calls.append('detach')
        held = self.regions.get(lease['uuid'], {})
        for e in extents:
            held.pop(e['uuid'], None)
        if not held:
            self.regions.pop(lease['uuid'], None)

    def extents_of(self, lease_uuid):
        return sorted(self.regions.get(lease_uuid, {}))


class FakeParts(object):
    def __init__(self, domain):
        from composable.agent.compute_node import attachments
        self.cxl = RecordingCxl()
        self.virtio_mem_attacher = fake_virtio_mem.attacher(domain,
                                                            timeout=0.2)
        self.virtio_mem = backends.VirtioMemGuests(self)
        self.attachments = attachments.LiveAttachments()


def _chunks():
    return [{'uuid': 'chunk-%d' % i, 'size_mb': 256, 'medium': 'cxl',
             'device': 'cmm0'} for i in range(2)]


def _endpoint(domain):
    return endpoints.ComputeNodeEndpoint('compute-1', ['compute_node'],
                                         FakeParts(domain))


def test_endpoint_bind_and_unbind_in_virtio_mem_mode():
    domain = fake_virtio_mem.FakeVmemDomain(unpluggable=True)
    endpoint = _endpoint(domain)
    lease = {'uuid': LEASE}
    details = endpoint.attach_memory(None, lease, _chunks(), 'virtio-mem',
                                     INSTANCE)
    assert {d['mode'] for d in details.values()} == {'virtio-mem'}
    device = domain.devices['ua-composable-vmem-' + LEASE]
    assert device['xml'].findtext('target/size') == str(512 * MIB)
    assert device['xml'].findtext('source/nodemask') == '0'
    endpoint.detach_memory(None, lease, _chunks(), 'virtio-mem', INSTANCE)
    assert endpoint._parts.cxl.calls == ['attach', 'detach']
    assert domain.devices == {}


def test_endpoint_gives_the_region_back_when_the_domain_cannot_take_it():
    endpoint = _endpoint(fake_virtio_mem.FakeVmemDomain(max_memory=False))
    with pytest.raises(virtio_mem.NoMaxMemory):
        endpoint.attach_memory(None, {'uuid': LEASE}, _chunks(),
                               'virtio-mem', INSTANCE)
    assert endpoint._parts.cxl.calls == ['attach', 'detach']


def test_endpoint_keeps_the_region_while_the_guest_keeps_the_memory():
    domain = fake_virtio_mem.FakeVmemDomain(unpluggable=True)
    endpoint = _endpoint(domain)
    endpoint.attach_memory(None, {'uuid': LEASE}, _chunks(), 'virtio-mem',
                           INSTANCE)
    for _ in range(8):
        domain.XMLDesc()
    domain.guest_floor_kib = 128 * MIB
    with pytest.raises(virtio_mem.ShrinkRefused):
        endpoint.detach_memory(None, {'uuid': LEASE}, _chunks(),
                               'virtio-mem', INSTANCE)
    # The host region was not touched.
    assert endpoint._parts.cxl.calls == ['attach']


def test_endpoint_finds_the_guest_when_not_told_it():
    """A detach without the instance still empties every running guest
    that has the lease's device before the region goes."""
    domain = fake_virtio_mem.FakeVmemDomain(unpluggable=True)
    endpoint = _endpoint(domain)
    endpoint.attach_memory(None, {'uuid': LEASE}, _chunks(), 'virtio-mem',
                           INSTANCE)
    endpoint.detach_memory(None, {'uuid': LEASE}, _chunks(), 'virtio-mem',
                           None)
    assert domain.updates == [0]
    assert domain.devices == {}
    assert endpoint._parts.cxl.calls == ['attach', 'detach']


def test_endpoint_refuses_virtio_mem_of_network_memory():
    endpoint = _endpoint(fake_virtio_mem.FakeVmemDomain())
    extents = [{'uuid': 'e-1', 'size_mb': 256}]
    with pytest.raises(exception.DriverError) as err:
        endpoint.attach_memory(None, {'uuid': LEASE}, extents, 'virtio-mem',
                               INSTANCE)
    assert 'virtio-mem mode needs host memory (a CXL pool)' in \
        err.value.message


# ------------------------------------------------------------ the rule


class _Pool(object):
    def __init__(self, name, medium):
        self.name = name
        self.kind = 'memory'
        self.medium = medium


@pytest.mark.parametrize('mode, medium, words', [
    ('virtio-mem', 'network', 'virtio-mem needs host memory (a CXL pool) '
                              'to plug into the guest; pool p holds '
                              'network memory'),
    ('virtio-mem', None, 'the lease holds no memory'),
    ('guest', 'cxl', 'bind it in host mode, or in virtio-mem mode'),
    ('virtio-mem', 'cxl', None),
    ('host', 'cxl', None),
    ('guest', 'network', None),
])
def test_attach_medium_rule(mode, medium, words):
    pool = _Pool('p', medium) if medium else None
    refusal = rules.attach_medium_refusal(mode, pool)
    if words is None:
        assert refusal is None
    else:
        assert words in refusal


def test_virtio_mem_needs_a_server():
    with pytest.raises(exception.Invalid) as err:
        rules.check_attach_mode('virtio-mem', None)
    assert 'attach_mode virtio-mem attaches to a server' in \
        err.value.message
    rules.check_attach_mode('virtio-mem', INSTANCE)


def test_virtio_mem_memory_cannot_follow_a_live_migration():
    from composable.common import live_migration
    assert 'virtio-mem memory' in live_migration.cannot_follow(
        states.BOUND, states.ATTACH_VIRTIO_MEM, 256, 0)
    assert live_migration.cannot_follow(
        states.RESERVED, states.ATTACH_VIRTIO_MEM, 256, 0) is None


# ------------------------------------------------------------ the hook


class HookConductor(object):
    """MOCK conductor for the hook server: its bind and unbind flows
    call the agent's endpoint back while the hook waits."""

    def __init__(self):
        self.endpoint = None
        self.faults = []

    def _answer(self):
        return {'ok': True, 'leases': [{'uuid': LEASE}]}

    def prepare_instance(self, context, instance, host, **kwargs):
        self.endpoint.attach_memory(None, {'uuid': LEASE}, _chunks(),
                                    'virtio-mem', instance)
        return self._answer()

    def release_instance(self, context, instance, host, **kwargs):
        if kwargs.get('fault'):
            self.faults.append(kwargs['fault'])
            return self._answer()
        self.endpoint.detach_memory(None, {'uuid': LEASE}, _chunks(),
                                    'virtio-mem', instance)
        return self._answer()


def _hooked(domain):
    from composable.agent import hook_server
    endpoint = _endpoint(domain)
    parts = endpoint._parts
    parts.host = 'compute-1'
    parts.memory_simulated = parts.devices_simulated = True
    parts.cxl_simulated = False
    conductor = HookConductor()
    conductor.endpoint = endpoint
    hook = hook_server.HookServer(parts, path='/nonexistent',
                                  conductor=conductor)
    hook.cache.set(INSTANCE, [LEASE])
    endpoint.hook_server = hook
    return endpoint, hook, conductor


def _join(hook):
    for thread in hook._threads:
        thread.join(10)
        assert not thread.is_alive()


def test_the_hook_plugs_the_device_once_the_guest_runs():
    domain = fake_virtio_mem.FakeVmemDomain(unpluggable=True)
    endpoint, hook, conductor = _hooked(domain)
    # prepare: the region is made, the device waits (QEMU does not run).
    assert hook.handle({'op': 'prepare', 'instance': INSTANCE})['ok']
    assert endpoint._parts.cxl.calls == ['attach']
    assert domain.devices == {}
    # started: plugged, in a thread.
    assert hook.handle({'op': 'started', 'instance': INSTANCE})['ok']
    _join(hook)
    [device] = domain.devices.values()
    assert device['requested'] == 512 * MIB
    # stopped: QEMU is gone; only the region is given back (no libvirt
    # call on a domain the hook holds).
    domain.active = False
    assert hook.handle({'op': 'stopped', 'instance': INSTANCE})['ok']
    assert endpoint._parts.cxl.calls == ['attach', 'detach']
    assert domain.updates == [] and domain.unplug_requests == []
    assert conductor.faults == []


def test_a_domain_without_max_memory_gets_the_lease_unbound_at_start():
    domain = fake_virtio_mem.FakeVmemDomain(max_memory=False)
    endpoint, hook, conductor = _hooked(domain)
    assert hook.handle({'op': 'prepare', 'instance': INSTANCE})['ok']
    assert hook.handle({'op': 'started', 'instance': INSTANCE})['ok']
    _join(hook)
    [fault] = conductor.faults
    assert 'did not get the CXL memory of this lease' in fault
    assert 'has no <maxMemory slots=...>' in fault
    assert domain.devices == {}


# ------------------------------------------------- elastic (agent 1.4)


ALIAS = 'ua-composable-vmem-' + LEASE


def _chunk(i, size_mb=256):
    return {'uuid': 'chunk-%d' % i, 'size_mb': size_mb, 'medium': 'cxl',
            'device': 'cmm0'}


def _plugged(domain):
    """The guest plugs what is requested (a few reads of the XML)."""
    for _ in range(16):
        domain.XMLDesc()
    return domain.devices[ALIAS]


def test_device_size_and_nodemask_helpers():
    assert virtio_mem.device_size_mib(512) == 512
    assert virtio_mem.device_size_mib(512, 1024) == 1024
    assert virtio_mem.device_size_mib(512, 256) == 512
    # Rounded up to the 2 MiB block.
    assert virtio_mem.device_size_mib(255, 1001) == 1002
    assert virtio_mem.parse_nodemask('0') == {0}
    assert virtio_mem.parse_nodemask('1,3') == {1, 3}
    assert virtio_mem.parse_nodemask('0-3,^2') == {0, 1, 3}


def test_room_under_max_memory_counts_every_memory_device():
    xml = ("<domain><name>vm-9</name>"
           "<maxMemory slots='4' unit='GiB'>2</maxMemory>"
           "<memory unit='KiB'>786432</memory>"
           "<cpu><numa><cell id='0' memory='256' unit='MiB'/></numa></cpu>"
           "<devices><memory model='dimm'><target><size unit='MiB'>256"
           "</size></target></memory>"
           "<memory model='virtio-mem'><target><size unit='MiB'>256</size>"
           "</target><alias name='ua-composable-vmem-x'/></memory>"
           "</devices></domain>")
    memory = virtio_mem.DomainMemory(xml)
    assert memory.used_kib == 768 * MIB
    assert memory.room_kib == (2048 - 768) * MIB


def test_first_plug_reserves_max_mb_and_requests_the_chunks():
    domain = fake_virtio_mem.FakeVmemDomain()
    endpoint = _endpoint(domain)
    details = endpoint.attach_memory(
        None, {'uuid': LEASE, 'max_mb': 1001}, [_chunk(0), _chunk(1)],
        'virtio-mem', INSTANCE)
    device = domain.devices[ALIAS]
    assert device['xml'].findtext('target/size') == str(1002 * MIB)
    assert device['requested'] == 512 * MIB
    assert {d['requested_mb'] for d in details.values()} == {512}


def test_a_max_mb_beyond_max_memory_is_refused_naming_what_to_change():
    # The fake domain: <maxMemory> 4 GiB, 256 MiB of boot memory.
    domain = fake_virtio_mem.FakeVmemDomain()
    endpoint = _endpoint(domain)
    with pytest.raises(virtio_mem.NoMaxMemory) as err:
        endpoint.attach_memory(None, {'uuid': LEASE, 'max_mb': 8192},
                               [_chunk(0)], 'virtio-mem', INSTANCE)
    message = err.value.message
    assert ('domain vm-1 (instance %s) cannot take the 8192 MiB '
            'virtio-mem device of lease %s' % (INSTANCE, LEASE)) in message
    assert '<maxMemory> of 4096 MiB leaves room for 3840 MiB' in message
    assert 'at least 4352 MiB larger, or give the lease a smaller ' \
        'max_mb' in message
    assert domain.devices == {}
    # The region made for it went back.
    assert endpoint._parts.cxl.calls == ['attach', 'detach']
    assert endpoint._parts.cxl.regions == {}


def _elastic(domain, max_mb=1024):
    endpoint = _endpoint(domain)
    lease = {'uuid': LEASE, 'max_mb': max_mb}
    endpoint.attach_memory(None, lease, [_chunk(0), _chunk(1)],
                           'virtio-mem', INSTANCE)
    _plugged(domain)
    return endpoint, lease


def test_grow_makes_only_the_new_regions_and_raises_requested():
    domain = fake_virtio_mem.FakeVmemDomain()
    endpoint, lease = _elastic(domain)
    cxl = endpoint._parts.cxl
    details = endpoint.attach_memory(None, lease, [_chunk(2)], 'virtio-mem',
                                     INSTANCE, partial=True)
    assert set(details) == {'chunk-2'}
    assert details['chunk-2']['mode'] == 'virtio-mem'
    assert details['chunk-2']['alias'] == ALIAS
    assert details['chunk-2']['requested_mb'] == 768
    assert details['chunk-2']['numa_node'] == 0
    assert domain.updates == [768]
    assert _plugged(domain)['current'] == 768 * MIB
    assert cxl.regions[LEASE] == {'chunk-0': 0, 'chunk-1': 0, 'chunk-2': 0}
    assert set(endpoint._parts.attachments.memory[LEASE]) == {
        'chunk-0', 'chunk-1', 'chunk-2'}
    # The agent knows it grows without being told (its records).
    endpoint.attach_memory(None, lease, [_chunk(3)], 'virtio-mem', INSTANCE)
    assert domain.updates == [768, 1024]


def test_a_repeated_grow_changes_nothing_more():
    domain = fake_virtio_mem.FakeVmemDomain()
    endpoint, lease = _elastic(domain)
    first = endpoint.attach_memory(None, lease, [_chunk(2)], 'virtio-mem',
                                   INSTANCE, partial=True)
    again = endpoint.attach_memory(None, lease, [_chunk(2)], 'virtio-mem',
                                   INSTANCE, partial=True)
    assert again == first
    assert domain.updates == [768]
    # So is a repeated first bind of all of them.
    endpoint.attach_memory(None, lease, [_chunk(0), _chunk(1), _chunk(2)],
                           'virtio-mem', INSTANCE)
    assert domain.updates == [768]
    assert domain.devices[ALIAS]['requested'] == 768 * MIB


def test_grow_on_another_host_node_gives_the_region_back():
    domain = fake_virtio_mem.FakeVmemDomain()
    endpoint, lease = _elastic(domain)
    cxl = endpoint._parts.cxl
    cxl.node = 2
    with pytest.raises(exception.DriverError) as err:
        endpoint.attach_memory(None, lease, [_chunk(2)], 'virtio-mem',
                               INSTANCE, partial=True)
    message = err.value.message
    assert 'online on host NUMA node 2' in message
    assert 'pinned to host node(s) 0 (<nodemask>)' in message
    assert cxl.calls[-2:] == ['attach', 'detach']
    assert 'chunk-2' not in cxl.regions[LEASE]
    assert domain.updates == []
    assert 'chunk-2' not in endpoint._parts.attachments.memory[LEASE]


def test_grow_beyond_the_device_gives_the_region_back():
    domain = fake_virtio_mem.FakeVmemDomain()
    endpoint, lease = _elastic(domain, max_mb=600)
    with pytest.raises(exception.DriverError) as err:
        endpoint.attach_memory(None, lease, [_chunk(2)], 'virtio-mem',
                               INSTANCE, partial=True)
    assert ('is 600 MiB (the lease\'s max_mb when it was plugged) and 512 '
            'MiB of it are requested; it cannot take 256 MiB more'
            in err.value.message)
    assert 'chunk-2' not in endpoint._parts.cxl.regions[LEASE]
    assert domain.updates == []


def test_grow_without_the_device_in_the_guest_is_refused():
    domain = fake_virtio_mem.FakeVmemDomain()
    endpoint = _endpoint(domain)
    with pytest.raises(exception.DriverError) as err:
        endpoint.attach_memory(None, {'uuid': LEASE}, [_chunk(2)],
                               'virtio-mem', INSTANCE, partial=True)
    assert 'has no virtio-mem device of lease %s to grow' % LEASE in \
        err.value.message
    assert endpoint._parts.cxl.regions == {}


def test_partial_detach_shrinks_first_then_gives_back_only_those():
    domain = fake_virtio_mem.FakeVmemDomain(unpluggable=True)
    endpoint, lease = _elastic(domain)
    endpoint.attach_memory(None, lease, [_chunk(2)], 'virtio-mem', INSTANCE,
                           partial=True)
    _plugged(domain)
    cxl = endpoint._parts.cxl
    endpoint.detach_memory(None, lease, [_chunk(2)], 'virtio-mem',
                           INSTANCE, partial=True)
    device = domain.devices[ALIAS]
    # Waited for: the guest gave it back before the region went.
    assert device['requested'] == device['current'] == 512 * MIB
    assert domain.updates == [768, 512]
    assert domain.unplug_requests == []
    assert cxl.calls[-1] == 'detach'
    assert cxl.regions[LEASE] == {'chunk-0': 0, 'chunk-1': 0}
    assert set(endpoint._parts.attachments.memory[LEASE]) == {'chunk-0',
                                                              'chunk-1'}
    # Without partial=True: the agent's records tell it is a part.
    endpoint.detach_memory(None, lease, [_chunk(1)], 'virtio-mem', INSTANCE)
    assert domain.devices[ALIAS]['requested'] == 256 * MIB
    # Again: gone already, nothing more.
    endpoint.detach_memory(None, lease, [_chunk(1)], 'virtio-mem', INSTANCE,
                           partial=True)
    assert domain.updates == [768, 512, 256]
    # All that is left: the device is emptied and unplugged, as before.
    endpoint.detach_memory(None, lease, [_chunk(0)], 'virtio-mem', INSTANCE)
    assert domain.devices == {}
    assert cxl.regions == {}
    assert endpoint._parts.attachments.memory == {}


def test_partial_detach_refused_by_the_guest_keeps_everything():
    domain = fake_virtio_mem.FakeVmemDomain(unpluggable=True)
    endpoint, lease = _elastic(domain)
    cxl = endpoint._parts.cxl
    domain.guest_floor_kib = 512 * MIB   # the guest uses all of it
    with pytest.raises(virtio_mem.ShrinkRefused) as err:
        endpoint.detach_memory(None, lease, [_chunk(1)], 'virtio-mem',
                               INSTANCE, partial=True)
    assert 'it still has 512 MiB of it, 256 MiB were requested' in \
        err.value.message
    assert domain.devices[ALIAS]['requested'] == 512 * MIB
    assert cxl.calls == ['attach']
    assert cxl.regions[LEASE] == {'chunk-0': 0, 'chunk-1': 0}
    assert set(endpoint._parts.attachments.memory[LEASE]) == {'chunk-0',
                                                              'chunk-1'}
    # Once the guest lets go, the same call goes through.
    domain.guest_floor_kib = 0
    endpoint.detach_memory(None, lease, [_chunk(1)], 'virtio-mem', INSTANCE,
                           partial=True)
    assert domain.devices[ALIAS]['requested'] == 256 * MIB
    assert cxl.regions[LEASE] == {'chunk-0': 0}


def test_a_region_that_cannot_go_is_not_shrunk_twice():
    """The guest gave the memory back but the host region could not go
    (split, or pages the kernel cannot move): the repeated call does not
    take the size off the device again."""
    domain = fake_virtio_mem.FakeVmemDomain()
    endpoint, lease = _elastic(domain)
    cxl = endpoint._parts.cxl
    original = cxl.detach

    def failing(lease, extents):
        raise exception.DriverError(reason='pages are pinned')
    cxl.detach = failing
    with pytest.raises(exception.DriverError):
        endpoint.detach_memory(None, lease, [_chunk(1)], 'virtio-mem',
                               INSTANCE, partial=True)
    assert domain.devices[ALIAS]['requested'] == 256 * MIB
    cxl.detach = original
    endpoint.detach_memory(None, lease, [_chunk(1)], 'virtio-mem', INSTANCE,
                           partial=True)
    assert domain.updates == [256]
    assert cxl.regions[LEASE] == {'chunk-0': 0}


def test_a_split_region_is_refused_before_the_guest_shrinks():
    domain = fake_virtio_mem.FakeVmemDomain()
    endpoint, lease = _elastic(domain)
    endpoint._parts.cxl.refuse_split = 'given back whole'
    with pytest.raises(exception.DriverError) as err:
        endpoint.detach_memory(None, lease, [_chunk(1)], 'virtio-mem',
                               INSTANCE, partial=True)
    assert 'given back whole' in err.value.message
    assert domain.updates == []


def test_grow_and_shrink_while_the_device_waits_for_started():
    domain = fake_virtio_mem.FakeVmemDomain(unpluggable=True)
    endpoint, hook, conductor = _hooked(domain)
    lease = {'uuid': LEASE, 'max_mb': 1024}

    def prepare(context, instance, host, **kwargs):
        endpoint.attach_memory(None, lease, _chunks(), 'virtio-mem',
                               instance)
        # Grown while the domain is prepared.
        details = endpoint.attach_memory(None, lease, [_chunk(2)],
                                         'virtio-mem', instance,
                                         partial=True)
        assert details['chunk-2']['deferred'] == 'started'
        assert details['chunk-2']['requested_mb'] == 768
        return conductor._answer()
    conductor.prepare_instance = prepare
    assert hook.handle({'op': 'prepare', 'instance': INSTANCE})['ok']
    assert domain.devices == {}
    # Before started, a shrink lowers what will be plugged.
    endpoint.detach_memory(None, lease, [_chunk(2)], 'virtio-mem', INSTANCE,
                           partial=True)
    assert 'chunk-2' not in endpoint._parts.cxl.regions[LEASE]
    with pytest.raises(exception.DriverError) as err:
        endpoint._parts.cxl.node = 3
        endpoint.attach_memory(None, lease, [_chunk(4)], 'virtio-mem',
                               INSTANCE, partial=True)
    assert 'online on host NUMA node 3' in err.value.message
    assert 'is pinned to host node(s) 0' in err.value.message
    assert hook.handle({'op': 'started', 'instance': INSTANCE})['ok']
    _join(hook)
    device = domain.devices[ALIAS]
    assert device['xml'].findtext('target/size') == str(1024 * MIB)
    assert device['requested'] == 512 * MIB
    assert conductor.faults == []


def test_a_chunk_whose_size_was_given_back_counts_again_when_reattached():
    domain = fake_virtio_mem.FakeVmemDomain()
    endpoint, lease = _elastic(domain)
    cxl = endpoint._parts.cxl
    original = cxl.detach

    def failing(lease, extents):
        raise exception.DriverError(reason='pages are pinned')
    cxl.detach = failing
    with pytest.raises(exception.DriverError):
        endpoint.detach_memory(None, lease, [_chunk(1)], 'virtio-mem',
                               INSTANCE, partial=True)
    cxl.detach = original
    # The conductor keeps the chunk after all: the device asks for it
    # again, the region (still there) is not made again.
    regions = dict(cxl.regions[LEASE])
    details = endpoint.attach_memory(None, lease, [_chunk(1)], 'virtio-mem',
                                     INSTANCE, partial=True)
    assert details['chunk-1']['requested_mb'] == 512
    assert 'released' not in details['chunk-1']
    assert domain.updates == [256, 512]
    assert cxl.regions[LEASE] == regions
    # And counts once: a repeat changes nothing.
    endpoint.attach_memory(None, lease, [_chunk(1)], 'virtio-mem', INSTANCE,
                           partial=True)
    assert domain.updates == [256, 512]


class _NoLibvirt(object):
    uri = 'qemu:///system'

    def get(self, needed_for=None):
        raise AssertionError('a libvirt call while the hook holds the '
                             'domain')


def test_no_libvirt_call_while_the_hook_holds_the_domain():
    domain = fake_virtio_mem.FakeVmemDomain()
    endpoint, hook, conductor = _hooked(domain)
    lease = {'uuid': LEASE, 'max_mb': 1024}
    endpoint.attach_memory(None, lease, _chunks(), 'virtio-mem', INSTANCE)
    endpoint._parts.virtio_mem_attacher.connection = _NoLibvirt()
    with hook._held(INSTANCE):
        with pytest.raises(exception.DriverError) as err:
            endpoint.attach_memory(None, lease, [_chunk(2)], 'virtio-mem',
                                   INSTANCE, partial=True)
        assert 'is being started or stopped' in err.value.message
        assert 'chunk-2' not in endpoint._parts.cxl.regions[LEASE]
        # A shrink there has nothing to ask of QEMU (it is gone).
        endpoint.detach_memory(None, lease, [_chunk(1)], 'virtio-mem',
                               INSTANCE, partial=True)
    assert endpoint._parts.cxl.regions[LEASE] == {'chunk-0': 0}
