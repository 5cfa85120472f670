"""QK-Norm + 2D RoPE + attention layout as one fused op, forward and backward.

Why: on the GPU, ViT-5's block launched about twice the kernels of timm's ViT block, and the
chain from the ``qkv`` output to attention was most of the difference: unbind, RMSNorm of q
and of k (float32 statistics, casts), the rotation (complex views, casts), the cast to
autocast's dtype, and in backward the same again plus the stack that assembles d(qkv). Each
is a small elementwise kernel that reads and writes the whole (B, T, C) tensor.

:func:`qk_norm_rope` reads the packed ``qkv`` output (B, T, 3, H, D) once and writes q and k in
the layout attention wants, in one Triton kernel; backward is one Triton kernel that writes
all of d(qkv), v's slot included, plus one small reduction of the per-program weight-gradient
shares (deterministic: no atomics). q and k are (B, H, T, D) views of (B, T, H, D) tensors,
so the attention output is (B, T, H, D) in memory and the projection reads it as a view;
v is a view of ``qkv``.

Saved for backward: ``qkv`` (alive anyway: it is attention's v), 1/rms (B, T, 2, H) float32,
the two weights and the rotation table. Never the outputs: backward recomputes the
normalised value from ``qkv`` and 1/rms and rotates the gradient back (the inverse rotation
is the transpose).

Numerics are those of the unfused modules, ``apply_rope(rms_norm(x, w, eps)[0], rope)`` then
the cast to ``out_dtype``: statistics in float32 (float64 stays float64), the normalised
value rounded to x's dtype before the weight (as released), the rotation in float32, one
rounding to ``out_dtype`` at the end. The Triton kernels differ from the PyTorch path only in
the order of float32 sums and in ``rsqrt``'s last bit, which can flip a bfloat16 rounding of
the normalised value now and then (tests/test_kernels.py bounds it).

Where the plan does not run Triton, or a Triton kernel fails (:func:`.dispatch.run_kernel`),
the PyTorch path runs the same algorithm with the unfused functions (:mod:`.rms_norm`,
:mod:`..rope`); it is the model's one PyTorch implementation of QK-Norm + RoPE. Both are
registered operators (``torch.library``), so compiled graphs keep each as one call: the Triton
ones as ``triton_op``, whose kernels Inductor sees and schedules itself.
"""
from typing import Optional, Tuple

import torch
from torch.autograd.function import once_differentiable

from .dispatch import HAS_TRITON, compute_dtype, run_kernel
from .rms_norm import rms_norm, rms_norm_backward
from .rotate import apply_rope

if HAS_TRITON:
    from . import qk_norm_rope_triton


def _normed_dtype(qkv: torch.Tensor, weight: torch.Tensor) -> torch.dtype:
    """dtype of RMSNorm's output: the normalised value (x's dtype) times the weight."""
    return torch.promote_types(qkv.dtype, weight.dtype)


@torch.library.custom_op('mmvit5::qk_norm_rope_fwd', mutates_args=())
def qk_norm_rope_fwd(qkv: torch.Tensor, q_weight: torch.Tensor, k_weight: torch.Tensor,
                     rope: Optional[torch.Tensor], eps: float,
                     out_dtype: torch.dtype) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The PyTorch path's forward: q, k (B, T, H, D) in ``out_dtype``, 1/rms (B, T, 2, H)."""
    outs, stats = [], []
    for i, weight in enumerate((q_weight, k_weight)):
        out, rstd = rms_norm(qkv[:, :, i], weight, eps)
        if rope is not None:
            out = apply_rope(out, rope[:, None], complex_product=True)
        outs.append(out.to(out_dtype, memory_format=torch.contiguous_format))
        stats.append(rstd[..., 0])
    return outs[0], outs[1], torch.stack(stats, 2)


@qk_norm_rope_fwd.register_fake
def _(qkv, q_weight, k_weight, rope, eps, out_dtype):
    B, T, _, H, D = qkv.shape
    q = qkv.new_empty((B, T, H, D), dtype=out_dtype)
    return q, torch.empty_like(q), qkv.new_empty((B, T, 2, H), dtype=compute_dtype(qkv.dtype))


@torch.library.custom_op('mmvit5::qk_norm_rope_bwd', mutates_args=())
def qk_norm_rope_bwd(qkv: torch.Tensor, rstd: torch.Tensor, q_weight: torch.Tensor,
                     k_weight: torch.Tensor, rope: Optional[torch.Tensor],
                     dq: Optional[torch.Tensor], dk: Optional[torch.Tensor],
                     dv: Optional[torch.Tensor]) -> Tuple[torch.Tensor, torch.Tensor]:
    """The PyTorch path's backward: d(qkv) (B, T, 3, H, D) and the weight gradients as
    (2, 1, D), the layout of the Triton kernel's per-program shares."""
    grads, weight_grads = [], []
    for i, (grad, weight) in enumerate(((dq, q_weight), (dk, k_weight))):
        x = qkv[:, :, i]
        if grad is None:
            grads.append(torch.zeros_like(x))
            weight_grads.append(torch.zeros_like(weight))
            continue
        grad = grad.transpose(1, 2).to(_normed_dtype(qkv, weight))
        if grad.stride(-1) != 1:  # e.g. the expanded gradient of a sum: no complex view
            grad = grad.contiguous()
        if rope is not None:
            grad = apply_rope(grad, rope[:, None], inverse=True, complex_product=True)
        grad_x, grad_weight = rms_norm_backward(grad, x, rstd[:, :, i, :, None], weight)
        grads.append(grad_x)
        weight_grads.append(grad_weight)
    grads.append(torch.zeros_like(qkv[:, :, 2]) if dv is None else dv.transpose(1, 2))
    return torch.stack(grads, 2), torch.stack(weight_grads)[:, None]


@qk_norm_rope_bwd.register_fake
def _(qkv, rstd, q_weight, k_weight, rope, dq, dk, dv):
    return torch.empty_like(qkv, memory_format=torch.contiguous_format), \
        q_weight.new_empty((2, 1, q_weight.shape[0]))


class _QKNormRoPE(torch.autograd.Function):
    """Autograd of the pair of ops; a Function rather than ``register_autograd`` because v is
    returned as a view of ``qkv`` (an operator may not return views of its inputs) and its
    gradient still has to reach the backward kernel."""

    @staticmethod
    def forward(ctx, qkv: torch.Tensor, q_weight: torch.Tensor, k_weight: torch.Tensor,
                rope: Optional[torch.Tensor], eps: float, out_dtype: torch.dtype,
                use_triton: bool) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        args = (qkv, q_weight, k_weight, rope, eps, out_dtype)
        if use_triton:
            q, k, rstd = run_kernel('qk_norm_rope_fwd', qk_norm_rope_triton.qk_norm_rope_fwd,
                                    qk_norm_rope_fwd, *args)
        else:
            q, k, rstd = qk_norm_rope_fwd(*args)
        ctx.save_for_backward(qkv, rstd, q_weight, k_weight, rope)
        ctx.use_triton = use_triton
        ctx.set_materialize_grads(False)  # an unused output costs no zeros tensor
        return q.transpose(1, 2), k.transpose(1, 2), qkv[:, :, 2].transpose(1, 2)

    @staticmethod
    @once_differentiable
    def backward(ctx, dq: Optional[torch.Tensor], dk: Optional[torch.Tensor],
                 dv: Optional[torch.Tensor]):
        qkv, rstd, q_weight, k_weight, rope = ctx.saved_tensors
        args = (qkv, rstd, q_weight, k_weight, rope, dq, dk, dv)
        if ctx.use_triton:
            dqkv, dw = run_kernel('qk_norm_rope_bwd', qk_norm_rope_triton.qk_norm_rope_bwd,
                                  qk_norm_rope_bwd, *args)
        else:
            dqkv, dw = qk_norm_rope_bwd(*args)
        dw = dw.sum(1)  # the one reduction: per-program shares -> (2, D)
        return (dqkv, dw[0].to(q_weight.dtype), dw[1].to(k_weight.dtype), None, None, None,
                None)


def _check(qkv: torch.Tensor, q_weight: torch.Tensor, k_weight: torch.Tensor,
           rope: Optional[torch.Tensor]) -> None:
    if qkv.dim() != 5 or qkv.shape[2] != 3:
        raise ValueError(f'qkv must be (B, T, 3, heads, head_dim) (the qkv Linear output '
                         f'viewed), got shape {tuple(qkv.shape)}')
    if not qkv.is_contiguous():
        raise ValueError(f'qkv must be contiguous (a view of the qkv Linear output), got '
                         f'strides {qkv.stride()} for shape {tuple(qkv.shape)}')
    B, T, _, H, D = qkv.shape
    if D % 2:
        raise ValueError(f'head_dim must be even (RoPE rotates channel pairs), got {D}')
    for name, weight in (('q_weight', q_weight), ('k_weight', k_weight)):
        if weight.shape != (D, ):
            raise ValueError(f'{name} must be ({D}, ) (head_dim), got {tuple(weight.shape)}')
    if q_weight.dtype != k_weight.dtype:
        raise ValueError(f'q_weight and k_weight must share a dtype, got {q_weight.dtype} '
                         f'and {k_weight.dtype}')
    if rope is not None and rope.shape != (T, D // 2, 2):
        raise ValueError(f'rope must be the (cos, sin) table ({T}, {D // 2}, 2) (tokens, '
                         f'head_dim / 2, 2), got {tuple(rope.shape)}')


def qk_norm_rope(qkv: torch.Tensor, q_weight: torch.Tensor, k_weight: torch.Tensor,
                 rope: Optional[torch.Tensor], eps: float,
                 out_dtype: Optional[torch.dtype] = None, *, use_triton: bool
                 ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """QK-Norm (RMSNorm over head_dim) and RoPE of the packed ``qkv``, in attention's layout.

    Args:
        qkv (Tensor): (B, T, 3, H, D), the ``qkv`` Linear output viewed, contiguous; under
            autocast, as autocast produced it.
        q_weight, k_weight (Tensor): (D, ) RMSNorm weights of q and of k.
        rope (Tensor | None): (T, D / 2, 2) (cos, sin) per channel pair, row t rotating token
            t (float32; float64 for float64 inputs), as :func:`..rope.apply_rope` takes; None
            for no rotation.
        eps (float): RMSNorm's epsilon.
        out_dtype (torch.dtype | None): dtype of q and k: autocast's dtype where attention
            runs under autocast; None for the unfused modules' dtype (the promotion of
            ``qkv``'s and the weights').
        use_triton (bool): The Triton kernels (the plan's ``triton``), else the PyTorch path.

    Returns:
        tuple[Tensor, Tensor, Tensor]: q, k (B, H, T, D), views of new (B, T, H, D)
        tensors; v (B, H, T, D), the view ``qkv[:, :, 2].transpose(1, 2)``.
    """
    _check(qkv, q_weight, k_weight, rope)
    if out_dtype is None:
        out_dtype = _normed_dtype(qkv, q_weight)
    if rope is not None:
        rope = rope.contiguous()
    return _QKNormRoPE.apply(qkv, q_weight, k_weight, rope, eps, out_dtype, use_triton)
