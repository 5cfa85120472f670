"""mmcv's compiled-op interface served from torchvision (mmvit5/ops/ext.py, _mmvit5_hook.py).

References are written here from the ops' definitions (bilinear RoIAlign sampling, greedy NMS in
mmcv's visiting order), not taken from the backend under test.
"""
import math
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

import _mmvit5_hook
from mmcv.ops import MultiScaleDeformableAttention, batched_nms, nms, roi_align
from mmcv.ops.multi_scale_deform_attn import (MultiScaleDeformableAttnFunction,
                                              multi_scale_deformable_attn_pytorch)
from mmvit5.ops.parity import served_backend, use_backend

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SERVED = served_backend()


@pytest.fixture(autouse=True)
def served_ops():
    """mmcv.ops calls go to mmvit5's backend even where compiled mmcv is installed."""
    with use_backend(SERVED):
        yield


# ----------------------------------------------------------------------------- RoIAlign
def bilinear(feature: torch.Tensor, y: float, x: float) -> torch.Tensor:
    """(C, H, W) sampled at one point, zero outside [-1, H] x [-1, W] (Detectron/mmcv rule)."""
    height, width = feature.shape[1:]
    if y < -1.0 or y > height or x < -1.0 or x > width:
        return feature.new_zeros(feature.shape[0])
    y, x = max(y, 0.0), max(x, 0.0)
    y0, x0 = int(y), int(x)
    if y0 >= height - 1:
        y0 = y1 = height - 1
        y = float(y0)
    else:
        y1 = y0 + 1
    if x0 >= width - 1:
        x0 = x1 = width - 1
        x = float(x0)
    else:
        x1 = x0 + 1
    ly, lx = y - y0, x - x0
    return ((1 - ly) * (1 - lx) * feature[:, y0, x0] + (1 - ly) * lx * feature[:, y0, x1]
            + ly * (1 - lx) * feature[:, y1, x0] + ly * lx * feature[:, y1, x1])


def reference_roi_align(feature, rois, size, scale, sampling_ratio, aligned):
    """Average of a bilinear grid per output bin, written out point by point."""
    out = []
    for roi in rois.tolist():
        image = feature[int(roi[0])]
        offset = 0.5 if aligned else 0.0
        x1, y1, x2, y2 = (v * scale - offset for v in roi[1:])
        roi_w, roi_h = x2 - x1, y2 - y1
        if not aligned:
            roi_w, roi_h = max(roi_w, 1.0), max(roi_h, 1.0)
        bin_h, bin_w = roi_h / size, roi_w / size
        grid_h = sampling_ratio if sampling_ratio > 0 else math.ceil(roi_h / size)
        grid_w = sampling_ratio if sampling_ratio > 0 else math.ceil(roi_w / size)
        count = max(grid_h * grid_w, 1)
        bins = torch.stack([torch.stack([
            sum((bilinear(image, y1 + i * bin_h + (iy + 0.5) * bin_h / grid_h,
                          x1 + j * bin_w + (ix + 0.5) * bin_w / grid_w)
                 for iy in range(grid_h) for ix in range(grid_w)),
                image.new_zeros(image.shape[0])) / count
            for j in range(size)], -1) for i in range(size)], -2)
        out.append(bins)
    return torch.stack(out) if out else feature.new_zeros(0, feature.shape[1], size, size)


ROIS = torch.tensor([[0, 2.3, 3.1, 20.7, 15.2],     # inside
                     [1, -6.0, -4.5, 9.0, 11.0],     # partly above/left of the map
                     [1, 25.0, 10.0, 44.0, 30.0],    # partly beyond the right/bottom edge
                     [0, 7.0, 7.0, 7.4, 7.2]],       # smaller than a bin
                    dtype=torch.float64)


@pytest.mark.parametrize('aligned', [True, False])
@pytest.mark.parametrize('sampling_ratio', [0, 2])
@pytest.mark.parametrize('channels_last', [False, True])
def test_roi_align_matches_reference(aligned, sampling_ratio, channels_last):
    torch.manual_seed(0)
    feature = torch.randn(2, 3, 12, 16, dtype=torch.float64)
    x = feature.to(memory_format=torch.channels_last) if channels_last else feature.clone()
    x.requires_grad_()
    ref_x = feature.clone().requires_grad_()
    out = roi_align(x, ROIS, 4, 0.5, sampling_ratio, 'avg', aligned)
    ref = reference_roi_align(ref_x, ROIS, 4, 0.5, sampling_ratio, aligned)
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
    weights = torch.randn_like(ref)
    (out * weights).sum().backward()
    (ref * weights).sum().backward()
    torch.testing.assert_close(x.grad, ref_x.grad, rtol=1e-12, atol=1e-12)


def test_roi_align_empty_rois():
    x = torch.randn(1, 4, 8, 8, requires_grad=True)
    out = roi_align(x, torch.zeros(0, 5), 7, 1.0, 0, 'avg', True)
    assert out.shape == (0, 4, 7, 7)
    out.sum().backward()
    assert torch.equal(x.grad, torch.zeros_like(x))


@pytest.mark.parametrize('dtype', [torch.float16, torch.bfloat16])
def test_roi_align_half_precision(dtype):
    torch.manual_seed(0)
    x = torch.randn(2, 3, 12, 16)
    rois = ROIS.float()
    out = roi_align(x.to(dtype), rois.to(dtype), 4, 0.5, 2, 'avg', True)
    assert out.dtype == dtype
    # the half-precision result is the float32 one, rounded (inputs rounded first)
    want = roi_align(x.to(dtype).float(), rois.to(dtype).float(), 4, 0.5, 2, 'avg', True)
    torch.testing.assert_close(out.float(), want, rtol=1e-2, atol=1e-2)


def test_roi_align_max_mode_names_the_fix():
    with pytest.raises(NotImplementedError, match="pool_mode='avg'"):
        roi_align(torch.randn(1, 2, 8, 8), ROIS[:1].float(), 2, 1.0, 0, 'max', True)


# ----------------------------------------------------------------------------- NMS
def reference_nms(boxes, scores, threshold, offset=0):
    """Greedy NMS in float32 visiting boxes in ``scores.sort(descending=True)`` order, as mmcv's
    kernel does (``ovr > threshold``, both float)."""
    order = scores.sort(0, descending=True)[1].tolist()
    b = boxes.float().numpy()
    f = np.float32
    area = lambda k: (b[k, 2] - b[k, 0] + f(offset)) * (b[k, 3] - b[k, 1] + f(offset))  # noqa
    keep, removed = [], set()
    for pos, i in enumerate(order):
        if i in removed:
            continue
        keep.append(i)
        for j in order[pos + 1:]:
            w = max(f(0), min(b[i, 2], b[j, 2]) - max(b[i, 0], b[j, 0]) + f(offset))
            h = max(f(0), min(b[i, 3], b[j, 3]) - max(b[i, 1], b[j, 1]) + f(offset))
            inter = w * h
            if inter / (area(i) + area(j) - inter) > f(threshold):
                removed.add(j)
    return keep


def random_boxes(n, seed, integer=False):
    g = torch.Generator().manual_seed(seed)
    xy = torch.rand(n, 2, generator=g) * 50
    wh = torch.rand(n, 2, generator=g) * 20 + 1
    boxes = torch.cat([xy, xy + wh], 1)
    return boxes.round() if integer else boxes


@pytest.mark.parametrize('offset', [0, 1])
def test_nms_matches_brute_force(offset):
    boxes = random_boxes(200, seed=1, integer=offset == 1)  # whole pixels: x+1 is exact
    scores = torch.rand(200, generator=torch.Generator().manual_seed(2))
    dets, keep = nms(boxes, scores, 0.4, offset=offset)
    assert keep.tolist() == reference_nms(boxes, scores, 0.4, offset)
    assert torch.equal(dets[:, 4], scores[keep])


def test_nms_ties_follow_mmcv_order():
    # an RPN at initialisation: nearly every score equal
    boxes = random_boxes(300, seed=3)
    scores = torch.full((300, ), 0.5)
    scores[::37] = 0.6
    _, keep = nms(boxes, scores, 0.5)
    assert keep.tolist() == reference_nms(boxes, scores, 0.5)


def test_nms_empty_and_half_precision():
    dets, keep = nms(torch.zeros(0, 4), torch.zeros(0), 0.5)
    assert dets.shape == (0, 5) and keep.shape == (0, ) and keep.dtype == torch.long
    boxes, scores = random_boxes(50, seed=4), torch.rand(50)
    _, keep = nms(boxes.half(), scores.half(), 0.5)
    assert keep.tolist() == reference_nms(boxes.half().float(), scores.half(), 0.5)


def test_batched_nms_per_class():
    boxes, scores = random_boxes(120, seed=5), torch.rand(120)
    labels = torch.randint(0, 5, (120, ), generator=torch.Generator().manual_seed(6))
    dets, keep = batched_nms(boxes, scores, labels, dict(type='nms', iou_threshold=0.5))
    want = []
    for c in range(5):
        idx = (labels == c).nonzero().flatten()
        want += idx[reference_nms(boxes[idx], scores[idx], 0.5)].tolist()
    assert sorted(keep.tolist()) == sorted(want)
    assert torch.equal(dets[:, 4], scores[keep])  # highest score first
    assert (dets[1:, 4] <= dets[:-1, 4]).all()


# ----------------------------------------------------------------------------- other served ops
def test_deformable_attention_matches_pytorch_path():
    torch.manual_seed(0)
    shapes = torch.tensor([[6, 8], [3, 4]])
    starts = torch.cat([shapes.new_zeros(1), shapes.prod(1).cumsum(0)[:-1]])
    value = torch.randn(2, int(shapes.prod(1).sum()), 2, 4, dtype=torch.float64)
    loc = torch.rand(2, 5, 2, 2, 3, 2, dtype=torch.float64)
    weights = torch.rand(2, 5, 2, 2, 3, dtype=torch.float64).softmax(-1)
    inputs = [t.clone().requires_grad_() for t in (value, loc, weights)]
    refs = [t.clone().requires_grad_() for t in (value, loc, weights)]
    out = MultiScaleDeformableAttnFunction.apply(inputs[0], shapes, starts, inputs[1],
                                                 inputs[2], 64)
    ref = multi_scale_deformable_attn_pytorch(refs[0], shapes, refs[1], refs[2])
    torch.testing.assert_close(out, ref, rtol=0, atol=0)
    grad = torch.randn_like(ref)
    out.backward(grad)
    ref.backward(grad)
    for a, b in zip(inputs, refs):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-12, atol=1e-12)
    assert MultiScaleDeformableAttention(embed_dims=8, num_heads=2)  # builds


def test_sigmoid_focal_loss_matches_mmdet_pytorch_loss():
    from mmcv.ops import sigmoid_focal_loss
    from mmdet.models.losses.focal_loss import py_sigmoid_focal_loss
    torch.manual_seed(0)
    logits = torch.randn(64, 5, dtype=torch.float64)
    target = torch.randint(0, 6, (64, ))  # 5 = background
    x, ref_x = logits.clone().requires_grad_(), logits.clone().requires_grad_()
    loss = sigmoid_focal_loss(x, target, 2.0, 0.25, None, 'sum')
    one_hot = torch.nn.functional.one_hot(target, 6)[:, :5]
    ref = py_sigmoid_focal_loss(ref_x, one_hot, gamma=2.0, alpha=0.25, reduction='sum')
    torch.testing.assert_close(loss, ref, rtol=1e-10, atol=1e-10)
    loss.backward()
    ref.backward()
    torch.testing.assert_close(x.grad, ref_x.grad, rtol=1e-8, atol=1e-10)


def test_missing_op_names_op_config_and_install_command():
    from mmcv.ops import DeformConv2d
    conv = DeformConv2d(4, 4, 3, padding=1)
    x = torch.randn(1, 4, 8, 8)
    with pytest.raises(NotImplementedError) as err:
        conv(x, torch.zeros(1, 18, 8, 8))
    message = str(err.value)
    assert 'deform_conv_forward' in message and "type='DCN'" in message
    assert 'MMCV_OPS=compiled bash tools/install.sh' in message


# ----------------------------------------------------------------------------- the import hook
def python(code: str, **env) -> str:
    """Run ``code`` in a fresh interpreter outside the checkout (only the .pth hook applies)."""
    proc = subprocess.run([sys.executable, '-c', code], cwd='/', capture_output=True, text=True,
                          env=dict(os.environ, **env), timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


@pytest.mark.skipif(_mmvit5_hook.mmcv_ops_backend() == 'compiled',
                    reason='compiled mmcv installed: the hook is never consulted')
def test_every_process_imports_mmcv_ops_without_importing_torch_at_start():
    out = python(
        'import sys\n'
        'print("torch at start:", "torch" in sys.modules)\n'
        'import mmcv.ops, mmdet.models, mmseg.models, mmpretrain.models\n'
        'from mmengine.utils.dl_utils import mmcv_full_available\n'
        'print("full:", mmcv_full_available(), "mmvit5:", "mmvit5" in sys.modules)\n')
    assert 'torch at start: False' in out
    assert 'full: True mmvit5: False' in out


def test_hook_can_be_turned_off():
    code = 'import importlib.util; print(importlib.util.find_spec("mmcv._ext") is None)'
    expect = str(_mmvit5_hook.mmcv_ops_backend() == 'torchvision')
    assert python(code, MMVIT5_MMCV_EXT='0').strip() == expect


def test_hook_never_shadows_a_real_extension(tmp_path):
    (tmp_path / '_ext.py').write_text('REAL = True\n')
    out = python(f'import mmcv; mmcv.__path__.insert(0, {str(tmp_path)!r})\n'
                 'import mmcv._ext; print(getattr(mmcv._ext, "REAL", False))')
    assert out.strip() == 'True'


# ----------------------------------------------------------------------------- vs compiled mmcv
@pytest.mark.skipif(_mmvit5_hook.mmcv_ops_backend() != 'compiled',
                    reason='compiled mmcv is not installed (MMCV_OPS=compiled bash '
                           'tools/install.sh): nothing to compare the torchvision backend with')
def test_served_ops_equal_compiled_mmcv():
    import mmcv._ext as compiled
    served = SERVED
    torch.manual_seed(0)
    x = torch.randn(2, 8, 24, 32)
    rois = ROIS.float()
    for aligned in (True, False):
        for ratio in (0, 2):
            outs = [torch.zeros(4, 8, 7, 7) for _ in range(2)]
            grads = [torch.zeros_like(x) for _ in range(2)]
            grad_out = torch.randn(4, 8, 7, 7)
            for ext, out, grad in zip((compiled, served), outs, grads):
                kw = dict(aligned_height=7, aligned_width=7, spatial_scale=0.5,
                          sampling_ratio=ratio, pool_mode=1, aligned=aligned)
                ext.roi_align_forward(x, rois, out, x.new_zeros(0), x.new_zeros(0), **kw)
                ext.roi_align_backward(grad_out, rois, x.new_zeros(0), x.new_zeros(0), grad,
                                       **kw)
            assert torch.equal(outs[0], outs[1]) and torch.equal(grads[0], grads[1])
    boxes, scores = random_boxes(500, seed=7, integer=True), torch.rand(500)
    scores[::3] = 0.5  # ties
    for offset in (0, 1):
        assert torch.equal(compiled.nms(boxes, scores, iou_threshold=0.5, offset=offset),
                           served.nms(boxes, scores, 0.5, offset))

