"""Markdown tables and the latency plot."""
import os
from typing import Dict, List, Optional, Tuple

from .core import Row, Setup
from .peers import BASELINE


def add_ratios(rows: List[Row]) -> None:
    baseline = {(r.input, r.mode): r.img_s for r in rows if r.model == BASELINE and r.img_s}
    for row in rows:
        if row.img_s and (row.input, row.mode) in baseline:
            row.vs_timm_vit_b = row.img_s / baseline[(row.input, row.mode)]


def fmt(value: Optional[float], digits: int) -> str:
    return 'n/a' if value is None else f'{value:,.{digits}f}'


def markdown_table(rows: List[Row], setup: Setup) -> str:
    memory = ('torch.cuda.max_memory_allocated' if setup.device.type == 'cuda' else
              'CPU: weights + input + profiler peak of live tensors during one step')
    header = ['model', 'input', 'mode', 'batch', 'img/s', 'latency ms (median)',
              f'peak mem MiB ({memory})', 'GFLOPs/img (2 x MACs; train = 3 x fwd)', 'GFLOP/s',
              f'% of matmul peak ({setup.matmul_gflop_s:,.0f} GFLOP/s)',
              'ratio to timm ViT-B (img/s, same input)', 'notes']
    lines = ['| ' + ' | '.join(header) + ' |', '|' + '---|' * len(header)]
    for r in rows:
        notes = r.note if r.status == 'ok' else f'{r.status}: {r.note}'
        cells = [r.model, r.input, r.mode, str(r.batch), fmt(r.img_s, 1), fmt(r.latency_ms, 2),
                 fmt(r.peak_mib, 1), fmt(r.gflops, 2), fmt(r.gflop_s, 1), fmt(r.pct_matmul, 1),
                 fmt(r.vs_timm_vit_b, 2), notes.replace('|', '/')]
        lines.append('| ' + ' | '.join(cells) + ' |')
    return '\n'.join(lines)


def save_plot(rows: List[Row], path: str) -> None:
    """Median latency against resolution, one line per model, forward and train side by side."""
    import matplotlib
    matplotlib.use('Agg')  # headless machines and CI have no display
    import matplotlib.pyplot as plt
    modes = ('forward', 'train')
    figure, axes = plt.subplots(1, len(modes), figsize=(12, 4.5), squeeze=False)
    for axis, mode in zip(axes[0], modes):
        points: Dict[str, List[Tuple[int, float]]] = {}
        for r in rows:
            if r.mode == mode and r.status == 'ok':
                points.setdefault(r.model, []).append((int(r.input.split('x')[0]), r.latency_ms))
        for model, series in points.items():
            sizes, latencies = zip(*sorted(series))
            axis.plot(sizes, latencies, marker='o', label=model)
        benchmarked = sorted({size for series in points.values() for size, _ in series})
        axis.set_xscale('log', base=2)  # sides usually double: 224, 512, 1024
        axis.set_xticks(benchmarked, [str(size) for size in benchmarked])
        axis.set(title=f'{mode} (batch {rows[0].batch if rows else "?"})',
                 xlabel='input side (px)', ylabel='median latency (ms)')
        axis.set_yscale('log')
        axis.grid(True, which='both', alpha=0.3)
        if points:
            axis.legend(fontsize=8)
    figure.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    figure.savefig(path, dpi=120)
    plt.close(figure)
