"""Normalization layers: ViT-5's RMSNorm and the channels-first LayerNorm of ViTDet necks."""
from functools import partial
from typing import Callable, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from mmengine.registry import MODELS

from .kernels import triton_enabled
from .mode import ExecutionMode, execution_mode


def _compute_dtype(x: torch.Tensor) -> torch.dtype:
    """float32 for half-precision and float32 inputs (as released), float64 stays float64."""
    return torch.promote_types(x.dtype, torch.float32)


# ATen's one-pass RMSNorm (torch >= 2.9); older torch in the supported range takes the composite
FUSED_RMS_NORM = hasattr(torch.ops.aten, '_fused_rms_norm')


def rms_norm(x: torch.Tensor, weight: torch.Tensor,
             eps: float) -> Tuple[torch.Tensor, torch.Tensor]:
    """ViT-5's RMSNorm of ``x`` (..., dim) and its 1/rms (..., 1), without autograd state.

    Statistics in float32 (float64 stays float64), the normalised tensor rounded back to
    ``x``'s dtype *before* the weight, as released.
    """
    # the TorchScript ONNX exporter (mmdeploy's) has no symbolic for the fused kernel
    if FUSED_RMS_NORM and x.dtype == weight.dtype == _compute_dtype(x) and \
            execution_mode() is not ExecutionMode.EXPORTING:
        # no intermediate rounding to reproduce: ATen's one-pass kernel (half the time of
        # the composite on CPU) gives the same bits as the released formula
        return torch.ops.aten._fused_rms_norm(x, [x.shape[-1]], weight, eps)
    xf = x.to(_compute_dtype(x))
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


def _triton_kernels():
    from .kernels import rms_norm_triton  # it imports this module: not at import time
    return rms_norm_triton


class _RMSNormFunction(torch.autograd.Function):
    """RMSNorm that keeps only its input and 1/rms for the backward pass.

    Autograd of the composite form also keeps the normalised tensor for the weight's gradient:
    one more (..., dim) activation per norm, four per ViT-5 block (two pre-norms, QK-Norm).
    Recomputing it in backward costs one elementwise pass. Where the fused kernels run
    (:func:`.kernels.triton_enabled`), forward and backward are one Triton kernel each
    (:mod:`.kernels.rms_norm_triton`).
    """

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, eps: float,
                out_dtype: Optional[torch.dtype]) -> torch.Tensor:
        ctx.use_triton = triton_enabled(x) and execution_mode() is not ExecutionMode.EXPORTING
        if ctx.use_triton:
            x = x.contiguous()
            out, rstd = _triton_kernels().rms_norm_fwd(x, weight, eps, out_dtype)
        else:
            out, rstd = rms_norm(x, weight, eps)
            ctx.out_dtype = out.dtype
            out = out if out_dtype is None else out.to(out_dtype)
        ctx.save_for_backward(x, rstd, weight)
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        x, rstd, weight = ctx.saved_tensors
        if ctx.use_triton:
            grad_x, shares = _triton_kernels().rms_norm_bwd(grad.contiguous(), x, rstd, weight)
            grad_weight = shares.sum(0).to(weight.dtype) if ctx.needs_input_grad[1] else None
            return grad_x, grad_weight, None, None
        grad = grad.to(ctx.out_dtype)
        return *rms_norm_backward(grad, x, rstd, weight, ctx.needs_input_grad[1]), None, None


class RMSNorm(nn.Module):
    """Root-mean-square norm over the last dimension, weight only, as in ViT-5.

    The statistics are computed in float32 and the result is cast back to the input dtype
    *before* the weight is applied, exactly as the released implementation does, so bf16/fp16
    activations keep float32 normalisation.

    Args:
        dim (int): Size of the normalised (last) dimension.
        eps (float): Added to the mean square. Defaults to 1e-6.
        autocast_output (bool): Under autocast, return the output in autocast's dtype: for a
            norm that feeds a matmul, which would cast it so anyway. The norm then writes it
            in that dtype directly (one rounding, the same values), and the cast's launches
            and passes, forward and backward, are gone. Defaults to False.

    Shape:
        - Input: (..., dim)
        - Output: same shape; dtype is the promotion of the input dtype and the weight's
          (autocast's with ``autocast_output`` under autocast).
    """

    def __init__(self, dim: int, eps: float = 1e-6, autocast_output: bool = False) -> None:
        super().__init__()
        self.eps = eps
        self.autocast_output = autocast_output
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        device = x.device.type
        out_dtype = torch.get_autocast_dtype(device) \
            if self.autocast_output and torch.is_autocast_enabled(device) else None
        return _RMSNormFunction.apply(x, self.weight, self.eps, out_dtype)

    def extra_repr(self) -> str:
        return f'{self.weight.shape[0]}, eps={self.eps}'


@MODELS.register_module('LN2d')
class LayerNorm2d(nn.LayerNorm):
    """LayerNorm over the channel axis of a (B, C, H, W) map (ViTDet's simple pyramid).

    Args:
        num_channels (int): C.
        eps (float): Defaults to 1e-6.
    """
    _abbr_ = 'ln'  # mmcv's build_norm_layer names the layer after this

    def __init__(self, num_channels: int, eps: float = 1e-6) -> None:
        super().__init__(num_channels, eps=eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.permute(0, 2, 3, 1)
        x = F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)
        return x.permute(0, 3, 1, 2)


# the token norms a ViT5 can be built with: ViT-5's RMSNorm, or the LayerNorm of ViT/DeiT
TOKEN_NORMS = {'rms': RMSNorm, 'ln': partial(nn.LayerNorm, eps=1e-6)}


def token_norm(norm: str) -> Callable[[int], nn.Module]:
    """The norm layer class (``dim -> module``) named by ``norm`` (``'rms'`` | ``'ln'``)."""
    if norm not in TOKEN_NORMS:
        raise ValueError(f"norm must be one of {tuple(TOKEN_NORMS)} ('rms' is ViT-5's RMSNorm, "
                         f"'ln' LayerNorm with bias), got {norm!r}")
    return TOKEN_NORMS[norm]
