"""Faults: a training process killed with SIGKILL, mid-run or while it writes a checkpoint,
resumes to the uninterrupted run's weights."""
import os
import os.path as osp
import signal
import subprocess
import time

import pytest
import torch

import mmvit5  # noqa: F401  allow-lists what mmengine checkpoints hold
from conftest import REPO, config, run_tool, tool

pytestmark = pytest.mark.slow  # trains in subprocesses and kills them

UPERNET = 'toy/vit5-tiny_upernet_shapes.py'
# dataloader workers draw the augmentations (seeded per worker by mmengine); the configs'
# RNGStateHook carries the main process's generators (drop path) across the restart
OPTIONS = ['train_cfg.max_iters=8', 'train_cfg.val_interval=8',
           'default_hooks.checkpoint.interval=4', 'train_dataloader.num_workers=1',
           'model.backbone.drop_path_rate=0.1']


@pytest.fixture(scope='module')
def uninterrupted(toy_root, tmp_path_factory):
    """The final weights of the run every interrupted one must reproduce."""
    full = tmp_path_factory.mktemp('full')
    run_tool(tool('train.py') + [config(UPERNET), '--work-dir', str(full), '--cfg-options',
                                 *OPTIONS], cwd=toy_root)
    return torch.load(full / 'iter_8.pth', weights_only=True)['state_dict']


def resume_and_compare(work_dir, toy_root, reference, resumed_at=4):
    out = run_tool(tool('train.py') + [config(UPERNET), '--work-dir', str(work_dir), '--resume',
                                       '--cfg-options', *OPTIONS], cwd=toy_root)
    assert f'resumed epoch: 0, iter: {resumed_at}' in out
    ours = torch.load(work_dir / 'iter_8.pth', weights_only=True)['state_dict']
    assert ours.keys() == reference.keys()
    different = [k for k in reference if not torch.equal(ours[k], reference[k])]
    assert not different, different[:5]


def test_sigkill_mid_run_then_resume_equals_uninterrupted(toy_root, tmp_path, uninterrupted):
    killed = tmp_path / 'killed'
    env = dict(os.environ, PYTHONPATH=REPO, OMP_NUM_THREADS='2')
    proc = subprocess.Popen(tool('train.py') + [config(UPERNET), '--work-dir', str(killed),
                                                '--cfg-options', *OPTIONS],
                            cwd=toy_root, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 600
    while not (killed / 'last_checkpoint').is_file() and time.time() < deadline:
        assert proc.poll() is None, 'training ended before it could be killed'
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGKILL)
    assert proc.wait() == -signal.SIGKILL
    assert (killed / 'iter_4.pth').is_file() and not (killed / 'iter_8.pth').exists()
    assert (killed / 'last_checkpoint').read_text().strip().endswith('iter_4.pth')
    resume_and_compare(killed, toy_root, uninterrupted)


# max_keep_ckpts=1 is the hard case: mmengine deletes iter_4.pth before it writes iter_8.pth
# (the pointer's first write, at iteration 4, has nothing to protect: kill the second one)
@pytest.mark.parametrize('victim, nth', [('iter_8.pth', 1), ('last_checkpoint', 2)])
def test_sigkill_while_writing_a_checkpoint_keeps_last_checkpoint_valid(
        toy_root, tmp_path, uninterrupted, victim, nth):
    work = tmp_path / 'killed'
    code, out = run_tool([*tool('train.py')[:1], osp.join(REPO, 'tests', 'kill_while_writing.py'),
                          victim, str(nth), *tool('train.py')[1:], config(UPERNET), '--work-dir',
                          str(work), '--cfg-options', *OPTIONS,
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
