"""Compile mmvit5's Triton kernels for CUDA GPUs here, with or without a GPU, and report their
registers, spills and shared memory (benchmarks/kernel_compile.py).

    python tools/compile_kernels.py [--archs 80,90] [--widths 384,768,1024]
        [--modes float32,...] [--json results/kernel_compile.json]

Every kernel is built by Triton's own compiler from the arguments of a ViT5 block's forward and
backward. Exits 1 when a kernel spills registers or needs more shared memory than its GPU
has: both cost speed on the GPU, and neither shows under Triton's interpreter.
"""
import argparse
import os
import sys

# the kernels must be decorated for the compiler, not for the interpreter
os.environ.pop('TRITON_INTERPRET', None)


def ints(text: str) -> list:
    return [int(v) for v in text.split(',')]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--archs', type=ints, default=[80, 90],
                        help='CUDA compute capabilities x 10 (an unknown one is refused with '
                        'the list)')
    parser.add_argument('--widths', type=ints, default=[384, 768, 1024],
                        help='ViT5 embed_dim (ViT5-S/B/L), 64-wide heads')
    parser.add_argument('--modes', help='comma list of float32, bf16 autocast, fp16 '
                        'autocast, bfloat16 (default: all)')
    parser.add_argument('--json', help='write every compiled kernel here')
    args = parser.parse_args()
    from benchmarks.kernel_compile import (  # after parsing: --help needs none of these
        MODES,
        SHARED_LIMIT,
        compile_block_kernels,
        compiled_table,
    )
    from benchmarks.results import machine, write_results
    args.modes = args.modes or ','.join(MODES)
    unknown = [a for a in args.archs if a not in SHARED_LIMIT]
    modes = args.modes.split(',')
    if unknown or set(modes) - set(MODES):
        parser.error(f'--archs {unknown} or --modes {sorted(set(modes) - set(MODES))} unknown: '
                     f'archs are {sorted(SHARED_LIMIT)}, modes {list(MODES)}')
    found = compile_block_kernels(args.archs, args.widths, modes)
    print(compiled_table(found))
    bad = [c for c in found if c.spill_bytes or c.shared > SHARED_LIMIT[c.arch]]
    for c in bad:
        print(f'[compile_kernels] {c.kernel} on sm_{c.arch} ({c.mode}, width {c.width}): '
              f'{c.spill_bytes} bytes spilled, {c.shared} bytes shared of '
              f'{SHARED_LIMIT[c.arch]}', file=sys.stderr)
    if args.json:
        import triton
        archs = ', '.join(f'sm_{a}' for a in args.archs)
        write_results(args.json, dict(machine=machine(), note=f'compiled for {archs}, not run: '
                                      f'Triton {triton.__version__} and its ptxas'),
                      'python tools/compile_kernels.py ' + ' '.join(sys.argv[1:]),
                      kernels=[c._asdict() for c in found])
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())
