"""Evaluate a checkpoint of an mmdet or mmseg config with its metrics (COCO mAP, mIoU).

    python tools/test.py CONFIG CHECKPOINT [--work-dir DIR] [--show-dir DIR]
        [--cfg-options key=value ...] [--launcher pytorch]
"""
import argparse
import json
import numbers
import os.path as osp

from cli_options import add_runner_args


def parse_args():
    parser = argparse.ArgumentParser(description='Test (and evaluate) a model')
    parser.add_argument('config', help='config file')
    parser.add_argument('checkpoint', help='checkpoint file')
    parser.add_argument('--show-dir', help='write prediction visualizations into this folder')
    return add_runner_args(parser).parse_args()


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
    from mmvit5.utils import build_runner, config_from_args  # after parsing: --help needs no torch
    if not osp.isfile(args.checkpoint):
        raise FileNotFoundError(f'checkpoint {args.checkpoint!r} does not exist')
    cfg = config_from_args(args)
    cfg.load_from = args.checkpoint
    if args.amp:
        cfg.test_cfg.fp16 = True
    if args.show_dir:
        enable_visualization(cfg, args.show_dir)
    runner = build_runner(cfg)
    metrics = runner.test()
    if runner.rank == 0:
        print('[test] metrics ' + json.dumps({k: float(v) for k, v in metrics.items()
                                               if isinstance(v, numbers.Real)}))


if __name__ == '__main__':
    main()
