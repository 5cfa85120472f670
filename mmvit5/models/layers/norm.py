"""Normalization layers: ViT-5's RMSNorm and the channels-first LayerNorm of ViTDet necks."""
import torch
import torch.nn as nn
import torch.nn.functional as F
from mmengine.registry import MODELS


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
        - Output: same shape; dtype is the promotion of the input dtype and the weight's.
    """

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        normed = F.rms_norm(x.float(), (x.shape[-1], ), eps=self.eps)
        return normed.type_as(x) * self.weight

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
