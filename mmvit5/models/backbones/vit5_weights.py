"""How a :class:`~mmvit5.models.ViT5` takes a checkpoint: the released one, or one trained with
other ablation switches (timm's ``checkpoint_filter_fn`` for this model)."""
from collections import OrderedDict, defaultdict
from typing import Dict, List, Tuple

import torch
from mmengine.logging import print_log

from ...checkpoint import (
    check_vit5_state,
    describe_state,
    fit_state_dict,
    fold_layer_scale,
    square_grid,
)
from ..layers.pos_embed import resize_pos_embed

# the ablation switches as the released model sets them
RELEASED_SWITCHES = dict(num_registers=4, layer_scale_init_value=1e-4, qk_norm=True,
                         use_abs_pos=True, use_rope=True, norm='rms', qkv_bias=False)
# the tensors in which each switch makes a model differ from a released one; RoPE has no
# parameters (its buffers are checked apart)
SWITCHED_KEYS = dict(
    num_registers=r'reg_token', layer_scale_init_value=r'blocks\.\d+\.gamma_[12]',
    qk_norm=r'blocks\.\d+\.attn\.[qk]_norm\.weight', use_abs_pos=r'pos_embed',
    norm=r'(blocks\.\d+\.(norm[12]|attn\.[qk]_norm)|norm)\.bias',
    qkv_bias=r'blocks\.\d+\.attn\.qkv\.bias')


def switched_keys(switches: Dict[str, object]) -> List[Tuple[str, str]]:
    """(key pattern, ``switch=value``) of the tensors a checkpoint may lack, have, or have in
    another shape, given the switches set away from the released model."""
    # another LayerScale init keeps the released parameters, which a checkpoint then overrides
    return [(SWITCHED_KEYS[k], f'{k}={v!r}') for k, v in switches.items()
            if k in SWITCHED_KEYS and (k != 'layer_scale_init_value' or v is None)]


def adapt_state_dict(model: torch.nn.Module, state: Dict[str, torch.Tensor],
                     source: str = 'checkpoint') -> 'OrderedDict[str, torch.Tensor]':
    """Map a checkpoint's backbone tensors onto ``model``'s keys, or raise.

    Where an ablation switch makes the model differ from the checkpoint, what fits loads: the
    checkpoint's tensors of a part switched off are dropped (LayerScale is folded into
    ``attn.proj`` / ``mlp.fc2`` instead, which keeps the function), the model's tensors of a
    part the checkpoint lacks (LayerNorm and ``qkv`` biases, a register count of another size)
    stay at their initial values, and each case is logged as a warning with its keys. Every
    other difference raises :class:`~mmvit5.checkpoint.CheckpointError`, as does a checkpoint
    of which nothing fits.

    Args:
        model (ViT5): The model to load into.
        state (dict[str, Tensor]): Backbone tensors under the released model's keys.
        source (str): Where ``state`` comes from, for the messages.

    Returns:
        OrderedDict: The tensors to load (a subset of the model's keys).
    """
    check_vit5_state(state, source)
    own = model.state_dict()
    notes: Dict[Tuple[str, str], List[str]] = defaultdict(list)
    if model.layer_scale_init_value is None:
        state, folded = fold_layer_scale(state)
        notes['folded into attn.proj / mlp.fc2, the same function',
              'layer_scale_init_value=None'] += folded
    adapted = OrderedDict()
    mismatched = []
    for key, value in state.items():
        if key.startswith(('head.', 'fc_norm.')):
            continue
        if key.endswith(('attn.rope.freqs', 'attn.rope_reg.freqs')):
            # deterministic buffers, stored per block by the reference: check, then drop
            rope = model.rope_reg if 'rope_reg' in key else model.rope
            if rope is None:
                notes['dropped', 'use_rope=False' if not model.use_rope else
                      'num_registers=0'].append(key)
            elif value.shape != rope.freqs.shape or not torch.allclose(
                    value.float(), rope.freqs, rtol=1e-6, atol=0):
                mismatched.append(f'{key}: checkpoint {value.tolist()[:3]}... vs model '
                                  f'{rope.freqs.tolist()[:3]}... (RoPE theta or head dim)')
            continue
        if key == 'pos_embed' and key in own and value.shape != own[key].shape \
                and value.shape[-1] == own[key].shape[-1]:
            value = resize_pos_embed(value, square_grid(value.shape[1], 'pos_embed'),
                                     model.pretrain_grid)
            print_log(f'ViT5: resized pos_embed of {source} from {state[key].shape[1]} to '
                      f'{value.shape[1]} positions', logger='current')
        adapted[key] = value
    if model.layer_scale_init_value not in (None, RELEASED_SWITCHES['layer_scale_init_value']):
        # an init ablation means nothing once a checkpoint's gammas replace the init
        notes['loaded over the init', f'layer_scale_init_value='
              f'{model.layer_scale_init_value!r}'] += [k for k in adapted if 'gamma_' in k]
    switches = model.switches()
    described = ''.join(f', {k}={v!r}' for k, v in switches.items() if k != 'num_registers')
    return fit_state_dict(
        adapted, own, switched_keys(switches), notes, mismatched, source,
        f'this ViT5 (embed_dim {model.embed_dim}, depth {model.depth}, {model.num_registers} '
        f'registers{described}; the checkpoint looks like {describe_state(state)})')
