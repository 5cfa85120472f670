"""Show that ViT-5 Mask R-CNN and UperNet learn: train on the generated shapes set, evaluate
at regular intervals, and record the curves (a script, not a timed test).

    python tools/learning_curves.py --iters 600 --val-every 150 --out work_dirs/learning \
        [--json results/learning_curves.json]

Writes ``<out>/curves.png`` (loss and mAP / mIoU over iterations), the work dirs of both runs
and, with ``--json``, every validation's metrics with machine, date and commit: the table of
docs/en/get_started/quickstart.md (``python -m benchmarks.tables``). Chance level on this set: a
detector that predicts nothing (or random boxes) scores 0 mAP; a segmentor that paints every
pixel background scores about 25 mIoU (mmseg reports percent) over the four present classes
(100 IoU on background, 0 on the three shapes).
"""
import argparse
import json
import os
import os.path as osp
import subprocess
import sys
import time
from typing import Dict, NamedTuple

from benchmarks.results import METRICS, machine, write_results

REPO = osp.dirname(osp.dirname(osp.abspath(__file__)))


class Run(NamedTuple):
    """A toy recipe and how the table shows it."""
    config: str
    title: str
    metrics: Dict[str, str]  # logged key: its name in the table
    chance: float  # in percent


RUNS = {
    'maskrcnn': Run('configs/toy/vit5-tiny_maskrcnn_shapes.py',
                    'Mask R-CNN, ViT-5 4x96 + simple pyramid (LN2d)',
                    {'coco/bbox_mAP': 'bbox mAP', 'coco/segm_mAP': 'segm mAP'}, 0),
    'upernet': Run('configs/toy/vit5-tiny_upernet_shapes.py', 'UperNet, ViT-5 4x96',
                   {'mIoU': 'mIoU'}, 25),
}


def run(cmd, cwd):
    print('[learning_curves] ' + ' '.join(cmd), file=sys.stderr)
    subprocess.run(cmd, cwd=cwd, check=True)


def val_records(work_dir: str, keys) -> list:
    """(step, {key: value}) of every validation in the newest run of ``work_dir``."""
    logs = sorted(f for f in (osp.join(work_dir, d, 'vis_data', 'scalars.json')
                              for d in os.listdir(work_dir)) if osp.isfile(f))
    with open(logs[-1]) as f:
        records = [json.loads(line) for line in f if line.strip()]
    return [(r['step'], {k: r[k] for k in keys}) for r in records if keys[0] in r]


def percent(key: str) -> float:
    """The factor from ``key``'s logged value to percent (mmdet logs AP as a fraction)."""
    return next(scale for keys, scale in METRICS if key in keys)


def curve(name: str, work_dir: str, iters: int) -> dict:
    """One model's row of the results file: its metrics in percent at every validation."""
    spec = RUNS[name]
    from mmengine.config import Config  # here, not at the top: --help needs no torch

    import mmvit5  # noqa: F401  its patches first (mmvit5.compat): no pkg_resources warning
    loader = Config.fromfile(osp.join(REPO, spec.config)).train_dataloader
    records = val_records(work_dir, list(spec.metrics))
    return dict(model=spec.title, iters=iters, batch=loader.batch_size, chance=spec.chance,
                steps=[step for step, _ in records],
                metrics={label: [round(found[key] * percent(key), 1) for _, found in records]
                         for key, label in spec.metrics.items()})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--iters', type=int, default=600)
    parser.add_argument('--val-every', type=int, default=150)
    parser.add_argument('--out', default='work_dirs/learning')
    parser.add_argument('--train-images', type=int, default=96)
    parser.add_argument('--models', default='maskrcnn,upernet',
                        help=f'comma list of {list(RUNS)}')
    parser.add_argument('--json', help='write the curves here (results/learning_curves.json)')
    args = parser.parse_args()
    out = osp.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    if not osp.isdir(osp.join(out, 'data/toy/coco')):
        run([sys.executable, osp.join(REPO, 'tools/make_toy_data.py'), 'data/toy', '--train',
             str(args.train_images), '--val', '16', '--size', '256'], cwd=out)
    names = args.models.split(',')
    start, curves = time.perf_counter(), []
    for name in names:
        work = osp.join(out, name)
        run([sys.executable, osp.join(REPO, 'tools/train.py'), osp.join(REPO, RUNS[name].config),
             '--work-dir', work, '--iters', str(args.iters), '--cfg-options',
             f'train_cfg.val_interval={args.val_every}'], cwd=out)
        curves.append(curve(name, work, args.iters))
        print(json.dumps(curves[-1]))
    minutes, seconds = divmod(round(time.perf_counter() - start), 60)
    run([sys.executable, osp.join(REPO, 'tools/plot_curves.py'),
         *[osp.join(out, n) for n in names], '--out', osp.join(out, 'curves.png')], cwd=out)
    if args.json:
        write_results(args.json, dict(
            machine=machine(), note=f'{args.train_images} training images of 256, {args.iters} '
            f'iterations each, {minutes} min {seconds} s in all'),
            'python tools/learning_curves.py ' + ' '.join(sys.argv[1:]), curves=curves)


if __name__ == '__main__':
    main()
