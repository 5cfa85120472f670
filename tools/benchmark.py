#!/usr/bin/env python
"""Throughput, latency, memory and FLOP efficiency of the ViT-5 backbone next to its peers.

The method (same threads, input and dtype for every row; medians; CPU memory from profiler
events; fvcore FLOPs; alternated timing for the targets) is described in
:mod:`benchmarks`, which holds the machinery; this file only reads the flags.

Example: ``python tools/benchmark.py --models vit5-s,vit5-b --sizes 224,512,1024 --peers all``;
``--quick`` is the CI smoke preset.
"""
import argparse
import os
import sys
from dataclasses import asdict
from typing import List, Optional, Sequence

import torch

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)  # run from a checkout without installing mmvit5

from benchmarks.breakdown import block_launches, breakdown_report, launches_table  # noqa: E402
from benchmarks.components import (COMPONENTS, PRETRAIN_SIZE,  # noqa: E402
                                   component_times, select_components)
from benchmarks.core import Row, Setup, free_memory, progress  # noqa: E402
from benchmarks.full_model import full_model_rows  # noqa: E402
from benchmarks.peers import PEERS, VIT5_ARCHS, build_vit5, select_peers  # noqa: E402
from benchmarks.peers import unavailable_reason  # noqa: E402
from benchmarks.report import (add_ratios, components_tables, markdown_table,  # noqa: E402
                               save_components_plot, save_plot)
from benchmarks.results import git_commit, write_results  # noqa: E402
from benchmarks.rowlog import RowLog  # noqa: E402
from benchmarks.rows import bench_backbone, checkpointed_row, compiled_row  # noqa: E402
from benchmarks.targets import (detector_targets, row_targets,  # noqa: E402
                                targets_table, timed_targets)
from benchmarks.timing import matmul_gflop_s  # noqa: E402
from benchmarks.train_loop import train_loop_report, train_loop_table  # noqa: E402
from mmvit5.models.layers.kernels import triton_enabled  # noqa: E402

DEFAULT_FULL_CONFIGS = 'configs/vit5_maskrcnn_coco.py,configs/vit5_upernet_ade20k.py'
QUICK = dict(sizes='64', models='vit5-s', repeats=1, warmup=0, peers='timm-vit', matmul_size=1024)


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--models', help=f'comma list of {list(VIT5_ARCHS)} '
                        '(default vit5-s,vit5-b)')
    parser.add_argument('--sizes', help='comma list of square input sides (default 224,512,1024)')
    parser.add_argument('--peers', help=f'all (default), none, or comma list of {list(PEERS)} '
                        'or their prefixes, e.g. timm')
    parser.add_argument('--batch', type=int, default=1)
    parser.add_argument('--threads', type=int, default=torch.get_num_threads())
    parser.add_argument('--device', default='cuda' if torch.cuda.is_available() else 'cpu')
    parser.add_argument('--dtype', choices=['float32', 'bfloat16'],
                        help='default bfloat16 on CUDA, float32 on CPU')
    parser.add_argument('--warmup', type=int)
    parser.add_argument('--repeats', type=int)
    parser.add_argument('--matmul-size', type=int,
                        help='side of the peak-rate matmul (default 8192 on CUDA, 2048 on CPU)')
    parser.add_argument('--compile', action='store_true', help='add torch.compile ViT5 rows')
    parser.add_argument('--with-cp', action='store_true',
                        help='add ViT5 train rows with activation checkpointing')
    parser.add_argument('--window', type=int, default=0,
                        help='add ViT5 rows with windowed attention of this size (ViTDet: 14; '
                        '4 global blocks)')
    parser.add_argument('--full-model', action='store_true',
                        help='add train step and inference of full detector/segmentor configs')
    parser.add_argument('--full-configs', default=DEFAULT_FULL_CONFIGS,
                        help='comma list of configs for --full-model, relative to the repo')
    parser.add_argument('--full-size', type=int, default=512,
                        help='input side of the --full-model rows')
    parser.add_argument('--full-batch', type=int, default=2,
                        help='batch of the --full-model rows (UperNet\'s pooled BatchNorm '
                        'cannot train on 1)')
    parser.add_argument('--targets', default='',
                        help='comma list of input sides at which to time the target ratios in '
                        'alternation (e.g. 512,1024; default none)')
    parser.add_argument('--target-rounds', type=int, default=5,
                        help='rounds of alternated steps per target ratio')
    parser.add_argument('--target-compile', action='store_true',
                        help='with --targets, time only the torch.compile\'d training-step '
                        'pair (the eager targets are another run\'s)')
    parser.add_argument('--detector-targets', default='',
                        help='comma list of input sides at which to time the whole Mask R-CNN '
                        'training step against the same detector on mmpretrain\'s ViT-B (batch '
                        '--batch; ~3 min per round at 1024 on 2 CPU cores)')
    parser.add_argument('--breakdown', default='',
                        help='instead of the main table, break one ViT5-B block\'s training cost '
                        'down against timm\'s ViT-B block at these input sides: saved '
                        'activations by module, forward/backward time per part')
    parser.add_argument('--launches', default='',
                        help='instead of the main table, count the ops and kernels of one '
                        'ViT5-B block\'s forward + backward against timm\'s ViT-B block at these '
                        'input sides (the GPU code path where the fused kernels run: on CUDA, or '
                        'MMVIT5_TRITON=1 TRITON_INTERPRET=1 here)')
    parser.add_argument('--components', nargs='?', const='all',
                        help='instead of the main table, time ViT5 (default vit5-b) with each '
                        'part removed, in eager and ONNX Runtime: all, or a comma list of '
                        f'{[c.key for c in COMPONENTS]}')
    parser.add_argument('--component-train-sizes', default='224,512',
                        help='sizes at which --components also times the training step (1024 '
                        'adds ~15 min for ViT5-B on 2 CPU cores)')
    parser.add_argument('--component-rounds', type=int, default=3,
                        help='alternated rounds per size and runtime of --components')
    parser.add_argument('--quick', action='store_true',
                        help='CI smoke preset: ' + ', '.join(f'{k}={v}' for k, v in QUICK.items()))
    parser.add_argument('--train-log', metavar='LOG:CONFIG:ARCH',
                        help='report a tools/train.py log (img/s, peak, backbone MFU) against '
                        'the model-only step of CONFIG (ViT5 ARCH, --batch, --full-size)')
    parser.add_argument('--json', help='save the raw rows here (at the end of the run)')
    parser.add_argument('--rows-log', metavar='JSONL',
                        help='append each row, target or record to this JSON-lines file the '
                        'moment it is measured (a run stopped by a time cap keeps what it '
                        'finished; several runs may share the file)')
    parser.add_argument('--rows-tag', default='',
                        help='name of this run in each --rows-log line (e.g. a gpu_check '
                        'section)')
    parser.add_argument('--plot', help='PNG of the run (default work_dirs/benchmark.png, '
                        'work_dirs/components.png with --components)')
    args = parser.parse_args(argv)
    cuda = args.device.startswith('cuda')
    if args.components and not args.quick:
        args.models = args.models or 'vit5-b'
    args.plot = args.plot or f'work_dirs/{"components" if args.components else "benchmark"}.png'
    defaults = dict(sizes='224,512,1024', models='vit5-s,vit5-b', repeats=10, warmup=3,
                    peers='all', matmul_size=8192 if cuda else 2048)
    # explicit flags beat the preset, the preset beats the defaults
    for key, value in ({**defaults, **QUICK} if args.quick else defaults).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    args.dtype = args.dtype or ('bfloat16' if cuda else 'float32')
    if args.components:
        try:
            select_components(args.components)
        except ValueError as exc:
            parser.error(f'--components: {exc}')
    unknown = set(args.models.split(',')) - set(VIT5_ARCHS)
    if unknown:
        parser.error(f'--models: unknown {sorted(unknown)}; choose from {list(VIT5_ARCHS)}')
    return args


def sizes(spec: str) -> List[int]:
    """``'512,1024'`` -> [512, 1024]; empty or ``none`` -> []."""
    return [] if spec in ('', 'none') else [int(side) for side in spec.split(',')]


def run(args: argparse.Namespace, setup: Setup, log: RowLog) -> List[Row]:
    """Every row of the run, grouped by input size so peers sit next to each other; ``log``
    gets each row as soon as it is measured."""
    peers = select_peers(args.peers)
    missing = {p: unavailable_reason(PEERS[p][0]) for p in peers}
    rows: List[Row] = []

    def add(new: List[Row]) -> None:
        rows.extend(new)
        log.extend(new)

    add([Row(p, '-', '-', setup.batch, status='skipped', note=reason)
         for p, reason in missing.items() if reason])
    for size in sizes(args.sizes):
        for name in args.models.split(','):
            new, model, x = bench_backbone(name, lambda: build_vit5(name, size), size, setup)
            add(new)
            # the variants do the same useful work as the eager forward
            flops = new[0].gflops * 1e9 if new[0].gflops else None
            if model is not None and args.compile:
                add([compiled_row(name, model, x, new[0], flops, setup)])
            if model is not None and args.with_cp:
                add([checkpointed_row(name, size, x, new[1], flops, setup)])
            del model, x
            free_memory(setup.device)
            if args.window:
                add(bench_backbone(f'{name} win{args.window}', lambda: build_vit5(
                    name, size, window_size=args.window), size, setup)[0])
                free_memory(setup.device)
        for peer in (p for p in peers if not missing[p]):
            add(bench_backbone(peer, lambda: PEERS[peer][1](size), size, setup)[0])
            free_memory(setup.device)
    if args.full_model:
        for config in args.full_configs.split(','):
            add(full_model_rows(config, args.full_size, args.full_batch, setup, root=REPO))
    return rows


def run_components(args: argparse.Namespace, setup: Setup, device: str, log: RowLog) -> int:
    """The --components study: tables on stdout, bars in the plot, rows in --json."""
    components = select_components(args.components)
    results = [t for name in args.models.split(',')
               for t in component_times(name, components, sizes(args.sizes),
                                        sizes(args.component_train_sizes),
                                        args.component_rounds, setup, log=log)]
    import onnxruntime
    print(f'## ViT-5 component costs: {device}, {args.dtype} (ORT float32), batch {args.batch}, '
          f'img_size {PRETRAIN_SIZE}, median of {args.component_rounds} alternated rounds, '
          f'torch {torch.__version__}, onnxruntime {onnxruntime.__version__}\n')
    print(components_tables(results, components))
    save_components_plot(results, components, args.plot)
    progress(f'plot saved to {args.plot}')
    save_json(args, dict(device=device, dtype=args.dtype, threads=args.threads,
                         rounds=args.component_rounds, onnxruntime=onnxruntime.__version__),
              components=[c._asdict() for c in components],
              times=[asdict(t) for t in results])
    # every variant of every runtime timed, or the run failed
    return int(any(t.note or len(t.latencies_ms) != len(components) for t in results))


def run_breakdown(args: argparse.Namespace, setup: Setup, device: str, log: RowLog) -> int:
    """The --breakdown study: tables on stdout, records in --json."""
    mixed = ' (float32 weights, autocast)' if setup.dtype != torch.float32 else ''
    print(f'## One ViT5-B block against timm\'s ViT-B block, training: {device}, '
          f'{args.dtype}{mixed}, batch {args.batch}, torch {torch.__version__}\n')
    text, raw = breakdown_report(sizes(args.breakdown), setup, args.target_rounds, log=log)
    print(text)
    save_json(args, dict(device=device, dtype=args.dtype, threads=args.threads,
                         rounds=args.target_rounds), breakdown=raw)
    return 0


def run_launches(args: argparse.Namespace, setup: Setup, device: str, log: RowLog) -> int:
    """--launches: one block's ops and kernels, forward + backward, against timm's."""
    fused = triton_enabled(torch.empty(0, device=setup.device))
    print(f"## Launches of one ViT5-B block against timm's ViT-B block, forward + backward: "
          f"{device}, {args.dtype}, batch {args.batch}, fused kernels "
          f"{'on' if fused else 'off'}, torch {torch.__version__}\n")
    raw = {}
    for size in sizes(args.launches):
        counted = block_launches(size, setup)
        log.extend(counted)
        print(f'### {size}x{size}\n\n{launches_table(counted)}\n')
        raw[size] = [c._asdict() for c in counted]
    save_json(args, dict(device=device, dtype=args.dtype, batch=args.batch,
                         fused_kernels=fused), launches=raw)
    return 0


def save_json(args: argparse.Namespace, meta: dict, **records) -> None:
    """With --json, write a run's records with the torch version, date, commit and command."""
    if args.json:
        write_results(args.json, dict(meta, torch=torch.__version__), args.command, **records)
        progress(f'rows saved to {args.json}')


def run_train_log(args: argparse.Namespace, setup: Setup, device: str, log: RowLog) -> int:
    """--train-log: the tools/train.py loop against the model-only step."""
    train_log, config, arch = args.train_log.split(':')
    row = train_loop_report(train_log, config, arch, args.full_size, setup,
                            args.target_rounds)
    log(dict(kind='TrainLoop', **row))
    print(f'## tools/train.py loop: {device}, {args.dtype}, torch {torch.__version__}\n')
    print(train_loop_table([row]))
    save_json(args, dict(device=device, dtype=args.dtype), rows=[row])
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    args.command = 'python tools/benchmark.py ' + ' '.join(sys.argv[1:] if argv is None else argv)
    torch.set_num_threads(args.threads)
    setup = Setup(torch.device(args.device), getattr(torch, args.dtype), args.batch,
                  args.warmup, args.repeats)
    device = (torch.cuda.get_device_name(setup.device) if setup.device.type == 'cuda'
              else f'CPU, {args.threads} threads')
    log = RowLog(args.rows_log, args.rows_tag, echo=bool(args.rows_log),
                 meta=dict(device=device, dtype=args.dtype, batch=args.batch,
                           torch=torch.__version__, commit=git_commit(REPO)))
    if args.components:
        return run_components(args, setup, device, log)
    if args.breakdown:
        return run_breakdown(args, setup, device, log)
    if args.launches:
        return run_launches(args, setup, device, log)
    if args.train_log:
        return run_train_log(args, setup, device, log)
    setup.matmul_gflop_s = matmul_gflop_s(setup, args.matmul_size)
    log(dict(kind='MatmulPeak', size=args.matmul_size, gflop_s=setup.matmul_gflop_s))
    rows = run(args, setup, log)
    add_ratios(rows)
    print(f'## ViT-5 benchmark: {device}, {args.dtype}, batch {args.batch}, '
          f'median of {args.repeats} after {args.warmup} warmup, torch {torch.__version__}\n')
    print(markdown_table(rows, setup))
    targets = [t for size in sizes(args.targets)
               for t in timed_targets(size, args.target_rounds, setup, args.target_compile,
                                      log=log)]
    for size in sizes(args.detector_targets):
        measured = detector_targets(size, args.target_rounds, setup, REPO)
        log.extend(measured)
        targets += measured
    from_rows = row_targets(rows)
    log.extend(from_rows)
    targets += from_rows
    if targets:
        print(f'\n### Targets\n\n{targets_table(targets, args.target_rounds)}')
    save_plot(rows, args.plot)
    progress(f'plot saved to {args.plot}')
    save_json(args, dict(device=device, dtype=args.dtype, threads=args.threads,
                         batch=args.batch, warmup=args.warmup, repeats=args.repeats,
                         matmul_size=args.matmul_size, matmul_gflop_s=setup.matmul_gflop_s,
                         target_rounds=args.target_rounds),
              rows=[asdict(r) for r in rows],
              targets=[dict(asdict(t), met=t.met) for t in targets])
    # peers may be skipped, but a run whose own backbone failed is a failed run
    return int(any(r.status == 'failed' and r.model in VIT5_ARCHS for r in rows))


if __name__ == '__main__':
    sys.exit(main())
