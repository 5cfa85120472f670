"""Faults: a training process killed with SIGKILL resumes to the uninterrupted run's weights."""
import os
import signal
import subprocess
import time

import torch

import mmvit5  # noqa: F401  allow-lists what mmengine checkpoints hold

from conftest import REPO, config, run_tool, tool

UPERNET = 'toy/vit5-tiny_upernet_shapes.py'
# dataloader workers draw the augmentations (seeded per worker by mmengine); the configs'
# RNGStateHook carries the main process's generators (drop path) across the restart
OPTIONS = ['train_cfg.max_iters=8', 'train_cfg.val_interval=8',
           'default_hooks.checkpoint.interval=4', 'train_dataloader.num_workers=1',
           'model.backbone.drop_path_rate=0.1']


def test_sigkill_mid_run_then_resume_equals_uninterrupted(toy_root, tmp_path):
    full, killed = tmp_path / 'full', tmp_path / 'killed'
    run_tool(tool('train.py') + [config(UPERNET), '--work-dir', str(full), '--cfg-options',
                                 *OPTIONS], cwd=toy_root)
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
    out = run_tool(tool('train.py') + [config(UPERNET), '--work-dir', str(killed), '--resume',
                                       '--cfg-options', *OPTIONS], cwd=toy_root)
    assert 'resumed epoch: 0, iter: 4' in out
    ours = torch.load(killed / 'iter_8.pth', weights_only=True)['state_dict']
    ref = torch.load(full / 'iter_8.pth', weights_only=True)['state_dict']
    assert ours.keys() == ref.keys()
    different = [k for k in ref if not torch.equal(ours[k], ref[k])]
    assert not different, different[:5]
