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

"""The phase breakdown and budgets of tools/bench/device_bind.py, on
made-up log lines (the benchmark itself runs the real processes and the
compute host guest)."""

import datetime
import importlib.util
import os

import pytest

pytest.importorskip('libvirt')

PATH = os.path.join(os.path.dirname(__file__), '..', '..', '..', '..',
                    'tools', 'bench', 'device_bind.py')
CONDUCTOR = 'conductor-0'
HOST = 'compute-host'


@pytest.fixture(scope='module')
def bench():
    spec = importlib.util.spec_from_file_location('device_bind_bench', PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


T0 = datetime.datetime(2026, 12, 7, 11, 0, 0).timestamp()
BLOCK = '/redfish/v1/CompositionService/ResourceBlocks/GPU0'
# (phase, process, line, ms after the POST)
LINES = [
    ('api-call', CONDUCTOR, 'Lease 7: reserved -bind-> binding', 20),
    ('handoff', CONDUCTOR, 'Lease 7: bind started', 30),
    ('fabric-call', CONDUCTOR,
     'Composing resource block %s for host compute-host' % BLOCK, 40),
    ('fabric-reads', CONDUCTOR,
     'Resource block %s: ComputerSystem.AddResourceBlock on system '
     '/redfish/v1/Systems/compute-host' % BLOCK, 70),
    ('hot-plug', CONDUCTOR, 'Resource block %s: ComputerSystem.'
     'AddResourceBlock answered' % BLOCK, 120),
    ('compose-wait', CONDUCTOR, 'Resource block %s composed into system '
     '/redfish/v1/Systems/compute-host for host compute-host (device '
     '1234:11e8 serial unknown)' % BLOCK, 140),
    ('attach-rpc', HOST, 'Lease 7: attaching 1 device(s)', 160),
    # One call of the PCI module: 100 ms, of which 30 ms the search and
    # 20 ms the bind.
    ('vfio-bind', HOST, 'Device 9d of lease 7: found at 0000:01:00.0 in '
     '30 ms, IOMMU group and vfio-pci in 20 ms (the PCI call took 100 ms)',
     260),
    ('attach-ack', CONDUCTOR, 'Lease 7: devices attached on compute-host',
     280),
    ('bound', CONDUCTOR, 'Lease 7: binding -done-> bound', 290),
]
SEEN = 0.3


def _line(at, text):
    stamp = datetime.datetime.fromtimestamp(at).strftime(
        '%Y-%m-%d %H:%M:%S.%f')[:-3]
    return '%s 4752 DEBUG composable.x [-] %s\n' % (stamp, text)


def _logs(bench, tmp_path, binds, skip=()):
    """Log files of ``binds`` binds 1 s apart, the marks of ``skip`` left
    out, with a line of the unbind after each; their log_marks."""
    lines = {CONDUCTOR: [], HOST: []}
    for n in range(binds):
        posted = T0 + n
        for phase, proc, text, ms in LINES:
            if phase not in skip:
                lines[proc].append(_line(posted + ms / 1000.0, text))
        # The unbind's own marks do not count.
        lines[HOST].append(_line(posted + 0.5, 'Lease 7: attaching 1 '
                                               'device(s)'))
    for proc, text in lines.items():
        text.sort()
        (tmp_path / (proc + '.log')).write_text(''.join(text))
    return {proc: bench.phases.log_marks(str(tmp_path / (proc + '.log')))
            for proc in lines}


def _windows(binds):
    return [(T0 + n, T0 + n + SEEN, T0 + n + 0.4, T0 + n + 0.8)
            for n in range(binds)]


def test_each_phase_ends_at_its_mark(bench, tmp_path):
    times = bench.phase_times(_logs(bench, tmp_path, 3), _windows(3))
    assert list(times) == [p[0] for p in bench.PHASES]
    expected = {'api-call': 20, 'handoff': 10, 'fabric-call': 10,
                'fabric-reads': 30, 'hot-plug': 50, 'compose-wait': 20,
                'attach-rpc': 20,
                # The PCI call less its search and its bind.
                'pci-call': 50, 'rescan': 30, 'vfio-bind': 20,
                'attach-ack': 20, 'bound': 10, 'seen': 10}
    for phase, values in times.items():
        assert values == pytest.approx([expected[phase]] * 3, abs=1.5), \
            phase
    assert sum(v[0] for v in times.values()) == pytest.approx(
        SEEN * 1000, abs=1.5)


def test_a_mark_an_older_tree_does_not_log_merges_its_phase(bench,
                                                            tmp_path):
    """The conductor of this tree logs no mark of the agent's answer:
    attach-ack is merged into bound; a tree whose agent does not time
    its PCI call has the call in one phase, ending at bound."""
    times = bench.phase_times(
        _logs(bench, tmp_path, 2, skip=('attach-ack',)), _windows(2))
    assert 'attach-ack+bound' in times and 'bound' not in times
    assert times['attach-ack+bound'] == pytest.approx([30.0, 30.0],
                                                      abs=1.5)
    assert bench.budget_of('attach-ack+bound') == (
        bench.BUDGETS['attach-ack'] + bench.BUDGETS['bound'])
    older = bench.phase_times(
        _logs(bench, tmp_path, 2, skip=('vfio-bind', 'attach-rpc',
                                        'fabric-reads', 'hot-plug')),
        _windows(2))
    assert list(older) == [
        'api-call', 'handoff', 'fabric-call',
        'fabric-reads+hot-plug+compose-wait',
        'attach-rpc+pci-call+rescan+vfio-bind+attach-ack', 'bound', 'seen']
    assert older['attach-rpc+pci-call+rescan+vfio-bind+attach-ack'] == \
        pytest.approx([140.0, 140.0], abs=1.5)
    for values in (times, older):
        assert sum(v[0] for v in values.values()) == pytest.approx(
            SEEN * 1000, abs=1.5)


def test_a_phase_past_its_budget_is_named_and_fails_the_run(bench,
                                                            capsys):
    loads = ((0.5,) * 3, (0.5,) * 3)
    quick = {p: [1.0, 1.0] for p in bench.BUDGETS}
    assert bench.report([300.0, 320.0], quick, loads, 1.0) == []
    slow = dict(quick, **{'pci-call': [bench.BUDGETS['pci-call'] * 2 + 1]
                          * 2})
    assert bench.report([300.0, 320.0], slow, loads, 2.0) == ['pci-call']
    out, err = capsys.readouterr()
    assert 'device_bind: pci-call is over its budget' in err
    assert out.splitlines()[-1].startswith(
        'device_bind: p50_ms=310.0 p99_ms=319.8 load=0.50 ')
    assert out.splitlines()[-1].endswith('budget=over:pci-call')
    # A scale that covers it (a loaded machine) lets it pass.
    assert bench.report([300.0, 320.0], slow, loads, 3.0) == []
    # The bind's own target: p50 500 ms, p99 1500 ms.
    assert bench.TOTAL_BUDGET == (500, 1500)
    assert bench.report([600.0, 600.0], quick, loads, 1.0) == ['total-p50']
    assert bench.report([100.0, 2000.0], quick, loads, 1.0) == [
        'total-p50', 'total-p99']
    # Without budgets nothing fails.
    assert bench.report([600.0, 600.0], slow, loads, None) == []
    assert capsys.readouterr().out.splitlines()[-1].endswith('budget=off')


def test_the_run_exits_1_naming_the_phase_over_budget(bench, monkeypatch,
                                                      capsys):
    slow = {p: [1.0] for p in bench.BUDGETS}
    slow['rescan'] = [bench.BUDGETS['rescan'] * 10.0]
    monkeypatch.setattr(bench, 'run', lambda args: ([300.0], slow))
    assert bench.main(['--budget-scale', '1']) == 1
    assert 'device_bind: rescan is over its budget' in (
        capsys.readouterr().err)
    assert bench.main(['--no-budget']) == 0
    # The default scale follows the load average.
    monkeypatch.setattr(os, 'getloadavg', lambda: (18.0, 1.0, 1.0))
    monkeypatch.setattr(os, 'cpu_count', lambda: 2)
    assert bench.main([]) == 0
    assert 'budget scale 10.00' in capsys.readouterr().out
