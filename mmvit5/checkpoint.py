"""Reading ViT-5 checkpoints: the released DeiT-style layout, mmengine's, and plain dicts.

A checkpoint's ``pos_embed`` is stretched to a model's grid by the function the forward pass
uses (:func:`~mmvit5.models.layers.pos_embed.resize_pos_embed`).
"""
import logging
import os
import pickle
import re
import zipfile
from collections import OrderedDict
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

import torch
from mmengine.logging import print_log
from mmengine.registry import WEIGHT_INITIALIZERS

# Keys under which the known layouts keep the weights, in the order they are looked for.
STATE_DICT_KEYS = ('state_dict', 'model', 'model_ema')


class CheckpointError(ValueError):
    """A checkpoint that cannot be used for the model it is loaded into."""


def read_checkpoint(path: str) -> dict:
    """Load a checkpoint file on the CPU with ``weights_only=True``.

    :mod:`mmvit5.compat` allow-lists the few non-tensor types that mmengine and the released
    ViT-5 files hold (``argparse.Namespace``, mmengine's log buffers), nothing else.
    """
    if not os.path.isfile(path):
        raise FileNotFoundError(
            f'checkpoint {path!r} does not exist. Download the released ViT-5 weights '
            '(docs/en/user_guides/checkpoints.md#released-checkpoints) or set the path in the '
            'config (init_cfg=dict(type="Pretrained", checkpoint=...)).')
    try:
        checkpoint = torch.load(path, map_location='cpu', weights_only=True)
    except (RuntimeError, EOFError, OSError, pickle.UnpicklingError, zipfile.BadZipFile,
            ValueError) as exc:
        raise CheckpointError(
            f'cannot read checkpoint {path!r} ({type(exc).__name__}: {exc}). The file is '
            'truncated or not a PyTorch checkpoint: download it again.') from exc
    if not isinstance(checkpoint, dict):
        raise CheckpointError(f'checkpoint {path!r} holds a {type(checkpoint).__name__}, '
                              'not a dict of weights')
    return checkpoint


def extract_state_dict(checkpoint: dict, key: Optional[str] = None,
                       prefix: Optional[str] = None) -> Dict[str, torch.Tensor]:
    """The tensors of ``checkpoint`` as a flat state dict.

    Args:
        checkpoint: What :func:`read_checkpoint` returned.
        key: Entry holding the weights; by default the first of ``state_dict`` (mmengine),
            ``model`` (released ViT-5/DeiT), ``model_ema`` that exists, else the dict itself.
        prefix: Keep only keys under this prefix and strip it (e.g. ``'backbone.'`` to take
            the backbone out of an mmdet/mmseg checkpoint). By default ``backbone.`` is
            stripped when the file is a whole detector/segmentor.
    """
    if key is None:
        key = next((k for k in STATE_DICT_KEYS if isinstance(checkpoint.get(k), dict)), None)
    elif key not in checkpoint:
        raise CheckpointError(f'checkpoint has no entry {key!r}; it has {sorted(checkpoint)}')
    state = checkpoint if key is None else checkpoint[key]
    state = {k[len('module.'):] if k.startswith('module.') else k: v
             for k, v in state.items() if isinstance(v, torch.Tensor)}
    if prefix is None and any(k.startswith('backbone.') for k in state):
        prefix = 'backbone.'
    if prefix:
        state = {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}
        if not state:
            raise CheckpointError(f'checkpoint has no keys under prefix {prefix!r}')
    return state


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
            '\nSet arch / num_registers / the ablation switches to the checkpoint\'s, or use a '
            'matching file.')
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


@WEIGHT_INITIALIZERS.register_module(name='ReleasedPretrained')
class ReleasedPretrainedInit:
    """Initialise any module from part of a released (or mmengine) ViT-5 file.

    mmengine's ``Pretrained`` initializer expects a ``state_dict`` entry and cannot read the
    released layout; this one can. It takes the keys under ``prefix``, renames that prefix to
    ``target_prefix`` and loads strictly, e.g. the released classifier into mmpretrain's
    ``LinearClsHead``: ``dict(type='ReleasedPretrained', checkpoint=PATH, prefix='head.',
    target_prefix='fc.')``.

    Args:
        checkpoint (str): Path of the file.
        prefix (str): Keys to take from the file.
        target_prefix (str): What the prefix becomes in the module's keys.
        checkpoint_key (str, optional): Entry holding the weights (default as
            :func:`extract_state_dict`).
    """

    def __init__(self, checkpoint: str, prefix: str, target_prefix: str = '',
                 checkpoint_key: Optional[str] = None) -> None:
        self.checkpoint = checkpoint
        self.prefix = prefix
        self.target_prefix = target_prefix
        self.checkpoint_key = checkpoint_key

    def __call__(self, module: torch.nn.Module) -> None:
        state = extract_state_dict(read_checkpoint(self.checkpoint), self.checkpoint_key,
                                   prefix=self.prefix)
        state = {self.target_prefix + k: v for k, v in state.items()}
        try:
            module.load_state_dict(state, strict=True)
        except RuntimeError as exc:
            raise CheckpointError(f'{self.checkpoint}: keys under {self.prefix!r} do not fit '
                                  f'{type(module).__name__}: {exc}') from exc

    def __repr__(self) -> str:
        return f'ReleasedPretrained(checkpoint={self.checkpoint}, prefix={self.prefix})'
