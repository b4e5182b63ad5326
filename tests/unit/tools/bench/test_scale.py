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

"""tools/bench/scale.py at a tiny size on SQLite: its fill gives the
schema of the migrations a consistent region, and every measure runs on
it, so the benchmark cannot rot between its (long) runs on MariaDB."""

import datetime
import importlib.util
import io
import os

from oslo_config import cfg
import pytest
import sqlalchemy as sa

from composable.common import rpc
from composable import conf
from composable.db import api as db_api
from composable.db import migration
from composable import fabric as fabric_drivers

CONF = conf.CONF
# Fewer than the benchmark's thousand: the fabric sync of each is what
# takes time on SQLite.
DEVICES = 40
PATH = os.path.join(os.path.dirname(__file__), '..', '..', '..', '..',
                    'tools', 'bench',
                    'scale.py')


@pytest.fixture(scope='module')
def bench():
    spec = importlib.util.spec_from_file_location('scale_bench', PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def filled(bench, tmp_path):
    url = 'sqlite:///%s' % (tmp_path / 'scale.sqlite')
    engine = sa.create_engine(url)
    migration.upgrade('head', engine=engine)
    info = bench.fill(engine, 50, devices=DEVICES)
    engine.dispose()
    try:
        yield url, info
    finally:
        rpc.cleanup()
        db_api.reset_facade()
        # The benchmark answers the fake driver's discovery itself.
        fabric_drivers.reset()
        for name, group in (('connection', 'database'),
                            ('transport_url', None),
                            ('auth_strategy', None),
                            ('shrink_hysteresis', 'elastic')):
            try:
                CONF.clear_override(name, group)
            except cfg.NoSuchOptError:
                pass


def test_fill_is_consistent(bench, filled):
    url, info = filled
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        def one(sql):
            return conn.execute(sa.text(sql)).scalar()
        assert one('SELECT COUNT(*) FROM leases') == 50
        assert one("SELECT COUNT(*) FROM leases WHERE status = "
                   "'released'") == 40
        assert one('SELECT COUNT(*) FROM devices') == DEVICES
        # Every pool's usage is what its live leases hold.
        for pool_id, kind, used in conn.execute(sa.text(
                'SELECT id, kind, used FROM pools')):
            if kind == 'memory':
                held = one('SELECT COALESCE(SUM(e.size_mb), 0) FROM '
                           'memory_extents e JOIN memory_nodes n ON '
                           'e.memory_node_id = n.id WHERE n.pool_id = %d'
                           % pool_id)
            else:
                held = one('SELECT COUNT(*) FROM devices WHERE pool_id = '
                           '%d AND lease_id IS NOT NULL' % pool_id)
            assert int(held) == used
        assert one("SELECT COUNT(*) FROM devices d JOIN leases l ON "
                   "d.lease_id = l.id WHERE l.status = 'released'") == 0
        assert one('SELECT COUNT(*) FROM lease_actions a JOIN leases l ON '
                   'a.lease_id = l.id WHERE l.uuid = :u'.replace(
                       ':u', "'%s'" % info['history_lease'])) == \
            info['history_actions'] >= bench.HISTORY_ACTIONS
    engine.dispose()


def test_api_measures_read_every_page(bench, filled, monkeypatch):
    url, info = filled
    from composable.common import service
    frozen = []
    # Not frozen for real: the test worker's objects would stay for good.
    monkeypatch.setattr(service.gc, 'freeze', lambda: frozen.append(1))
    result = bench.measure_api(url, info, requests=2, page_size=5)
    assert frozen == [1]
    assert set(result['api']) == {'list_first', 'list_filtered',
                                  'list_last', 'lease_detail',
                                  'lease_actions'}
    for name, times in result['api'].items():
        assert len(times) == 2 and min(times) > 0, name
    assert result['gc_max_ms'] >= 0


def test_the_last_page_marker_leaves_exactly_one_page(bench, filled):
    url, info = filled
    bench.configure(url)
    from composable.common import context as ctx_mod
    from composable.db import api as db_api
    marker, live = bench._last_page_marker(5)
    admin = ctx_mod.get_admin_context()
    page = db_api.lease_list(admin, filters={'status': sorted(
        s for s in bench_states() if s != 'released')}, limit=50,
        marker=marker)
    assert live > 6
    assert len(page) == 5


def bench_states():
    from composable.common import states
    return states.ALL_STATES


def test_measures_run_in_the_steady_state(bench, filled, monkeypatch):
    url, info = filled
    result = bench.measure(url, info, repeat=1, requests=1, page_size=5)
    assert set(result['passes']) == {
        'heartbeat', 'takeover', 'start', 'expire', 'reconcile',
        'node_check', 'fabric_sync', 'usage_prune', 'elastic_resize',
        'placement'}
    for name, figures in result['passes'].items():
        assert len(figures['ms']) == 1 and min(figures['ms']) > 0, name
        assert figures['interval'] > 0, name
    # Nothing was due: no pass started a flow, asked an agent anything
    # but its report, or wrote to Placement.
    assert result['acted_on'] == []
    assert result['placement_writes'] == 0
    # The Placement pass asks per pool (its provider, traits, aggregates,
    # inventory, and every consumer's allocations there) and lists the
    # providers once; nothing per lease.
    assert result['passes']['placement']['placement_calls'] == 4 * 5 + 1
    # The old usage samples are gone after the first pruning pass.
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        assert conn.execute(sa.text(
            'SELECT COUNT(*) FROM lease_usage WHERE taken_at < :t'),
            {'t': datetime.datetime.utcnow() - datetime.timedelta(
                days=7, minutes=1)}).scalar() == 0
    engine.dispose()
    out = io.StringIO()
    with pytest.raises(ValueError):
        # Without the API's measures the report says so, not "met".
        bench.report({50: result, 500: result}, out=out)
    from composable.common import service
    monkeypatch.setattr(service.gc, 'freeze', lambda: None)
    result.update(bench.measure_api(url, info, requests=1, page_size=5))
    out = io.StringIO()
    bench.report({50: result, 500: result}, out=out)
    last = out.getvalue().splitlines()[-1]
    assert last.startswith('scale: heartbeat_exp=0.00 ')
    assert 'list_first_p99_exp=' in last and 'meets_targets=' in last
    assert 'gc_max_exp=' in last


def test_exponent(bench):
    assert bench.exponent([1000, 10000, 100000], [1, 10, 100]) == \
        pytest.approx(1.0)
    assert bench.exponent([1000, 10000, 100000], [5, 5, 5]) == \
        pytest.approx(0.0)
    assert bench.exponent([1000, 10000], [1, 100]) == pytest.approx(2.0)
