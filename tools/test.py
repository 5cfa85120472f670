"""Evaluate a checkpoint of an mmdet or mmseg config with its metrics (COCO mAP, mIoU).

    python tools/test.py CONFIG CHECKPOINT [--work-dir DIR] [--show-dir DIR]
        [--cfg-options key=value ...] [--launcher pytorch]
"""
import argparse
import json
import numbers
import os
import os.path as osp

from mmengine.config import DictAction
from mmengine.registry import RUNNERS
from mmengine.runner import Runner

from mmvit5.utils import load_config


def parse_args():
    parser = argparse.ArgumentParser(description='Test (and evaluate) a model')
    parser.add_argument('config', help='config file')
    parser.add_argument('checkpoint', help='checkpoint file')
    parser.add_argument('--work-dir', help='where the evaluation log goes')
    parser.add_argument('--show-dir', help='write prediction visualizations into this folder')
    parser.add_argument('--amp', action='store_true', help='mixed-precision inference')
    parser.add_argument('--cfg-options', nargs='+', action=DictAction,
                        help='override config entries')
    parser.add_argument('--launcher', choices=['none', 'pytorch', 'slurm', 'mpi'],
                        default='none', help='job launcher (pytorch for torchrun)')
    parser.add_argument('--local_rank', '--local-rank', type=int, default=0)
    args = parser.parse_args()
    os.environ.setdefault('LOCAL_RANK', str(args.local_rank))
    return args


def enable_visualization(cfg, show_dir: str) -> None:
    """Point the scope's visualization hook at ``show_dir`` (both hooks take these keys)."""
    hook = cfg.default_hooks.visualization
    hook.draw = True
    if cfg.default_scope == 'mmdet':
        hook.test_out_dir = show_dir
    else:
        hook.interval = 1
        cfg.visualizer.save_dir = show_dir


def main():
    args = parse_args()
    if not osp.isfile(args.checkpoint):
        raise FileNotFoundError(f'checkpoint {args.checkpoint!r} does not exist')
    cfg = load_config(args.config, args.cfg_options, args.work_dir)
    cfg.launcher = args.launcher
    cfg.load_from = args.checkpoint
    if args.amp:
        cfg.test_cfg.fp16 = True
    if args.show_dir:
        enable_visualization(cfg, args.show_dir)
    runner = (Runner.from_cfg(cfg) if 'runner_type' not in cfg else RUNNERS.build(cfg))
    metrics = runner.test()
    if runner.rank == 0:
        print('[test] metrics ' + json.dumps({k: float(v) for k, v in metrics.items()
                                               if isinstance(v, numbers.Real)}))


if __name__ == '__main__':
    main()
