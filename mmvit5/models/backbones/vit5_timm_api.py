"""timm's model API on :class:`~mmvit5.models.ViT5`, in one place: the classifier (the class
token, as released), ``forward_features`` / ``forward_head``, the feature API
(``forward_intermediates``), activation checkpointing (``with_cp``), parameter groups for layer
decay, and pruning for ``features_only``. It runs the model through its public methods.

What ``timm.create_model`` builds (:mod:`mmvit5.timm`) is a ViT5 with ``out_type='head'``; with
the default ``num_classes=0`` a ViT5 has no head and no ``head.*`` keys, so the mmdet and mmseg
backbones are unchanged. Method names and semantics follow timm's ``VisionTransformer`` and
``Eva``.
"""
import dataclasses
from typing import Dict, List, Optional, Sequence, Set, Tuple, Union

import torch
import torch.nn as nn

from .vit5_config import normalize_indices


class ViT5TimmApi:
    """Mixed into ViT5; relies on its public ``config``, ``embed_dim``, ``depth``,
    ``num_registers``, ``blocks``, ``norm``, ``prepare_tokens`` and ``run_blocks``."""

    @property
    def num_features(self) -> int:
        """Width of ``forward_features``' tokens (timm's name)."""
        return self.embed_dim

    @property
    def head_hidden_size(self) -> int:
        """Width of ``forward_head(x, pre_logits=True)`` (no pre-logits layer in ViT-5)."""
        return self.embed_dim

    @property
    def in_chans(self) -> int:
        """timm's name of ``in_channels`` (its data config and feature wrappers read it)."""
        return self.in_channels

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        """Every token after the final norm, unpooled.

        Args:
            x (Tensor): Images (B, in_channels, H, W).

        Returns:
            Tensor: ``[cls, patches, registers]`` (B, 1 + H / 16 * W / 16 + R, C).
        """
        tokens, grid, plan = self.prepare_tokens(x)
        return self.run_blocks(tokens, grid, [self.depth - 1], plan)[self.depth - 1]

    def forward_head(self, x: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        """Pool ``forward_features``' tokens by ``global_pool``, then classify.

        Args:
            x (Tensor): Tokens (B, T, C) from :meth:`forward_features`.
            pre_logits (bool): Return the pooled features (B, C), not the logits.

        Returns:
            Tensor: Logits (B, num_classes); (B, C) with ``pre_logits`` or without a head;
            the tokens unchanged with ``global_pool=''``.
        """
        if self.global_pool == 'token':
            x = x[:, 0]
        elif self.global_pool == 'avg':
            x = x[:, 1:x.shape[1] - self.num_registers].mean(dim=1)  # registers come last
        return x if pre_logits else self.head(x)

    def forward_intermediates(self, x: torch.Tensor,
                              indices: Optional[Union[int, Sequence[int]]] = None,
                              norm: bool = False, output_fmt: str = 'NCHW',
                              intermediates_only: bool = False
                              ) -> Union[List[torch.Tensor],
                                         Tuple[torch.Tensor, List[torch.Tensor]]]:
        """timm's feature API: the outputs of several blocks, for use outside OpenMMLab.

        Semantics of timm's ``VisionTransformer.forward_intermediates``: intermediates are the
        blocks' raw outputs (the final norm only with ``norm=True``), in block order, with the
        class token and registers stripped.

        Args:
            x (Tensor): Images (B, in_channels, H, W).
            indices (int | Sequence[int], optional): None takes every block; an int ``n`` the
                last ``n`` blocks; a sequence those blocks (negative values count from the end).
            norm (bool): Apply the final norm to every intermediate.
            output_fmt (str): ``'NCHW'`` maps (B, C, H / 16, W / 16) or ``'NLC'`` tokens
                (B, H / 16 * W / 16, C).
            intermediates_only (bool): Return only the intermediates (and run no block after
                the last one taken).

        Returns:
            list[Tensor] | tuple[Tensor, list[Tensor]]: The intermediates, or the final
            normed tokens ``[cls, patches, registers]`` (B, T, C) and the intermediates.
        """
        if output_fmt not in ('NCHW', 'NLC'):
            raise ValueError(f"output_fmt must be 'NCHW' or 'NLC', got {output_fmt!r}")
        take = sorted(set(self.take_indices(indices)))
        tokens, grid, plan = self.prepare_tokens(x)
        last = self.depth - 1
        outs = self.run_blocks(tokens, grid, take if intermediates_only else [*take, last],
                                plan, final_norm=False)
        intermediates = []
        for i in take:
            patches = outs[i][:, 1:1 + grid[0] * grid[1]]  # registers come last
            if norm and self.config.final_norm:
                patches = self.norm(patches, plan=plan)
            if output_fmt == 'NCHW':
                patches = patches.transpose(1, 2).reshape(
                    patches.shape[0], self.embed_dim, *grid).contiguous()
            intermediates.append(patches)
        if intermediates_only:
            return intermediates
        final = self.norm(outs[last], plan=plan) if self.config.final_norm else outs[last]
        return final, intermediates

    def take_indices(self, indices: Optional[Union[int, Sequence[int]]]) -> List[int]:
        """timm's ``feature_take_indices``: None -> all blocks, int n -> the last n blocks."""
        if indices is None:
            return list(range(self.depth))
        if isinstance(indices, int):
            if not 0 < indices <= self.depth:
                raise ValueError(f'indices={indices} asks for the last {indices} blocks; an int '
                                 f'must be in 1..{self.depth} (pass [{indices}] for one block)')
            return list(range(self.depth - indices, self.depth))
        return normalize_indices(indices, self.depth, 'indices')

    def get_classifier(self) -> nn.Module:
        return self.head

    def reset_classifier(self, num_classes: int, global_pool: Optional[str] = None) -> None:
        """A new classifier of ``num_classes`` outputs (0: none), and the pooling if given.

        Args:
            num_classes (int): Classes; 0 leaves ``forward`` the pooled features.
            global_pool (str, optional): ``'token'`` (class token, as released), ``'avg'``
                (mean of the patch tokens) or ``''`` (no pooling); None keeps the current one.
        """
        self.config = dataclasses.replace(
            self.config, num_classes=num_classes,
            global_pool=self.config.global_pool if global_pool is None else global_pool)
        self.head = nn.Linear(self.embed_dim, num_classes, device=self.cls_token.device,
                              dtype=self.cls_token.dtype) if num_classes else nn.Identity()

    def set_grad_checkpointing(self, enable: bool = True) -> None:
        """Activation checkpointing of every block in training: sets ``config.with_cp``
        (torch's non-reentrant checkpoint); the next forward's plan reads it."""
        self.config = dataclasses.replace(self.config, with_cp=bool(enable))

    def group_matcher(self, coarse: bool = False) -> Dict[str, object]:
        """Parameter groups for timm's layer decay, as timm's ``VisionTransformer`` makes them:
        the stem (group 0), one group per block with the final norm in the last one; the head,
        unmatched, goes last. (:meth:`get_layer_depth`, for mmengine's layer-decay constructor,
        follows mmpretrain instead: the final norm at the head's depth.)"""
        return dict(stem=r'^cls_token|^reg_token|^pos_embed|^patch_embed',
                    blocks=[(r'^blocks\.(\d+)', None), (r'^norm', (99999, ))])

    def no_weight_decay(self) -> Set[str]:
        """Parameters timm's optimizer factory leaves without weight decay."""
        return {'pos_embed', 'cls_token', 'reg_token'}

    def prune_intermediate_layers(self, indices: Union[int, Sequence[int]] = 1,
                                  prune_norm: bool = False,
                                  prune_head: bool = True) -> List[int]:
        """Drop the blocks after the last of ``indices`` (and the final norm, the head), for
        timm's ``features_only`` wrapper.

        Args:
            indices (int | Sequence[int]): As :meth:`forward_intermediates` takes them.
            prune_norm (bool): Replace the final norm by the identity.
            prune_head (bool): Remove the classifier and the pooling.

        Returns:
            list[int]: The indices, non-negative, to pass to :meth:`forward_intermediates`.
        """
        take = self.take_indices(indices)
        depth = max(take) + 1
        self.blocks = self.blocks[:depth]
        self.feature_info = self.feature_info[:depth]
        # the config describes the pruned model: its depth, and the indices within it
        cfg = self.config
        kept_out = tuple(i for i in cfg.out_indices if i < depth) or (depth - 1, )
        self.config = dataclasses.replace(
            cfg, arch=dict(cfg.arch_settings, depth=depth), out_indices=kept_out,
            global_attn_indices=tuple(i for i in cfg.global_attn_indices if i < depth),
            frozen_stages=min(cfg.frozen_stages, depth), final_norm=cfg.final_norm and not
            prune_norm)
        if prune_norm:  # as if built with final_norm=False
            self.norm = nn.Identity()
        if prune_head:
            self.reset_classifier(0, '')
        return take
