"""FLOPs of a forward (fvcore plus an SDPA handle) and the rates derived from them."""
import math
import warnings
from typing import Callable, Optional, Tuple

import torch
import torch.nn as nn

from .core import Row, Setup


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


def with_flops(row: Row, flops_per_image: Optional[float], setup: Setup) -> Row:
    """Add GFLOPs per image, achieved GFLOP/s and the share of the matmul rate."""
    if row.status != 'ok' or flops_per_image is None:
        return row
    factor = 3.0 if row.mode.startswith('train') else 1.0
    row.gflops = factor * flops_per_image / 1e9
    row.gflop_s = row.gflops * row.batch / (row.latency_ms / 1e3)
    row.pct_matmul = 100.0 * row.gflop_s / setup.matmul_gflop_s
    return row
