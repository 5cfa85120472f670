"""The modules that are exported: a backbone (+ neck), or a whole segmentor from image to logits.

Every part is the config's own model; the wrappers only fix what goes in and out of the graph
(one image tensor in, a tuple of maps or one logits map out), pad the image to a multiple of
``size_divisor`` as mmdet/mmseg's data preprocessors do (inside the graph, so that no side a
user feeds gives wrong numbers), and swap the one layer ONNX has no operator for at dynamic
sizes (adaptive average pooling, in UperNet's pyramid pooling).
"""
import math
from typing import List, Optional, Sequence, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

PARTS = ('backbone', 'neck', 'segmentor')


def pad_to_multiple(x: torch.Tensor, size_divisor: Optional[int],
                    value: float = 0.0) -> torch.Tensor:
    """``x`` (B, C, H, W) padded at the bottom and right with ``value`` to sides that are
    multiples of ``size_divisor``, as mmengine's ``stack_batch`` pads a batch (after
    normalisation: 0 is the mean colour). None returns ``x``."""
    if not size_divisor:
        return x
    height, width = x.shape[-2:]
    # ceil division written with floor division: torch.export keeps it symbolic
    pad_h = (height + size_divisor - 1) // size_divisor * size_divisor - height
    pad_w = (width + size_divisor - 1) // size_divisor * size_divisor - width
    return F.pad(x, (0, pad_w, 0, pad_h), value=value)


class BackboneWithNeck(nn.Module):
    """A detector's or segmentor's backbone, and its neck when it has one.

    Args:
        backbone (nn.Module): E.g. :class:`ViT5`.
        neck (nn.Module, optional): E.g. ``SimpleFeaturePyramid``; None exports the backbone
            alone.
        size_divisor (int, optional): The input is zero-padded at the bottom and right to
            multiples of it (mmdet's ``DetDataPreProcessor(pad_size_divisor=...)``), so any
            side is valid; set it to the coarsest stride of the maps
            (:func:`coarsest_stride`). None feeds the input as it is.

    Shape:
        - Input: (B, 3, H, W), normalised as the config's data preprocessor leaves it.
        - Output: tuple of (B, C_i, H' / s_i, W' / s_i) maps of the padded (H', W') image, one
          per backbone output (or per neck level).
    """

    def __init__(self, backbone: nn.Module, neck: Optional[nn.Module] = None,
                 size_divisor: Optional[int] = None) -> None:
        super().__init__()
        self.backbone = backbone
        self.neck = neck
        self.size_divisor = size_divisor

    def forward(self, x: torch.Tensor) -> Tuple[torch.Tensor, ...]:
        x = self.backbone(pad_to_multiple(x, self.size_divisor))
        return tuple(self.neck(x) if self.neck is not None else x)


class SegmentorLogits(nn.Module):
    """An mmseg ``EncoderDecoder`` from image to per-pixel logits, as its ``whole`` inference.

    The graph holds the data preprocessor's channel flip, mean/std normalisation and padding
    to a multiple of ``size_divisor``, the backbone, neck and decode head, the bilinear resize
    of the logits to the padded size (the decode head's ``align_corners``) and the crop back
    to the input's: mmseg's ``whole`` inference with
    ``data_preprocessor.test_cfg=dict(size_divisor=...)``. A deployed model takes the decoded
    image as it is, at any side.

    Args:
        segmentor (nn.Module): mmseg ``EncoderDecoder`` (e.g. a ViT-5 UperNet), eval mode.
        size_divisor (int, optional): What the image is padded to multiples of: the coarsest
            stride of the pyramid (32 for UperNet's). None feeds it unpadded (wrong numbers
            at sides that are not multiples).

    Shape:
        - Input: (B, 3, H, W) float, 0-255, in the channel order the dataset's loader gives
          (BGR for mmcv's ``LoadImageFromFile``).
        - Output: (B, num_classes, H, W) logits (before softmax).
    """

    def __init__(self, segmentor: nn.Module, size_divisor: Optional[int] = 32) -> None:
        super().__init__()
        self.segmentor = segmentor
        preprocessor = segmentor.data_preprocessor
        self.flip_channels = bool(preprocessor.channel_conversion)
        self.normalize = bool(preprocessor._enable_normalize)
        self.pad_value = float(preprocessor.pad_val)
        self.size_divisor = size_divisor

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        preprocessor = self.segmentor.data_preprocessor
        x = image.flip(1) if self.flip_channels else image
        if self.normalize:
            x = (x - preprocessor.mean) / preprocessor.std
        x = pad_to_multiple(x, self.size_divisor, self.pad_value)
        logits = self.segmentor._forward(x)
        logits = F.interpolate(logits, size=x.shape[2:], mode='bilinear',
                               align_corners=self.segmentor.decode_head.align_corners)
        return logits[:, :, :image.shape[2], :image.shape[3]]


def output_names(model: nn.Module, x: torch.Tensor) -> List[str]:
    """Names of the graph outputs of a :func:`build_part` module, from one forward on ``x``.

    ``logits`` for a segmentor; ``p<l>`` per neck level of stride ``2**l`` (the FPN naming:
    ``p2`` .. ``p6`` for Mask R-CNN's pyramid); ``block<i>`` per backbone output after block
    ``i`` (its ``out_indices``). A repeated name gets ``_1``, ``_2``, ... appended.
    """
    if isinstance(model, SegmentorLogits):
        return ['logits']
    with torch.no_grad():
        outputs = model(x)
    padded = pad_to_multiple(x, getattr(model, 'size_divisor', None)).shape[-1]
    indices = getattr(getattr(model, 'backbone', None), 'out_indices', None)
    if getattr(model, 'neck', None) is not None or indices is None \
            or len(indices) != len(outputs):
        names = [f'p{round(math.log2(padded / out.shape[-1]))}' for out in outputs]
    else:
        names = [f'block{i}' for i in indices]
    unique = []
    for name in names:
        repeats = sum(n == name for n in names[:len(unique)])
        unique.append(f'{name}_{repeats}' if repeats else name)
    return unique


def example_input(shape: Sequence[int], part: str, seed: int = 0) -> torch.Tensor:
    """A seeded input of ``shape`` (B, 3, H, W) in ``part``'s domain: a 0-255 image for the
    segmentor, a standard-normal (normalised) one for backbone and neck."""
    generator = torch.Generator().manual_seed(seed)
    if part == 'segmentor':
        return torch.rand(*shape, generator=generator) * 255
    return torch.randn(*shape, generator=generator)


def coarsest_stride(model: nn.Module, x: torch.Tensor, part: str) -> int:
    """The largest input-to-output stride of ``part``'s maps on ``x``: what the input is padded
    to multiples of. The segmentor's logits are full-size; its pyramid's coarsest level is
    mmseg's usual 32. ``x``'s sides should be multiples of the stride to measure it."""
    if part == 'segmentor':
        return 32
    with torch.no_grad():
        outputs = model(x)
    return max(x.shape[-2] // out.shape[-2] for out in outputs)


def adaptive_pool_matrix(n: int, out: int, like: torch.Tensor) -> torch.Tensor:
    """(out, n) averaging matrix of adaptive average pooling along one axis.

    Output cell ``i`` averages inputs ``floor(i * n / out) .. ceil((i + 1) * n / out) - 1``,
    PyTorch's rule, including ``n < out`` (cells then repeat inputs). ``n`` may be symbolic.
    """
    i = torch.arange(out, device=like.device)
    start = torch.div(i * n, out, rounding_mode='floor')
    end = torch.div((i + 1) * n + out - 1, out, rounding_mode='floor')
    j = torch.arange(n, device=like.device)
    inside = (j[None, :] >= start[:, None]) & (j[None, :] < end[:, None])
    return inside.to(like.dtype) / (end - start)[:, None].to(like.dtype)


class MatmulAdaptiveAvgPool2d(nn.Module):
    """``nn.AdaptiveAvgPool2d`` as two matmuls with averaging matrices built from the input
    size, so that one exported graph pools any input size.

    torch.export decomposes adaptive pooling into index tables of the example input's size; the
    ONNX graph then pools every other size wrongly or fails. The matrices give the same averages
    (summed in another order: float32 differences of ~1e-7).

    Args:
        output_size (int | tuple[int, int]): As ``nn.AdaptiveAvgPool2d``'s (no None entries).

    Shape:
        - Input: (B, C, H, W); Output: (B, C, out_h, out_w).
    """

    def __init__(self, output_size) -> None:
        super().__init__()
        size = (output_size, output_size) if isinstance(output_size, int) else output_size
        if None in size:
            raise ValueError(f'MatmulAdaptiveAvgPool2d needs both output sides, got '
                             f'{output_size}; None (keep the input side) is not supported')
        self.output_size = tuple(size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = adaptive_pool_matrix(x.shape[-2], self.output_size[0], x)
        cols = adaptive_pool_matrix(x.shape[-1], self.output_size[1], x)
        return rows @ x @ cols.transpose(0, 1)


def exportable(model: nn.Module) -> int:
    """Swap every ``nn.AdaptiveAvgPool2d`` of ``model`` for :class:`MatmulAdaptiveAvgPool2d`
    in place; returns how many were swapped."""
    swapped = 0
    for parent in model.modules():
        for name, child in parent.named_children():
            if isinstance(child, nn.AdaptiveAvgPool2d):
                setattr(parent, name, MatmulAdaptiveAvgPool2d(child.output_size))
                swapped += 1
    return swapped


def build_part(cfg, part: str, checkpoint: Optional[str] = None,
               size_divisor: Optional[int] = None) -> nn.Module:
    """The eval-mode module of ``part`` of an mmdet/mmseg config, ready for export.

    Args:
        cfg (mmengine.Config): A detector or segmentor config with a ViT5 backbone.
        part (str): ``'backbone'``, ``'neck'`` (backbone + neck) or ``'segmentor'`` (image to
            logits; mmseg configs only).
        checkpoint (str, optional): An mmengine checkpoint of the whole model (``tools/train.py``
            writes them). None gives random weights (the backbone's pretrained file is not
            read): enough to check and time the graph.
        size_divisor (int, optional): The module pads its input to multiples of it (any side
            is then valid). None: the coarsest stride of the part's maps
            (:func:`coarsest_stride`), measured with one forward.
    """
    from mmengine.logging import MMLogger
    from mmengine.runner import load_checkpoint
    if part not in PARTS:
        raise ValueError(f'part must be one of {PARTS}, got {part!r}')
    is_segmentor = 'decode_head' in cfg.model
    if part == 'segmentor' and not is_segmentor:
        raise ValueError(f'part {part!r} needs an mmseg config with a decode_head; this config '
                         f'builds a {cfg.model.type}: export part "neck" (backbone + neck) and '
                         'the heads through mmdeploy (docs/en/user_guides/onnx.md'
                         '#mask-r-cnn-heads-the-mmdeploy-route)')
    if is_segmentor:
        from mmseg.registry import MODELS
        from mmseg.utils import register_all_modules
    else:
        from mmdet.registry import MODELS
        from mmdet.utils import register_all_modules
    register_all_modules(init_default_scope=False)
    cfg.model.backbone.init_cfg = None
    model = MODELS.build(cfg.model)
    if checkpoint:
        load_checkpoint(model, checkpoint, map_location='cpu', strict=True)
    else:
        logger = MMLogger.get_current_instance()
        level = logger.level
        logger.setLevel('WARNING')  # init_weights logs every parameter
        try:
            model.init_weights()
        finally:
            logger.setLevel(level)
    model.eval()
    if part == 'segmentor':
        return SegmentorLogits(model, size_divisor or 32).eval()
    wrapped = BackboneWithNeck(model.backbone, model.neck if part == 'neck' else None).eval()
    # a probe at a side every stride divides (ViT-5's coarsest pyramid level is 64)
    wrapped.size_divisor = size_divisor or coarsest_stride(
        wrapped, example_input((1, 3, 128, 128), part), part)
    return wrapped
