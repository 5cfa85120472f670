"""RMSNorm as a fused op: its PyTorch path (ViT-5's formula, forward and backward), the autograd
Function that keeps only the input and 1/rms, and the Triton kernels where the plan runs them
(:mod:`.rms_norm_triton`). :class:`..norm.RMSNorm` is the module; QK-Norm + RoPE
(:mod:`.qk_norm_rope`) reuses the formula.
"""
from typing import TYPE_CHECKING, Optional, Tuple

import torch

from .dispatch import HAS_TRITON, compute_dtype, run_kernel

if TYPE_CHECKING:  # a plan is passed in; the kernels import nothing of the layers above them
    from ..plan import ExecutionPlan

if HAS_TRITON:
    from . import rms_norm_triton

# ATen's one-pass RMSNorm (torch >= 2.9); older torch in the supported range takes the composite
FUSED_RMS_NORM = hasattr(torch.ops.aten, '_fused_rms_norm')


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float,
             aten: bool = True) -> Tuple[torch.Tensor, torch.Tensor]:
    """ViT-5's RMSNorm of ``x`` (..., dim) and its 1/rms (..., 1), without autograd state.

    Statistics in float32 (float64 stays float64), the normalised tensor rounded back to
    ``x``'s dtype *before* the weight, as released. ``aten=False`` keeps to the composite
    (the TorchScript ONNX exporter, mmdeploy's, has no symbolic for ATen's fused kernel).
    """
    if aten and FUSED_RMS_NORM and x.dtype == weight.dtype == compute_dtype(x.dtype):
        # no intermediate rounding to reproduce: ATen's one-pass kernel (half the time of
        # the composite on CPU) gives the same bits as the released formula
        return torch.ops.aten._fused_rms_norm(x, [x.shape[-1]], weight, eps)
    xf = x.to(compute_dtype(x.dtype))
    rstd = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return (xf * rstd).type_as(x) * weight, rstd


def rms_norm_backward(grad: torch.Tensor, x: torch.Tensor, rstd: torch.Tensor,
                      weight: torch.Tensor, weight_grad: bool = True
                      ) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
    """Gradients of :func:`rms_norm` for ``x`` and (if ``weight_grad``) ``weight``, from the
    input and 1/rms alone: the normalised tensor is recomputed, one elementwise pass."""
    if FUSED_RMS_NORM and x.is_cuda and grad.dtype == x.dtype == weight.dtype == rstd.dtype:
        # ATen's one-pass backward (torch >= 2.9, CUDA only), the pair of the forward kernel
        grad_x, grad_weight = torch.ops.aten._fused_rms_norm_backward(
            grad, x, [x.shape[-1]], rstd, weight, [True, weight_grad])
        return grad_x, grad_weight if weight_grad else None
    normed = x.to(rstd.dtype) * rstd
    grad_weight = None
    if weight_grad:
        grad_weight = (grad * normed.type_as(x)).reshape(-1, x.shape[-1]).sum(0)
        grad_weight = grad_weight.to(weight.dtype)
    grad_normed = (grad * weight).to(rstd.dtype)
    grad_x = rstd * (grad_normed - normed * (grad_normed * normed).mean(-1, keepdim=True))
    return grad_x.to(x.dtype), grad_weight


def rms_norm_fwd(x: torch.Tensor, weight: torch.Tensor, eps: float,
                 out_dtype: Optional[torch.dtype],
                 aten: bool = True) -> Tuple[torch.Tensor, torch.Tensor]:
    """The PyTorch path of :func:`.rms_norm_triton.rms_norm_fwd`, its contract: out
    in ``out_dtype`` (None: as computed) and 1/rms (..., 1); ``aten`` as in :func:`rms_norm`."""
    out, rstd = rms_norm(x, weight, eps, aten)
    return (out if out_dtype is None else out.to(out_dtype)), rstd


def rms_norm_bwd(grad: torch.Tensor, x: torch.Tensor, rstd: torch.Tensor,
                 weight: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """The PyTorch path of :func:`.rms_norm_triton.rms_norm_bwd`, its contract: d(x)
    and the weight gradient as one share (1, C) in the compute dtype."""
    grad = grad.to(torch.promote_types(x.dtype, weight.dtype))
    grad_x, grad_weight = rms_norm_backward(grad, x, rstd, weight)
    return grad_x, grad_weight[None].to(rstd.dtype)


class _RMSNormFunction(torch.autograd.Function):
    """RMSNorm that keeps only its input and 1/rms for the backward pass.

    Autograd of the composite form also keeps the normalised tensor for the weight's gradient:
    one more (..., dim) activation per norm, four per ViT-5 block (two pre-norms, QK-Norm).
    Recomputing it in backward costs one elementwise pass. Where the plan runs Triton, forward
    and backward are one Triton kernel each (:mod:`.rms_norm_triton`).
    """

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, eps: float,
                out_dtype: Optional[torch.dtype], use_triton: bool, aten: bool) -> torch.Tensor:
        ctx.use_triton = use_triton
        if use_triton:
            x = x.contiguous()  # the kernels' layout, kept as is for backward
            out, rstd = run_kernel('rms_norm_fwd', rms_norm_triton.rms_norm_fwd, rms_norm_fwd,
                                   x, weight, eps, out_dtype)
        else:
            out, rstd = rms_norm_fwd(x, weight, eps, out_dtype, aten)
        ctx.save_for_backward(x, rstd, weight)
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        x, rstd, weight = ctx.saved_tensors
        if ctx.use_triton:
            grad_x, shares = run_kernel('rms_norm_bwd', rms_norm_triton.rms_norm_bwd,
                                        rms_norm_bwd, grad.contiguous(), x, rstd, weight)
            grad_weight = shares.sum(0).to(weight.dtype) if ctx.needs_input_grad[1] else None
            return grad_x, grad_weight, None, None, None, None
        grad = grad.to(torch.promote_types(x.dtype, weight.dtype))
        return *rms_norm_backward(grad, x, rstd, weight, ctx.needs_input_grad[1]), \
            None, None, None, None


def apply_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, plan: 'ExecutionPlan',
                   out_dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    """RMSNorm of ``x`` (..., C) as ``plan`` runs it (Triton or the PyTorch path; the composite
    formula in exported graphs), through :class:`_RMSNormFunction`; ``out_dtype`` as in
    :func:`rms_norm_fwd`."""
    return _RMSNormFunction.apply(x, weight, eps, out_dtype, plan.triton, not plan.exporting)
