"""LayerScale folded into the branch's output layer: same values and gradients as unfolded,
and folded only where the branch output is larger than the weight."""
import pytest
import torch
import torch.nn as nn

from mmvit5.models.layers import scaled_linear


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

    out = scaled_linear(x, linear, gamma)
    grads = torch.autograd.grad(out.square().sum(), leaves)
    ref = gamma * linear(x)
    grads_ref = torch.autograd.grad(ref.square().sum(), leaves)

    assert torch.allclose(out, ref, atol=1e-12)
    for a, b in zip(grads, grads_ref):
        assert torch.allclose(a, b, atol=1e-12)
    assert torch.equal(scaled_linear(x, linear), linear(x))


def test_scaled_linear_saves_the_smaller_of_output_and_weight():
    linear = nn.Linear(16, 8)
    gamma = nn.Parameter(torch.ones(8))
    many = torch.randn(4, 64, 16, requires_grad=True)  # 256 rows > 16: fold
    saved = saved_sizes(lambda: scaled_linear(many, linear, gamma), linear.parameters())
    assert 4 * 64 * 8 not in saved and 8 * 16 in saved  # no output, the scaled weight
    few = torch.randn(2, 3, 16, requires_grad=True)  # 6 rows <= 16: product
    saved = saved_sizes(lambda: scaled_linear(few, linear, gamma), linear.parameters())
    assert 2 * 3 * 8 in saved and 8 * 16 not in saved
