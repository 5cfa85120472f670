"""Windowed attention: the stated rule for prefix tokens, image-coordinate RoPE, padding."""
import pytest
import torch

from mmvit5.models import ViT5
from mmvit5.models.layers.attention import Attention, from_windows, to_windows
from mmvit5.models.layers.rope import RotaryEmbedding2D, rotations, sequence_angles

DIM, HEADS, REGS = 32, 2, 4


def rope_for(grid):
    patch = RotaryEmbedding2D(DIM // HEADS, 10000.0, 4)
    reg = RotaryEmbedding2D(DIM // HEADS, 100.0, 2)
    return rotations(sequence_angles(patch, reg, grid, REGS, 'interpolate'), torch.float32)


def rule_mask(grid, window_size):
    """The documented rule as a full (T, T) mask: True = may attend."""
    rows, cols = grid
    N = rows * cols
    T = 1 + N + REGS
    window = torch.tensor([(r // window_size) * 1000 + c // window_size
                           for r in range(rows) for c in range(cols)])
    mask = torch.zeros(T, T, dtype=torch.bool)
    prefix = torch.tensor([0] + list(range(1 + N, T)))
    mask[prefix, :] = True  # prefix tokens see everything
    mask[:, prefix] = True  # every token sees the prefix tokens
    mask[1:1 + N, 1:1 + N] = window[:, None] == window[None, :]
    return mask


@pytest.mark.parametrize('grid, window_size', [((4, 6), 2), ((5, 7), 3), ((3, 3), 14)])
def test_windowed_equals_global_attention_under_the_rule_mask(grid, window_size):
    torch.manual_seed(0)
    windowed = Attention(DIM, HEADS, window_size=window_size).eval()
    masked = Attention(DIM, HEADS).eval()
    masked.load_state_dict(windowed.state_dict())
    x = torch.randn(2, 1 + grid[0] * grid[1] + REGS, DIM)
    rope = rope_for(grid)
    with torch.no_grad():
        expected = masked.attend  # global path, with the rule written as a dense mask
        masked.attend = lambda q, k, v, mask=None: expected(q, k, v, rule_mask(grid, window_size))
        ref = masked(x, rope, grid)
        out = windowed(x, rope, grid)
    assert torch.allclose(out, ref, atol=1e-5, rtol=1e-4)


def test_one_window_covering_the_grid_is_global_attention():
    torch.manual_seed(0)
    windowed, full = Attention(DIM, HEADS, window_size=8), Attention(DIM, HEADS)
    full.load_state_dict(windowed.state_dict())
    grid = (8, 8)
    x = torch.randn(1, 1 + 64 + REGS, DIM)
    with torch.no_grad():
        assert torch.allclose(windowed(x, rope_for(grid), grid), full(x, rope_for(grid), grid),
                              atol=1e-5)


def test_window_partition_roundtrip_with_padding():
    x = torch.randn(2, 3, 5 * 7, 4)
    windows = to_windows(x, (5, 7), 3)
    assert windows.shape == (2 * 2 * 3, 3, 9, 4)
    assert torch.equal(from_windows(windows, (5, 7), 3), x)


def test_backbone_window_layout_and_explicit_path():
    model = ViT5(arch=dict(embed_dim=DIM, depth=8, num_heads=HEADS), img_size=64,
                 window_size=3).eval()
    assert model.global_attn_indices == [1, 3, 5, 7]
    assert [b.attn.window_size for b in model.blocks] == [3, 0, 3, 0, 3, 0, 3, 0]
    explicit = ViT5(arch=dict(embed_dim=DIM, depth=8, num_heads=HEADS), img_size=64,
                    window_size=3, fused_attn=False).eval()
    explicit.load_state_dict(model.state_dict())
    x = torch.randn(1, 3, 80, 112)
    with torch.no_grad():
        assert torch.allclose(model(x)[0], explicit(x)[0], atol=1e-5, rtol=1e-4)
    with pytest.raises(ValueError, match='global_attn_indices entry 9 is out of range'):
        ViT5(arch=dict(embed_dim=DIM, depth=8, num_heads=HEADS), window_size=3,
             global_attn_indices=(9, ))
