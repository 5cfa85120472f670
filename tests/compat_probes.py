"""The behaviour each patch of mmvit5.compat fixes, one probe per patch, run in a process of
its own (tests/test_compat.py runs it with the patch off and on):

    MMVIT5_DISABLE_PATCHES=NAME python tests/compat_probes.py NAME WORK_DIR

Exits 0 when the behaviour is right, raises the upstream error when it is not, and exits 77
(printing why) where this machine cannot show the bug.
"""
import argparse
import builtins
import os
import socket
import sys

import numpy as np
import torch
import torch.nn as nn
from sigkill import faulty_open

import mmvit5  # noqa: F401  applies the patches MMVIT5_DISABLE_PATCHES leaves on

SKIP = 77


def skip(reason: str) -> None:
    print(f'SKIP: {reason}')
    sys.exit(SKIP)


def allow_mmengine_checkpoints(work_dir: str) -> None:
    """What mmengine saves beside the weights loads under torch's weights_only=True."""
    from mmengine.logging import HistoryBuffer
    buffer = HistoryBuffer()
    buffer.update(0.5)
    buffer.mean()  # registers the statistics method that pickles as getattr
    path = os.path.join(work_dir, 'iter_1.pth')
    torch.save(dict(message_hub=dict(loss=buffer), rng=np.random.get_state(),
                    args=argparse.Namespace(model='vit5_base')), path)
    torch.load(path, weights_only=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def allow_cpu_distributed(work_dir: str) -> None:
    """mmengine's pytorch launcher and its DDP wrapper on a machine without CUDA (gloo)."""
    if torch.cuda.is_available():
        skip('CUDA is available: the patch leaves GPU runs to mmengine')
    from mmengine.dist import init_dist
    from mmengine.model.wrappers import MMDistributedDataParallel
    os.environ.update(RANK='0', LOCAL_RANK='0', WORLD_SIZE='1', MASTER_ADDR='127.0.0.1',
                      MASTER_PORT=str(free_port()))
    init_dist('pytorch', backend='gloo')
    MMDistributedDataParallel(nn.Linear(2, 2), device_ids=[0])
    torch.distributed.destroy_process_group()


def allow_cpu_slurm(work_dir: str) -> None:
    """mmengine's slurm launcher in one SLURM task on a machine without CUDA (gloo)."""
    if torch.cuda.is_available():
        skip('CUDA is available: the patch leaves GPU runs to mmengine')
    from mmengine.dist import init_dist
    os.environ.update(SLURM_PROCID='0', SLURM_NTASKS='1', SLURM_LOCALID='0',
                      SLURM_NODELIST='localhost', MASTER_ADDR='127.0.0.1',
                      MASTER_PORT=str(free_port()))
    init_dist('slurm', backend='gloo')
    assert torch.distributed.get_world_size() == 1
    torch.distributed.destroy_process_group()


class Killed(BaseException):
    """Stands for SIGKILL: no ``except Exception`` handler sees it."""


def regressor_runner(work_dir: str, max_iters: int = 2, **checkpoint):
    """A Runner (built with its Config, as tools/train.py builds one) that trains a linear
    regressor for ``max_iters`` iterations (2 per pass over its 4 samples) and saves a
    checkpoint after each; ``checkpoint``: more CheckpointHook options."""
    from mmengine.config import Config
    from mmengine.model import BaseModel
    from mmengine.runner import Runner

    class Regressor(BaseModel):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 1)

        def forward(self, inputs, mode='loss'):
            return dict(loss=self.fc(torch.stack(inputs)).square().mean())

    cfg = Config(dict(
        work_dir=work_dir,
        train_dataloader=dict(dataset=[dict(inputs=torch.randn(4)) for _ in range(4)],
                              batch_size=2, num_workers=0,
                              sampler=dict(type='DefaultSampler', shuffle=False)),
        optim_wrapper=dict(optimizer=dict(type='SGD', lr=0.1)),
        train_cfg=dict(by_epoch=False, max_iters=max_iters),
        default_hooks=dict(checkpoint=dict(type='CheckpointHook', by_epoch=False, interval=1,
                                           **checkpoint))))
    return Runner(model=Regressor(), **cfg, cfg=cfg)


def crash_safe_checkpoints(work_dir: str) -> None:
    """A save interrupted halfway (max_keep_ckpts=1) leaves last_checkpoint naming a whole file."""
    runner = regressor_runner(work_dir, max_keep_ckpts=1)

    def kill():
        raise Killed

    real_open = builtins.open
    # the second checkpoint, written in place or as a temporary beside it
    builtins.open = faulty_open('iter_2.pth', 1, kill)
    try:
        runner.train()
    except Killed:
        pass
    finally:
        builtins.open = real_open
    with open(os.path.join(work_dir, 'last_checkpoint')) as f:
        pointed = f.read().strip()
    assert set(torch.load(pointed, weights_only=True)) >= {'state_dict', 'meta'}


def contiguous_roi_align(work_dir: str) -> None:
    """mmcv's RoIAlign pools a channels-last map as torchvision's stride-aware roi_align."""
    import mmcv._ext
    from mmcv.ops import RoIAlign
    from torchvision.ops import roi_align
    if 'no compiled mmcv ops' in getattr(mmcv._ext, 'BACKEND', ''):
        skip('mmcv ops are served by torchvision here, which reads any layout; the bug is '
             "in mmcv's compiled kernel (MMCV_OPS=compiled bash tools/install.sh)")
    torch.manual_seed(0)
    device = 'cuda' if torch.cuda.is_available() else 'cpu'
    x = torch.randn(2, 8, 16, 16, device=device).contiguous(memory_format=torch.channels_last)
    rois = torch.tensor([[0, 1., 1., 10., 12.], [1, 3., 2., 15., 9.]], device=device)
    torch.testing.assert_close(RoIAlign(7, 0.5, sampling_ratio=0, aligned=True)(x, rois),
                               roi_align(x, rois, 7, 0.5, sampling_ratio=0, aligned=True))


def format_config_once(work_dir: str) -> None:
    """A run that logs its config and saves two checkpoints formats it with yapf once."""
    from yapf.yapflib import yapf_api
    reformat, calls = yapf_api.reformatter.Reformat, []

    def counted(*args, **kwargs):
        calls.append(1)
        return reformat(*args, **kwargs)

    yapf_api.reformatter.Reformat = counted
    regressor_runner(work_dir).train()
    assert len(calls) == 1, f'formatted the same config {len(calls)} times'


def no_epoch_sleep_without_workers(work_dir: str) -> None:
    """Six iterations over four samples in batches of two start the loader (no workers) again
    twice, without sleeping."""
    import time
    naps = []
    time.sleep = naps.append
    regressor_runner(work_dir, max_iters=6).train()
    assert not naps, f'slept {sum(naps)} s at {len(naps)} restarts of a loader without workers'


def skip_unimportable_multimodal(work_dir: str) -> None:
    """mmdet's models import although transformers lacks what mmpretrain's BLIP/CLIP import."""
    import importlib.util
    if importlib.util.find_spec('transformers') is None:
        skip('transformers is not installed: mmpretrain defines no multimodal models')
    from transformers import modeling_utils

    from _mmvit5_hook import MULTIMODAL_NAMES as _MULTIMODAL_NAMES
    if all(hasattr(modeling_utils, name) for name in _MULTIMODAL_NAMES):
        skip('the installed transformers still has what mmpretrain 1.2.0 imports')
    import mmdet.models  # noqa: F401


def installed_packages_without_pkg_resources(work_dir: str) -> None:
    """A recipe's ``mmdet::`` base resolves without setuptools' pkg_resources warning."""
    import warnings

    from mmengine.config import Config
    path = os.path.join(work_dir, 'scoped.py')
    os.makedirs(work_dir, exist_ok=True)
    with open(path, 'w') as f:
        f.write("_base_ = ['mmdet::_base_/default_runtime.py']\n")
    with warnings.catch_warnings():
        warnings.filterwarnings('error', message='pkg_resources is deprecated')
        cfg = Config.fromfile(path)
    assert cfg.default_scope == 'mmdet', cfg.default_scope


if __name__ == '__main__':
    name, work_dir = sys.argv[1:]
    globals()[name](work_dir)
    print(f'OK: {name}')
