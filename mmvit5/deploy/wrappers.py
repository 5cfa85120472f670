"""What every exported part shares: the backbone (+ neck) part, output names, example
inputs, and the swaps that make a model's copy exportable (adaptive average pooling, in
UperNet's pyramid pooling, at dynamic sizes; Mask2Former's deformable pixel decoder).

Every part is the config's own model; the wrappers only fix what goes in and out of the graph
(one image tensor in, a tuple of named outputs out) and pad the image as the config's data
preprocessor does (inside the graph, so that no side a user feeds gives other numbers).
"""
import functools
import math
from typing import List, Optional, Sequence, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

from .preprocess import pad_to_multiple


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


def output_names(model: nn.Module, x: torch.Tensor) -> List[str]:
    """Names of the graph outputs of a :func:`~.build.build_part` module.

    The whole model's (:data:`~.build.OUTPUTS`); else, from one forward on ``x``: ``p<l>`` per
    neck level of stride ``2**l`` (the FPN naming:
    ``p2`` .. ``p6`` for Mask R-CNN's pyramid); ``block<i>`` per backbone output after block
    ``i`` (its ``out_indices``). A repeated name gets ``_1``, ``_2``, ... appended.
    """
    if hasattr(model, 'output_names'):
        return list(model.output_names)
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
    whole model, a standard-normal (normalised) one for backbone and neck."""
    generator = torch.Generator().manual_seed(seed)
    if part == 'model':
        return torch.rand(*shape, generator=generator) * 255
    return torch.randn(*shape, generator=generator)


def coarsest_stride(model: nn.Module, x: torch.Tensor) -> int:
    """The largest input-to-output stride of the maps of ``model`` (a backbone, + neck) on
    ``x``: what the input is padded to multiples of. ``x``'s sides should be multiples of the
    stride to measure it."""
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


def fuse_any_size(block: nn.Module, *inputs: torch.Tensor) -> torch.Tensor:
    """mmseg's DPT ``FeatureFusionBlock.forward`` with the skip always resized to the
    upsampled coarser map (bilinear to its own size is the identity).

    mmseg resizes only where the two shapes differ (odd grids: a side of the image that is
    not a multiple of 32); traced at an even grid, that test would leave the resize out of
    the graph, and other sides would fail on adding maps of two sizes.
    """
    x = inputs[0]
    if len(inputs) == 2:
        skip = F.interpolate(inputs[1], size=x.shape[2:], mode='bilinear', align_corners=False)
        x = x + block.res_conv_unit1(skip)
    x = block.res_conv_unit2(x)
    x = F.interpolate(x, scale_factor=2, mode='bilinear', align_corners=block.align_corners)
    return block.project(x)


def exportable(model: nn.Module) -> int:
    """Swap every ``nn.AdaptiveAvgPool2d`` of ``model`` for :class:`MatmulAdaptiveAvgPool2d`,
    Mask2Former's pixel decoder and deformable attention for their exportable subclasses
    (:func:`~.mask2former.exportable_mask2former`), and give DPT's fusion blocks a forward
    that resizes at any size (:func:`fuse_any_size`), in place; returns how many were
    swapped."""
    swapped = 0
    if any(type(m).__name__ == 'MSDeformAttnPixelDecoder' for m in model.modules()):
        from .mask2former import exportable_mask2former
        swapped += exportable_mask2former(model)
    for parent in model.modules():
        for name, child in parent.named_children():
            if isinstance(child, nn.AdaptiveAvgPool2d):
                setattr(parent, name, MatmulAdaptiveAvgPool2d(child.output_size))
                swapped += 1
            elif type(child).__name__ == 'FeatureFusionBlock':
                child.forward = functools.partial(fuse_any_size, child)
                swapped += 1
    return swapped
