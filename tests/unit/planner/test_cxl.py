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

"""The CXL tier of the planner: Pond's DRAM savings on a trace small
enough to work out by hand."""

import json

import pytest

from composable.cmd import plan
from composable.planner import cxl
from composable.planner import trace as trace_mod

# Two nodes, one sample a second, 1024 MiB each but for one second at
# 2048 MiB, a at t=1 and b at t=3: their peaks never coincide.
ROWS = ['timestamp_s,node,used_mb',
        '0,a,1024', '1,a,2048', '2,a,1024', '3,a,1024',
        '0,b,1024', '1,b,1024', '2,b,1024', '3,b,2048']


def small_trace():
    return trace_mod.to_grid(trace_mod.parse(ROWS))


def test_half_pooled_saves_a_quarter():
    # Static: 2048 + 2048 = 4096. Half pooled: each keeps 1024 local and
    # needs 1024 of the pool at its own peak; the pool's largest sum is
    # 1024 (t=1: a, t=3: b). 2048 + 1024 = 3072: 1024 saved, 25 %.
    tier = cxl.tier(small_trace(), cxl.Parameters(attach_delay_s=0), 0.5)
    assert tier.static_mb == 4096
    assert tier.local_mb == 2048
    assert tier.pool_mb == [1024]
    assert tier.saved_mb == 1024
    assert tier.saved == pytest.approx(0.25)
    # Pool pages in use: 1024 (a, t=1) + 1024 (b, t=3) of 10240 MiB-s.
    assert tier.pooled_use == pytest.approx(0.2)
    # Every access 1.5 times as long on the pool: 1 + 0.5 x 0.2.
    slow = cxl.tier(small_trace(), cxl.Parameters(attach_delay_s=0,
                                                  slowdown=1.5), 0.5)
    assert slow.slowdown == pytest.approx(1.1)


def test_chunks_round_the_need_up():
    # 40 % pooled: local ceil(0.6 x 2048) = 1229 each; a needs 819 at
    # t=1, 4 chunks of 256 = 1024 (3 of 256 would not do). 2458 + 1024
    # = 3482: 614 saved.
    tier = cxl.tier(small_trace(), cxl.Parameters(attach_delay_s=0), 0.4)
    assert tier.local_mb == 2458
    assert tier.pool_mb == [1024]
    assert tier.saved_mb == 614
    # With chunks of 1000 MiB: 1 chunk, 1000 MiB.
    tier = cxl.tier(small_trace(), cxl.Parameters(attach_delay_s=0,
                                                  chunk_mb=1000), 0.4)
    assert tier.pool_mb == [1000]
    assert tier.saved_mb == 638


def test_attach_delay_holds_chunks_early():
    # A region takes 2 s to online: a holds its 1024 from t=0 (needed at
    # t=1), b from t=1 (needed at t=3): at t=1 both hold 1024, the pool
    # needs 2048 and nothing is saved.
    tier = cxl.tier(small_trace(), cxl.Parameters(attach_delay_s=2), 0.5)
    assert tier.pool_mb == [2048]
    assert tier.saved_mb == 0
    # 1 s: a from t=0, b from t=2: never together; 25 % again.
    tier = cxl.tier(small_trace(), cxl.Parameters(attach_delay_s=1), 0.5)
    assert tier.pool_mb == [1024]


def test_pools_of_one_node_save_nothing():
    # A pool per node is each node's own peak again.
    tier = cxl.tier(small_trace(), cxl.Parameters(attach_delay_s=0,
                                                  pool_nodes=1), 0.5)
    assert tier.pool_mb == [1024, 1024]
    assert tier.saved_mb == 0


def test_nothing_pooled_nothing_saved():
    tier = cxl.tier(small_trace(), cxl.Parameters(), 0.0)
    assert tier.pool_mb == [0.0]
    assert tier.saved_mb == 0
    assert tier.slowdown == 1.0


@pytest.mark.parametrize('params, shares, words', [
    (cxl.Parameters(), [1.5], 'CXL share must be between 0 and 1'),
    (cxl.Parameters(chunk_mb=0), [0.5], 'CXL chunk must be a positive'),
    (cxl.Parameters(slowdown=0.5), [0.5], 'CXL slowdown must be a number '
                                          'of at least 1'),
    (cxl.Parameters(attach_delay_s=-1), [0.5], 'CXL attach delay must be '
                                               'at least 0'),
    (cxl.Parameters(pool_nodes=-2), [0.5], 'CXL pool nodes must be'),
])
def test_bad_parameters(params, shares, words):
    with pytest.raises(ValueError) as err:
        cxl.tiers(small_trace(), params, shares)
    assert words in str(err.value)


@pytest.fixture
def trace_file(tmp_path):
    path = tmp_path / 'trace.csv'
    path.write_text('\n'.join(ROWS) + '\n')
    return str(path)


def test_command_reports_the_tier(trace_file, capsys):
    assert plan.main([trace_file, '--format', 'json', '--observation', '2',
                      '--prediction', '1', '--attach-delay', '0',
                      '--cxl-share', '25%,50%', '--cxl-attach-delay',
                      '0']) == 0
    data = json.loads(capsys.readouterr().out)
    half = data['cxl'][1]
    assert half['share'] == 0.5
    assert half['saved_mb'] == 1024
    assert half['saved_pct'] == pytest.approx(25.0)
    assert data['cxl'][0]['share'] == 0.25
    # The network pool's plan is there as before.
    assert data['static_mb'] == 4096


def test_command_table_and_bad_share(trace_file, capsys):
    assert plan.main([trace_file, '--observation', '2', '--prediction', '1',
                      '--attach-delay', '0', '--cxl-share', '50%',
                      '--cxl-attach-delay', '0']) == 0
    out = capsys.readouterr().out
    assert 'CXL, 50 % of memory pooled' in out
    assert 'DRAM saved 1024 MiB (25 %)' in out
    assert plan.main([trace_file, '--observation', '2', '--prediction', '1',
                      '--attach-delay', '0', '--cxl-share', '150%']) == 2
    assert 'CXL share must be between 0 and 1' in capsys.readouterr().err
