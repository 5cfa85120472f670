"""LayerScale folded into the linear layer that ends a residual branch."""
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

from .kernels import HAS_TRITON, triton_enabled
from .mode import ExecutionMode, eager_training, execution_mode

if HAS_TRITON:
    from .kernels import layer_scale_triton


def _scaled_forward(x: torch.Tensor, linear: nn.Linear, scale: torch.Tensor,
                    fold: bool) -> torch.Tensor:
    if fold:
        bias = None if linear.bias is None else linear.bias * scale
        return F.linear(x, linear.weight * scale[:, None], bias)
    return linear(x) * scale


def _fold(x: torch.Tensor, linear: nn.Linear, use_triton: bool) -> bool:
    """Whether the forward folds the scale into the weight and bias. Exports fold (one
    matmul node). On the GPU path (``use_triton``) the output is scaled: one elementwise
    kernel, where the fold launches two. Elsewhere the fold runs where the output
    (rows x out) is larger than the weight (in x out): the elementwise pass then runs over
    the smaller tensor."""
    if execution_mode() is ExecutionMode.EXPORTING:
        return True
    return not use_triton and x.numel() // linear.in_features > linear.in_features


class _ScaledLinear(torch.autograd.Function):
    """``scale * linear(x)`` that keeps for backward only what ``linear(x)`` keeps: its input.

    Autograd of either form keeps one more tensor for the scale's gradient, the branch output
    (rows x out) or the scaled weight (out x in). Neither is needed: with ``G`` the output
    gradient and ``A = G^T x`` the product that the weight's gradient needs anyway,
    ``d scale = sum_in(A * W) + b * sum_rows(G)`` and ``d W = A * scale``.
    """

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor],
                scale: torch.Tensor, linear: nn.Linear) -> torch.Tensor:
        ctx.use_triton = triton_enabled(x)
        out = _scaled_forward(x, linear, scale, _fold(x, linear, ctx.use_triton))
        # the dtype the matmuls ran in (autocast's, if on): backward repeats them in it, and
        # x in that dtype is what autograd of F.linear would have kept
        device = x.device.type
        dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else \
            x.dtype
        ctx.x_dtype = x.dtype
        ctx.save_for_backward(x.to(dtype), weight, bias, scale)
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        x, weight, bias, scale = ctx.saved_tensors
        need_x, need_w, need_b, need_s = ctx.needs_input_grad[:4]
        grad2 = grad.reshape(-1, grad.shape[-1]).to(x.dtype)
        grad_x = grad_w = grad_b = grad_s = None
        if need_x:  # through the scaled gradient or the scaled weight, whichever is smaller
            if grad2.numel() < weight.numel():
                grad_x = (grad2 * scale.to(x.dtype)) @ weight.to(x.dtype)
            else:
                grad_x = grad2 @ (weight * scale[:, None]).to(x.dtype)
            grad_x = grad_x.view(x.shape).to(ctx.x_dtype)
        if ctx.use_triton and (need_w or need_b or need_s):  # one kernel makes all three
            outer = grad2.t() @ x.reshape(-1, x.shape[-1])  # d(W * scale)
            summed = None if bias is None else grad2.sum(0)  # d(b * scale)
            grad_w, grad_s, grad_b = layer_scale_triton.layer_scale_grads(outer, weight, scale,
                                                                          summed, bias)
            grad_b = grad_b if need_b and bias is not None else None
            return grad_x, grad_w if need_w else None, grad_b, grad_s if need_s else None, None
        if need_w or need_s:
            outer = (grad2.t() @ x.reshape(-1, x.shape[-1])).to(weight.dtype)  # d(W * scale)
            grad_s = torch.linalg.vecdot(outer, weight) if need_s else None
            grad_w = outer.mul_(scale[:, None]) if need_w else None
        if bias is not None and (need_b or need_s):
            summed = grad2.sum(0).to(bias.dtype)  # d(b * scale)
            grad_b = summed * scale if need_b else None
            grad_s = grad_s + summed * bias if need_s else None
        return grad_x, grad_w, grad_b, grad_s, None


def scaled_linear(x: torch.Tensor, linear: nn.Linear,
                  scale: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``scale * linear(x)``: LayerScale folded into the branch's output layer.

    Training (eager, gradients on) keeps only ``x`` for backward, as ``linear`` alone does
    (:class:`_ScaledLinear`). The forward folds the scale into the weight and bias
    (``F.linear(x, W * scale[:, None], b * scale)``) where the output is larger than the weight
    (at detection resolutions always; for ViT-B's ``fc2``, in 3072, at 512x512 and batch 1
    not), else scales the output: the elementwise pass runs over the smaller tensor. Where
    the fused kernels run (:func:`.kernels.triton_enabled`, CUDA by default) the output is
    scaled, one launch, and backward makes the gradients of weight, bias and scale in one
    Triton kernel (:mod:`.kernels.layer_scale_triton`).

    Args:
        x (Tensor): (..., in_features).
        linear (nn.Linear): The branch's output layer (``attn.proj`` / ``mlp.fc2``).
        scale (Tensor, optional): (out_features, ) LayerScale gamma; None is ``linear(x)``.

    Returns:
        Tensor: (..., out_features).
    """
    if scale is None:
        return linear(x)
    if eager_training():
        return _ScaledLinear.apply(x, linear.weight, linear.bias, scale, linear)
    return _scaled_forward(x, linear, scale, _fold(x, linear, triton_enabled(x)))
