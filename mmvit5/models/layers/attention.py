"""Multi-head self-attention of ViT-5: bias-free QKV, QK-Norm, 2D RoPE, fused SDPA, windows."""
from typing import Callable, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

from .kernels import triton_enabled
from .kernels.qk_norm_rope_op import qk_norm_rope as fused_qk_norm_rope
from .layer_scale import scaled_linear
from .mode import ExecutionMode, eager_training, execution_mode
from .norm import RMSNorm
from .qk_norm_rope import QKNormRoPE, RecomputeSaved, qk_norm_rope
from .rope import apply_rope
from .windows import WindowLayout, resolve_window_kernel, window_attention

# the attention kernel: 'auto' (SDPA; windowed blocks flex_attention on CUDA), 'sdpa', 'flex'
# (windowed blocks only; global blocks stay SDPA) or 'math' (the explicit softmax formula, the
# same function, kept to check the fused kernels)
ATTN_IMPLS = ('auto', 'sdpa', 'flex', 'math')


class Attention(nn.Module):
    """ViT-5 attention, global or windowed.

    ``qkv`` has no bias (the one bias ViT-5 removes); q and k are RMS-normalised over the
    head dimension *before* RoPE; ``proj`` keeps its bias. The ablation switches of
    :class:`ViT5` turn each part off or swap it (``qkv_bias``, ``qk_norm``, ``norm_layer``, no
    ``rope`` table).

    Windowed blocks (ViTDet style, ``window_size > 0``) see their tokens in window-major order
    (:mod:`.windows`), rotated with their global image coordinates, so windowed and global
    blocks agree on positions. Rule for the class token and registers (the *prefix* tokens):
    patch tokens attend to the tokens of their own window plus all prefix tokens; prefix tokens
    attend to every token.

    Eager training runs QK-Norm + RoPE as one autograd step and lets backward recompute the
    normalised, rotated q and k instead of keeping them (:mod:`.qk_norm_rope`);
    ``recompute_qk = False`` (set by :class:`ViT5` under activation checkpointing) turns that
    off.

    Args:
        dim (int): Token width C.
        num_heads (int): Heads; ``dim`` must be divisible by it.
        qk_norm (bool): QK-Norm. Defaults to True.
        qkv_bias (bool): Bias in ``qkv``. Defaults to False, as ViT-5.
        norm_layer (Callable[[int], nn.Module]): QK-Norm's layer. Defaults to RMSNorm.
        attn_impl (str): The attention kernel, one of ``ATTN_IMPLS``. Defaults to 'auto'.
        window_size (int): 0 for global attention, else the window side in patches.

    Shape:
        - x: (B, T, C) with T = 1 + rows * cols + R, in window-major order where ``windows``
          is given; rope: (T, C // heads // 2, 2) (cos, sin) in the same order, or None
        - output: (B, T, C)
    """

    def __init__(self, dim: int, num_heads: int, qk_norm: bool = True, qkv_bias: bool = False,
                 norm_layer: Callable[[int], nn.Module] = RMSNorm, attn_impl: str = 'auto',
                 window_size: int = 0) -> None:
        super().__init__()
        if attn_impl not in ATTN_IMPLS:
            raise ValueError(f'attn_impl must be one of {ATTN_IMPLS}, got {attn_impl!r}')
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.scale = self.head_dim**-0.5
        self.attn_impl = attn_impl
        self.window_size = window_size
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.q_norm = norm_layer(self.head_dim) if qk_norm else nn.Identity()
        self.k_norm = norm_layer(self.head_dim) if qk_norm else nn.Identity()
        self.proj = nn.Linear(dim, dim)
        # False where the block runs under activation checkpointing, which recomputes all
        self.recompute_qk = True

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """softmax(q k^T / sqrt(d)) v of (..., L, D) queries over (..., S, D) keys."""
        if self.attn_impl != 'math':
            return F.scaled_dot_product_attention(q, k, v)
        return ((q * self.scale) @ k.transpose(-2, -1)).softmax(dim=-1) @ v

    def forward(self, x: torch.Tensor, rope: Optional[torch.Tensor],
                windows: Optional[WindowLayout] = None,
                out_scale: Optional[torch.Tensor] = None) -> torch.Tensor:
        """``windows``: the token order, needed by windowed blocks; ``out_scale`` (C, ): the
        block's LayerScale, folded into ``proj``."""
        B, T, C = x.shape
        x = self.qkv_attention(self.qkv(x).view(B, T, 3, self.num_heads, self.head_dim), rope,
                               windows)
        return scaled_linear(x.reshape(B, T, C), self.proj, out_scale)

    def window_kernel(self, x: torch.Tensor) -> Optional[str]:
        """``'flex'`` or ``'sdpa'``: what windowed attention runs on tensors like ``x``; None
        for a global block."""
        if not self.window_size:
            return None
        # 'math' batches windows like 'sdpa', with the explicit formula in ``attend``
        return resolve_window_kernel('sdpa' if self.attn_impl == 'math' else self.attn_impl, x)

    def qkv_attention(self, qkv: torch.Tensor, rope: Optional[torch.Tensor],
                      windows: Optional[WindowLayout] = None) -> torch.Tensor:
        """QK-Norm, RoPE and attention of the ``qkv`` output viewed (B, T, 3, heads, D)
        -> (B, T, heads, D).

        q, k and v stay (B, T, heads, D) in memory, as timm's: attention then writes its
        output in that layout too, and (B, T, C) for ``proj`` is a view, not a copy.
        """
        kernel = self.window_kernel(qkv)
        # no hooks in compiled graphs, which they would break, nor around the compiled
        # flex_attention, whose graph keeps what it chooses
        recompute = eager_training() and self.recompute_qk and kernel != 'flex'
        if isinstance(self.q_norm, RMSNorm) and triton_enabled(qkv) and \
                execution_mode() is not ExecutionMode.EXPORTING:
            return self._fused_attention(qkv, rope, windows, kernel, recompute)
        q, k, v = qkv.unbind(2)
        rope = None if rope is None else rope[:, None]  # broadcast over heads
        if recompute:
            with RecomputeSaved() as saved:
                return self._attention(q, k, v, rope, windows, kernel, saved)
        return self._attention(q, k, v, rope, windows, kernel, None)

    def _fused_attention(self, qkv: torch.Tensor, rope: Optional[torch.Tensor],
                         windows: Optional[WindowLayout], kernel: Optional[str],
                         recompute: bool) -> torch.Tensor:
        """:meth:`qkv_attention` with QK-Norm + RoPE as one Triton kernel each way
        (:mod:`.kernels`); with ``recompute``, attention's saved q and k are remade by one
        more forward kernel in backward instead of kept."""
        device = qkv.device.type
        dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else None
        args = (qkv, self.q_norm.weight, self.k_norm.weight, rope, self.q_norm.eps, dtype)
        if not recompute:
            return self._attend_heads(*fused_qk_norm_rope(*args), windows, kernel)
        remade = {}

        def remake(i: int) -> torch.Tensor:  # one kernel remakes q and k together
            if i not in remade:
                remade.update(enumerate(fused_qk_norm_rope(*args)[:2]))
            return remade.pop(i)

        with RecomputeSaved() as saved:
            q, k, v = fused_qk_norm_rope(*args)
            saved.register(q, lambda: remake(0))
            saved.register(k, lambda: remake(1))
            return self._attend_heads(q, k, v, windows, kernel)

    def _attend_heads(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                        windows: Optional[WindowLayout], kernel: Optional[str]) -> torch.Tensor:
        """Attention of (B, heads, T, D) q, k, v, global (``kernel`` None) or windowed
        -> (B, T, heads, D)."""
        if kernel is None:
            return self.attend(q, k, v).transpose(1, 2)
        if windows is None:
            raise ValueError('a windowed block needs its WindowLayout (ViT5 passes it); '
                             'call it through the backbone or pass windows=window_layout(...)')
        return window_attention(q, k, v, windows, self.attend, kernel)

    def _attention(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                   rope: Optional[torch.Tensor], windows: Optional[WindowLayout],
                   kernel: Optional[str], saved: Optional[RecomputeSaved]) -> torch.Tensor:
        q = self._norm_rope(q, self.q_norm, rope, saved)
        k = self._norm_rope(k, self.k_norm, rope, saved)
        return self._attend_heads(q, k, v.transpose(1, 2), windows, kernel)

    @staticmethod
    def _norm_rope(x: torch.Tensor, norm: nn.Module, rope: Optional[torch.Tensor],
                   saved: Optional[RecomputeSaved]) -> torch.Tensor:
        """QK-Norm, then RoPE, of ``x`` (B, T, heads, D) -> (B, heads, T, D); in training
        (``saved`` given) a tensor that backward recomputes instead of keeping (see
        :mod:`.qk_norm_rope`)."""
        if rope is None:
            return norm(x).transpose(1, 2)
        if saved is None:
            return apply_rope(norm(x), rope).transpose(1, 2)
        # the dtype attention runs in: autocast's cast, made here, so that attention saves
        # this very tensor
        dtype = torch.get_autocast_dtype(x.device.type) \
            if torch.is_autocast_enabled(x.device.type) else None
        if isinstance(norm, RMSNorm):
            args = (x, norm.weight, rope, norm.eps, dtype)
            out = QKNormRoPE.apply(*args)

            def make() -> torch.Tensor:
                return qk_norm_rope(*args)
        else:
            def make() -> torch.Tensor:
                out = apply_rope(norm(x), rope)
                return out if dtype is None else out.to(dtype)
            out = make()
        return saved.register(out.transpose(1, 2), lambda: make().transpose(1, 2))
