"""mmcv's compiled-op interface (``mmcv._ext``) served by torchvision's kernels.

mmcv 2.1.0 installed without its C++/CUDA build (``MMCV_WITH_OPS=0``) has no ``mmcv._ext``, so
``import mmcv.ops`` fails, and with it every mmdet / mmseg model. The models mmvit5 ships call
two compiled ops, RoIAlign (RoI extractors, mask targets) and NMS (RPN, box post-processing),
and torchvision ships both as CPU and CUDA kernels. This module is loaded *as* ``mmcv._ext`` by
the import hook in ``_mmvit5_hook`` when no compiled extension exists, so it must not import
mmvit5 (or anything that imports ``mmcv.ops``) at module level.

Served: ``roi_align_forward/backward`` (avg mode), ``nms`` (offset 0 and 1, mmcv's tie order),
``ms_deform_attn_forward/backward`` (mmcv's own PyTorch fallback), ``sigmoid_focal_loss_*``
(mmcv's kernel formulas). Every other name resolves to a function that raises
:class:`CompiledOpMissing` when called, so ``import mmcv.ops`` (which checks each name with
``hasattr``) still works.
"""
import torch
import torchvision  # noqa: F401  (registers torch.ops.torchvision)
from torch import Tensor

INSTALL_COMPILED = 'MMCV_OPS=compiled bash tools/install.sh'
BACKEND = f'torchvision {torchvision.__version__} (mmvit5, no compiled mmcv ops)'

# what a config usually contains when it reaches an op that only compiled mmcv has
_NEEDED_BY = (
    (('deform_conv', 'modulated_deform_conv', 'deform_roi_pool'),
     "deformable convolutions or RoI pooling (dcn=dict(type='DCN'), conv_cfg=dict("
     "type='DCNv2'), 'DeformRoIPoolPack')"),
    (('softmax_focal_loss',), 'softmax focal loss (SoftmaxFocalLoss)'),
    (('roi_pool',), "RoIPool (roi_layer=dict(type='RoIPool'))"),
    (('carafe',), "CARAFE upsampling (upsample_cfg=dict(type='carafe'))"),
    (('ca_', 'psamask'), 'CCNet / PSANet heads (CrissCrossAttention, PSAMask)'),
    (('softnms', 'nms_match', 'nms_rotated', 'nms_quadri', 'box_iou_'),
     "soft / matrix / rotated NMS (nms=dict(type='soft_nms'), ScoreHLRSampler, mmrotate)"),
    (('masked_conv', 'corner_pool', 'border_align', 'tin_shift'),
     'special detector ops (MaskedConv2d, CornerPool, BorderAlign, TINShift)'),
    (('sync_bn',), "mmcv's SyncBatchNorm (norm_cfg=dict(type='MMSyncBN'))"),
)


class CompiledOpMissing(NotImplementedError):
    """An mmcv op with no compiled kernel in this environment was called."""


def _needed_by(name: str) -> str:
    for prefixes, what in _NEEDED_BY:
        if name.startswith(prefixes):
            return what
    return 'a config using this mmcv.ops layer (3D, point-cloud or other specialised ops)'


def _missing(name: str):

    def op(*args, **kwargs):
        raise CompiledOpMissing(
            f"mmcv op '{name}' has no kernel here: mmcv is installed without its compiled ops "
            f'and mmvit5 serves only RoIAlign, NMS, multi-scale deformable attention and '
            f'sigmoid focal loss from {BACKEND}. It is usually needed by {_needed_by(name)}. '
            f'Remove that part of the config, or install compiled mmcv: {INSTALL_COMPILED}')

    op.__name__ = op.__qualname__ = name
    return op


def __getattr__(name: str):
    if name.startswith('__'):
        raise AttributeError(name)
    op = globals()[name] = _missing(name)
    return op


def get_compiler_version() -> str:
    return BACKEND


def get_compiling_cuda_version() -> str:
    return torch.version.cuda or 'not available'


def _pooling_dtype(x: Tensor) -> torch.dtype:
    # torchvision's kernels have no bfloat16 instantiation, its CPU ones no float16 either
    # (CUDA has float16): those pool in float32, and the copy into mmcv's output rounds back
    native = (torch.float32, torch.float64) + ((torch.float16, ) if x.is_cuda else ())
    return x.dtype if x.dtype in native else torch.float32


def roi_align_forward(input: Tensor, rois: Tensor, output: Tensor, argmax_y: Tensor,
                      argmax_x: Tensor, aligned_height: int, aligned_width: int,
                      spatial_scale: float, sampling_ratio: int, pool_mode: int,
                      aligned: bool) -> None:
    """Fill ``output`` (K, C, aligned_height, aligned_width) with mmcv's avg-mode RoIAlign.

    ``rois`` is (K, 5): batch index, x1, y1, x2, y2 in input-image coordinates. torchvision's
    kernel samples the same bilinear grid as mmcv's (adaptive ``sampling_ratio`` 0, the
    half-pixel shift of ``aligned``); it reads any memory layout.
    """
    if pool_mode != 1:
        raise CompiledOpMissing(
            "RoIAlign pool_mode='max' has no torchvision kernel: use pool_mode='avg' (mmdet's "
            f'default) or install compiled mmcv: {INSTALL_COMPILED}')
    dtype = _pooling_dtype(input)
    pooled = torch.ops.torchvision.roi_align(
        input.to(dtype), rois.to(dtype), spatial_scale, aligned_height, aligned_width,
        sampling_ratio, aligned)
    output.copy_(pooled)


def roi_align_backward(grad_output: Tensor, rois: Tensor, argmax_y: Tensor, argmax_x: Tensor,
                       grad_input: Tensor, aligned_height: int, aligned_width: int,
                       spatial_scale: float, sampling_ratio: int, pool_mode: int,
                       aligned: bool) -> None:
    """Fill ``grad_input`` (N, C, H, W) with the gradient of :func:`roi_align_forward`."""
    if pool_mode != 1:
        raise CompiledOpMissing("RoIAlign pool_mode='max' has no torchvision kernel")
    dtype = _pooling_dtype(grad_output)
    batch, channels, height, width = grad_input.shape
    grad = torch.ops.torchvision._roi_align_backward(
        grad_output.to(dtype), rois.to(dtype), spatial_scale, aligned_height, aligned_width,
        batch, channels, height, width, sampling_ratio, aligned)
    grad_input.copy_(grad)


def nms(boxes: Tensor, scores: Tensor, iou_threshold: float, offset: int) -> Tensor:
    """Indices of the boxes (N, 4) that greedy NMS keeps, highest score first, as mmcv's.

    mmcv visits boxes in the order of ``scores.sort(descending=True)``, which does not keep
    tied scores in index order; torchvision sorts stably. At initialisation an RPN's scores are
    nearly all tied, so the kept set would differ from the first iteration. Handing torchvision
    the boxes already in mmcv's order, with strictly decreasing stand-in scores, makes both
    visit the same sequence. ``offset=1`` (areas of ``x2 - x1 + 1``) widens the boxes by one.
    """
    if boxes.numel() == 0:
        return boxes.new_zeros(0, dtype=torch.long)
    order = scores.sort(0, descending=True)[1]
    ranked = boxes[order].float()
    if offset:
        ranked = ranked + ranked.new_tensor([0, 0, offset, offset])
    rank = torch.arange(ranked.shape[0], 0, -1, dtype=ranked.dtype, device=ranked.device)
    # mmcv compares a float IoU with a float threshold; torchvision takes a double
    threshold = torch.tensor(iou_threshold, dtype=torch.float32).item()
    return order[torchvision.ops.nms(ranked, rank, threshold)]


def _grads_by_autograd(fn, inputs, grad_output: Tensor, grads_out) -> None:
    """Write d(fn(*inputs))/d(inputs) . grad_output into ``grads_out``, recomputing fn."""
    leaves = [x.detach().requires_grad_() for x in inputs]
    with torch.enable_grad():
        out = fn(*leaves)
    for dst, grad in zip(grads_out, torch.autograd.grad(out, leaves, grad_output)):
        dst.copy_(grad)


def _ms_deform_attn(value, spatial_shapes, sampling_locations, attention_weights):
    from mmcv.ops.multi_scale_deform_attn import multi_scale_deformable_attn_pytorch
    return multi_scale_deformable_attn_pytorch(value, spatial_shapes, sampling_locations,
                                               attention_weights)


def ms_deform_attn_forward(value: Tensor, value_spatial_shapes: Tensor,
                           value_level_start_index: Tensor, sampling_locations: Tensor,
                           attention_weights: Tensor, im2col_step: int) -> Tensor:
    """mmcv's PyTorch multi-scale deformable attention (what it runs on CPU) on any device."""
    return _ms_deform_attn(value, value_spatial_shapes, sampling_locations, attention_weights)


def ms_deform_attn_backward(value: Tensor, value_spatial_shapes: Tensor,
                            value_level_start_index: Tensor, sampling_locations: Tensor,
                            attention_weights: Tensor, grad_output: Tensor, grad_value: Tensor,
                            grad_sampling_loc: Tensor, grad_attn_weight: Tensor,
                            im2col_step: int) -> None:
    _grads_by_autograd(
        lambda v, loc, w: _ms_deform_attn(v, value_spatial_shapes, loc, w),
        (value, sampling_locations, attention_weights), grad_output,
        (grad_value, grad_sampling_loc, grad_attn_weight))


def _focal_terms(input: Tensor, target: Tensor, weight: Tensor):
    """Per-element class masks, probabilities and class weights of mmcv's focal kernels."""
    classes = torch.arange(input.shape[1], device=input.device)
    positive = target[:, None] == classes  # target == num_classes is background: no positive
    scale = weight[target][:, None] if weight.numel() else 1.0
    return positive, torch.sigmoid(input), scale


_FLT_MIN = torch.finfo(torch.float32).tiny  # the kernels clamp with FLT_MIN in every dtype


def sigmoid_focal_loss_forward(input: Tensor, target: Tensor, weight: Tensor, output: Tensor,
                               gamma: float, alpha: float) -> None:
    """Fill ``output`` (N, C) with mmcv's per-element sigmoid focal loss."""
    positive, p, scale = _focal_terms(input, target, weight)
    loss = torch.where(positive,
                       -alpha * (1 - p).pow(gamma) * p.clamp(min=_FLT_MIN).log(),
                       -(1 - alpha) * p.pow(gamma) * (1 - p).clamp(min=_FLT_MIN).log())
    output.copy_(loss * scale)


def sigmoid_focal_loss_backward(input: Tensor, target: Tensor, weight: Tensor,
                                grad_input: Tensor, gamma: float, alpha: float) -> None:
    """Fill ``grad_input`` (N, C) with mmcv's closed-form focal-loss gradient."""
    positive, p, scale = _focal_terms(input, target, weight)
    grad = torch.where(
        positive,
        -alpha * (1 - p).pow(gamma) * (1 - p - gamma * p * p.clamp(min=_FLT_MIN).log()),
        -(1 - alpha) * p.pow(gamma) * (gamma * (1 - p) * (1 - p).clamp(min=_FLT_MIN).log() - p))
    grad_input.copy_(grad * scale)
