"""ViTDet-style windows without padding or masks: tokens in window-major order.

The rule of windowed blocks: a patch token attends to the patches of its own window and to the
*prefix* tokens (class token, registers); a prefix token attends to every token. Partitioning
the patch grid into windows by copying (and padding) q, k and v in every windowed block, then
masking the padding, costs copies and rules out the fast attention kernels. Instead the backbone
permutes its tokens once per forward into window-major order (:class:`WindowLayout`),

    [cls, registers, window 0, window 1, ...]   every window's patches contiguous, row-major,

permutes the RoPE table the same way, and un-permutes at its outputs. Global blocks do not care
about token order (attention, MLP and norms are per token or permutation-equivariant), and a
windowed block attends over contiguous windows, edge windows simply smaller (a 64 x 64 grid with
window 14: 16 windows of 196 patches, 8 of 112 and 1 of 64, 4,096 patches and not 4,900).

Two kernels compute that rule (:func:`window_attention`):

- ``sdpa`` (the default): windows of equal size are batched, each batch one
  ``F.scaled_dot_product_attention`` call without a mask;
- ``flex`` (``attn_impl='flex'``): ``flex_attention`` with a block-sparse mask built once per
  layout, one fused kernel that skips the blocks no window touches. Its 128 x 128 blocks do
  not fit the windows: at 1024x1024, window 14, it visits about 3.6x the score blocks the rule
  needs (``python tools/window_mask.py``), and it is unmeasured on a GPU.
"""
from typing import Callable, Dict, List, Optional, Tuple

import torch

from .plan import ExecutionPlan

Attend = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


class WindowLayout:
    """The window-major token order of a grid, and what attention needs to know of it.

    Args:
        grid (tuple[int, int]): Patch grid (rows, cols).
        window_size (int): Window side in patches.
        num_registers (int): Register tokens R.
        device (torch.device): Where the index tensors live.

    Attributes:
        order (Tensor): (T, ) long; ``x[:, order]`` turns ``[cls, patches (raster),
            registers]`` into window-major ``[cls, registers, windows]``.
        inverse (Tensor): (T, ) long; ``x[:, inverse]`` turns it back.
        num_prefix (int): 1 + R, the tokens before the first window.
        groups (tuple): ``(count, size)`` per run of equal-sized windows, in sequence order.
        window_ids (Tensor): (T, ) int32, the window of each token, -1 for prefix tokens.
    """

    def __init__(self, grid: Tuple[int, int], window_size: int, num_registers: int,
                 device: torch.device) -> None:
        rows, cols = grid
        self.grid, self.window_size, self.num_prefix = grid, window_size, 1 + num_registers
        windows = []  # (size, row-major patch indices) per window
        for r0 in range(0, rows, window_size):
            for c0 in range(0, cols, window_size):
                r1, c1 = min(r0 + window_size, rows), min(c0 + window_size, cols)
                cells = [r * cols + c for r in range(r0, r1) for c in range(c0, c1)]
                windows.append(cells)
        # largest windows first, so that equal sizes are contiguous and batch together
        windows.sort(key=len, reverse=True)
        groups: List[List[int]] = []
        for cells in windows:
            if groups and groups[-1][1] == len(cells):
                groups[-1][0] += 1
            else:
                groups.append([1, len(cells)])
        self.groups = tuple((count, size) for count, size in groups)
        num_patches = rows * cols
        registers = list(range(1 + num_patches, 1 + num_patches + num_registers))
        order = [0, *registers, *(1 + cell for cells in windows for cell in cells)]
        self.order = torch.tensor(order, device=device)
        self.inverse = torch.empty_like(self.order)
        self.inverse[self.order] = torch.arange(len(order), device=device)
        ids = [-1] * self.num_prefix + [w for w, cells in enumerate(windows) for _ in cells]
        self.window_ids = torch.tensor(ids, dtype=torch.int32, device=device)
        self._block_mask = None

    def __len__(self) -> int:
        return self.order.numel()

    def allows(self, q: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
        """The rule for query positions ``q`` and key positions ``kv`` (broadcast index
        tensors, window-major order): the same window, or either a prefix token."""
        ids = self.window_ids
        return (ids[q] == ids[kv]) | (ids[q] < 0) | (ids[kv] < 0)

    def block_mask(self):
        """flex_attention's block-sparse mask of the rule, built on first use."""
        if self._block_mask is None:
            from torch.nn.attention.flex_attention import create_block_mask

            def rule(b, h, q, kv):
                return self.allows(q, kv)

            self._block_mask = create_block_mask(rule, None, None, len(self), len(self),
                                                 device=self.window_ids.device)
        return self._block_mask


_LAYOUTS: Dict[tuple, WindowLayout] = {}


def window_layout(grid: Tuple[int, int], window_size: int, num_registers: int,
                  device: torch.device) -> WindowLayout:
    """:class:`WindowLayout`, cached per arguments (multi-scale training meets a few grids)."""
    key = (tuple(grid), window_size, num_registers, device)
    layout = _LAYOUTS.get(key)
    if layout is None:
        if len(_LAYOUTS) >= 32:
            _LAYOUTS.pop(next(iter(_LAYOUTS)))
        layout = _LAYOUTS[key] = WindowLayout(grid, window_size, num_registers, device)
    return layout


def grouped_window_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                             layout: WindowLayout, attend: Attend) -> torch.Tensor:
    """The rule with ``attend(q, k, v)`` calls over batches of equal-sized windows, no mask.

    Args:
        q, k, v (Tensor): (B, heads, T, D) in window-major order.
        layout (WindowLayout): Their order.
        attend (Callable): Unmasked attention of (N, heads, L, D) queries over (N, heads, S, D)
            keys and values.

    Returns:
        Tensor: (B, T, heads, D).
    """
    B, heads, _, dim = q.shape
    p = layout.num_prefix
    outs = [attend(q[:, :, :p], k, v).transpose(1, 2)]
    start = p
    for count, size in layout.groups:
        def windows(t: torch.Tensor) -> torch.Tensor:  # (B, heads, n * s, D) -> (B, n, heads, s, D)
            return t[:, :, start:start + count * size].unflatten(2, (count, size)).transpose(1, 2)

        def with_prefix(t: torch.Tensor) -> torch.Tensor:  # every window also sees the prefix
            prefix = t[:, None, :, :p].expand(B, count, heads, p, dim)
            return torch.cat((prefix, windows(t)), dim=3).flatten(0, 1)

        out = attend(windows(q).flatten(0, 1), with_prefix(k), with_prefix(v))
        outs.append(out.unflatten(0, (B, count)).permute(0, 1, 3, 2, 4).flatten(1, 2))
        start += count * size
    return torch.cat(outs, dim=1)


_compiled_flex = None


def flex_window_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                          layout: WindowLayout, plan: ExecutionPlan) -> torch.Tensor:
    """The rule as one block-sparse ``flex_attention`` call: (B, heads, T, D) -> (B, T, heads,
    D). Eager callers get the compiled kernel (flex_attention's eager form is a reference
    that materialises the scores), compiled once with dynamic shapes: evaluation at any
    number of input sizes compiles it once. Inside a compiled graph
    Inductor lowers it in place."""
    from torch.nn.attention.flex_attention import flex_attention
    if not plan.eager:
        if plan.device == 'cpu':  # Inductor's CPU flex template (torch 2.14) takes q's
            # buffer for a 4-D one and fails on a view of the packed qkv
            q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
        return flex_attention(q, k, v, block_mask=layout.block_mask()).transpose(1, 2)
    global _compiled_flex
    if _compiled_flex is None:
        # one graph with dynamic shapes for every token count: dynamic=False compiled one per
        # size and, at Dynamo's recompile limit, fell back to the eager reference;
        # dynamic=None (static first, dynamic from the second size) hits an Inductor CPU
        # codegen error in torch 2.14
        _compiled_flex = torch.compile(flex_attention, dynamic=True)
    return _compiled_flex(q, k, v, block_mask=layout.block_mask()).transpose(1, 2)


def window_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layout: WindowLayout,
                     attend: Attend, plan: ExecutionPlan) -> torch.Tensor:
    """Windowed attention under the rule (module docstring) of window-major q, k, v.

    Args:
        q, k, v (Tensor): (B, heads, T, D), one dtype.
        layout (WindowLayout): Their order.
        attend (Callable): Unmasked attention, for the ``sdpa`` kernel.
        plan (ExecutionPlan): Its ``window_kernel`` picks ``'flex'`` or ``'sdpa'``.

    Returns:
        Tensor: (B, T, heads, D).
    """
    if plan.window_kernel == 'flex':
        return flex_window_attention(q, k, v, layout, plan)
    return grouped_window_attention(q, k, v, layout, attend)


def permute_tokens(x: torch.Tensor, index: Optional[torch.Tensor]) -> torch.Tensor:
    """``x[:, index]`` (``x`` (B, T, C)); None leaves ``x`` as it is."""
    return x if index is None else x.index_select(1, index)
