"""FLOPs and CPU peak memory of a step: shared by tools/benchmark.py and tools/dry_run.py.

* FLOPs: fvcore's ``FlopCountAnalysis`` (mmengine's ``FlopAnalyzer`` when fvcore is missing)
  with a handle for ``scaled_dot_product_attention`` that neither ships; one per multiply-add,
  doubled here so the count is on the matmul's scale (2 N^3 for N x N times N x N).
  Elementwise ops are not counted.
* CPU peak memory: PyTorch keeps no CPU allocator statistics and RSS hides reuse of freed
  pages, so a step runs under ``torch.profiler`` with ``profile_memory=True`` and the highest
  point of the running sum of its allocation/free events is taken.
"""
import contextlib
import math
import os
import sys
import warnings
from typing import Callable, Iterable, Tuple

import torch
import torch.nn as nn


def tensor_bytes(tensors: Iterable[torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


@contextlib.contextmanager
def native_stderr_silenced():
    """Point fd 2 at /dev/null: kineto writes banner lines there that no env var turns off."""
    sys.stderr.flush()
    saved = os.dup(2)
    with open(os.devnull, 'w') as null:
        os.dup2(null.fileno(), 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def cpu_step_peak_bytes(step: Callable[[], None]) -> int:
    """Highest live CPU tensor bytes above the starting point during one ``step``."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile
    with native_stderr_silenced(), profile(activities=[ProfilerActivity.CPU],
                                           profile_memory=True) as prof:
        step()
    # allocator events in time order; the running sum is the live-bytes curve
    events = sorted((e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events()
                    if e.name() == '[memory]' and e.device_type() == DeviceType.CPU)
    live = peak = 0
    for _, nbytes in events:
        live += nbytes
        peak = max(peak, live)
    return peak


def flop_analyzer() -> Tuple[type, Callable]:
    """fvcore's analyzer and shape helper, or mmengine's port of them."""
    try:
        from fvcore.nn import FlopCountAnalysis
        from fvcore.nn.jit_handles import get_shape
        return FlopCountAnalysis, get_shape
    except ImportError:
        from mmengine.analysis import FlopAnalyzer
        from mmengine.analysis.jit_handles import get_shape
        return FlopAnalyzer, get_shape


def count_flops(model: nn.Module, x: torch.Tensor) -> float:
    """FLOPs (2 x multiply-adds) of one forward of ``model`` on ``x``."""
    # importing fvcore and tracing warn about torch.jit's deprecation and every
    # data-dependent branch; neither changes the count
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter('ignore')
        analyzer, get_shape = flop_analyzer()

        def sdpa_macs(inputs, outputs) -> int:
            q, k, v = (get_shape(t) for t in inputs[:3])
            # q @ k^T then attn @ v: every (query, key) pair costs E + Ev multiply-adds
            return math.prod(q[:-1]) * k[-2] * (q[-1] + v[-1])

        model.eval()
        analysis = analyzer(model, (x, )).set_op_handle('aten::scaled_dot_product_attention',
                                                        sdpa_macs)
        analysis.unsupported_ops_warnings(False)
        analysis.uncalled_modules_warnings(False)
        analysis.tracer_warnings('none')
        return 2.0 * analysis.total()
