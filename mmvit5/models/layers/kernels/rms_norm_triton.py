"""Triton kernels of the token RMSNorm (:mod:`.rms_norm`): one launch forward, one
backward plus the reduction of the weight-gradient shares.

Why: on the GPU a block's two RMSNorms are four of its launches at best (ATen's fused
forward, its backward and a reduction), and where ATen has no fused kernel (older torch,
mixed dtypes) a dozen elementwise ones. These kernels are the row code of QK-Norm
(:mod:`.triton_helpers`) without the rotation, over rows of ``C`` channels: the same
roundings as the PyTorch path, and one place to get them right.

Imported only where ``triton`` imports.
"""
from typing import Optional, Tuple

import torch
import triton
import triton.language as tl
from torch.library import triton_op, wrap_triton

from .dispatch import compute_dtype
from .triton_helpers import INTERPRET, norm_rope_rows, norm_rope_rows_backward, row_blocks

# backward programs: each loops over its share of the rows and writes one weight-gradient
# share, so the reduction afterwards reads (programs, C), not (rows / BLOCK_M, C)
_MAX_BACKWARD_PROGRAMS = 512


@triton.jit
def _rows(block, rows, D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr):
    """Rows of row-block ``block``, its channels, masks and where each row starts."""
    m = block * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_D)
    row_ok = m < rows
    mask = row_ok[:, None] & (cols < D)[None, :]
    m = m.to(tl.int64)
    return m, cols, row_ok, mask, m * D


@triton.jit
def _rms_norm_fwd_kernel(x_ptr, w_ptr, out_ptr, rstd_ptr, rows, eps, D: tl.constexpr,
                         BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr,
                         INTERPRET: tl.constexpr):
    m, cols, row_ok, mask, start = _rows(tl.program_id(0), rows, D, BLOCK_M, BLOCK_D)
    norm_rope_rows(x_ptr, w_ptr, x_ptr, out_ptr, rstd_ptr, start, start, m, m, cols, mask,
                    row_ok, eps, D, False, BLOCK_M, BLOCK_D, INTERPRET)


@triton.jit
def _rms_norm_bwd_kernel(x_ptr, rstd_ptr, w_ptr, g_ptr, dx_ptr, dw_ptr, rows, blocks_per_program,
                         D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr,
                         INTERPRET: tl.constexpr):
    pid = tl.program_id(0)
    dw = tl.zeros((BLOCK_D, ), dtype=rstd_ptr.dtype.element_ty)
    for i in range(blocks_per_program):
        m, cols, row_ok, mask, start = _rows(pid * blocks_per_program + i, rows, D, BLOCK_M,
                                             BLOCK_D)
        g_off = start[:, None] + cols[None, :]
        dw += norm_rope_rows_backward(x_ptr, rstd_ptr, w_ptr, x_ptr, g_ptr, dx_ptr, start, m,
                                       g_off, m, cols, mask, row_ok, D, False, True, BLOCK_M,
                                       BLOCK_D, INTERPRET)
    cols = tl.arange(0, BLOCK_D)
    tl.store(dw_ptr + pid * D + cols, dw, mask=cols < D)


@triton_op('mmvit5::rms_norm_fwd_triton', mutates_args=())
def rms_norm_fwd(x: torch.Tensor, weight: torch.Tensor, eps: float,
                 out_dtype: Optional[torch.dtype]) -> Tuple[torch.Tensor, torch.Tensor]:
    """RMSNorm of contiguous ``x`` (..., C) -> out (..., C) in ``out_dtype`` (None: the
    promotion of ``x``'s and ``weight``'s dtypes), and 1/rms (..., 1) in the compute dtype."""
    D = x.shape[-1]
    rows = x.numel() // D
    out = x.new_empty(x.shape, dtype=out_dtype or torch.promote_types(x.dtype, weight.dtype))
    rstd = x.new_empty((*x.shape[:-1], 1), dtype=compute_dtype(x.dtype))
    block_m, block_d = row_blocks(D)
    wrap_triton(_rms_norm_fwd_kernel)[(triton.cdiv(rows, block_m), )](
        x, weight, out, rstd, rows, eps, D=D, BLOCK_M=block_m, BLOCK_D=block_d,
        INTERPRET=INTERPRET)
    return out, rstd


@triton_op('mmvit5::rms_norm_bwd_triton', mutates_args=())
def rms_norm_bwd(grad: torch.Tensor, x: torch.Tensor, rstd: torch.Tensor,
                 weight: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """d(x) (..., C) and the weight-gradient shares (programs, C) (sum them over dim 0) from
    the contiguous output gradient ``grad`` (..., C)."""
    D = x.shape[-1]
    rows = x.numel() // D
    block_m, block_d = row_blocks(D)
    blocks = triton.cdiv(rows, block_m)
    per_program = triton.cdiv(blocks, _MAX_BACKWARD_PROGRAMS)
    programs = triton.cdiv(blocks, per_program)
    dx = torch.empty_like(x)
    dw = rstd.new_empty((programs, D))
    wrap_triton(_rms_norm_bwd_kernel)[(programs, )](
        x, rstd, weight, grad, dx, dw, rows, per_program, D=D, BLOCK_M=block_m,
        BLOCK_D=block_d, INTERPRET=INTERPRET)
    return dx, dw
