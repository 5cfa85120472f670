"""mmvit5's Triton kernels compiled for CUDA GPUs on a machine that has none.

Triton's interpreter (``TRITON_INTERPRET=1``, how CI checks the kernels' values) never runs
Triton's compiler. Here the compiler itself turns every kernel a ViT5 block launches into a
cubin for a chosen architecture: its LLVM and the ``ptxas`` it ships need no device, only a
driver that names the target (:class:`CompileOnlyDriver`). :func:`compile_block_kernels` runs
ViT5 blocks forward and backward on the CPU with every launch replaced by that compilation
(Triton's ``warmup``), so the kernels are built with the very arguments, dtypes and block
sizes of training; the outputs stay unwritten and mean nothing. ``ptxas -v`` then reports
registers, spills and stack per kernel.

The kernel modules must have been imported without ``TRITON_INTERPRET`` (run in a process of
its own: ``python -m benchmarks.kernel_compile``).
"""
import argparse
import contextlib
import os
import re
import subprocess
import sys
import tempfile
from typing import Iterator, List, NamedTuple, Sequence

import torch

# shared memory one block may use (bytes): A100 (8.0) 163 KiB, L40/4090 (8.9) 99 KiB,
# H100/H200 (9.0) 227 KiB
SHARED_LIMIT = {80: 166912, 86: 101376, 89: 101376, 90: 232448}
MODES = {  # name: (autocast dtype or None, parameter dtype)
    'float32': (None, torch.float32),
    'bf16 autocast': (torch.bfloat16, torch.float32),
    'fp16 autocast': (torch.float16, torch.float32),
    'bfloat16': (None, torch.bfloat16),
}


class Compiled(NamedTuple):
    """One kernel as compiled for one architecture."""
    kernel: str
    arch: int
    mode: str
    width: int  # the ViT5's embed_dim
    pointers: str  # element types of its pointer arguments, e.g. 'bf16 fp32'
    num_warps: int
    shared: int  # bytes
    registers: int
    spill_bytes: int  # spill stores + loads
    stack_bytes: int
    cubin_bytes: int


def _cuda_driver():
    from triton.backends.compiler import GPUTarget
    from triton.backends.nvidia.driver import CudaDriver

    class CompileOnlyDriver(CudaDriver):
        """The CUDA driver as Triton's compiler sees it: a target and nothing to run on."""

        def __init__(self, arch: int):  # no CudaDriver.__init__: it loads libcuda
            self.arch = arch

        def get_current_target(self):
            return GPUTarget('cuda', self.arch, 32)

        def get_current_device(self):
            return 0

        def get_current_stream(self, device=None):
            return 0

    return CompileOnlyDriver


@contextlib.contextmanager
def compile_only(arch: int, found: List) -> Iterator[None]:
    """Within: Triton launches compile for ``arch`` and append the kernel to ``found``."""
    from triton.runtime import driver
    from triton.runtime.jit import JITFunction

    from mmvit5.models.layers.kernels import (  # noqa: F401 (decorated here, not interpreted)
        dispatch,
        layer_scale_triton,
        qk_norm_rope_triton,
        rms_norm_triton,
    )
    if dispatch.INTERPRET:
        raise RuntimeError('the kernels were decorated under TRITON_INTERPRET=1: compile them '
                           'in a process without it (python -m benchmarks.kernel_compile)')
    launch = JITFunction.run

    def compile_instead(self, *args, grid, warmup, **kwargs):
        kernel = launch(self, *args, grid=grid, warmup=True, **kwargs)
        found.append(kernel)
        return kernel

    # the dispatcher sends CPU tensors to the Triton kernels only when it believes they are
    # interpreted; they are compiled instead, never run
    saved = {key: os.environ.get(key) for key in ('MMVIT5_TRITON', )}
    # restored as found: reset_active() would look for a GPU (the attributes differ by version)
    state = dict(vars(driver))
    driver.set_active(_cuda_driver()(arch))
    JITFunction.run = compile_instead
    os.environ.update(MMVIT5_TRITON='1')
    dispatch.INTERPRET = True
    try:
        yield
    finally:
        dispatch.INTERPRET = False
        JITFunction.run = launch
        vars(driver).clear()
        vars(driver).update(state)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def ptxas_report(ptx: str, arch: int) -> dict:
    """registers, spill and stack bytes of the one kernel in ``ptx`` (``ptxas -v``)."""
    from triton.backends.nvidia import compiler
    if not hasattr(compiler, 'get_ptxas'):  # Triton 3.2 and 3.3
        ptxas = compiler._path_to_binary('ptxas')[0]
    else:
        try:
            ptxas = compiler.get_ptxas(arch).path
        except TypeError:  # Triton < 3.6: one ptxas for every architecture
            ptxas = compiler.get_ptxas().path
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, 'kernel.ptx')
        with open(path, 'w') as f:
            f.write(ptx)
        suffix = 'a' if arch >= 90 else ''
        log = subprocess.run([ptxas, '-v', '--gpu-name', f'sm_{arch}{suffix}',
                              path, '-o', os.devnull], capture_output=True, text=True,
                             check=True).stderr
    number = lambda pattern: int(re.search(pattern, log).group(1))  # noqa: E731
    return dict(registers=number(r'Used (\d+) registers'),
                spill_bytes=number(r'(\d+) bytes spill stores') +
                number(r'(\d+) bytes spill loads'),
                stack_bytes=number(r'(\d+) bytes stack frame'))


def compile_block_kernels(archs: Sequence[int], widths: Sequence[int] = (384, 768, 1024),
                          modes: Sequence[str] = tuple(MODES)) -> List[Compiled]:
    """Every Triton kernel of a windowed and a global ViT5 block, forward and backward, for
    each architecture, width (64-wide heads, as ViT5-S/B/L) and mode of :data:`MODES`.

    Returns:
        list[Compiled]: One entry per distinct compiled kernel.
    """
    from mmvit5.models import ViT5
    from mmvit5.models.layers.kernels import triton_failure
    done, seen = [], set()
    for arch in archs:
        for width in widths:
            for mode in modes:
                autocast, param_dtype = MODES[mode]
                model = ViT5(arch=dict(embed_dim=width, depth=2, num_heads=width // 64),
                             img_size=64, out_indices=(1, ), window_size=4,
                             global_attn_indices=(1, )).to(param_dtype)
                x = torch.randn(2, 3, 64, 96, dtype=param_dtype)
                found = []
                with compile_only(arch, found):
                    with torch.autocast('cpu', dtype=autocast or torch.bfloat16,
                                        enabled=autocast is not None):
                        out = model(x)[0]
                    out.float().sum().backward()
                if triton_failure():  # the PyTorch path answered: nothing was compiled
                    raise RuntimeError(f'sm_{arch}, width {width}, {mode}: the Triton kernel '
                                       f'{triton_failure()}')
                for kernel in found:
                    if (arch, width, mode, kernel.hash) in seen:
                        continue
                    seen.add((arch, width, mode, kernel.hash))
                    types = sorted({t[1:] for t in kernel.src.signature.values()
                                    if t.startswith('*')})
                    done.append(Compiled(
                        kernel.name, arch, mode, width, ' '.join(types),
                        kernel.metadata.num_warps, kernel.metadata.shared,
                        cubin_bytes=len(kernel.asm['cubin']),
                        **ptxas_report(kernel.asm['ptx'], arch)))
    return done


def compiled_table(found: Sequence[Compiled]) -> str:
    """Per kernel and architecture: the largest resources over widths and modes."""
    rows = {}
    for c in found:
        row = rows.setdefault((c.kernel, c.arch), dict(variants=0, registers=0, spill=0,
                                                       stack=0, shared=0, warps=set()))
        row['variants'] += 1
        row['registers'] = max(row['registers'], c.registers)
        row['spill'] = max(row['spill'], c.spill_bytes)
        row['stack'] = max(row['stack'], c.stack_bytes)
        row['shared'] = max(row['shared'], c.shared)
        row['warps'].add(c.num_warps)
    lines = ['| kernel | sm | variants | registers (max) | spill bytes (max) | stack bytes | '
             'shared KiB (max) | warps |', '|---|---|---|---|---|---|---|---|']
    for (kernel, arch), row in sorted(rows.items()):
        warps = '/'.join(map(str, sorted(row['warps'])))
        lines.append(f'| `{kernel}` | {arch} | {row["variants"]} | {row["registers"]} | '
                     f'{row["spill"]} | {row["stack"]} | {row["shared"] / 1024:.1f} | {warps} |')
    return '\n'.join(lines)


def ints(text: str) -> list:
    return [int(v) for v in text.split(',')]


def main() -> int:
    # the kernels must be decorated for the compiler, not for the interpreter (mmvit5 is
    # imported by the functions below, after this)
    os.environ.pop('TRITON_INTERPRET', None)
    parser = argparse.ArgumentParser(
        prog='python -m benchmarks.kernel_compile',
        description="Compile mmvit5's Triton kernels for CUDA GPUs here, with or without a "
        'GPU, and report their registers, spills and shared memory; exit 1 when a kernel '
        'spills registers or needs more shared memory than its GPU has.')
    parser.add_argument('--archs', type=ints, default=[80, 90],
                        help='CUDA compute capabilities x 10 (an unknown one is refused with '
                        'the list)')
    parser.add_argument('--widths', type=ints, default=[384, 768, 1024],
                        help='ViT5 embed_dim (ViT5-S/B/L), 64-wide heads')
    parser.add_argument('--modes', help='comma list of float32, bf16 autocast, fp16 '
                        'autocast, bfloat16 (default: all)')
    parser.add_argument('--json', help='write every compiled kernel here')
    args = parser.parse_args()
    from .results import machine, write_results
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
        print(f'[kernel_compile] {c.kernel} on sm_{c.arch} ({c.mode}, width {c.width}): '
              f'{c.spill_bytes} bytes spilled, {c.shared} bytes shared of '
              f'{SHARED_LIMIT[c.arch]}', file=sys.stderr)
    if args.json:
        import triton
        archs = ', '.join(f'sm_{a}' for a in args.archs)
        write_results(args.json, dict(machine=machine(), note=f'compiled for {archs}, not run: '
                                      f'Triton {triton.__version__} and its ptxas'),
                      'python -m benchmarks.kernel_compile ' + ' '.join(sys.argv[1:]),
                      kernels=[c._asdict() for c in found])
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())
