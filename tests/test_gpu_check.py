"""tools/gpu_check.sh without a GPU: its plan (DRY_RUN=1), its smoke at CPU-test size, and
what makes a run fail instead of reporting the wrong path.

A lent GPU runs one command for at most 10 minutes in a window of 15, machine start included,
so the call must fit one command with room for a rerun, and every row must say which path it
measured. The whole call is rehearsed on the CPU by CI (``REHEARSE=1 bash
tools/gpu_check.sh``, .ci/run), not here: it takes 10 to 17 minutes.
"""
import argparse
import ast
import glob
import json
import os
import re
import shlex
import subprocess
import sys
import warnings

import pytest
import torch

from benchmarks.rowlog import check_rows, read_rows
from benchmarks.smoke import TOLERANCE, SmokeCase, check, path_problems
from conftest import REPO, run_tool, tool

SCRIPT = os.path.join(REPO, 'tools', 'gpu_check.sh')
SECTIONS = ('setup', 'smoke_triton', 'smoke_pytorch', 'pytest_cuda', 'targets',
            'targets_compiled', 'detector', 'loop')  # in order of value
PLAN_LINE = re.compile(r'^\[gpu_check\] plan: (\S+) (\d+)s: (.*)$')
LAST_LINE = re.compile(r'^plan: (\d+) sections, caps sum (\d+) s$')
COMPILED_PAIR_H200_S = 109  # results/gpu_h200/summary.txt


def dry_run(tmp_path, **env):
    """The (section, cap, command) lines that DRY_RUN=1 prints, and the whole output."""
    out, work = tmp_path / 'out', tmp_path / 'work'
    env = dict(os.environ, DRY_RUN='1', OUT=str(out), WORK=str(work), **env)
    env.pop('CALL', None)
    proc = subprocess.run(['bash', SCRIPT], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not out.exists() and not work.exists(), 'DRY_RUN=1 wrote files'
    plan = [(m[1], int(m[2]), m[3]) for m in map(PLAN_LINE.match, proc.stdout.splitlines())
            if m]
    return plan, proc.stdout


def test_one_call_fits_a_lent_gpu_in_order_of_value(tmp_path):
    plan, text = dry_run(tmp_path)
    assert tuple(name for name, _, _ in plan) == SECTIONS
    count, total = map(int, LAST_LINE.match(text.splitlines()[-1]).groups())
    assert (count, total) == (len(SECTIONS), sum(cap for _, cap, _ in plan))
    assert total <= 480, f'caps sum to {total} s: a cold machine has 600 s for the command'
    caps = {name: cap for name, cap, _ in plan}
    assert caps['targets_compiled'] >= 1.15 * COMPILED_PAIR_H200_S
    assert 'skipped' not in text


def test_setup_finds_every_import_of_its_check_in_the_bundle_or_the_image():
    """The setup section runs tools/check_env.py: each module it imports comes from a wheel of
    tools/dev/make_wheels.sh or from the GPU image's packages (its IMAGE list), or setup dies on
    the GPU machine (as with pytest-xdist, added to the tests extra)."""
    import importlib.metadata

    from check_env import DEFAULT_EXTRAS, EXTRA_IMPORTS, IMPORTS
    with open(os.path.join(REPO, 'tools', 'dev', 'make_wheels.sh')) as f:
        script = f.read()
    listed = {'torch', 'torchvision', 'mmcv-lite'}  # the image's, and the cached mmcv wheel
    for name in ('IMAGE', 'PURE', 'BINARY'):
        listed.update(re.search(rf'^{name}=\(([^)]*)\)', script, re.MULTILINE)[1].split())
    listed.update(re.findall(r'\$here/third_party/([\w-]+)', script))  # built from the checkout
    normal = {re.sub(r'[-_.]+', '-', name).lower() for name in listed}
    providers = importlib.metadata.packages_distributions()
    modules = IMPORTS + [m for extra in DEFAULT_EXTRAS.split(',') for m in EXTRA_IMPORTS[extra]]
    missing = [m for m in modules
               if not {re.sub(r'[-_.]+', '-', d).lower()
                       for d in providers.get(m.split('.')[0], [m])} & normal]
    assert not missing, f'add their distributions to tools/dev/make_wheels.sh: {missing}'


def test_sections_past_the_budget_are_named_and_sections_picks_a_second_call(tmp_path):
    plan, text = dry_run(tmp_path, BUDGET='300', SECTIONS='targets_compiled loop')
    names = [name for name, _, _ in plan]
    assert names == ['setup', 'smoke_triton', 'smoke_pytorch', 'targets_compiled'], names
    assert '[gpu_check] skipped: loop 60s, past the budget' in text
    assert LAST_LINE.match(text.splitlines()[-1])[1] == '4'


def test_plan_commands_and_where_the_files_go(tmp_path):
    sections = {name: shlex.split(command.split(' >')[0])
                for name, _, command in dry_run(tmp_path)[0]}
    # the smokes: real shapes, Triton then PyTorch
    for name, flag in (('smoke_triton', '1'), ('smoke_pytorch', '0')):
        command = sections[name]
        assert 'tools/gpu_smoke.py' in command and '--tiny' not in command
        assert command[command.index('--triton') + 1] == flag
    # pytest -m cuda with exactly one of the two compile tests
    pytest_cuda = sections['pytest_cuda']
    assert '-m' in pytest_cuda and 'cuda' in pytest_cuda and '--durations=0' in pytest_cuda
    deselected = [a for a in pytest_cuda if 'compiled_blocks' in a]
    assert len(deselected) == 1 and deselected[0].endswith('[0]')
    # every measurement appends to OUT's one rows file; JSON into OUT, plots into WORK
    measuring = [c for c in sections.values() if 'tools/benchmark.py' in c or
                 'tools/gpu_smoke.py' in c]
    assert {c[c.index('--rows-log') + 1] for c in measuring} == {str(tmp_path / 'out' /
                                                                     'rows.jsonl')}
    for name in ('targets', 'targets_compiled', 'detector'):
        command = sections[name]
        assert command[command.index('--json') + 1] == str(tmp_path / 'out' / f'{name}.json')
        assert command[command.index('--plot') + 1].startswith(str(tmp_path / 'work'))
        assert '1024' in command and '--device' not in command
    assert '--target-compile' in sections['targets_compiled']


def test_the_rehearsal_runs_the_same_sections_at_tiny_shapes_on_the_cpu(tmp_path):
    plan, text = dry_run(tmp_path, GPU_CHECK_REHEARSAL='1')
    assert tuple(name for name, _, _ in plan) == SECTIONS
    commands = {name: command for name, _, command in plan}
    assert 'no CUDA (rehearsal)' in commands['setup']
    assert '--device cpu --tiny' in commands['smoke_triton']
    assert '--targets 64' in commands['targets'] and '--cpu-counterparts' in commands['targets']
    assert '--compile-backend aot_eager' in commands['targets_compiled']
    assert '--detector-targets 128' in commands['detector']
    assert '--amp' not in commands['loop'] and 'scale=\\(128\\,128\\)' in commands['loop']
    assert all('1024' not in c for n, c in commands.items() if n != 'setup')


def test_loop_trains_without_saving_a_checkpoint(tmp_path):
    """The training of the loop section, read as tools/train.py reads it: neither an interval
    save nor the final one (1.3 GB for ViT5-B), nor a validation, within the run."""
    from mmengine.registry import HOOKS
    from train import add_train_args

    from mmvit5.utils.config import load_config
    command = {name: c for name, _, c in dry_run(tmp_path)[0]}['loop']
    argv = shlex.split(command.split(' >')[0])
    parser = argparse.ArgumentParser()
    parser.add_argument('config')
    args = add_train_args(parser).parse_args(argv[argv.index('tools/train.py') + 1:])
    assert args.amp
    cfg = load_config(os.path.join(REPO, args.config), args.cfg_options, args.work_dir,
                      check_data=False)
    hook = HOOKS.build(cfg.default_hooks.checkpoint)
    assert hook.save_last is False and hook.interval > cfg.train_cfg.max_iters
    # no validation either: mmengine validates after the last iteration from val_begin on
    assert cfg.train_cfg.val_begin > cfg.train_cfg.max_iters


def test_gpu_check_refuses_the_old_calls():
    proc = subprocess.run(['bash', SCRIPT], cwd=REPO, capture_output=True, text=True,
                          env=dict(os.environ, DRY_RUN='1', CALL='2'), timeout=60)
    assert proc.returncode == 2 and "SECTIONS='names'" in proc.stderr


def test_smoke_on_cpu_lands_rows_in_the_results_file(tmp_path):
    """The smoke at CPU-test size on the PyTorch path (the Triton kernels under the
    interpreter take ~30 s more here; the rehearsal runs them)."""
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
        # which path ran, on what
        assert 'fused ops: PyTorch' in case['plan'] and 'autocast' in case['plan']
        assert 'fused ops: PyTorch' in case['ref_plan'] and case['triton_failure'] is None
        assert case['device'] == 'CPU' and case['torch'] == torch.__version__
        assert 'triton_version' in case and case['commit']
    assert output.strip().splitlines()[-1].startswith('ViT5 smoke, MMVIT5_TRITON=0: 2 of 2 '
                                                      'passed')
    assert output.count('[row] smoke SmokeCase') == 2
    assert check_rows(str(tmp_path / 'results'), 'PyTorch') == []


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


def test_smoke_refuses_the_wrong_path():
    """The Triton smoke fails when the plan ran PyTorch or a kernel fell back; every smoke
    fails when its float32 reference took the Triton kernels."""
    pytorch = 'cuda, eager, bfloat16 autocast, fused ops: PyTorch, attention: sdpa'
    triton = pytorch.replace('PyTorch', 'Triton')
    reference = 'cpu, eager, float32 (no autocast), fused ops: PyTorch'

    def case(flag, plan, ref_plan=reference, failure=None):
        return SmokeCase('bfloat16 autocast', 'bfloat16', flag, 'GPU', 'real', plan=plan,
                         ref_plan=ref_plan, triton_failure=failure)

    assert path_problems(case('1', triton)) == []
    assert path_problems(case('0', pytorch)) == []
    assert 'not Triton' in path_problems(case('1', pytorch))[0]
    assert 'fell back' in path_problems(case('1', triton, failure='rms_norm_fwd: ...'))[0]
    assert 'not the PyTorch path' in path_problems(
        case('1', triton, ref_plan=reference.replace('PyTorch', 'Triton')))[0]


def _row(**fields):
    return dict(dict(tag='targets', kind='Target', device='H100', torch='2.11', commit='abc',
                     triton_version='3.6.0', triton_failure=None, claim='ViT5-B forward',
                     ratio=1.0, plan='cuda, eager, fused ops: Triton'), **fields)


def test_rows_check_wants_every_row_to_say_which_path_ran(tmp_path):
    def problems(*rows, fused='Triton'):
        (tmp_path / 'rows.jsonl').write_text(''.join(json.dumps(r) + '\n' for r in rows))
        return check_rows(str(tmp_path), fused)

    assert problems(_row(), _row(kind='MatmulPeak', plan=None)) == []
    assert 'no triton_version' in problems({k: v for k, v in _row().items()
                                            if k != 'triton_version'})[0]
    assert 'without its plan' in problems(_row(plan=None))[0]
    assert 'the run meant Triton' in problems(_row(plan='cuda, fused ops: PyTorch'))[0]
    assert 'Triton failed' in problems(_row(triton_failure='rms_norm_fwd: ...'))[0]
    # the smoke is judged by the smoke
    assert problems(_row(tag='smoke_triton', triton_failure='x', plan='fused ops: PyTorch'),
                    _row()) == []
    # OUT must come back whole from a lent machine: at most 8 files
    for i in range(8):
        (tmp_path / f'f{i}.json').write_text('{}')
    assert 'at most 8 come back' in problems(_row())[0]


def test_run_kernel_raises_what_is_no_kernel_failure_and_then_skips_the_kernel():
    """run_kernel falls back on a kernel failure once, and from then on skips the kernel; an
    out-of-memory error and an error the PyTorch path makes too are raised, kernels kept."""
    from mmvit5.models.layers.kernels import dispatch
    from mmvit5.models.layers.kernels.rms_norm import rms_norm_fwd
    x, w = torch.randn(4, 8), torch.ones(8)
    calls = []

    def out_of_memory(*args):
        raise torch.OutOfMemoryError('CUDA out of memory. Tried to allocate 2.00 GiB')

    def failing(*args):
        calls.append(args)
        raise RuntimeError('Failed to find C compiler. Please specify via CC')

    try:
        with pytest.raises(torch.OutOfMemoryError):
            dispatch.run_kernel('rms_norm_fwd', out_of_memory, rms_norm_fwd, x, w, 1e-6, None)
        with pytest.raises(RuntimeError, match='size'):  # the caller's: (4, 8) rows, weight 5
            dispatch.run_kernel('rms_norm_fwd', failing, rms_norm_fwd, x, torch.ones(5), 1e-6,
                                None)
        assert dispatch.triton_failure() is None
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter('always')
            out = dispatch.run_kernel('rms_norm_fwd', failing, rms_norm_fwd, x, w, 1e-6, None)
            again = dispatch.run_kernel('rms_norm_fwd', failing, rms_norm_fwd, x, w, 1e-6, None)
        assert 'C compiler' in dispatch.triton_failure()
        assert len([w for w in caught if 'Triton kernel' in str(w.message)]) == 1
        assert len(calls) == 2  # the caller's error, then the failure: not tried again
        for result in (out, again):
            torch.testing.assert_close(result[0], rms_norm_fwd(x, w, 1e-6, None)[0])
    finally:
        dispatch.reset_triton_failure()


def test_kernels_chain_no_boolean_operators():
    """Triton before 3.4 (torch 2.6 and 2.7 ship 3.2 and 3.3) refuses ``a and b and c`` in a
    kernel: every kernel then falls back. Triton 3.2 compiled them all once the chain was
    split (REHEARSE=1 compiles them with it); this keeps chains out."""
    kernels = glob.glob(os.path.join(REPO, 'mmvit5', 'models', 'layers', 'kernels', '*.py'))
    jitted = 0
    for path in kernels:
        for node in ast.walk(ast.parse(open(path).read())):
            if isinstance(node, ast.FunctionDef) and any(
                    'jit' in ast.unparse(d) for d in node.decorator_list):
                jitted += 1
                chains = [ast.unparse(b) for b in ast.walk(node)
                          if isinstance(b, ast.BoolOp) and len(b.values) > 2]
                assert not chains, f'{path}:{node.name}: {chains}'
    assert jitted >= 5


if __name__ == '__main__':
    sys.exit(pytest.main([__file__, '-v']))
