"""Fit a recipe's iteration schedule to another training length (``tools/train.py --iters``)."""
import math
from typing import Optional

from mmengine.config import Config

MAX_EVALS = 10  # a short run validates and saves at most this often: every max_iters / 10


def fit_schedule(cfg: Config, max_iters: int, warmup: Optional[int] = None) -> None:
    """Shorten (or lengthen) an iteration-based recipe to ``max_iters``.

    The recipes fix their schedules to their own length when parsed: a step at 88.9 % of
    184,375 iterations, a poly decay ending at 160,000, Mask2Former's last validation interval
    starting at 365,001. Here every iteration of the old run moves to its place in the new
    one:

    - schedulers ending at the old length end at ``max_iters``; their ``begin``, ``end`` and
      ``milestones`` keep their fraction of the run;
    - the warm-up (a first scheduler ending before the others) keeps its length but takes at
      most a quarter of the run, and the scheduler that began where it ended still does; a run
      too short for a warm-up (1 iteration) has none;
    - validation, checkpoint and ``dynamic_intervals`` intervals keep their count per run, but
      at most :data:`MAX_EVALS` a run (an interval of at least ``ceil(max_iters / 10)``), and
      the logger logs at least that often.

    Args:
        cfg (Config): Changed in place (``train_cfg``, ``param_scheduler``, default hooks).
        max_iters (int): The new training length.
        warmup (int, optional): Warm-up iterations; default as described.
    """
    if 'max_iters' not in (cfg.get('train_cfg') or {}):
        raise ValueError(f'--iters needs an iteration-based recipe (train_cfg.max_iters), got '
                         f'train_cfg={dict(cfg.get("train_cfg") or {})}; set an epoch-based '
                         'one\'s length with --cfg-options train_cfg.max_epochs=N')
    if not isinstance(max_iters, int) or isinstance(max_iters, bool) or max_iters < 1:
        raise ValueError(f'--iters must be an integer >= 1, got {max_iters!r}')
    old = cfg.train_cfg.max_iters
    _fit_schedulers(cfg, old, max_iters, warmup)
    train_cfg = cfg.train_cfg
    train_cfg.max_iters = max_iters
    if 'val_interval' in train_cfg:
        train_cfg.val_interval = _interval(train_cfg.val_interval, old, max_iters)
    if train_cfg.get('val_begin', 1) > 1:
        train_cfg.val_begin = _point(train_cfg.val_begin, old, max_iters)
    if train_cfg.get('dynamic_intervals'):
        # mmengine finds the current interval by bisecting the milestones: keep them rising
        fitted, last = [], 0
        for milestone, interval in train_cfg.dynamic_intervals:
            milestone = min(max(_point(milestone, old, max_iters), last + 1), max_iters)
            fitted.append((milestone, _interval(interval, old, max_iters)))
            last = milestone
        train_cfg.dynamic_intervals = fitted
    hooks = cfg.get('default_hooks') or {}
    checkpoint = hooks.get('checkpoint')
    if checkpoint and checkpoint.get('interval', -1) > 0:
        checkpoint.interval = _interval(checkpoint.interval, old, max_iters)
    logger = hooks.get('logger')
    if logger and logger.get('interval', 0) > _floor(max_iters):
        logger.interval = _floor(max_iters)


def _fit_schedulers(cfg: Config, old: int, max_iters: int, warmup: Optional[int]) -> None:
    schedulers = cfg.get('param_scheduler') or []
    single = not isinstance(schedulers, (list, tuple))
    schedulers = [schedulers] if single else list(schedulers)
    for scheduler in schedulers:
        if scheduler.get('by_epoch', True):
            raise ValueError(f'param_scheduler {scheduler.get("type")} has by_epoch=True (the '
                             'default) in an iteration-based recipe, where it never steps; '
                             'set by_epoch=False and its begin/end in iterations')
    first = schedulers[0] if schedulers else None
    warm_old = warm_end = None
    if first is not None and first.get('begin', 0) == 0 and first.get('end', old) < old:
        warm_old = first.end
        warm_end = warmup if warmup is not None else min(first.end, max(max_iters // 4, 1))
        if warm_end < 1 or warm_end >= max_iters:  # no room for one: the run starts decaying
            schedulers.pop(0)
            warm_end = 0
        else:
            first.end = warm_end

    def point(p: int) -> int:
        if warm_old is not None and p == warm_old:
            return warm_end  # what followed the warm-up still does
        return _point(p, old, max_iters)

    for scheduler in schedulers:
        if scheduler is first and warm_end:
            continue
        begin = point(scheduler.get('begin', 0))
        end = point(scheduler.get('end', old))
        if 'begin' in scheduler:
            scheduler.begin = begin
        if 'end' in scheduler:  # else it runs to the end, as it did
            scheduler.end = end
        if 'T_max' in scheduler:  # CosineAnnealing: the decay spans the fitted begin..end
            scheduler.T_max = max(end - begin, 1)
        if 'milestones' in scheduler:
            scheduler.milestones = [min(max(int(m * max_iters / old), 1), max_iters)
                                    for m in scheduler.milestones]
    if single and schedulers:
        cfg.param_scheduler = schedulers[0]
    elif not single:
        cfg.param_scheduler = schedulers


def _point(iteration: int, old: int, max_iters: int) -> int:
    """Where iteration ``iteration`` of an ``old``-iteration run falls in the fitted one."""
    if iteration >= old:
        return max_iters
    if iteration <= 0:
        return 0
    return min(max(round(iteration * max_iters / old), 1), max_iters)


def _floor(max_iters: int) -> int:
    return math.ceil(max_iters / MAX_EVALS)


def _interval(interval: int, old: int, max_iters: int) -> int:
    """As many per run as before, but at most :data:`MAX_EVALS` and at least one."""
    return min(max(round(interval * max_iters / old), _floor(max_iters)), max_iters)
