"""What the Triton kernels of the fused ops share: the interpreter switch, the program-size
policy, the roundings and the row code of RMSNorm (+ RoPE).

Imported only where ``triton`` imports. The row code is QK-Norm's (:mod:`.qk_norm_rope_triton`):
RMSNorm of ``BLOCK_M`` rows of ``D`` channels, then, for q and k, the rotation of interleaved
channel pairs (2j, 2j + 1 by the table's pair j). The token RMSNorm
(:mod:`.rms_norm_triton`) runs it without the rotation, and LayerScale's backward
(:mod:`.layer_scale_triton`) rounds with :func:`cast` and :func:`mul`: one place to get the
roundings right.
"""
from typing import Tuple

import triton
import triton.language as tl

# elements of one operand that a program of a row kernel holds (q and k: half of it each)
ROW_BLOCK_ELEMENTS = 4096


def row_blocks(width: int, operands: int = 1) -> Tuple[int, int]:
    """(BLOCK_M, BLOCK_D) of a row kernel over rows ``width`` wide: BLOCK_D the power of two
    that holds a row; BLOCK_M rows so that a program holds about
    :data:`ROW_BLOCK_ELEMENTS` elements over its ``operands`` (q and k: 2)."""
    block_d = triton.next_power_of_2(width)
    return max(1, ROW_BLOCK_ELEMENTS // operands // block_d), block_d


@triton.jit
def cast(x, dtype: tl.constexpr, INTERPRET: tl.constexpr):
    """``x.to(dtype)``. Triton's interpreter (3.8) truncates float32 -> bfloat16 where the
    GPU rounds to nearest even; there the rounding is done by hand, so that CI checks the
    roundings the GPU makes. Two operands per ``and``: Triton < 3.4 refuses a chain."""
    if INTERPRET and (dtype == tl.bfloat16 and x.dtype == tl.float32):
        bits = x.to(tl.uint32, bitcast=True)
        bits = bits + 0x7FFF + ((bits >> 16) & 1)
        return (bits >> 16).to(tl.uint16).to(tl.bfloat16, bitcast=True)
    return x.to(dtype)


@triton.jit
def mul(a, b, INTERPRET: tl.constexpr):
    """``a * b``. Triton's interpreter (3.8) multiplies two bfloat16 tensors wrongly; there
    the product is made in float32 (exact for two half-precision values) and rounded once,
    as the GPU rounds it."""
    if INTERPRET:
        dtype = (tl.zeros((1, ), a.dtype) * tl.zeros((1, ), b.dtype)).dtype
        wide = tl.float64 if dtype == tl.float64 else tl.float32
        out = cast(a.to(wide) * b.to(wide), dtype, INTERPRET)
    else:
        out = a * b
    return out


@triton.jit
def rotate(x, rope_ptr, t, cols, mask, D: tl.constexpr, INVERSE: tl.constexpr,
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
def norm_rope_rows(qkv_ptr, w_ptr, rope_ptr, out_ptr, rstd_ptr, src, dst, stat, t, cols,
                    mask, row_ok, eps, D: tl.constexpr, HAS_ROPE: tl.constexpr,
                    BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr, INTERPRET: tl.constexpr):
    """RMSNorm then RoPE of q (or k) rows at ``src`` of qkv, written at ``dst``, 1/rms at
    ``stat``. Rounded as the PyTorch path: normalised value to x's dtype before the weight,
    the product in (x dtype, weight dtype)'s promotion, rotation in the compute dtype."""
    x = tl.load(qkv_ptr + src[:, None] + cols[None, :], mask=mask, other=0.)
    xf = x.to(rstd_ptr.dtype.element_ty)  # float32, float64 for float64
    rstd = tl.math.rsqrt(tl.sum(xf * xf, axis=1) / D + eps)
    w = tl.load(w_ptr + cols, mask=cols < D, other=0.)
    y = mul(cast(xf * rstd[:, None], x.dtype, INTERPRET), w[None, :], INTERPRET)
    if HAS_ROPE:
        y = cast(rotate(y.to(xf.dtype), rope_ptr, t, cols, mask, D, False, BLOCK_M, BLOCK_D),
                  y.dtype, INTERPRET)
    tl.store(out_ptr + dst[:, None] + cols[None, :],
             cast(y, out_ptr.dtype.element_ty, INTERPRET), mask=mask)
    tl.store(rstd_ptr + stat, rstd, mask=row_ok)


@triton.jit
def norm_rope_rows_backward(qkv_ptr, rstd_ptr, w_ptr, rope_ptr, g_ptr, dqkv_ptr, src, stat,
                             g_off, t, cols, mask, row_ok, D: tl.constexpr,
                             HAS_ROPE: tl.constexpr, HAS_GRAD: tl.constexpr,
                             BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr,
                             INTERPRET: tl.constexpr):
    """Gradient of :func:`norm_rope_rows` for its input rows (written at ``src`` of d(qkv));
    returns these rows' share of the weight gradient (BLOCK_D, )."""
    if HAS_GRAD:
        x = tl.load(qkv_ptr + src[:, None] + cols[None, :], mask=mask, other=0.)
        rstd = tl.load(rstd_ptr + stat, mask=row_ok, other=0.)
        w = tl.load(w_ptr + cols, mask=cols < D, other=0.)
        normed = x.to(rstd.dtype) * rstd[:, None]  # recomputed, not saved
        normed_x = cast(normed, x.dtype, INTERPRET)
        # the forward's product, before the rotation
        y_dtype = mul(normed_x, w[None, :], INTERPRET).dtype
        g = cast(tl.load(g_ptr + g_off, mask=mask, other=0.), y_dtype, INTERPRET)
        if HAS_ROPE:
            g = cast(rotate(g.to(rstd.dtype), rope_ptr, t, cols, mask, D, True, BLOCK_M,
                              BLOCK_D), y_dtype, INTERPRET)
        dw = tl.sum(mul(g, normed_x, INTERPRET).to(rstd.dtype), axis=0)
        gn = mul(g, w[None, :], INTERPRET).to(rstd.dtype)
        dx = rstd[:, None] * (gn - normed * (tl.sum(gn * normed, axis=1) / D)[:, None])
    else:
        dx = tl.zeros((BLOCK_M, BLOCK_D), dtype=rstd_ptr.dtype.element_ty)
        dw = tl.zeros((BLOCK_D, ), dtype=rstd_ptr.dtype.element_ty)
    tl.store(dqkv_ptr + src[:, None] + cols[None, :],
             cast(dx, dqkv_ptr.dtype.element_ty, INTERPRET), mask=mask)
    return dw


# TRITON_INTERPRET=1 when the kernels were decorated: then they run in Triton's interpreter,
# also on the CPU (how CI checks them), and the roundings above are made by hand. Read once,
# here: the kernels take it as their INTERPRET argument, and dispatch.triton_enabled asks it.
INTERPRET = not isinstance(cast, triton.runtime.JITFunction)
