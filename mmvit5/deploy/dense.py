"""Per-pixel models (mmseg ``EncoderDecoder``: UperNet, Mask2Former semantic; mmseg
``DepthEstimator``: DPT depth) from the padded batch to their map, as their ``predict``.

The config's ``test_cfg.mode`` is followed: ``whole``; ``slide`` (windows of ``crop_size``
every ``stride``, overlaps averaged); ``slide_flip`` (depth: each window averaged with its
mirror image). The windows of a fixed-size graph are unrolled at export; a graph with
symbolic sides runs one window over the whole image, which is what mmseg's sliding
inference does for an image no larger than ``crop_size``, and
:func:`~.slide.slide_windows` slides it over larger ones.
"""

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from .slide import windows

DENSE_MODES = ('whole', 'slide', 'slide_flip')


class Sides(tuple):
    """(H, W) that ``copy.deepcopy`` returns as they are: mmseg's Mask2Former head copies the
    metainfo into a data sample, and symbolic sides (a graph's) cannot be copied."""

    def __deepcopy__(self, memo) -> 'Sides':
        return self


def test_mode(model: nn.Module) -> str:
    """What the model's ``predict`` runs: its ``test_cfg.mode``, except that mmseg 1.2's
    ``DepthEstimator.inference`` runs ``whole`` for ``slide`` (its ``slide`` branch is
    overwritten by the ``whole`` one)."""
    mode = model.test_cfg.get('mode', 'whole')
    if mode not in DENSE_MODES:
        raise ValueError(f'test_cfg.mode {mode!r} cannot be exported; expected one of '
                         f'{DENSE_MODES}')
    if mode == 'slide' and type(model).__name__ == 'DepthEstimator':
        return 'whole'
    return mode


class DenseMap(nn.Module):
    """An mmseg segmentor or depth estimator from the padded batch to its per-pixel map.

    Args:
        model (nn.Module): mmseg ``EncoderDecoder`` or ``DepthEstimator``, eval mode.
        one_window (bool): Run ``slide`` / ``slide_flip`` as one window over the whole
            image (for graphs with symbolic sides: equal to the config's inference up to
            ``crop_size``).

    Shape:
        - Input: ``x`` (N, 3, H', W'), the padded batch; ``height`` and ``width`` of the
          images in it (H, W).
        - Output: (N, C, H, W): class logits, or depth in metres (C = 1).
    """

    def __init__(self, model: nn.Module, one_window: bool = False) -> None:
        super().__init__()
        self.model = model
        self.mode = test_mode(model)
        self.flip = self.mode == 'slide_flip'
        self.slide = self.mode != 'whole' and not one_window
        if self.mode != 'whole':
            self.crop_size = tuple(model.test_cfg.crop_size)
            self.stride = tuple(model.test_cfg.stride)

    def window(self, x: torch.Tensor) -> torch.Tensor:
        # mmseg's heads resize their output to img_shape (the padded size)
        metas = [dict(img_shape=Sides(x.shape[2:]))]
        out = self.model.encode_decode(x, metas)
        if self.flip:
            out = (out + self.model.encode_decode(x.flip(3), metas).flip(3)) / 2.0
        return out

    def forward(self, x: torch.Tensor, height, width) -> torch.Tensor:
        if not self.slide:
            out = self.window(x)
        else:
            rows, cols = x.shape[2:]
            out = None
            count = np.zeros((rows, cols), np.float32)
            # mmseg's sum, window by window, divided by how many windows cover each pixel
            for y1, y2, x1, x2 in windows(rows, cols, self.crop_size, self.stride):
                padded = F.pad(self.window(x[:, :, y1:y2, x1:x2]),
                               (x1, cols - x2, y1, rows - y2))
                out = padded if out is None else out + padded
                count[y1:y2, x1:x2] += 1
            out = out / torch.from_numpy(count).to(out.device)
        return out[:, :, :height, :width]
