"""The CUDA path (``pytest -m cuda``; tools/gpu_check.sh runs these on a GPU machine).

Every test compares CUDA against the CPU result of the same weights and inputs, so a wrong
kernel, a silent fallback or a dtype slip fails. Without CUDA the module is skipped.
"""
import pytest
import torch
from mmcv.ops import batched_nms, nms, roi_align
from torch.nn.attention import SDPBackend, sdpa_kernel

from mmvit5.models import ViT5

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(not torch.cuda.is_available(), reason='no CUDA device')]

TINY = dict(embed_dim=128, depth=4, num_heads=4)


@pytest.fixture(autouse=True)
def exact_float32():
    """TF32 matmuls would make CUDA float32 differ from CPU by ~1e-3."""
    previous = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = previous


def build(**kwargs):
    """A seeded ViT5 with LayerScale far from its init."""
    torch.manual_seed(0)
    model = ViT5(arch=TINY, img_size=64, out_indices=(1, 3), **kwargs).eval()
    model.init_weights()
    for name, param in model.named_parameters():
        if 'gamma' in name:
            param.data.uniform_(0.5, 1.5)
    return model


def pair(**kwargs):
    """The same ViT5 on CPU and on CUDA."""
    return build(**kwargs), build(**kwargs).cuda()


@pytest.mark.parametrize('window_size', [0, 4])
def test_vit5_cuda_equals_cpu_float32(window_size):
    cpu, gpu = pair(window_size=window_size, global_attn_indices=(3, ))
    x = torch.randn(2, 3, 96, 128)
    with torch.no_grad():
        for a, b in zip(cpu(x), gpu(x.cuda())):
            torch.testing.assert_close(b.cpu(), a, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize('dtype', [torch.bfloat16, torch.float16])
def test_autocast_finite_and_close(dtype):
    _, gpu = pair()
    x = torch.randn(2, 3, 128, 128, device='cuda')
    with torch.no_grad():
        full = gpu(x)
        with torch.autocast('cuda', dtype=dtype):
            half = gpu(x)
    for a, b in zip(full, half):
        assert torch.isfinite(b).all()
        rel = (b.float() - a).norm() / a.norm()
        assert rel < 3e-2, f'{dtype}: relative error {rel:.3g}'


@pytest.mark.parametrize('window_size', [0, 4])
def test_fused_attention_kernel_is_selected(window_size):
    """With the math fallback excluded, SDPA raises if no fused kernel takes the call."""
    _, gpu = pair(window_size=window_size, global_attn_indices=(3, ))
    x = torch.randn(2, 3, 128, 128, device='cuda')
    fused = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION,
             SDPBackend.CUDNN_ATTENTION]
    with torch.no_grad(), torch.autocast('cuda', dtype=torch.bfloat16), sdpa_kernel(fused):
        assert all(torch.isfinite(out).all() for out in gpu(x))


def test_with_cp_gradients_equal_plain():
    _, plain = pair()
    _, ckpt = pair(with_cp=True)
    plain.train(), ckpt.train()
    x = torch.randn(2, 3, 96, 96, device='cuda')
    for model in (plain, ckpt):
        sum(out.float().pow(2).mean() for out in model(x)).backward()
    for (name, a), b in zip(plain.named_parameters(), ckpt.parameters()):
        torch.testing.assert_close(b.grad, a.grad, rtol=1e-4, atol=1e-6, msg=name)


@pytest.mark.parametrize('dtype', [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize('channels_last', [False, True])
def test_roi_align_cuda_equals_cpu(dtype, channels_last):
    torch.manual_seed(0)
    x = torch.randn(2, 16, 40, 56)
    rois = torch.tensor([[0, 3.2, 4.1, 60.5, 44.0], [1, -8.0, 10.0, 30.0, 90.0],
                         [1, 100.0, 60.0, 130.0, 95.0]])
    xc = x.cuda().to(dtype)
    if channels_last:
        xc = xc.to(memory_format=torch.channels_last)
    xc.requires_grad_()
    xr = x.to(dtype).float().requires_grad_()
    out = roi_align(xc, rois.cuda().to(dtype), 7, 0.5, 0, 'avg', True)
    ref = roi_align(xr, rois.to(dtype).float(), 7, 0.5, 0, 'avg', True)
    # torchvision's float16 CUDA kernel accumulates in float16 (one value of 2,352 was 0.027
    # off on an H200); bfloat16 pools in float32 and rounds the result
    tol = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.float16: dict(rtol=2e-2, atol=5e-2),
           torch.bfloat16: dict(rtol=2e-2, atol=2e-2)}[dtype]
    assert out.dtype == dtype
    torch.testing.assert_close(out.float().cpu(), ref, **tol)
    grad = torch.randn_like(ref)
    out.backward(grad.cuda().to(dtype))
    ref.backward(grad)
    torch.testing.assert_close(xc.grad.float().cpu(), xr.grad, **tol)


def test_nms_cuda_equals_cpu():
    g = torch.Generator().manual_seed(0)
    xy = torch.rand(2000, 2, generator=g) * 200
    boxes = torch.cat([xy, xy + torch.rand(2000, 2, generator=g) * 60 + 1], 1).round()
    # distinct scores: tied ones are visited in each device's own sort order, as in mmcv
    scores = torch.randperm(2000, generator=g).float() / 2000
    labels = torch.randint(0, 10, (2000, ), generator=g)
    for offset in (0, 1):
        assert torch.equal(nms(boxes.cuda(), scores.cuda(), 0.6, offset=offset)[1].cpu(),
                           nms(boxes, scores, 0.6, offset=offset)[1])
    cfg = dict(type='nms', iou_threshold=0.5)
    dets_gpu, _ = batched_nms(boxes.cuda(), scores.cuda(), labels.cuda(), cfg)
    dets_cpu, _ = batched_nms(boxes, scores, labels, cfg)
    assert torch.equal(dets_gpu.cpu(), dets_cpu)


def train_grads(model, x, autocast):
    model.zero_grad(set_to_none=True)
    with torch.autocast('cuda', dtype=torch.bfloat16, enabled=autocast):
        outs = model(x)
    sum(out.float().pow(2).mean() for out in outs).backward()
    return [p.grad.clone() for p in model.parameters() if p.grad is not None]


@pytest.mark.parametrize('window_size', [0, 4])
def test_training_gradients_on_cuda_equal_the_cpu_path(window_size):
    """CUDA's blocks (Triton RMSNorm, QK-Norm + RoPE and LayerScale backward; windowed blocks
    through flex_attention) against the CPU's PyTorch path (windows as batched SDPA, which
    tests/test_attention.py checks against the dense rule)."""
    cpu, gpu = pair(window_size=window_size, global_attn_indices=(3, ))
    cpu.train(), gpu.train()
    x = torch.randn(2, 3, 96, 128)
    for model, inputs in ((cpu, x), (gpu, x.cuda())):
        sum(out.sum() for out in model(inputs)).backward()
    for (name, a), b in zip(cpu.named_parameters(), gpu.parameters()):
        torch.testing.assert_close(b.grad.cpu(), a.grad, rtol=1e-3, atol=1e-4, msg=name)


@pytest.mark.parametrize('autocast', [False, True], ids=['float32', 'bf16-autocast'])
@pytest.mark.parametrize('window_size', [0, 4])
def test_training_path_equals_the_unfused_model_on_cuda(window_size, autocast):
    """QK-Norm + RoPE fused, rotated q/k recomputed whatever SDPA kernel saved them, ATen's
    fused RMSNorm backward: the gradients of the autograd path of the modules."""
    kwargs = dict(window_size=window_size, global_attn_indices=(3, ))
    gpu = build(**kwargs).cuda().train()
    # torch checkpointing recomputes whole blocks: its plan keeps the rotated q, k
    kept = build(with_cp=True, **kwargs).cuda().train()
    kept.load_state_dict(gpu.state_dict())
    x = torch.randn(2, 3, 96, 128, device='cuda')
    fused, plain = (train_grads(model, x, autocast) for model in (gpu, kept))
    assert len(fused) == len(plain) > 20
    tol = dict(rtol=2e-2, atol=1e-4) if autocast else dict(rtol=1e-4, atol=1e-6)
    for a, b in zip(fused, plain):
        torch.testing.assert_close(a, b, **tol)


@pytest.mark.parametrize('autocast', [False, True], ids=['float32', 'bf16-autocast'])
def test_block_keeps_no_more_for_backward_than_timm_on_cuda(autocast):
    from timm.models.vision_transformer import Block as TimmBlock

    from benchmarks.breakdown import saved_activations, setup_plan
    from benchmarks.core import Setup
    setup = Setup(torch.device('cuda'), torch.bfloat16 if autocast else torch.float32, 1, 0, 1)
    model = ViT5(arch='base', img_size=512).cuda().train()
    grid = (32, 32)
    rope = model.rope_table(grid, torch.float32, setup.device)
    x5 = torch.randn(1, rope.shape[0], 768, device='cuda', requires_grad=True)
    x = torch.randn(1, 1 + 32 * 32, 768, device='cuda', requires_grad=True)
    ours = saved_activations('vit5', model.blocks[0], (x5, rope), setup, setup_plan(setup))
    timm = saved_activations('timm', TimmBlock(768, 12, qkv_bias=True).cuda().train(), (x, ),
                             setup)
    assert sum(s.recomputed for s in ours) == 2, ours  # the rotated q and k

    def per_token(saved, tokens):  # without statistics, RNG state and the shared RoPE table
        return sum(s.mib for s in saved if s.shape and s.shape[-1] > 2) / tokens
    assert per_token(ours, x5.shape[1]) <= per_token(timm, x.shape[1]) * 1.001, (ours, timm)


def test_training_peak_memory_leaves_out_what_was_resident():
    """benchmarks' training peak memory is the step's own: another model resident on the
    device (as the memory targets once measured, five of them) does not change it."""
    from benchmarks.core import Setup, train_step
    from benchmarks.memory import step_peak_mib
    setup = Setup(torch.device('cuda'), torch.float32, 1, 0, 1)
    model = build().cuda().train()
    step = train_step(model, torch.randn(2, 3, 64, 64, device='cuda'))
    alone = step_peak_mib(step, model, setup)
    resident = torch.empty(256 * 2**20, dtype=torch.uint8, device='cuda')
    assert step_peak_mib(step, model, setup) == pytest.approx(alone, rel=0.02), resident.shape


def test_fused_rms_norm_backward_equals_the_composite(monkeypatch):
    from mmvit5.models.layers.kernels import rms_norm as norm
    x = torch.randn(4, 300, 768, device='cuda')
    weight = torch.rand(768, device='cuda') + 0.5
    out, rstd = norm.rms_norm(x, weight, 1e-6)
    grad = torch.randn_like(out)
    fused = norm.rms_norm_backward(grad, x, rstd, weight)
    monkeypatch.setattr(norm, 'FUSED_RMS_NORM', False)
    composite = norm.rms_norm_backward(grad, x, rstd, weight)
    for a, b in zip(fused, composite):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize('window_size', [0, 4])
def test_compiled_blocks_with_the_fused_kernels_equal_eager(window_size):
    """compile_blocks traces the Triton ops (triton_op) and flex_attention into each block's
    graph: the same values and gradients as the eager fused path."""
    eager = build(window_size=window_size, global_attn_indices=(3, )).cuda().train()
    compiled = build(window_size=window_size, global_attn_indices=(3, ),
                     compile_blocks=True).cuda().train()
    compiled.load_state_dict(eager.state_dict())
    x = torch.randn(2, 3, 96, 128, device='cuda')
    for autocast in (False, True):
        ref, got = (train_grads(m, x, True, autocast) for m in (eager, compiled))
        tol = dict(rtol=2e-2, atol=1e-3) if autocast else dict(rtol=1e-4, atol=1e-5)
        for a, b in zip(got, ref):
            torch.testing.assert_close(a, b, **tol)


def test_block_launches_on_cuda_at_most_1_3x_timm():
    """tests/test_block_kernels.py counts the GPU path under Triton's interpreter; here the
    same count on the device, and the CUDA kernels the profiler sees, reported."""
    from benchmarks.breakdown import block_launches
    from benchmarks.core import Setup
    for dtype in (torch.float32, torch.bfloat16):
        ours, timm = block_launches(512, Setup(torch.device('cuda'), dtype, 1, 0, 1))
        assert ours.dispatched <= 1.3 * timm.dispatched, (ours, timm)
        print(f'{dtype}: ViT5-B block {ours}, timm ViT-B block {timm}')
