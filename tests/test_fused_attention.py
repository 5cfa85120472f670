"""The Triton QK-Norm + RoPE kernels inside ViT5 (run here under Triton's interpreter, as
``MMVIT5_TRITON=1`` forces them): the same model, values and gradients, global and windowed."""
import pytest
import torch

from benchmarks.breakdown import DispatchCount
from mmvit5.models import ViT5

pytestmark = pytest.mark.skipif(not __import__('mmvit5.models.layers.kernels',
                                               fromlist=['HAS_TRITON']).HAS_TRITON,
                                reason='triton is not installed')


def build(**kwargs):
    torch.manual_seed(0)
    return ViT5(arch=dict(embed_dim=64, depth=2, num_heads=2), img_size=32,
                out_indices=(0, 1), **kwargs).train()


def run(model, x):
    model.zero_grad()
    outs = model(x)
    sum((o * torch.linspace(-1, 1, o.shape[1])[:, None, None]).sum() for o in outs).backward()
    return [o.detach() for o in outs], {n: p.grad.clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize('kwargs', [dict(), dict(window_size=2, global_attn_indices=(1, ))])
def test_triton_path_equals_the_pytorch_path(monkeypatch, kwargs):
    model, x = build(**kwargs), torch.randn(2, 3, 48, 80)
    monkeypatch.setenv('MMVIT5_TRITON', '0')
    ref_outs, ref_grads = run(model, x)
    monkeypatch.setenv('MMVIT5_TRITON', '1')
    outs, grads = run(model, x)
    for out, ref in zip(outs, ref_outs):
        torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-4)
    for name, grad in grads.items():
        torch.testing.assert_close(grad, ref_grads[name], atol=1e-4, rtol=1e-3, msg=name)


def test_one_fused_op_each_way_per_attention(monkeypatch):
    """The q/k chain of a block's forward + backward: the forward op, one more forward op
    that remakes the q and k attention saved (instead of keeping them), the backward op."""
    monkeypatch.setenv('MMVIT5_TRITON', '1')
    model, x = build(), torch.randn(1, 3, 32, 32)
    rope = model.rope_table((2, 2), torch.float32, x.device)
    tokens = torch.randn(1, rope.shape[0], 64, requires_grad=True)
    with DispatchCount() as counted:
        model.blocks[0](tokens, rope, plan=model.plan(x)).sum().backward()
    fused = {name: n for name, n in counted.ops.items() if name.startswith('mmvit5.qk_')}
    assert sorted(fused.values()) == [1, 2], fused  # forward twice, backward once
    assert not any('complex' in name for name in counted.ops)  # no unfused rotation
