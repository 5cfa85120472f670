"""Exact resume: keep the random-number generators' states in mmengine checkpoints."""
import logging
import random
from typing import Iterator, Optional

import numpy as np
import torch
from mmengine.hooks import Hook
from mmengine.logging import print_log
from mmengine.registry import HOOKS


def get_rng_states() -> dict:
    """The Python, numpy and torch (CPU and CUDA) generators' states."""
    return dict(python=random.getstate(), numpy=np.random.get_state(),
                torch=torch.get_rng_state(),
                cuda=torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [])


def set_rng_states(states: dict) -> None:
    """Put back what :func:`get_rng_states` returned."""
    random.setstate(states['python'])
    np.random.set_state(states['numpy'])
    torch.set_rng_state(states['torch'])
    if states['cuda'] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states['cuda'])


def _train_sampler(runner):
    """The sampler that orders the training set (inside the batch sampler, if any)."""
    loader = runner.train_loop.dataloader
    sampler = getattr(loader.batch_sampler, 'sampler', None)
    return loader.sampler if sampler is None else sampler


class _StatesBeforeBatch:
    """Stands in for the train loop's data iterator while mmengine skips the ``skip`` batches
    trained before the checkpoint; sets the saved states just before the first new batch is
    drawn, then gives the loop its own iterator back."""

    def __init__(self, loop, states: dict) -> None:
        self.loop, self.states = loop, states
        self.iterator: Iterator = loop.dataloader_iterator
        self.skip = loop.iter

    def __iter__(self):
        return self

    def __next__(self):
        if self.skip == 0:
            set_rng_states(self.states)
            self.loop.dataloader_iterator = self.iterator
        self.skip -= 1
        return next(self.iterator)


@HOOKS.register_module()
class RNGStateHook(Hook):
    """Save the Python, numpy and torch (CPU and CUDA) RNG states with each checkpoint and
    restore them when resuming, so that augmentations, stochastic depth, dropout and proposal
    sampling continue as in an uninterrupted run (mmengine 0.10 restores weights, optimizer
    and schedulers, but not the generators).

    On resume, mmengine advances the dataloader past the batches already trained, running
    their augmentations again; the states are put back after that, just before the first new
    batch is drawn. Augmentations drawn in the main process (``num_workers=0``) are then the
    uninterrupted run's, and so are those of dataloader workers, which mmengine seeds per
    worker and which redo the skipped batches. The training's random stream is the same with
    and without validation: the states are put back after each validation, and a checkpoint
    saved during one (``save_best``) holds the training's states.

    The data order comes from the sampler's own seed, which mmengine draws when it builds the
    dataloader, before the checkpoint's seed is read: ``tools/train.py --resume`` sets the
    checkpoint's seed before (:func:`mmvit5.utils.enable_resume`); elsewhere this hook warns
    when the two differ.

    Each rank restores its own states (the checkpoint holds rank 0's; other ranks keep theirs).
    """

    priority = 'VERY_LOW'

    def __init__(self) -> None:
        self._pending: Optional[dict] = None
        self._training: Optional[dict] = None  # the training's states, during a validation

    def before_save_checkpoint(self, runner, checkpoint: dict) -> None:
        checkpoint['rng_state'] = self._training or get_rng_states()

    def after_load_checkpoint(self, runner, checkpoint: dict) -> None:
        if not getattr(runner, '_resume', False):
            return
        if runner.rank == 0:
            self._pending = checkpoint.get('rng_state')
        seed = checkpoint.get('meta', {}).get('seed')
        drawn = getattr(_train_sampler(runner), 'seed', None)
        if None not in (seed, drawn) and seed != drawn:
            print_log(f'the training data order was drawn with seed {drawn}, the checkpoint '
                      f'was trained with seed {seed}: the resumed run sees other images than '
                      f'the interrupted one would have. Set randomness.seed={seed} (tools/'
                      'train.py --resume does)', logger='current', level=logging.WARNING)

    def before_train(self, runner) -> None:
        if self._pending is None:
            return
        states, self._pending = self._pending, None
        loop = runner.train_loop
        if getattr(loop, 'dataloader_iterator', None) is not None and loop.iter > 0:
            loop.dataloader_iterator = _StatesBeforeBatch(loop, states)
        else:  # an epoch-based loop resumes at an epoch's start: its iterator is made later
            set_rng_states(states)

    def before_val(self, runner) -> None:
        self._training = get_rng_states()

    def after_val(self, runner) -> None:
        if self._training is not None:
            set_rng_states(self._training)
            self._training = None
