#!/usr/bin/env python
"""One ViT5 training step per autocast dtype at the recipes' shapes, against float32 on the CPU
(:mod:`benchmarks.smoke`): the first thing tools/gpu_check.sh runs on a GPU.

    python tools/gpu_smoke.py [--triton 1|0] [--dtypes bfloat16,float16] [--rows-log JSONL]
    python tools/gpu_smoke.py --device cpu --tiny --triton 0     # the same at CPU-test size

Exits 0 when every dtype passed on the path asked for (with --triton 1: the plan says Triton
and no kernel fell back). Its last line is the verdict.
"""
import argparse
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--device', default=None, help='default cuda where there is one, else cpu')
    parser.add_argument('--dtypes', default='bfloat16,float16',
                        help='comma list of autocast dtypes (bfloat16, float16)')
    parser.add_argument('--triton', choices=['1', '0'],
                        help='set MMVIT5_TRITON for this process (default: as the environment '
                        'has it). On a CPU, 1 runs the kernels under Triton\'s interpreter')
    parser.add_argument('--tiny', action='store_true',
                        help='CPU-test size: width 128, 2 heads of 64, 96x128 input, window 4')
    parser.add_argument('--steps', type=int, default=3, help='timed steps after the first')
    parser.add_argument('--rows-log', metavar='JSONL',
                        help='append each case to this JSON-lines file as soon as it is done')
    parser.add_argument('--rows-tag', default='smoke', help='name of this run in --rows-log')
    args = parser.parse_args(argv)
    unknown = set(args.dtypes.split(',')) - {'bfloat16', 'float16'}
    if unknown:
        parser.error(f'--dtypes: unknown {sorted(unknown)}; choose from bfloat16, float16')
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    # before mmvit5 is imported: Triton reads TRITON_INTERPRET when the kernels are defined
    if args.triton:
        os.environ['MMVIT5_TRITON'] = args.triton
    import torch
    device = args.device or ('cuda' if torch.cuda.is_available() else 'cpu')
    if args.triton == '1' and not device.startswith('cuda'):
        os.environ.setdefault('TRITON_INTERPRET', '1')
    from benchmarks.rowlog import RowLog, run_meta
    from benchmarks.smoke import run_smoke, summary
    print(f'[gpu_smoke] {device}, torch {torch.__version__}, MMVIT5_TRITON='
          f'{os.environ.get("MMVIT5_TRITON", "unset")}, {"tiny" if args.tiny else "real"} '
          'shapes', flush=True)
    name = torch.cuda.get_device_name(device) if device.startswith('cuda') else 'CPU'
    log = RowLog(args.rows_log, args.rows_tag, meta=run_meta(name, REPO))
    cases = run_smoke(device, args.dtypes.split(','), 'tiny' if args.tiny else 'real',
                      args.steps, log)
    print(summary(cases), flush=True)
    return int(any(c.status != 'ok' for c in cases))


if __name__ == '__main__':
    sys.exit(main())
