"""The fused QK-Norm + RoPE op (mmvit5.models.layers.kernels): Triton kernels (under Triton's
interpreter without CUDA, see conftest.py) against the PyTorch path and the unfused modules,
in values, gradients, layouts, what is saved for backward and how many ops run."""
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from mmvit5.models.layers import apply_rope, make_plan
from mmvit5.models.layers.kernels import HAS_TRITON, dispatch, triton_enabled
from mmvit5.models.layers.kernels.qk_norm_rope import qk_norm_rope
from mmvit5.models.layers.norm import RMSNorm

needs_triton = pytest.mark.skipif(not HAS_TRITON, reason='triton does not import')
EPS = 1e-6
T = 1 + 5 * 7 + 4  # class token, a 5x7 grid, 4 registers: odd and no power of two


def inputs(B: int, H: int, D: int, dtype: torch.dtype, with_rope: bool, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    qkv = torch.randn(B, T, 3, H, D, generator=g).to(dtype).requires_grad_()
    q_norm, k_norm = RMSNorm(D, EPS), RMSNorm(D, EPS)
    for norm in (q_norm, k_norm):
        norm.weight.data.uniform_(0.5, 1.5, generator=g)
    fp = torch.promote_types(dtype, torch.float32)
    angles = torch.rand(T, D // 2, generator=g, dtype=fp) * 6
    rope = torch.stack((angles.cos(), angles.sin()), -1) if with_rope else None
    return qkv, q_norm, k_norm, rope


def unfused(qkv, q_norm, k_norm, rope, out_dtype):
    """Today's modules with plain autograd: unbind, RMSNorm, apply_rope, cast."""
    q, k, v = qkv.unbind(2)
    out = []
    for x, norm in ((q, q_norm), (k, k_norm)):
        x = norm(x, plan=make_plan(x)._replace(triton=False))
        if rope is not None:
            x = apply_rope(x, rope[:, None])
        out.append(x.to(out_dtype).transpose(1, 2))
    return out[0], out[1], v.transpose(1, 2)


def fused(qkv, q_norm, k_norm, rope, out_dtype, triton: bool, monkeypatch):
    monkeypatch.setenv('MMVIT5_TRITON', '1' if triton else '0')
    return qk_norm_rope(qkv, q_norm.weight, k_norm.weight, rope, EPS, out_dtype,
                        use_triton=triton_enabled(qkv))


def values_and_grads(outs, qkv, q_norm, k_norm, seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    grads = [torch.randn(o.shape, generator=g).to(o.dtype) for o in outs]
    return [o.detach() for o in outs] + list(
        torch.autograd.grad(outs, (qkv, q_norm.weight, k_norm.weight), grads))


def assert_close(a, b, dtype):
    # bfloat16: the kernels' float32 sums may flip one rounding of the normalised value
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=2**-7, atol=1e-3)
    torch.testing.assert_close(a.float(), b.float(), **tol)


@needs_triton
@pytest.mark.parametrize('dtype', [torch.float32, torch.bfloat16], ids=['fp32', 'bf16'])
@pytest.mark.parametrize('with_rope', [True, False], ids=['rope', 'norm-only'])
@pytest.mark.parametrize('B,H,D', [(1, 2, 64), (2, 3, 32), (1, 1, 72)])  # 72: xlarge
def test_triton_kernels_equal_pytorch_path_and_unfused_modules(dtype, with_rope, B, H, D,
                                                               monkeypatch):
    qkv, q_norm, k_norm, rope = inputs(B, H, D, dtype, with_rope)
    names = ['q', 'k', 'v', 'd_qkv', 'd_q_weight', 'd_k_weight']
    ref = values_and_grads(unfused(qkv, q_norm, k_norm, rope, dtype), qkv, q_norm, k_norm)
    torch_path = values_and_grads(fused(qkv, q_norm, k_norm, rope, dtype, False, monkeypatch),
                                  qkv, q_norm, k_norm)
    kernels = values_and_grads(fused(qkv, q_norm, k_norm, rope, dtype, True, monkeypatch), qkv,
                               q_norm, k_norm)
    for name, r, p, k in zip(names, ref, torch_path, kernels):
        assert r.dtype == p.dtype == k.dtype and r.shape == p.shape == k.shape, name
        if name in ('q', 'k', 'v'):  # the same kernels as the modules: the same bits
            assert torch.equal(p, r), name
        else:
            assert_close(p, r, dtype)
        assert_close(k, p, dtype)
    if dtype == torch.bfloat16:  # the roundings are the modules': nearly all bits agree
        for r, k in zip(ref[:2], kernels[:2]):
            assert (r != k).float().mean() < 0.01


@needs_triton
def test_autocast_dtype_output_and_unused_gradients(monkeypatch):
    """out_dtype is autocast's (float32 qkv -> bfloat16 q, k), one rounding at the end; an
    output without gradient (v here) gets zeros in its slot of d(qkv)."""
    qkv, q_norm, k_norm, rope = inputs(1, 2, 32, torch.float32, True)
    results = []
    for triton in (False, True):
        q, k, v = fused(qkv, q_norm, k_norm, rope, torch.bfloat16, triton, monkeypatch)
        assert q.dtype == k.dtype == torch.bfloat16 and v.dtype == torch.float32
        results.append([q, k] + list(torch.autograd.grad((q * k).float().sum(), qkv)))
    ref = unfused(qkv, q_norm, k_norm, rope, torch.bfloat16)
    for (q, k, d_qkv) in results:
        assert torch.equal(q, ref[0]) and torch.equal(k, ref[1])
        assert not d_qkv[:, :, 2].any() and d_qkv[:, :, :2].all()
    torch.testing.assert_close(results[1][2], results[0][2], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize('triton', [False, pytest.param(True, marks=needs_triton)],
                         ids=['torch', 'triton'])
def test_layouts_q_k_new_token_major_v_a_view(triton, monkeypatch):
    B, H, D = 2, 3, 32
    qkv, q_norm, k_norm, rope = inputs(B, H, D, torch.float32, True)
    q, k, v = fused(qkv, q_norm, k_norm, rope, None, triton, monkeypatch)
    token_major = torch.empty(B, T, H, D).transpose(1, 2).stride()
    for x in (q, k):
        assert x.shape == (B, H, T, D) and x.stride() == token_major
        assert x.untyped_storage().data_ptr() != qkv.untyped_storage().data_ptr()
    assert v.shape == (B, H, T, D) and v._is_view()
    assert v.data_ptr() == qkv[:, :, 2].data_ptr() and v.stride() == (T * 3 * H * D, D,
                                                                       3 * H * D, 1)
    d_qkv = torch.autograd.grad((q.sum() + k.sum() + v.sum()), qkv)[0]
    assert d_qkv.shape == qkv.shape and d_qkv.is_contiguous()


@pytest.mark.parametrize('triton', [False, pytest.param(True, marks=needs_triton)],
                         ids=['torch', 'triton'])
def test_saves_qkv_statistics_weights_and_table_only(triton, monkeypatch):
    B, H, D = 1, 2, 32
    qkv, q_norm, k_norm, rope = inputs(B, H, D, torch.bfloat16, True)
    saved = []

    def pack(t):
        saved.append(t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        q, k, v = fused(qkv, q_norm, k_norm, rope, torch.bfloat16, triton, monkeypatch)
    assert [tuple(t.shape) for t in saved] == [(B, T, 3, H, D), (B, T, 2, H), (D, ), (D, ),
                                               (T, D // 2, 2)]
    assert saved[0] is qkv and saved[1].dtype == torch.float32
    assert saved[2] is q_norm.weight and saved[3] is k_norm.weight
    outputs = {x.untyped_storage().data_ptr() for x in (q, k)}
    assert not outputs & {t.untyped_storage().data_ptr() for t in saved}


def test_pytorch_path_gradcheck_float64(monkeypatch):
    monkeypatch.setenv('MMVIT5_TRITON', '0')
    qkv, q_norm, k_norm, rope = inputs(2, 2, 8, torch.float64, True)
    weights = [n.weight.detach().double().requires_grad_() for n in (q_norm, k_norm)]
    assert torch.autograd.gradcheck(
        lambda x, wq, wk: qk_norm_rope(x, wq, wk, rope, EPS, use_triton=False),
        (qkv.detach().requires_grad_(), *weights))


class CountOps(TorchDispatchMode):
    """The ops dispatched, view ops (no kernel) left out."""

    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not func.is_view:
            self.ops.append(str(func.overloadpacket))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize('triton', [False, pytest.param(True, marks=needs_triton)],
                         ids=['torch', 'triton'])
def test_forward_and_backward_are_one_op_each_and_one_kernel_each(triton, monkeypatch):
    """Forward + backward dispatch the forward op, the backward op and the weight-gradient
    reduction, nothing else; each Triton op launches its kernel once."""
    qkv, q_norm, k_norm, rope = inputs(2, 3, 32, torch.bfloat16, True)
    grads = [torch.randn(2, 3, T, 32, dtype=torch.bfloat16) for _ in range(3)]
    launches = []
    if triton:
        from mmvit5.models.layers.kernels import qk_norm_rope_triton as kernels
        hooked = [kernels._qk_norm_rope_fwd_kernel, kernels._qk_norm_rope_bwd_kernel]
        for kernel in hooked:
            kernel.pre_run_hooks.append(lambda *a, kernel=kernel, **k: launches.append(kernel))
    try:
        with CountOps() as counted:
            outs = fused(qkv, q_norm, k_norm, rope, torch.bfloat16, triton, monkeypatch)
            torch.autograd.grad(outs, (qkv, q_norm.weight, k_norm.weight), grads)
    finally:
        for kernel in hooked if triton else ():
            kernel.pre_run_hooks.pop()
    suffix = '_triton' if triton else ''
    assert counted.ops == [f'mmvit5.qk_norm_rope_fwd{suffix}', f'mmvit5.qk_norm_rope_bwd{suffix}',
                           'aten.sum']
    assert launches == (hooked if triton else [])


def test_compiled_graph_has_no_break_and_equals_eager(monkeypatch):
    """fullgraph compile of the op with attention (the PyTorch path: no GPU here, and Triton's
    interpreter kernels cannot be traced)."""
    monkeypatch.setenv('MMVIT5_TRITON', '0')
    qkv, q_norm, k_norm, rope = inputs(1, 2, 32, torch.float32, True)

    def step(qkv, wq, wk):
        q, k, v = qk_norm_rope(qkv, wq, wk, rope, EPS, use_triton=False)
        return torch.nn.functional.scaled_dot_product_attention(q, k, v).square().sum()

    params = (qkv, q_norm.weight, k_norm.weight)
    compiled = torch.compile(step, fullgraph=True)
    eager_loss = step(*params)
    eager = torch.autograd.grad(eager_loss, params)
    loss = compiled(*params)
    for a, b in zip((loss, *torch.autograd.grad(loss, params)), (eager_loss, *eager)):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_bad_inputs_and_switch_values_are_named(monkeypatch):
    qkv, q_norm, k_norm, rope = inputs(1, 2, 32, torch.float32, True)
    w = q_norm.weight
    with pytest.raises(ValueError, match=r'\(B, T, 3, heads, head_dim\).*\(1, 40, 192\)'):
        qk_norm_rope(qkv.flatten(2), w, w, rope, EPS, use_triton=False)
    with pytest.raises(ValueError, match='contiguous'):
        qk_norm_rope(torch.randn(1, T, 3, 2, 64)[..., ::2], w, w, rope, EPS, use_triton=False)
    with pytest.raises(ValueError, match=r'k_weight must be \(32, \).*\(16,\)'):
        qk_norm_rope(qkv, w, w[:16], rope, EPS, use_triton=False)
    with pytest.raises(ValueError, match=r'rope must be .*\(40, 16, 2\).*\(39, 16, 2\)'):
        qk_norm_rope(qkv, w, w, rope[1:], EPS, use_triton=False)
    monkeypatch.setenv('MMVIT5_TRITON', 'yes')
    with pytest.raises(ValueError, match="MMVIT5_TRITON must be .*'yes'"):
        triton_enabled(qkv)


def test_dispatch_defaults_to_triton_on_cuda_only(monkeypatch):
    monkeypatch.delenv('MMVIT5_TRITON', raising=False)
    assert triton_enabled(torch.empty(1, device='meta')) is False
    assert triton_enabled(torch.empty(1)) is False
    monkeypatch.setenv('MMVIT5_TRITON', '0')
    assert triton_enabled(torch.empty(1)) is False
    if HAS_TRITON and not torch.cuda.is_available():  # conftest.py set TRITON_INTERPRET
        monkeypatch.setenv('MMVIT5_TRITON', '1')
        assert triton_enabled(torch.empty(1)) is True
        monkeypatch.setattr(dispatch, 'INTERPRET', False)  # kernels decorated without it
        with pytest.raises(RuntimeError, match='set TRITON_INTERPRET=1 before importing'):
            triton_enabled(torch.empty(1))
