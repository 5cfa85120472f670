"""What tools/benchmark.py runs once its flags are read (the tool itself imports none of
this before parsing, so its ``--help`` needs no torch)."""
import argparse
import os
from dataclasses import asdict
from typing import Callable, List

import torch

from .breakdown import block_launches, breakdown_report, launches_table
from .components import PRETRAIN_SIZE, component_times, select_components
from .core import Row, Setup, free_memory, progress
from .full_model import full_model_rows
from .peers import PEERS, VIT5_ARCHS, build_vit5, select_peers, unavailable_reason
from .report import (add_ratios, components_tables, markdown_table, save_components_plot,
                     save_plot)
from .results import write_results
from .rowlog import RowLog, run_meta
from .rows import bench_backbone, checkpointed_row, compiled_row
from .targets import detector_targets, row_targets, targets_table, timed_targets
from .timing import matmul_gflop_s
from .train_loop import train_loop_report, train_loop_table

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def complete_args(args: argparse.Namespace, error: Callable[[str], None], quick: dict) -> None:
    """Fill in the defaults of tools/benchmark.py's options (the device's, and the preset
    ``quick`` with ``--quick``) and check the names; ``error`` is the parser's."""
    args.threads = args.threads or torch.get_num_threads()
    args.device = args.device or ('cuda' if torch.cuda.is_available() else 'cpu')
    cuda = args.device.startswith('cuda')
    if args.components and not args.quick:
        args.models = args.models or 'vit5-b'
    args.plot = args.plot or f'work_dirs/{"components" if args.components else "benchmark"}.png'
    defaults = dict(sizes='224,512,1024', models='vit5-s,vit5-b', repeats=10, warmup=3,
                    peers='all', matmul_size=8192 if cuda else 2048)
    # explicit flags beat the preset, the preset beats the defaults
    for key, value in ({**defaults, **quick} if args.quick else defaults).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    args.dtype = args.dtype or ('bfloat16' if cuda else 'float32')
    if args.components:
        try:
            select_components(args.components)
        except ValueError as exc:
            error(f'--components: {exc}')
    unknown = set(args.models.split(',')) - set(VIT5_ARCHS)
    if unknown:
        error(f'--models: unknown {sorted(unknown)}; choose from {list(VIT5_ARCHS)}')


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
    print(f"## Launches of one ViT5-B block against timm's ViT-B block, forward + backward: "
          f"{device}, {args.dtype}, batch {args.batch}, torch {torch.__version__}\n")
    raw = {}
    for size in sizes(args.launches):
        counted = block_launches(size, setup)
        log.extend(counted)
        print(f'### {size}x{size}\n\nViT5 plan: {counted[0].plan}\n\n'
              f'{launches_table(counted)}\n')
        raw[size] = [c._asdict() for c in counted]
    save_json(args, dict(device=device, dtype=args.dtype, batch=args.batch), launches=raw)
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


def run_benchmark(args: argparse.Namespace) -> int:
    """tools/benchmark.py with the options :func:`complete_args` completed."""
    torch.set_num_threads(args.threads)
    setup = Setup(torch.device(args.device), getattr(torch, args.dtype), args.batch,
                  args.warmup, args.repeats)
    device = (torch.cuda.get_device_name(setup.device) if setup.device.type == 'cuda'
              else f'CPU, {args.threads} threads')
    log = RowLog(args.rows_log, args.rows_tag, echo=bool(args.rows_log),
                 meta=run_meta(device, REPO, dtype=args.dtype, batch=args.batch))
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
                                      log=log, cpu_counterparts=args.cpu_counterparts,
                                      compile_backend=args.compile_backend)]
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
    # peers may be skipped, but a run whose own backbone failed, or that left a target it
    # was asked for unmeasured, is a failed run
    return int(any(r.status == 'failed' and r.model in VIT5_ARCHS for r in rows) or
               any(t.ratio is None for t in targets))

