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

"""ComposableFilter in Nova's own filter machinery, against a fake
composable API reached over HTTP through keystoneauth."""

import os
import subprocess
import sys
import threading

from nova import context as nova_context
import nova.conf
from nova import objects
from nova.scheduler import filters
from nova.scheduler import host_manager
from oslo_utils import uuidutils
import pytest

from composable.nova import scheduler
from tests.unit.nova import fake_api

CONF = nova.conf.CONF

AGG = 'a0000000-0000-4000-8000-00000000000a'
OTHER_AGG = 'b0000000-0000-4000-8000-00000000000b'
LEASE = '10000000-0000-4000-8000-000000000001'
POOL = '20000000-0000-4000-8000-000000000002'
FABRIC = '30000000-0000-4000-8000-000000000003'
INSTANCE = '40000000-0000-4000-8000-000000000004'


@pytest.fixture
def api():
    fake = fake_api.FakeComposableAPI()
    fake.fabrics[FABRIC] = {'uuid': FABRIC, 'aggregate_uuid': AGG}
    fake.pools[POOL] = {'uuid': POOL, 'fabric_uuid': FABRIC}
    fake.leases[LEASE] = {'uuid': LEASE, 'project_id': 'p1',
                          'status': 'reserved', 'instance_uuid': None,
                          'memory_pool_uuid': POOL,
                          'device_pool_uuid': None}
    intercept = fake.install()
    CONF.set_override('auth_type', 'none', scheduler.GROUP)
    CONF.set_override('endpoint_override', fake_api.ENDPOINT,
                      scheduler.GROUP)
    CONF.set_override('timeout', 5, scheduler.GROUP)
    yield fake
    intercept.uninstall_intercept()
    for name in ('auth_type', 'endpoint_override', 'timeout'):
        CONF.clear_override(name, scheduler.GROUP)


def hosts(count, in_aggregate=lambda i: i % 5 < 2):
    """``count`` HostStates; by default 40 % in the fabric's aggregate."""
    ours = objects.Aggregate(id=1, uuid=AGG, name='fabric', hosts=[],
                             metadata={})
    other = objects.Aggregate(id=2, uuid=OTHER_AGG, name='other', hosts=[],
                              metadata={})
    states = []
    for i in range(count):
        state = host_manager.HostState('host%04d' % i, 'node%04d' % i,
                                       uuidutils.generate_uuid())
        state.aggregates = [other, ours] if in_aggregate(i) else [other]
        states.append(state)
    return states


def spec(project='p1', lease=LEASE, instance=INSTANCE, with_context=True,
         hints=None, extra_specs=None):
    values = {'project_id': project, 'instance_uuid': instance,
              'num_instances': 1,
              'scheduler_hints': hints if hints is not None else (
                  {'composable_lease': [lease]} if lease else {})}
    if extra_specs is not None:
        values['flavor'] = objects.Flavor(
            name='f1', memory_mb=1024, vcpus=1, root_gb=1,
            extra_specs=extra_specs)
    if with_context:
        ctx = nova_context.RequestContext('u1', project)
        return objects.RequestSpec(ctx, **values)
    return objects.RequestSpec(**values)


def run(filter_, states, spec_obj, index=0):
    handler = filters.HostFilterHandler()
    return handler.get_filtered_objects([filter_], states, spec_obj, index)


def names(states):
    return sorted(s.host for s in states)


def expected(states):
    return names(s for s in states
                 if any(a.uuid == AGG for a in s.aggregates))


def test_no_hint_passes_every_host_without_io(api):
    states = hosts(100)
    passed = run(scheduler.ComposableFilter(), states, spec(lease=None))
    assert len(passed) == 100
    assert api.total == 0


def test_one_http_call_per_request_over_100_hosts(api):
    filter_ = scheduler.ComposableFilter()
    states = hosts(100)

    # A cold scheduler also learns the pool's aggregate (pool, fabric),
    # once for the process.
    passed = run(filter_, states, spec())
    assert names(passed) == expected(states)
    assert len(passed) == 40
    assert api.calls['/v1/leases/%s' % LEASE] == 1
    assert api.total == 3

    # Every later request: exactly one HTTP call for 100 hosts.
    before = api.total
    passed = run(filter_, states, spec())
    assert len(passed) == 40
    assert api.total - before == 1
    assert api.calls['/v1/leases/%s' % LEASE] == 2
    # And as many for 1,000 hosts.
    before = api.total
    assert len(run(filter_, hosts(1000), spec())) == 400
    assert api.total - before == 1
    # The composable API was asked at its microversions: pools at 1.3,
    # which shows the host of a pool of SR-IOV virtual functions.
    assert set(api.headers) == {'composable 1.0', 'composable 1.3'}


def test_host_passes_reads_the_lease_once_per_request(api):
    filter_ = scheduler.ComposableFilter()
    spec_obj = spec()
    states = hosts(100)
    passed = [s for s in states if filter_.host_passes(s, spec_obj)]
    assert names(passed) == expected(states)
    assert api.calls['/v1/leases/%s' % LEASE] == 1


def test_later_instances_of_a_request_are_not_filtered_again(api):
    filter_ = scheduler.ComposableFilter()
    states = hosts(10)
    spec_obj = spec()
    assert len(run(filter_, states, spec_obj, index=0)) == 4
    # Nova passes the hosts the first instance's filtering left.
    assert len(run(filter_, states, spec_obj, index=1)) == 10
    assert api.calls['/v1/leases/%s' % LEASE] == 1


def test_rebuild_is_not_filtered(api):
    spec_obj = spec(hints={'composable_lease': [LEASE],
                           '_nova_check_type': ['rebuild']})
    assert len(run(scheduler.ComposableFilter(), hosts(10), spec_obj)) == 10
    assert api.total == 0


def test_lease_of_another_project_passes_no_host(api):
    assert run(scheduler.ComposableFilter(), hosts(10),
               spec(project='p2')) == []


def test_unknown_lease_passes_no_host(api):
    missing = uuidutils.generate_uuid()
    assert run(scheduler.ComposableFilter(), hosts(10),
               spec(lease=missing)) == []
    assert api.calls['/v1/leases/%s' % missing] == 1


@pytest.mark.parametrize('status', ['requested', 'allocating',
                                    'alloc_failed', 'bound', 'releasing',
                                    'released', 'error'])
def test_lease_not_reserved_passes_no_host(api, status):
    api.leases[LEASE].update(status=status, instance_uuid=None)
    assert run(scheduler.ComposableFilter(), hosts(10), spec()) == []


def test_moving_the_instance_bound_to_the_lease_is_allowed(api):
    api.leases[LEASE].update(status='bound', instance_uuid=INSTANCE)
    assert len(run(scheduler.ComposableFilter(), hosts(10), spec())) == 4
    other = uuidutils.generate_uuid()
    assert run(scheduler.ComposableFilter(), hosts(10),
               spec(instance=other)) == []


def test_device_pool_aggregate_counts(api):
    api.leases[LEASE].update(memory_pool_uuid=None, device_pool_uuid=POOL)
    assert len(run(scheduler.ComposableFilter(), hosts(10), spec())) == 4


def test_sriov_lease_keeps_only_the_host_of_its_vf(api):
    api.pools[POOL]['sriov'] = {'host': 'host0006', 'vf_count': 4}
    api.leases[LEASE].update(memory_pool_uuid=None, device_pool_uuid=POOL)
    filter_ = scheduler.ComposableFilter()
    states = hosts(100)
    assert names(run(filter_, states, spec())) == ['host0006']
    spec_obj = spec()
    assert [s.host for s in states
            if filter_.host_passes(s, spec_obj)] == ['host0006']


def test_sriov_host_outside_the_aggregate_passes_no_host(api):
    api.pools[POOL]['sriov'] = {'host': 'host0003', 'vf_count': 4}
    api.leases[LEASE].update(device_pool_uuid=POOL)
    assert run(scheduler.ComposableFilter(), hosts(10), spec()) == []


def test_sriov_host_is_read_even_when_the_lease_has_its_aggregate(api):
    api.pools[POOL]['sriov'] = {'host': 'host0001', 'vf_count': 4}
    api.leases[LEASE].update(aggregate_uuid=AGG, memory_pool_uuid=None,
                             device_pool_uuid=POOL)
    assert names(run(scheduler.ComposableFilter(), hosts(10),
                     spec())) == ['host0001']


def test_an_older_composable_api_is_read_at_1_0(api):
    api.max_version = (1, 0)
    api.leases[LEASE].update(memory_pool_uuid=None, device_pool_uuid=POOL)
    assert len(run(scheduler.ComposableFilter(), hosts(10), spec())) == 4
    assert api.calls['/v1/pools/%s' % POOL] == 2  # 406, then 1.0


def test_fabric_without_aggregate_passes_no_host(api):
    api.fabrics[FABRIC]['aggregate_uuid'] = None
    assert run(scheduler.ComposableFilter(), hosts(10), spec()) == []


def test_lease_carrying_its_aggregate_needs_no_pool_lookup(api):
    api.leases[LEASE]['aggregate_uuid'] = AGG
    assert len(run(scheduler.ComposableFilter(), hosts(10), spec())) == 4
    assert api.total == 1


def test_api_failure_passes_no_host_and_is_not_retried_per_host(api):
    api.fail = 503
    filter_ = scheduler.ComposableFilter()
    spec_obj = spec()
    states = hosts(100)
    assert run(filter_, states, spec_obj) == []
    assert not any(filter_.host_passes(s, spec_obj) for s in states)
    assert api.total == 1


def test_request_without_context_is_cached_by_spec_object(api):
    filter_ = scheduler.ComposableFilter()
    first = spec(with_context=False)
    assert len(run(filter_, hosts(10), first)) == 4
    assert len([s for s in hosts(10) if filter_.host_passes(s, first)]) == 4
    assert api.calls['/v1/leases/%s' % LEASE] == 1
    second = spec(with_context=False)
    assert len(run(filter_, hosts(10), second)) == 4
    assert api.calls['/v1/leases/%s' % LEASE] == 2


def test_concurrent_requests_are_thread_safe(api):
    filter_ = scheduler.ComposableFilter()
    states = hosts(100)
    shared = spec()
    other = spec(project='p2')
    results = []
    errors = []
    barrier = threading.Barrier(16)

    def work(i):
        try:
            barrier.wait()
            spec_obj = shared if i % 2 else other
            results.append((i % 2, len(run(filter_, states, spec_obj))))
        except Exception as err:  # pragma: no cover
            errors.append(err)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert sorted(set(results)) == [(0, 0), (1, 40)]
    # Two requests: two lease reads, however many threads asked.
    assert api.calls['/v1/leases/%s' % LEASE] == 2


def test_nova_side_modules_import_nothing_of_the_service():
    code = (
        'import sys\n'
        'import composable.nova.scheduler, composable.nova.extra_specs\n'
        'bad = [m for m in sys.modules if m.startswith("composable.") and\n'
        '       not m.startswith("composable.nova")]\n'
        'assert not bad, bad\n'
        'import nova.conf\n'
        'assert nova.conf.CONF.composable.pool_cache_ttl == 300\n')
    env = dict(os.environ, OS_NOVA_DISABLE_EVENTLET_PATCHING='1')
    result = subprocess.run([sys.executable, '-c', code], env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]


# -- the free devices each host can reach ------------------------------

GPU_POOL = '20000000-0000-4000-8000-0000000000a1'
NIC_POOL = '20000000-0000-4000-8000-0000000000a2'
GPUS = {'resources:CUSTOM_COMPOSABLE_GPU': '2'}


def _device(api, number, pool=GPU_POOL, hosts=None, state='available',
            lease=None):
    uuid = '50000000-0000-4000-8000-%012d' % number
    api.devices[uuid] = {'uuid': uuid, 'pool_uuid': pool, 'state': state,
                         'lease_uuid': lease, 'reachable_hosts': hosts}
    return uuid


@pytest.fixture
def gpus(api):
    """A GPU pool on the fabric whose aggregate holds host0000, host0001,
    host0005 and host0006 (of hosts(10)), and its devices: host0000
    reaches three free ones, host0001 two, host0005 and host0006 one."""
    api.pools[GPU_POOL] = {'uuid': GPU_POOL, 'fabric_uuid': FABRIC,
                           'kind': 'gpu',
                           'resource_class': 'CUSTOM_COMPOSABLE_GPU'}
    _device(api, 1, hosts=['host0000', 'host0001'])
    _device(api, 2, hosts=['host0000'])
    _device(api, 3, hosts=None)
    # Taken or out of service: not free, whoever reaches them.
    _device(api, 4, hosts=['host0005'], state='reserved', lease=LEASE)
    _device(api, 5, hosts=['host0006'], state='maintenance')
    # No host at all.
    _device(api, 6, hosts=[])
    return api


def test_flavor_keeps_hosts_reaching_enough_free_devices(gpus):
    gpus.page_size = 2
    filter_ = scheduler.ComposableFilter()
    states = hosts(10)
    spec_obj = spec(lease=None, extra_specs=GPUS)
    assert names(run(filter_, states, spec_obj)) == ['host0000', 'host0001']
    # Nova's per-host path agrees, without asking again.
    before = gpus.total
    assert names(s for s in states
                 if filter_.host_passes(s, spec_obj)) == [
        'host0000', 'host0001']
    assert gpus.total == before
    # Every page of free devices, at 1.4; the pools; the fabric once.
    assert gpus.calls['/v1/devices'] == 2
    assert gpus.calls['/v1/pools'] == 1
    assert gpus.calls['/v1/fabrics/%s' % FABRIC] == 1
    assert 'composable 1.4' in gpus.headers
    # One GPU: every host of the aggregate reaches one (the one of every
    # host); a host outside it none.
    three = spec(lease=None, extra_specs={
        'resources:CUSTOM_COMPOSABLE_GPU': '1'})
    assert names(run(filter_, states, three)) == [
        'host0000', 'host0001', 'host0005', 'host0006']
    # Request groups add up: four are more than any host reaches.
    four = spec(lease=None, extra_specs={
        'resources1:CUSTOM_COMPOSABLE_GPU': '2',
        'resources2:CUSTOM_COMPOSABLE_GPU': '2'})
    assert run(filter_, states, four) == []


def test_flavor_asking_for_a_class_no_pool_has_passes_no_host(gpus):
    nics = spec(lease=None, extra_specs={
        'resources:CUSTOM_COMPOSABLE_PCI_NIC': '1'})
    assert run(scheduler.ComposableFilter(), hosts(10), nics) == []


def test_flavor_without_composable_devices_costs_nothing(gpus):
    plain = spec(lease=None, extra_specs={'resources:VCPU': '4',
                                          'hw:cpu_policy': 'dedicated',
                                          'resources:CUSTOM_OTHER': '1'})
    assert len(run(scheduler.ComposableFilter(), hosts(10), plain)) == 10
    assert gpus.total == 0


def test_sriov_functions_count_on_their_host_only(gpus):
    gpus.pools[NIC_POOL] = {
        'uuid': NIC_POOL, 'fabric_uuid': FABRIC, 'kind': 'pci',
        'resource_class': 'CUSTOM_COMPOSABLE_PCI_NIC',
        'sriov': {'host': 'host0005', 'vf_count': 2}}
    _device(gpus, 7, pool=NIC_POOL)
    nics = spec(lease=None, extra_specs={
        'resources:CUSTOM_COMPOSABLE_PCI_NIC': '1'})
    assert names(run(scheduler.ComposableFilter(), hosts(10),
                     nics)) == ['host0005']


def test_an_api_older_than_1_4_tells_nothing_of_reachability(gpus):
    gpus.max_version = (1, 3)
    assert len(run(scheduler.ComposableFilter(), hosts(10),
                   spec(lease=None, extra_specs=GPUS))) == 10
    assert gpus.calls['/v1/devices'] == 1


def test_devices_unreadable_pass_no_host(gpus):
    gpus.fail = 503
    filter_ = scheduler.ComposableFilter()
    spec_obj = spec(lease=None, extra_specs=GPUS)
    states = hosts(10)
    assert run(filter_, states, spec_obj) == []
    assert not any(filter_.host_passes(s, spec_obj) for s in states)
    assert gpus.total == 1


def test_a_hinted_lease_needs_a_host_reaching_its_devices(gpus):
    held = _device(gpus, 8, hosts=['host0005'], state='reserved',
                   lease=LEASE)
    gpus.leases[LEASE].update(memory_pool_uuid=None,
                              device_pool_uuid=GPU_POOL,
                              devices=[{'uuid': held}])
    gpus.pools[GPU_POOL]['sriov'] = None
    # host0005 reaches the lease's device; host0000, host0001 and
    # host0006 reach a free one of its pool to trade it for (the one of
    # every host).
    assert names(run(scheduler.ComposableFilter(), hosts(10), spec())) == [
        'host0000', 'host0001', 'host0005', 'host0006']
    # With no free device left that others reach, only host0005.
    for number in (1, 2, 3):
        gpus.devices['50000000-0000-4000-8000-%012d' % number][
            'state'] = 'maintenance'
    assert names(run(scheduler.ComposableFilter(), hosts(10), spec())) == [
        'host0005']
