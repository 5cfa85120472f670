"""ViT5's options, stated once: :class:`ViT5Config`.

Each option is one field: its name, type and default (the released model's value for the
ablation switches), documented in the class docstring and checked in :meth:`ViT5Config.check`.
:class:`~mmvit5.models.ViT5` takes the fields as keyword arguments (mmengine configs build it
as ``dict(type='ViT5', arch='base', ...)``), :meth:`ViT5Config.switches` and
:data:`RELEASED_SWITCHES` read the switches off the fields. A new option is one more field, a
line in the docstring and, where it has a range, a line in :meth:`~ViT5Config.check`.
"""
import dataclasses
import difflib
import numbers
import warnings
from dataclasses import dataclass, field, fields
from typing import Dict, List, Optional, Sequence, Union

from ...checks import check_number
from ..layers.norm import TOKEN_NORMS
from ..layers.plan import ATTN_IMPLS
from ..layers.rope import ROPE_MODES

ARCH_ZOO = {
    **dict.fromkeys(['s', 'small'], dict(embed_dim=384, depth=12, num_heads=6)),
    **dict.fromkeys(['b', 'base'], dict(embed_dim=768, depth=12, num_heads=12)),
    **dict.fromkeys(['l', 'large'], dict(embed_dim=1024, depth=24, num_heads=16)),
    **dict.fromkeys(['xl', 'xlarge'], dict(embed_dim=1152, depth=28, num_heads=16)),
}
OUT_TYPES = ('featmap', 'raw', 'cls_token', 'avg_featmap', 'head')
DROP_PATH_SCHEDULES = ('uniform', 'linear')
# deprecated: any value warns, and torch's checkpoint runs (ViT5Config.check)
CP_IMPLS = ('torch', 'fairscale')
# what the classifier reads: 'token' the class token (released); 'avg' the mean of the patch
# tokens (registers and class token left out); '' every token, unpooled
GLOBAL_POOLS = ('token', 'avg', '')


def config_field(name: str) -> property:
    """A model attribute that is the field ``name`` of the model's ``config``: read from it,
    and set by making a new config (checked and resolved as the first was). A plain property,
    which torch.compile and torch.export trace like any other."""

    def set_field(model, value) -> None:
        model.config = dataclasses.replace(model.config, **{name: value})

    return property(lambda model: getattr(model.config, name), set_field,
                    doc=f'``config.{name}`` (:class:`ViT5Config`).')


def switch(released):
    """A field that is an ablation switch; its default is the released model's value."""
    return field(default=released, metadata=dict(switch=True))


@dataclass(frozen=True)
class ViT5Config:
    """The options of :class:`~mmvit5.models.ViT5`, checked and resolved when made: the
    model's state. ``img_size`` becomes a (height, width) pair, ``out_indices`` a tuple of
    non-negative block indices, ``global_attn_indices`` the tuple of the global blocks (every
    block when no block is windowed, and then ``window_size`` is 0). A model attribute of the
    same name reads the field (and setting it makes a new, checked config).

    Args:
        arch (str | dict): ``'small'``, ``'base'``, ``'large'``, ``'xlarge'`` (or ``s``, ``b``,
            ``l``, ``xl``), or a dict with ``embed_dim``, ``depth``, ``num_heads`` and
            optionally ``mlp_ratio``.
        img_size (int | tuple[int, int]): The *pretraining* size. It fixes the ``pos_embed``
            grid and RoPE's ``n_pt``; inputs of any size are accepted at run time.
        patch_size (int): Defaults to 16.
        in_channels (int): Defaults to 3.
        num_registers (int): Register tokens, any count >= 0 (4 released). Their RoPE grid
            has ``ceil(sqrt(R))`` columns filled row by row (:func:`.register_grid`): 2x2 for
            4, as released; 2x3 with the last cell empty for 5.
        out_indices (int | Sequence[int]): Blocks whose outputs are returned; negative
            values count from the end. Defaults to -1.
        out_type (str): ``'featmap'`` (B, C, H, W) patch map with class token and registers
            stripped; ``'raw'`` (B, T, C) all tokens; ``'cls_token'`` (B, C);
            ``'avg_featmap'`` (B, C) mean of the patch tokens; ``'head'``: one tensor,
            timm's ``forward_head(forward_features(x))`` (logits, see ``num_classes``).
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
            formula); all compute the same function. :meth:`.ViT5.plan` says what a forward
            runs.
        window_size (int): 0 (default) for global attention in every block; else ViTDet-style
            windowed attention of this side (in patches, e.g. 14) in all blocks but
            ``global_attn_indices``. Rule for prefix tokens: see :class:`.Attention`. The
            tokens then run through the blocks in window-major order (no padding, no mask;
            :mod:`~mmvit5.models.layers.windows`), back in raster order at the outputs.
        global_attn_indices (Sequence[int], optional): Blocks that stay global when
            ``window_size > 0``; default 4 evenly spaced, ending at the last block
            (2, 5, 8, 11 for 12 blocks, as ViTDet).
        frozen_stages (int): -1 trains everything; 0 freezes patch embed, ``pos_embed``,
            ``cls_token`` and ``reg_token``; k > 0 also blocks ``0 .. k - 1`` (and the final
            norm once every block is frozen).
        with_cp (bool): Activation checkpointing of each block in training (non-reentrant
            ``torch.utils.checkpoint``); timm's ``set_grad_checkpointing`` and the model's
            ``grad_checkpointing`` set and read this field.
        cp_impl (str, optional): Deprecated, removed in the next release: torch's
            non-reentrant checkpoint is the only implementation, and any value (``'torch'``,
            or ``'fairscale'``, which runs torch's) warns with a ``FutureWarning``.
        check_finite (bool): Raise on NaN/inf inputs (one reduction per forward).
        compile_blocks (bool): ``torch.compile`` each block in place (regional compilation:
            identical blocks share one compiled graph, state-dict keys unchanged). Inductor
            fuses ViT-5's elementwise passes (QK-Norm, RoPE, LayerScale), which eager runs as
            separate kernels; see docs/en/advanced/training_path.md for where it pays.
        num_classes (int): Classes of the linear classifier on the pooled tokens (1000 for
            the released head); 0 (default) builds none. Read by ``out_type='head'``
            (timm's API, :class:`.vit5_timm_api.ViT5TimmApi`).
        global_pool (str): What the classifier reads: ``'token'`` (the class token, as
            released), ``'avg'`` (the mean of the patch tokens) or ``''`` (no pooling).

    The defaults of the switches (``num_registers``, ``layer_scale_init_value``, ``qk_norm``,
    ``use_abs_pos``, ``use_rope``, ``norm`` and ``qkv_bias``) are the released model; the
    other values are ablations (``configs/ablations/``). A released checkpoint loads into an
    ablated model as far as it fits (:func:`.vit5_weights.checkpoint_filter_fn`).
    """
    arch: Union[str, dict] = 'base'
    img_size: Union[int, Sequence[int]] = 224
    patch_size: int = 16
    in_channels: int = 3
    num_registers: int = switch(4)
    out_indices: Union[int, Sequence[int]] = -1
    out_type: str = 'featmap'
    final_norm: bool = True
    rope_mode: str = 'interpolate'
    rope_theta: float = 10000.0
    reg_rope_theta: float = 100.0
    drop_path_rate: float = 0.0
    drop_path_schedule: str = 'uniform'
    layer_scale_init_value: Optional[float] = switch(1e-4)
    qk_norm: bool = switch(True)
    use_abs_pos: bool = switch(True)
    use_rope: bool = switch(True)
    norm: str = switch('rms')
    qkv_bias: bool = switch(False)
    attn_impl: str = 'auto'
    window_size: int = 0
    global_attn_indices: Optional[Sequence[int]] = None
    frozen_stages: int = -1
    with_cp: bool = False
    cp_impl: Optional[str] = None
    check_finite: bool = False
    compile_blocks: bool = False
    num_classes: int = 0
    global_pool: str = 'token'

    @classmethod
    def from_kwargs(cls, **kwargs) -> 'ViT5Config':
        """The config of keyword arguments; an unknown name raises ``TypeError`` naming the
        closest option."""
        names = [f.name for f in fields(cls)]
        for name in kwargs:
            if name not in names:
                close = difflib.get_close_matches(name, names, n=1)
                raise TypeError(f'ViT5 got an unknown argument {name!r}' +
                                (f'; did you mean {close[0]!r}?' if close else '') +
                                f' Its arguments: {", ".join(names)}, init_cfg')
        return cls(**kwargs)

    def __post_init__(self) -> None:
        self.check()
        depth = self.arch_settings['depth']
        sides = (self.img_size, ) * 2 if isinstance(self.img_size, numbers.Real) \
            else self.img_size
        global_blocks = tuple(range(depth))
        if self.window_size:
            if self.global_attn_indices is None:  # 4 evenly spaced, ending at the last block
                global_blocks = tuple(sorted({depth * (i + 1) // 4 - 1 for i in range(4)} -
                                             {-1}))  # fewer than 4 blocks: no block -1
            else:
                global_blocks = tuple(sorted(set(normalize_indices(
                    self.global_attn_indices, depth, 'global_attn_indices')))) \
                    if self.global_attn_indices else ()
        resolved = dict(img_size=tuple(int(side) for side in sides),
                        out_indices=tuple(normalize_indices(self.out_indices, depth)),
                        global_attn_indices=global_blocks,
                        window_size=self.window_size if len(global_blocks) < depth else 0,
                        cp_impl=None)  # warned once, in check()
        for name, value in resolved.items():  # a frozen dataclass: set once, here
            object.__setattr__(self, name, value)

    @property
    def arch_settings(self) -> Dict[str, Union[int, float]]:
        """``embed_dim``, ``depth``, ``num_heads`` (and ``mlp_ratio`` where given: 4 when
        not) of :attr:`arch`."""
        if isinstance(self.arch, str):
            if self.arch.lower() not in ARCH_ZOO:
                raise ValueError(f'unknown ViT5 arch {self.arch!r}; choose one of '
                                 f'{sorted(set(ARCH_ZOO))} or pass a dict with '
                                 'embed_dim, depth and num_heads')
            settings = dict(ARCH_ZOO[self.arch.lower()])
        else:
            missing = {'embed_dim', 'depth', 'num_heads'} - set(self.arch)
            unknown = set(self.arch) - {'embed_dim', 'depth', 'num_heads', 'mlp_ratio'}
            if missing or unknown:
                raise ValueError(f'ViT5 arch dict needs embed_dim, depth, num_heads (and may '
                                 f'set mlp_ratio); missing {sorted(missing)}, unknown '
                                 f'{sorted(unknown)}')
            settings = dict(self.arch)
        return settings

    def check(self) -> None:
        """Raise ``ValueError`` on any option out of range, before a layer is built."""
        arch = self.arch_settings
        embed_dim, depth, num_heads = arch['embed_dim'], arch['depth'], arch['num_heads']
        hint = 'set arch to a preset or fix the arch dict'
        check_number('embed_dim', embed_dim, low=1, integer=True, hint=hint)
        check_number('depth', depth, low=1, integer=True, hint=hint)
        check_number('num_heads', num_heads, low=1, integer=True, hint=hint)
        check_number('mlp_ratio', arch.get('mlp_ratio', 4.0), low=0, low_open=True,
                     hint='the MLP hidden width is embed_dim * mlp_ratio (4 as released)')
        if embed_dim % num_heads:
            raise ValueError(f'embed_dim {embed_dim} is not divisible by num_heads '
                             f'{num_heads}; pick num_heads dividing embed_dim')
        if (embed_dim // num_heads) % 4:
            raise ValueError(f'head dim {embed_dim // num_heads} (embed_dim / num_heads) must '
                             'be divisible by 4 for 2D RoPE; change embed_dim or num_heads')
        check_number('patch_size', self.patch_size, low=1, integer=True, hint='16 as released')
        sides = [self.img_size] * 2 if isinstance(self.img_size, numbers.Real) \
            else list(self.img_size)
        if len(sides) != 2:
            raise ValueError(f'img_size must be an int or (height, width), got '
                             f'{self.img_size!r}')
        for side in sides:
            check_number('img_size', side, low=self.patch_size, integer=True,
                         hint='the pretraining size, at least one patch (224 as released)')
        check_number('in_channels', self.in_channels, low=1, integer=True,
                     hint='3 for RGB images')
        check_number('num_registers', self.num_registers, low=0, integer=True,
                     hint='0 for no registers, 4 as released')
        for name in ('rope_theta', 'reg_rope_theta'):
            check_number(name, getattr(self, name), low=1, low_open=True,
                         hint=f'frequencies theta ** (-2j / d) must fall with j '
                         f'({self.default(name):g} as released)')
        check_number('drop_path_rate', self.drop_path_rate, low=0, high=1, high_open=True,
                     hint='the probability of dropping a block (0 to switch it off)')
        if self.layer_scale_init_value is not None:
            check_number('layer_scale_init_value', self.layer_scale_init_value, low=0,
                         low_open=True, hint='1e-4 as released, or None for no LayerScale')
        check_number('window_size', self.window_size, low=0, integer=True,
                     hint='0 for global attention, e.g. 14 for ViTDet-style windows')
        check_number('frozen_stages', self.frozen_stages, low=-1, high=depth, integer=True,
                     hint=f'-1 trains everything, {depth} freezes every block')
        for name, allowed in (('out_type', OUT_TYPES), ('rope_mode', ROPE_MODES),
                              ('drop_path_schedule', DROP_PATH_SCHEDULES),
                              ('attn_impl', ATTN_IMPLS)):
            if getattr(self, name) not in allowed:
                raise ValueError(f'{name} must be one of {allowed}, got {getattr(self, name)!r}')
        if self.norm not in TOKEN_NORMS:
            raise ValueError(f"norm must be one of {tuple(TOKEN_NORMS)} ('rms' is ViT-5's "
                             f"RMSNorm, 'ln' LayerNorm with bias), got {self.norm!r}")
        check_head(self.num_classes, self.global_pool)
        if self.cp_impl is not None:
            if self.cp_impl not in CP_IMPLS:
                raise ValueError(f'cp_impl must be one of {CP_IMPLS}, got {self.cp_impl!r}; '
                                 'better, drop it (deprecated)')
            warnings.warn(f"ViT5: cp_impl={self.cp_impl!r} is deprecated and will be removed "
                          "in the next release: with_cp=True runs torch's non-reentrant "
                          'checkpoint, the only implementation (fairscale is unmaintained and '
                          'no longer a dependency). Drop cp_impl.', FutureWarning, stacklevel=2)

    @classmethod
    def default(cls, name: str):
        return cls.__dataclass_fields__[name].default

    def switches(self) -> Dict[str, object]:
        """The ablation switches set away from the released model, e.g. ``{'qk_norm': False}``."""
        return {name: getattr(self, name) for name, released in RELEASED_SWITCHES.items()
                if getattr(self, name) != released}


# the ablation switches as the released model sets them
RELEASED_SWITCHES = {f.name: f.default for f in fields(ViT5Config) if f.metadata.get('switch')}


def check_head(num_classes: int, global_pool: Optional[str]) -> None:
    """Raise ``ValueError`` unless ``num_classes`` and ``global_pool`` (None: unchanged) are
    valid classifier settings."""
    check_number('num_classes', num_classes, low=0, integer=True,
                 hint='0 for no classifier, 1000 for the released ImageNet head')
    if global_pool is not None and global_pool not in GLOBAL_POOLS:
        raise ValueError(f'global_pool must be one of {GLOBAL_POOLS}, got {global_pool!r}; '
                         "'token' reads the class token, as released")


def normalize_indices(indices: Union[int, Sequence[int]], depth: int,
                      name: str = 'out_indices') -> List[int]:
    """Block indices in ``0 .. depth - 1`` (negative values count from the end), or raise."""
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
