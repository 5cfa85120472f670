"""Multi-head self-attention of ViT-5: bias-free QKV, QK-Norm, 2D RoPE, fused SDPA."""
from typing import Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

from .norm import RMSNorm
from .rope import apply_rope


class Attention(nn.Module):
    """ViT-5 attention.

    ``qkv`` has no bias (the one bias ViT-5 removes); q and k are RMS-normalised over the
    head dimension *before* RoPE; ``proj`` keeps its bias.

    Args:
        dim (int): Token width C.
        num_heads (int): Heads; ``dim`` must be divisible by it.
        qk_norm (bool): QK-Norm. Defaults to True.
        fused (bool): Use ``F.scaled_dot_product_attention``; False computes the explicit
            softmax formula (same function, kept to check the fused path). Defaults to True.

    Shape:
        - x: (B, T, C); rope: (cos, sin), each (T, C // num_heads)
        - output: (B, T, C)
    """

    def __init__(self, dim: int, num_heads: int, qk_norm: bool = True,
                 fused: bool = True) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.scale = self.head_dim**-0.5
        self.fused = fused
        self.qkv = nn.Linear(dim, dim * 3, bias=False)
        self.q_norm = RMSNorm(self.head_dim) if qk_norm else nn.Identity()
        self.k_norm = RMSNorm(self.head_dim) if qk_norm else nn.Identity()
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, rope: Tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        B, T, C = x.shape
        qkv = self.qkv(x).view(B, T, 3, self.num_heads, self.head_dim)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
        q = apply_rope(self.q_norm(q), *rope)
        k = apply_rope(self.k_norm(k), *rope)
        if self.fused:
            x = F.scaled_dot_product_attention(q, k, v)
        else:
            attn = (q * self.scale) @ k.transpose(-2, -1)
            x = attn.softmax(dim=-1) @ v
        return self.proj(x.transpose(1, 2).reshape(B, T, C))
