"""RoPE as a complex multiply (eager) and in real arithmetic (compiled) against the released
``x * cos + rotate_half(x) * sin``."""
import pytest
import torch

from mmvit5.models.layers.rope import RotaryEmbedding2D, apply_rope, rotations, sequence_angles

HEAD_DIM, GRID, REGS = 16, (3, 5), 4


def released_rope(x, angles):
    """The reference formula, with its (T, head_dim) tables of repeated pair angles."""
    angles = angles.repeat_interleave(2, dim=-1)
    pairs = x.unflatten(-1, (-1, 2))
    rotated = torch.stack((-pairs[..., 1], pairs[..., 0]), dim=-1).flatten(-2)
    return x * angles.cos() + rotated * angles.sin()


def angles_and_queries(dtype):
    torch.manual_seed(0)
    angles = sequence_angles(RotaryEmbedding2D(HEAD_DIM, 10000.0, 4),
                             RotaryEmbedding2D(HEAD_DIM, 100.0, 2), GRID, REGS, 'interpolate')
    x = 3 * torch.randn(2, 3, 1 + GRID[0] * GRID[1] + REGS, HEAD_DIM)
    return angles, x.to(dtype)


def test_complex_product_is_the_released_rotation():
    angles, x = angles_and_queries(torch.float32)
    out = apply_rope(x, rotations(angles, torch.float32))
    torch.testing.assert_close(out, released_rope(x, angles), rtol=1e-6, atol=1e-6)
    assert torch.equal(out[:, :, 0], x[:, :, 0])  # the class token carries no position
    assert not torch.allclose(out[:, :, 1:], x[:, :, 1:])


def test_compiled_real_arithmetic_equals_eager():
    angles, x = angles_and_queries(torch.float32)
    rope = rotations(angles, torch.float32)
    compiled = torch.compile(apply_rope, fullgraph=True)
    torch.testing.assert_close(compiled(x, rope), apply_rope(x, rope), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize('dtype', [torch.bfloat16, torch.float16])
def test_half_precision_rotates_in_float32(dtype):
    angles, x = angles_and_queries(dtype)
    rope = rotations(angles, dtype)
    assert rope.dtype == torch.float32
    out = apply_rope(x, rope)
    assert out.dtype == dtype
    # one rounding of the float32 result (relative error <= eps / 2), not one per op
    exact = released_rope(x.float(), angles)
    assert ((out.float() - exact).abs() <= exact.abs() * torch.finfo(dtype).eps).all()
