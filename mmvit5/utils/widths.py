"""Channel widths a detector / segmentor config must keep consistent, checked before building.

Changing ``backbone.arch`` without the neck's ``in_channels`` (or the neck's ``out_channels``
without the heads') otherwise fails deep in torch with a bare ``conv_transpose2d`` or
``conv2d`` channel error. :func:`check_widths` names every field to set instead, and
:func:`sync_widths` sets them (used to shrink a config for smoke runs, :func:`shrink_model`).
"""
import math
from typing import Any, List, Optional, Tuple

from mmengine.config import ConfigDict

from ..models.backbones.vit5_config import ARCH_ZOO

Mismatch = Tuple[str, Any, Any, str]  # path, current value, value to set, where it comes from

# widths inside heads that no other module reads: free to shrink
HIDDEN_WIDTH_KEYS = ('feat_channels', 'conv_out_channels', 'fc_out_channels', 'channels')
# widths of transformer heads (Mask2Former) tied to ``feat_channels`` / ``out_channels``:
# attention and FFN widths, sine position encodings (2 * num_feats wide), GroupNorm groups
TIED_WIDTHS = {
    'out_channels': lambda width, value: width,
    'embed_dims': lambda width, value: width,
    'feedforward_channels': lambda width, value: 4 * width,
    'num_feats': lambda width, value: width // 2,
    'num_groups': lambda width, value: math.gcd(value, width),
    'post_process_channels': lambda width, value: [width] * len(value),  # DPTDepthHead
}


def vit5_arch(backbone: dict) -> Optional[dict]:
    """``embed_dim``, ``depth``, ``num_heads`` of a ViT5 backbone config; None for other
    backbones and for an arch ViT5 itself will reject with its own message."""
    if backbone.get('type') != 'ViT5':
        return None
    arch = backbone.get('arch', 'base')
    if isinstance(arch, str):
        return ARCH_ZOO.get(arch.lower())
    return arch if {'embed_dim', 'depth'} <= set(arch) else None


def _as_list(value) -> list:
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _expect(path: str, current, expected, source: str, found: List[Mismatch]) -> None:
    if current is not None and expected is not None and current != expected:
        found.append((path, current, expected, source))


def width_mismatches(model: dict) -> List[Mismatch]:
    """Every channel field of ``model`` (a config dict) that disagrees with its producer."""
    found: List[Mismatch] = []
    neck = model.get('neck') or {}
    if isinstance(neck, dict) and neck.get('type') == 'SimpleFeaturePyramid':
        settings = vit5_arch(model.get('backbone') or {})
        if settings is not None:
            width = settings['embed_dim']
            source = f"ViT5 arch {model['backbone'].get('arch', 'base')!r} has embed_dim {width}"
            current = neck.get('in_channels')
            expected = [width] * len(current) if isinstance(current, (list, tuple)) else width
            _expect('model.neck.in_channels', current, expected, source, found)
    channels = neck.get('out_channels') if isinstance(neck, dict) else None
    source = f'model.neck.out_channels is {channels}'
    rpn = model.get('rpn_head') or {}
    _expect('model.rpn_head.in_channels', rpn.get('in_channels'), channels, source, found)
    roi = model.get('roi_head') or {}
    # RoI extractors pass the pyramid's channels through: their heads read neck.out_channels
    for field in ('bbox_roi_extractor.out_channels', 'bbox_head.in_channels',
                  'mask_roi_extractor.out_channels', 'mask_head.in_channels'):
        key, attr = field.split('.')
        modules = roi.get(key)
        if modules is None:
            continue
        for i, module in enumerate(_as_list(modules)):
            index = f'.{i}' if isinstance(modules, list) else ''
            _expect(f'model.roi_head.{key}{index}.{attr}', module.get(attr), channels, source,
                    found)
    if not neck:  # a head reading the backbone directly (DPTDepthHead)
        settings = vit5_arch(model.get('backbone') or {})
        if settings is not None:
            channels = settings['embed_dim']
            source = (f"ViT5 arch {model['backbone'].get('arch', 'base')!r} has embed_dim "
                      f'{channels}')
    # mmseg's decode heads, mmdet's MaskFormer / Mask2Former heads
    for key in ('decode_head', 'panoptic_head'):
        current = (model.get(key) or {}).get('in_channels')
        if isinstance(current, (list, tuple)):
            _expect(f'model.{key}.in_channels', list(current), [channels] * len(current),
                    source, found)
        else:
            _expect(f'model.{key}.in_channels', current, channels, source, found)
    for i, aux in enumerate(_as_list(model.get('auxiliary_head') or [])):
        path = 'model.auxiliary_head' + (f'.{i}' if isinstance(model['auxiliary_head'], list)
                                         else '')
        _expect(f'{path}.in_channels', aux.get('in_channels'), channels, source, found)
    return found


def check_widths(model: dict, path: str = 'config') -> None:
    """Raise ValueError naming every width field to set, e.g. after changing ``arch``."""
    found = width_mismatches(model)
    if found:
        lines = [f'  {p} is {c}; set it to {e} ({s})' for p, c, e, s in found]
        fix = ' '.join(f'{p}={e!r}'.replace(' ', '') for p, _, e, _ in found)
        raise ValueError(f'{path}: channel widths do not match:\n' + '\n'.join(lines) +
                         f'\nin the config, or with --cfg-options {fix}')


def sync_widths(model: ConfigDict) -> None:
    """Set every mismatched width field of ``model`` to the value its producer gives."""
    for path, _, expected, _ in width_mismatches(model):
        keys = path.split('.')[1:]
        node = model
        for key in keys[:-1]:
            node = node[int(key)] if key.isdigit() else node[key]
        node[keys[-1]] = expected


def _scale_indices(indices, depth: int, new_depth: int) -> List[int]:
    """Block ``i`` of ``depth`` -> the block at the same relative depth of ``new_depth``
    (repeats kept: a neck expects one input per entry)."""
    return [max(0, (i % depth + 1) * new_depth // depth - 1) for i in _as_list(indices)]


def shrink_model(model: ConfigDict, embed_dim: int = 32, depth: int = 4, num_heads: int = 2,
                 width: int = 16) -> None:
    """Shrink a ViT5 detector/segmentor config in place for smoke runs, keeping its layout.

    The backbone becomes ``embed_dim`` x ``depth`` without pretrained weights; ``out_indices``
    keep their relative depths; with windowed attention only the last block stays global
    (ViTDet's every-third-block layout, scaled, would make every block of a shallow model
    global). The neck and every head get width ``width`` (transformer heads their attention,
    FFN and position-encoding widths with it, :data:`TIED_WIDTHS`); the widths that must agree
    are then synchronised (:func:`sync_widths`).
    """
    backbone = model.backbone
    if backbone.get('type') != 'ViT5':
        raise ValueError(f"shrink_model needs a ViT5 backbone, got {backbone.get('type')!r}")
    old_depth = vit5_arch(backbone)['depth']
    backbone.arch = dict(embed_dim=embed_dim, depth=depth, num_heads=num_heads)
    if backbone.get('out_indices') is not None:
        backbone.out_indices = _scale_indices(backbone.out_indices, old_depth, depth)
    if backbone.get('window_size'):
        backbone.global_attn_indices = [depth - 1]
    backbone.init_cfg = None
    if model.get('neck', {}).get('out_channels') is not None:
        model.neck.out_channels = width
    _shrink_hidden(model, width)
    sync_widths(model)


def _shrink_hidden(node, width: int) -> None:
    if isinstance(node, (list, tuple)):
        for item in node:
            _shrink_hidden(item, width)
    elif isinstance(node, dict):
        for key, value in node.items():
            if key == 'backbone':
                continue
            if key in HIDDEN_WIDTH_KEYS and isinstance(value, int):
                node[key] = width
            elif key in TIED_WIDTHS and isinstance(value, (int, list, tuple)):
                node[key] = TIED_WIDTHS[key](width, value)
            else:
                _shrink_hidden(value, width)
