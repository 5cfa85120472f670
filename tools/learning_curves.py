"""Show that the toy models learn: train them on the generated shapes set as the quick start
does (tools/quickstart.sh), evaluate at regular intervals, and record the curves (a script,
not a timed test).

    python tools/learning_curves.py [--models maskrcnn,upernet] [--iters 200] \
        [--val-every 50] --out work_dirs/learning [--json results/learning_curves.json]
    python tools/learning_curves.py --from work_dirs/quickstart --models maskrcnn,upernet \
        --json results/learning_curves.json   # the curves of a finished quick start

The defaults are the quick start's (64 training images of 256, 200 iterations, validation
every 50), so its table and picture are what a newcomer's ``curves.png`` shows. Writes
``<out>/curves.png`` (loss and mAP / mIoU over iterations), the work dirs of the runs and,
with ``--json``, every validation's metrics with machine, date and commit: the table of
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
from typing import Dict, NamedTuple, Optional

from benchmarks.results import METRICS, machine, write_results

REPO = osp.dirname(osp.dirname(osp.abspath(__file__)))


class Run(NamedTuple):
    """A toy recipe and how the table shows it."""
    config: str
    title: str
    metrics: Dict[str, str]  # logged key: its name in the table
    chance: Optional[float]  # in the metric's unit; None: not worked out
    scale: float = 1.0  # onto the logged value in percent (the table shows one decimal)


RUNS = {
    'maskrcnn': Run('configs/toy/vit5-tiny_maskrcnn_shapes.py',
                    'Mask R-CNN, ViT-5 4x96 + simple pyramid (LN2d)',
                    {'coco/bbox_mAP': 'bbox mAP', 'coco/segm_mAP': 'segm mAP'}, 0),
    'upernet': Run('configs/toy/vit5-tiny_upernet_shapes.py', 'UperNet, ViT-5 4x96',
                   {'mIoU': 'mIoU'}, 25),
    'cascade': Run('configs/toy/vit5-tiny_cascade-maskrcnn_shapes.py',
                   'Cascade Mask R-CNN, ViT-5 4x96 + simple pyramid (LN2d)',
                   {'coco/bbox_mAP': 'bbox mAP', 'coco/segm_mAP': 'segm mAP'}, 0),
    'mask2former': Run('configs/toy/vit5-tiny_mask2former-ins_shapes.py',
                       'Mask2Former (instances), ViT-5 4x96',
                       {'coco/segm_mAP': 'segm mAP', 'coco/bbox_mAP': 'bbox mAP'}, 0),
    'depth': Run('configs/toy/vit5-tiny_depth_shapes.py', 'DPT depth, ViT-5 4x96',
                 {'rmse': 'RMSE in cm (lower is better)'}, None, scale=100.0),
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
    found, trained = [], 0
    for r in records:
        if 'iter' in r:
            trained = r['iter']
        elif keys[0] in r:
            # a recipe that logs by epoch (Mask2Former's) gives its validations step 0: they
            # follow the last logged training iteration
            found.append((r['step'] or trained, {k: r[k] for k in keys}))
    return found


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
                metrics={label: [round(found[key] * percent(key) * spec.scale, 1)
                                 for _, found in records]
                         for key, label in spec.metrics.items()})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--iters', type=int, default=200)
    parser.add_argument('--val-every', type=int, default=50)
    parser.add_argument('--out', default='work_dirs/learning')
    parser.add_argument('--train-images', type=int, default=64)
    parser.add_argument('--models', default='maskrcnn,upernet',
                        help=f'comma list of {list(RUNS)}')
    parser.add_argument('--from', dest='source', metavar='DIR',
                        help='train nothing: read the work dirs DIR/<model> of a finished run '
                        '(tools/quickstart.sh writes them under work_dirs/quickstart)')
    parser.add_argument('--json', help='write the curves here (results/learning_curves.json)')
    args = parser.parse_args()
    names = args.models.split(',')
    unknown = [n for n in names if n not in RUNS]
    if unknown:
        parser.error(f'--models: unknown {unknown}; choose from {list(RUNS)}')
    if args.source:
        collect(args, names)
        return
    out = osp.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    if not osp.isdir(osp.join(out, 'data/toy/coco')):
        run([sys.executable, osp.join(REPO, 'tools/make_toy_data.py'), 'data/toy', '--train',
             str(args.train_images), '--val', '16', '--size', '256'], cwd=out)
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


def collect(args, names) -> None:
    """``--from``: the curves of the finished runs ``<args.source>/<name>``, to ``--json``."""
    curves = []
    for name in names:
        work = osp.join(args.source, name)
        iters = max(step for step, _ in val_records(work, list(RUNS[name].metrics)))
        curves.append(curve(name, work, iters))
        print(json.dumps(curves[-1]))
    if args.json:
        write_results(args.json, dict(machine=machine(), note=f'the work dirs of {args.source}'),
                      'python tools/learning_curves.py ' + ' '.join(sys.argv[1:]), curves=curves)


if __name__ == '__main__':
    main()
