# only the switch here: the op modules import ..norm, which imports the switch
from .dispatch import HAS_TRITON, triton_enabled

__all__ = ['HAS_TRITON', 'triton_enabled']
