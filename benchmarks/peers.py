"""The backbones benchmarked: ViT-5 presets and the peers built for the same token count."""
import importlib
from typing import Callable, Dict, List, Optional, Tuple

import torch
import torch.nn as nn

from .core import describe

VIT5_ARCHS = {'vit5-s': 'small', 'vit5-b': 'base', 'vit5-l': 'large'}
BASELINE = 'timm-vit-b'


class TimmFeatures(nn.Module):
    """timm model -> token features, so it does the backbone's work and not a pooled head."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model.forward_features(x)


def build_vit5(name: str, size: int, **kwargs) -> nn.Module:
    from mmvit5.models import ViT5
    return ViT5(arch=VIT5_ARCHS[name], img_size=size, out_indices=-1, out_type='featmap',
                **kwargs)


def build_mmseg_vit(size: int) -> nn.Module:
    from mmseg.models.backbones import VisionTransformer
    # DeiT-B as mmseg's ViT-B UperNet configs set it up
    return VisionTransformer(img_size=(size, size), embed_dims=768, num_layers=12,
                             num_heads=12, out_indices=(11, ), final_norm=True)


def build_mmpretrain_vit(size: int) -> nn.Module:
    from mmpretrain.models.backbones import VisionTransformer
    return VisionTransformer(arch='b', img_size=size, out_type='featmap',
                             interpolate_mode='bicubic')


def build_mmpretrain_eva02(size: int) -> nn.Module:
    from mmpretrain.models.backbones import ViTEVA02
    return ViTEVA02(arch='b', img_size=size, out_type='featmap')


def build_timm(name: str, size: int, **kwargs) -> nn.Module:
    import timm
    return TimmFeatures(timm.create_model(name, pretrained=False, img_size=size, num_classes=0,
                                          **kwargs))


# name -> (module whose import decides availability, builder)
PEERS: Dict[str, Tuple[str, Callable[[int], nn.Module]]] = {
    'mmseg-vit-b': ('mmseg.models', build_mmseg_vit),
    'mmpretrain-vit-b': ('mmpretrain.models', build_mmpretrain_vit),
    'mmpretrain-eva02-b': ('mmpretrain.models', build_mmpretrain_eva02),
    'timm-vit-b': ('timm', lambda size: build_timm('vit_base_patch16_224', size)),
    # timm's EVA-02 B is patch 14 only; patch 16 gives it the token count of the others
    'timm-eva02-b': ('timm', lambda size: build_timm('eva02_base_patch14_224.mim_in22k', size,
                                                     patch_size=16)),
}


def select_peers(spec: str) -> List[str]:
    """``all``, ``none`` or comma-separated names or prefixes (``timm``, ``mmpretrain-vit``)."""
    if spec == 'all':
        return list(PEERS)
    if spec == 'none':
        return []
    chosen = []
    for token in spec.split(','):
        matches = [n for n in PEERS if n == token or n.startswith(token + '-')]
        if not matches:
            raise SystemExit(f'--peers: unknown peer {token!r}; choose from {list(PEERS)}, '
                             'a prefix of them, all or none')
        chosen += [m for m in matches if m not in chosen]
    return chosen


def unavailable_reason(module: str) -> Optional[str]:
    """Why a peer's package cannot be used here, or None when it imports."""
    try:
        importlib.import_module(module)
    except Exception as exc:  # noqa: BLE001 - e.g. mmcv without compiled ops raises OSError
        return f'import {module} failed: {describe(exc)}'
    return None
