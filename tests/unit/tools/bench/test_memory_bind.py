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

"""The phase breakdown and budgets of tools/bench/memory_bind.py, on
made-up log lines (the benchmark itself runs the real processes)."""

import datetime
import importlib.util
import os

import pytest

pytest.importorskip('libvirt')

PATH = os.path.join(os.path.dirname(__file__), '..', '..', '..', '..',
                    'tools', 'bench',
                    'memory_bind.py')


@pytest.fixture(scope='module')
def bench():
    spec = importlib.util.spec_from_file_location('memory_bind_bench', PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


T0 = datetime.datetime(2026, 11, 27, 11, 0, 0).timestamp()
LINES = {
    'api-call': ('conductor-0', 'Lease 7: reserved -bind-> binding'),
    'handoff': ('conductor-0', 'Lease 9d: bind started'),
    'prepare': ('memory-0', 'Exporting extent 53 of lease 9d to iqn'),
    'export': ('memory-0', 'Exported extent 53 (128 MiB) as iqn'),
    'export-ack': ('conductor-0', 'Lease 9d: extents exported, attaching'),
    'attach-rpc': ('compute-0', 'Attaching 1 extent(s) of lease 9d'),
    'attach-prep': ('compute-0', 'Hot-plugging memory extent 53 (target'),
    'hotplug': ('compute-0', 'Hot-plugged extent 53 into instance dc'),
    'guest-swap': ('compute-0', 'Instance dc: swapon /dev/vda (extent 53)'),
    'attach-ack': ('conductor-0', 'Lease 9d: memory attached on compute-0'),
    'bound': ('conductor-0', 'Lease 7: binding -done-> bound'),
}


def _line(at, text):
    stamp = datetime.datetime.fromtimestamp(at).strftime(
        '%Y-%m-%d %H:%M:%S.%f')[:-3]
    return '%s 4752 DEBUG composable.x [-] %s\n' % (stamp, text)


def _logs(bench, tmp_path, binds, skip=(), late_swap=None):
    """Log files of ``binds`` binds, one mark every 10 ms from the POST
    (1 s apart); the marks of ``skip`` left out; with ``late_swap`` the
    guest-swap mark that many seconds after the POST (after bound).
    Their log_marks."""
    lines = {}
    for n in range(binds):
        posted = T0 + n
        for i, (phase, (proc, text)) in enumerate(LINES.items()):
            if phase in skip:
                continue
            at = posted + 0.01 * (i + 1)
            if phase == 'guest-swap' and late_swap is not None:
                at = posted + late_swap
            lines.setdefault(proc, []).append(_line(at, text))
    for proc, text in lines.items():
        text.sort()
        (tmp_path / (proc + '.log')).write_text(''.join(text))
    return {proc: bench.log_marks(str(tmp_path / (proc + '.log')))
            for proc in ('conductor-0', 'memory-0', 'compute-0')}


def _windows(binds):
    return [(T0 + n, T0 + n + 0.125, T0 + n + 0.2, T0 + n + 0.6)
            for n in range(binds)]


def test_each_phase_ends_at_its_mark(bench, tmp_path):
    """A tree whose bind waits for the guest's swap-on: it is a phase of
    the bind."""
    times, after = bench.phase_times(_logs(bench, tmp_path, 3), _windows(3))
    assert list(times) == [p[0] for p in bench.PHASES]
    for phase, values in times.items():
        expected = 15.0 if phase == 'seen' else 10.0
        assert values == pytest.approx([expected] * 3, abs=1.5), phase
    assert after == {}


def test_a_swapon_after_bound_is_measured_on_its_own(bench, tmp_path):
    """The bind answers once the disk is plugged: the swap-on comes after
    bound, even after the next GET (0.2 s) and is looked for until the
    unbind ended; it is measured from the bound mark, outside the
    bind's total."""
    times, after = bench.phase_times(
        _logs(bench, tmp_path, 2, late_swap=0.3), _windows(2))
    assert 'guest-swap' not in times
    assert list(times)[-4:] == ['hotplug', 'attach-ack', 'bound', 'seen']
    assert times['attach-ack'] == pytest.approx([20.0, 20.0], abs=1.5)
    assert sum(v[0] for v in times.values()) == pytest.approx(125.0,
                                                              abs=1.5)
    # bound is the 11th mark: 110 ms after the POST.
    assert after == {bench.AFTER_BOUND: pytest.approx([190.0, 190.0],
                                                      abs=1.5)}


def test_a_mark_an_older_tree_does_not_log_merges_its_phase(bench,
                                                            tmp_path):
    times, _after = bench.phase_times(
        _logs(bench, tmp_path, 2, skip=('handoff', 'export-ack')), _windows(2))
    assert 'handoff+prepare' in times and 'handoff' not in times
    assert 'export-ack+attach-rpc' in times
    assert times['handoff+prepare'] == pytest.approx([20.0, 20.0], abs=1.5)
    # Every bind's phases still add up to its whole time.
    assert sum(v[0] for v in times.values()) == pytest.approx(125.0,
                                                              abs=1.5)
    assert bench.budget_of('handoff+prepare') == (
        bench.BUDGETS['handoff'] + bench.BUDGETS['prepare'])


def test_a_phase_past_its_budget_is_named_and_fails_the_run(bench,
                                                            capsys):
    quick = {p: [1.0, 1.0] for p in bench.BUDGETS}
    assert bench.report([10.0, 12.0], quick, ((0.5,) * 3, (0.5,) * 3),
                        1.0) == []
    slow = dict(quick, export=[bench.BUDGETS['export'] * 2 + 1] * 2)
    over = bench.report([10.0, 12.0], slow, ((0.5,) * 3, (0.5,) * 3), 2.0)
    assert over == ['export']
    out, err = capsys.readouterr()
    assert 'memory_bind: export is over its budget' in err
    assert out.splitlines()[-1].endswith('budget=over:export')
    # A scale that covers it (a loaded machine) lets it pass.
    assert bench.report([10.0, 12.0], slow, ((0.5,) * 3, (0.5,) * 3),
                        3.0) == []


def test_the_swapon_after_bound_has_its_own_budget(bench, capsys):
    quick = {p: [1.0, 1.0] for p in bench.BUDGETS if p != bench.AFTER_BOUND}
    budget = bench.BUDGETS[bench.AFTER_BOUND]
    late = {bench.AFTER_BOUND: [budget * 2, budget * 3]}
    over = bench.report([10.0, 12.0], quick, ((0.5,) * 3, (0.5,) * 3),
                        1.0, late)
    assert over == ['swap-on-after-bound']
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert lines[-2] == ('memory_bind: swap-on-after-bound p50_ms=%.1f '
                         'p99_ms=%.1f budget=over' % (
                             budget * 2.5, budget * 2.99))
    assert lines[-1].startswith('memory_bind: p50_ms=11.0 p99_ms=12.0 ')
    assert lines[-1].endswith('budget=over:swap-on-after-bound')
    assert 'swap-on (after bound)' in out and 'not in the total' in out
    # Within its budget, the bind's summary is ok.
    assert bench.report([10.0, 12.0], quick, ((0.5,) * 3, (0.5,) * 3),
                        1.0, {bench.AFTER_BOUND: [10.0, 20.0]}) == []
    # The bind's own budget is the target: 60 ms p50, 150 ms p99.
    assert bench.TOTAL_BUDGET == (60, 150)
    assert bench.report([70.0, 70.0], quick, ((0.5,) * 3, (0.5,) * 3),
                        1.0) == ['total-p50']


def test_the_wait_for_bound_follows_the_log_from_its_end(bench, tmp_path):
    path = tmp_path / 'conductor-0.log'
    path.write_text(_line(T0, 'Lease 7: binding -done-> bound'))
    log = bench.LogFollower(str(path))
    # What was logged before (the previous bind) does not count, nor an
    # unbind's transition, nor half a line.
    with open(path, 'a') as f:
        f.write(_line(T0 + 1, 'Lease 7: unbinding -done-> reserved'))
        f.write(_line(T0 + 2, 'Lease 7: reserved -bind-> binding'))
        f.write('2026-11-27 11:00:03.000 4752 DEBUG composable.x [-] '
                'Lease 7: binding -do')
    assert not log.wait_for(bench._BIND_ENDED, 0.05)
    with open(path, 'a') as f:
        f.write('ne-> bound\n')
    assert log.wait_for(bench._BIND_ENDED, 5)
