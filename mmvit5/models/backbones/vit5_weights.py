"""What a :class:`~mmvit5.models.ViT5` makes of a checkpoint's keys, the released one's or
one trained with other ablation switches: timm's ``checkpoint_filter_fn`` for this model.
Reading files and URLs is :mod:`mmvit5.checkpoint`'s.
"""
import logging
import re
from collections import OrderedDict, defaultdict
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

import torch
from mmengine.logging import print_log

from ...checkpoint import CheckpointError, extract_state_dict
from ...run_log import log_in_run
from ..layers.pos_embed import resize_pos_embed
from . import vit5_released
from .vit5_config import RELEASED_SWITCHES

# The released weights, as vit5_released.py names them: URL pattern and file names
RELEASED_URL = vit5_released.released_weights + '{}'
RELEASED_FILES = tuple(url[len(vit5_released.released_weights):]
                       for name, url in vars(vit5_released).items()
                       if name.startswith('pretrained_'))
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


def checkpoint_filter_fn(state: Dict[str, torch.Tensor], model: torch.nn.Module,
                         source: str = 'checkpoint') -> 'OrderedDict[str, torch.Tensor]':
    """Map a checkpoint's backbone tensors onto ``model``'s keys, or raise (timm's
    ``checkpoint_filter_fn``, and the ``pretrained_filter_fn`` of the models
    :mod:`mmvit5.timm` registers): ``pos_embed`` resized to the model's grid, the per-block
    RoPE buffers checked and dropped, the classifier kept where the model has one of its shape
    (``num_classes``; another number of classes leaves the model's at init), the patch
    embedding adapted to another ``in_channels`` as timm adapts a pretrained stem. A whole
    checkpoint (released or mmengine layout) is unwrapped first, as timm's filters do.

    Where an ablation switch makes the model differ from the checkpoint, what fits loads: the
    checkpoint's tensors of a part switched off are dropped (LayerScale is folded into
    ``attn.proj`` / ``mlp.fc2`` instead, which keeps the function), the model's tensors of a
    part the checkpoint lacks (LayerNorm and ``qkv`` biases, a register count of another size)
    stay at their initial values, and each case is logged as a warning with its keys. Every
    other difference raises :class:`~mmvit5.checkpoint.CheckpointError`, as does a checkpoint
    of which nothing fits.

    Args:
        state (dict[str, Tensor]): Backbone tensors under the released model's keys
            (:func:`mmvit5.checkpoint.extract_state_dict`), or a whole checkpoint.
        model (ViT5): The model to load into.
        source (str): Where ``state`` comes from, for the messages.

    Returns:
        OrderedDict: The tensors to load (a subset of the model's keys).
    """
    state = extract_state_dict(state)
    check_vit5_state(state, source)
    own = model.state_dict()
    notes: Dict[Tuple[str, str], List[str]] = defaultdict(list)
    config = model.config
    if config.layer_scale_init_value is None:
        state, folded = fold_layer_scale(state)
        notes['folded into attn.proj / mlp.fc2, the same function',
              'layer_scale_init_value=None'] += folded
    adapted = OrderedDict()
    mismatched = []
    for key, value in state.items():
        if key.startswith(('head.', 'fc_norm.')):
            if key in own and value.shape != own[key].shape:
                notes['left at init', f'num_classes={model.num_classes}'].append(key)
            elif key in own:
                adapted[key] = value
            continue
        if key.endswith(('attn.rope.freqs', 'attn.rope_reg.freqs')):
            # deterministic buffers, stored per block by the reference: check, then drop
            rope = model.rope_reg if 'rope_reg' in key else model.rope
            if rope is None:
                notes['dropped', 'use_rope=False' if not config.use_rope else
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
            log_in_run(f'ViT5: resized pos_embed of {source} from {state[key].shape[1]} to '
                       f'{value.shape[1]} positions')
        if key == 'patch_embed.proj.weight' and key in own and value.dim() == 4 \
                and value.shape[1] != own[key].shape[1]:
            value = adapt_input_conv(value, own[key].shape[1])
            notes['adapted', f'in_channels={own[key].shape[1]}'].append(key)
        adapted[key] = value
    if config.layer_scale_init_value not in (None, RELEASED_SWITCHES['layer_scale_init_value']):
        # an init ablation means nothing once a checkpoint's gammas replace the init
        notes['loaded over the init', f'layer_scale_init_value='
              f'{config.layer_scale_init_value!r}'] += [k for k in adapted if 'gamma_' in k]
    switches = config.switches()
    described = ''.join(f', {k}={v!r}' for k, v in switches.items() if k != 'num_registers')
    return fit_state_dict(
        adapted, own, switched_keys(switches), notes, mismatched, source,
        f'this ViT5 (embed_dim {model.embed_dim}, depth {model.depth}, {model.num_registers} '
        f'registers{described}; the checkpoint looks like {describe_state(state)})')


def adapt_input_conv(weight: torch.Tensor, in_channels: int) -> torch.Tensor:
    """The patch embedding's filters (D, C, p, p) for ``in_channels`` inputs, as timm's
    ``adapt_input_conv`` adapts a pretrained stem: summed over the channels for one input
    channel, else tiled and scaled by ``C / in_channels``, so that an image whose channels are
    all equal gives the original response (exactly for multiples of C)."""
    if in_channels == 1:
        return weight.sum(dim=1, keepdim=True)
    repeat = -(-in_channels // weight.shape[1])
    return weight.repeat(1, repeat, 1, 1)[:, :in_channels] * (weight.shape[1] / in_channels)


def check_vit5_state(state: Dict[str, torch.Tensor], source: str) -> None:
    """Raise unless ``state`` holds ViT-5 weights (class token and attention blocks).

    Only what every ablation keeps is required: files of models saved without the absolute
    embedding or QK-Norm are ViT-5 files too.
    """
    if 'cls_token' not in state or \
            not any(re.fullmatch(r'blocks\.\d+\.attn\.qkv\.weight', k) for k in state):
        raise CheckpointError(
            f'{source} is not a ViT-5 checkpoint: it has no cls_token / blocks.N.attn.qkv '
            f'weights (first keys: {sorted(state)[:5]}). Use a released ViT-5 file or one saved '
            'by mmvit5.')


def fold_layer_scale(state: Dict[str, torch.Tensor]) -> Tuple[Dict[str, torch.Tensor], List[str]]:
    """Fold each block's LayerScale into the layer that ends its branch, for a model without
    LayerScale: ``gamma * (W x + b) = (gamma W) x + gamma b``, so the function is unchanged.

    Returns the new state (``gamma_1`` into ``attn.proj``, ``gamma_2`` into ``mlp.fc2``) and
    the folded keys; a gamma whose layer is not in ``state`` stays where it is.
    """
    state = dict(state)
    folded = []
    for key in [k for k in state if re.fullmatch(r'blocks\.\d+\.gamma_[12]', k)]:
        layer = key[:-len('gamma_1')] + ('attn.proj' if key.endswith('1') else 'mlp.fc2')
        if f'{layer}.weight' not in state or f'{layer}.bias' not in state:
            continue
        gamma = state.pop(key)
        state[f'{layer}.weight'] = state[f'{layer}.weight'] * gamma[:, None]
        state[f'{layer}.bias'] = state[f'{layer}.bias'] * gamma
        folded.append(key)
    return state, folded


def fit_state_dict(adapted: Dict[str, torch.Tensor], own: Dict[str, torch.Tensor],
                   switched: Sequence[Tuple[str, str]], notes: Dict[Tuple[str, str], List[str]],
                   mismatched: List[str], source: str,
                   model: str) -> 'OrderedDict[str, torch.Tensor]':
    """What of a checkpoint loads into a model whose ablation switches change some parts.

    Args:
        adapted (dict): The checkpoint's tensors under the model's key names.
        own (dict): The model's state dict.
        switched (Sequence[tuple[str, str]]): (key regex, switch) of the tensors the switches
            change; of these, the checkpoint's that the model lacks are dropped, and the
            model's that the checkpoint lacks or has in another shape stay at init.
        notes (dict): ``(what happened, switch) -> keys`` found so far; extended here and
            logged as warnings.
        mismatched (list[str]): Differences found so far that no switch explains.
        source (str): The checkpoint, for messages.
        model (str): The model as messages name it.

    Returns:
        OrderedDict: The tensors to load (each in ``own``, of its shape).

    Raises:
        CheckpointError: On any difference no switch explains, or when nothing fits.
    """
    adapted = OrderedDict(adapted)

    def switch_of(key: str) -> Optional[str]:
        return next((s for pattern, s in switched if re.fullmatch(pattern, key)), None)

    for key in list(adapted):
        reason = switch_of(key)
        if reason and key not in own:
            notes['dropped', reason].append(key)
        elif reason and adapted[key].shape != own[key].shape:
            notes[f'left at init (checkpoint {tuple(adapted[key].shape)})', reason].append(key)
        else:
            continue
        del adapted[key]
    explained = {k for keys in notes.values() for k in keys}
    for key in own:
        if key not in adapted and key not in explained and switch_of(key):
            notes['left at init', switch_of(key)].append(key)
            explained.add(key)
    missing = [k for k in own if k not in adapted and k not in explained]
    unexpected = [k for k in adapted if k not in own]
    mismatched = [f'{k}: checkpoint {tuple(v.shape)} vs model {tuple(own[k].shape)}'
                  for k, v in adapted.items() if k in own and v.shape != own[k].shape
                  ] + mismatched
    fits = sum(k in own and v.shape == own[k].shape for k, v in adapted.items())
    if missing or unexpected or mismatched or not fits:
        raise CheckpointError(
            (f'nothing in {source} fits ' if not fits else f'{source} does not fit ') + model +
            '.' + (f'\n  mismatched shapes: {mismatched[:8]}' if mismatched else '') +
            (f'\n  missing keys: {missing[:8]}' if missing else '') +
            (f'\n  unexpected keys: {unexpected[:8]}' if unexpected else '') +
            '\nSet arch / num_registers / num_classes / the ablation switches to the '
            'checkpoint\'s, or use a matching file.')
    for (what, reason), keys in notes.items():
        if keys:
            print_log(f'ViT5: {source}: {len(keys)} tensors {what} ({reason}): '
                      f'{compact_keys(keys)}', logger='current', level=logging.WARNING)
    return adapted


def compact_keys(keys: Iterable[str]) -> str:
    """The keys with block indices grouped: ``'blocks.{0-11}.attn.q_norm.weight, pos_embed'``."""
    groups: Dict[str, List[int]] = {}
    for key in keys:
        match = re.fullmatch(r'blocks\.(\d+)\.(.+)', key)
        if match:
            groups.setdefault(match.group(2), []).append(int(match.group(1)))
        else:
            groups.setdefault(key, [])
    parts = []
    for name, blocks in groups.items():
        blocks = sorted(blocks)
        if not blocks:
            parts.append(name)
        elif len(blocks) == 1:
            parts.append(f'blocks.{blocks[0]}.{name}')
        elif blocks == list(range(blocks[0], blocks[-1] + 1)):
            parts.append(f'blocks.{{{blocks[0]}-{blocks[-1]}}}.{name}')
        else:
            parts.append(f'blocks.{{{",".join(map(str, blocks))}}}.{name}')
    return ', '.join(parts)


def describe_state(state: Dict[str, torch.Tensor]) -> str:
    """'embed_dim D, depth N, R registers' of ViT-5 weights."""
    depth = len({k.split('.')[1] for k in state if k.startswith('blocks.')})
    registers = state['reg_token'].shape[1] if 'reg_token' in state else 0
    return f'embed_dim {state["cls_token"].shape[-1]}, depth {depth}, {registers} registers'


def square_grid(num_tokens: int, what: str) -> Tuple[int, int]:
    side = int(round(num_tokens**0.5))
    if side * side != num_tokens:
        raise CheckpointError(f'{what} has {num_tokens} positions, not a square grid; pass '
                              'the grid explicitly')
    return side, side
