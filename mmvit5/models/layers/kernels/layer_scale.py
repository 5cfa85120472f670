"""LayerScale as a fused op: ``scale * linear(x)`` folded into the linear layer that ends a
residual branch. Its PyTorch path (:func:`layer_scale_grads`), the autograd Function that keeps
only ``x``, and the Triton kernel of its backward where the plan runs it
(:mod:`.layer_scale_triton`)."""
from typing import TYPE_CHECKING, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

from .dispatch import HAS_TRITON, run_kernel

if TYPE_CHECKING:  # a plan is passed in; the kernels import nothing of the layers above them
    from ..plan import ExecutionPlan

if HAS_TRITON:
    from . import layer_scale_triton


def _scaled_forward(x: torch.Tensor, linear: nn.Linear, scale: torch.Tensor,
                    fold: bool) -> torch.Tensor:
    if fold:
        bias = None if linear.bias is None else linear.bias * scale
        return F.linear(x, linear.weight * scale[:, None], bias)
    return linear(x) * scale


def _fold(x: torch.Tensor, linear: nn.Linear, plan: 'ExecutionPlan') -> bool:
    """Whether the forward folds the scale into the weight and bias. Exports fold (one
    matmul node). On the GPU path (``plan.triton``) the output is scaled: one elementwise
    kernel, where the fold launches two. Elsewhere the fold runs where the output
    (rows x out) is larger than the weight (in x out): the elementwise pass then runs over
    the smaller tensor."""
    if plan.exporting:
        return True
    return not plan.triton and x.numel() // linear.in_features > linear.in_features


def layer_scale_grads(outer: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor,
                      summed: Optional[torch.Tensor], bias: Optional[torch.Tensor]
                      ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The PyTorch path of :func:`.layer_scale_triton.layer_scale_grads`, its
    contract: d W, d scale (summed in float32) and d b (empty without ``bias``) from
    ``outer = G^T x`` and ``summed = sum_rows(G)``."""
    outer = outer.to(weight.dtype)
    grad_s = torch.linalg.vecdot(outer.float(), weight.float())
    grad_b = scale.new_empty(0)
    if bias is not None:
        summed = summed.to(bias.dtype)
        grad_b = summed * scale
        grad_s = grad_s + summed.float() * bias.float()
    return outer * scale[:, None], grad_s.to(scale.dtype), grad_b


class _ScaledLinear(torch.autograd.Function):
    """``scale * linear(x)`` that keeps for backward only what ``linear(x)`` keeps: its input.

    Autograd of either form keeps one more tensor for the scale's gradient, the branch output
    (rows x out) or the scaled weight (out x in). Neither is needed: with ``G`` the output
    gradient and ``A = G^T x`` the product that the weight's gradient needs anyway,
    ``d scale = sum_in(A * W) + b * sum_rows(G)`` and ``d W = A * scale``.
    """

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor],
                scale: torch.Tensor, linear: nn.Linear, plan: 'ExecutionPlan') -> torch.Tensor:
        ctx.use_triton = plan.triton
        out = _scaled_forward(x, linear, scale, _fold(x, linear, plan))
        # the dtype the matmuls ran in (autocast's, if on): backward repeats them in it, and
        # x in that dtype is what autograd of F.linear would have kept
        ctx.x_dtype = x.dtype
        ctx.save_for_backward(x.to(plan.autocast or x.dtype), weight, bias, scale)
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        x, weight, bias, scale = ctx.saved_tensors
        need_x, need_w, need_b, need_s = ctx.needs_input_grad[:4]
        grad2 = grad.reshape(-1, grad.shape[-1]).to(x.dtype)
        grad_x = None
        if need_x:  # through the scaled gradient or the scaled weight, whichever is smaller
            if grad2.numel() < weight.numel():
                grad_x = (grad2 * scale.to(x.dtype)) @ weight.to(x.dtype)
            else:
                grad_x = grad2 @ (weight * scale[:, None]).to(x.dtype)
            grad_x = grad_x.view(x.shape).to(ctx.x_dtype)
        if not (need_w or need_b or need_s):
            return grad_x, None, None, None, None, None
        outer = grad2.t() @ x.reshape(-1, x.shape[-1])  # d(W * scale)
        summed = None if bias is None else grad2.sum(0)  # d(b * scale)
        args = (outer, weight, scale, summed, bias)
        if ctx.use_triton:  # one kernel makes all three
            grad_w, grad_s, grad_b = run_kernel('layer_scale_grads',
                                                layer_scale_triton.layer_scale_grads,
                                                layer_scale_grads, *args)
        else:
            grad_w, grad_s, grad_b = layer_scale_grads(*args)
        return (grad_x, grad_w if need_w else None,
                grad_b if need_b and bias is not None else None, grad_s if need_s else None,
                None, None)


def scaled_linear(x: torch.Tensor, linear: nn.Linear, scale: Optional[torch.Tensor], *,
                  plan: 'ExecutionPlan') -> torch.Tensor:
    """``scale * linear(x)``: LayerScale folded into the branch's output layer.

    Training (eager, gradients on) keeps only ``x`` for backward, as ``linear`` alone does
    (:class:`_ScaledLinear`). The forward folds the scale into the weight and bias
    (``F.linear(x, W * scale[:, None], b * scale)``) where the output is larger than the weight
    (at detection resolutions always; for ViT-B's ``fc2``, in 3072, at 512x512 and batch 1
    not), else scales the output: the elementwise pass runs over the smaller tensor. Where
    the plan runs the Triton kernels (``plan.triton``, CUDA by default) the output is
    scaled, one launch, and backward makes the gradients of weight, bias and scale in one
    Triton kernel (:mod:`.layer_scale_triton`); d scale is summed in float32 on both paths.

    Args:
        x (Tensor): (..., in_features).
        linear (nn.Linear): The branch's output layer (``attn.proj`` / ``mlp.fc2``).
        scale (Tensor | None): (out_features, ) LayerScale gamma; None is ``linear(x)``.
        plan (ExecutionPlan): How to run (:mod:`..plan`).

    Returns:
        Tensor: (..., out_features).
    """
    if scale is None:
        return linear(x)
    if plan.autograd_functions:
        return _ScaledLinear.apply(x, linear.weight, linear.bias, scale, linear, plan)
    return _scaled_forward(x, linear, scale, _fold(x, linear, plan))
