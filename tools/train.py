"""Train an mmdet or mmseg model from a config, as mmdet's / mmseg's tools/train.py do.

    python tools/train.py configs/vit5_maskrcnn_coco.py [--work-dir DIR] [--amp] [--iters N]
        [--resume [CKPT]] [--cfg-options key=value ...] [--launcher pytorch]

The checkpoints the config loads (pretrained weights, ``load_from``) are checked first, a
released URL downloaded once into the torch hub cache (:func:`mmvit5.utils.check_pretrained`).
``--iters N`` fits the recipe's schedule to N iterations (warm-up, steps or decay end,
validation and checkpoint counts: :func:`mmvit5.utils.fit_schedule`); ``--cfg-options`` still
win over it.

The registry scope (mmdet, mmseg) comes from the config's ``default_scope``.
"""
import argparse
import os.path as osp

from cli_options import add_runner_args

try:  # the results harness lives in the checkout, not in the installed runtime
    from benchmarks.results import record_run
except ImportError:  # this file copied out of a checkout: train without the run record
    record_run = None


def add_train_args(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The options of this tool besides the config (tools/finetune.py shares them)."""
    parser.add_argument('--resume', nargs='?', type=str, const='auto',
                        help='resume from CKPT, or from the latest checkpoint of the work dir')
    parser.add_argument('--auto-scale-lr', action='store_true',
                        help='scale lr by total batch / auto_scale_lr.base_batch_size')
    parser.add_argument('--iters', type=_positive_int,
                        help='train N iterations, the schedule fitted to them')
    return add_runner_args(parser)


def _positive_int(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f'expected a whole number >= 1, got {text!r}')
    return int(text)


def parse_args():
    parser = argparse.ArgumentParser(description='Train a detector or segmentor')
    parser.add_argument('config', help='config file')
    return add_train_args(parser).parse_args()


def main():
    args = parse_args()
    from mmvit5.utils import config_from_args  # after parsing: --help needs no torch
    train(config_from_args(args), args)


def train(cfg, args) -> None:
    """Train ``cfg`` with the options of :func:`add_train_args`."""
    from mmvit5.utils import build_runner, check_pretrained, enable_amp, enable_resume
    if args.amp:
        enable_amp(cfg)
    if args.auto_scale_lr:
        cfg.auto_scale_lr.enable = True
    try:  # before anything is built: a missing file or failed download is one line, the fix
        if args.resume:
            enable_resume(cfg, args.resume)
        check_pretrained(cfg, args.config)
    except (FileNotFoundError, ValueError) as exc:
        raise SystemExit(f'[train] {type(exc).__name__}: {exc}')
    runner = build_runner(cfg)
    if runner.rank == 0 and record_run:  # config and commit, for tools/collect_results.py
        record_run(cfg.work_dir, args.config, cfg.train_cfg.get('max_iters', 0))
    runner.train()
    if runner.rank == 0:
        print(f'[train] done: logs, checkpoints and visualizations in {osp.abspath(cfg.work_dir)}')


if __name__ == '__main__':
    main()
