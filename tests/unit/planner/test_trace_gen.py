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

import io

import numpy as np
import pytest

from composable.planner import trace as trace_mod
from tools import trace_gen


def test_generated_trace_has_the_giraph_ratios():
    names, times, demand = trace_gen.generate(nodes=12, hours=1.0, seed=3)
    node, total = trace_gen.ratios(demand)
    assert node == pytest.approx(2.78, abs=0.05)
    assert total == pytest.approx(1.68, abs=0.05)
    assert demand.shape == (12, times.size)
    assert (demand >= 0).all()


def test_same_seed_same_trace_and_it_reads_back():
    first = trace_gen.generate(nodes=3, hours=0.25, seed=9)
    second = trace_gen.generate(nodes=3, hours=0.25, seed=9)
    other = trace_gen.generate(nodes=3, hours=0.25, seed=10)
    assert np.array_equal(first[2], second[2])
    assert not np.array_equal(first[2], other[2])
    out = io.StringIO()
    trace_gen.write_csv(out, *first)
    samples = trace_mod.parse(out.getvalue().splitlines(keepends=True))
    grid = trace_mod.to_grid(samples)
    assert np.array_equal(grid.demand, first[2])


def test_impossible_ratios_are_refused():
    with pytest.raises(ValueError, match='aggregate'):
        trace_gen.generate(nodes=3, node_ratio=1.5, aggregate_ratio=2.0)
    with pytest.raises(ValueError, match='two nodes'):
        trace_gen.generate(nodes=1)
