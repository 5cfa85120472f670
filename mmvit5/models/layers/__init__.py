from .attention import Attention
from .block import Block, Mlp, PatchEmbed
from .kernels.layer_scale import scaled_linear
from .norm import TOKEN_NORMS, LayerNorm, LayerNorm2d, RMSNorm, token_norm
from .plan import ExecutionPlan, make_plan
from .pos_embed import resize_pos_embed
from .rope import (
    RotaryEmbedding2D,
    apply_rope,
    axis_positions,
    register_grid,
    rotations,
    sequence_angles,
)

__all__ = ['Attention', 'Block', 'ExecutionPlan', 'Mlp', 'PatchEmbed', 'LayerNorm',
           'LayerNorm2d', 'RMSNorm', 'make_plan',
           'RotaryEmbedding2D', 'TOKEN_NORMS', 'apply_rope', 'axis_positions', 'register_grid',
           'resize_pos_embed', 'rotations', 'scaled_linear', 'sequence_angles', 'token_norm']
