"""Normalization layers: ViT-5's RMSNorm and the channels-first LayerNorm of ViTDet necks."""
from typing import Callable, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F
from mmengine.registry import MODELS

from .kernels.rms_norm import apply_rms_norm
from .plan import ExecutionPlan


class RMSNorm(nn.Module):
    """Root-mean-square norm over the last dimension, weight only, as in ViT-5.

    The statistics are computed in float32 and the result is cast back to the input dtype
    *before* the weight is applied, exactly as the released implementation does, so bf16/fp16
    activations keep float32 normalisation.

    Args:
        dim (int): Size of the normalised (last) dimension.
        eps (float): Added to the mean square. Defaults to 1e-6.

    Shape:
        - Input: (..., dim)
        - Output: same shape; dtype ``out_dtype`` where given, else the promotion of the
          input dtype and the weight's.
    """

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor, out_dtype: Optional[torch.dtype] = None, *,
                plan: ExecutionPlan) -> torch.Tensor:
        """``out_dtype``: the dtype to write, for a norm whose output feeds a matmul under
        autocast (which would cast it so anyway: one rounding, the same values, no cast
        kernels); ``plan``: how to run (:mod:`.plan`)."""
        return apply_rms_norm(x, self.weight, self.eps, plan, out_dtype)

    def extra_repr(self) -> str:
        return f'{self.weight.shape[0]}, eps={self.eps}'


class LayerNorm(nn.LayerNorm):
    """nn.LayerNorm (eps 1e-6, as ViT/DeiT) with :class:`RMSNorm`'s call signature."""

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__(dim, eps=eps)

    def forward(self, x: torch.Tensor, out_dtype: Optional[torch.dtype] = None, *,
                plan: ExecutionPlan) -> torch.Tensor:
        out = super().forward(x)
        return out if out_dtype is None else out.to(out_dtype)


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
TOKEN_NORMS = {'rms': RMSNorm, 'ln': LayerNorm}


def token_norm(norm: str) -> Callable[[int], nn.Module]:
    """The norm layer class (``dim -> module``) named by ``norm`` (``'rms'`` | ``'ln'``; a
    ViT5's is checked by :class:`.ViT5Config`)."""
    return TOKEN_NORMS[norm]
