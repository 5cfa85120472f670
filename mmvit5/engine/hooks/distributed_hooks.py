"""Checks for distributed runs: the same model on every rank, and resuming on another number
of processes."""
import hashlib
import itertools
import logging
from typing import Optional, Sequence

import torch
import torch.nn as nn
from mmengine.dist import all_gather, get_world_size
from mmengine.hooks import Hook
from mmengine.logging import print_log
from mmengine.model import is_model_wrapper
from mmengine.registry import HOOKS

# per-rank statistics that the forward updates and DDP re-broadcasts at the next forward
PER_RANK_BUFFERS = ('running_mean', 'running_var', 'num_batches_tracked')


def tensor_digests(module: nn.Module, skip: Sequence[str] = ()) -> dict:
    """A 64-bit digest of the bytes of every parameter and buffer (non-persistent ones, such as
    RoPE frequency tables, included), by name; names ending with one of ``skip`` are left out."""
    digests = {}
    for name, t in itertools.chain(module.named_parameters(), module.named_buffers()):
        if name.endswith(tuple(skip)):
            continue
        data = t.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy()
        digest = hashlib.blake2b(data.tobytes(), digest_size=8).digest()
        digests[name] = int.from_bytes(digest, 'little', signed=True)
    return digests


def check_same_on_all_ranks(module: nn.Module, when: str, skip: Sequence[str] = ()) -> int:
    """Raise on every rank unless all ranks hold bit-identical parameters and buffers.

    Args:
        module (nn.Module): The model (unwrapped) of this rank.
        when (str): Named in the messages, e.g. ``'after loading the checkpoint'``.
        skip (Sequence[str]): Name endings of tensors that may differ across ranks.

    Returns:
        int: A digest of the whole model, the same on every rank.
    """
    digests = tensor_digests(module, skip)
    names = list(digests)
    mine = torch.tensor([len(names), *digests.values()], dtype=torch.int64)
    # every rank must hold the same number of tensors before their digests can be gathered
    counts = all_gather(mine[:1])
    if any(int(c) != len(names) for c in counts):
        raise RuntimeError(f'{when}: the ranks hold different numbers of parameters and '
                           f'buffers ({[int(c) for c in counts]}): they built different models')
    gathered = torch.stack(all_gather(mine))
    for rank, theirs in enumerate(gathered):
        differ = (theirs != mine).nonzero().flatten().tolist()
        if differ:
            raise RuntimeError(
                f'{when}: rank {rank} holds a different {names[differ[0] - 1]!r} than this '
                f'rank ({len(differ)} tensors differ). Every rank must load the same weights: '
                'check that the checkpoint path exists and holds the same file on every node')
    return int.from_bytes(hashlib.blake2b(mine.numpy().tobytes(), digest_size=8).digest(),
                          'little')


@HOOKS.register_module()
class StateDictConsistencyHook(Hook):
    """Check that every rank holds the same model once the checkpoint is loaded (before the
    first iteration) and after the first optimizer step; logs the model's digest.

    A checkpoint read on one rank only, a path that exists on one node only, or a buffer
    computed differently per rank would otherwise train silently different replicas. After the
    step, BatchNorm statistics (:data:`PER_RANK_BUFFERS`) are per rank until DDP re-broadcasts
    them at the next forward, and are not compared.
    """

    priority = 'VERY_LOW'

    def __init__(self) -> None:
        self._first_iter = 0

    def _check(self, runner, when: str, skip: Sequence[str] = ()) -> None:
        if get_world_size() == 1:
            return
        model = runner.model.module if is_model_wrapper(runner.model) else runner.model
        digest = check_same_on_all_ranks(model, when, skip)
        runner.logger.info(f'same model on all {get_world_size()} ranks {when}: '
                           f'digest {digest:016x}')

    def before_train(self, runner) -> None:
        self._first_iter = runner.iter
        self._check(runner, f'at iteration {runner.iter}, after loading')

    def after_train_iter(self, runner, batch_idx, data_batch=None, outputs=None) -> None:
        if batch_idx == self._first_iter:
            self._check(runner, f'after the optimizer step of iteration {runner.iter}',
                        PER_RANK_BUFFERS)


def _scale_lr_state(checkpoint: dict, ratio: float) -> None:
    for group in checkpoint.get('optimizer', {}).get('param_groups', []):
        for key in ('lr', 'initial_lr'):
            if key in group:
                group[key] *= ratio
    schedulers = checkpoint.get('param_schedulers', [])
    if isinstance(schedulers, dict):  # one list per optimizer wrapper
        schedulers = [s for group in schedulers.values() for s in group]
    for state in schedulers:
        if state.get('param_name') == 'lr':
            for key in ('base_values', '_last_value'):
                state[key] = [v * ratio for v in state.get(key, [])]


@HOOKS.register_module()
class WorldSizeChangeHook(Hook):
    """Record the number of processes and the batch per process in each checkpoint and, when a
    run resumes with another total batch, log what that changes.

    mmengine 0.10.7 resumes the iteration count, the optimizer and the learning-rate schedule
    as they were saved, and each process skips its first ``iter`` batches (it reads its own
    shard of the sampler's stream), whatever the number of processes. It does not rescale the
    learning rate, even with ``auto_scale_lr`` on: the saved optimizer and schedulers replace
    the scaled ones. With ``auto_scale_lr.enable=True`` this hook scales the resumed learning
    rate (optimizer and schedulers) by new total batch / saved total batch, the linear scaling
    rule that ``auto_scale_lr`` applies to a fresh run.
    """

    priority = 'VERY_LOW'

    @staticmethod
    def _batch(runner) -> Optional[int]:
        """The batch per process. mmdet's detection loaders batch through a batch sampler
        (images grouped by aspect ratio) and leave the loader's ``batch_size`` None."""
        loader = runner.train_loop.dataloader
        return getattr(loader.batch_sampler, 'batch_size', loader.batch_size)

    def before_save_checkpoint(self, runner, checkpoint: dict) -> None:
        checkpoint['meta'].update(world_size=runner.world_size, batch_size=self._batch(runner))

    def after_load_checkpoint(self, runner, checkpoint: dict) -> None:
        meta = checkpoint.get('meta', {})
        if not getattr(runner, '_resume', False) or 'world_size' not in meta:
            return
        step = meta.get('iter', 0)
        batch = self._batch(runner)
        if meta.get('batch_size') is None or batch is None:
            print_log(f'resuming at iteration {step} with {runner.world_size} process(es) x '
                      f'batch {batch}; the checkpoint records {meta["world_size"]} process(es) '
                      'but not their batch (detectors\' checkpoints written before mmvit5 read '
                      'it from the batch sampler), so a change of the total batch cannot be '
                      'checked and the learning rate resumes as saved, not rescaled: resume '
                      'with the total batch the run was trained with.', logger='current',
                      level=logging.WARNING)
            return
        old_total = meta['world_size'] * meta['batch_size']
        new_total = runner.world_size * batch
        if old_total == new_total:
            return
        ratio = new_total / old_total
        what = (f'resuming at iteration {step} with {runner.world_size} process(es) x batch '
                f'{batch} = total batch {new_total}; the checkpoint was trained '
                f'with {meta["world_size"]} x {meta["batch_size"]} = {old_total}. As mmengine '
                f'resumes, the iteration count and the schedule continue from {step} and each '
                f'process skips its first {step} batches ({step * new_total} samples, where '
                f'{step * old_total} were seen). ')
        if (runner.auto_scale_lr or {}).get('enable', False):
            _scale_lr_state(checkpoint, ratio)
            how = (f'auto_scale_lr is on: the resumed learning rate is scaled by {ratio:g} '
                   '(linear scaling rule).')
        else:
            how = ('The learning rate is NOT rescaled. To keep the schedule, keep the total '
                   f'batch (train_dataloader.batch_size={old_total / runner.world_size:g} per '
                   'process) or pass --auto-scale-lr (auto_scale_lr.enable=True) to scale the '
                   f'resumed learning rate by {ratio:g}.')
        print_log(what + how, logger='current', level=logging.WARNING)
