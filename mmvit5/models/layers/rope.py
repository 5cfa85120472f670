"""Axial 2D rotary position embedding (interleaved pairs), as in ViT-5 and EVA-02.

Per head, the first half of the channels rotates with the token's *row* and the second half
with its *column*. Within each half, channel pairs (0, 1), (2, 3), ... share one frequency.
One module serves the patch grid (theta 10000) and the register grid (theta 100; 2x2 for the
released 4 registers, :func:`register_grid` for other counts).
"""
import math
from typing import Optional, Tuple, Union

import torch
import torch.nn as nn

from .kernels.rotate import apply_rope  # noqa: F401  the rotation the layers and kernels share

ROPE_MODES = ('interpolate', 'extrapolate')


def axis_positions(n: int, n_pt: int, mode: str) -> torch.Tensor:
    """Positions of ``n`` cells along one axis for a model built for ``n_pt`` cells.

    ``interpolate`` squeezes any grid into the training span (``i / n * n_pt``, the reference
    RoPE's rule); ``extrapolate`` keeps integer positions (the reference after fine-tuning
    at a new size). Both give ``0 .. n_pt - 1`` when ``n == n_pt``.
    """
    if mode not in ROPE_MODES:
        raise ValueError(f'rope_mode must be one of {ROPE_MODES}, got {mode!r}')
    t = torch.arange(n, dtype=torch.float32)
    return t / n * n_pt if mode == 'interpolate' else t


class RotaryEmbedding2D(nn.Module):
    """Frequencies of an axial 2D RoPE and the angle table of a grid.

    Args:
        head_dim (int): Channels per head; a multiple of 4 (two axes, pairs per axis).
        theta (float): Base of the frequencies ``theta ** (-2j / (head_dim / 2))``.
        grid_size (int | tuple[int, int]): Grid (rows, cols) the model was built for, the
            ``n_pt`` of the position rule.

    The ``freqs`` buffer (head_dim // 4 values) is deterministic and not saved; the released
    checkpoints keep a copy per block, which the backbone checks against it when loading.
    """

    def __init__(self, head_dim: int, theta: float,
                 grid_size: Union[int, Tuple[int, int]]) -> None:
        super().__init__()
        if head_dim % 4:
            raise ValueError(f'2D RoPE needs head_dim divisible by 4, got {head_dim}')
        self.head_dim = head_dim
        self.theta = theta
        self.grid_size = (grid_size, grid_size) if isinstance(grid_size, int) else tuple(grid_size)
        axis_dim = head_dim // 2
        freqs = theta**(-torch.arange(0, axis_dim, 2, dtype=torch.float32) / axis_dim)
        self.register_buffer('freqs', freqs, persistent=False)

    def angles(self, rows: int, cols: int, mode: str) -> torch.Tensor:
        """Angles (rows * cols, head_dim // 2), one per channel pair, for a row-major grid:
        row angles, then column angles."""
        n_rows, n_cols = self.grid_size
        freqs = self.freqs.float()
        row = torch.outer(axis_positions(rows, n_rows, mode).to(freqs.device), freqs)
        col = torch.outer(axis_positions(cols, n_cols, mode).to(freqs.device), freqs)
        row = row[:, None, :].expand(rows, cols, -1)
        col = col[None, :, :].expand(rows, cols, -1)
        return torch.cat((row, col), dim=-1).reshape(rows * cols, self.head_dim // 2)

    def extra_repr(self) -> str:
        return f'head_dim={self.head_dim}, theta={self.theta}, grid_size={self.grid_size}'


def register_grid(num_registers: int) -> Tuple[int, int]:
    """(rows, cols) of the grid the registers' RoPE places them on.

    Registers fill ``cols = ceil(sqrt(R))`` columns row by row: register ``r`` sits at row
    ``r // cols``, column ``r % cols``, and the last row may be partly empty. A square count is
    the released layout (4 registers: 2x2); 2 are one row of 2, 6 two rows of 3, 5 the first
    five cells of that 2x3 grid; 0 registers take no grid.
    """
    if num_registers < 0:
        raise ValueError(f'num_registers must be >= 0, got {num_registers}')
    cols = math.isqrt(num_registers - 1) + 1 if num_registers else 0
    return (-(-num_registers // cols) if cols else 0), cols


def sequence_angles(patch_rope: RotaryEmbedding2D, reg_rope: Optional[RotaryEmbedding2D],
                    grid: Tuple[int, int], num_registers: int, mode: str) -> torch.Tensor:
    """Angles (1 + rows * cols + num_registers, head_dim // 2) for
    ``[cls, patches, registers]``.

    The class token gets angle 0 (no rotation). Registers sit on their own grid
    (:func:`register_grid`) with their own frequencies and are never rescaled: their grid is
    the same at every input size. ``reg_rope`` may be None when there are no registers.
    """
    cls = patch_rope.freqs.new_zeros(1, patch_rope.head_dim // 2)
    patches = patch_rope.angles(grid[0], grid[1], mode)
    if not num_registers:
        return torch.cat((cls, patches), dim=0)
    registers = reg_rope.angles(*register_grid(num_registers), 'extrapolate')[:num_registers]
    return torch.cat((cls, patches, registers), dim=0)


def rotations(angles: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The (cos, sin) table (..., 2) of ``angles`` that :func:`apply_rope` takes, in float32
    for float32 and half-precision models (float64 for float64)."""
    angles = angles.to(torch.promote_types(dtype, torch.float32))
    return torch.stack((angles.cos(), angles.sin()), dim=-1)
