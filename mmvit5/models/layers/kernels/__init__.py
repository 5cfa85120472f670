from .dispatch import HAS_TRITON, triton_enabled
from .qk_norm_rope_op import qk_norm_rope

__all__ = ['HAS_TRITON', 'qk_norm_rope', 'triton_enabled']
