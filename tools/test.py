"""Evaluate a checkpoint of an mmdet or mmseg config with its metrics (COCO mAP, mIoU).

    python tools/test.py CONFIG CHECKPOINT [--work-dir DIR] [--show-dir DIR]
        [--cfg-options key=value ...] [--launcher pytorch]

Logs go to ``<work_dir>/<timestamp>/``, with the config as tested; the CONFIG file itself is
never rewritten, even when it is a training run's config in that run's work dir. Only the test
split's data must exist. ``--show-dir DIR`` draws every test image into DIR, one PNG per image
that keeps the image's path below the test images' folder (``batch1/x.jpg`` ->
``DIR/batch1/x.png``), for detection and segmentation alike (:class:`mmvit5.engine.ShowDirHook`).
"""
import argparse
import json
import numbers
import os
import os.path as osp

from cli_options import add_runner_args


def parse_args():
    parser = argparse.ArgumentParser(description='Test (and evaluate) a model')
    parser.add_argument('config', help='config file')
    parser.add_argument('checkpoint', help='checkpoint file')
    parser.add_argument('--show-dir', help='draw every test image into this folder (relative to '
                        'the current folder), one PNG per image at its path below the test '
                        'images\' folder')
    return add_runner_args(parser).parse_args()


def test_config(args):
    """The config (mmengine ``Config``) of ``args`` set up for testing ``args.checkpoint``."""
    from mmengine.config import Config

    from mmvit5.utils import config_from_args
    cfg = config_from_args(args, check_data=('test',))
    cfg.load_from = args.checkpoint
    if args.amp:
        cfg.test_cfg.fp16 = True
    if args.show_dir:
        cfg.custom_hooks = [*(cfg.get('custom_hooks') or []),
                            dict(type='ShowDirHook', out_dir=osp.abspath(args.show_dir))]
    # mmengine's Runner writes the config it runs into the work dir under the config's file
    # name: the training run's own config, when testing a run in its work dir. Without a file
    # name it writes <work_dir>/<timestamp>.py instead, moved below beside the test's logs.
    return Config(cfg.to_dict())


def main():
    args = parse_args()
    from mmvit5.utils import build_runner  # after parsing: --help needs no torch
    if not osp.isfile(args.checkpoint):
        raise SystemExit(f'[test] checkpoint {args.checkpoint!r} does not exist (cwd '
                         f'{os.getcwd()}); pass the .pth file the run wrote, e.g. '
                         '<work_dir>/iter_<N>.pth')
    try:
        cfg = test_config(args)
    except (FileNotFoundError, ValueError) as e:  # the config or the data: the message says it
        raise SystemExit(f'[test] {type(e).__name__}: {e}')
    runner = build_runner(cfg)
    if runner.rank == 0:
        dumped = osp.join(cfg.work_dir, f'{runner.timestamp}.py')
        if osp.isfile(dumped):
            os.replace(dumped, osp.join(runner.log_dir, osp.basename(args.config)))
    metrics = runner.test()
    if runner.rank == 0:
        print('[test] metrics ' + json.dumps({k: float(v) for k, v in metrics.items()
                                               if isinstance(v, numbers.Real)}))
        if args.show_dir:
            print(f'[test] pictures in {osp.abspath(args.show_dir)}')


if __name__ == '__main__':
    main()
