#!/usr/bin/env python
"""Export a ViT-5 backbone (+ neck) or a whole UperNet segmentor to ONNX and check it.

    python tools/export_onnx.py CONFIG [--checkpoint CKPT] [--part backbone|neck|segmentor]
        [--shape H W] [--dynamic] [--out FILE] [--check-shapes HxW,...] [--rounds N]

Writes the ONNX file, then reports the largest |ONNX Runtime - PyTorch| at the export size (and,
with ``--dynamic``, at other sizes), that the graph holds no complex value, and ONNX Runtime's
latency against PyTorch eager (median of alternated rounds). Exits 1 when an error is above
``--atol``. Detector configs export ``neck`` (backbone + neck): the RoI heads go through
mmdeploy (docs/en/user_guides/onnx.md).
"""
import argparse
import os
import statistics
import sys
import time
from typing import List, Optional, Sequence, Tuple

from cli_options import add_cfg_options

PARTS = ('backbone', 'neck', 'segmentor')  # mmvit5.deploy.PARTS, which build_part checks


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[1])
    parser.add_argument('config', help='mmdet or mmseg config with a ViT5 backbone')
    parser.add_argument('--checkpoint', help='mmengine checkpoint of the whole model (default: '
                        'random weights, enough to check and time the graph)')
    parser.add_argument('--part', choices=PARTS,
                        help='segmentor: image -> logits (default for mmseg configs); neck: '
                        'backbone + neck (default for mmdet configs); backbone')
    parser.add_argument('--shape', type=int, nargs=2, metavar=('H', 'W'),
                        help='export size (default: the data preprocessor\'s size, else 512 512)')
    parser.add_argument('--batch', type=int, default=1, help='batch, fixed in the graph')
    parser.add_argument('--dynamic', action='store_true',
                        help='symbolic H and W: any side from 2 to 4096')
    parser.add_argument('--size-divisor', type=int,
                        help='the graph pads the image to multiples of it (default: the '
                        'coarsest stride of the exported maps: 16 backbone, 64 Mask R-CNN neck, '
                        '32 UperNet)')
    parser.add_argument('--out', help='ONNX file (default work_dirs/onnx/<config>_<part>.onnx)')
    parser.add_argument('--check-shapes',
                        help='comma list of HxW to compare at (default: the export size, and '
                        'with --dynamic two more, with sides that are not multiples of '
                        '--size-divisor)')
    parser.add_argument('--atol', type=float, default=1e-4,
                        help='largest allowed |ORT - PyTorch| (float32)')
    parser.add_argument('--rounds', type=int, default=5,
                        help='alternated timing rounds of ORT and PyTorch (0: no timing)')
    parser.add_argument('--threads', type=int, help='default: torch\'s intra-op threads')
    add_cfg_options(parser, 'model.backbone.arch=small')
    return parser.parse_args(argv)


def default_shape(cfg) -> Tuple[int, int]:
    size = cfg.model.get('data_preprocessor', {}).get('size')
    return tuple(size) if size else (512, 512)


def check_shapes(args: argparse.Namespace, shape: Tuple[int, int]) -> List[Tuple[int, ...]]:
    """(B, 3, H, W) shapes to compare ORT and PyTorch at."""
    if args.check_shapes:
        sides = [tuple(int(v) for v in spec.split('x')) for spec in args.check_shapes.split(',')]
    else:
        # the graph pads inside: check sides it must pad (mmseg's 303x384 and 400x600 scaled
        # to the divisor), where a graph that only took multiples went wrong
        d = args.size_divisor
        sides = [shape] + ([(shape[0] + d + d // 3, shape[1] + 2 * d - 1),
                            (3 * d + 5, 2 * d + 3 * d // 4)] if args.dynamic else [])
    for side in sides:
        if not args.dynamic and tuple(side) != tuple(shape):
            raise SystemExit(f'--check-shapes {side[0]}x{side[1]}: a static graph only takes '
                             f'{shape[0]}x{shape[1]}; export with --dynamic to check others')
    return [(args.batch, 3, *side) for side in sides]


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    if not os.path.isfile(args.config):
        raise SystemExit(f'config {args.config!r} does not exist')
    import torch  # after parsing: --help needs none of these
    from mmengine.config import Config

    from benchmarks.core import Setup, forward_step
    from benchmarks.timing import interleaved_latencies
    from mmvit5.deploy import build_part, errors_at, example_input, export_onnx, ort_session
    from mmvit5.deploy.onnx import run_session
    args.threads = args.threads or torch.get_num_threads()
    torch.set_num_threads(args.threads)
    cfg = Config.fromfile(args.config)
    if args.cfg_options:
        cfg.merge_from_dict(args.cfg_options)
    part = args.part or ('segmentor' if 'decode_head' in cfg.model else 'neck')
    shape = tuple(args.shape) if args.shape else default_shape(cfg)
    name = os.path.splitext(os.path.basename(args.config))[0]
    out = args.out or os.path.join('work_dirs', 'onnx', f'{name}_{part}.onnx')

    model = build_part(cfg, part, args.checkpoint, args.size_divisor)
    args.size_divisor = model.size_divisor
    x = example_input((args.batch, 3, *shape), part)
    begin = time.perf_counter()
    export_onnx(model, x, out, dynamic=args.dynamic, size_divisor=args.size_divisor)
    seconds = time.perf_counter() - begin
    session = ort_session(out, args.threads)
    errors = errors_at(model, session, check_shapes(args, shape), part)

    sides = (f'dynamic H x W (padded to multiples of {args.size_divisor} in the graph)'
             if args.dynamic else f'{shape[0]}x{shape[1]}') + f', batch {args.batch}'

    print(f'## ONNX export: {name}, part {part}, {sides}\n')
    print(f'- file: {out} ({os.path.getsize(out) / 2**20:,.1f} MiB), exported in {seconds:.0f} s')
    print(f'- complex values in the graph: none; ONNX Runtime {session.get_providers()[0]}')
    print(f'- input: {session.get_inputs()[0].name}; outputs: '
          f'{", ".join(o.name for o in session.get_outputs())}')
    print('\n| input | max abs error, ORT vs PyTorch (float32) | within atol '
          f'{args.atol:g} |\n|---|---|---|')
    for size, error in errors.items():
        print(f'| {size} | {error:.2e} | {"yes" if error <= args.atol else "**no**"} |')
    if args.rounds:
        setup = Setup(torch.device('cpu'), torch.float32, args.batch, 0, 1)
        times = interleaved_latencies(
            {'pytorch': forward_step(model, x), 'ort': lambda: run_session(session, x)}, setup,
            args.rounds)
        eager, ort = statistics.median(times['pytorch']), statistics.median(times['ort'])
        print(f'\n| {shape[0]}x{shape[1]}, {args.threads} threads | PyTorch eager ms | '
              f'ONNX Runtime ms | ORT / PyTorch |\n|---|---|---|---|\n'
              f'| median of {args.rounds} alternated rounds | {eager:,.1f} | {ort:,.1f} | '
              f'{ort / eager:.2f} |')
    return int(any(error > args.atol for error in errors.values()))


if __name__ == '__main__':
    sys.exit(main())
