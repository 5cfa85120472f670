"""Config loading and runner set-up shared by tools/train.py and tools/test.py."""
import argparse
import logging
import os
import os.path as osp
from typing import Iterator, Optional, Sequence, Union

import torch
from mmengine.config import Config
from mmengine.logging import print_log
from mmengine.registry import RUNNERS
from mmengine.runner import Runner, find_latest_checkpoint

from .schedule import fit_schedule
from .widths import check_widths

SCOPES = ('mmdet', 'mmseg', 'mmpretrain')


def config_from_args(args: argparse.Namespace,
                     check_data: Union[bool, Sequence[str]] = True) -> Config:
    """The config that tools/train.py's and tools/test.py's options describe
    (``add_runner_args`` of tools/cli_options.py); ``check_data`` as in :func:`check_config`
    (tools/test.py checks the test split only)."""
    os.environ.setdefault('LOCAL_RANK', str(args.local_rank))
    cfg = load_config(args.config, args.cfg_options, args.work_dir, check_data=check_data,
                      max_iters=getattr(args, 'iters', None))
    cfg.launcher = args.launcher
    return cfg


def build_runner(cfg: Config) -> Runner:
    """mmengine's Runner, or the config's own ``runner_type``."""
    return Runner.from_cfg(cfg) if 'runner_type' not in cfg else RUNNERS.build(cfg)


def load_config(path: str, cfg_options: Optional[dict] = None,
                work_dir: Optional[str] = None, check_data: Union[bool, Sequence[str]] = True,
                max_iters: Optional[int] = None) -> Config:
    """Read ``path``, fit its schedule to ``max_iters`` (:func:`fit_schedule`), apply
    ``--cfg-options`` (which win over the fitted schedule), check it, and set ``work_dir``.

    ``work_dir`` defaults to ``work_dirs/<config name>`` as in mmdet/mmseg. The work dir and
    the data folders that exist from here become absolute paths, so that the config the runner
    writes into the work dir runs from any folder (:func:`absolute_data_paths`). A config
    asking for mmengine's ``AmpOptimWrapper`` gets a substitute on machines without CUDA
    (:func:`amp_for_device`).
    """
    if not osp.isfile(path):
        raise FileNotFoundError(f'config {path!r} does not exist')
    cfg = Config.fromfile(path)
    if max_iters is not None:
        fit_schedule(cfg, max_iters)
    if cfg_options:
        cfg.merge_from_dict(cfg_options)
    check_config(cfg, path, check_data)
    amp_for_device(cfg)
    if work_dir is not None:
        cfg.work_dir = work_dir
    elif cfg.get('work_dir') is None:
        cfg.work_dir = osp.join('./work_dirs', osp.splitext(osp.basename(path))[0])
    cfg.work_dir = osp.abspath(cfg.work_dir)
    absolute_data_paths(cfg)
    return cfg


def absolute_data_paths(cfg: Config) -> None:
    """Every dataloader's ``data_root`` and every evaluator's ``ann_file`` that exists relative
    to the current folder becomes absolute, in place. Paths that do not exist here (checked
    or not by :func:`check_config`), absolute ones and URLs stay as they are."""
    def absolute(path):
        if isinstance(path, str) and path and '://' not in path and not osp.isabs(path) \
                and osp.exists(path):
            return osp.abspath(path) + ('/' if path.endswith('/') else '')
        return path

    for split in ('train', 'val', 'test'):
        dataset = innermost_dataset((cfg.get(f'{split}_dataloader') or {}).get('dataset') or {})
        if 'data_root' in dataset:
            dataset['data_root'] = absolute(dataset['data_root'])
        evaluators = cfg.get(f'{split}_evaluator') or []
        for metric in evaluators if isinstance(evaluators, (list, tuple)) else [evaluators]:
            if 'ann_file' in metric:
                metric['ann_file'] = absolute(metric['ann_file'])


def innermost_dataset(dataset: dict) -> dict:
    """The dataset inside a loader's ``dataset``, its wrappers taken off."""
    while 'dataset' in dataset:  # RepeatDataset / ClassBalancedDataset wrappers
        dataset = dataset['dataset']
    return dataset


def check_config(cfg: Config, path: str = 'config',
                 check_data: Union[bool, Sequence[str]] = True) -> None:
    """Fail early, with the fix, on mistakes that otherwise surface deep in a run: a missing
    scope or import, channel widths that disagree (:func:`check_widths`) and, with
    ``check_data``, a missing dataset folder: of every split, or of the splits named
    (``('test',)`` for tools/test.py)."""
    scope = cfg.get('default_scope')
    if scope not in SCOPES:
        raise ValueError(f'{path}: default_scope is {scope!r}; inherit an mmdet, mmseg or '
                         "mmpretrain config (e.g. _base_ = ['mmdet::mask_rcnn/...']) or set "
                         f'default_scope to one of {SCOPES}')
    names = {name.split('.')[-1] for name in _types(cfg._cfg_dict)}  # 'mmvit5.ViT5' too
    if any(name.startswith('ViT5') or name == 'SimpleFeaturePyramid' for name in names):
        imports = (cfg.get('custom_imports') or {}).get('imports', [])
        imports = [imports] if isinstance(imports, str) else list(imports)
        if 'mmvit5' not in imports:
            raise ValueError(f"{path} uses mmvit5 modules (type='ViT5' / "
                             "'SimpleFeaturePyramid') but does not import them; add "
                             "custom_imports = dict(imports=['mmvit5'], "
                             'allow_failed_imports=False) to the config')
    if 'model' in cfg:
        check_widths(cfg.model, path)
    splits = ('train', 'val', 'test') if check_data is True else check_data or ()
    for split in splits:
        _check_data_root(cfg.get(f'{split}_dataloader'), f'{split}_dataloader', path)


def _types(node) -> Iterator[str]:
    """Every ``type`` and ``constructor`` named in a config node, at any depth (a class by its
    name)."""
    if isinstance(node, dict):
        for key in ('type', 'constructor'):
            if key in node:
                yield getattr(node[key], '__name__', str(node[key]))
        for value in node.values():
            yield from _types(value)
    elif isinstance(node, (list, tuple)):
        for value in node:
            yield from _types(value)


def _check_data_root(loader: Optional[dict], name: str, path: str) -> None:
    root = innermost_dataset((loader or {}).get('dataset') or {}).get('data_root')
    if root and not osp.isdir(root):
        raise FileNotFoundError(
            f'{path}: {name}.dataset.data_root {root!r} does not exist (cwd {os.getcwd()}). '
            f'Put the dataset there or pass --cfg-options {name}.dataset.data_root=PATH '
            '(docs/en/user_guides/train_test.md#data)')


def enable_amp(cfg: Config) -> None:
    """Mixed precision: mmengine's AmpOptimWrapper (fp16, dynamic loss scale) on CUDA; without
    CUDA what :func:`amp_for_device` picks."""
    if cfg.optim_wrapper.get('type') not in ('AmpOptimWrapper', 'AutocastOptimWrapper'):
        cfg.optim_wrapper.type = 'AmpOptimWrapper'
        cfg.optim_wrapper.setdefault('loss_scale', 'dynamic')
    amp_for_device(cfg)


def cpu_has_native_bf16() -> bool:
    """Whether this CPU runs bf16 matmuls natively (oneDNN's AVX512-BF16/AMX check). Elsewhere
    PyTorch falls back to a generic kernel: 0.9 against float32's 149 GFLOP/s on an AVX2 EPYC
    of these build machines."""
    return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


def amp_for_device(cfg: Config, native_bf16: Optional[bool] = None) -> None:
    """Where there is no CUDA, mmengine 0.10.7's AmpOptimWrapper refuses to run. A config asking
    for it (the fp16 ViTDet recipes, ``--amp``) then trains under bf16 autocast
    (:class:`~mmvit5.engine.AutocastOptimWrapper`, no loss scale needed) on a CPU with native
    bf16, and in float32 on one without, where autocast would make training slower, not faster.
    Both are logged; ``optim_wrapper.type='AutocastOptimWrapper'`` forces autocast anyway.

    Args:
        cfg (Config): Changed in place.
        native_bf16 (bool, optional): Whether the CPU has native bf16; defaults to
            :func:`cpu_has_native_bf16`.
    """
    wrapper = cfg.get('optim_wrapper') or {}
    if wrapper.get('type') != 'AmpOptimWrapper' or torch.cuda.is_available():
        return
    wrapper.pop('loss_scale', None)
    if native_bf16 is None:
        native_bf16 = cpu_has_native_bf16()
    if native_bf16:
        wrapper.type = 'AutocastOptimWrapper'
        wrapper.setdefault('dtype', 'bfloat16')
        print_log('no CUDA: AmpOptimWrapper (fp16) replaced by AutocastOptimWrapper (bf16)',
                  logger='current')
        return
    wrapper.type = 'OptimWrapper'
    wrapper.pop('dtype', None)
    print_log('no CUDA, and this CPU has no native bf16 (PyTorch CPU capability '
              f'{torch.backends.cpu.get_cpu_capability()}): AmpOptimWrapper (fp16) replaced by '
              'OptimWrapper, training in float32, since bf16 autocast would run its matmuls '
              'about 100x slower here; --cfg-options optim_wrapper.type=AutocastOptimWrapper '
              'forces autocast', logger='current', level=logging.WARNING)


def enable_resume(cfg: Config, checkpoint: Optional[str]) -> None:
    """``--resume`` (the work dir's ``last_checkpoint``; a fresh start where there is none) or
    ``--resume PATH``.

    The run is built with the checkpoint's seed: mmengine seeds the sampler (the data order)
    and the dataloader workers as it builds them, before it reads the checkpoint, so a config
    without ``randomness.seed`` (the recipes) would resume on another data order.
    """
    cfg.resume = True
    cfg.load_from = None if checkpoint in (None, 'auto') else checkpoint
    path = cfg.load_from or find_latest_checkpoint(cfg.work_dir)
    if path is None or '://' in path:
        return
    if not osp.isfile(path):
        named = f'--resume {path}' if cfg.load_from else \
            f'{osp.join(cfg.work_dir, "last_checkpoint")} names {path}, which'
        raise FileNotFoundError(f'{named}: no such checkpoint file; pass one of the run\'s '
                                'iter_*.pth files to --resume')
    seed = torch.load(path, map_location='cpu', mmap=True,
                      weights_only=True).get('meta', {}).get('seed')
    if seed is None:
        return
    randomness = dict(cfg.get('randomness') or {})
    if randomness.get('seed') not in (None, seed):
        print_log(f'randomness.seed={randomness["seed"]} replaced by the seed {seed} that '
                  f'{path} was trained with', logger='current', level=logging.WARNING)
    cfg.randomness = dict(randomness, seed=seed)
