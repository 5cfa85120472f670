"""Triton kernels of :mod:`.qk_norm_rope_op`: one forward launch, one backward launch.

Imported only where ``triton`` imports. Every program takes ``BLOCK_M`` (token, head) rows of
q and of k; a row is one head's ``head_dim`` channels, which the norm reduces over and the
rotation pairs up (interleaved pairs: channels 2j, 2j + 1 rotate by the table's pair j).
"""
from typing import Optional, Tuple

import torch
import triton
import triton.language as tl
from torch.library import triton_op, wrap_triton

from ..plan import compute_dtype


@triton.jit
def _cast(x, dtype: tl.constexpr, INTERPRET: tl.constexpr):
    """``x.to(dtype)``. Triton's interpreter (3.8) truncates float32 -> bfloat16 where the
    GPU rounds to nearest even; there the rounding is done by hand, so that CI checks the
    roundings the GPU makes. Two operands per ``and``: Triton < 3.4 refuses a chain."""
    if INTERPRET and (dtype == tl.bfloat16 and x.dtype == tl.float32):
        bits = x.to(tl.uint32, bitcast=True)
        bits = bits + 0x7FFF + ((bits >> 16) & 1)
        return (bits >> 16).to(tl.uint16).to(tl.bfloat16, bitcast=True)
    return x.to(dtype)


@triton.jit
def _mul(a, b, INTERPRET: tl.constexpr):
    """``a * b``. Triton's interpreter (3.8) multiplies two bfloat16 tensors wrongly; there
    the product is made in float32 (exact for two half-precision values) and rounded once,
    as the GPU rounds it."""
    if INTERPRET:
        dtype = (tl.zeros((1, ), a.dtype) * tl.zeros((1, ), b.dtype)).dtype
        wide = tl.float64 if dtype == tl.float64 else tl.float32
        out = _cast(a.to(wide) * b.to(wide), dtype, INTERPRET)
    else:
        out = a * b
    return out


@triton.jit
def _rotate(x, rope_ptr, t, cols, mask, D: tl.constexpr, INVERSE: tl.constexpr,
            BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr):
    """Rotate the rows ``x`` (BLOCK_M, BLOCK_D) of tokens ``t`` by the (cos, sin) table
    (T, D / 2, 2); ``INVERSE`` by the opposite angles (the transpose: RoPE's backward)."""
    # the table's row t is (cos, sin) interleaved exactly as x's channel pairs: one load
    table = tl.load(rope_ptr + t[:, None] * D + cols[None, :], mask=mask, other=0.)
    cos, sin = tl.split(tl.reshape(table, (BLOCK_M, BLOCK_D // 2, 2)))
    if INVERSE:
        sin = -sin
    x0, x1 = tl.split(tl.reshape(x, (BLOCK_M, BLOCK_D // 2, 2)))
    return tl.reshape(tl.join(x0 * cos - x1 * sin, x1 * cos + x0 * sin), (BLOCK_M, BLOCK_D))


@triton.jit
def _norm_rope_rows(qkv_ptr, w_ptr, rope_ptr, out_ptr, rstd_ptr, src, dst, stat, t, cols,
                    mask, row_ok, eps, D: tl.constexpr, HAS_ROPE: tl.constexpr,
                    BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr, INTERPRET: tl.constexpr):
    """RMSNorm then RoPE of q (or k) rows at ``src`` of qkv, written at ``dst``, 1/rms at
    ``stat``. Rounded as the PyTorch path: normalised value to x's dtype before the weight,
    the product in (x dtype, weight dtype)'s promotion, rotation in the compute dtype."""
    x = tl.load(qkv_ptr + src[:, None] + cols[None, :], mask=mask, other=0.)
    xf = x.to(rstd_ptr.dtype.element_ty)  # float32, float64 for float64
    rstd = tl.math.rsqrt(tl.sum(xf * xf, axis=1) / D + eps)
    w = tl.load(w_ptr + cols, mask=cols < D, other=0.)
    y = _mul(_cast(xf * rstd[:, None], x.dtype, INTERPRET), w[None, :], INTERPRET)
    if HAS_ROPE:
        y = _cast(_rotate(y.to(xf.dtype), rope_ptr, t, cols, mask, D, False, BLOCK_M, BLOCK_D),
                  y.dtype, INTERPRET)
    tl.store(out_ptr + dst[:, None] + cols[None, :],
             _cast(y, out_ptr.dtype.element_ty, INTERPRET), mask=mask)
    tl.store(rstd_ptr + stat, rstd, mask=row_ok)


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
    _norm_rope_rows(qkv_ptr, qw_ptr, rope_ptr, q_ptr, rstd_ptr, src, m * D, stat, t, cols,
                    mask, row_ok, eps, D, HAS_ROPE, BLOCK_M, BLOCK_D, INTERPRET)
    _norm_rope_rows(qkv_ptr, kw_ptr, rope_ptr, k_ptr, rstd_ptr, src + H * D, m * D, stat + H,
                    t, cols, mask, row_ok, eps, D, HAS_ROPE, BLOCK_M, BLOCK_D, INTERPRET)


@triton.jit
def _norm_rope_rows_backward(qkv_ptr, rstd_ptr, w_ptr, rope_ptr, g_ptr, dqkv_ptr, src, stat,
                             g_off, t, cols, mask, row_ok, D: tl.constexpr,
                             HAS_ROPE: tl.constexpr, HAS_GRAD: tl.constexpr,
                             BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr,
                             INTERPRET: tl.constexpr):
    """Gradient of :func:`_norm_rope_rows` for its input rows (written at ``src`` of d(qkv));
    returns these rows' share of the weight gradient (BLOCK_D, )."""
    if HAS_GRAD:
        x = tl.load(qkv_ptr + src[:, None] + cols[None, :], mask=mask, other=0.)
        rstd = tl.load(rstd_ptr + stat, mask=row_ok, other=0.)
        w = tl.load(w_ptr + cols, mask=cols < D, other=0.)
        normed = x.to(rstd.dtype) * rstd[:, None]  # recomputed, not saved
        normed_x = _cast(normed, x.dtype, INTERPRET)
        # the forward's product, before the rotation
        y_dtype = _mul(normed_x, w[None, :], INTERPRET).dtype
        g = _cast(tl.load(g_ptr + g_off, mask=mask, other=0.), y_dtype, INTERPRET)
        if HAS_ROPE:
            g = _cast(_rotate(g.to(rstd.dtype), rope_ptr, t, cols, mask, D, True, BLOCK_M,
                              BLOCK_D), y_dtype, INTERPRET)
        dw = tl.sum(_mul(g, normed_x, INTERPRET).to(rstd.dtype), axis=0)
        gn = _mul(g, w[None, :], INTERPRET).to(rstd.dtype)
        dx = rstd[:, None] * (gn - normed * (tl.sum(gn * normed, axis=1) / D)[:, None])
    else:
        dx = tl.zeros((BLOCK_M, BLOCK_D), dtype=rstd_ptr.dtype.element_ty)
        dw = tl.zeros((BLOCK_D, ), dtype=rstd_ptr.dtype.element_ty)
    tl.store(dqkv_ptr + src[:, None] + cols[None, :],
             _cast(dx, dqkv_ptr.dtype.element_ty, INTERPRET), mask=mask)
    return dw


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
    dw_q = _norm_rope_rows_backward(qkv_ptr, rstd_ptr, qw_ptr, rope_ptr, dq_ptr, dqkv_ptr, src,
                                    stat, dq_off, t, cols, mask, row_ok, D, HAS_ROPE, HAS_DQ,
                                    BLOCK_M, BLOCK_D, INTERPRET)
    dw_k = _norm_rope_rows_backward(qkv_ptr, rstd_ptr, kw_ptr, rope_ptr, dk_ptr, dqkv_ptr,
                                    src + H * D, stat + H, dk_off, t, cols, mask, row_ok, D,
                                    HAS_ROPE, HAS_DK, BLOCK_M, BLOCK_D, INTERPRET)
    tl.store(dw_ptr + pid * D + cols, dw_q, mask=cols < D)
    tl.store(dw_ptr + (tl.num_programs(0) + pid) * D + cols, dw_k, mask=cols < D)
    # v's gradient into its slot of d(qkv): the same pass, no stack or add afterwards
    dst = dqkv_ptr + src[:, None] + 2 * H * D + cols[None, :]
    if HAS_DV:
        dv_off = (b * dv_b + head * dv_h + t * dv_t)[:, None] + cols[None, :] * dv_d
        dv = tl.load(dv_ptr + dv_off, mask=mask, other=0.)
        tl.store(dst, _cast(dv, dqkv_ptr.dtype.element_ty, INTERPRET), mask=mask)
    else:
        tl.store(dst, tl.zeros((BLOCK_M, BLOCK_D), dtype=dqkv_ptr.dtype.element_ty), mask=mask)


# TRITON_INTERPRET=1 when the kernels were decorated: they run in Triton's interpreter
_INTERPRET = not isinstance(_qk_norm_rope_fwd_kernel, triton.runtime.JITFunction)


def _blocks(head_dim: int) -> Tuple[int, int]:
    """(BLOCK_M, BLOCK_D): a program holds about 2048 elements of q and as many of k."""
    block_d = triton.next_power_of_2(head_dim)
    return max(1, 2048 // block_d), block_d


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
    block_m, block_d = _blocks(D)
    wrap_triton(_qk_norm_rope_fwd_kernel)[(triton.cdiv(rows, block_m), )](
        qkv, q_weight, k_weight, qkv if rope is None else rope, q, k, rstd, rows, T, H, eps,
        D=D, HAS_ROPE=rope is not None, BLOCK_M=block_m, BLOCK_D=block_d,
        INTERPRET=_INTERPRET)
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
    block_m, block_d = _blocks(D)
    programs = triton.cdiv(rows, block_m)
    dqkv = torch.empty_like(qkv, memory_format=torch.contiguous_format)
    dw = rstd.new_empty((2, programs, D))
    wrap_triton(_qk_norm_rope_bwd_kernel)[(programs, )](
        qkv, rstd, q_weight, k_weight, qkv if rope is None else rope,
        qkv if dq is None else dq, qkv if dk is None else dk, qkv if dv is None else dv,
        dqkv, dw, rows, T, H, *_strides(dq), *_strides(dk), *_strides(dv), D=D,
        HAS_ROPE=rope is not None, HAS_DQ=dq is not None, HAS_DK=dk is not None,
        HAS_DV=dv is not None, BLOCK_M=block_m, BLOCK_D=block_d, INTERPRET=_INTERPRET)
    return dqkv, dw
