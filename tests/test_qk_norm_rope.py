"""QK-Norm + RoPE as one op, and the rotated q, k recomputed in backward instead of
kept: gradients equal the plain path, and a block keeps no more for backward than timm's."""
import pytest
import torch
import torch.nn as nn

from benchmarks.breakdown import observe_saved, saved_activations, setup_plan
from benchmarks.core import Setup
from mmvit5.models import ViT5
from mmvit5.models.layers import apply_rope, make_plan
from mmvit5.models.layers.kernels.qk_norm_rope import qk_norm_rope
from mmvit5.models.layers.norm import RMSNorm
from mmvit5.models.layers.recompute import RecomputeSaved

CPU32 = Setup(torch.device('cpu'), torch.float32, 1, 0, 1)


def table(T: int, D: int, dtype=torch.float64) -> torch.Tensor:
    angles = torch.rand(T, D // 2, dtype=dtype) * 6
    return torch.stack((angles.cos(), angles.sin()), -1)


def test_qk_norm_rope_gradcheck_float64():
    """The one PyTorch path of QK-Norm + RoPE (the fused op's), forward and backward."""
    torch.manual_seed(0)
    B, T, H, D = 2, 5, 3, 8
    rope = table(T, D)
    qkv = torch.randn(B, T, 3, H, D, dtype=torch.float64, requires_grad=True)
    weights = [(torch.rand(D, dtype=torch.float64) + 0.5).requires_grad_() for _ in range(2)]
    assert torch.autograd.gradcheck(
        lambda qkv, wq, wk: qk_norm_rope(qkv, wq, wk, rope, 1e-6, use_triton=False)[:2],
        (qkv, *weights))


def test_qk_norm_rope_equals_the_two_modules_in_value_and_gradient():
    torch.manual_seed(0)
    norms = [RMSNorm(64) for _ in range(2)]
    for norm in norms:
        nn.init.uniform_(norm.weight, 0.5, 1.5)
    qkv = torch.randn(2, 50, 3, 12, 64, requires_grad=True)
    rope = table(50, 64, torch.float32)
    fused = qk_norm_rope(qkv, norms[0].weight, norms[1].weight, rope, 1e-6, use_triton=False)[:2]
    plan = make_plan(qkv)
    plain = [apply_rope(norm(qkv[:, :, i], plan=plan), rope[:, None]).transpose(1, 2)
             for i, norm in enumerate(norms)]
    params = (qkv, norms[0].weight, norms[1].weight)
    grad = [torch.randn_like(t) for t in plain]
    for u, v in zip(fused, plain):
        assert torch.equal(u, v)
    a = torch.autograd.grad(fused, params, grad)
    b = torch.autograd.grad(plain, params, grad)
    for u, v in zip(a, b):
        assert torch.allclose(u, v, rtol=1e-5, atol=1e-6)


def grads(model: nn.Module, images: torch.Tensor, autocast: bool = False):
    model.zero_grad(set_to_none=True)
    with torch.autocast('cpu', torch.bfloat16, enabled=autocast):
        out = model(images)[0]
    out.float().square().mean().backward()
    return out.detach(), {n: p.grad.clone() for n, p in model.named_parameters()
                          if p.grad is not None}


def kept_twin(model: ViT5, **kwargs) -> ViT5:
    """``model`` under torch checkpointing: its plan keeps the rotated q and k (checkpointing
    recomputes whole blocks instead), the reference for the recomputing path."""
    twin = ViT5(with_cp=True, **kwargs).train()
    twin.blocks = twin.blocks[:len(model.blocks)]
    twin.out_indices = model.out_indices
    twin.load_state_dict(model.state_dict())
    return twin


@pytest.mark.slow  # ViT5-B training steps
@pytest.mark.parametrize('kwargs', [dict(), dict(window_size=7, global_attn_indices=(1, ))],
                         ids=['global', 'windowed'])
def test_vit5_b_training_path_equals_the_unfused_model_float32(kwargs):
    """ViT5-B size (width 768, 12 heads of 64, 4 registers), 224x224, float32: output and
    every parameter gradient of the fused/recomputing path against autograd of the modules."""
    torch.manual_seed(0)
    kwargs = dict(arch='base', img_size=224, out_indices=-1, out_type='featmap', **kwargs)
    model = ViT5(**kwargs).train()
    if 'window_size' in kwargs:
        model.blocks = model.blocks[:3]
        model.out_indices = [2]
    images = torch.randn(1, 3, 224, 224)
    out, fused = grads(model, images)
    ref_out, plain = grads(kept_twin(model, **kwargs), images)
    assert torch.equal(out, ref_out) and fused.keys() == plain.keys() and len(plain) > 30
    for name, grad in plain.items():
        assert torch.allclose(fused[name], grad, rtol=1e-5, atol=1e-7), name


def test_training_path_under_autocast_equals_the_unfused_model():
    torch.manual_seed(0)
    kwargs = dict(arch=dict(embed_dim=128, depth=2, num_heads=2), img_size=64)
    model = ViT5(**kwargs).train()
    images = torch.randn(2, 3, 64, 96)
    out, fused = grads(model, images, autocast=True)
    ref_out, plain = grads(kept_twin(model, **kwargs), images, autocast=True)
    assert torch.equal(out, ref_out)
    for name, grad in plain.items():
        assert torch.allclose(fused[name], grad, rtol=1e-3, atol=1e-6), name


@pytest.mark.parametrize('autocast', [False, True])
def test_block_keeps_no_more_for_backward_than_timm_vit_block(autocast):
    from timm.models.vision_transformer import Block as TimmBlock
    torch.manual_seed(0)
    setup = Setup(torch.device('cpu'), torch.bfloat16 if autocast else torch.float32, 1, 0, 1)
    model = ViT5(arch='base', img_size=224).train()
    grid = (14, 14)
    rope = model.rope_table(grid, torch.float32, torch.device('cpu'))
    x5 = torch.randn(1, rope.shape[0], 768, requires_grad=True)
    x = torch.randn(1, 1 + 14 * 14, 768, requires_grad=True)
    ours = saved_activations('vit5', model.blocks[0], (x5, rope), setup, setup_plan(setup))
    timm = saved_activations('timm', TimmBlock(768, 12, qkv_bias=True).train(), (x, ), setup)
    recomputed = [s for s in ours if s.recomputed]
    assert [s.op for s in recomputed] == ['scaled_dot_product_attention'] * 2  # rotated q, k
    # activations per token (ViT-5 has 4 registers more); left out: the 1/rms and mean
    # statistics (last dim 1; QK-Norm's (2, heads) per token) and the RoPE table (last dim
    # 2, one for all blocks)
    def per_token(saved, tokens):
        return sum(s.mib for s in saved
                   if s.shape and s.shape[-1] > 2 and s.shape[-2:] != (2, 12)) / tokens
    assert per_token(ours, x5.shape[1]) <= per_token(timm, x.shape[1])


def test_recompute_saved_keeps_what_it_does_not_know_and_observers_see_through_it():
    a = torch.randn(4, 4, requires_grad=True)
    seen = []
    with observe_saved(lambda t, recomputed: seen.append((tuple(t.shape), recomputed))):
        with RecomputeSaved() as saved:
            b = saved.register(a * 2, lambda: a.detach() * 2)
            c = (b * a.sin()).sum()  # mul saves b (recomputed) and sin(a) (kept)
    assert sorted(r for _, r in seen) == [False, False, True]  # a (sin), sin(a), b
    c.backward()
    assert torch.allclose(a.grad, 2 * a.sin() + 2 * a * a.cos())


def test_attention_under_checkpointing_does_not_nest_hooks():
    torch.manual_seed(0)
    model = ViT5(arch=dict(embed_dim=64, depth=2, num_heads=2), img_size=64,
                 with_cp=True).train()
    x = torch.randn(1, 3, 64, 64)
    assert model.plan(x).checkpoint is True and not model.plan(x).recompute_qk(None)
    model(x)[0].sum().backward()
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)
    assert make_plan(torch.randn(1)).recompute_qk(None)


def test_training_forward_traces_into_one_graph():
    """No graph break under torch.compile: the hooks and the custom Functions are eager-only."""
    import torch._dynamo as dynamo
    model = ViT5(arch=dict(embed_dim=64, depth=2, num_heads=2), img_size=64, window_size=2,
                 global_attn_indices=(1, )).train()
    explained = dynamo.explain(lambda x: model(x)[0].sum())(torch.randn(1, 3, 64, 64))
    assert explained.graph_break_count == 0, explained.break_reasons


@pytest.mark.slow  # torch.compile on CPU
def test_compile_blocks_matches_eager_with_and_without_checkpointing():
    torch.manual_seed(0)
    arch = dict(embed_dim=64, depth=2, num_heads=2)
    eager = ViT5(arch=arch, img_size=64).train()
    compiled = ViT5(arch=arch, img_size=64, compile_blocks=True).train()
    compiled.load_state_dict(eager.state_dict())
    x = torch.randn(1, 3, 64, 64)
    a = eager(x)[0]
    a.square().mean().backward()
    for checkpointing in (False, True):  # the compiled blocks run inside torch's checkpoint
        compiled.zero_grad(set_to_none=True)
        compiled.grad_checkpointing = checkpointing
        b = compiled(x)[0]
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-5)
        b.square().mean().backward()
        for (name, p), q in zip(eager.named_parameters(), compiled.parameters()):
            torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-6, msg=name)
