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

import os

import numpy as np
import pytest

from composable.planner import trace


def _parse(text):
    return trace.parse(text.splitlines(keepends=True), source='t.csv')


def test_reads_comments_blank_lines_and_lays_an_even_grid(tmp_path):
    path = tmp_path / 'trace.csv'
    path.write_text('# a comment\n'
                    '\n'
                    'timestamp_s,node,used_mb\n'
                    '0,a,100\n'
                    '20,b,7\n'
                    '10,a,300\n'
                    '30,a,200\n'
                    '30,b,9\n')
    loaded = trace.load(str(path))
    assert loaded.nodes == ['a', 'b']
    assert loaded.step == 10.0      # median of a's 10 s and b's 10 s
    assert loaded.duration == 30.0
    # b has no sample before 20 s: it used nothing then; a's 20 s is
    # its last sample, carried forward.
    assert loaded.demand.tolist() == [[100, 300, 300, 200], [0, 0, 7, 9]]


def test_an_explicit_step_overrides_the_inferred_one():
    samples = _parse('timestamp_s,node,used_mb\n0,a,1\n10,a,2\n20,a,3\n')
    grid = trace.to_grid(samples, step=5.0)
    assert grid.demand.tolist() == [[1, 1, 2, 2, 3]]


@pytest.mark.parametrize('text, line, message', [
    ('time,node,used\n0,a,1\n', 1, 'the header must be'),
    ('# c\n\ntimestamp_s,node\n', 3, 'the header must be'),
    ('timestamp_s,node,used_mb\n0,a,1\n10,a\n', 3, 'expected 3 fields'),
    ('timestamp_s,node,used_mb\n0,a,1,2\n', 2, 'expected 3 fields'),
    ('timestamp_s,node,used_mb\nzero,a,1\n', 2, "timestamp_s 'zero' is "
     'not a number'),
    ('timestamp_s,node,used_mb\n0,a,lots\n', 2, "used_mb 'lots' is not"),
    ('timestamp_s,node,used_mb\n0,a,-5\n', 2, "used_mb '-5' is negative"),
    ('timestamp_s,node,used_mb\n0,a,nan\n', 2, 'not a finite number'),
    ('timestamp_s,node,used_mb\n0,a,inf\n', 2, 'not a finite number'),
    ('timestamp_s,node,used_mb\n-1,a,5\n', 2, 'negative'),
    ('timestamp_s,node,used_mb\n0, ,5\n', 2, 'node name is empty'),
    ('timestamp_s,node,used_mb\n0,a,1\n10,b,1\n10,a,2\n5,a,3\n', 5,
     "timestamp 5 of node 'a' is not after its previous sample \\(10\\)"),
    ('timestamp_s,node,used_mb\n0,a,1\n0,a,2\n', 3, 'not after'),
    ('timestamp_s,node,used_mb\n', 1, 'holds no sample'),
    ('# only a comment\n', 1, 'no header line'),
])
def test_malformed_traces_name_the_line(text, line, message):
    with pytest.raises(trace.TraceError, match=message) as caught:
        _parse(text)
    assert caught.value.line == line
    assert str(caught.value).startswith('t.csv:%d: ' % line)


def test_single_sample_nodes_need_a_step():
    samples = _parse('timestamp_s,node,used_mb\n0,a,1\n5,b,2\n')
    with pytest.raises(trace.TraceError, match='--step'):
        trace.to_grid(samples)
    grid = trace.to_grid(samples, step=5.0)
    assert grid.demand.tolist() == [[1, 1], [0, 2]]


def test_a_grid_too_large_is_refused():
    samples = _parse('timestamp_s,node,used_mb\n0,a,1\n1e9,a,2\n')
    with pytest.raises(trace.TraceError, match='longer --step'):
        trace.to_grid(samples, step=1.0)


def test_unreadable_files_are_errors(tmp_path):
    with pytest.raises(trace.TraceError, match='No such file'):
        trace.load(str(tmp_path / 'missing.csv'))
    binary = tmp_path / 'binary.csv'
    binary.write_bytes(b'timestamp_s,node,used_mb\n0,\xff\xfe,1\n')
    with pytest.raises(trace.TraceError, match='not UTF-8'):
        trace.load(str(binary))


def test_the_sample_trace_is_valid():
    loaded = trace.load(os.path.join(os.path.dirname(__file__), '..', '..',
                                     '..', 'etc', 'composable',
                                     'plan-sample-trace.csv'))
    assert len(loaded.nodes) == 6
    assert loaded.step == 30.0
    assert np.all(loaded.demand > 0)
