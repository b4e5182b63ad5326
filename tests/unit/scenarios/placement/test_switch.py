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

"""[placement]composable_enabled: with Placement off, nothing reaches it.

Off is the default (no [placement]auth_type): the standalone service, the
unit tests and the lease churn benchmark run that way, so the conductor
must not build a client, read anything more from the database, or start
a Placement loop.
"""

import datetime

import pytest

from composable.common import exception
from composable.common import states
from composable.common import utils
from composable.conductor.placement import claims as placement_claims
from composable.conductor.placement import client as pclient
from composable.conductor import rpcapi
from composable import conf
from composable.conf import placement as placement_conf
from composable.db import api as db_api
from tests import lease_rows
from tests.unit.api.base import api_env  # noqa: F401
from tests.unit.api.base import app  # noqa: F401
from tests.unit.api.base import client  # noqa: F401
from tests.unit.conductor import harness as h_mod

CONF = conf.CONF

# Everything in placement_claims the conductor may call besides enabled().
_ENTRY_POINTS = ('get_client', 'prepare_create', 'after_create',
                 'claim_allocated', 'claim', 'release', 'reconcile_pass',
                 'roll_back')


@pytest.fixture
def overrides():
    names = []

    def set_(name, value):
        CONF.set_override(name, value, 'placement')
        names.append(name)
    yield set_
    for name in names:
        CONF.clear_override(name, 'placement')


def test_enabled_follows_the_credentials_unless_told(overrides):
    assert placement_conf.enabled(CONF) is False
    overrides('auth_type', 'password')
    assert placement_conf.enabled(CONF) is True
    overrides('composable_enabled', False)
    assert placement_conf.enabled(CONF) is False


def test_forced_on_without_credentials_is_refused(overrides):
    overrides('composable_enabled', True)
    assert placement_claims.enabled() is True
    with pytest.raises(exception.ComposableException) as err:
        placement_claims.loops(None)
    assert 'auth_type is not set' in err.value.message


def test_loop_only_when_on_and_interval_set(overrides):
    assert placement_claims.loops(None) == []
    overrides('auth_type', 'password')
    overrides('composable_reconcile_interval', 7)
    assert placement_claims.loops(None) == [
        ('placement', 7, placement_claims.reconcile_pass)]
    overrides('composable_reconcile_interval', 0)
    assert placement_claims.loops(None) == []


@pytest.fixture
def untouchable(monkeypatch):
    """Any use of Placement, or of placement_claims past its switch,
    fails the test (and is recorded, in case something swallows it)."""
    calls = []

    def refuse(name):
        def _refused(*args, **kwargs):
            calls.append(name)
            raise AssertionError('%s called with Placement off' % name)
        return _refused

    for name in _ENTRY_POINTS:
        monkeypatch.setattr(placement_claims, name, refuse(name))
    monkeypatch.setattr(pclient.ReportClient, '_call',
                        refuse('ReportClient._call'))
    monkeypatch.setattr(pclient.ReportClient, 'from_conf',
                        classmethod(lambda cls, conf=None: refuse(
                            'ReportClient.from_conf')()))
    return calls


@pytest.fixture
def harness(tmp_path):
    CONF.set_override('connection',
                      'sqlite:///%s' % (tmp_path / 't.sqlite'), 'database')
    db_api.reset_facade()
    db_api.create_schema_for_tests()
    h = h_mod.Harness(rpc_timeout=3, fabric_timeout=3)
    h.start()
    try:
        yield h
    finally:
        h.stop()
        db_api.reset_facade()
        CONF.clear_override('connection', 'database')


def _uuid(created):
    return created['uuid'] if isinstance(created, dict) else created


def test_conductor_with_placement_off_never_reaches_it(harness, untouchable):
    assert not placement_claims.enabled()
    assert not any(t.name == 'conductor-placement'
                   for t in harness.conductor._threads)
    ctx = h_mod.user_context()

    # Create, bind, unbind, delete (the full release flow).
    uuid = _uuid(harness.create(memory_mb=1024, device_count=1))
    lease = harness.lease(uuid)
    assert lease.status == states.RESERVED
    assert lease.placement_consumer is None
    assert lease.reservation is None
    harness.api.bind_lease(ctx, uuid, harness.hosts['compute-0'].uuid)
    harness.wait(uuid, states.BOUND)
    harness.api.unbind_lease(ctx, uuid)
    harness.wait(uuid, states.RESERVED)
    harness.api.delete_lease(ctx, uuid)
    harness.wait(uuid, states.RELEASED)

    # Create and delete at once (the quick release).
    uuid = _uuid(harness.create(memory_mb=1024))
    harness.api.delete_lease(ctx, uuid)
    assert harness.lease(uuid).status == states.RELEASED

    # A deferred start, then expiry (the periodic tasks).
    later = utils.isotime(utils.utcnow() + datetime.timedelta(hours=1))
    uuid = _uuid(harness.create(memory_mb=1024, start_at=later))
    lease = harness.lease(uuid)
    past = utils.utcnow() - datetime.timedelta(seconds=1)
    lease_rows.write(h_mod.admin(), lease.id, {'start_at': past})
    harness.conductor.run_periodic_tasks()
    harness.idle()
    assert harness.wait(uuid, states.RESERVED).placement_consumer is None
    lease_rows.write(h_mod.admin(), lease.id, {'end_at': past})
    harness.conductor.run_periodic_tasks()
    harness.idle()
    harness.wait(uuid, states.RELEASED)

    # A cast for a pool is ignored.
    harness.conductor.sync_pool_placement(ctx, harness.memory_pool.uuid)
    assert untouchable == []


def test_api_casts_pool_changes_only_when_on(
        client, overrides, monkeypatch):  # noqa: F811
    casts = []
    monkeypatch.setattr(
        rpcapi.ConductorAPI, 'sync_pool_placement',
        lambda self, ctx, pool_uuid, provider_uuid=None: casts.append(
            (pool_uuid, provider_uuid)))
    assert client.post('/v1/fabrics', {'name': 'f',
                                       'driver': 'fake'}).status == 201
    made = client.post('/v1/pools', {'name': 'p1', 'kind': 'gpu',
                                     'fabric': 'f'})
    assert made.status == 201
    assert client.patch('/v1/pools/p1', {'reserved': 0}).status == 200
    assert casts == []

    overrides('auth_type', 'password')
    made = client.post('/v1/pools', {'name': 'p2', 'kind': 'gpu',
                                     'fabric': 'f'})
    assert client.patch('/v1/pools/p2', {'reserved': 0}).status == 200
    db_api.pool_update(h_mod.admin(), made.json['uuid'],
                       {'provider_uuid': 'f' * 8 + '-0000-4000-8000-' +
                        '0' * 12})
    assert client.delete('/v1/pools/p2').status == 204
    assert casts == [(made.json['uuid'], None), (made.json['uuid'], None),
                     (made.json['uuid'],
                      'ffffffff-0000-4000-8000-000000000000')]
