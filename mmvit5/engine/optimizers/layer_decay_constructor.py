"""Layer-wise learning-rate decay (BEiT / ViTDet recipe) as an mmengine constructor."""
from typing import List, Tuple

import torch.nn as nn
from mmengine.logging import print_log
from mmengine.optim import DefaultOptimWrapperConstructor
from mmengine.registry import OPTIM_WRAPPER_CONSTRUCTORS

from ...checks import check_number

# parameters that never get weight decay besides every 1-D tensor (norms, gammas, biases)
NO_DECAY_TOKENS = ('cls_token', 'reg_token', 'pos_embed')


@OPTIM_WRAPPER_CONSTRUCTORS.register_module()
class ViT5LayerDecayOptimizerConstructor(DefaultOptimWrapperConstructor):
    """AdamW-style parameter groups with layer-wise lr decay over a ViT backbone.

    (mmseg's own ``LayerDecayOptimizerConstructor`` only knows ConvNeXt/BEiT/MAE parameter
    names, and shadows any root-registry class of that name in mmseg configs.)

    The backbone says how deep each parameter is, through mmpretrain's
    ``get_layer_depth(param_name, prefix) -> (layer_depth, num_layers)`` (ViT5 has it, and so
    do mmpretrain's ViTs). For ViT5, depth 0 is the patch embedding and the
    ``cls_token``/``reg_token``/``pos_embed``; block ``i`` is depth ``i + 1``; the final norm,
    necks and heads are the last depth and train at the full rate. With ``N`` blocks
    (``num_layers - 2``), a parameter at depth ``d`` gets
    ``lr = base_lr * layer_decay_rate ** (N + 1 - d)``. Norm weights, LayerScale gammas, biases
    and the tokens/position embedding get no weight decay. The groups are logged once as a
    table (depth, lr scale, weight decay, parameter count).

    The keys of ``paramwise_cfg``:

    * ``layer_decay_rate`` (float): decay per block in (0, 1], e.g. 0.7 (ViTDet-B) or 0.65
      (BEiT-B); 1 switches decay off.
    * ``num_layers`` (int, optional): ``N``, the blocks the decay counts; defaults to the
      backbone's. A larger value scales every backbone parameter down further.

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
        rate = self.paramwise_cfg.get('layer_decay_rate', 1.0)
        check_number('layer_decay_rate', rate, low=0, high=1, low_open=True,
                     hint='e.g. 0.7 (ViTDet-B), 0.65 (BEiT-B); 1 for no decay')
        named = [(n, p) for n, p in module.named_parameters() if p.requires_grad]
        depths = {name: backbone.get_layer_depth(name, prefix) for name, _ in named}
        blocks = next(iter(depths.values()))[1] - 2 if depths else 0
        num_layers = self.paramwise_cfg.get('num_layers', blocks)
        if 'num_layers' in self.paramwise_cfg:
            check_number('num_layers', num_layers, low=max(blocks, 1), integer=True,
                         hint=f'the blocks the decay counts; leave it out for the backbone\'s '
                         f'{blocks}')
        weight_decay = self.base_wd or 0.0
        groups = {}
        for name, param in named:
            depth, max_depth = depths[name]
            if depth == max_depth - 1:  # what follows the blocks trains at the full rate
                depth = num_layers + 1
            no_decay = param.ndim == 1 or name.endswith(NO_DECAY_TOKENS)
            key = (depth, no_decay)
            if key not in groups:
                scale = float(rate)**(num_layers + 1 - depth)
                groups[key] = dict(params=[], param_names=[], lr=self.base_lr * scale,
                                   lr_scale=scale, weight_decay=0.0 if no_decay else weight_decay)
            groups[key]['params'].append(param)
            groups[key]['param_names'].append(name)
        params.extend(groups[k] for k in sorted(groups))
        self._log_groups(groups)

    @staticmethod
    def _find_backbone(module: nn.Module) -> Tuple[str, nn.Module]:
        """The first submodule with ``get_layer_depth(param_name, prefix)``, and its prefix."""
        for name, sub in module.named_modules():
            # a model's own get_layer_depth (mmpretrain's classifiers) takes no prefix
            if sub is module and isinstance(getattr(module, 'backbone', None), nn.Module):
                continue
            if callable(getattr(sub, 'get_layer_depth', None)):
                return (name + '.' if name else ''), sub
        raise TypeError('ViT5LayerDecayOptimizerConstructor needs a backbone with '
                        'get_layer_depth(param_name, prefix) (ViT5 has one); '
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
