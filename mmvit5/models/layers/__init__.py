from .attention import Attention
from .layer_scale import scaled_linear
from .norm import LayerNorm2d, RMSNorm
from .rope import RotaryEmbedding2D, apply_rope, axis_positions, rotations, sequence_angles

__all__ = ['Attention', 'LayerNorm2d', 'RMSNorm', 'RotaryEmbedding2D', 'apply_rope',
           'axis_positions', 'rotations', 'scaled_linear', 'sequence_angles']
