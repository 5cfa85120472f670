#!/usr/bin/env python
"""Export a whole ViT-5 model (image to results), or its backbone (+ neck), to ONNX and check it.

    python tools/export_onnx.py CONFIG [--checkpoint CKPT] [--part model|neck|backbone]
        [--shape H W] [--batch N] [--dynamic | --static-rope] [--size-divisor N] [--out FILE]
        [--check-shapes HxW,...] [--rounds N] [--json FILE]

Writes the ONNX file, then reports its operators, the largest |ONNX Runtime - PyTorch| per
output at the export size (and, with ``--dynamic``, at other sizes and batches), and ONNX
Runtime's latency against PyTorch eager (median of alternated rounds; ``--json`` adds the row
to a results file that ``python -m benchmarks.tables`` turns into the docs' table). Exits 1
when an error is above ``--atol``. The whole model (``--part model``, the default) pads the
image only where the config's test pads it: its numbers are the config's ``test_step``'s at
every size.
"""
import argparse
import os
import sys
import time
from typing import List, Optional, Sequence, Tuple

from cli_options import add_cfg_options

PARTS = ('model', 'backbone', 'neck')  # mmvit5.deploy.PARTS, which build_part checks


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[1])
    parser.add_argument('config', help='mmdet or mmseg config with a ViT5 backbone')
    parser.add_argument('--checkpoint', help='mmengine checkpoint of the whole model (default: '
                        'random weights, enough to check and time the graph)')
    parser.add_argument('--part', choices=PARTS + ('segmentor', ), default='model',
                        help='model: image -> results (default); neck: backbone + neck; '
                        'backbone (segmentor: the old name of model, deprecated)')
    parser.add_argument('--shape', type=int, nargs=2, metavar=('H', 'W'),
                        help='export size (default: the data preprocessor\'s size, else 512 512)')
    parser.add_argument('--batch', type=int, default=1,
                        help='example batch (fixed in a static graph)')
    parser.add_argument('--dynamic', action='store_true',
                        help='symbolic batch, H and W: any side from 2 to 4096')
    parser.add_argument('--dynamic-batch', action='store_true',
                        help='fixed H and W (and static RoPE), symbolic batch')
    parser.add_argument('--static-rope', action='store_true',
                        help='fold the RoPE tables and position embeddings into constants for '
                        'the export size (the default without --dynamic; for TensorRT)')
    parser.add_argument('--size-divisor', type=int,
                        help='model: pad the image to multiples of it in the graph, where the '
                        'config\'s test pads otherwise (prints the config line that makes its '
                        'test agree); backbone / neck: default the coarsest stride of the maps')
    parser.add_argument('--out', help='ONNX file (default work_dirs/onnx/<config>_<part>.onnx)')
    parser.add_argument('--no-optimize', action='store_true',
                        help='skip the exporter\'s graph optimiser (constant folding, fusions; '
                        'about a third of the export time): the same numbers, ONNX Runtime '
                        'optimises at load; for quick trials, not for other runtimes')
    parser.add_argument('--check-shapes',
                        help='comma list of HxW or BxHxW to compare at (default: the export '
                        'size, and with --dynamic two more, not multiples of 32, batch + 1)')
    parser.add_argument('--atol', type=float,
                        help='largest allowed |ORT - PyTorch| (float32; default 1e-4, for a '
                        'whole depth model 1e-4 times its max_depth: metres up to it)')
    parser.add_argument('--rounds', type=int, default=5,
                        help='alternated timing rounds of ORT and PyTorch (0: no timing)')
    parser.add_argument('--threads', type=int, help='default: torch\'s intra-op threads')
    parser.add_argument('--json', help='add the latency row to this results file '
                        '(e.g. results/onnx_latency.json)')
    add_cfg_options(parser, 'model.backbone.arch=small')
    args = parser.parse_args(argv)
    if args.part == 'segmentor':
        print('--part segmentor is deprecated: it is --part model (the whole model, image to '
              'results, of any task)', file=sys.stderr)
        args.part = 'model'
    if args.dynamic and args.static_rope:
        parser.error('--static-rope folds the tables of one input size: it cannot go with '
                     '--dynamic (a dynamic graph computes them from its symbolic size)')
    return args


def default_shape(cfg) -> Tuple[int, int]:
    size = cfg.model.get('data_preprocessor', {}).get('size')
    return tuple(size) if size else (512, 512)


def check_shapes(args: argparse.Namespace, shape: Tuple[int, int],
                 batch_fixed: bool = False) -> List[Tuple[int, ...]]:
    """(B, 3, H, W) shapes to compare ORT and PyTorch at (the export's batch only where
    ``batch_fixed``)."""
    if args.check_shapes:
        specs = [tuple(int(v) for v in spec.split('x')) for spec in args.check_shapes.split(',')]
        shapes = [(args.batch, 3, *s) if len(s) == 2 else (s[0], 3, *s[1:]) for s in specs]
    else:
        # sides the graph must pad (mmseg's 303x384 and 400x600 scaled to the divisor), where
        # a graph that only took multiples went wrong, and another batch
        d = args.size_divisor or 32
        shapes = [(args.batch, 3, *shape)] + ([
            (args.batch + (not batch_fixed), 3, shape[0] + d + d // 3, shape[1] + 2 * d - 1),
            (args.batch, 3, 3 * d + 5, 2 * d + 3 * d // 4)] if args.dynamic else [])
    for found in shapes:
        spec = 'x'.join(map(str, found))
        if batch_fixed and found[0] != args.batch:
            raise SystemExit(f'--check-shapes {spec}: the graph runs NMS image by image, so its '
                             f'batch is the export\'s, {args.batch}; export with --batch '
                             f'{found[0]} to check that batch')
        if not args.dynamic and found[1:] != (3, *shape) or \
                not (args.dynamic or args.dynamic_batch) and found[0] != args.batch:
            raise SystemExit(f'--check-shapes {spec}: a static graph only takes '
                             f'{args.batch}x{shape[0]}x{shape[1]}; export with --dynamic (or '
                             '--dynamic-batch) to check others')
    return shapes


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    if not os.path.isfile(args.config):
        raise SystemExit(f'config {args.config!r} does not exist')
    import torch  # after parsing: --help needs none of these
    from mmengine.config import Config

    from benchmarks.onnx_latency import add_row, latency_row, print_report
    from mmvit5.deploy import (
        NotExportable,
        build_part,
        errors_at,
        example_input,
        export_onnx,
        ort_session,
        size_divisor_line,
    )
    args.threads = args.threads or torch.get_num_threads()
    torch.set_num_threads(args.threads)
    cfg = Config.fromfile(args.config)
    if args.cfg_options:
        cfg.merge_from_dict(args.cfg_options)
    shape = tuple(args.shape) if args.shape else default_shape(cfg)
    if args.atol is None:  # a depth map is in metres: the same float32 error, relative
        depth = cfg.model.get('decode_head', {}).get('max_depth') if args.part == 'model' else 0
        args.atol = 1e-4 * max(1.0, depth or 1.0)
    name = os.path.splitext(os.path.basename(args.config))[0]
    out = args.out or os.path.join('work_dirs', 'onnx', f'{name}_{args.part}.onnx')

    try:
        model = build_part(cfg, args.part, args.checkpoint, args.size_divisor, args.dynamic)
    except NotExportable as e:
        raise SystemExit(f'{args.config}: {e}') from None
    batch_fixed = getattr(model, 'batch_fixed', False)
    if args.dynamic_batch and batch_fixed:
        raise SystemExit(f'{args.config}: the graph runs NMS image by image, so its batch is '
                         f'the export\'s (--batch, {args.batch}); drop --dynamic-batch')
    x = example_input((args.batch, 3, *shape), args.part)
    begin = time.perf_counter()
    try:
        export_onnx(model, x, out, dynamic=args.dynamic, size_divisor=model.size_divisor or 16,
                    static_rope=args.static_rope or None, dynamic_batch=args.dynamic_batch,
                    optimize=not args.no_optimize)
    except ValueError as e:  # a graph that would not compute the model: say why, no trace
        raise SystemExit(f'{args.config}: {e}') from None
    seconds = time.perf_counter() - begin
    session = ort_session(out, args.threads)
    errors = errors_at(model, session, check_shapes(args, shape, batch_fixed), args.part)
    row = latency_row(args, name, model, session, x, out, seconds, errors)
    print_report(row, args.atol)
    if args.part == 'model' and args.size_divisor:
        line = size_divisor_line(model.preprocess, args.size_divisor)
        print(f'\nThe graph pads to multiples of {args.size_divisor}; for the config\'s own '
              f'test to compute the same, add to it:\n\n    {line}')
    if args.json:
        add_row(args.json, row, ' '.join(['python tools/export_onnx.py', *sys.argv[1:]]))
    return int(any(error > args.atol for error in errors.values()))


if __name__ == '__main__':
    sys.exit(main())
