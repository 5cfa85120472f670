"""The block's other fused kernels (token RMSNorm, LayerScale's backward) against the PyTorch
path, under Triton's interpreter without CUDA (conftest.py), and the launch count of one
block's forward + backward on the GPU code path against timm's ViT block."""
import collections

import pytest
import timm
import torch
import torch.nn as nn

from benchmarks.breakdown import DispatchCount
from mmvit5.models import ViT5
from mmvit5.models.layers import RMSNorm, make_plan, scaled_linear
from mmvit5.models.layers.kernels import HAS_TRITON

pytestmark = pytest.mark.skipif(not HAS_TRITON, reason='triton does not import')


def assert_close(a, b, dtype, msg='', bf16_atol=2e-3):
    # bfloat16: float32 sums in another order may flip a rounding now and then
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else \
        dict(rtol=2**-7, atol=bf16_atol)
    torch.testing.assert_close(a.float(), b.float(), msg=lambda m: f'{msg}: {m}', **tol)


def both_paths(monkeypatch, fn):
    """``fn()`` on the PyTorch path, then on the Triton path."""
    results = []
    for flag in ('0', '1'):
        monkeypatch.setenv('MMVIT5_TRITON', flag)
        results.append(fn())
    return results


@pytest.mark.parametrize('x_dtype,w_dtype', [(torch.float32, torch.float32),
                                             (torch.bfloat16, torch.bfloat16),
                                             (torch.bfloat16, torch.float32),
                                             (torch.float16, torch.float32)])
@pytest.mark.parametrize('shape', [(2, 45, 96), (3, 64)])  # C no power of two; 2-D
def test_rms_norm_kernels_equal_pytorch_path(monkeypatch, x_dtype, w_dtype, shape):
    g = torch.Generator().manual_seed(0)
    norm = RMSNorm(shape[-1]).to(w_dtype)
    norm.weight.data.uniform_(0.5, 1.5, generator=g)
    # a transposed view: the kernels take a contiguous copy
    x = torch.randn(shape[::-1], generator=g).to(x_dtype).t() if len(shape) == 2 else \
        torch.randn(shape, generator=g).to(x_dtype)
    x.requires_grad_()
    grad = torch.randn(shape, generator=g)

    def run():
        out = norm(x, plan=make_plan(x))
        return [out.detach(), out.dtype,
                *torch.autograd.grad(out, (x, norm.weight), grad.to(out.dtype))]

    ref, fused = both_paths(monkeypatch, run)
    assert fused[1] == ref[1]
    for name, a, b in zip(('out', 'dtype', 'x grad', 'weight grad'), fused, ref):
        if name != 'dtype':
            assert a.dtype == b.dtype, name
            assert_close(a, b, x_dtype, name)


@pytest.mark.parametrize('bias', [True, False])
@pytest.mark.parametrize('autocast', [False, True])
@pytest.mark.parametrize('rows', [6, 200])  # below and above in_features: scaled / folded
def test_layer_scale_kernel_equals_pytorch_path(monkeypatch, bias, autocast, rows):
    g = torch.Generator().manual_seed(0)
    linear = nn.Linear(40, 24, bias=bias)
    gamma = nn.Parameter(torch.rand(24, generator=g) + 0.5)
    x = torch.randn(rows, 40, generator=g, requires_grad=True)
    grad = torch.randn(rows, 24, generator=g)
    leaves = [x, linear.weight, gamma] + ([linear.bias] if bias else [])

    def run():
        with torch.autocast('cpu', torch.bfloat16, enabled=autocast):
            out = scaled_linear(x, linear, gamma, plan=make_plan(x))
        return [out.detach(), *torch.autograd.grad(out, leaves, grad.to(out.dtype))]

    ref, fused = both_paths(monkeypatch, run)
    dtype = torch.bfloat16 if autocast else torch.float32
    for name, a, b in zip(('out', 'x', 'weight', 'gamma', 'bias'), fused, ref):
        # under autocast the folded product is bfloat16, the scaled output float32 (as
        # released: gamma * branch); the gradients have their leaves' dtypes
        assert name == 'out' or a.dtype == b.dtype, name
        assert_close(a, b, dtype, name, bf16_atol=1e-2)  # rounded in another order


def test_layer_scale_kernel_with_a_frozen_weight(monkeypatch):
    """Only the gradients asked for come back (frozen_stages freezes weights, not gammas)."""
    monkeypatch.setenv('MMVIT5_TRITON', '1')
    linear = nn.Linear(8, 8).requires_grad_(False)
    gamma = nn.Parameter(torch.ones(8))
    x = torch.randn(5, 8)
    out = scaled_linear(x, linear, gamma, plan=make_plan(x))
    out.sum().backward()
    assert linear.weight.grad is None and linear.bias.grad is None
    assert gamma.grad is not None and torch.isfinite(gamma.grad).all()


def block_launches(block, rope, autocast: bool) -> collections.Counter:
    x = torch.randn(2, 1 + 8 * 8 + 4, 64, requires_grad=True)
    with torch.autocast('cpu', torch.bfloat16, enabled=autocast), DispatchCount() as counted:
        out = block(x) if rope is None else block(x, rope, plan=make_plan(x))
        out.float().sum().backward()
    return counted.ops


@pytest.mark.parametrize('autocast', [False, True], ids=['float32', 'bf16-autocast'])
def test_block_launches_at_most_1_3x_timm(monkeypatch, autocast):
    """One ViT5 block's forward + backward launches at most 1.3x the ops of timm's ViT block
    (issue 22): the CUDA code path (MMVIT5_TRITON=1 takes it here, kernels interpreted),
    where ViT-5's norms, QK-Norm + RoPE and LayerScale run as fused kernels."""
    monkeypatch.setenv('MMVIT5_TRITON', '1')
    model = ViT5(arch=dict(embed_dim=64, depth=1, num_heads=2), img_size=32,
                 out_indices=(0, )).train()
    ours = block_launches(model.blocks[0], model.rope_table((8, 8), torch.float32, 'cpu'),
                          autocast)
    theirs = block_launches(timm.models.vision_transformer.Block(64, 2, qkv_bias=True).train(),
                            None, autocast)
    assert sum(ours.values()) <= 1.3 * sum(theirs.values()), (sorted(ours.items()),
                                                              sorted(theirs.items()))
    # and no unfused chain left: each ViT-5 part is its fused op
    assert {op: n for op, n in ours.items() if op.startswith('mmvit5.')} == {
        'mmvit5.rms_norm_fwd_triton': 2, 'mmvit5.rms_norm_bwd_triton': 2,
        'mmvit5.qk_norm_rope_fwd_triton': 2, 'mmvit5.qk_norm_rope_bwd_triton': 1,
        'mmvit5.layer_scale_grads_triton': 2}


@pytest.mark.parametrize('triton', ['0', '1'], ids=['torch', 'triton'])
def test_out_dtype_is_the_cast_the_matmul_would_make(monkeypatch, triton):
    """A block's pre-norms write autocast's dtype: the same values as the float32 output cast
    by the next matmul's autocast, the same gradients."""
    monkeypatch.setenv('MMVIT5_TRITON', triton)
    g = torch.Generator().manual_seed(0)
    norm = RMSNorm(48)
    norm.weight.data.uniform_(0.5, 1.5, generator=g)
    x = torch.randn(3, 10, 48, generator=g, requires_grad=True)
    grad = torch.randn(3, 10, 48, generator=g).bfloat16()
    outs = []
    for out_dtype in (None, torch.bfloat16):
        with torch.autocast('cpu', torch.bfloat16):
            out = norm(x, out_dtype=out_dtype, plan=make_plan(x))
            cast = out.to(torch.bfloat16)  # what a Linear under autocast would read
        outs.append((cast.detach(), out.dtype, *torch.autograd.grad(cast, (x, norm.weight),
                                                                       grad)))
    (ref, ref_dtype, *ref_grads), (got, got_dtype, *got_grads) = outs
    assert (ref_dtype, got_dtype) == (torch.float32, torch.bfloat16)
    assert torch.equal(got, ref)
    for a, b in zip(got_grads, ref_grads):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)
