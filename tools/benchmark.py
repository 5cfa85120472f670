#!/usr/bin/env python
"""Throughput, latency, memory and FLOP efficiency of the ViT-5 backbone next to its peers.

The method (same threads, input and dtype for every row; medians; CPU memory from profiler
events; fvcore FLOPs; alternated timing for the targets) is described in
:mod:`benchmarks`, which holds the machinery; this file only reads the flags.

Example: ``python tools/benchmark.py --models vit5-s,vit5-b --sizes 224,512,1024 --peers all``;
``--quick`` is the CI smoke preset.
"""
import argparse
import sys
from typing import Optional, Sequence

DEFAULT_FULL_CONFIGS = 'configs/vit5_maskrcnn_coco.py,configs/vit5_upernet_ade20k.py'
QUICK = dict(sizes='64', models='vit5-s', repeats=1, warmup=0, peers='timm-vit', matmul_size=1024)


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--models', help='comma list of vit5-s, vit5-b, vit5-l '
                        '(default vit5-s,vit5-b)')
    parser.add_argument('--sizes', help='comma list of square input sides (default 224,512,1024)')
    parser.add_argument('--peers', help='all (default), none, or comma list of peers '
                        '(benchmarks.peers.PEERS: mmseg-vit-b, timm-vit-b, ...) or their '
                        'prefixes, e.g. timm')
    parser.add_argument('--batch', type=int, default=1)
    parser.add_argument('--threads', type=int, help='default: torch\'s intra-op threads')
    parser.add_argument('--device', help='default: cuda when there is one, else cpu')
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
    parser.add_argument('--compile-backend', default='inductor',
                        help='torch.compile backend of --target-compile (aot_eager: the same '
                        'graphs without Inductor\'s code generation, for a CPU rehearsal)')
    parser.add_argument('--cpu-counterparts', action='store_true',
                        help='without CUDA, time the CPU counterpart of each CUDA-only target '
                        '(flex windows forward instead of training; one flex compile, ~30 s)')
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
                        'qk_norm, rope, registers, layer_scale, abs_pos, norm')
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
    parser.add_argument('--versus', metavar='CHECKOUT',
                        help='measure the rows of these flags with this checkout and with '
                        'CHECKOUT (another mmvit5 checkout, e.g. `git worktree add /tmp/old '
                        'COMMIT`), each by its own tools/benchmark.py in processes of their '
                        'own, alternated; one table of both (e.g. with --with-cp: activation '
                        'checkpointing before and after a change)')
    parser.add_argument('--versus-rounds', type=int, default=3,
                        help='alternated runs of each checkout with --versus (medians)')
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
    if args.versus and (args.components or args.breakdown or args.launches or args.train_log
                        or args.targets or args.detector_targets or args.full_model):
        parser.error('--versus compares the main table\'s rows (--models, --sizes, --with-cp, '
                     '...), not --components, --breakdown, --launches, --train-log, targets '
                     'or --full-model')
    # torch and the benchmark machinery only now: --help needs none of them
    from benchmarks.cli import complete_args
    complete_args(args, parser.error, QUICK)
    return args


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    args.command = 'python tools/benchmark.py ' + ' '.join(sys.argv[1:] if argv is None else argv)
    if args.versus:
        from benchmarks.versus import run_versus
        return run_versus(args)
    from benchmarks.cli import run_benchmark
    return run_benchmark(args)


if __name__ == '__main__':
    sys.exit(main())
