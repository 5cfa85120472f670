"""Train the ablations of configs/ablations/ on the generated shapes set, several seeds each,
and write mean and spread (a toy study: see docs/en/user_guides/ablations.md).

    python tools/ablation_study.py [--task upernet] [--variants all] [--seeds 0,1,2]
        [--iters 250] [--jobs 6] [--out work_dirs/ablations]

Each variant is the switch override of ``configs/ablations/<recipe>_<variant>.py`` applied to
the CPU-sized toy config of the same recipe (``configs/toy/``), trained from scratch; the
``baseline`` is the toy config as it is (the released switches). Writes ``<out>/results.json``
(every run's metrics and the summary) and ``<out>/results.md`` (the table), and prints the
table. ``--task maskrcnn`` studies the Mask R-CNN recipe instead (bbox mAP). ``plain-vit``
is ViT-5 against a plain ViT (every ViT-5 addition off at once, ``COMBINATIONS`` of
benchmarks/ablation.py); ``--json results/<file>.json`` records the study with machine, date
and commit for ``python -m benchmarks.tables``:

    python tools/ablation_study.py --task maskrcnn --variants plain-vit --iters 200 \
        --json results/plain_vit_maskrcnn.json
"""
import argparse
import json
import os
import os.path as osp
import sys
import time

REPO = osp.dirname(osp.dirname(osp.abspath(__file__)))

TASKS = {  # recipe, toy config, the metric the table reports
    'upernet': ('vit5_upernet_ade20k', 'configs/toy/vit5-tiny_upernet_shapes.py', 'mIoU'),
    'maskrcnn': ('vit5_maskrcnn_coco', 'configs/toy/vit5-tiny_maskrcnn_shapes.py',
                 'coco/bbox_mAP'),
}
# what the default run trains, sized for 2 shared CPU cores (docs/en/user_guides/ablations.md):
# LayerScale from scratch, the switch most likely to move a 250-iteration toy run
DEFAULT_VARIANTS = ('no-layer-scale', )


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--task', choices=sorted(TASKS), default='upernet')
    parser.add_argument('--variants', default=','.join(DEFAULT_VARIANTS),
                        help='comma list of configs/ablations/<recipe>_<variant>.py names or '
                        'plain-vit (all additions off), or "all"; the baseline is always trained')
    parser.add_argument('--seeds', default='0,1,2', help='comma list of seeds')
    parser.add_argument('--iters', type=int, default=250, help='training iterations per run')
    parser.add_argument('--train-images', type=int, default=96)
    parser.add_argument('--val-images', type=int, default=16)
    parser.add_argument('--jobs', type=int, default=6,
                        help='runs at a time, one process each (threads shared among them)')
    parser.add_argument('--out', default='work_dirs/ablations')
    parser.add_argument('--json', help='also write the study here with machine, date and commit '
                        '(results/, for python -m benchmarks.tables)')
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    from mmengine.config import Config  # after parsing: --help needs none of these

    from benchmarks.ablation import (
        BASELINE,
        COMBINATIONS,
        ablation_configs,
        markdown_table,
        run_study,
        summarize,
        variant_override,
    )
    from benchmarks.results import machine, write_results
    from make_toy_data import make_dataset
    recipe, toy, metric = TASKS[args.task]
    available = ablation_configs(osp.join(REPO, 'configs'), recipe)
    names = list(available) if args.variants == 'all' else \
        [v for v in args.variants.split(',') if v]
    unknown = [n for n in names if n not in available and n not in COMBINATIONS]
    if unknown:
        sys.exit(f'unknown variants {unknown} for {args.task}; choose from {list(available)}, '
                 f'{list(COMBINATIONS)} or "all"')
    seeds = [int(s) for s in args.seeds.split(',')]
    if args.iters < 2:
        sys.exit(f'--iters {args.iters}: train at least 2 iterations')
    recipe_cfg = Config.fromfile(osp.join(REPO, 'configs', f'{recipe}.py'))
    variants = {BASELINE: {}}
    variants.update({n: variant_override(n, available, recipe_cfg) for n in names})

    out = osp.abspath(args.out)
    json_path = osp.abspath(args.json) if args.json else None  # before the chdir below
    os.makedirs(out, exist_ok=True)
    if not osp.isdir(osp.join(out, 'data', 'toy', 'coco')):
        make_dataset(osp.join(out, 'data', 'toy'), train=args.train_images,
                     val=args.val_images, size=256, seed=0)
    os.chdir(out)  # the toy configs read data/toy/... relative to the working directory
    start = time.perf_counter()
    results = run_study(osp.join(REPO, toy), variants, seeds, args.iters, out, args.jobs,
                        log=lambda line: print(line, flush=True))
    seconds = time.perf_counter() - start
    summary = summarize(results, metric)
    table = markdown_table(results, summary, metric, seconds)
    with open(osp.join(out, 'results.json'), 'w') as f:
        json.dump(dict(task=args.task, metric=metric, iters=args.iters, seeds=seeds,
                       seconds=seconds, results=results, summary=summary), f, indent=1)
    with open(osp.join(out, 'results.md'), 'w') as f:
        f.write(table + '\n')
    if json_path:
        write_results(json_path,
                      dict(machine=machine(), note=f'{args.train_images} training images, '
                           f'{args.iters} iterations a run, {len(seeds)} seeds'),
                      'python tools/ablation_study.py ' + ' '.join(sys.argv[1:]),
                      task=args.task, metric=metric, iters=args.iters, seeds=seeds,
                      seconds=seconds, results=results, summary=summary)
    print(table)


if __name__ == '__main__':
    main()
