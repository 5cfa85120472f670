"""The transformer block of ViT-5 and its patch embedding: ``x + gamma * f(norm(x))`` with
LayerScale folded into each branch's last linear layer."""
from typing import Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

from .attention import Attention
from .kernels.layer_scale import scaled_linear
from .norm import token_norm
from .plan import ExecutionPlan
from .windows import WindowLayout


class DropPath(nn.Module):
    """Stochastic depth per sample (timm's ``DropPath``, torchvision's ``StochasticDepth`` in
    ``'row'`` mode, the same random draws): in training, each sample's branch is zeroed with
    probability ``p`` and the kept ones are scaled by ``1 / (1 - p)``. Written here because
    ``torchvision.ops`` would import torchvision's models and datasets with ``import mmvit5``."""

    def __init__(self, p: float) -> None:
        super().__init__()
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0.0:
            return x
        survival = 1.0 - self.p
        keep = x.new_empty((x.shape[0], ) + (1, ) * (x.ndim - 1)).bernoulli_(survival)
        return x * keep.div_(survival) if survival > 0.0 else x * keep

    def extra_repr(self) -> str:
        return f'p={self.p}'


class Mlp(nn.Module):
    """Linear -> exact GELU -> Linear, both with bias (no SwiGLU in ViT-5)."""

    def __init__(self, dim: int, hidden_dim: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden_dim)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden_dim, dim)

    def forward(self, x: torch.Tensor, out_scale: Optional[torch.Tensor] = None, *,
                plan: ExecutionPlan) -> torch.Tensor:
        """``out_scale`` (C, ): the block's LayerScale, folded into ``fc2``."""
        return scaled_linear(self.act(self.fc1(x)), self.fc2, out_scale, plan=plan)


class Block(nn.Module):
    """Pre-norm transformer block with LayerScale: ``x + gamma * f(RMSNorm(x))``, the gammas
    folded into each branch's last linear layer (:func:`scaled_linear`).

    Args:
        dim (int): Token width C.
        num_heads (int): Attention heads.
        mlp_ratio (float): MLP hidden width over C.
        drop_path (float): Stochastic-depth rate of this block.
        layer_scale_init_value (float, optional): Initial value of ``gamma_1``/``gamma_2``;
            None builds the block without LayerScale (``x + f(norm(x))``).
        qk_norm (bool): QK-Norm in attention.
        qkv_bias (bool): Bias in the attention's ``qkv``.
        norm (str): The block's norms and QK-Norm, ``'rms'`` (ViT-5) or ``'ln'``.
        window_size (int): 0 for global attention, else windowed (see :class:`Attention`).

    Shape:
        - x: (B, T, C); rope: (T, C // num_heads // 2, 2) (cos, sin) or None, in the token
          order of ``x``; windows: that order, for windowed blocks (:mod:`.windows`); plan:
          how to run (:mod:`.plan`).
        - Output: (B, T, C).
    """

    def __init__(self, dim: int, num_heads: int, mlp_ratio: float = 4.0,
                 drop_path: float = 0.0, layer_scale_init_value: Optional[float] = 1e-4,
                 qk_norm: bool = True, qkv_bias: bool = False, norm: str = 'rms',
                 window_size: int = 0) -> None:
        super().__init__()
        self.norm1 = token_norm(norm)(dim)
        self.attn = Attention(dim, num_heads, qk_norm=qk_norm, qkv_bias=qkv_bias, norm=norm,
                              window_size=window_size)
        self.norm2 = token_norm(norm)(dim)
        self.mlp = Mlp(dim, int(dim * mlp_ratio))
        if layer_scale_init_value is None:
            self.register_parameter('gamma_1', None)
            self.register_parameter('gamma_2', None)
        else:
            self.gamma_1 = nn.Parameter(torch.full((dim, ), float(layer_scale_init_value)))
            self.gamma_2 = nn.Parameter(torch.full((dim, ), float(layer_scale_init_value)))
        self.drop_path = DropPath(drop_path) if drop_path > 0 else nn.Identity()

    def forward(self, x: torch.Tensor, rope: Optional[torch.Tensor],
                windows: Optional[WindowLayout] = None, *,
                plan: ExecutionPlan) -> torch.Tensor:
        # each pre-norm feeds a matmul (qkv, fc1), which would cast to autocast's dtype
        # anyway: the norm writes that dtype (one rounding, no cast kernels)
        h = self.attn(self.norm1(x, plan.autocast, plan=plan), rope, windows, self.gamma_1,
                      plan=plan)
        x = x + self.drop_path(h)
        h = self.mlp(self.norm2(x, plan.autocast, plan=plan), self.gamma_2, plan=plan)
        return x + self.drop_path(h)


class PatchEmbed(nn.Module):
    """Conv patchify (with bias); pads bottom/right to a multiple of the patch size.

    Shape:
        - Input: (B, in_channels, H, W)
        - Output: tokens (B, ceil(H / p) * ceil(W / p), C) row-major, and the grid (rows, cols)
    """

    def __init__(self, in_channels: int, embed_dim: int, patch_size: int) -> None:
        super().__init__()
        self.patch_size = patch_size
        self.proj = nn.Conv2d(in_channels, embed_dim, patch_size, stride=patch_size)

    def forward(self, x: torch.Tensor) -> Tuple[torch.Tensor, Tuple[int, int]]:
        p = self.patch_size
        pad_h, pad_w = -x.shape[2] % p, -x.shape[3] % p
        # an exported graph always pads (by 0 at multiples): testing its symbolic sides would
        # fix the branch of the example's, and other sides would be cropped to whole patches
        if torch.compiler.is_exporting() or pad_h or pad_w:
            x = F.pad(x, (0, pad_w, 0, pad_h))
        x = self.proj(x)
        return x.flatten(2).transpose(1, 2), (x.shape[2], x.shape[3])
