"""Triton kernels of :mod:`.qk_norm_rope`: one forward launch, one backward launch.

Imported only where ``triton`` imports. Every program takes ``BLOCK_M`` (token, head) rows of
q and of k; a row is one head's ``head_dim`` channels, which the norm reduces over and the
rotation pairs up (the row code of :mod:`.triton_helpers`).
"""
from typing import Optional, Tuple

import torch
import triton
import triton.language as tl
from torch.library import triton_op, wrap_triton

from .dispatch import compute_dtype
from .triton_helpers import INTERPRET, cast, norm_rope_rows, norm_rope_rows_backward, row_blocks


@triton.jit
def _program_rows(rows, H, D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr):
    """This program's (token, head) rows (token-major), channels and masks; where q of a row
    starts in (B, T, 3, H, D) and where its 1/rms is in (B, T, 2, H)."""
    m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_D)
    row_ok = m < rows
    mask = row_ok[:, None] & (cols < D)[None, :]
    m = m.to(tl.int64)
    token = m // H
    head = m % H
    return m, cols, row_ok, mask, token, head, token * (3 * H * D) + head * D, \
        token * (2 * H) + head


@triton.jit
def _qk_norm_rope_fwd_kernel(qkv_ptr, qw_ptr, kw_ptr, rope_ptr, q_ptr, k_ptr, rstd_ptr, rows,
                             T, H, eps, D: tl.constexpr, HAS_ROPE: tl.constexpr,
                             BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr,
                             INTERPRET: tl.constexpr):
    m, cols, row_ok, mask, token, head, src, stat = _program_rows(rows, H, D, BLOCK_M, BLOCK_D)
    t = token % T
    norm_rope_rows(qkv_ptr, qw_ptr, rope_ptr, q_ptr, rstd_ptr, src, m * D, stat, t, cols,
                    mask, row_ok, eps, D, HAS_ROPE, BLOCK_M, BLOCK_D, INTERPRET)
    norm_rope_rows(qkv_ptr, kw_ptr, rope_ptr, k_ptr, rstd_ptr, src + H * D, m * D, stat + H,
                    t, cols, mask, row_ok, eps, D, HAS_ROPE, BLOCK_M, BLOCK_D, INTERPRET)


@triton.jit
def _qk_norm_rope_bwd_kernel(qkv_ptr, rstd_ptr, qw_ptr, kw_ptr, rope_ptr, dq_ptr, dk_ptr,
                             dv_ptr, dqkv_ptr, dw_ptr, rows, T, H, dq_b, dq_h, dq_t, dq_d, dk_b,
                             dk_h, dk_t, dk_d, dv_b, dv_h, dv_t, dv_d, D: tl.constexpr,
                             HAS_ROPE: tl.constexpr, HAS_DQ: tl.constexpr,
                             HAS_DK: tl.constexpr, HAS_DV: tl.constexpr,
                             BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr,
                             INTERPRET: tl.constexpr):
    pid = tl.program_id(0)
    _, cols, row_ok, mask, token, head, src, stat = _program_rows(rows, H, D, BLOCK_M, BLOCK_D)
    b = token // T
    t = token % T
    # the gradients of the (B, H, T, D) outputs come in whatever strides attention made
    dq_off = (b * dq_b + head * dq_h + t * dq_t)[:, None] + cols[None, :] * dq_d
    dk_off = (b * dk_b + head * dk_h + t * dk_t)[:, None] + cols[None, :] * dk_d
    # d(weight) shares: (2, programs, D)
    dw_q = norm_rope_rows_backward(qkv_ptr, rstd_ptr, qw_ptr, rope_ptr, dq_ptr, dqkv_ptr, src,
                                    stat, dq_off, t, cols, mask, row_ok, D, HAS_ROPE, HAS_DQ,
                                    BLOCK_M, BLOCK_D, INTERPRET)
    dw_k = norm_rope_rows_backward(qkv_ptr, rstd_ptr, kw_ptr, rope_ptr, dk_ptr, dqkv_ptr,
                                    src + H * D, stat + H, dk_off, t, cols, mask, row_ok, D,
                                    HAS_ROPE, HAS_DK, BLOCK_M, BLOCK_D, INTERPRET)
    tl.store(dw_ptr + pid * D + cols, dw_q, mask=cols < D)
    tl.store(dw_ptr + (tl.num_programs(0) + pid) * D + cols, dw_k, mask=cols < D)
    # v's gradient into its slot of d(qkv): the same pass, no stack or add afterwards
    dst = dqkv_ptr + src[:, None] + 2 * H * D + cols[None, :]
    if HAS_DV:
        dv_off = (b * dv_b + head * dv_h + t * dv_t)[:, None] + cols[None, :] * dv_d
        dv = tl.load(dv_ptr + dv_off, mask=mask, other=0.)
        tl.store(dst, cast(dv, dqkv_ptr.dtype.element_ty, INTERPRET), mask=mask)
    else:
        tl.store(dst, tl.zeros((BLOCK_M, BLOCK_D), dtype=dqkv_ptr.dtype.element_ty), mask=mask)


@triton_op('mmvit5::qk_norm_rope_fwd_triton', mutates_args=())
def qk_norm_rope_fwd(qkv: torch.Tensor, q_weight: torch.Tensor, k_weight: torch.Tensor,
                     rope: Optional[torch.Tensor], eps: float,
                     out_dtype: torch.dtype) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """q, k (B, T, H, D) in ``out_dtype`` and 1/rms (B, T, 2, H) from qkv (B, T, 3, H, D)."""
    B, T, _, H, D = qkv.shape
    q = qkv.new_empty((B, T, H, D), dtype=out_dtype)
    k = torch.empty_like(q)
    rstd = qkv.new_empty((B, T, 2, H), dtype=compute_dtype(qkv.dtype))
    rows = B * T * H
    block_m, block_d = row_blocks(D, operands=2)
    wrap_triton(_qk_norm_rope_fwd_kernel)[(triton.cdiv(rows, block_m), )](
        qkv, q_weight, k_weight, qkv if rope is None else rope, q, k, rstd, rows, T, H, eps,
        D=D, HAS_ROPE=rope is not None, BLOCK_M=block_m, BLOCK_D=block_d,
        INTERPRET=INTERPRET)
    return q, k, rstd


def _strides(g: Optional[torch.Tensor]) -> Tuple[int, ...]:
    return (0, 0, 0, 0) if g is None else g.stride()


@triton_op('mmvit5::qk_norm_rope_bwd_triton', mutates_args=())
def qk_norm_rope_bwd(qkv: torch.Tensor, rstd: torch.Tensor, q_weight: torch.Tensor,
                     k_weight: torch.Tensor, rope: Optional[torch.Tensor],
                     dq: Optional[torch.Tensor], dk: Optional[torch.Tensor],
                     dv: Optional[torch.Tensor]) -> Tuple[torch.Tensor, torch.Tensor]:
    """d(qkv) (B, T, 3, H, D) and the weight-gradient shares (2, programs, D) (sum them over
    dim 1) from the gradients of q, k, v (B, H, T, D), any strides, None for zero."""
    B, T, _, H, D = qkv.shape
    rows = B * T * H
    block_m, block_d = row_blocks(D, operands=2)
    programs = triton.cdiv(rows, block_m)
    dqkv = torch.empty_like(qkv, memory_format=torch.contiguous_format)
    dw = rstd.new_empty((2, programs, D))
    wrap_triton(_qk_norm_rope_bwd_kernel)[(programs, )](
        qkv, rstd, q_weight, k_weight, qkv if rope is None else rope,
        qkv if dq is None else dq, qkv if dk is None else dk, qkv if dv is None else dv,
        dqkv, dw, rows, T, H, *_strides(dq), *_strides(dk), *_strides(dv), D=D,
        HAS_ROPE=rope is not None, HAS_DQ=dq is not None, HAS_DK=dk is not None,
        HAS_DV=dv is not None, BLOCK_M=block_m, BLOCK_D=block_d, INTERPRET=INTERPRET)
    return dqkv, dw
