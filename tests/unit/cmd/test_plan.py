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

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from composable.cmd import plan

SAMPLE = os.path.join(os.path.dirname(__file__), '..', '..', '..', 'etc',
                      'composable', 'plan-sample-trace.csv')


def test_json_output_parses_and_holds_the_plan(capsys):
    assert plan.main([SAMPLE, '--format', 'json']) == 0
    data = json.loads(capsys.readouterr().out)
    assert data['nodes'] == 6
    assert data['static_mb'] > 0
    assert data['pooled_mb'] == data['local_mb'] + data['pool_mb']
    assert data['ratio'] == pytest.approx(data['pooled_mb']
                                          / data['static_mb'])
    assert data['pool_mb'] % 1024 == 0
    assert 0 <= data['refused_pct'] <= 1.0
    assert data['refused_pct_one_chunk_less'] > 1.0
    assert data['mape_pct'] >= 0
    assert data['parameters']['local_share'] == 0.25


def test_options_reach_the_replay(capsys):
    assert plan.main([SAMPLE, '--format', 'json', '--local-share', '50%',
                      '--chunk-mb', '512', '--max-refused', '0.05',
                      '--headroom', '0', '--observation', '300',
                      '--prediction', '30', '--attach-delay', '0']) == 0
    data = json.loads(capsys.readouterr().out)
    assert data['parameters']['local_share'] == 0.5
    assert data['parameters']['max_refused'] == 0.05
    assert data['pool_mb'] % 512 == 0
    assert data['windows_samples'] == {'observation': 10, 'prediction': 1,
                                       'attach_delay': 1,
                                       'shrink_after': 1}


def test_table_output(capsys):
    assert plan.main([SAMPLE]) == 0
    out = capsys.readouterr().out
    assert 'smallest pool' in out
    assert 'pooled / static' in out
    assert 'cost per used MiB static / pooled' in out


def test_malformed_trace_exits_2_naming_the_line(tmp_path, capsys):
    bad = tmp_path / 'bad.csv'
    bad.write_text('timestamp_s,node,used_mb\n0,a,10\n10,a,ten\n')
    assert plan.main([str(bad)]) == 2
    err = capsys.readouterr().err
    assert '%s:3: used_mb \'ten\' is not a number' % bad in err


@pytest.mark.parametrize('argv, message', [
    (['--local-share=-10%'], 'local share must be between 0 and 1'),
    (['--observation', '0'], 'observation window must be more than 0'),
    (['--prediction', '99999999'], 'longer than the trace'),
    (['--chunk-mb', '0'], 'chunk must be a positive'),
])
def test_bad_options_exit_2_with_a_message(argv, message, capsys):
    assert plan.main([SAMPLE] + argv) == 2
    assert message in capsys.readouterr().err


def test_unparsable_option_values_are_usage_errors(capsys):
    with pytest.raises(SystemExit) as caught:
        plan.main([SAMPLE, '--local-share', 'a quarter'])
    assert caught.value.code == 2
    assert 'not a fraction' in capsys.readouterr().err


def test_plot_writes_a_png(tmp_path, capsys):
    out = tmp_path / 'plan.png'
    assert plan.main([SAMPLE, '--plot', str(out)]) == 0
    data = out.read_bytes()
    assert data.startswith(b'\x89PNG\r\n\x1a\n')
    assert 5000 < len(data) < 200000
    assert sorted(p.name for p in tmp_path.iterdir()) == ['plan.png']


def test_plot_without_matplotlib_says_what_to_install(tmp_path, capsys,
                                                      monkeypatch):
    # Simulates a machine without the planner's extra installed.
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, 'find_spec',
                        lambda name, *a: None if name == 'matplotlib'
                        else real(name, *a))
    out = tmp_path / 'plan.png'
    assert plan.main([SAMPLE, '--plot', str(out)]) == 2
    assert "pip install 'composable[planner]'" in capsys.readouterr().err
    assert not out.exists()


def test_progress_bar_when_asked(capsys):
    assert plan.main([SAMPLE, '--progress', '--format', 'json']) == 0
    captured = capsys.readouterr()
    assert 'predicting' in captured.err
    assert '726/726' in captured.err
    json.loads(captured.out)


def test_a_trace_of_idle_nodes_needs_no_pool(tmp_path, capsys):
    idle = tmp_path / 'idle.csv'
    idle.write_text('timestamp_s,node,used_mb\n'
                    + ''.join('%d,%s,0\n' % (t, n)
                              for t in range(0, 100, 10) for n in 'ab'))
    assert plan.main([str(idle), '--format', 'json', '--observation', '30',
                      '--prediction', '10', '--attach-delay', '10']) == 0
    data = json.loads(capsys.readouterr().out)
    assert data['pool_mb'] == 0
    assert data['static_mb'] == 0
    assert data['ratio'] is None
    assert data['cost_per_used_mb_pooled'] is None
    assert plan.main([str(idle), '--observation', '30', '--prediction',
                      '10', '--attach-delay', '10']) == 0
    assert 'n/a' in capsys.readouterr().out


def test_plot_into_a_missing_folder_fails_before_the_replay(tmp_path,
                                                            capsys):
    target = tmp_path / 'no' / 'such' / 'plan.png'
    assert plan.main([SAMPLE, '--plot', str(target)]) == 2
    assert 'no folder' in capsys.readouterr().err
    assert not target.parent.exists()


def _flat_trace(tmp_path):
    flat = tmp_path / 'flat.csv'
    flat.write_text('timestamp_s,node,used_mb\n'
                    + ''.join('%d,a,8192\n' % t for t in range(0, 600, 10)))
    return str(flat)


def test_a_losing_plan_warns_on_stderr_and_in_the_output(tmp_path, capsys):
    args = [_flat_trace(tmp_path), '--max-lease-mb', '32768',
            '--observation', '120', '--prediction', '30']
    assert plan.main(args + ['--format', 'json']) == 0
    captured = capsys.readouterr()
    assert 'composable-plan: warning: pooling loses' in captured.err
    data = json.loads(captured.out)
    assert data['ratio'] > 1.0
    assert len(data['warnings']) == 1
    assert plan.main(args) == 0
    assert 'WARNING' in capsys.readouterr().out


def test_max_lease_mb_reaches_the_replay(capsys):
    assert plan.main([SAMPLE, '--format', 'json', '--max-lease-mb',
                      '2048']) == 0
    data = json.loads(capsys.readouterr().out)
    assert data['parameters']['max_lease_mb'] == 2048
    assert set(data['max_lease_mb']) == {2048}


def test_a_closed_pipe_ends_quietly(tmp_path):
    """``composable-plan ... --format json | head``: the reader goes away
    before the plan is written."""
    proc = subprocess.Popen(
        [sys.executable, '-c', 'import sys; from composable.cmd.plan '
         'import main; sys.exit(main())', SAMPLE, '--format', 'json'],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=str(tmp_path),
        env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    # Nobody reads: the write finds the pipe closed.
    proc.stdout.close()
    try:
        err = proc.stderr.read().decode()
        code = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()
    assert 'Traceback' not in err and 'BrokenPipeError' not in err, err
    assert code == 0, err
