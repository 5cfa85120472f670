"""timm's model API on :class:`~mmvit5.models.ViT5`: the classifier (the class token, as
released), ``forward_features`` / ``forward_head``, activation checkpointing, parameter groups
for layer decay, and pruning for ``features_only``.

What ``timm.create_model`` builds (:mod:`mmvit5.timm`) is a ViT5 with ``out_type='head'``; with
the default ``num_classes=0`` a ViT5 has no head and no ``head.*`` keys, so the mmdet and mmseg
backbones are unchanged. Method names and semantics follow timm's ``VisionTransformer`` and
``Eva``.
"""
import dataclasses
from typing import Dict, List, Optional, Sequence, Set, Union

import torch
import torch.nn as nn

from .vit5_config import check_head


class ViT5TimmApi:
    """Mixed into ViT5; relies on its ``config``, ``embed_dim``, ``depth``, ``num_registers``,
    ``blocks``, ``norm``, ``_start``, ``_run_blocks`` and ``_take_indices``."""

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
        tokens, grid, plan = self._start(x)
        return self._run_blocks(tokens, grid, [self.depth - 1], plan)[self.depth - 1]

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

    def get_classifier(self) -> nn.Module:
        return self.head

    def reset_classifier(self, num_classes: int, global_pool: Optional[str] = None) -> None:
        """A new classifier of ``num_classes`` outputs (0: none), and the pooling if given.

        Args:
            num_classes (int): Classes; 0 leaves ``forward`` the pooled features.
            global_pool (str, optional): ``'token'`` (class token, as released), ``'avg'``
                (mean of the patch tokens) or ``''`` (no pooling); None keeps the current one.
        """
        check_head(num_classes, global_pool)
        if global_pool is not None:
            self.global_pool = global_pool
        self.num_classes = num_classes
        self.head = nn.Linear(self.embed_dim, num_classes, device=self.cls_token.device,
                              dtype=self.cls_token.dtype) if num_classes else nn.Identity()

    def set_grad_checkpointing(self, enable: bool = True) -> None:
        """Activation checkpointing of every block in training (``with_cp``), through torch's
        non-reentrant checkpoint; the next forward's plan reads it."""
        self.grad_checkpointing = enable

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
        take = self._take_indices(indices)
        self.blocks = self.blocks[:max(take) + 1]
        self.depth = len(self.blocks)
        self.feature_info = self.feature_info[:self.depth]
        if prune_norm:  # as if built with final_norm=False
            self.norm = nn.Identity()
            self.config = dataclasses.replace(self.config, final_norm=False)
        if prune_head:
            self.reset_classifier(0, '')
        return take
