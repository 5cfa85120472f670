"""Multi-head self-attention of ViT-5: bias-free QKV, QK-Norm, 2D RoPE, fused SDPA, windows."""
import contextlib
from typing import Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

from .kernels.layer_scale import scaled_linear
from .kernels.qk_norm_rope import qk_norm_rope
from .norm import token_norm
from .plan import ExecutionPlan
from .recompute import RecomputeSaved
from .rope import apply_rope
from .windows import WindowLayout, window_attention

QKV = Tuple[torch.Tensor, torch.Tensor, torch.Tensor]


def math_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """softmax(q k^T / sqrt(d)) v written out: the formula SDPA fuses, to check it."""
    return ((q * q.shape[-1]**-0.5) @ k.transpose(-2, -1)).softmax(dim=-1) @ v


class Attention(nn.Module):
    """ViT-5 attention, global or windowed.

    ``qkv`` has no bias (the one bias ViT-5 removes); q and k are RMS-normalised over the
    head dimension *before* RoPE; ``proj`` keeps its bias. The ablation switches of
    :class:`ViT5` turn each part off or swap it (``qkv_bias``, ``qk_norm``, ``norm``, no
    ``rope`` table).

    Windowed blocks (ViTDet style, ``window_size > 0``) see their tokens in window-major order
    (:mod:`.windows`), rotated with their global image coordinates, so windowed and global
    blocks agree on positions. Rule for the class token and registers (the *prefix* tokens):
    patch tokens attend to the tokens of their own window plus all prefix tokens; prefix tokens
    attend to every token.

    How it runs is the plan's (:mod:`.plan`): eager runs take QK-Norm + RoPE as one fused op
    (Triton or its PyTorch path) where QK-Norm is RMSNorm, and in training let backward
    recompute the normalised, rotated q and k instead of keeping them (:mod:`.recompute`);
    traced graphs take the modules. q, k and v enter attention in one dtype, v's (the
    ``qkv`` output's: autocast's under autocast).

    Args:
        dim (int): Token width C.
        num_heads (int): Heads; ``dim`` must be divisible by it.
        qk_norm (bool): QK-Norm. Defaults to True.
        qkv_bias (bool): Bias in ``qkv``. Defaults to False, as ViT-5.
        norm (str): QK-Norm's layer, ``'rms'`` (ViT-5) or ``'ln'``. Defaults to 'rms'.
        window_size (int): 0 for global attention, else the window side in patches.

    Shape:
        - x: (B, T, C) with T = 1 + rows * cols + R, in window-major order where ``windows``
          is given; rope: (T, C // heads // 2, 2) (cos, sin) in the same order, or None
        - output: (B, T, C)
    """

    def __init__(self, dim: int, num_heads: int, qk_norm: bool = True, qkv_bias: bool = False,
                 norm: str = 'rms', window_size: int = 0) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.window_size = window_size
        self.qk_norm = qk_norm
        # QK-Norm + RoPE as one op (qk_norm_rope) where the norm is ViT-5's RMSNorm
        self.fusable = qk_norm and norm == 'rms'
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        norm_layer = token_norm(norm)
        self.q_norm = norm_layer(self.head_dim) if qk_norm else nn.Identity()
        self.k_norm = norm_layer(self.head_dim) if qk_norm else nn.Identity()
        self.proj = nn.Linear(dim, dim)

    @staticmethod
    def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """softmax(q k^T / sqrt(d)) v of (..., L, D) queries over (..., S, D) keys (SDPA)."""
        return F.scaled_dot_product_attention(q, k, v)

    def forward(self, x: torch.Tensor, rope: Optional[torch.Tensor],
                windows: Optional[WindowLayout] = None,
                out_scale: Optional[torch.Tensor] = None, *,
                plan: ExecutionPlan) -> torch.Tensor:
        """``windows``: the token order, needed by windowed blocks; ``out_scale`` (C, ): the
        block's LayerScale, folded into ``proj``; ``plan``: how to run (:mod:`.plan`)."""
        if self.window_size and windows is None:
            raise ValueError('a windowed block needs its WindowLayout (ViT5 passes it); '
                             'call it through the backbone or pass windows=window_layout(...)')
        B, T, C = x.shape
        qkv = self.qkv(x).view(B, T, 3, self.num_heads, self.head_dim)
        kernel = plan.window_kernel if self.window_size else None
        recompute = plan.recompute_qk(kernel)
        with RecomputeSaved() if recompute else contextlib.nullcontext() as saved:
            q, k, v = self._qkv_heads(qkv, rope, plan, saved)
            attend = self.attend if plan.attention == 'sdpa' else math_attention
            if kernel is None:
                out = attend(q, k, v).transpose(1, 2)
            else:
                out = window_attention(q, k, v, windows, attend, plan)
        return scaled_linear(out.reshape(B, T, C), self.proj, out_scale, plan=plan)

    def _qkv_heads(self, qkv: torch.Tensor, rope: Optional[torch.Tensor], plan: ExecutionPlan,
                   saved: Optional[RecomputeSaved]) -> QKV:
        """QK-Norm and RoPE of the ``qkv`` output viewed (B, T, 3, heads, D) -> q, k, v
        (B, heads, T, D) in ``qkv``'s dtype; with ``saved``, q and k registered to be
        recomputed in backward.

        q, k and v stay (B, T, heads, D) in memory, as timm's: attention then writes its
        output in that layout too, and (B, T, C) for ``proj`` is a view, not a copy.
        """
        if self.fusable and plan.eager:
            def fused() -> QKV:
                return qk_norm_rope(qkv, self.q_norm.weight, self.k_norm.weight, rope,
                                    self.q_norm.eps, qkv.dtype, use_triton=plan.triton)

            q, k, v = fused()
            if saved is not None:
                remade = {}

                def remake(i: int) -> torch.Tensor:  # one call remakes q and k together
                    if i not in remade:
                        remade.update(enumerate(fused()[:2]))
                    return remade.pop(i)

                saved.register(q, lambda: remake(0))
                saved.register(k, lambda: remake(1))
            return q, k, v
        q, k, v = qkv.unbind(2)
        rope = None if rope is None else rope[:, None]  # broadcast over heads

        def heads(x: torch.Tensor, norm: nn.Module) -> torch.Tensor:
            x = norm(x, plan=plan) if self.qk_norm else x
            if rope is not None:
                x = apply_rope(x, rope, complex_product=plan.eager)
            return x.to(qkv.dtype).transpose(1, 2)

        q, k = heads(q, self.q_norm), heads(k, self.k_norm)
        if saved is not None:
            saved.register(q, lambda: heads(qkv[:, :, 0], self.q_norm))
            saved.register(k, lambda: heads(qkv[:, :, 1], self.k_norm))
        return q, k, v.transpose(1, 2)
