"""LayerScale folded into the branch's output layer: same values and gradients as unfolded,
and folded only where the branch output is larger than the weight."""
import pytest
import torch
import torch.nn as nn

from mmvit5.models.layers import make_plan, scaled_linear


def saved_sizes(fn, params):
    """Sizes of the tensors autograd keeps for backward, parameters (kept anyway) left out."""
    sizes, ptrs = [], {p.data_ptr() for p in params}

    def pack(t):
        if t.data_ptr() not in ptrs:
            sizes.append(t.numel())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return sizes


@pytest.mark.parametrize('rows', [4, 64])  # product form below in_features=16, folded above
def test_scaled_linear_matches_product_in_value_and_gradients(rows):
    torch.manual_seed(0)
    linear = nn.Linear(16, 8).double()
    gamma = nn.Parameter(torch.rand(8, dtype=torch.float64) + 0.5)
    x = torch.randn(rows, 16, dtype=torch.float64, requires_grad=True)
    leaves = (x, linear.weight, linear.bias, gamma)

    out = scaled_linear(x, linear, gamma, plan=make_plan(x))
    grads = torch.autograd.grad(out.square().sum(), leaves)
    ref = gamma * linear(x)
    grads_ref = torch.autograd.grad(ref.square().sum(), leaves)

    assert torch.allclose(out, ref, atol=1e-12)
    for a, b in zip(grads, grads_ref):
        assert torch.allclose(a, b, atol=1e-12)
    assert torch.equal(scaled_linear(x, linear, None, plan=make_plan(x)), linear(x))


@pytest.mark.parametrize('rows', [6, 256])  # product form (<= in_features=16), folded
def test_scaled_linear_keeps_only_its_input_for_backward(rows):
    linear = nn.Linear(16, 8)
    gamma = nn.Parameter(torch.ones(8))
    x = torch.randn(2, rows // 2, 16, requires_grad=True)
    saved = saved_sizes(lambda: scaled_linear(x, linear, gamma, plan=make_plan(x)),
                        [*linear.parameters(), gamma])
    assert saved == [rows * 16]  # neither the output (rows x 8) nor the scaled weight (8 x 16)


@pytest.mark.parametrize('bias', [True, False])
@pytest.mark.parametrize('rows', [4, 64])
def test_scaled_linear_gradcheck_float64(rows, bias):
    torch.manual_seed(0)
    linear = nn.Linear(16, 8, bias=bias).double()
    gamma = torch.rand(8, dtype=torch.float64, requires_grad=True)
    x = torch.randn(2, rows, 16, dtype=torch.float64, requires_grad=True)
    leaves = (x, linear.weight, gamma) + ((linear.bias, ) if bias else ())
    assert torch.autograd.gradcheck(
        lambda x, *_: scaled_linear(x, linear, gamma, plan=make_plan(x)), leaves)


def test_scaled_linear_under_autocast_equals_the_folded_autograd_path():
    torch.manual_seed(0)
    linear = nn.Linear(64, 32)
    gamma = nn.Parameter(torch.rand(32) + 0.5)
    x = torch.randn(300, 64, requires_grad=True)
    leaves = (x, linear.weight, linear.bias, gamma)
    with torch.autocast('cpu', torch.bfloat16):
        out = scaled_linear(x, linear, gamma, plan=make_plan(x))
        ref = nn.functional.linear(x, linear.weight * gamma[:, None], linear.bias * gamma)
    assert out.dtype == ref.dtype == torch.bfloat16 and torch.equal(out, ref)
    grads = torch.autograd.grad(out.float().square().sum(), leaves)
    grads_ref = torch.autograd.grad(ref.float().square().sum(), leaves)
    for a, b in zip(grads, grads_ref):
        assert a.dtype == b.dtype and torch.allclose(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize('triton', ['0', '1'], ids=['torch', 'triton'])
def test_scale_gradient_sums_in_float32_with_half_precision_parameters(triton, monkeypatch):
    """d scale sums ``in`` products per output: summed in bf16 it loses most of its digits;
    both paths sum in float32 and round once."""
    from mmvit5.models.layers.kernels import HAS_TRITON
    if triton == '1' and not HAS_TRITON:
        pytest.skip('triton does not import')
    from mmvit5.models.layers.kernels.layer_scale import layer_scale_grads
    monkeypatch.setenv('MMVIT5_TRITON', triton)
    g = torch.Generator().manual_seed(0)
    n_out, n_in = 16, 3072
    outer = torch.randn(n_out, n_in, generator=g)
    weight, scale, bias = (t.bfloat16() for t in (torch.randn(n_out, n_in, generator=g),
                                                 torch.rand(n_out, generator=g) + 0.5,
                                                 torch.randn(n_out, generator=g)))
    summed = torch.randn(n_out, generator=g)
    if triton == '1':
        from mmvit5.models.layers.kernels import layer_scale_triton
        grad_w, grad_s, grad_b = layer_scale_triton.layer_scale_grads(outer, weight, scale,
                                                                      summed, bias)
    else:
        grad_w, grad_s, grad_b = layer_scale_grads(outer, weight, scale, summed, bias)
    # d W and d b: one product each, rounded once
    assert torch.equal(grad_w, (outer.bfloat16().float() * scale[:, None].float()).bfloat16())
    assert torch.equal(grad_b, (summed.bfloat16().float() * scale.float()).bfloat16())
    # the float64 sum of the products the kernel multiplies (A rounded to the weight's dtype)
    exact = (outer.bfloat16().double() * weight.double()).sum(1) + \
        summed.bfloat16().double() * bias.double()
    assert grad_s.dtype == torch.bfloat16
    torch.testing.assert_close(grad_s.double(), exact.bfloat16().double(), rtol=8e-3, atol=1e-2)
