"""How much of the score matrix flex_attention's block mask visits for ViTDet windows, against
what the rule needs (:mod:`mmvit5.models.layers.windows`).

flex_attention skips the (128 x 128) blocks of the score matrix that no allowed (query, key)
pair touches and visits the rest, masking inside the partial ones. Windows of 196 patches do
not fit 128-token blocks, so most visited blocks are partial and the visited fraction is
several times the exact fraction of allowed pairs: the work that the batched SDPA windows
(``attn_impl='auto'``) do is close to exact. This is deterministic (no timing), so it runs on
any machine.
"""
from typing import List, NamedTuple, Sequence

import torch

from mmvit5.models.layers.windows import WindowLayout


class MaskCoverage(NamedTuple):
    size: int  # image side in pixels (patch 16)
    window: int
    tokens: int
    block: int  # flex's block side
    blocks: int  # all (query block, key block) pairs
    visited: int  # blocks flex computes
    partial: int  # of those, blocks it masks inside
    exact: float  # fraction of (query, key) pairs the rule allows

    @property
    def visited_fraction(self) -> float:
        return self.visited / self.blocks

    @property
    def ratio(self) -> float:
        """Visited over exact: 1 would be a mask that fits the windows."""
        return self.visited_fraction / self.exact


def mask_coverage(size: int, window: int = 14, registers: int = 4,
                  patch: int = 16) -> MaskCoverage:
    """The block mask of a (size x size) image's layout against the rule."""
    grid = (size // patch, size // patch)
    layout = WindowLayout(grid, window, registers, torch.device('cpu'))
    mask = layout.block_mask()
    partial = int(mask.kv_num_blocks.sum())
    full = int(mask.full_kv_num_blocks.sum()) if mask.full_kv_num_blocks is not None else 0
    block = mask.BLOCK_SIZE[0]
    n = -(-len(layout) // block)
    tokens = torch.arange(len(layout))
    exact = float(layout.allows(tokens[:, None], tokens[None, :]).float().mean())
    return MaskCoverage(size, window, len(layout), block, n * n, partial + full, partial, exact)


def coverage_table(rows: Sequence[MaskCoverage]) -> str:
    lines: List[str] = [
        '| image | window | tokens | flex blocks visited | of them partial | rule needs | '
        'visited / needed |', '|---|---|---|---|---|---|---|']
    for r in rows:
        lines.append(f'| {r.size}x{r.size} | {r.window} | {r.tokens} | {r.visited} of '
                     f'{r.blocks} ({r.visited_fraction:.1%}) | {r.partial} | {r.exact:.1%} | '
                     f'{r.ratio:.2f}x |')
    return '\n'.join(lines)
