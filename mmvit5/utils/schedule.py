"""Fit a recipe's iteration schedule to another training length (``tools/train.py --iters``)."""
from typing import Optional

from mmengine.config import Config


def fit_schedule(cfg: Config, max_iters: int, warmup: Optional[int] = None) -> None:
    """Shorten (or lengthen) an iteration-based recipe to ``max_iters``.

    The recipes fix their schedulers to their own length when parsed: a step at 88.9 % of
    184,375 iterations, a poly decay ending at 160,000. Here every scheduler ending at the
    old length ends at ``max_iters``, steps keep their fraction of the run, the warm-up keeps
    its length but takes at most a quarter of the run, and validation and checkpoints keep
    their count per run.

    Args:
        cfg (Config): Changed in place (``train_cfg``, ``param_scheduler``, checkpoint hook).
        max_iters (int): The new training length.
        warmup (int, optional): Warm-up iterations; default as described.
    """
    if 'max_iters' not in cfg.train_cfg:
        raise ValueError(f'--iters needs an iteration-based recipe (train_cfg.max_iters), got '
                         f'train_cfg={dict(cfg.train_cfg)}; set an epoch-based one\'s length '
                         'with --cfg-options train_cfg.max_epochs=N')
    old = cfg.train_cfg.max_iters
    if not isinstance(max_iters, int) or max_iters < 1:
        raise ValueError(f'--iters must be an integer >= 1, got {max_iters!r}')
    scale = max_iters / old
    schedulers = cfg.get('param_scheduler') or []
    if not isinstance(schedulers, (list, tuple)):
        schedulers = [schedulers]
    first = schedulers[0] if schedulers else None
    warm_end = None
    if first is not None and first.get('begin', 0) == 0 and first.get('end', old) < old:
        warm_end = warmup if warmup is not None else min(first.end, max(max_iters // 4, 1))
        first.end = warm_end
    for scheduler in schedulers:
        if scheduler is first and warm_end is not None:
            continue
        if scheduler.get('begin', 0) and warm_end is not None:
            scheduler.begin = warm_end  # the decay that followed the warm-up still does
        if scheduler.get('end', old) >= old:
            scheduler.end = max_iters
        if 'milestones' in scheduler:
            scheduler.milestones = [max(int(m * scale), 1) for m in scheduler.milestones]
    cfg.train_cfg.max_iters = max_iters
    if 'val_interval' in cfg.train_cfg:
        cfg.train_cfg.val_interval = _scaled(cfg.train_cfg.val_interval, scale, max_iters)
    checkpoint = cfg.get('default_hooks', {}).get('checkpoint')
    if checkpoint and 'interval' in checkpoint:
        checkpoint.interval = _scaled(checkpoint.interval, scale, max_iters)


def _scaled(interval: int, scale: float, max_iters: int) -> int:
    return min(max(round(interval * scale), 1), max_iters)
