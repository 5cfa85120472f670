"""Windowed attention in window-major order: the stated rule for prefix tokens, image-coordinate
RoPE, no padding, against the rule written as a dense mask over raster-order tokens."""
import pytest
import torch
import torch.nn.functional as F

from mmvit5.models import ViT5
from mmvit5.models.layers.attention import Attention
from mmvit5.models.layers.plan import make_plan
from mmvit5.models.layers.rope import RotaryEmbedding2D, rotations, sequence_angles
from mmvit5.models.layers.windows import window_layout

DIM, HEADS = 32, 2


def rope_for(grid, registers):
    patch = RotaryEmbedding2D(DIM // HEADS, 10000.0, 4)
    reg = RotaryEmbedding2D(DIM // HEADS, 100.0, 2)
    return rotations(sequence_angles(patch, reg, grid, registers, 'interpolate'), torch.float32)


def rule_mask(grid, window_size, registers):
    """The documented rule as a full (T, T) mask over [cls, patches, registers]: True = may
    attend. Patches see their own window and the prefix; prefix tokens see everything."""
    rows, cols = grid
    N = rows * cols
    T = 1 + N + registers
    window = torch.tensor([(r // window_size) * 1000 + c // window_size
                           for r in range(rows) for c in range(cols)])
    mask = torch.zeros(T, T, dtype=torch.bool)
    prefix = torch.tensor([0] + list(range(1 + N, T)))
    mask[prefix, :] = True
    mask[:, prefix] = True
    mask[1:1 + N, 1:1 + N] = window[:, None] == window[None, :]
    return mask


def masked_reference(model, window_size, windowed_blocks, grid, registers):
    """``model`` (all blocks global) with the rule mask in the formerly windowed blocks."""
    mask = rule_mask(grid, window_size, registers)
    for i in windowed_blocks:
        model.blocks[i].attn.attend = \
            lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    return model


@pytest.mark.parametrize('grid, window_size', [((4, 6), 2), ((5, 7), 3), ((3, 3), 14)])
@pytest.mark.parametrize('registers', [0, 4])
def test_attention_in_window_major_order_equals_the_rule_mask(grid, window_size, registers):
    torch.manual_seed(0)
    windowed = Attention(DIM, HEADS, window_size=window_size).eval()
    masked = Attention(DIM, HEADS).eval()
    masked.load_state_dict(windowed.state_dict())
    mask = rule_mask(grid, window_size, registers)
    masked.attend = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    x = torch.randn(2, 1 + grid[0] * grid[1] + registers, DIM)
    rope = rope_for(grid, registers)
    layout = window_layout(grid, window_size, registers, x.device)
    with torch.no_grad():
        plan = make_plan(x)
        ref = masked(x, rope, plan=plan)
        out = windowed(x[:, layout.order], rope[layout.order], layout,
                       plan=plan)[:, layout.inverse]
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-4)


def test_window_layout_has_no_padding_and_groups_equal_windows():
    layout = window_layout((64, 64), 14, 4, torch.device('cpu'))
    assert layout.groups == ((16, 196), (8, 112), (1, 64))
    assert len(layout) == 1 + 64 * 64 + 4 and layout.num_prefix == 5
    assert sorted(layout.order.tolist()) == list(range(len(layout)))
    assert torch.equal(layout.order[layout.inverse], torch.arange(len(layout)))
    # cls, then the registers, then the first window's first row
    assert layout.order[:7].tolist() == [0, 4097, 4098, 4099, 4100, 1, 2]
    assert layout.window_ids[:5].tolist() == [-1] * 5
    # every window is contiguous: its id changes only at window boundaries
    ids = layout.window_ids[5:]
    assert int((ids[1:] != ids[:-1]).sum()) == 16 + 8 + 1 - 1


def test_windowed_block_without_its_layout_is_refused():
    with pytest.raises(ValueError, match='needs its WindowLayout'):
        x = torch.randn(1, 1 + 16, DIM)
        Attention(DIM, HEADS, window_size=2)(x, rope_for((4, 4), 0), plan=make_plan(x))


def build(**kwargs):
    return ViT5(arch=dict(embed_dim=DIM, depth=4, num_heads=HEADS), img_size=64, **kwargs)


CASES = [  # input size, registers, windows, global blocks
    ((80, 112), 4, 3, (1, 3)),   # 5 x 7 grid, window 3: edge windows of 6, 3 and 2 patches
    ((96, 64), 0, 4, (0, )),     # 6 x 4 grid, no registers
    ((64, 160), 8, 3, ()),       # every block windowed, 8 registers
    ((48, 48), 4, 14, (2, )),    # one window larger than the grid
]


@pytest.mark.parametrize('impl', ['sdpa', 'math'])
@pytest.mark.parametrize('size, registers, window_size, global_blocks', CASES)
def test_backbone_outputs_and_gradients_equal_the_masked_rule(impl, size, registers,
                                                              window_size, global_blocks):
    torch.manual_seed(0)
    model = build(num_registers=registers, window_size=window_size,
                  global_attn_indices=global_blocks, attn_impl=impl,
                  out_indices=(0, 1, 2, 3), out_type='raw').train()
    ref = build(num_registers=registers, out_indices=(0, 1, 2, 3), out_type='raw').train()
    ref.load_state_dict(model.state_dict())
    grid = (size[0] // 16, size[1] // 16)
    masked_reference(ref, window_size, [i for i in range(4) if i not in global_blocks], grid,
                     registers)
    x = torch.randn(2, 3, *size)
    outs, ref_outs = model(x), ref(x)
    for out, expected in zip(outs, ref_outs):
        torch.testing.assert_close(out, expected, atol=2e-5, rtol=1e-4)
    sum((o * torch.linspace(-1, 1, o.shape[-1])).sum() for o in outs).backward()
    sum((o * torch.linspace(-1, 1, o.shape[-1])).sum() for o in ref_outs).backward()
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-4, rtol=1e-3, msg=name)


def test_flex_kernel_equals_the_masked_rule():
    """The block-sparse flex_attention path (CUDA's default), compiled here on the CPU, where
    flex_attention has a forward only (its CUDA gradients run in tests/test_cuda.py)."""
    torch.manual_seed(0)
    model = build(window_size=3, global_attn_indices=(1, ), attn_impl='flex',
                  out_type='raw').eval()
    ref = build(out_type='raw').eval()
    ref.load_state_dict(model.state_dict())
    masked_reference(ref, 3, [0, 2, 3], (5, 7), 4)
    x = torch.randn(2, 3, 80, 112)
    with torch.no_grad():
        torch.testing.assert_close(model(x)[0], ref(x)[0], atol=2e-5, rtol=1e-4)
    with pytest.raises(ValueError, match="attn_impl='flex' cannot train on the CPU"):
        model(x)


@pytest.mark.slow  # torch.compile on CPU
def test_compiled_blocks_get_the_block_mask_built():
    """compile_blocks with flex windows: the block mask is built before the compiled blocks
    run, so they compile once per kind (windowed, global) and never build it in a graph; the
    result is the eager SDPA path's."""
    import torch._dynamo
    from torch._dynamo.utils import counters
    torch._dynamo.reset()
    counters.clear()
    torch.manual_seed(0)
    model = build(window_size=3, global_attn_indices=(1, ), attn_impl='flex',
                  compile_blocks=True).eval()
    ref = build(window_size=3, global_attn_indices=(1, )).eval()
    ref.load_state_dict(model.state_dict())
    x = torch.randn(1, 3, 80, 112)
    with torch.no_grad():
        for _ in range(3):
            out = model(x)[0]
        torch.testing.assert_close(out, ref(x)[0], atol=2e-5, rtol=1e-4)
    assert counters['frames']['ok'] == 2, dict(counters['frames'])


def test_backbone_window_layout_and_explicit_path():
    model = ViT5(arch=dict(embed_dim=DIM, depth=8, num_heads=HEADS), img_size=64,
                 window_size=3).eval()
    assert model.global_attn_indices == (1, 3, 5, 7)
    assert [b.attn.window_size for b in model.blocks] == [3, 0, 3, 0, 3, 0, 3, 0]
    explicit = ViT5(arch=dict(embed_dim=DIM, depth=8, num_heads=HEADS), img_size=64,
                    window_size=3, attn_impl='math').eval()
    explicit.load_state_dict(model.state_dict())
    x = torch.randn(1, 3, 80, 112)
    with torch.no_grad():
        assert torch.allclose(model(x)[0], explicit(x)[0], atol=1e-5, rtol=1e-4)
    with pytest.raises(ValueError, match='global_attn_indices entry 9 is out of range'):
        ViT5(arch=dict(embed_dim=DIM, depth=8, num_heads=HEADS), window_size=3,
             global_attn_indices=(9, ))
    with pytest.raises(ValueError, match="attn_impl must be one of"):
        ViT5(arch=dict(embed_dim=DIM, depth=2, num_heads=HEADS), attn_impl='flash')
