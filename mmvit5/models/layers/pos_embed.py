"""The absolute position embedding of ViT-5, stretched to any patch grid.

One function serves checkpoint loading (a released 14x14 table into a 64x64 model) and the
forward pass (the model's table onto the run-time grid of each input), so a fine-tuned model
and the forward pass agree on how the embedding is stretched.
"""
from typing import Sequence

import torch
import torch.nn.functional as F


def resize_pos_embed(pos_embed: torch.Tensor, src_grid: Sequence[int],
                     dst_grid: Sequence[int]) -> torch.Tensor:
    """Resize a patch position embedding from grid ``src_grid`` to ``dst_grid``.

    Bicubic with ``align_corners=False`` on the (1, C, h, w) map, per axis, as the reference
    fine-tuning code does (computed in float32, returned in the input dtype).

    Args:
        pos_embed (Tensor): (1, h * w, C), row-major over the ``src_grid`` (h, w).
        src_grid (Sequence[int]): (h, w) of ``pos_embed``.
        dst_grid (Sequence[int]): (rows, cols) wanted.

    Returns:
        Tensor: (1, rows * cols, C); at equal grids the same values (bicubic at scale 1 is the
        identity), which lets an exported graph resize without comparing its symbolic grid.
    """
    dim = pos_embed.shape[-1]
    grid = pos_embed.float().reshape(1, src_grid[0], src_grid[1], dim).permute(0, 3, 1, 2)
    grid = F.interpolate(grid, size=tuple(dst_grid), mode='bicubic', align_corners=False)
    return grid.permute(0, 2, 3, 1).reshape(1, dst_grid[0] * dst_grid[1], dim).to(pos_embed.dtype)
