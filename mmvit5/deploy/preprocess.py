"""The test-time image path of an mmdet/mmseg data preprocessor as one module in the graph.

mmengine's ``ImgDataPreprocessor`` (mmdet's ``DetDataPreProcessor``) and mmseg's
``SegDataPreProcessor`` turn the loader's images into the model's input in the same order:
channel flip, float, ``(x - mean) / std``, then padding at the bottom and right with the pad
value (after normalisation: 0 is the mean colour). They differ in *when* they pad at test
time: mmdet always pads to multiples of ``pad_size_divisor`` (1: no padding); mmseg pads only
when its ``test_cfg`` says so (``size_divisor`` or a fixed ``size``), and the shipped mmseg
configs do not. :class:`Preprocess` pads exactly where the config does, so the graph computes
what the config's ``test_step`` computes at every size.
"""
from typing import Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F


def pad_to_multiple(x: torch.Tensor, size_divisor: Optional[int],
                    value: float = 0.0) -> torch.Tensor:
    """``x`` (B, C, H, W) padded at the bottom and right with ``value`` to sides that are
    multiples of ``size_divisor``, as mmengine's ``stack_batch`` pads a batch. None (or 1)
    returns ``x``."""
    if not size_divisor or size_divisor == 1:
        return x
    height, width = x.shape[-2:]
    # ceil division written with floor division: torch.export keeps it symbolic
    pad_h = (height + size_divisor - 1) // size_divisor * size_divisor - height
    pad_w = (width + size_divisor - 1) // size_divisor * size_divisor - width
    return F.pad(x, (0, pad_w, 0, pad_h), value=value)


class Preprocess(nn.Module):
    """Channel order, mean/std and padding of a data preprocessor, from a 0-255 image.

    Args:
        mean (Sequence[float], optional): Per-channel mean (after the flip); None: no
            normalisation.
        std (Sequence[float], optional): Per-channel std.
        flip_channels (bool): Reverse the channel order first (``bgr_to_rgb``).
        pad_value (float): What padding holds (in normalised units).
        size_divisor (int, optional): Pad to multiples of it (mmdet's ``pad_size_divisor``,
            mmseg's ``test_cfg.size_divisor``); None or 1: no padding.
        pad_size (tuple[int, int], optional): Pad up to this (H, W) (mmseg's
            ``test_cfg.size``); sides already larger stay.
        scope (str): ``'mmdet'`` or ``'mmseg'``: whose preprocessor this is (they configure
            test padding differently, :func:`size_divisor_line`).

    Shape:
        - Input: (B, 3, H, W) float, 0-255, in the loader's channel order.
        - Output: (B, 3, H', W'), normalised and padded.
    """

    def __init__(self, mean=None, std=None, flip_channels: bool = False, pad_value: float = 0.0,
                 size_divisor: Optional[int] = None,
                 pad_size: Optional[Tuple[int, int]] = None, scope: str = 'mmdet') -> None:
        super().__init__()
        self.scope = scope
        self.normalize = mean is not None
        if self.normalize:
            self.register_buffer('mean', torch.as_tensor(mean, dtype=torch.float32).view(
                1, -1, 1, 1).clone())
            self.register_buffer('std', torch.as_tensor(std, dtype=torch.float32).view(
                1, -1, 1, 1).clone())
        self.flip_channels = flip_channels
        self.pad_value = float(pad_value)
        self.size_divisor = size_divisor if size_divisor and size_divisor > 1 else None
        self.pad_size = tuple(pad_size) if pad_size else None

    @classmethod
    def from_model(cls, model: nn.Module, size_divisor: Optional[int] = None) -> 'Preprocess':
        """The test-time path of ``model.data_preprocessor``; ``size_divisor`` (not None)
        pads to its multiples instead of what the config does."""
        pre = model.data_preprocessor
        is_seg = hasattr(pre, 'pad_val')  # mmseg's SegDataPreProcessor
        normalize = pre._enable_normalize
        flip = pre.channel_conversion if is_seg else pre._channel_conversion
        pad_value = pre.pad_val if is_seg else pre.pad_value
        pad_size = None
        if size_divisor is None:
            if is_seg:
                test_cfg = pre.test_cfg or {}
                size_divisor = test_cfg.get('size_divisor')
                pad_size = test_cfg.get('size')
            else:
                size_divisor = pre.pad_size_divisor
        return cls(mean=pre.mean.flatten().tolist() if normalize else None,
                   std=pre.std.flatten().tolist() if normalize else None,
                   flip_channels=bool(flip), pad_value=pad_value, size_divisor=size_divisor,
                   pad_size=pad_size, scope='mmseg' if is_seg else 'mmdet')

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        x = image.flip(1) if self.flip_channels else image
        if self.normalize:
            x = (x - self.mean) / self.std
        if self.pad_size is not None:
            pad_h = torch.sym_max(self.pad_size[0] - x.shape[-2], 0)
            pad_w = torch.sym_max(self.pad_size[1] - x.shape[-1], 0)
            return F.pad(x, (0, pad_w, 0, pad_h), value=self.pad_value)
        return pad_to_multiple(x, self.size_divisor, self.pad_value)

    def extra_repr(self) -> str:
        pads = f'size {self.pad_size}' if self.pad_size else \
            f'multiples of {self.size_divisor}' if self.size_divisor else 'none'
        return f'flip_channels={self.flip_channels}, normalize={self.normalize}, pad: {pads}'


def size_divisor_line(preprocess: Preprocess, size_divisor: int) -> str:
    """The config line that makes the config's own test pad as a graph exported with
    ``--size-divisor size_divisor`` does (``preprocess``: the graph's)."""
    if preprocess.scope == 'mmseg':
        return f'model = dict(data_preprocessor=dict(test_cfg=dict(size_divisor={size_divisor})))'
    return f'model = dict(data_preprocessor=dict(pad_size_divisor={size_divisor}))'
