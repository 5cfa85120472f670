"""Triton kernel of LayerScale's backward (:mod:`.layer_scale`): the gradients of the
weight, the bias and the scale in one launch.

Why: after the product ``A = G^T x`` that any linear layer's backward makes, the folded
LayerScale needs ``d scale = sum_in(A * W) + b * sum_rows(G)``, ``d W = A * scale`` and
``d b = sum_rows(G) * scale``: seven small elementwise and reduction kernels per residual
branch in PyTorch, one here. Each program owns ``BLOCK_O`` output rows and walks their
input columns once, reading ``A`` and ``W`` and writing ``d W``.

Imported only where ``triton`` imports.
"""
from typing import Optional, Tuple

import torch
import triton
import triton.language as tl
from torch.library import triton_op, wrap_triton

from .triton_helpers import INTERPRET, cast, mul


@triton.jit
def _layer_scale_grads_kernel(outer_ptr, w_ptr, scale_ptr, summed_ptr, b_ptr, dw_ptr, ds_ptr,
                              db_ptr, n_out, n_in, HAS_BIAS: tl.constexpr,
                              BLOCK_O: tl.constexpr, BLOCK_I: tl.constexpr,
                              INTERPRET: tl.constexpr):
    o = tl.program_id(0) * BLOCK_O + tl.arange(0, BLOCK_O)
    o_ok = o < n_out
    scale = tl.load(scale_ptr + o, mask=o_ok, other=0.)
    # d scale sums n_in products: float32 whatever the parameters' dtype
    acc = tl.zeros((BLOCK_O, ), dtype=tl.float32)
    row = o.to(tl.int64)[:, None] * n_in
    for start in range(0, n_in, BLOCK_I):
        i = start + tl.arange(0, BLOCK_I)
        mask = o_ok[:, None] & (i < n_in)[None, :]
        # A in the weight's dtype, as the PyTorch path casts it before use
        a = cast(tl.load(outer_ptr + row + i[None, :], mask=mask, other=0.),
                  dw_ptr.dtype.element_ty, INTERPRET)
        w = tl.load(w_ptr + row + i[None, :], mask=mask, other=0.)
        acc += tl.sum(a.to(tl.float32) * w.to(tl.float32), axis=1)
        tl.store(dw_ptr + row + i[None, :], mul(a, scale[:, None], INTERPRET), mask=mask)
    if HAS_BIAS:
        summed = cast(tl.load(summed_ptr + o, mask=o_ok, other=0.), db_ptr.dtype.element_ty,
                       INTERPRET)
        bias = tl.load(b_ptr + o, mask=o_ok, other=0.)
        tl.store(db_ptr + o, mul(summed, scale, INTERPRET), mask=o_ok)
        acc += summed.to(tl.float32) * bias.to(tl.float32)
    tl.store(ds_ptr + o, acc.to(ds_ptr.dtype.element_ty), mask=o_ok)


@triton_op('mmvit5::layer_scale_grads_triton', mutates_args=())
def layer_scale_grads(outer: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor,
                      summed: Optional[torch.Tensor], bias: Optional[torch.Tensor]
                      ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """d W (out, in), d scale (out, ) and d b (out, ) (empty without ``bias``: an operator
    returns no None) of
    ``scale * linear(x)``.

    Args:
        outer (Tensor): (out, in) ``G^T x``, contiguous, any float dtype.
        weight (Tensor): (out, in) contiguous; scale (Tensor): (out, ).
        summed (Tensor | None): (out, ) ``G`` summed over rows, with ``bias``.
        bias (Tensor | None): (out, ).
    """
    n_out, n_in = weight.shape
    grad_w = torch.empty_like(weight)
    grad_s = torch.empty_like(scale)
    grad_b = scale.new_empty(0) if bias is None else torch.empty_like(bias)
    block_o = 16
    # a 16 x 256 tile at 4 warps spills registers on sm_90 with half-precision A
    # (python -m benchmarks.kernel_compile); at 8 warps none do
    wrap_triton(_layer_scale_grads_kernel)[(triton.cdiv(n_out, block_o), )](
        outer, weight, scale, outer if summed is None else summed,
        weight if bias is None else bias, grad_w, grad_s, grad_b,
        n_out, n_in, HAS_BIAS=bias is not None, BLOCK_O=block_o,
        BLOCK_I=min(256, triton.next_power_of_2(n_in)), INTERPRET=INTERPRET, num_warps=8)
    return grad_w, grad_s, grad_b
