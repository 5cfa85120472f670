"""The ablations of ``configs/ablations/``: which ViT5 switches each config sets, and a toy
study that trains the same switches on the generated shapes set over several seeds.

Each ablation config is a one-line override of a full recipe (``vit5_maskrcnn_coco.py``,
``vit5_upernet_ade20k.py``). The toy study reads the override back from the config (its
backbone entries that differ from the recipe's), so the study and the configs cannot drift
apart, and applies it to the CPU-sized config of ``configs/toy/`` that inherits the recipe.
"""
import glob
import json
import math
import multiprocessing
import os
import os.path as osp
import statistics
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Dict, List, Optional, Sequence

import torch
from mmengine.config import Config
from mmengine.runner import Runner

from mmvit5.utils import fit_schedule

# ViT5's ablation switches (defaults: the released model)
SWITCHES = ('use_abs_pos', 'use_rope', 'num_registers', 'qk_norm', 'layer_scale_init_value',
            'norm', 'qkv_bias')
BASELINE = 'baseline'
# variants that switch several ablations of configs/ablations/ at once: a plain ViT is ViT-5
# with every addition off (LayerNorm, no registers, no RoPE, no LayerScale, no QK-Norm); it
# keeps the absolute position embedding, a plain ViT's own
COMBINATIONS = {'plain-vit': ('ln', 'reg0', 'no-rope', 'no-layer-scale', 'no-qk-norm')}


def ablation_configs(config_dir: str, recipe: str) -> Dict[str, str]:
    """``{variant: path}`` of ``<config_dir>/ablations/<recipe>_<variant>.py``, sorted.

    Args:
        config_dir (str): The ``configs/`` folder.
        recipe (str): The recipe's file name without ``.py``, e.g. ``'vit5_upernet_ade20k'``.
    """
    paths = sorted(glob.glob(osp.join(config_dir, 'ablations', f'{recipe}_*.py')))
    if not paths:
        raise FileNotFoundError(f'no ablation configs {recipe}_*.py in '
                                f'{osp.join(config_dir, "ablations")}')
    return {osp.basename(p)[len(recipe) + 1:-len('.py')]: p for p in paths}


def switch_override(ablation: Config, recipe: Config, name: str = 'the ablation') -> dict:
    """The ViT5 switches the ablation config sets: its ``model.backbone`` entries that differ
    from those of the recipe it overrides. Raises unless they are all switches."""
    ablated, base = ablation.model.backbone, recipe.model.backbone
    override = {k: v for k, v in ablated.items() if k not in base or base[k] != v}
    other = sorted(set(override) - set(SWITCHES))
    if not override or other:
        raise ValueError(f'{name} should change only ViT5 ablation switches {SWITCHES} of its '
                         f'recipe; it changes {sorted(override)}')
    return override


def variant_override(name: str, available: Dict[str, str], recipe: Config) -> dict:
    """The switches of variant ``name``: one config of ``available`` (``{variant: path}``,
    :func:`ablation_configs`) or a :data:`COMBINATIONS` entry, the union of its configs'."""
    override = {}
    for part in COMBINATIONS.get(name, (name, )):
        override.update(switch_override(Config.fromfile(available[part]), recipe,
                                        available[part]))
    return override


def toy_config(config: str, override: dict, seed: int, iters: int, work_dir: str,
               name: str) -> Config:
    """The toy ``config`` with the switches ``override``, seed ``seed``, ``iters`` training
    iterations and its learning-rate schedule ending there, no checkpoints, evaluated once
    after training by :func:`train_and_evaluate`."""
    cfg = Config.fromfile(config)
    cfg.model.backbone.update(override)
    cfg.randomness = dict(seed=seed)
    cfg.work_dir = work_dir
    cfg.experiment_name = name
    cfg.log_level = 'WARNING'
    fit_schedule(cfg, iters)  # warm-up at most a quarter of the run, decay ending at iters
    cfg.train_cfg.val_interval = iters + 1  # evaluated once, after training
    cfg.default_hooks.checkpoint = dict(type='CheckpointHook', interval=iters + 1,
                                        save_last=False)
    cfg.default_hooks.logger = dict(type='LoggerHook', interval=max(iters // 4, 1))
    return cfg


def train_and_evaluate(cfg: Config) -> Dict[str, float]:
    """Train ``cfg`` with mmengine's Runner, then evaluate it once on its val set.

    Returns:
        dict: The evaluator's metrics and ``seconds`` (training and evaluation wall time).
    """
    start = time.perf_counter()
    runner = Runner.from_cfg(cfg)
    runner.train()
    metrics = {k: float(v) for k, v in runner.val().items()}
    metrics['seconds'] = time.perf_counter() - start
    return metrics


RUN_RECORD = 'ablation_run.json'


def _finished_run(work_dir: str, toy: str, override: dict, iters: int) -> Optional[dict]:
    """The metrics a finished run of this exact setting left in ``work_dir``, else None."""
    path = osp.join(work_dir, RUN_RECORD)
    if not osp.isfile(path):
        return None
    with open(path) as f:
        record = json.load(f)
    same = (record.get('toy') == osp.basename(toy) and record.get('override') == override
            and record.get('iters') == iters)
    return record['metrics'] if same else None


def _train_one(toy: str, override: dict, seed: int, iters: int, work_dir: str, name: str,
               threads: int) -> Dict[str, float]:
    torch.set_num_threads(threads)
    metrics = train_and_evaluate(toy_config(toy, override, seed, iters, work_dir, name))
    # written once the run is complete (and atomically), so an interrupted study resumes at
    # the first unfinished run and never reads a half-written record
    record = dict(toy=osp.basename(toy), override=override, iters=iters, seed=seed,
                  metrics=metrics)
    os.makedirs(work_dir, exist_ok=True)
    tmp = osp.join(work_dir, RUN_RECORD + '.tmp')
    with open(tmp, 'w') as f:
        json.dump(record, f, indent=1)
    os.replace(tmp, osp.join(work_dir, RUN_RECORD))
    return metrics


def run_study(toy: str, variants: Dict[str, dict], seeds: Sequence[int], iters: int,
              out: str, jobs: int = 1, log=print) -> Dict[str, dict]:
    """Train the toy config once per variant and seed.

    Args:
        toy (str): Toy config path (run from the folder holding its ``data/toy``).
        variants (dict): ``{name: switch override}``; ``BASELINE`` maps to ``{}``.
        seeds (Sequence[int]): One run per seed and variant.
        iters (int): Training iterations per run.
        out (str): Work dirs go to ``<out>/<variant>/seed<k>``. A run whose work dir holds
            the record of a finished run with the same toy config, override and ``iters``
            is not trained again: its recorded metrics are reused (a resumed study).
        jobs (int): Runs at a time, each in its own process with an equal share of this
            process's threads (small CPU models use one thread better than several).
        log (callable): Progress lines.

    Returns:
        dict: ``{variant: dict(override=..., runs=[dict(seed=..., <metric>=..., ...)])}``
        in the order of ``variants`` and ``seeds``.
    """
    threads = max(torch.get_num_threads() // jobs, 1)
    metrics = {}
    with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context('spawn')) as pool:
        futures = {}
        for name, override in variants.items():
            for seed in seeds:
                work_dir = osp.join(out, name, f'seed{seed}')
                done = _finished_run(work_dir, toy, override, iters)
                if done is not None:
                    metrics[name, seed] = done
                    log(f'[ablation] {name} seed {seed}: finished before, in {work_dir}')
                else:
                    futures[name, seed] = pool.submit(_train_one, toy, override, seed, iters,
                                                      work_dir, f'{name}_seed{seed}', threads)
        for (name, seed), future in futures.items():
            metrics[name, seed] = future.result()
            log(f'[ablation] {name} seed {seed}: ' +
                ', '.join(f'{k} {v:.2f}' for k, v in metrics[name, seed].items()))
    return {name: dict(override=override,
                       runs=[dict(seed=seed, **metrics[name, seed]) for seed in seeds])
            for name, override in variants.items()}


def spread(values: List[float]) -> Dict[str, float]:
    """Mean, sample standard deviation (0 for one value), min and max."""
    return dict(mean=statistics.fmean(values),
                std=statistics.stdev(values) if len(values) > 1 else 0.0,
                min=min(values), max=max(values), n=len(values))


def summarize(results: Dict[str, dict], metric: str) -> Dict[str, dict]:
    """Per variant: the spread of ``metric`` over seeds, the difference of its mean from the
    baseline's with that difference's standard error, and the paired differences (same seed:
    same data order, augmentations and initial draws where the switch leaves the parameter
    shapes alone) as mean, std and how many seeds are ahead. None without a baseline."""
    summary = {name: spread([run[metric] for run in result['runs']])
               for name, result in results.items()}
    base = summary.get(BASELINE)
    by_seed = {run['seed']: run[metric] for run in results.get(BASELINE, {}).get('runs', [])}
    for name, stats in summary.items():
        stats['delta'] = None if base is None else stats['mean'] - base['mean']
        stats['delta_se'] = None if base is None else math.sqrt(
            stats['std']**2 / stats['n'] + base['std']**2 / base['n'])
        diffs = [run[metric] - by_seed[run['seed']] for run in results[name]['runs']
                 if run['seed'] in by_seed]
        paired = name != BASELINE and diffs and len(diffs) == stats['n']
        stats['paired'] = spread(diffs) if paired else None
        stats['ahead'] = sum(d > 0 for d in diffs) if paired else None
    return summary


def markdown_table(results: Dict[str, dict], summary: Dict[str, dict], metric: str,
                   seconds: Optional[float] = None) -> str:
    """The study as a Markdown table: variant, switch, metric mean ± std, min-max, per-seed
    values, difference from the baseline ± its standard error. COCO's mAP (a fraction in
    mmdet's metrics) is shown in percent, as the quick start's tables show it."""
    scale, name = (100, metric.split('/')[-1].replace('_', ' ') + ' (%)') \
        if metric.startswith('coco/') else (1, metric)

    def num(value: float, sign: str = '') -> str:
        return f'{value * scale:{sign}.1f}'

    lines = [f'| variant | switch | {name} mean ± std | min - max | per seed | '
             'vs baseline ± s.e. | paired: mean ± std of seed differences (ahead) |',
             '|---|---|---|---|---|---|---|']
    for variant, stats in summary.items():
        override = ', '.join(f'{k}={v!r}' for k, v in results[variant]['override'].items())
        per_seed = ' / '.join(num(run[metric]) for run in results[variant]['runs'])
        delta = '-' if variant == BASELINE or stats['delta'] is None else \
            f'{num(stats["delta"], "+")} ± {num(stats["delta_se"])}'
        paired = '-' if not stats.get('paired') else \
            f'{num(stats["paired"]["mean"], "+")} ± {num(stats["paired"]["std"])} ' \
            f'({stats["ahead"]}/{stats["paired"]["n"]})'
        lines.append(f'| {variant} | {override or "(released)"} | {num(stats["mean"])} ± '
                     f'{num(stats["std"])} | {num(stats["min"])} - {num(stats["max"])} | '
                     f'{per_seed} | {delta} | {paired} |')
    if seconds is not None:
        lines.append(f'\n{len(summary)} variants x {summary[next(iter(summary))]["n"]} seeds '
                     f'in {seconds / 60:.1f} min.')
    return '\n'.join(lines)
