"""Exact resume: keep the random-number generators' states in mmengine checkpoints."""
import random
from typing import Optional

import numpy as np
import torch
from mmengine.hooks import Hook
from mmengine.registry import HOOKS


@HOOKS.register_module()
class RNGStateHook(Hook):
    """Save the Python, numpy and torch (CPU and CUDA) RNG states with each checkpoint and
    restore them when resuming, so stochastic depth, dropout and proposal sampling continue
    as in an uninterrupted run (mmengine 0.10 restores weights, optimizer and schedulers, but
    not the generators).

    The states are put back at the first training iteration after the resume, once mmengine
    has advanced the dataloader past the consumed batches. Augmentations drawn in the main
    process (``num_workers=0``) while advancing differ from the uninterrupted run's; with
    dataloader workers (seeded per worker by mmengine) the resumed run is exact.

    Each rank restores its own states (the checkpoint holds rank 0's; other ranks keep theirs).
    """

    priority = 'VERY_LOW'

    def __init__(self) -> None:
        self._pending: Optional[dict] = None

    def before_save_checkpoint(self, runner, checkpoint: dict) -> None:
        checkpoint['rng_state'] = dict(
            python=random.getstate(), numpy=np.random.get_state(),
            torch=torch.get_rng_state(),
            cuda=torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [])

    def after_load_checkpoint(self, runner, checkpoint: dict) -> None:
        if runner.rank == 0:
            self._pending = checkpoint.get('rng_state')

    def before_train_iter(self, runner, batch_idx: int, data_batch=None) -> None:
        if self._pending is None:
            return
        state, self._pending = self._pending, None
        random.setstate(state['python'])
        np.random.set_state(state['numpy'])
        torch.set_rng_state(state['torch'])
        if state['cuda'] and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state['cuda'])
