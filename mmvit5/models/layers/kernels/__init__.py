# only the switch here: the op modules import ..norm, which imports the switch
from .dispatch import HAS_TRITON, reset_triton_failure, run_kernel, triton_enabled, triton_failure

__all__ = ['HAS_TRITON', 'reset_triton_failure', 'run_kernel', 'triton_enabled',
           'triton_failure']
