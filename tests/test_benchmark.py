"""Smoke test of tools/benchmark.py: the --quick preset, with the alternated target
timing, runs end to end and reports."""
import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow  # runs the benchmark tool

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_quick_benchmark_reports_rows_table_and_plot(tmp_path):
    rows_path, plot_path = tmp_path / 'rows.json', tmp_path / 'b.png'
    log_path = tmp_path / 'results' / 'rows.jsonl'
    log_path.parent.mkdir()
    log_path.write_text('{"tag": "an earlier run"}\n')
    result = subprocess.run(
        [sys.executable, 'tools/benchmark.py', '--quick', '--peers', 'none', '--json',
         str(rows_path), '--plot', str(plot_path), '--targets', '64', '--target-rounds', '2',
         '--rows-log', str(log_path), '--rows-tag', 'quick'],
        cwd=REPO, capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr[-4000:]

    report = json.loads(rows_path.read_text())
    rows = report['rows']
    forward = [r for r in rows if r['model'] == 'vit5-s' and r['mode'] == 'forward']
    assert forward, f'no vit5-s forward row in {rows}'
    assert forward[0]['status'] == 'ok', forward[0]['note']
    assert forward[0]['img_s'] > 0
    assert forward[0]['gflops'] > 0

    assert plot_path.is_file() and plot_path.stat().st_size > 0
    assert '| model | input | mode | batch | img/s |' in result.stdout
    assert '|---|' in result.stdout

    # the five latency targets, each from two alternated rounds of both models
    timed = [t for t in report['targets'] if t['low'] is not None]
    assert len(timed) == 5, report['targets']
    for target in timed:
        assert 0 < target['low'] <= target['ratio'] <= target['high'], target
        assert target['met'] in (True, False)
    assert '### Targets' in result.stdout and 'window-14 train step' in result.stdout
    # training peak memory, one step of each model alone, the CPU counterpart named so
    memory = [t for t in report['targets'] if 'peak memory / timm' in t['claim']]
    assert len(memory) == 1 and memory[0]['ratio'] > 0, report['targets']
    assert memory[0]['basis'].startswith('CPU counterpart: ') and 'alone' in memory[0]['basis']
    assert all('fused ops: PyTorch' in t['plan'] for t in report['targets'])

    # --rows-log: every row and target appended as measured (after what was there), each
    # printed too, so a run killed by a time cap keeps what it finished
    from benchmarks.rowlog import read_rows
    logged = read_rows(str(log_path))
    assert logged[0] == {'tag': 'an earlier run'}
    kinds = [line['kind'] for line in logged[1:]]
    assert kinds.count('Row') == len(rows) and kinds.count('Target') == len(report['targets'])
    assert {line['tag'] for line in logged[1:]} == {'quick'}
    first_row = next(line for line in logged if line.get('kind') == 'Row')
    assert first_row['img_s'] == rows[0]['img_s'] and first_row['dtype'] == 'float32'
    assert all(isinstance(line['met'], bool) for line in logged if line.get('kind') == 'Target'
               and line['low'] is not None)
    assert result.stdout.count('[row] quick ') == len(logged) - 1
