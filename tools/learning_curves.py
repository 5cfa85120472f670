"""Show that ViT-5 Mask R-CNN and UperNet learn: train on the generated shapes set, evaluate
at regular intervals, and record the curves (a script, not a timed test).

    python tools/learning_curves.py --iters 600 --val-every 150 --out work_dirs/learning

Writes ``<out>/curves.png`` (loss and mAP / mIoU over iterations), ``<out>/curves.md`` (the
table of docs/en/get_started/quickstart.md) and the work dirs of both runs. Chance level on
this set: a detector that predicts nothing (or random boxes) scores 0 mAP; a segmentor that
paints every pixel background scores about 25 mIoU (mmseg reports percent) over the four
present classes (100 IoU on background, 0 on the three shapes), which the table shows as the
baseline.
"""
import argparse
import json
import os
import os.path as osp
import subprocess
import sys

REPO = osp.dirname(osp.dirname(osp.abspath(__file__)))
RUNS = {
    'maskrcnn': ('configs/toy/vit5-tiny_maskrcnn_shapes.py', ('coco/bbox_mAP', 'coco/segm_mAP')),
    'upernet': ('configs/toy/vit5-tiny_upernet_shapes.py', ('mIoU', )),
}


def run(cmd, cwd):
    print('[learning_curves] ' + ' '.join(cmd), file=sys.stderr)
    subprocess.run(cmd, cwd=cwd, check=True)


def val_records(work_dir: str, keys) -> list:
    logs = sorted(f for f in (osp.join(work_dir, d, 'vis_data', 'scalars.json')
                              for d in os.listdir(work_dir)) if osp.isfile(f))
    with open(logs[-1]) as f:
        records = [json.loads(line) for line in f if line.strip()]
    return [(r['step'], {k: r[k] for k in keys}) for r in records if keys[0] in r]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--iters', type=int, default=600)
    parser.add_argument('--val-every', type=int, default=150)
    parser.add_argument('--out', default='work_dirs/learning')
    parser.add_argument('--train-images', type=int, default=96)
    parser.add_argument('--models', default='maskrcnn,upernet',
                        help=f'comma list of {list(RUNS)}')
    args = parser.parse_args()
    out = osp.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    if not osp.isdir(osp.join(out, 'data/toy/coco')):
        run([sys.executable, osp.join(REPO, 'tools/make_toy_data.py'), 'data/toy', '--train',
             str(args.train_images), '--val', '16', '--size', '256'], cwd=out)
    table = ['| model | iteration | ' + ' | '.join(['metric', 'value']) + ' |',
             '|---|---|---|---|']
    names = args.models.split(',')
    for name in names:
        config, keys = RUNS[name]
        work = osp.join(out, name)
        run([sys.executable, osp.join(REPO, 'tools/train.py'), osp.join(REPO, config),
             '--work-dir', work, '--cfg-options', f'train_cfg.max_iters={args.iters}',
             f'train_cfg.val_interval={args.val_every}',
             f'default_hooks.checkpoint.interval={args.iters}',
             # the toy configs fix `end` to their own max_iters when they are parsed
             f'param_scheduler.1.end={args.iters}',
             *([f'param_scheduler.1.milestones=[{int(args.iters * 0.9)}]']
               if name == 'maskrcnn' else [])], cwd=out)
        for step, metrics in val_records(work, keys):
            for key, value in metrics.items():
                table.append(f'| {name} | {step} | {key} | {value:.3f} |')
    if 'upernet' in names:
        table.append('| upernet | - | mIoU of "all background" (chance) | 25.000 |')
    with open(osp.join(out, 'curves.md'), 'w') as f:
        f.write('\n'.join(table) + '\n')
    run([sys.executable, osp.join(REPO, 'tools/plot_curves.py'),
         *[osp.join(out, n) for n in names], '--out', osp.join(out, 'curves.png')], cwd=out)
    print('\n'.join(table))


if __name__ == '__main__':
    main()
