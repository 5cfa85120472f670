"""tools/gpu_check.sh without a GPU: its plan (DRY_RUN=1) and its smoke at CPU-test size.

A lent GPU runs one command for at most 10 minutes, so every call of the script must fit in
that, each section exactly once over the calls; the smoke that decides the Triton fallback
must put its rows in the results file the moment they are measured.
"""
import argparse
import os
import re
import shlex
import subprocess
import sys

import pytest
import torch

from benchmarks.rowlog import read_rows
from benchmarks.smoke import TOLERANCE, SmokeCase, check
from conftest import REPO, run_tool, tool

SCRIPT = os.path.join(REPO, 'tools', 'gpu_check.sh')
FIXED = ('setup', 'smoke_triton', 'smoke_pytorch')  # the start of every call
PLAN_LINE = re.compile(r'^\[gpu_check\] plan: (\S+) (\d+)s: (.*)$')
COMPILED_PAIR_H200_S = 109  # results/gpu_h200/summary.txt: it had 80 s then


def dry_run(tmp_path, call):
    """The (section, cap, command) lines that DRY_RUN=1 prints for ``call``, and the header."""
    out, work = tmp_path / 'out', tmp_path / 'work'
    env = dict(os.environ, DRY_RUN='1', CALL=str(call), OUT=str(out), WORK=str(work))
    proc = subprocess.run(['bash', SCRIPT], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not out.exists() and not work.exists(), 'DRY_RUN=1 wrote files'
    plan = [(m[1], int(m[2]), m[3]) for m in map(PLAN_LINE.match, proc.stdout.splitlines())
            if m]
    return plan, proc.stdout


@pytest.fixture(scope='module')
def calls(tmp_path_factory):
    tmp = tmp_path_factory.mktemp('dry')
    first, text = dry_run(tmp, 1)
    count = int(re.search(r'CALL=1 of (\d+):', text)[1])
    return {1: (first, text), **{c: dry_run(tmp, c) for c in range(2, count + 1)}}


def test_every_section_once_and_every_call_within_ten_minutes(calls):
    assert len(calls) >= 3
    seen = []
    for call, (plan, text) in calls.items():
        names = [name for name, _, _ in plan]
        assert tuple(names[:3]) == FIXED, f'CALL={call} starts {names[:3]}'
        total = sum(cap for _, cap, _ in plan)
        assert total < 600, f'CALL={call}: caps sum to {total} s, a lent GPU stops at 600 s'
        assert f'CALL={call} of {len(calls)}: {total}s of caps' in text  # the plan it prints
        budget = int(re.search(r'budget (\d+)s', text)[1])
        assert total <= budget < 600, (total, budget)
        seen += names[3:]
    assert len(seen) == len(set(seen)), f'sections planned twice: {seen}'
    expected = {'pytest_cuda', 'pytest_cuda_compile', 'targets_b1', 'targets_b4',
                'targets_compiled', 'detector_target', 'breakdown', 'train_vit5-b_b2',
                'train_vit5-b_b2_loop'}
    assert expected <= set(seen), expected - set(seen)


def test_plan_commands(calls):
    sections = {name: (call, index, cap, command) for call, (plan, _) in calls.items()
                for index, (name, cap, command) in enumerate(plan)}
    # the smokes: real shapes (no --tiny), Triton on then off, rows to the results file
    for name, flag in (('smoke_triton', '1'), ('smoke_pytorch', '0')):
        command = shlex.split(sections[name][3])
        assert 'tools/gpu_smoke.py' in command and '--tiny' not in command
        assert command[command.index('--triton') + 1] == flag
    # pytest verbose with every duration; the compile tests after the others
    for name in ('pytest_cuda', 'pytest_cuda_compile'):
        assert '-v --durations=0' in sections[name][3] and '-m cuda' in sections[name][3]
    assert sections['pytest_cuda'][:2] < sections['pytest_cuda_compile'][:2]
    assert sections['targets_compiled'][2] >= 1.5 * COMPILED_PAIR_H200_S
    # every measuring section appends its rows to one file as they come
    rows_logs = {shlex.split(c)[shlex.split(c).index('--rows-log') + 1]
                 for _, _, _, c in sections.values() if 'tools/benchmark.py' in c
                 or 'gpu_smoke.py' in c}
    assert len(rows_logs) == 1 and rows_logs.pop().endswith('/out/rows.jsonl')


def test_train_sections_save_no_checkpoint(calls):
    """The options of each train section, read as tools/train.py reads them: neither an
    interval save nor the final one (1.3 GB for ViT5-B) within the run."""
    from mmengine.registry import HOOKS
    from train import add_train_args

    from mmvit5.utils.config import load_config
    trains = [c for plan, _ in calls.values() for name, _, c in plan
              if name.startswith('train_') and not name.endswith('_loop')]
    assert trains
    for command in trains:
        argv = shlex.split(command)
        parser = argparse.ArgumentParser()
        parser.add_argument('config')
        args = add_train_args(parser).parse_args(argv[argv.index('tools/train.py') + 1:])
        cfg = load_config(os.path.join(REPO, args.config), args.cfg_options, args.work_dir,
                          check_data=False)
        hook = HOOKS.build(cfg.default_hooks.checkpoint)
        assert hook.save_last is False, command
        assert hook.interval > cfg.train_cfg.max_iters, command
        assert cfg.train_cfg.val_interval > cfg.train_cfg.max_iters, command


def test_smoke_on_cpu_lands_rows_in_the_results_file(tmp_path):
    """The smoke at CPU-test size on the PyTorch path (the Triton kernels under the
    interpreter take ~30 s more here; tests/test_kernels.py covers them)."""
    rows = tmp_path / 'results' / 'rows.jsonl'
    output = run_tool([*tool('gpu_smoke.py'), '--device', 'cpu', '--tiny', '--triton', '0',
                       '--steps', '0', '--rows-log', str(rows)], REPO, timeout=300)
    cases = read_rows(str(rows))
    assert [c['dtype'] for c in cases] == ['bfloat16', 'float16']
    for case in cases:
        assert case['kind'] == 'SmokeCase' and case['status'] == 'ok', case
        assert case['triton'] == '0' and case['tag'] == 'smoke'
        assert 0 < case['out_rel_err'] <= TOLERANCE[case['dtype']][0], case
        assert 0 < case['grad_rel_err'] <= TOLERANCE[case['dtype']][1], case
        assert 'heads of 64' in case['model']
    assert output.strip().splitlines()[-1].startswith('ViT5 smoke, MMVIT5_TRITON=0: 2 of 2 '
                                                      'passed')
    assert output.count('[row] smoke SmokeCase') == 2


def test_smoke_check_refuses_a_wrong_or_missing_result():
    """What makes a smoke case fail: outputs or gradients off the float32 reference, a
    parameter without a gradient, non-finite values."""
    torch.manual_seed(0)
    ref_out, ref_grads = [torch.randn(2, 8, 4, 4)], {'a': torch.randn(8), 'b': torch.randn(3)}

    def case():
        return SmokeCase('bfloat16 autocast', 'bfloat16', '0', 'CPU', 'tiny')

    good = case()
    check(good, [ref_out[0] * 1.001], ref_out, {k: v * 1.001 for k, v in ref_grads.items()},
          ref_grads)
    assert good.status == 'ok' and good.note == ''
    off = case()
    check(off, [ref_out[0] * 1.2], ref_out, dict(ref_grads, b=ref_grads['b'] * 2), ref_grads)
    assert off.status == 'failed' and 'outputs' in off.note and 'gradient of b' in off.note
    assert off.worst_grad == 'b'
    missing = case()
    check(missing, [ref_out[0].clone()], ref_out, dict(ref_grads, a=None), ref_grads)
    assert missing.status == 'failed' and "no gradient for ['a']" in missing.note
    nan = case()
    check(nan, [ref_out[0] * float('nan')], ref_out, ref_grads, ref_grads)
    assert nan.status == 'failed' and 'non-finite outputs' in nan.note


def test_gpu_check_refuses_an_unknown_call():
    proc = subprocess.run(['bash', SCRIPT], cwd=REPO, capture_output=True, text=True,
                          env=dict(os.environ, DRY_RUN='1', CALL='9'), timeout=60)
    assert proc.returncode == 2 and "CALL must be one of 1 2 3 4 or all, got '9'" in proc.stderr


if __name__ == '__main__':
    sys.exit(pytest.main([__file__, '-v']))
