"""Layer-wise learning-rate decay for ViT5 (BEiT / ViTDet recipe) as an mmengine constructor."""
from typing import List, Tuple

import torch.nn as nn
from mmengine.logging import print_log
from mmengine.optim import DefaultOptimWrapperConstructor
from mmengine.registry import OPTIM_WRAPPER_CONSTRUCTORS

from ...models.backbones.vit5 import ViT5

# parameters that never get weight decay besides every 1-D tensor (norms, gammas, biases)
NO_DECAY_TOKENS = ('cls_token', 'reg_token', 'pos_embed')


@OPTIM_WRAPPER_CONSTRUCTORS.register_module()
class ViT5LayerDecayOptimizerConstructor(DefaultOptimWrapperConstructor):
    """AdamW-style parameter groups with layer-wise lr decay over a ViT5 backbone.

    (mmseg's own ``LayerDecayOptimizerConstructor`` only knows ConvNeXt/BEiT/MAE parameter
    names, and shadows any root-registry class of that name in mmseg configs.)

    Depth 0 is the patch embedding and the ``cls_token``/``reg_token``/``pos_embed``; block
    ``i`` is depth ``i + 1``; the final norm, necks and heads are depth ``num_layers + 1`` and
    train at the full rate. A parameter at depth ``d`` gets
    ``lr = base_lr * layer_decay_rate ** (num_layers + 1 - d)``. Norm weights, LayerScale
    gammas, biases and the tokens/position embedding get no weight decay. The groups are
    logged once as a table (depth, lr scale, weight decay, parameter count).

    ``paramwise_cfg`` keys:
        layer_decay_rate (float): Decay per block, e.g. 0.7 (ViTDet-B) or 0.65 (BEiT-B).
        num_layers (int, optional): Defaults to the ViT5 backbone's depth.

    Example:
        >>> optim_wrapper = dict(
        ...     type='OptimWrapper',
        ...     optimizer=dict(type='AdamW', lr=1e-4, weight_decay=0.1),
        ...     constructor='ViT5LayerDecayOptimizerConstructor',
        ...     paramwise_cfg=dict(layer_decay_rate=0.7))
    """

    def add_params(self, params: List[dict], module: nn.Module, **kwargs) -> None:
        prefix, backbone = self._find_backbone(module)
        unknown = set(self.paramwise_cfg) - {'layer_decay_rate', 'num_layers'}
        if unknown:
            raise ValueError(f'ViT5LayerDecayOptimizerConstructor paramwise_cfg accepts '
                             f'layer_decay_rate and num_layers, got {sorted(unknown)}')
        num_layers = self.paramwise_cfg.get('num_layers', backbone.depth)
        rate = float(self.paramwise_cfg.get('layer_decay_rate', 1.0))
        if not 0 < rate <= 1:
            raise ValueError(f'layer_decay_rate must be in (0, 1], got {rate}')
        weight_decay = self.base_wd or 0.0
        groups = {}
        for name, param in module.named_parameters():
            if not param.requires_grad:
                continue
            depth = self.layer_depth(name, prefix, num_layers)
            no_decay = param.ndim == 1 or name.endswith(NO_DECAY_TOKENS)
            key = (depth, no_decay)
            if key not in groups:
                scale = rate**(num_layers + 1 - depth)
                groups[key] = dict(params=[], param_names=[], lr=self.base_lr * scale,
                                   lr_scale=scale, weight_decay=0.0 if no_decay else weight_decay)
            groups[key]['params'].append(param)
            groups[key]['param_names'].append(name)
        params.extend(groups[k] for k in sorted(groups))
        self._log_groups(groups)

    @staticmethod
    def layer_depth(name: str, prefix: str, num_layers: int) -> int:
        """Depth of a parameter name of the whole model (see the class docstring)."""
        if not name.startswith(prefix):
            return num_layers + 1
        local = name[len(prefix):]
        if local.startswith(('patch_embed.', *NO_DECAY_TOKENS)):
            return 0
        if local.startswith('blocks.'):
            return int(local.split('.')[1]) + 1
        return num_layers + 1

    @staticmethod
    def _find_backbone(module: nn.Module) -> Tuple[str, ViT5]:
        for name, sub in module.named_modules():
            if isinstance(sub, ViT5):
                return (name + '.' if name else ''), sub
        raise TypeError('ViT5LayerDecayOptimizerConstructor needs a model with a ViT5 backbone; '
                        f'{type(module).__name__} has none. Use the default constructor.')

    @staticmethod
    def _log_groups(groups: dict) -> None:
        lines = ['ViT5LayerDecayOptimizerConstructor parameter groups:',
                 f'{"depth":>5} {"lr scale":>9} {"wd":>7} {"tensors":>7} {"params":>10}  first']
        for (depth, _), group in sorted(groups.items()):
            count = sum(p.numel() for p in group['params'])
            lines.append(f'{depth:>5} {group["lr_scale"]:>9.4f} {group["weight_decay"]:>7.3g} '
                         f'{len(group["params"]):>7} {count:>10}  {group["param_names"][0]}')
        print_log('\n'.join(lines), logger='current')
