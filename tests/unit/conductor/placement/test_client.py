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

"""Report client and sync helpers without a Placement (fake adapter)."""

import types

from keystoneauth1 import loading as ks_loading
import pytest

from composable.common import resource_classes as rc
from composable.conductor.placement import batch
from composable.conductor.placement import client as pclient
from composable.conductor.placement import sync
from composable import conf

CONF = conf.CONF


class Response(object):
    def __init__(self, status, body=None):
        self.status_code = status
        self._body = body
        self.content = b'x' if body is not None else b''
        self.text = str(body)

    def json(self):
        return self._body


class ScriptedAdapter(object):
    """Answers requests from a list of (method, url, response)."""

    def __init__(self, script):
        self.script = list(script)
        self.requests = []

    def request(self, url, method, **kwargs):
        self.requests.append((method, url, kwargs))
        want_method, want_url, response = self.script.pop(0)
        assert (method, url) == (want_method, want_url)
        return response


def conflict():
    return Response(409, {'errors': [{'code': 'placement.concurrent_update',
                                      'detail': 'generation changed'}]})


def test_normalize_trait():
    assert rc.normalize_trait('HW_GPU_API_CUDA_V10_0') == \
        'HW_GPU_API_CUDA_V10_0'
    assert rc.normalize_trait('CUSTOM_fast-ram') == 'CUSTOM_FAST_RAM'
    assert rc.normalize_trait('a100 80gb') == 'CUSTOM_A100_80GB'


def test_pool_inventory_and_traits():
    pool = types.SimpleNamespace(
        total=8192, reserved=9000, step_size=1024, name='m',
        resource_class='CUSTOM_COMPOSABLE_MEMORY_MB', traits=['fast'],
        fabric=types.SimpleNamespace(aggregate_uuid='agg'))
    assert sync.pool_inventory(pool) == {'CUSTOM_COMPOSABLE_MEMORY_MB': {
        'total': 8192, 'reserved': 8192, 'min_unit': 1024,
        'max_unit': 8192, 'step_size': 1024, 'allocation_ratio': 1.0}}
    assert sync.pool_traits(pool) == {
        'MISC_SHARES_VIA_AGGREGATE', 'CUSTOM_COMPOSABLE_POOL',
        'CUSTOM_FAST'}
    assert sync.pool_aggregates(pool) == {'agg'}
    pool.total = 512  # less than one step: nothing to offer
    assert sync.pool_inventory(pool) == {}


def test_lease_resources_come_from_extents_and_devices():
    mem = types.SimpleNamespace(provider_uuid='rp-m',
                                resource_class='CUSTOM_COMPOSABLE_MEMORY_MB')
    gpu = types.SimpleNamespace(provider_uuid='rp-g',
                                resource_class='CUSTOM_COMPOSABLE_GPU')
    lease = types.SimpleNamespace(
        memory_pool=mem,
        extents=[types.SimpleNamespace(size_mb=1024)] * 3,
        devices=[types.SimpleNamespace(pool_id=7, pool=gpu)] * 2)
    assert sync.lease_resources(lease) == {
        'rp-m': {'CUSTOM_COMPOSABLE_MEMORY_MB': 3072},
        'rp-g': {'CUSTOM_COMPOSABLE_GPU': 2}}
    lease.extents, lease.devices = [], []
    assert sync.lease_resources(lease) == {}


def test_allocation_conflict_rereads_the_consumer_generation():
    url = '/allocations/c1'
    adapter = ScriptedAdapter([
        ('GET', url, Response(200, {'allocations': {},
                                    'consumer_generation': None})),
        ('PUT', url, conflict()),
        ('GET', url, Response(200, {
            'allocations': {'rp': {'resources': {'X': 1}}},
            'consumer_generation': 4, 'project_id': 'p',
            'user_id': 'u'})),
        ('PUT', url, Response(204)),
    ])
    client = pclient.ReportClient(adapter, retry_delay=0)
    assert client.put_allocations('c1', {'rp': {'X': 2}}, 'p', 'u')
    first, second = adapter.requests[1][2], adapter.requests[3][2]
    assert first['json']['consumer_generation'] is None
    assert second['json']['consumer_generation'] == 4
    assert second['json']['allocations'] == {'rp': {'resources': {'X': 2}}}
    assert second['microversion'] == '1.38'


def test_conflicts_are_bounded():
    url = '/resource_providers/rp/traits'
    script = []
    for _ in range(3):
        script.append(('GET', url, Response(200, {
            'resource_provider_generation': 1, 'traits': []})))
        script.append(('PUT', url, conflict()))
    client = pclient.ReportClient(ScriptedAdapter(script), retries=2,
                                  retry_delay=0)
    with pytest.raises(pclient.GenerationConflict) as err:
        client.set_traits('rp', ['HW_CPU_X86_AVX2'])
    assert err.value.code == 409


def test_other_errors_are_not_retried():
    url = '/resource_providers/rp/inventories'
    adapter = ScriptedAdapter([
        ('PUT', '/resource_classes/CUSTOM_X', Response(204)),
        ('GET', url, Response(200, {'resource_provider_generation': 1,
                                    'inventories': {}})),
        ('PUT', url, Response(400, {'errors': [
            {'code': 'placement.undefined_code', 'detail': 'bad'}]})),
    ])
    client = pclient.ReportClient(adapter, retry_delay=0)
    with pytest.raises(pclient.PlacementError) as err:
        client.set_inventories('rp', {'CUSTOM_X': {'total': 1}})
    assert err.value.status == 400
    assert 'bad' in err.value.message


def test_placement_options_are_registered():
    assert CONF.placement.service_type == 'placement'
    assert CONF.placement.valid_interfaces == ['internal', 'public']
    assert CONF.placement.composable_generation_retries == 5
    names = {opt.dest for opt in ks_loading.get_session_conf_options()}
    assert names <= set(CONF.placement)


def test_delete_consumer_is_one_request():
    adapter = ScriptedAdapter([
        ('DELETE', '/allocations/c1', Response(204)),
        ('DELETE', '/allocations/c2', Response(404, {'errors': [
            {'code': 'placement.undefined_code', 'detail': 'none'}]})),
    ])
    client = pclient.ReportClient(adapter, retry_delay=0)
    assert client.delete_consumer('c1') is True
    assert client.delete_consumer('c2') is False


def _writer(script, **kwargs):
    adapter = ScriptedAdapter(script)
    client = pclient.ReportClient(adapter, retry_delay=0)
    writer = batch.BatchWriter(lambda: client, **kwargs)
    return writer, adapter


def test_batch_claim_then_release():
    writer, adapter = _writer([
        ('POST', '/allocations', Response(204)),
        ('GET', '/resource_providers/rp/usages',
         Response(200, {'usages': {'X': 2}})),
        ('POST', '/allocations', Response(204)),
    ])
    try:
        writer.claim('c1', {'rp': {'X': 2}}, {'rp': {'X': 4}}, 'p', 'u')
        assert writer.release('c1') is True
        # Not written by this writer: the caller deletes it.
        assert writer.release('c2') is False
    finally:
        writer.close()
    claim = adapter.requests[0][2]
    assert claim['microversion'] == '1.38'
    assert claim['json'] == {'c1': {
        'allocations': {'rp': {'resources': {'X': 2}}},
        'consumer_generation': None, 'project_id': 'p', 'user_id': 'u',
        'consumer_type': 'COMPOSABLE_LEASE'}}
    release = adapter.requests[2][2]['json']['c1']
    assert release['allocations'] == {}
    assert release['consumer_generation'] == 1
    assert adapter.script == []


def test_batch_refused_for_capacity_claims_alone():
    writer, adapter = _writer([
        ('POST', '/allocations', Response(409, {'errors': [{
            'code': 'placement.undefined_code',
            'detail': 'The requested amount would exceed the capacity'}]})),
    ])
    try:
        with pytest.raises(batch.ClaimAlone):
            writer.claim('c1', {'rp': {'X': 2}}, {'rp': {'X': 4}}, 'p',
                         'u')
    finally:
        writer.close()
    # Not known as written: its release is the caller's.
    assert writer.release('c1') is False


def test_batch_over_capacity_is_withdrawn():
    writer, adapter = _writer([
        ('POST', '/allocations', Response(204)),
        ('GET', '/resource_providers/rp/usages',
         Response(200, {'usages': {'X': 5}})),
        ('POST', '/allocations', Response(204)),
    ])
    try:
        with pytest.raises(batch.ClaimAlone):
            writer.claim('c1', {'rp': {'X': 2}}, {'rp': {'X': 4}}, 'p',
                         'u')
    finally:
        writer.close()
    undo = adapter.requests[2][2]['json']['c1']
    assert undo['allocations'] == {} and undo['consumer_generation'] == 1
    assert writer.stats['withdrawn'] == 1


def test_batch_conflict_goes_again_once_then_alone():
    writer, adapter = _writer([
        ('POST', '/allocations', conflict()),
        ('POST', '/allocations', conflict()),
    ], conflict_pause=0)
    try:
        with pytest.raises(batch.ClaimAlone):
            writer.claim('c1', {'rp': {'X': 2}}, {'rp': {'X': 4}}, 'p',
                         'u')
    finally:
        writer.close()
    assert adapter.script == []


def test_batch_unavailable_fails_after_the_wait():
    writer, adapter = _writer([
        ('POST', '/allocations', Response(503, None)),
    ], unavailable_wait=0)
    try:
        with pytest.raises(pclient.PlacementUnavailable):
            writer.claim('c1', {'rp': {'X': 2}}, {'rp': {'X': 4}}, 'p',
                         'u')
    finally:
        writer.close()
