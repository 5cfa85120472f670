"""RMSNorm's hand-written backward against autograd of the composite form."""
import pytest
import torch
import torch.nn.functional as F

from mmvit5.models.layers import make_plan
from mmvit5.models.layers.kernels import rms_norm as norm_module
from mmvit5.models.layers.norm import RMSNorm


def composite(x, weight, eps):
    """The released implementation's formula, differentiated by autograd."""
    return F.rms_norm(x.float(), (x.shape[-1], ), eps=eps).type_as(x) * weight


def test_rmsnorm_gradcheck_float64():
    norm = RMSNorm(8).double()
    norm.weight.data.uniform_(0.5, 1.5)
    x = torch.randn(3, 5, 8, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x: norm(x, plan=make_plan(x)), (x, ))


# float32 takes ATen's fused kernel, bfloat16 the composite; 768 is ViT-B's width (vectorised).
# fused=False is what a torch without aten::_fused_rms_norm (before 2.9) runs.
@pytest.mark.parametrize('fused', [True, False])
@pytest.mark.parametrize('dim', [16, 768])
@pytest.mark.parametrize('dtype', [torch.float32, torch.bfloat16])
def test_rmsnorm_forward_and_backward_equal_composite(dtype, dim, fused, monkeypatch):
    monkeypatch.setattr(norm_module, 'FUSED_RMS_NORM', fused and norm_module.FUSED_RMS_NORM)
    norm = RMSNorm(dim)
    norm.weight.data.uniform_(0.5, 1.5)
    x = (3 * torch.randn(2, 7, dim)).to(dtype).requires_grad_()
    x_ref = x.detach().clone().requires_grad_()
    w_ref = norm.weight.detach().clone().requires_grad_()
    out, expected = norm(x, plan=make_plan(x)), composite(x_ref, w_ref, norm.eps)
    assert out.dtype == expected.dtype
    assert torch.equal(out, expected)
    grad = torch.randn_like(out)
    out.backward(grad)
    expected.backward(grad)
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=2e-2, atol=2e-2)
    assert x.grad.dtype == dtype
    torch.testing.assert_close(x.grad, x_ref.grad, **tol)
    torch.testing.assert_close(norm.weight.grad, w_ref.grad, **tol)


def test_rmsnorm_frozen_weight_has_no_grad():
    norm = RMSNorm(8).requires_grad_(False)
    x = torch.randn(4, 8, requires_grad=True)
    norm(x, plan=make_plan(x)).sum().backward()
    assert norm.weight.grad is None and x.grad is not None
