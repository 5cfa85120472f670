"""Plot training curves (loss, and mAP / mIoU where evaluated) from mmengine work dirs.

    python tools/plot_curves.py WORK_DIR [WORK_DIR ...] --out curves.png

Reads ``<work_dir>/<timestamp>/vis_data/scalars.json`` (mmengine's JSON-lines log) of the
latest run in each work dir.
"""
import argparse
import glob
import json
import os.path as osp
from typing import Dict, List, Tuple

METRICS = ('coco/bbox_mAP', 'coco/segm_mAP', 'mIoU')


def read_scalars(work_dir: str) -> Tuple[List[dict], str]:
    logs = sorted(glob.glob(osp.join(work_dir, '*', 'vis_data', 'scalars.json')))
    if not logs:
        raise FileNotFoundError(f'no */vis_data/scalars.json under {work_dir}: is it an '
                                'mmengine work dir of a finished or running training?')
    with open(logs[-1]) as f:
        return [json.loads(line) for line in f if line.strip()], logs[-1]


def curves(records: List[dict]) -> Dict[str, List[Tuple[int, float]]]:
    series: Dict[str, List[Tuple[int, float]]] = {}
    last_iter = 0
    for record in records:
        last_iter = record.get('iter', record.get('step', last_iter))
        for key in ('loss', *METRICS):
            if key in record:
                # COCO mAP is a fraction, mmseg's mIoU a percentage: plot both in percent
                scale = 100.0 if key.startswith('coco/') else 1.0
                series.setdefault(key, []).append((last_iter, scale * float(record[key])))
    return series


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('work_dirs', nargs='+')
    parser.add_argument('--out', default='curves.png')
    args = parser.parse_args()
    import matplotlib  # here, not at the top: --help needs none of it
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    fig, (ax_loss, ax_metric) = plt.subplots(1, 2, figsize=(11, 4))
    for work_dir in args.work_dirs:
        records, source = read_scalars(work_dir)
        name = osp.basename(osp.normpath(work_dir))
        for key, points in curves(records).items():
            xs, ys = zip(*points)
            ax = ax_loss if key == 'loss' else ax_metric
            ax.plot(xs, ys, marker='' if key == 'loss' else 'o', label=f'{name} {key}')
        print(f'[plot_curves] {name}: {len(records)} records from {source}')
    ax_loss.set(xlabel='iteration', ylabel='training loss', title='loss')
    ax_metric.set(xlabel='iteration', ylabel='mAP / mIoU (%)', title='validation')
    for ax in (ax_loss, ax_metric):
        if ax.lines:
            ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(args.out, dpi=100)
    print(f'[plot_curves] wrote {args.out}')


if __name__ == '__main__':
    main()
