"""Multi-head self-attention of ViT-5: bias-free QKV, QK-Norm, 2D RoPE, fused SDPA, windows."""
from typing import Callable, Dict, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

from .layer_scale import scaled_linear
from .norm import RMSNorm
from .qk_norm_rope import QKNormRoPE, RecomputeSaved, qk_norm_rope
from .rope import apply_rope


def to_windows(x: torch.Tensor, grid: Tuple[int, int], window_size: int) -> torch.Tensor:
    """(B, H, rows * cols, D) patch tokens -> (B * num_windows, H, window_size ** 2, D).

    The grid is zero-padded at the bottom/right to a multiple of ``window_size``.
    """
    B, heads, _, dim = x.shape
    rows, cols = grid
    x = x.view(B, heads, rows, cols, dim)
    pad_r, pad_c = -rows % window_size, -cols % window_size
    if pad_r or pad_c:
        x = F.pad(x, (0, 0, 0, pad_c, 0, pad_r))
    nr, nc = (rows + pad_r) // window_size, (cols + pad_c) // window_size
    x = x.view(B, heads, nr, window_size, nc, window_size, dim)
    return x.permute(0, 2, 4, 1, 3, 5, 6).reshape(B * nr * nc, heads, window_size**2, dim)


def from_windows(x: torch.Tensor, grid: Tuple[int, int], window_size: int) -> torch.Tensor:
    """Inverse of :func:`to_windows`: back to (B, H, rows * cols, D), padding dropped."""
    rows, cols = grid
    nr, nc = -(-rows // window_size), -(-cols // window_size)
    _, heads, _, dim = x.shape
    x = x.view(-1, nr, nc, heads, window_size, window_size, dim)
    x = x.permute(0, 3, 1, 4, 2, 5, 6).reshape(-1, heads, nr * window_size, nc * window_size,
                                               dim)
    return x[:, :, :rows, :cols].reshape(-1, heads, rows * cols, dim)


_MASKS: Dict[tuple, torch.Tensor] = {}  # window_key_mask by its arguments


def window_key_mask(grid: Tuple[int, int], window_size: int, num_prefix: int,
                    device: torch.device) -> torch.Tensor:
    """(num_windows, 1, 1, num_prefix + window_size ** 2) bool: which keys a window may see.

    Prefix tokens always; window cells only where they are inside the image (not padding).
    Eager calls are cached (every windowed block of a forward asks for the same mask, and on a
    GPU its ten small ops cost launches); compiled and exported graphs compute it.
    """
    key = (grid, window_size, num_prefix, device)
    cacheable = not (torch.compiler.is_compiling() or torch.onnx.is_in_onnx_export())
    if cacheable and key in _MASKS:
        return _MASKS[key]
    valid = torch.ones(1, 1, *grid, device=device)
    windows = to_windows(valid.flatten(2)[..., None], grid, window_size)[..., 0] > 0
    prefix = windows.new_ones(windows.shape[0], 1, num_prefix)
    mask = torch.cat((prefix, windows), dim=-1)[:, :, None, :]
    if cacheable:
        if len(_MASKS) >= 32:  # multi-scale training meets many grids
            _MASKS.pop(next(iter(_MASKS)))
        _MASKS[key] = mask
    return mask


class Attention(nn.Module):
    """ViT-5 attention, global or windowed.

    ``qkv`` has no bias (the one bias ViT-5 removes); q and k are RMS-normalised over the
    head dimension *before* RoPE; ``proj`` keeps its bias. The ablation switches of
    :class:`ViT5` turn each part off or swap it (``qkv_bias``, ``qk_norm``, ``norm_layer``, no
    ``rope`` table).

    Windowed blocks (ViTDet style, ``window_size > 0``) rotate q and k with their global image
    coordinates first, so windowed and global blocks agree on positions. The rule for the
    class token and registers (the *prefix* tokens): patch tokens attend to the tokens of their
    own window plus all prefix tokens; prefix tokens attend to every token. Padding cells of
    the window grid are masked out as keys.

    Eager training runs QK-Norm + RoPE as one autograd step and lets backward recompute the
    rotated q and k instead of keeping them (:mod:`.qk_norm_rope`); ``recompute_qk = False``
    (set by :class:`ViT5` under activation checkpointing) turns that off.

    Args:
        dim (int): Token width C.
        num_heads (int): Heads; ``dim`` must be divisible by it.
        qk_norm (bool): QK-Norm. Defaults to True.
        qkv_bias (bool): Bias in ``qkv``. Defaults to False, as ViT-5.
        norm_layer (Callable[[int], nn.Module]): QK-Norm's layer. Defaults to RMSNorm.
        fused (bool): Use ``F.scaled_dot_product_attention``; False computes the explicit
            softmax formula (same function, kept to check the fused path). Defaults to True.
        window_size (int): 0 for global attention, else the window side in patches.

    Shape:
        - x: (B, T, C) with T = 1 + rows * cols + R; rope: (T, C // heads // 2, 2) (cos, sin)
          or None (no RoPE); grid: (rows, cols)
        - output: (B, T, C)
    """

    def __init__(self, dim: int, num_heads: int, qk_norm: bool = True, qkv_bias: bool = False,
                 norm_layer: Callable[[int], nn.Module] = RMSNorm, fused: bool = True,
                 window_size: int = 0) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.scale = self.head_dim**-0.5
        self.fused = fused
        self.window_size = window_size
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.q_norm = norm_layer(self.head_dim) if qk_norm else nn.Identity()
        self.k_norm = norm_layer(self.head_dim) if qk_norm else nn.Identity()
        self.proj = nn.Linear(dim, dim)
        # False where the block runs under activation checkpointing, which recomputes all
        self.recompute_qk = True

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
               mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        """softmax(q k^T / sqrt(d)) v, with ``mask`` (True = may attend) broadcast over q."""
        if self.fused:
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        attn = (q * self.scale) @ k.transpose(-2, -1)
        if mask is not None:
            attn = attn.masked_fill(~mask, float('-inf'))
        return attn.softmax(dim=-1) @ v

    def forward(self, x: torch.Tensor, rope: Optional[torch.Tensor], grid: Tuple[int, int],
                out_scale: Optional[torch.Tensor] = None) -> torch.Tensor:
        """``out_scale`` (C, ): the block's LayerScale, folded into ``proj``."""
        B, T, C = x.shape
        # q, k, v stay (B, T, heads, D) in memory, as timm's: attention then writes its output
        # in that layout too, and (B, T, C) for ``proj`` is a view, not a copy
        q, k, v = self.qkv(x).view(B, T, 3, self.num_heads, self.head_dim).unbind(2)
        x = self.mix(q, k, v, rope, grid)
        return scaled_linear(x.transpose(1, 2).reshape(B, T, C), self.proj, out_scale)

    def mix(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
            rope: Optional[torch.Tensor], grid: Tuple[int, int]) -> torch.Tensor:
        """QK-Norm, RoPE and attention of q, k, v (B, T, heads, D) -> (B, heads, T, D).

        In training (eager, gradients on, no activation checkpointing) backward recomputes
        the rotated q and k instead of keeping them (:mod:`.qk_norm_rope`).
        """
        rope = None if rope is None else rope[:, None]  # broadcast over heads
        training = torch.is_grad_enabled() and self.recompute_qk and \
            not (torch.compiler.is_compiling() or torch.onnx.is_in_onnx_export())
        if not training:  # no hooks: they would break a compiled graph, and save nothing here
            return self._mix(q, k, v, rope, grid, None)
        with RecomputeSaved() as saved:
            return self._mix(q, k, v, rope, grid, saved)

    def _mix(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
             rope: Optional[torch.Tensor], grid: Tuple[int, int],
             saved: Optional[RecomputeSaved]) -> torch.Tensor:
        q = self.rotated(q, self.q_norm, rope, saved)
        k = self.rotated(k, self.k_norm, rope, saved)
        v = v.transpose(1, 2)
        return self.windowed(q, k, v, grid) if self.window_size else self.attend(q, k, v)

    @staticmethod
    def rotated(x: torch.Tensor, norm: nn.Module, rope: Optional[torch.Tensor],
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

    def windowed(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                 grid: Tuple[int, int]) -> torch.Tensor:
        num_patches = grid[0] * grid[1]
        ws = self.window_size

        def split(t):  # [cls, patches, registers] -> prefix (cls + registers), patches
            return torch.cat((t[:, :, :1], t[:, :, 1 + num_patches:]), 2), \
                t[:, :, 1:1 + num_patches]

        (qp, qx), (kp, kx), (vp, vx) = split(q), split(k), split(v)
        prefix_out = self.attend(qp, k, v)
        qw, kw, vw = (to_windows(t, grid, ws) for t in (qx, kx, vx))
        num_windows = qw.shape[0] // q.shape[0]
        kw = torch.cat((kp.repeat_interleave(num_windows, 0), kw), 2)
        vw = torch.cat((vp.repeat_interleave(num_windows, 0), vw), 2)
        mask = window_key_mask(grid, ws, kp.shape[2], q.device).repeat(q.shape[0], 1, 1, 1)
        patch_out = from_windows(self.attend(qw, kw, vw, mask), grid, ws)
        return torch.cat((prefix_out[:, :, :1], patch_out, prefix_out[:, :, 1:]), 2)
