"""ViT-5 backbone (arXiv 2602.08071) for mmdet, mmseg and mmpretrain.

Data flow: image -> patch embed (+ absolute embedding resized to the run-time grid)
-> ``[cls, patches, registers]`` -> blocks (RoPE from one cached table per grid)
-> strip the class token and registers -> (B, C, H, W) per ``out_indices`` entry.
"""
import copy
import numbers
from typing import Dict, List, Optional, Sequence, Set, Tuple, Union

import torch
import torch.nn as nn
import torch.utils.checkpoint
from mmengine.logging import print_log
from mmengine.model import BaseModule
from mmengine.registry import MODELS
from torch.nn.init import trunc_normal_

from ...checkpoint import extract_state_dict, read_checkpoint
from ...utils.checks import check_number
from ..layers.block import Block, PatchEmbed
from ..layers.norm import token_norm
from ..layers.plan import ATTN_IMPLS, CP_IMPLS, ExecutionMode, ExecutionPlan, make_plan
from ..layers.pos_embed import resize_pos_embed
from ..layers.rope import ROPE_MODES, RotaryEmbedding2D, register_grid, rotations, sequence_angles
from ..layers.windows import WindowLayout, permute_tokens, window_layout
from .vit5_weights import RELEASED_SWITCHES, checkpoint_filter_fn

OUT_TYPES = ('featmap', 'raw', 'cls_token', 'avg_featmap')
DROP_PATH_SCHEDULES = ('uniform', 'linear')


@MODELS.register_module()
class ViT5(BaseModule):
    """ViT-5: RMSNorm, LayerScale, QK-Norm, absolute + 2D RoPE positions, registers.

    Numerically the released implementation on its checkpoints, extended to any input size:
    the absolute embedding is resized (bicubic) to the run-time grid and RoPE positions follow
    ``rope_mode`` per axis. Inputs whose sides are not multiples of ``patch_size`` are
    zero-padded at the bottom/right, so the last row/column of the output map also covers the
    padding.

    Args:
        arch (str | dict): ``'small'``, ``'base'``, ``'large'``, ``'xlarge'`` (or ``s``, ``b``,
            ``l``, ``xl``), or a dict with ``embed_dim``, ``depth``, ``num_heads`` and
            optionally ``mlp_ratio``.
        img_size (int | tuple[int, int]): The *pretraining* size. It fixes the ``pos_embed``
            grid and RoPE's ``n_pt``; inputs of any size are accepted at run time.
        patch_size (int): Defaults to 16.
        in_channels (int): Defaults to 3.
        num_registers (int): Register tokens, any count >= 0 (4 released). Their RoPE grid
            has ``ceil(sqrt(R))`` columns filled row by row (:func:`register_grid`): 2x2 for
            4, as released; 2x3 with the last cell empty for 5.
        out_indices (int | Sequence[int]): Blocks whose outputs are returned; negative
            values count from the end. Defaults to -1.
        out_type (str): ``'featmap'`` (B, C, H, W) patch map with class token and registers
            stripped; ``'raw'`` (B, T, C) all tokens; ``'cls_token'`` (B, C);
            ``'avg_featmap'`` (B, C) mean of the patch tokens.
        final_norm (bool): Apply the final RMSNorm to the last block's output (all outputs
            taken from the last block see it). Defaults to True, as the reference.
        rope_mode (str): ``'interpolate'`` (positions ``i / n * n_pt``, the reference's
            behaviour at a new grid) or ``'extrapolate'`` (integer positions, the reference
            after fine-tuning at a new size).
        rope_theta (float): Patch RoPE base. Defaults to 10000.
        reg_rope_theta (float): Register RoPE base. Defaults to 100.
        drop_path_rate (float): Stochastic depth.
        drop_path_schedule (str): ``'uniform'`` (the same rate in every block, as the
            reference) or ``'linear'`` (0 to ``drop_path_rate`` over depth).
        layer_scale_init_value (float, optional): LayerScale init. Defaults to 1e-4, as
            released; None builds no LayerScale (no ``gamma_*`` parameters).
        qk_norm (bool): QK-Norm. Defaults to True.
        use_abs_pos (bool): The absolute position embedding; False builds no ``pos_embed``.
            Defaults to True.
        use_rope (bool): 2D RoPE on patches and registers. Defaults to True.
        norm (str): Every norm of the backbone (blocks, QK-Norm, final): ``'rms'`` (RMSNorm,
            released) or ``'ln'`` (LayerNorm with bias, eps 1e-6).
        qkv_bias (bool): Bias in the attention's ``qkv``. Defaults to False, as released.
        attn_impl (str): The attention kernel: ``'auto'`` (default) or ``'sdpa'`` (SDPA;
            windows batched by size), ``'flex'`` (windowed blocks through a block-sparse
            ``flex_attention``; unmeasured on a GPU) or ``'math'`` (the explicit softmax
            formula); all compute the same function. :meth:`plan` says what a forward runs.
        window_size (int): 0 (default) for global attention in every block; else ViTDet-style
            windowed attention of this side (in patches, e.g. 14) in all blocks but
            ``global_attn_indices``. Rule for prefix tokens: see :class:`Attention`. The
            tokens then run through the blocks in window-major order (no padding, no mask;
            :mod:`~mmvit5.models.layers.windows`), back in raster order at the outputs.
        global_attn_indices (Sequence[int], optional): Blocks that stay global when
            ``window_size > 0``; default 4 evenly spaced, ending at the last block
            (2, 5, 8, 11 for 12 blocks, as ViTDet).
        frozen_stages (int): -1 trains everything; 0 freezes patch embed, ``pos_embed``,
            ``cls_token`` and ``reg_token``; k > 0 also blocks ``0 .. k - 1`` (and the final
            norm once every block is frozen).
        with_cp (bool): Activation checkpointing of each block.
        cp_impl (str): ``'fairscale'`` (``checkpoint_wrapper``) or ``'torch'``
            (non-reentrant ``torch.utils.checkpoint``).
        check_finite (bool): Raise on NaN/inf inputs (one reduction per forward).
        compile_blocks (bool): ``torch.compile`` each block in place (regional compilation:
            identical blocks share one compiled graph, state-dict keys unchanged). Inductor
            fuses ViT-5's elementwise passes (QK-Norm, RoPE, LayerScale), which eager runs as
            separate kernels; see docs/en/advanced/training_path.md for where it pays.
            Not with ``cp_impl='fairscale'`` (use ``'torch'``).
        init_cfg (dict, optional): ``dict(type='Pretrained', checkpoint=PATH)`` loads a
            released, mmengine or mmdet/mmseg checkpoint (``prefix`` and ``checkpoint_key``
            select the entry); anything else is mmengine's usual initialisation.

    The defaults of ``num_registers``, ``layer_scale_init_value``, ``qk_norm``,
    ``use_abs_pos``, ``use_rope``, ``norm`` and ``qkv_bias`` are the released model; the other
    values are ablations (``configs/ablations/``). A released checkpoint loads into an
    ablated model as far as it fits (:func:`.vit5_weights.checkpoint_filter_fn`).
    """

    arch_zoo = {
        **dict.fromkeys(['s', 'small'], dict(embed_dim=384, depth=12, num_heads=6)),
        **dict.fromkeys(['b', 'base'], dict(embed_dim=768, depth=12, num_heads=12)),
        **dict.fromkeys(['l', 'large'], dict(embed_dim=1024, depth=24, num_heads=16)),
        **dict.fromkeys(['xl', 'xlarge'], dict(embed_dim=1152, depth=28, num_heads=16)),
    }

    def __init__(self,
                 arch: Union[str, dict] = 'base',
                 img_size: Union[int, Sequence[int]] = 224,
                 patch_size: int = 16,
                 in_channels: int = 3,
                 num_registers: int = 4,
                 out_indices: Union[int, Sequence[int]] = -1,
                 out_type: str = 'featmap',
                 final_norm: bool = True,
                 rope_mode: str = 'interpolate',
                 rope_theta: float = 10000.0,
                 reg_rope_theta: float = 100.0,
                 drop_path_rate: float = 0.0,
                 drop_path_schedule: str = 'uniform',
                 layer_scale_init_value: Optional[float] = 1e-4,
                 qk_norm: bool = True,
                 use_abs_pos: bool = True,
                 use_rope: bool = True,
                 norm: str = 'rms',
                 qkv_bias: bool = False,
                 attn_impl: str = 'auto',
                 window_size: int = 0,
                 global_attn_indices: Optional[Sequence[int]] = None,
                 frozen_stages: int = -1,
                 with_cp: bool = False,
                 cp_impl: str = 'fairscale',
                 check_finite: bool = False,
                 compile_blocks: bool = False,
                 init_cfg: Optional[Union[dict, List[dict]]] = None) -> None:
        super().__init__(init_cfg=init_cfg)
        self.arch_settings = self._arch_settings(arch)
        embed_dim = self.arch_settings['embed_dim']
        depth = self.arch_settings['depth']
        num_heads = self.arch_settings['num_heads']
        mlp_ratio = self.arch_settings.get('mlp_ratio', 4.0)
        self._check_config(
            embed_dim=embed_dim, depth=depth, num_heads=num_heads, mlp_ratio=mlp_ratio,
            img_size=img_size, patch_size=patch_size, in_channels=in_channels,
            num_registers=num_registers, out_type=out_type, rope_mode=rope_mode,
            rope_theta=rope_theta, reg_rope_theta=reg_rope_theta,
            drop_path_rate=drop_path_rate, drop_path_schedule=drop_path_schedule,
            layer_scale_init_value=layer_scale_init_value, window_size=window_size,
            frozen_stages=frozen_stages, cp_impl=cp_impl, attn_impl=attn_impl)
        self.embed_dim = embed_dim
        self.depth = depth
        self.patch_size = patch_size
        self.in_channels = in_channels
        self.img_size = (img_size, img_size) if isinstance(img_size, int) else tuple(img_size)
        self.pretrain_grid = (self.img_size[0] // patch_size, self.img_size[1] // patch_size)
        self.num_registers = num_registers
        self.out_indices = self._normalize_indices(out_indices, depth)
        self.out_type = out_type
        self.final_norm = final_norm
        self.rope_mode = rope_mode
        self.frozen_stages = frozen_stages
        self.check_finite = check_finite
        self.layer_scale_init_value = layer_scale_init_value
        self.qk_norm = qk_norm
        self.use_abs_pos = use_abs_pos
        self.use_rope = use_rope
        self.norm_kind = norm  # of every norm layer: blocks, QK-Norm and the final self.norm
        self.qkv_bias = qkv_bias
        norm_layer = token_norm(norm)

        num_patches = self.pretrain_grid[0] * self.pretrain_grid[1]
        self.patch_embed = PatchEmbed(in_channels, embed_dim, patch_size)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim))
        self.reg_token = nn.Parameter(torch.zeros(1, num_registers, embed_dim)) \
            if num_registers else None
        self.pos_embed = nn.Parameter(torch.zeros(1, num_patches, embed_dim)) \
            if use_abs_pos else None
        head_dim = embed_dim // num_heads
        self.rope = RotaryEmbedding2D(head_dim, rope_theta, self.pretrain_grid) \
            if use_rope else None
        self.rope_reg = RotaryEmbedding2D(head_dim, reg_rope_theta,
                                          register_grid(num_registers)) \
            if use_rope and num_registers else None
        self._rope_cache: Dict[tuple, Optional[torch.Tensor]] = {}
        # grid -> (resized pos_embed, RoPE table) read as constants (fix_tables)
        self._fixed_tables: Dict[Tuple[int, int], tuple] = {}

        if drop_path_schedule == 'uniform':
            rates = [drop_path_rate] * depth
        else:
            rates = torch.linspace(0, drop_path_rate, depth).tolist()
        self.global_attn_indices = self._global_blocks(window_size, global_attn_indices, depth)
        # the side of the windows any block uses; 0 when every block is global
        self.window_size = window_size if len(self.global_attn_indices) < depth else 0
        self.blocks = nn.ModuleList([
            Block(dim=embed_dim, num_heads=num_heads, mlp_ratio=mlp_ratio, drop_path=rates[i],
                  layer_scale_init_value=layer_scale_init_value, qk_norm=qk_norm,
                  qkv_bias=qkv_bias, norm=norm,
                  window_size=0 if i in self.global_attn_indices else window_size)
            for i in range(depth)
        ])
        self.with_cp = with_cp
        self.cp_impl = cp_impl
        self.attn_impl = attn_impl
        self.compile_blocks = compile_blocks
        self._plans_logged: Set[ExecutionPlan] = set()
        if with_cp and cp_impl == 'fairscale':
            self._wrap_checkpointing()
        if compile_blocks:
            if with_cp and cp_impl == 'fairscale':
                raise ValueError("compile_blocks=True cannot compile fairscale's checkpoint "
                                 "wrapper: set cp_impl='torch' (or with_cp=False)")
            for block in self.blocks:
                block.compile()
        self.norm = norm_layer(embed_dim) if final_norm else nn.Identity()
        # timm's feature metadata, one entry per block (forward_intermediates)
        self.feature_info = [dict(num_chs=embed_dim, reduction=patch_size, module=f'blocks.{i}')
                             for i in range(depth)]
        self._freeze_stages()

    # ----------------------------------------------------------------- configuration
    def _arch_settings(self, arch: Union[str, dict]) -> dict:
        if isinstance(arch, str):
            if arch.lower() not in self.arch_zoo:
                raise ValueError(f'unknown ViT5 arch {arch!r}; choose one of '
                                 f'{sorted(set(self.arch_zoo))} or pass a dict with '
                                 'embed_dim, depth and num_heads')
            return dict(self.arch_zoo[arch.lower()])
        missing = {'embed_dim', 'depth', 'num_heads'} - set(arch)
        unknown = set(arch) - {'embed_dim', 'depth', 'num_heads', 'mlp_ratio'}
        if missing or unknown:
            raise ValueError(f'ViT5 arch dict needs embed_dim, depth, num_heads (and may set '
                             f'mlp_ratio); missing {sorted(missing)}, unknown {sorted(unknown)}')
        return dict(arch)

    @staticmethod
    def _check_config(*, embed_dim: int, depth: int, num_heads: int, mlp_ratio: float,
                      img_size: Union[int, Sequence[int]], patch_size: int, in_channels: int,
                      num_registers: int, out_type: str, rope_mode: str, rope_theta: float,
                      reg_rope_theta: float, drop_path_rate: float, drop_path_schedule: str,
                      layer_scale_init_value: Optional[float], window_size: int,
                      frozen_stages: int, cp_impl: str, attn_impl: str) -> None:
        """Raise ``ValueError`` on any argument out of range, before a layer is built."""
        arch = 'set arch to a preset or fix the arch dict'
        check_number('embed_dim', embed_dim, low=1, integer=True, hint=arch)
        check_number('depth', depth, low=1, integer=True, hint=arch)
        check_number('num_heads', num_heads, low=1, integer=True, hint=arch)
        check_number('mlp_ratio', mlp_ratio, low=0, low_open=True,
                     hint='the MLP hidden width is embed_dim * mlp_ratio (4 as released)')
        if embed_dim % num_heads:
            raise ValueError(f'embed_dim {embed_dim} is not divisible by num_heads '
                             f'{num_heads}; pick num_heads dividing embed_dim')
        if (embed_dim // num_heads) % 4:
            raise ValueError(f'head dim {embed_dim // num_heads} (embed_dim / num_heads) must '
                             'be divisible by 4 for 2D RoPE; change embed_dim or num_heads')
        check_number('patch_size', patch_size, low=1, integer=True, hint='16 as released')
        sides = [img_size] * 2 if isinstance(img_size, numbers.Real) else list(img_size)
        if len(sides) != 2:
            raise ValueError(f'img_size must be an int or (height, width), got {img_size!r}')
        for side in sides:
            check_number('img_size', side, low=patch_size, integer=True,
                         hint='the pretraining size, at least one patch (224 as released)')
        check_number('in_channels', in_channels, low=1, integer=True,
                     hint='3 for RGB images')
        check_number('num_registers', num_registers, low=0, integer=True,
                     hint='0 for no registers, 4 as released')
        for name, theta, released in (('rope_theta', rope_theta, 10000),
                                      ('reg_rope_theta', reg_rope_theta, 100)):
            check_number(name, theta, low=1, low_open=True,
                         hint=f'frequencies theta ** (-2j / d) must fall with j ({released} '
                         'as released)')
        check_number('drop_path_rate', drop_path_rate, low=0, high=1, high_open=True,
                     hint='the probability of dropping a block (0 to switch it off)')
        if layer_scale_init_value is not None:
            check_number('layer_scale_init_value', layer_scale_init_value, low=0,
                         low_open=True, hint='1e-4 as released, or None for no LayerScale')
        check_number('window_size', window_size, low=0, integer=True,
                     hint='0 for global attention, e.g. 14 for ViTDet-style windows')
        check_number('frozen_stages', frozen_stages, low=-1, high=depth, integer=True,
                     hint=f'-1 trains everything, {depth} freezes every block')
        for name, value, allowed in (('out_type', out_type, OUT_TYPES),
                                     ('rope_mode', rope_mode, ROPE_MODES),
                                     ('drop_path_schedule', drop_path_schedule,
                                      DROP_PATH_SCHEDULES), ('cp_impl', cp_impl, CP_IMPLS),
                                     ('attn_impl', attn_impl, ATTN_IMPLS)):
            if value not in allowed:
                raise ValueError(f'{name} must be one of {allowed}, got {value!r}')

    @staticmethod
    def _normalize_indices(indices, depth: int, name: str = 'out_indices') -> List[int]:
        indices = [indices] if isinstance(indices, int) else list(indices)
        if not indices:
            raise ValueError(f'{name} is empty; give at least one block index')
        normalized = []
        for index in indices:
            check_number(f'{name} entry', index, integer=True, hint='give block indices')
            if not -depth <= index < depth:
                raise ValueError(f'{name} entry {index} is out of range for {depth} '
                                 f'blocks; use 0..{depth - 1} or -{depth}..-1')
            normalized.append(index % depth)
        return normalized

    @classmethod
    def _global_blocks(cls, window_size: int, indices: Optional[Sequence[int]],
                       depth: int) -> List[int]:
        if not window_size:
            return list(range(depth))
        if indices is None:
            return [depth * (i + 1) // 4 - 1 for i in range(4)]
        return cls._normalize_indices(indices, depth, 'global_attn_indices') if indices else []

    def _wrap_checkpointing(self) -> None:
        # fairscale patches each block's forward in place: checkpoint keys stay unchanged
        from fairscale.nn.checkpoint import checkpoint_wrapper
        for block in self.blocks:
            checkpoint_wrapper(block)

    def __deepcopy__(self, memo: dict) -> 'ViT5':
        """A copy whose checkpointed blocks compute with the copy's own weights.

        fairscale binds each wrapped block's ``forward`` to a weak reference of that block, and
        a deep copy shares the reference: the copy (mmengine's EMA model, for one) would run
        the original's blocks. The bound forwards are left out of the copy and re-made for it.
        """
        forwards = [block.__dict__.pop('forward', None) for block in self.blocks]
        try:
            new = self.__class__.__new__(self.__class__)
            memo[id(self)] = new
            new.__dict__.update(copy.deepcopy(self.__dict__, memo))
        finally:
            for block, forward in zip(self.blocks, forwards):
                if forward is not None:
                    block.forward = forward
        if any(f is not None for f in forwards):
            new._wrap_checkpointing()
        return new

    def plan(self, x: torch.Tensor) -> ExecutionPlan:
        """How a forward over ``x`` runs now (device, autocast, Triton or PyTorch, attention
        and window kernels, checkpointing, compiled blocks): decided here once per forward
        and handed to every block. ``print(model.plan(x))`` shows it; the model logs each
        plan the first time it runs it."""
        checkpoint = None
        # fairscale's wrapper checkpoints in eval mode too; torch's is applied in training
        if self.with_cp and (self.cp_impl == 'fairscale' or self.training):
            checkpoint = self.cp_impl
        plan = make_plan(x, self.attn_impl, checkpoint, self.compile_blocks)
        if plan.mode is ExecutionMode.EAGER and plan not in self._plans_logged:
            self._plans_logged.add(plan)
            print_log(f'ViT5 execution plan: {plan}', logger='current')
        return plan

    def _run_block(self, block: Block, x: torch.Tensor, rope: torch.Tensor,
                   windows: Optional[WindowLayout], plan: ExecutionPlan) -> torch.Tensor:
        if plan.checkpoint == 'torch':
            return torch.utils.checkpoint.checkpoint(block, x, rope, windows, plan,
                                                     use_reentrant=False)
        return block(x, rope, windows, plan)

    # ----------------------------------------------------------------- weights
    def init_weights(self) -> None:
        if isinstance(self.init_cfg, dict) and self.init_cfg.get('type') == 'Pretrained':
            # what the checkpoint does not cover (an ablation's extra biases or registers)
            # starts from the from-scratch initialisation
            self._init_from_scratch()
            self.load_pretrained(self.init_cfg['checkpoint'],
                                 checkpoint_key=self.init_cfg.get('checkpoint_key'),
                                 prefix=self.init_cfg.get('prefix'))
            self._is_init = True
            return
        super().init_weights()
        if self.init_cfg is None:
            self._init_from_scratch()

    def _init_from_scratch(self) -> None:
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
        ``img_size`` grid; the classifier head is ignored; the per-block RoPE frequency
        buffers of the released files are checked against this model's and dropped. Parts
        that this model's ablation switches change load as far as they fit
        (:func:`.vit5_weights.checkpoint_filter_fn`); any other missing, unexpected or
        mis-shaped key raises :class:`CheckpointError`.
        """
        state = extract_state_dict(read_checkpoint(path), checkpoint_key, prefix)
        state = checkpoint_filter_fn(state, self, source=path)
        # checkpoint_filter_fn has checked every key; what it left out is logged as left at init
        self.load_state_dict(state, strict=False)
        self._rope_cache.clear()
        print_log(f'ViT5: loaded {len(state)} tensors from {path}', logger='current')

    def switches(self) -> Dict[str, object]:
        """The ablation switches set away from the released model, e.g. ``{'qk_norm': False}``."""
        values = dict(num_registers=self.num_registers,
                      layer_scale_init_value=self.layer_scale_init_value,
                      qk_norm=self.qk_norm, use_abs_pos=self.use_abs_pos,
                      use_rope=self.use_rope, norm=self.norm_kind, qkv_bias=self.qkv_bias)
        return {k: v for k, v in values.items() if v != RELEASED_SWITCHES[k]}

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
        if not self.use_rope:
            return None
        num_registers = self.num_registers if num_registers is None else num_registers
        key = (grid, dtype, device, self.rope_mode, num_registers,
               windows.window_size if windows is not None else 0)
        table = self._rope_cache.get(key) if cache else None
        if table is None:
            with torch.no_grad():
                angles = sequence_angles(self.rope, self.rope_reg, grid, num_registers,
                                         self.rope_mode).to(device)
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
        if self.check_finite and not torch.isfinite(x).all():
            raise ValueError('ViT5 input contains NaN or inf (check_finite=True); check the '
                             'data pipeline / normalisation')

    def tokens(self, x: torch.Tensor,
               with_registers: bool = True) -> Tuple[torch.Tensor, Tuple[int, int]]:
        """Embed images into the token sequence ``[cls, patches, registers]`` (B, T, C)."""
        self._check_input(x)
        x, grid = self.patch_embed(x)
        if self.pos_embed is not None:
            fixed = self._fixed(grid)
            x = x + (fixed[0] if fixed else
                     resize_pos_embed(self.pos_embed, self.pretrain_grid, grid))
        B = x.shape[0]
        registers = self.reg_token.expand(B, -1, -1) \
            if with_registers and self.reg_token is not None else x[:, :0]
        return torch.cat((self.cls_token.expand(B, -1, -1), x, registers), dim=1), grid

    def forward_features(self, x: torch.Tensor,
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
        x, grid = self.tokens(x, with_registers)
        x = self._run_blocks(x, grid, [self.depth - 1],
                             num_registers=self.num_registers if with_registers else 0)
        x = x[self.depth - 1]
        num_patches = grid[0] * grid[1]
        return dict(cls_token=x[:, 0], patch_tokens=x[:, 1:1 + num_patches],
                    reg_tokens=x[:, 1 + num_patches:], grid=grid)

    def forward(self, x: torch.Tensor) -> Tuple[torch.Tensor, ...]:
        """Args: x (B, in_channels, H, W). Returns one output per ``out_indices`` entry, in
        that order; blocks after the last requested one are not run."""
        x, grid = self.tokens(x)
        outs = self._run_blocks(x, grid, self.out_indices)
        return tuple(self._format_output(outs[i], grid) for i in self.out_indices)

    def _run_blocks(self, x: torch.Tensor, grid: Tuple[int, int], indices: Sequence[int],
                    final_norm: bool = True, num_registers: Optional[int] = None
                    ) -> Dict[int, torch.Tensor]:
        """The one block loop of the model (``forward``, ``forward_features`` and
        ``forward_intermediates`` all run it).

        Args:
            x (Tensor): Tokens ``[cls, patches, registers]`` (B, T, C) from :meth:`tokens`.
            grid (tuple[int, int]): Patch grid (H, W) of ``x``.
            indices (Sequence[int]): Non-negative block indices whose outputs to keep; blocks
                after the largest are not run.
            final_norm (bool): Apply the final norm to the last block's output.
            num_registers (int, optional): Registers in ``x``; None: the model's.

        Returns:
            dict[int, Tensor]: Block index -> its output tokens (B, T, C), raster order.
        """
        # with windows, the blocks run in window-major order (layers/windows.py), and the
        # outputs go back to raster order
        plan = self.plan(x)
        windows = self.token_order(grid, x.device, num_registers)
        eager = plan.mode is ExecutionMode.EAGER  # this code, whether or not blocks compile
        if windows is not None and eager and plan.window_kernel == 'flex':
            # built here: a block compiled on its own (compile_blocks) would trace building
            # it on its first call, and recompile once it is cached
            windows.block_mask()
        # Graphs compute the table instead of looking it up: torch.export would pin a cached
        # key's grid to the example input's, and torch.compile would guard on the cache's
        # contents, so the step that fills it would recompile the whole model
        fixed = self._fixed(grid) if num_registers in (None, self.num_registers) else None
        rope = fixed[1] if fixed else self.rope_table(
            grid, self.cls_token.dtype, x.device, num_registers, windows, cache=eager)
        x = permute_tokens(x, None if windows is None else windows.order)
        outs = {}
        for i, block in enumerate(self.blocks[:max(indices) + 1]):
            x = self._run_block(block, x, rope, windows, plan)
            if final_norm and self.final_norm and i == self.depth - 1:
                x = self.norm(x, plan)
            if i in indices:
                outs[i] = permute_tokens(x, None if windows is None else windows.inverse)
        return outs

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
        take = sorted(set(self._take_indices(indices)))
        tokens, grid = self.tokens(x)
        last = self.depth - 1
        outs = self._run_blocks(tokens, grid, take if intermediates_only else [*take, last],
                                final_norm=False)
        intermediates = []
        for i in take:
            patches = outs[i][:, 1:1 + grid[0] * grid[1]]  # registers come last
            if norm:
                patches = self.norm(patches)
            if output_fmt == 'NCHW':
                patches = patches.transpose(1, 2).reshape(
                    patches.shape[0], self.embed_dim, *grid).contiguous()
            intermediates.append(patches)
        if intermediates_only:
            return intermediates
        return self.norm(outs[last]), intermediates

    def _take_indices(self, indices: Optional[Union[int, Sequence[int]]]) -> List[int]:
        """timm's ``feature_take_indices``: None -> all blocks, int n -> the last n blocks."""
        if indices is None:
            return list(range(self.depth))
        if isinstance(indices, int):
            if not 0 < indices <= self.depth:
                raise ValueError(f'indices={indices} asks for the last {indices} blocks; an int '
                                 f'must be in 1..{self.depth} (pass [{indices}] for one block)')
            return list(range(self.depth - indices, self.depth))
        return self._normalize_indices(indices, self.depth, 'indices')

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
        if self.frozen_stages < 0:
            return
        frozen = [self.patch_embed, *self.blocks[:self.frozen_stages]]
        if self.frozen_stages == self.depth:
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
