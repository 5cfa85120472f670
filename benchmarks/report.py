"""Markdown tables and plots: the main rows and the component costs."""
import os
import statistics
from typing import Dict, List, Optional, Tuple

from .components import Component, ComponentTimes
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


def components_tables(results: List[ComponentTimes], components: List[Component]) -> str:
    """Median latency of every variant, then each part's cost per input and runtime."""
    columns = [(r.input, r.runtime) for r in results if r.model == results[0].model]
    lines = ['| model | variant | ' + ' | '.join(f'{i} {rt} ms' for i, rt in columns) + ' |',
             '|' + '---|' * (len(columns) + 2)]
    by_column = {(r.model, r.input, r.runtime): r for r in results}
    models = list(dict.fromkeys(r.model for r in results))
    for model in models:
        for c in components:
            cells = [fmt(by_column[(model, *col)].median_ms(c.key), 1) for col in columns]
            lines.append(f'| {model} | {c.variant} | ' + ' | '.join(cells) + ' |')
    lines += ['', '| model | part: cost = released / without - 1 (median, range) | ' +
              ' | '.join(f'{i} {rt}' for i, rt in columns) + ' |',
              '|' + '---|' * (len(columns) + 2)]
    for model in models:
        for c in components[1:]:
            cells = []
            for col in columns:
                cost = by_column[(model, *col)].cost(c.key)
                cells.append('n/a' if not cost else f'{statistics.median(cost):+.1%} '
                             f'({min(cost):+.1%}..{max(cost):+.1%})')
            lines.append(f'| {model} | {c.part} | ' + ' | '.join(cells) + ' |')
    notes = sorted({f'{r.input} {r.runtime}: {r.note}' for r in results if r.note})
    return '\n'.join(lines + [''] + [f'- {n}' for n in notes])


def save_components_plot(results: List[ComponentTimes], components: List[Component],
                         path: str) -> None:
    """One bar per part and (input, runtime): its cost, with the range of the rounds."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    model = results[0].model
    columns = [r for r in results if r.model == model]
    parts = components[1:]
    figure, axis = plt.subplots(figsize=(11, 0.9 + 0.55 * len(parts) * max(1, len(columns) / 4)))
    height = 0.8 / max(len(columns), 1)
    for j, times in enumerate(columns):
        costs = [times.cost(c.key) or [float('nan')] for c in parts]
        medians = [100 * statistics.median(c) for c in costs]
        spans = [[100 * (statistics.median(c) - min(c)) for c in costs],
                 [100 * (max(c) - statistics.median(c)) for c in costs]]
        axis.barh([i + j * height for i in range(len(parts))], medians, height, xerr=spans,
                  label=f'{times.input} {times.runtime}', capsize=2)
    axis.set_yticks([i + 0.4 - height / 2 for i in range(len(parts))],
                    [c.part for c in parts])
    axis.invert_yaxis()
    axis.axvline(0, color='black', linewidth=0.8)
    axis.set(xlabel='cost: time of the released model / time without the part - 1 (%)',
             title=f'{model}: what each part costs (median and range of alternated rounds)')
    axis.grid(True, axis='x', alpha=0.3)
    axis.legend(fontsize=7, loc='best')
    figure.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    figure.savefig(path, dpi=120)
    plt.close(figure)
