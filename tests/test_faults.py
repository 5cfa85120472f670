"""Faults: a training process killed with SIGKILL, in the middle of an iteration or while it
writes a checkpoint, resumes through tools/train.py to the uninterrupted run's weights, bit for
bit, on the same learning-rate schedule."""
import glob
import os.path as osp
import shutil
import signal
from types import SimpleNamespace

import pytest
import torch

import mmvit5  # noqa: F401  allow-lists what mmengine checkpoints hold
from conftest import (
    REPO,
    assert_same_training_state,
    config,
    logged_iterations,
    run_tool,
    run_tool_here,
    tool,
)

pytestmark = pytest.mark.slow  # trains in subprocesses and kills them

SIGKILL = [*tool('train.py')[:1], osp.join(REPO, 'tests', 'sigkill.py')]
TOYS = sorted(osp.relpath(p, osp.join(REPO, 'configs'))
              for p in glob.glob(osp.join(REPO, 'configs', 'toy', '*.py')))
UPERNET = 'toy/vit5-tiny_upernet_shapes.py'


def toy_args(toy: str) -> list:
    """4 iterations, a checkpoint after each (the toys keep the last 2), the lr and loss printed
    at each; no validation but UperNet's at iteration 2, between a checkpoint and the next
    iteration: it must leave the training's random stream alone. The toys' augmentations run
    in the main process (num_workers=0)."""
    val = 'train_cfg.val_interval=2' if toy == UPERNET else 'train_cfg.val_begin=5'
    return [config(toy), '--cfg-options', 'train_cfg.max_iters=4', val,
            'default_hooks.checkpoint.interval=1', 'default_hooks.logger.interval=1']


def assert_continues(work_dir, out: str, reference, resumed_at: int) -> None:
    """The run resumed at ``resumed_at``, printed the reference run's lr and loss at each
    remaining iteration and ended with its weights, optimizer state and schedule."""
    assert f'resumed epoch: 0, iter: {resumed_at}' in out, out[-3000:]
    ours, theirs = logged_iterations(out), logged_iterations(reference.out)
    assert sorted(ours) == list(range(resumed_at + 1, 5)), out[-3000:]
    assert ours == {step: theirs[step] for step in ours}
    assert_same_training_state(work_dir / 'iter_4.pth', reference.dir / 'iter_4.pth')


@pytest.mark.parametrize('toy', TOYS)
def test_toy_killed_mid_iteration_resumes_to_the_uninterrupted_run(
        toy, toy_root, tmp_path, monkeypatch, capsys, one_thread):
    args = toy_args(toy)
    reference = SimpleNamespace(dir=tmp_path / 'uninterrupted')
    reference.out = run_tool_here('train.py', [*args, '--work-dir', reference.dir], toy_root,
                                  monkeypatch, capsys)

    killed = tmp_path / 'killed'
    code, out = run_tool([*SIGKILL, 'iteration', '4', *tool('train.py')[1:], *args,
                          '--work-dir', str(killed)], cwd=toy_root, env=one_thread, check=False)
    assert code == -signal.SIGKILL, out[-3000:]
    assert 'Iter(train) [3/4]' in out and 'Iter(train) [4/4]' not in out, out[-3000:]
    assert sorted(p.name for p in killed.glob('iter_*.pth')) == ['iter_2.pth', 'iter_3.pth']
    assert (killed / 'last_checkpoint').read_text().strip().endswith('iter_3.pth')

    # --resume PATH, from the older checkpoint, in a copy of the work dir. Its meta lacks the
    # batch per process, as detectors' checkpoints written before WorldSizeChangeHook read it
    # from the batch sampler did: such a checkpoint resumes with a warning
    by_path = tmp_path / 'by_path'
    shutil.copytree(killed, by_path)
    old = torch.load(by_path / 'iter_2.pth', weights_only=True)
    old['meta']['batch_size'] = None
    torch.save(old, by_path / 'iter_2.pth')
    out = run_tool_here('train.py', [*args, '--work-dir', by_path, '--resume',
                                     by_path / 'iter_2.pth'], toy_root, monkeypatch, capsys)
    assert 'records 1 process(es) but not their batch' in out, out[-3000:]
    assert_continues(by_path, out, reference, resumed_at=2)

    # auto-resume: the work dir's last_checkpoint
    out = run_tool_here('train.py', [*args, '--work-dir', killed, '--resume'], toy_root,
                        monkeypatch, capsys)
    assert_continues(killed, out, reference, resumed_at=3)


# The kills while writing a checkpoint: dataloader workers draw the augmentations (seeded per
# worker by mmengine, they redo the skipped batches); RNGStateHook carries the main process's
# generators (drop path) across the restart
OPTIONS = ['train_cfg.max_iters=8', 'train_cfg.val_interval=8',
           'default_hooks.checkpoint.interval=4', 'train_dataloader.num_workers=1',
           'model.backbone.drop_path_rate=0.1']


@pytest.fixture(scope='module')
def uninterrupted(toy_root, tmp_path_factory):
    """The final checkpoint of the run every interrupted one must reproduce."""
    full = tmp_path_factory.mktemp('full')
    run_tool(tool('train.py') + [config(UPERNET), '--work-dir', str(full), '--cfg-options',
                                 *OPTIONS], cwd=toy_root)
    return full / 'iter_8.pth'


def resume_and_compare(work_dir, toy_root, reference, resumed_at=4):
    out = run_tool(tool('train.py') + [config(UPERNET), '--work-dir', str(work_dir), '--resume',
                                       '--cfg-options', *OPTIONS], cwd=toy_root)
    assert f'resumed epoch: 0, iter: {resumed_at}' in out
    assert_same_training_state(work_dir / 'iter_8.pth', reference)


# max_keep_ckpts=1 is the hard case: mmengine deletes iter_4.pth before it writes iter_8.pth
# (the pointer's first write, at iteration 4, has nothing to protect: kill the second one)
@pytest.mark.parametrize('victim, nth', [('iter_8.pth', 1), ('last_checkpoint', 2)])
def test_sigkill_while_writing_a_checkpoint_keeps_last_checkpoint_valid(
        toy_root, tmp_path, uninterrupted, victim, nth):
    work = tmp_path / 'killed'
    code, out = run_tool([*SIGKILL, 'write', victim, str(nth), *tool('train.py')[1:],
                          config(UPERNET), '--work-dir', str(work), '--cfg-options', *OPTIONS,
                          'default_hooks.checkpoint.max_keep_ckpts=1'],
                         cwd=toy_root, check=False)
    assert code == -signal.SIGKILL, out[-3000:]
    assert list(work.glob(f'*{victim}*')), 'the kill did not hit the write'
    pointed = (work / 'last_checkpoint').read_text().strip()
    assert pointed.endswith('iter_4.pth'), pointed
    assert set(torch.load(pointed, weights_only=True)) >= {'state_dict', 'optimizer', 'meta'}
    # nothing that looks like a checkpoint is truncated
    for path in work.glob('iter_*.pth'):
        torch.load(path, weights_only=True)
    resume_and_compare(work, toy_root, uninterrupted)
