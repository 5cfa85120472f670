"""DPT's depth head (Ranftl et al., 2021) for a plain ViT under mmseg's ``DepthEstimator``."""
from typing import List, Sequence

import torch
import torch.nn as nn
from mmcv.cnn import ConvModule
from mmseg.models.decode_heads.decode_head import BaseDecodeHead
from mmseg.models.decode_heads.dpt_head import FeatureFusionBlock, ReassembleBlocks
from mmseg.models.decode_heads.vpd_depth_head import VPDDepthHead
from mmseg.registry import MODELS


@MODELS.register_module()
class DPTDepthHead(VPDDepthHead):
    """Reassemble + fusion decoder of DPT with its monocular depth output.

    Four stride-16 maps of a plain ViT (e.g. blocks 3, 6, 9, 12) are *reassembled* into strides
    4, 8, 16 and 32 (1x1 projection, then 4x / 2x transposed conv, identity, stride-2 conv),
    each brought to ``channels`` by a 3x3 conv and *fused* coarse to fine by residual conv
    units with 2x upsampling (mmseg's ``ReassembleBlocks`` and ``FeatureFusionBlock``). The
    depth output is DPT's: 3x3 conv to ``channels // 2``, 2x upsampling, 3x3 conv to 32, ReLU,
    1x1 conv to one channel, here squashed to ``(0, max_depth)`` by a sigmoid (metric depth,
    as mmseg's ``VPDDepthHead``, whose SiLog loss on the resized prediction this head shares).

    The class token is ignored (DPT's ``readout='ignore'``): the backbone's maps carry none.

    Args:
        in_channels (int): Channels of every backbone map (the ViT's ``embed_dim``).
        post_process_channels (Sequence[int]): Channels after reassembling, stride 4 to 32.
        channels (int): Fusion width. Defaults to 256, as DPT.
        max_depth (float): Largest predicted depth (metres). Defaults to 10, NYU's range.
        norm_cfg (dict, optional): Norm in the residual conv units; None (default) as DPT.
        align_corners (bool): For the final resize to the label size.
        loss_decode (dict): Depth loss. Defaults to mmseg's ``SiLogLoss``.
        init_cfg (dict, optional): mmengine init config.

    Shape:
        - Input: four (B, in_channels, H / 16, W / 16) maps.
        - Output: (B, 1, H, W) depth in metres (the fusions end at stride 2, the depth output
          upsamples once more; resized to the label in the loss and to the image at inference).
    """

    def __init__(self,
                 in_channels: int = 768,
                 post_process_channels: Sequence[int] = (96, 192, 384, 768),
                 channels: int = 256,
                 max_depth: float = 10.0,
                 norm_cfg=None,
                 align_corners: bool = False,
                 loss_decode: dict = dict(type='SiLogLoss'),
                 init_cfg=None) -> None:
        # neither VPDDepthHead's layers nor BaseDecodeHead's classifier are wanted: start from
        # BaseModule, as VPDDepthHead itself does
        super(BaseDecodeHead, self).__init__(init_cfg=init_cfg)
        if not isinstance(in_channels, int):
            raise TypeError(f'DPTDepthHead.in_channels is the width of every backbone map (an '
                            f'int, the ViT embed_dim), got {in_channels!r}')
        if len(post_process_channels) != 4:
            raise ValueError(f'post_process_channels needs 4 entries (strides 4, 8, 16, 32), '
                             f'got {list(post_process_channels)}')
        self.in_channels = in_channels
        self.channels = channels
        self.max_depth = max_depth
        self.align_corners = align_corners
        self.reassemble = ReassembleBlocks(in_channels, list(post_process_channels), 'ignore')
        self.convs = nn.ModuleList(
            ConvModule(c, channels, 3, padding=1, act_cfg=None, bias=False)
            for c in post_process_channels)
        act_cfg = dict(type='ReLU')
        self.fusions = nn.ModuleList(
            FeatureFusionBlock(channels, act_cfg, norm_cfg) for _ in post_process_channels)
        self.fusions[0].res_conv_unit1 = None  # the coarsest level has nothing to fuse
        self.depth = nn.Sequential(
            nn.Conv2d(channels, channels // 2, 3, padding=1),
            nn.Upsample(scale_factor=2, mode='bilinear', align_corners=True),
            nn.Conv2d(channels // 2, 32, 3, padding=1), nn.ReLU(inplace=True),
            nn.Conv2d(32, 1, 1))
        self.loss_decode = MODELS.build(loss_decode)

    def forward(self, inputs: List[torch.Tensor]) -> torch.Tensor:
        if len(inputs) != 4:
            raise ValueError(f'DPTDepthHead reassembles 4 backbone maps, got {len(inputs)}; '
                             'give the backbone 4 out_indices, e.g. (2, 5, 8, 11)')
        levels = self.reassemble([[x, None] for x in inputs])
        levels = [conv(x) for conv, x in zip(self.convs, levels)]
        out = self.fusions[0](levels[-1])
        for fusion, skip in zip(self.fusions[1:], levels[-2::-1]):
            out = fusion(out, skip)
        return torch.sigmoid(self.depth(out)) * self.max_depth
