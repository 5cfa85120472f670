"""Train an mmdet or mmseg model from a config, as mmdet's / mmseg's tools/train.py do.

    python tools/train.py configs/vit5_maskrcnn_coco.py [--work-dir DIR] [--amp]
        [--resume [CKPT]] [--cfg-options key=value ...] [--launcher pytorch]

The registry scope (mmdet, mmseg) comes from the config's ``default_scope``.
"""
import argparse
import os
import os.path as osp

from mmengine.config import DictAction
from mmengine.registry import RUNNERS
from mmengine.runner import Runner

from mmvit5.utils import enable_amp, enable_resume, load_config


def parse_args():
    parser = argparse.ArgumentParser(description='Train a detector or segmentor')
    parser.add_argument('config', help='config file')
    parser.add_argument('--work-dir', help='where logs and checkpoints go')
    parser.add_argument('--amp', action='store_true', help='mixed-precision training')
    parser.add_argument('--resume', nargs='?', type=str, const='auto',
                        help='resume from CKPT, or from the latest checkpoint of the work dir')
    parser.add_argument('--auto-scale-lr', action='store_true',
                        help='scale lr by total batch / auto_scale_lr.base_batch_size')
    parser.add_argument('--cfg-options', nargs='+', action=DictAction,
                        help='override config entries, e.g. train_cfg.max_iters=100')
    parser.add_argument('--launcher', choices=['none', 'pytorch', 'slurm', 'mpi'],
                        default='none', help='job launcher (pytorch for torchrun)')
    parser.add_argument('--local_rank', '--local-rank', type=int, default=0)
    args = parser.parse_args()
    os.environ.setdefault('LOCAL_RANK', str(args.local_rank))
    return args


def main():
    args = parse_args()
    cfg = load_config(args.config, args.cfg_options, args.work_dir)
    cfg.launcher = args.launcher
    if args.amp:
        enable_amp(cfg)
    if args.resume:
        enable_resume(cfg, args.resume)
    if args.auto_scale_lr:
        cfg.auto_scale_lr.enable = True
    runner = (Runner.from_cfg(cfg) if 'runner_type' not in cfg else RUNNERS.build(cfg))
    runner.train()
    if runner.rank == 0:
        print(f'[train] done: logs, checkpoints and visualizations in {osp.abspath(cfg.work_dir)}')


if __name__ == '__main__':
    main()
