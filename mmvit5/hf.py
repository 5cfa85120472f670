"""ViT-5 in Hugging Face transformers: ``AutoBackbone`` for UperNet, Mask2Former and DPT.

A registration, not a second model: :class:`Vit5Backbone` holds :class:`~mmvit5.models.ViT5`,
the backbone of the mmdet and mmseg configs, and with ``feature_pyramid=True`` the
:class:`~mmvit5.models.SimpleFeaturePyramid` neck of those configs. ``import mmvit5`` imports
this module as soon as transformers is imported (:func:`mmvit5.utils.after_import.import_after`),
which registers ``model_type='vit5'`` with ``AutoConfig`` and ``AutoBackbone``; transformers
stays optional (the ``hf`` extra).

The released weights become a transformers folder (``config.json`` + ``model.safetensors``)
with ``python tools/convert_checkpoint.py vit5_small_patch16_224.pth DIR --layout hf``
(:func:`released_config`); ``AutoBackbone.from_pretrained(DIR)`` reads it offline.
"""
import dataclasses
import os
from typing import List, Optional, Tuple, Union

import torch
from transformers import AutoBackbone, AutoConfig, PreTrainedConfig, PreTrainedModel
from transformers import initialization as init
from transformers.backbone_utils import BackboneConfigMixin, BackboneMixin
from transformers.modeling_outputs import BackboneOutput

from .models import SimpleFeaturePyramid, ViT5
from .models.backbones.vit5_config import RELEASED_SWITCHES, ViT5Config
from .models.layers.block import Block
from .models.layers.rope import RotaryEmbedding2D

# the neck of the mmdet/mmseg recipes: strides 4, 8, 16, 32 from the stride-16 map
PYRAMID_SCALES = (4.0, 2.0, 1.0, 0.5)


class Vit5BackboneConfig(BackboneConfigMixin, PreTrainedConfig):
    """The configuration of :class:`Vit5Backbone`: transformers' names for ViT5's options.

    Args:
        hidden_size (int): Token width (ViT5's ``embed_dim``; 384 for ViT-5-S).
        num_hidden_layers (int): Blocks (``depth``).
        num_attention_heads (int): Heads (``num_heads``).
        mlp_ratio (float): MLP width over ``hidden_size``. Defaults to 4.
        image_size (int | list[int]): The *pretraining* size (ViT5's ``img_size``): it fixes
            ``pos_embed`` and RoPE's grid; inputs of any size are accepted.
        patch_size (int): Defaults to 16.
        num_channels (int): Input channels (``in_channels``). Defaults to 3.
        num_registers, layer_scale_init_value, qk_norm, use_abs_pos, use_rope, norm, qkv_bias:
            ViT-5's switches (:class:`~mmvit5.models.ViT5Config`); the defaults are the
            released model.
        rope_mode (str): ``'interpolate'`` (released) or ``'extrapolate'``.
        drop_path_rate (float): Stochastic depth (the same rate in every block).
        window_size (int): 0 for global attention; else ViTDet-style windows of this side.
        initializer_range (float): Std of the truncated normal initialisation. 0.02.
        feature_pyramid (bool): Add the simple feature pyramid of the mmdet/mmseg recipes:
            four maps at strides 4, 8, 16 and 32, of ``pyramid_channels`` each, for UperNet and
            Mask2Former. False gives the blocks' maps at stride 16 (DPT).
        pyramid_channels (int, optional): Channels of the pyramid's maps; None is
            ``hidden_size`` (as the UperNet recipe).
        reshape_hidden_states (bool): Without the pyramid, True gives maps (B, C, H / 16,
            W / 16); False gives tokens (B, 1 + H / 16 * W / 16, C), the class token first and
            the registers left out: what DPT reads (as DINOv2's switch of that name).
        out_features (list[str], optional), out_indices (list[int], optional): The stages
            whose maps the backbone gives, among ``stage_names`` (``'stem'``, ``'stage1'`` ..
            ``'stageN'``, stage ``i`` being block ``i - 1``); the stem cannot be taken. Default:
            four evenly spaced stages ending at the last (3, 6, 9, 12 for 12 blocks), one per
            pyramid level and DPT's four; the last alone for fewer than four blocks. With the
            pyramid, one stage (ViTDet: every level from it) or four (one per level, as the
            UperNet recipe).

    The maps are the blocks' outputs; the last block's after the final norm, as the dense
    recipes take them.
    """

    model_type = 'vit5'

    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    mlp_ratio: float = 4.0
    image_size: Union[int, List[int]] = 224
    patch_size: int = 16
    num_channels: int = 3
    num_registers: int = RELEASED_SWITCHES['num_registers']
    layer_scale_init_value: Optional[float] = RELEASED_SWITCHES['layer_scale_init_value']
    qk_norm: bool = RELEASED_SWITCHES['qk_norm']
    use_abs_pos: bool = RELEASED_SWITCHES['use_abs_pos']
    use_rope: bool = RELEASED_SWITCHES['use_rope']
    norm: str = RELEASED_SWITCHES['norm']
    qkv_bias: bool = RELEASED_SWITCHES['qkv_bias']
    rope_mode: str = 'interpolate'
    drop_path_rate: float = 0.0
    window_size: int = 0
    initializer_range: float = 0.02
    feature_pyramid: bool = False
    pyramid_channels: Optional[int] = None
    reshape_hidden_states: bool = True
    _out_features: Optional[List[str]] = None
    _out_indices: Optional[List[int]] = None

    def __post_init__(self, **kwargs):
        self.stage_names = ['stem'] + [f'stage{i}' for i in range(1, self.num_hidden_layers + 1)]
        out_indices = kwargs.pop('out_indices', None)
        out_features = kwargs.pop('out_features', None)
        if out_indices is None and out_features is None:
            # four blocks evenly spaced, ending at the last; the last alone below four blocks
            depth = self.num_hidden_layers
            out_indices = [depth * k // 4 for k in range(1, 5)] if depth >= 4 else [depth]
        self.set_output_features_output_indices(out_features=out_features,
                                                out_indices=out_indices)
        super().__post_init__(**kwargs)
        self.vit5_config()  # a bad value raises here, naming the option, not at build time
        if self.feature_pyramid and len(self.out_indices) not in (1, 4):
            raise ValueError(f'feature_pyramid takes one stage (every level from it) or four '
                             f'(one per level), got out_features {self.out_features}; give one '
                             'or four out_indices')

    def vit5_config(self) -> ViT5Config:
        """ViT5's options (:class:`~mmvit5.models.ViT5Config`) for this configuration."""
        blocks = [index % len(self.stage_names) - 1 for index in self.out_indices]
        if -1 in blocks:
            raise ValueError(f"out_features {self.out_features} include 'stem' (the patch "
                             'embedding), which Vit5Backbone does not give; take stage1 or later')
        switches = {name: getattr(self, name) for name in RELEASED_SWITCHES}
        return ViT5Config(
            arch=dict(embed_dim=self.hidden_size, depth=self.num_hidden_layers,
                      num_heads=self.num_attention_heads, mlp_ratio=self.mlp_ratio),
            img_size=self.image_size, patch_size=self.patch_size,
            in_channels=self.num_channels, out_indices=blocks,
            out_type='raw' if self.reshape_hidden_states is False and not self.feature_pyramid
            else 'featmap',
            rope_mode=self.rope_mode, drop_path_rate=self.drop_path_rate,
            window_size=self.window_size, **switches)


class Vit5PreTrainedModel(PreTrainedModel):
    """Initialisation of ViT-5 as timm's (truncated normal linears and tokens), for
    ``from_config`` and the weights a checkpoint leaves out."""

    config_class = Vit5BackboneConfig
    base_model_prefix = 'vit5'
    main_input_name = 'pixel_values'

    def _init_weights(self, module: torch.nn.Module) -> None:
        std = self.config.initializer_range
        if isinstance(module, ViT5):
            for token in (module.pos_embed, module.cls_token, module.reg_token):
                if token is not None:
                    init.trunc_normal_(token, std=std)
        elif isinstance(module, torch.nn.Linear):
            init.trunc_normal_(module.weight, std=std)
            if module.bias is not None:
                init.zeros_(module.bias)
        elif isinstance(module, Block) and module.gamma_1 is not None:
            init.constant_(module.gamma_1, self.config.layer_scale_init_value)
            init.constant_(module.gamma_2, self.config.layer_scale_init_value)
        elif isinstance(module, RotaryEmbedding2D):
            # a non-persistent buffer: from_pretrained builds on the meta device, then fills it
            init.copy_(module.freqs, RotaryEmbedding2D(module.head_dim, module.theta,
                                                       module.grid_size).freqs)
        else:
            super()._init_weights(module)


class Vit5Backbone(BackboneMixin, Vit5PreTrainedModel):
    """mmvit5's :class:`~mmvit5.models.ViT5` as a transformers backbone (``AutoBackbone``).

    Args:
        config (Vit5BackboneConfig): The model.

    Shape:
        - Input: ``pixel_values`` (B, num_channels, H, W), any size (sides not multiples of
          ``patch_size`` are padded).
        - Output: :class:`~transformers.modeling_outputs.BackboneOutput` whose
          ``feature_maps`` are one map (B, hidden_size, H / 16, W / 16) per ``out_features``
          entry, or with ``feature_pyramid`` four maps (B, pyramid_channels, H / s, W / s),
          s = 4, 8, 16, 32, or with ``reshape_hidden_states=False`` tokens
          (B, 1 + H / 16 * W / 16, hidden_size).
    """

    has_attentions = False  # transformers' heads then pass no output_attentions
    supports_gradient_checkpointing = True

    def __init__(self, config: Vit5BackboneConfig):
        super().__init__(config)
        self.vit5 = ViT5(**dataclasses.asdict(config.vit5_config()))
        channels = config.hidden_size
        if config.feature_pyramid:
            channels = config.pyramid_channels or config.hidden_size
            inputs = config.hidden_size if len(config.out_indices) == 1 \
                else [config.hidden_size] * len(PYRAMID_SCALES)
            self.neck = SimpleFeaturePyramid(inputs, channels, PYRAMID_SCALES,
                                             num_outs=len(PYRAMID_SCALES))
        self.num_features = [channels] * len(config.stage_names)
        self.post_init()

    @property
    def gradient_checkpointing(self) -> bool:
        """ViT5's activation checkpointing of each block (its ``grad_checkpointing``), the
        switch that transformers' ``activation_checkpointing_enable`` sets; ViT5 runs torch's
        non-reentrant checkpoint whatever function transformers hands over."""
        return 'vit5' in self._modules and self.vit5.grad_checkpointing

    @gradient_checkpointing.setter
    def gradient_checkpointing(self, enable: bool) -> None:
        self.vit5.grad_checkpointing = enable

    @property
    def channels(self) -> List[int]:
        """Channels of each output map (what UperNet and Mask2Former build their heads for)."""
        if self.config.feature_pyramid:
            return [self.num_features[0]] * len(PYRAMID_SCALES)
        return super().channels

    def forward(self, pixel_values: torch.Tensor, output_hidden_states: Optional[bool] = None,
                output_attentions: Optional[bool] = None, return_dict: Optional[bool] = None,
                **kwargs) -> Union[BackboneOutput, Tuple[Tuple[torch.Tensor, ...]]]:
        maps = self.vit5(pixel_values)
        if self.config.feature_pyramid:
            maps = self.neck(maps)
        elif self.vit5.out_type == 'raw':  # DPT's tokens: class token and patches
            rows, cols = (-(-side // self.config.patch_size) for side in pixel_values.shape[-2:])
            maps = tuple(tokens[:, :1 + rows * cols] for tokens in maps)
        return_dict = self.config.return_dict if return_dict is None else return_dict
        return BackboneOutput(feature_maps=tuple(maps)) if return_dict else (tuple(maps), )


def released_config(state_dict: dict, patch_size: int = 16,
                    **kwargs) -> Vit5BackboneConfig:
    """The :class:`Vit5BackboneConfig` of a released ViT-5 state dict (its width, depth, heads,
    registers and pretraining size), ``kwargs`` set on top."""
    embed_dim = state_dict['cls_token'].shape[-1]
    depth = len({key.split('.')[1] for key in state_dict if key.startswith('blocks.')})
    # the released files keep each block's RoPE frequencies: head_dim // 4 of them
    heads = embed_dim // (4 * state_dict['blocks.0.attn.rope.freqs'].numel())
    grid = int(round(state_dict['pos_embed'].shape[1]**0.5))
    settings = dict(
        hidden_size=embed_dim, num_hidden_layers=depth, num_attention_heads=heads,
        mlp_ratio=state_dict['blocks.0.mlp.fc1.weight'].shape[0] / embed_dim,
        image_size=grid * patch_size, patch_size=patch_size,
        num_registers=state_dict['reg_token'].shape[1])
    return Vit5BackboneConfig(**dict(settings, **kwargs))


def _read_local_folders() -> None:
    """``AutoBackbone.from_pretrained(folder)`` reads a local folder, as the other Auto classes.

    transformers 5.1 to 5.25 (at least) first ask the hub whether the name is a repository
    (``repo_exists``) to choose between a transformers and a timm backbone: an absolute path
    fails repo-id validation (``HFValidationError``) and a relative one is a network call,
    refused under ``HF_HUB_OFFLINE=1``. A folder is never a timm name, so it goes straight to
    the generic loader; every other name still takes transformers' own path.
    """
    from transformers.models.auto.auto_factory import _BaseAutoModelClass
    hub_first = AutoBackbone.from_pretrained.__func__
    if getattr(hub_first, 'reads_local_folders', False):
        return

    def from_pretrained(cls, pretrained_model_name_or_path, *model_args, **kwargs):
        if os.path.isdir(pretrained_model_name_or_path):
            kwargs.pop('use_timm_backbone', None)
            return _BaseAutoModelClass.from_pretrained.__func__(
                cls, pretrained_model_name_or_path, *model_args, **kwargs)
        return hub_first(cls, pretrained_model_name_or_path, *model_args, **kwargs)

    from_pretrained.reads_local_folders = True
    from_pretrained.__doc__ = hub_first.__doc__
    AutoBackbone.from_pretrained = classmethod(from_pretrained)


def register() -> None:
    """Register ``model_type='vit5'`` with ``AutoConfig`` and ``AutoBackbone`` (once)."""
    AutoConfig.register(Vit5BackboneConfig.model_type, Vit5BackboneConfig, exist_ok=True)
    AutoBackbone.register(Vit5BackboneConfig, Vit5Backbone, exist_ok=True)
    _read_local_folders()


register()

__all__ = ['Vit5BackboneConfig', 'Vit5Backbone', 'released_config']
