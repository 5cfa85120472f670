"""ViTDet's simple feature pyramid: strides 4..32 (and 64) from a plain ViT's stride-16 map."""
import numbers
from typing import List, Sequence, Tuple, Union

import torch
import torch.nn as nn
import torch.nn.functional as F
from mmcv.cnn import ConvModule, build_norm_layer
from mmengine.model import BaseModule
from mmengine.registry import MODELS

from ...checks import check_number
from ..layers import norm  # noqa: F401  registers LN2d for norm_cfg


@MODELS.register_module()
class SimpleFeaturePyramid(BaseModule):
    """Simple feature pyramid of ViTDet (Li et al., 2022) for a stride-16 ViT.

    Each scale factor turns the stride-16 map into one level: 4 -> two 2x2 deconvolutions
    (with norm and GELU between), 2 -> one deconvolution, 1 -> identity, 0.5 -> 2x2 max-pool.
    Every level then gets a 1x1 and a 3x3 conv (bias-free, each followed by the norm).
    Extra levels beyond ``len(scale_factors)`` are stride-2 subsamplings of the last one
    (ViTDet's ``LastLevelMaxPool``, the stride-64 level of the RPN).

    Args:
        in_channels (int | Sequence[int]): Channels of the backbone map. A sequence gives
            one input per scale factor (multi-layer input, features from several
            ``out_indices``, as BEiT/mmseg ViT configs use); an int takes every level from the
            last input.
        out_channels (int): Channels of every output level.
        scale_factors (Sequence[float]): Subset of (4, 2, 1, 0.5), largest first.
        num_outs (int): Output levels; at least ``len(scale_factors)``.
        norm_cfg (dict): Norm after each conv. Defaults to ``dict(type='LN2d', eps=1e-6)``.
        init_cfg (dict, optional): mmengine init config.

    Shape:
        - Input: tuple of (B, C_in, H, W) maps at stride 16.
        - Output: tuple of ``num_outs`` maps (B, out_channels, H * s, W * s).
    """

    def __init__(self,
                 in_channels: Union[int, Sequence[int]],
                 out_channels: int = 256,
                 scale_factors: Sequence[float] = (4.0, 2.0, 1.0, 0.5),
                 num_outs: int = 5,
                 norm_cfg: dict = dict(type='LN2d', eps=1e-6),
                 init_cfg=None) -> None:
        super().__init__(init_cfg=init_cfg)
        self.scale_factors = tuple(float(s) for s in scale_factors)
        unsupported = set(self.scale_factors) - {4.0, 2.0, 1.0, 0.5}
        if unsupported or not self.scale_factors:
            raise ValueError(f'scale_factors may contain 4, 2, 1 and 0.5 (at least one), got '
                             f'{list(scale_factors)}')
        check_number('out_channels', out_channels, low=1, integer=True,
                     hint='256 as mmdet\'s FPN necks')
        check_number('num_outs', num_outs, low=len(self.scale_factors), integer=True,
                     hint=f'one level per scale factor {self.scale_factors}, more adds '
                     'stride-2 subsamplings of the last')
        if isinstance(in_channels, numbers.Integral):
            self.multi_input = False
            in_channels = [in_channels] * len(self.scale_factors)
        else:
            self.multi_input = True
            if len(in_channels) != len(self.scale_factors):
                raise ValueError(f'in_channels {list(in_channels)} must give one entry per scale '
                                 f'factor {self.scale_factors}, or be a single int')
        for scale, channels in zip(self.scale_factors, in_channels):
            # each 2x deconvolution halves the channels
            check_number('in_channels', channels, low=int(max(scale, 1)), integer=True,
                         hint=f"the backbone's embed_dim (scale factor {scale:g} divides it by "
                         f'{int(max(scale, 1))})')
        self.in_channels = list(in_channels)
        self.num_outs = num_outs
        self.stages = nn.ModuleList()
        for scale, channels in zip(self.scale_factors, self.in_channels):
            resample, dim = self._resample(scale, channels, norm_cfg)
            self.stages.append(nn.Sequential(
                *resample,
                ConvModule(dim, out_channels, 1, bias=False, norm_cfg=norm_cfg, act_cfg=None),
                ConvModule(out_channels, out_channels, 3, padding=1, bias=False,
                           norm_cfg=norm_cfg, act_cfg=None)))

    @staticmethod
    def _resample(scale: float, dim: int, norm_cfg: dict) -> Tuple[List[nn.Module], int]:
        if scale == 4.0:
            return [nn.ConvTranspose2d(dim, dim // 2, 2, stride=2),
                    build_norm_layer(norm_cfg, dim // 2)[1], nn.GELU(),
                    nn.ConvTranspose2d(dim // 2, dim // 4, 2, stride=2)], dim // 4
        if scale == 2.0:
            return [nn.ConvTranspose2d(dim, dim // 2, 2, stride=2)], dim // 2
        if scale == 1.0:
            return [], dim
        return [nn.MaxPool2d(2, stride=2)], dim

    def forward(self, inputs: Sequence[torch.Tensor]) -> Tuple[torch.Tensor, ...]:
        if self.multi_input and len(inputs) != len(self.stages):
            raise ValueError(f'SimpleFeaturePyramid was built for {len(self.stages)} inputs '
                             f'(in_channels {self.in_channels}), got {len(inputs)}; match the '
                             "backbone's out_indices")
        sources = inputs if self.multi_input else [inputs[-1]] * len(self.stages)
        got = [x.shape[1] for x in sources]
        if got != self.in_channels:
            # otherwise a bare conv_transpose2d / conv2d channel error from inside torch
            raise ValueError(f'SimpleFeaturePyramid was built with in_channels '
                             f'{self.in_channels} but the backbone gives {got} channels; set '
                             "the neck's in_channels to the backbone's embed_dim "
                             f'({got[-1]})')
        outs = [stage(x) for stage, x in zip(self.stages, sources)]
        while len(outs) < self.num_outs:
            outs.append(F.max_pool2d(outs[-1], kernel_size=1, stride=2))
        # LN2d and a channels-last input leave channels-last maps; one copy here rather than
        # one per RoI extractor call (mmcv's RoIAlign needs NCHW memory, see compat)
        return tuple(out.contiguous() for out in outs)
