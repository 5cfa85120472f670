"""The execution plan and every path it picks, as a matrix on the CPU.

Axes: kernel (sdpa, math, flex forward, the Triton kernels under the interpreter), dtype
(float32, bf16 and fp16 autocast), QK-Norm (rms, ln), windows (on, off), ``with_cp`` (off,
torch). Each combination's outputs and gradients (where the CPU has a backward)
are compared with the float32 SDPA PyTorch path, and the tensors entering attention must have
one dtype: the GPU refuses what the CPU lets through (flex_attention's backward refuses mixed
dtypes).
"""
import itertools
import warnings

import pytest
import torch

from mmvit5.models import ViT5
from mmvit5.models.layers import attention as attention_module
from mmvit5.models.layers import plan as plan_module
from mmvit5.models.layers import windows as windows_module
from mmvit5.models.layers.attention import Attention
from mmvit5.models.layers.kernels import (
    HAS_TRITON,
    dispatch,
    reset_triton_failure,
    triton_failure,
)
from mmvit5.models.layers.plan import ExecutionMode, make_plan

ARCH = dict(embed_dim=64, depth=2, num_heads=2)
LOSS_SCALE = 2.0**12
IMAGE = (1, 3, 32, 48)  # a 2 x 3 grid
# another path in the same dtype: rounding differs (the order of sums, fused casts, and the
# thread count: the math kernel's fp16 QK-Norm bias gradient is 5.4e-3 off on one thread,
# 3.7e-3 on two; 8 fp16 ulps, about the 6 bf16 ulps that bf16 is given)
CLOSE = {torch.float32: dict(rtol=1e-4, atol=1e-5), torch.bfloat16: dict(rtol=5e-2, atol=5e-2),
         torch.float16: dict(rtol=8e-3, atol=8e-3)}
# the default path in half precision against float32
TO_FLOAT32 = {torch.float32: CLOSE[torch.float32], torch.bfloat16: dict(rtol=0.1, atol=0.15),
              torch.float16: dict(rtol=2e-2, atol=0.1)}


def build(norm: str, windows: bool, **kwargs) -> ViT5:
    torch.manual_seed(0)
    model = ViT5(arch=ARCH, img_size=32, norm=norm, out_indices=(0, 1),
                 window_size=2 if windows else 0, global_attn_indices=(1, ), **kwargs)
    model.init_weights()
    for name, param in model.named_parameters():  # LayerScale far from its init
        if 'gamma' in name:
            param.data.uniform_(0.5, 1.5)
    return model


class AttentionInputs:
    """Records the dtypes of q, k, v at every attention call (SDPA, math and flex)."""

    def __init__(self, monkeypatch):
        self.calls = []
        sdpa, math = Attention.attend, attention_module.math_attention
        flex = windows_module.flex_window_attention

        def spy(kind, fn):
            def call(q, k, v, *args):
                self.calls.append((kind, q.dtype, k.dtype, v.dtype))
                return fn(q, k, v, *args)
            return call

        monkeypatch.setattr(Attention, 'attend', staticmethod(spy('sdpa', sdpa)))
        monkeypatch.setattr(attention_module, 'math_attention', spy('math', math))
        monkeypatch.setattr(windows_module, 'flex_window_attention', spy('flex', flex))

    def kinds(self):
        return {kind for kind, *_ in self.calls}

    def one_dtype_each(self):
        return all(q == k == v for _, q, k, v in self.calls)


def run(model: ViT5, dtype: torch.dtype, grad: bool):
    x = torch.randn(IMAGE, generator=torch.Generator().manual_seed(1))
    model.zero_grad(set_to_none=True)
    with torch.set_grad_enabled(grad), \
            torch.autocast('cpu', dtype, enabled=dtype != torch.float32):
        outs = model(x)
    outs = [o.float() for o in outs]
    grads = {}
    if grad:  # a fixed random direction per output (the square of normalised tokens would
        # be nearly constant); scaled as GradScaler would: fp16 gradients underflow without
        g = torch.Generator().manual_seed(2)
        loss = sum((o * torch.randn(o.shape, generator=g)).mean() for o in outs)
        (loss * LOSS_SCALE).backward()
        grads = {n: p.grad / LOSS_SCALE for n, p in model.named_parameters()
                 if p.grad is not None}
    return [o.detach() for o in outs], grads


REFERENCES = {}


def reference(norm: str, windows: bool, grad: bool, dtype: torch.dtype = torch.float32):
    """The default path (SDPA, PyTorch ops, no checkpointing) under ``dtype``."""
    key = norm, windows, grad, dtype
    if key not in REFERENCES:
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv('MMVIT5_TRITON', '0')
            REFERENCES[key] = run(build(norm, windows).train(grad), dtype, grad)
    return REFERENCES[key]


DTYPES = {'fp32': torch.float32, 'bf16': torch.bfloat16, 'fp16': torch.float16}
CASES = [  # (kernel, dtype, norm, windows, with_cp)
    *itertools.product(['sdpa', 'math'], DTYPES, ['rms', 'ln'], [True, False], ['off', 'torch']),
    # flex: forward only (no CPU backward), windowed blocks only
    *itertools.product(['flex'], DTYPES, ['rms', 'ln'], [True], ['off']),
    # the Triton kernels run RMSNorm only: QK-Norm 'ln' takes the modules, as on the GPU
    *itertools.product(['triton'], DTYPES, ['rms'], [True, False], ['off', 'torch']),
]


@pytest.mark.parametrize('kernel, dtype, norm, windows, with_cp', CASES,
                         ids=['-'.join(map(str, c)) for c in CASES])
def test_every_path_equals_the_float32_sdpa_path(kernel, dtype, norm, windows, with_cp,
                                                 monkeypatch):
    if kernel == 'triton' and not HAS_TRITON:
        pytest.skip('triton does not import')
    monkeypatch.setenv('MMVIT5_TRITON', '1' if kernel == 'triton' else '0')
    dtype = DTYPES[dtype]
    grad = kernel != 'flex'
    kwargs = dict(attn_impl={'triton': 'auto'}.get(kernel, kernel))
    if with_cp != 'off':
        kwargs.update(with_cp=True)
    model = build(norm, windows, **kwargs).train(grad)
    x = torch.randn(IMAGE)
    with torch.set_grad_enabled(grad), torch.autocast('cpu', dtype, enabled=dtype != torch.float32):
        plan = model.plan(x)
    assert plan.triton == (kernel == 'triton')
    assert plan.window_kernel == ('flex' if kernel == 'flex' else 'sdpa')
    assert plan.checkpoint == (with_cp != 'off' and grad)
    assert plan.autocast == (None if dtype == torch.float32 else dtype)

    spy = AttentionInputs(monkeypatch)
    outs, grads = run(model, dtype, grad)
    assert spy.one_dtype_each(), spy.calls
    assert spy.kinds() == ({'sdpa' if kernel in ('triton', 'flex') else kernel}
                           | ({'flex'} if kernel == 'flex' else set()))
    assert triton_failure() is None
    # against the default path in the same dtype, closely; that one against float32 loosely
    ref_outs, ref_grads = reference(norm, windows, grad, dtype)
    assert_close(outs, grads, ref_outs, ref_grads, CLOSE[dtype])
    assert_close(*reference(norm, windows, grad, dtype), *reference(norm, windows, grad),
                 TO_FLOAT32[dtype])


def assert_close(outs, grads, ref_outs, ref_grads, tol):
    for out, ref in zip(outs, ref_outs):
        torch.testing.assert_close(out, ref, **tol)
    assert grads.keys() == ref_grads.keys()
    for name, ref in ref_grads.items():
        scale = ref.abs().max().clamp_min(1e-6)  # gradients compared relative to their size
        torch.testing.assert_close(grads[name] / scale, ref / scale, **tol, msg=name)


def test_checkpoint_recomputes_in_the_forward_dtype():
    """bf16 autocast with with_cp on equals with_cp off, bit for bit: the recompute runs in the
    forward's dtype (torch's non-reentrant checkpoint recomputes under the forward's
    autocast)."""
    plain = build('rms', True).train()
    checkpointed = build('rms', True, with_cp=True).train()
    (a, grads_a), (b, grads_b) = run(plain, torch.bfloat16, True), \
        run(checkpointed, torch.bfloat16, True)
    for u, v in zip(a, b):
        assert torch.equal(u, v)
    for name, grad in grads_a.items():
        assert torch.equal(grads_b[name], grad), name


def test_flex_evaluation_at_many_sizes_compiles_once():
    """Evaluation meets a new token count with nearly every image (mmdet keeps the aspect
    ratio): flex compiles one graph with dynamic shapes, and never falls back to the eager
    flex_attention that materialises the scores."""
    from torch._dynamo.utils import counters
    torch._dynamo.reset()
    windows_module._compiled_flex = None
    counters.clear()
    model = build('rms', True, attn_impl='flex').eval()
    ref = build('rms', True).eval()
    with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        for h, w in ((32, 48), (48, 48), (48, 64), (64, 80), (80, 64), (96, 112)):
            x = torch.randn(1, 3, h, w)
            for out, expected in zip(model(x), ref(x)):
                torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-5)
    assert counters['stats']['unique_graphs'] == 1, dict(counters['stats'])
    assert not [w for w in caught if 'materializ' in str(w.message)]


def test_plan_is_decided_once_and_printed(capsys):
    model = build('rms', True, attn_impl='math', with_cp=True).train()
    x = torch.randn(IMAGE)
    plan = model.plan(x)
    assert (plan.device, plan.mode, plan.attention, plan.window_kernel, plan.checkpoint) == \
        ('cpu', ExecutionMode.EAGER, 'math', 'sdpa', True)
    assert str(plan) == ('cpu, eager, float32 (no autocast), fused ops: PyTorch, attention: '
                         'math, windows: sdpa, gradients: on, checkpoint: on, compiled '
                         'blocks: off')
    with torch.no_grad():
        assert model.plan(x).checkpoint is False and not model.plan(x).grad
    model.eval()
    assert model.plan(x).checkpoint is False  # torch checkpointing only in training


def test_one_plan_per_forward(monkeypatch):
    """Every entry point makes one plan and hands it down: no layer makes its own (every
    make_plan, wherever it is called from, asks execution_mode once)."""
    made = []

    def counted():
        made.append(mode())
        return made[-1]

    mode = plan_module.execution_mode
    monkeypatch.setattr(plan_module, 'execution_mode', counted)
    model = build('rms', True, with_cp=True).train()
    x = torch.randn(IMAGE)
    for run in (model, model.forward_features, model.forward_tokens,
                lambda x: model.forward_intermediates(x, norm=True),
                lambda x: model.forward_intermediates(x, indices=1, intermediates_only=True)):
        made.clear()
        run(x)
        assert len(made) == 1


def test_checkpointing_is_torch_only():
    """One mechanism and one name: cp_impl, deprecated, warns whatever its value and runs
    torch's checkpoint; timm's set_grad_checkpointing and grad_checkpointing are with_cp.
    (With compiled blocks: tests/test_qk_norm_rope.py.)"""
    for impl in ('fairscale', 'torch'):
        with pytest.warns(FutureWarning, match=f"cp_impl='{impl}' is deprecated"):
            model = build('rms', True, with_cp=True, cp_impl=impl).train()
        assert model.config.cp_impl is None  # warned once: a new config does not warn again
    assert model.plan(torch.randn(IMAGE)).checkpoint is True
    model.grad_checkpointing = False
    assert model.plan(torch.randn(IMAGE)).checkpoint is False and not model.config.with_cp
    model.set_grad_checkpointing()
    assert model.config.with_cp and model.grad_checkpointing
    assert model.plan(torch.randn(IMAGE)).checkpoint is True


def test_impossible_combinations_are_refused_with_the_reason():
    with pytest.raises(ValueError, match="attn_impl must be one of"):
        ViT5(arch=ARCH, img_size=32, attn_impl='flash')
    model = build('rms', True, attn_impl='flex').train()
    with pytest.raises(ValueError, match="attn_impl='flex' cannot train on the CPU"):
        model(torch.randn(IMAGE))
    with torch.no_grad():  # flex runs forward on the CPU
        assert make_plan(torch.randn(1), 'flex').window_kernel == 'flex'


@pytest.mark.skipif(not HAS_TRITON, reason='triton does not import')
def test_a_failing_triton_kernel_warns_once_and_the_pytorch_path_answers(monkeypatch):
    """A kernel that cannot compile or launch (here: one that raises, as Triton does without
    a C compiler) ends nothing: one warning names the cause and MMVIT5_TRITON=0, the step
    completes on the PyTorch path with its results, and later plans leave Triton."""
    from mmvit5.models.layers.kernels import qk_norm_rope_triton, rms_norm_triton

    def broken(*args, **kwargs):
        raise RuntimeError('Failed to find C compiler. Please specify via CC environment '
                           'variable.')

    monkeypatch.setenv('MMVIT5_TRITON', '1')
    monkeypatch.setattr(rms_norm_triton, 'rms_norm_fwd', broken)
    monkeypatch.setattr(qk_norm_rope_triton, 'qk_norm_rope_fwd', broken)
    model = build('rms', True).train()
    try:
        assert model.plan(torch.randn(IMAGE)).triton
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter('always')
            outs, grads = run(model, torch.float32, True)
        messages = [str(w.message) for w in caught if 'Triton kernel' in str(w.message)]
        assert len(messages) == 1, messages
        assert 'C compiler' in messages[0] and 'MMVIT5_TRITON=0' in messages[0]
        assert 'C compiler' in triton_failure()
        assert not model.plan(torch.randn(IMAGE)).triton
        ref_outs, ref_grads = reference('rms', True, True)
        for out, ref in zip(outs, ref_outs):
            torch.testing.assert_close(out, ref, **CLOSE[torch.float32])
        for name, ref in ref_grads.items():
            torch.testing.assert_close(grads[name], ref, rtol=1e-4, atol=1e-6, msg=name)
    finally:
        reset_triton_failure()
    assert dispatch.triton_failure() is None
