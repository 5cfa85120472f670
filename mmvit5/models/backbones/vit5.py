"""ViT-5 backbone (arXiv 2602.08071) for mmdet, mmseg and mmpretrain.

Data flow: image -> patch embed (+ absolute embedding resized to the run-time grid)
-> ``[cls, patches, registers]`` -> window-major order, once, when any block is windowed
(:mod:`..layers.windows`) -> blocks (RoPE from one cached table per grid, in the same order)
-> raster order -> strip the class token and registers -> (B, C, H, W) per ``out_indices``
entry. How a forward runs is decided once, by :meth:`ViT5.plan`, and handed to every layer.
"""
import dataclasses
import inspect
from dataclasses import fields
from typing import Dict, List, Optional, Sequence, Set, Tuple, Union

import torch
import torch.nn as nn
import torch.utils.checkpoint
from mmengine.model import BaseModule
from mmengine.registry import MODELS
from torch.nn.init import trunc_normal_

from ...checkpoint import extract_state_dict, read_checkpoint
from ...run_log import log_in_run
from ..layers.block import Block, PatchEmbed
from ..layers.norm import token_norm
from ..layers.plan import ExecutionPlan, make_plan
from ..layers.pos_embed import resize_pos_embed
from ..layers.rope import RotaryEmbedding2D, register_grid, rotations, sequence_angles
from ..layers.windows import WindowLayout, permute_tokens, window_layout
from .vit5_config import ARCH_ZOO, ViT5Config, config_field
from .vit5_timm_api import ViT5TimmApi
from .vit5_weights import checkpoint_filter_fn


@MODELS.register_module()
class ViT5(ViT5TimmApi, BaseModule):
    """ViT-5: RMSNorm, LayerScale, QK-Norm, absolute + 2D RoPE positions, registers.

    Numerically the released implementation on its checkpoints, extended to any input size:
    the absolute embedding is resized (bicubic) to the run-time grid and RoPE positions follow
    ``rope_mode`` per axis. Inputs whose sides are not multiples of ``patch_size`` are
    zero-padded at the bottom/right, so the last row/column of the output map also covers the
    padding.

    Args:
        **options: The fields of :class:`.ViT5Config` (``arch``, ``img_size``, ...,
            ``with_cp``, ``compile_blocks``), each documented there; ``self.config`` keeps them.
        init_cfg (dict, optional): ``dict(type='Pretrained', checkpoint=PATH)`` loads a
            released, mmengine or mmdet/mmseg checkpoint (``prefix`` and ``checkpoint_key``
            select the entry); anything else is mmengine's usual initialisation.

    Attributes:
        config (ViT5Config): The model's state: ``img_size``, ``out_indices``, ``out_type``,
            ``window_size``, ``global_attn_indices``, ``num_classes``, ``global_pool`` ... are
            its fields (resolved: a size pair, non-negative indices), read and set through it.
        grad_checkpointing (bool): timm's name of ``config.with_cp``: checkpoint each block's
            activations in training (the plan reads it at every forward).
    """

    arch_zoo = ARCH_ZOO
    img_size = config_field('img_size')
    patch_size = config_field('patch_size')
    in_channels = config_field('in_channels')
    num_registers = config_field('num_registers')
    out_indices = config_field('out_indices')
    out_type = config_field('out_type')
    window_size = config_field('window_size')
    global_attn_indices = config_field('global_attn_indices')
    num_classes = config_field('num_classes')
    global_pool = config_field('global_pool')

    def __init__(self, init_cfg: Optional[Union[dict, List[dict]]] = None, **options) -> None:
        super().__init__(init_cfg=init_cfg)
        self.config = cfg = ViT5Config.from_kwargs(**options)
        arch = cfg.arch_settings
        embed_dim, depth, num_heads = arch['embed_dim'], arch['depth'], arch['num_heads']

        self.patch_embed = PatchEmbed(cfg.in_channels, embed_dim, cfg.patch_size)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim))
        self.reg_token = nn.Parameter(torch.zeros(1, cfg.num_registers, embed_dim)) \
            if cfg.num_registers else None
        num_patches = self.pretrain_grid[0] * self.pretrain_grid[1]
        self.pos_embed = nn.Parameter(torch.zeros(1, num_patches, embed_dim)) \
            if cfg.use_abs_pos else None
        head_dim = embed_dim // num_heads
        self.rope = RotaryEmbedding2D(head_dim, cfg.rope_theta, self.pretrain_grid) \
            if cfg.use_rope else None
        self.rope_reg = RotaryEmbedding2D(head_dim, cfg.reg_rope_theta,
                                          register_grid(cfg.num_registers)) \
            if cfg.use_rope and cfg.num_registers else None
        self._rope_cache: Dict[tuple, Optional[torch.Tensor]] = {}
        # grid -> (resized pos_embed, RoPE table) read as constants (fix_tables)
        self._fixed_tables: Dict[Tuple[int, int], tuple] = {}

        if cfg.drop_path_schedule == 'uniform':
            rates = [cfg.drop_path_rate] * depth
        else:
            rates = torch.linspace(0, cfg.drop_path_rate, depth).tolist()
        self.blocks = nn.ModuleList([
            Block(dim=embed_dim, num_heads=num_heads, mlp_ratio=arch.get('mlp_ratio', 4.0),
                  drop_path=rates[i], layer_scale_init_value=cfg.layer_scale_init_value,
                  qk_norm=cfg.qk_norm, qkv_bias=cfg.qkv_bias, norm=cfg.norm,
                  window_size=0 if i in cfg.global_attn_indices else cfg.window_size)
            for i in range(depth)
        ])
        if cfg.compile_blocks:
            for block in self.blocks:
                block.compile()
        self.norm = token_norm(cfg.norm)(embed_dim) if cfg.final_norm else nn.Identity()
        # timm's feature metadata, one entry per block (forward_intermediates)
        self.feature_info = [dict(num_chs=embed_dim, reduction=cfg.patch_size,
                                  module=f'blocks.{i}') for i in range(depth)]
        self._plans_logged: Set[ExecutionPlan] = set()
        self.reset_classifier(cfg.num_classes, cfg.global_pool)  # no head (no keys) for 0
        self._freeze_stages()

    @property
    def embed_dim(self) -> int:
        return self.config.arch_settings['embed_dim']

    @property
    def depth(self) -> int:
        return self.config.arch_settings['depth']

    @property
    def pretrain_grid(self) -> Tuple[int, int]:
        """The patch grid of ``img_size``: ``pos_embed``'s and RoPE's ``n_pt``."""
        return (self.img_size[0] // self.patch_size, self.img_size[1] // self.patch_size)

    @property
    def grad_checkpointing(self) -> bool:
        return self.config.with_cp

    @grad_checkpointing.setter
    def grad_checkpointing(self, enable: bool) -> None:
        self.config = dataclasses.replace(self.config, with_cp=bool(enable))

    def switches(self) -> Dict[str, object]:
        """The ablation switches set away from the released model, e.g. ``{'qk_norm': False}``."""
        return self.config.switches()

    # ----------------------------------------------------------------- execution plan
    def plan(self, x: torch.Tensor) -> ExecutionPlan:
        """How a forward over ``x`` runs now (device, autocast, Triton or PyTorch, attention
        and window kernels, checkpointing, compiled blocks): decided here once per forward
        and handed to every layer. ``print(model.plan(x))`` shows it; the model logs each
        plan the first time it runs it. Blocks are checkpointed in training only."""
        plan = make_plan(x, self.config.attn_impl, self.grad_checkpointing and self.training,
                         self.config.compile_blocks)
        if not plan.traced and plan not in self._plans_logged:
            self._plans_logged.add(plan)
            log_in_run(f'ViT5 execution plan: {plan}')
        return plan

    def _run_block(self, block: Block, x: torch.Tensor, rope: Optional[torch.Tensor],
                   windows: Optional[WindowLayout], plan: ExecutionPlan) -> torch.Tensor:
        """One block, checkpointed where the plan says: the one place activation
        checkpointing is applied (non-reentrant: the recompute runs under the forward's
        autocast, and keyword arguments pass through)."""
        if plan.checkpoint:
            return torch.utils.checkpoint.checkpoint(block, x, rope, windows, plan=plan,
                                                     use_reentrant=False)
        return block(x, rope, windows, plan=plan)

    # ----------------------------------------------------------------- weights
    def init_weights(self) -> None:
        if isinstance(self.init_cfg, dict) and self.init_cfg.get('type') == 'Pretrained':
            # what the checkpoint does not cover (an ablation's extra biases or registers)
            # starts from the from-scratch initialisation
            self.init_from_scratch()
            self.load_pretrained(self.init_cfg['checkpoint'],
                                 checkpoint_key=self.init_cfg.get('checkpoint_key'),
                                 prefix=self.init_cfg.get('prefix'))
            self._is_init = True
            return
        super().init_weights()
        if self.init_cfg is None:
            self.init_from_scratch()

    def init_from_scratch(self) -> None:
        """The initialisation of a model trained from scratch (truncated normal tokens and
        linear layers, as the reference), without mmengine's logging."""
        for token in (self.pos_embed, self.cls_token, self.reg_token):
            if token is not None:
                trunc_normal_(token, std=0.02)
        for module in self.modules():
            if isinstance(module, nn.Linear):
                trunc_normal_(module.weight, std=0.02)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)

    def load_pretrained(self, path: str, checkpoint_key: Optional[str] = None,
                        prefix: Optional[str] = None) -> None:
        """Load a released / mmengine / detector checkpoint (a path, or a URL cached in the
        torch hub cache) into this backbone.

        ``pos_embed`` is resized (bicubic) from the checkpoint's grid to this model's
        ``img_size`` grid; the classifier loads where this model has one (``num_classes``),
        else it is ignored; the per-block RoPE frequency buffers of the released files are
        checked against this model's and dropped. Parts that this model's ablation switches
        change load as far as they fit
        (:func:`.vit5_weights.checkpoint_filter_fn`); any other missing, unexpected or
        mis-shaped key raises :class:`CheckpointError`.
        """
        state = extract_state_dict(read_checkpoint(path), checkpoint_key, prefix)
        state = checkpoint_filter_fn(state, self, source=path)
        # checkpoint_filter_fn has checked every key; what it left out is logged as left at init
        self.load_state_dict(state, strict=False)
        self._rope_cache.clear()
        log_in_run(f'ViT5: loaded {len(state)} tensors from {path}')

    # ----------------------------------------------------------------- forward
    def token_order(self, grid: Tuple[int, int], device: torch.device,
                    num_registers: Optional[int] = None) -> Optional[WindowLayout]:
        """The window-major order the blocks run in when any block is windowed, else None
        (raster order)."""
        if not self.window_size:
            return None
        num_registers = self.num_registers if num_registers is None else num_registers
        return window_layout(grid, self.window_size, num_registers, device)

    def rope_table(self, grid: Tuple[int, int], dtype: torch.dtype, device: torch.device,
                   num_registers: Optional[int] = None,
                   windows: Optional[WindowLayout] = None,
                   cache: bool = True) -> Optional[torch.Tensor]:
        """RoPE (cos, sin) table (T, head_dim // 2, 2) for ``[cls, patches, registers]`` on
        ``grid`` (in the order of ``windows`` where given), cached unless ``cache=False``;
        None when ``use_rope=False``."""
        if self.rope is None:
            return None
        num_registers = self.num_registers if num_registers is None else num_registers
        key = (grid, dtype, device, self.config.rope_mode, num_registers,
               windows.window_size if windows is not None else 0)
        table = self._rope_cache.get(key) if cache else None
        if table is None:
            with torch.no_grad():
                angles = sequence_angles(self.rope, self.rope_reg, grid, num_registers,
                                         self.config.rope_mode).to(device)
                table = permute_tokens(rotations(angles, dtype)[None],
                                       None if windows is None else windows.order)[0]
            if not cache:
                return table
            if len(self._rope_cache) >= 16:  # multi-scale training meets many grids
                self._rope_cache.pop(next(iter(self._rope_cache)))
            self._rope_cache[key] = table
        return table

    def fix_tables(self, grid: Tuple[int, int]) -> None:
        """Keep ``grid``'s resized absolute embedding and RoPE table as constants that
        forward reads at that grid, eager or exported: a fixed-size ONNX graph then holds them
        as initializers, with no sin/cos, resize or position arithmetic (what TensorRT needs,
        :mod:`mmvit5.deploy`). For deployed copies: the constants do not follow later
        training."""
        grid = (int(grid[0]), int(grid[1]))
        device = self.cls_token.device
        with torch.no_grad():
            pos = None if self.pos_embed is None else \
                resize_pos_embed(self.pos_embed, self.pretrain_grid, grid).clone()
            rope = self.rope_table(grid, self.cls_token.dtype, device,
                                   windows=self.token_order(grid, device), cache=False)
        self._fixed_tables[grid] = (pos, rope)

    def _fixed(self, grid: Tuple[int, int]) -> Optional[tuple]:
        # never looked up with symbolic sides: graphs with dynamic sides fix no tables
        return self._fixed_tables.get(grid) if self._fixed_tables else None

    def _check_input(self, x: torch.Tensor) -> None:
        if not isinstance(x, torch.Tensor):
            raise TypeError(f'ViT5 expects one (B, C, H, W) tensor, got {type(x).__name__}; '
                            'pad images of different sizes to one size first (the mmdet/mmseg '
                            'data preprocessors do, pad_size_divisor=32)')
        if x.dim() != 4:
            raise ValueError(f'ViT5 expects images (B, C, H, W), got shape {tuple(x.shape)}')
        if x.shape[1] != self.in_channels:
            raise ValueError(f'ViT5 was built for {self.in_channels} input channels, got '
                             f'{x.shape[1]}; set in_channels or convert the images')
        if min(x.shape[2:]) < self.patch_size:
            raise ValueError(f'image size {tuple(x.shape[2:])} is smaller than one '
                             f'{self.patch_size}x{self.patch_size} patch; resize or pad inputs')
        if self.config.check_finite and not torch.isfinite(x).all():
            raise ValueError('ViT5 input contains NaN or inf (check_finite=True); check the '
                             'data pipeline / normalisation')

    def prepare_tokens(self, x: torch.Tensor, with_registers: bool = True
               ) -> Tuple[torch.Tensor, Tuple[int, int], ExecutionPlan]:
        """What every forward starts with: the input checked, this forward's plan
        (:meth:`plan`), the tokens ``[cls, patches, registers]`` (B, T, C) and their patch
        grid; returns (tokens, grid, plan), which :meth:`run_blocks` takes."""
        self._check_input(x)
        plan = self.plan(x)
        return (*self.tokens(x, plan, with_registers), plan)

    def tokens(self, x: torch.Tensor, plan: ExecutionPlan,
               with_registers: bool = True) -> Tuple[torch.Tensor, Tuple[int, int]]:
        """Embed images (B, C, H, W) into the token sequence ``[cls, patches, registers]``
        (B, T, C); returns it and the patch grid."""
        x, grid = self.patch_embed(x)
        if self.pos_embed is not None:
            fixed = self._fixed(grid)
            if fixed:
                x = x + fixed[0]
            # an exported graph always resizes (bicubic at scale 1 is the identity): comparing
            # its symbolic grid would pin the graph to the example input's
            elif plan.exporting or grid != self.pretrain_grid:
                x = x + resize_pos_embed(self.pos_embed, self.pretrain_grid, grid)
            else:
                x = x + self.pos_embed
        B = x.shape[0]
        registers = self.reg_token.expand(B, -1, -1) \
            if with_registers and self.reg_token is not None else x[:, :0]
        return torch.cat((self.cls_token.expand(B, -1, -1), x, registers), dim=1), grid

    def forward_tokens(self, x: torch.Tensor,
                       with_registers: bool = True) -> Dict[str, torch.Tensor]:
        """All tokens after the final norm, split by role (for analysis and classification).

        Args:
            x (Tensor): (B, in_channels, H, W).
            with_registers (bool): False runs the same weights without register tokens, to
                see what the registers absorb (e.g. high-norm patch artefacts).

        Returns:
            dict: ``cls_token`` (B, C), ``patch_tokens`` (B, H * W, C), ``reg_tokens``
            (B, R, C) (R = 0 without registers) and ``grid`` (H, W).
        """
        x, grid, plan = self.prepare_tokens(x, with_registers)
        x = self.run_blocks(x, grid, [self.depth - 1], plan,
                             num_registers=self.num_registers if with_registers else 0)
        x = x[self.depth - 1]
        num_patches = grid[0] * grid[1]
        return dict(cls_token=x[:, 0], patch_tokens=x[:, 1:1 + num_patches],
                    reg_tokens=x[:, 1 + num_patches:], grid=grid)

    def forward(self, x: torch.Tensor) -> Tuple[torch.Tensor, ...]:
        """Args: x (B, in_channels, H, W). Returns one output per ``out_indices`` entry, in
        that order; blocks after the last requested one are not run. With ``out_type='head'``
        one tensor, timm's classifier output."""
        if self.out_type == 'head':
            return self.forward_head(self.forward_features(x))
        x, grid, plan = self.prepare_tokens(x)
        outs = self.run_blocks(x, grid, self.out_indices, plan)
        return tuple(self._format_output(outs[i], grid) for i in self.out_indices)

    def run_blocks(self, x: torch.Tensor, grid: Tuple[int, int], indices: Sequence[int],
                    plan: ExecutionPlan, final_norm: bool = True,
                    num_registers: Optional[int] = None) -> Dict[int, torch.Tensor]:
        """The one block loop of the model (``forward``, ``forward_features``,
        ``forward_tokens`` and ``forward_intermediates`` all run it).

        Args:
            x (Tensor): Tokens ``[cls, patches, registers]`` (B, T, C) from :meth:`tokens`.
            grid (tuple[int, int]): Patch grid (H, W) of ``x``.
            indices (Sequence[int]): Non-negative block indices whose outputs to keep; blocks
                after the largest are not run.
            plan (ExecutionPlan): This forward's (:meth:`plan`).
            final_norm (bool): Apply the final norm to the last block's output.
            num_registers (int, optional): Registers in ``x``; None: the model's.

        Returns:
            dict[int, Tensor]: Block index -> its output tokens (B, T, C), raster order.
        """
        # with windows, the blocks run in window-major order (layers/windows.py), and the
        # outputs go back to raster order
        windows = self.token_order(grid, x.device, num_registers)
        if windows is not None and not plan.traced and plan.window_kernel == 'flex':
            # built here: a block compiled on its own (compile_blocks) would trace building
            # it on its first call, and recompile once it is cached
            windows.block_mask()
        # Graphs compute the table instead of looking it up: torch.export would pin a cached
        # key's grid to the example input's, and torch.compile would guard on the cache's
        # contents, so the step that fills it would recompile the whole model
        fixed = self._fixed(grid) if num_registers in (None, self.num_registers) else None
        rope = fixed[1] if fixed else self.rope_table(
            grid, self.cls_token.dtype, x.device, num_registers, windows, cache=not plan.traced)
        x = permute_tokens(x, None if windows is None else windows.order)
        outs = {}
        for i, block in enumerate(self.blocks[:max(indices) + 1]):
            x = self._run_block(block, x, rope, windows, plan)
            if final_norm and i == self.depth - 1:
                x = self._final_norm(x, plan)
            if i in indices:
                outs[i] = permute_tokens(x, None if windows is None else windows.inverse)
        return outs

    def _final_norm(self, x: torch.Tensor, plan: ExecutionPlan) -> torch.Tensor:
        return self.norm(x, plan=plan) if self.config.final_norm else x

    def _format_output(self, x: torch.Tensor, grid: Tuple[int, int]) -> torch.Tensor:
        if self.out_type == 'raw':
            return x
        if self.out_type == 'cls_token':
            return x[:, 0]
        # registers come last: patches are x[:, 1:1 + N], never x[:, num_prefix:]
        patches = x[:, 1:1 + grid[0] * grid[1]]
        if self.out_type == 'avg_featmap':
            return patches.mean(dim=1)
        # contiguous NCHW: the transposed view is channels-last in memory, and mmcv's
        # RoIAlign (2.1.0) reads its input as NCHW memory, ignoring strides
        return patches.transpose(1, 2).reshape(x.shape[0], self.embed_dim, *grid).contiguous()

    # ----------------------------------------------------------------- freezing
    def _freeze_stages(self) -> None:
        frozen_stages = self.config.frozen_stages
        if frozen_stages < 0:
            return
        frozen = [self.patch_embed, *self.blocks[:frozen_stages]]
        if frozen_stages == self.depth:
            frozen.append(self.norm)
        for param in (self.pos_embed, self.cls_token, self.reg_token):
            if param is not None:
                param.requires_grad = False
        for module in frozen:
            module.eval()
            for param in module.parameters():
                param.requires_grad = False

    def train(self, mode: bool = True) -> 'ViT5':
        super().train(mode)
        self._freeze_stages()
        return self

    # ----------------------------------------------------------------- optimisation
    def get_layer_depth(self, param_name: str, prefix: str = '') -> Tuple[int, int]:
        """The layer-wise depth of a parameter, for layer-wise learning-rate decay.

        mmpretrain's convention (its ``VisionTransformer.get_layer_depth``): depth 0 is the
        stem (``patch_embed``, ``cls_token``, ``reg_token``, ``pos_embed``), block ``i`` is
        depth ``i + 1``, and everything else (the final norm, and every parameter outside
        ``prefix``: neck, heads) is the last depth, ``num_layers - 1``.

        Args:
            param_name (str): A parameter name of the whole model, e.g.
                ``'backbone.blocks.3.attn.qkv.weight'``.
            prefix (str): Where this backbone sits in the model, e.g. ``'backbone.'``.

        Returns:
            tuple[int, int]: ``(layer_depth, num_layers)`` with ``num_layers = depth + 2``.
        """
        num_layers = self.depth + 2
        if not param_name.startswith(prefix):
            return num_layers - 1, num_layers
        name = param_name[len(prefix):]
        if name.startswith(('patch_embed.', 'cls_token', 'reg_token', 'pos_embed')):
            return 0, num_layers
        if name.startswith('blocks.'):
            return int(name.split('.')[1]) + 1, num_layers
        return num_layers - 1, num_layers


# help(ViT5), editors and the API page show the options (ViT5Config's fields) as its arguments
ViT5.__signature__ = inspect.Signature([
    *(inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=f.default,
                        annotation=f.type) for f in fields(ViT5Config)),
    inspect.Parameter('init_cfg', inspect.Parameter.KEYWORD_ONLY, default=None,
                      annotation=Optional[Union[dict, List[dict]]])])
