"""The fused ops of ViT-5's block, one layout for each: ``<op>.py`` holds its PyTorch path (the
fallback, and what the kernels are tested against), its autograd Function and its entry point;
``<op>_triton.py`` its Triton kernels; :mod:`.triton_helpers` what the kernels share;
:mod:`.dispatch` the Triton switch and the fallback when a kernel fails.

- QK-Norm + RoPE: :func:`.qk_norm_rope.qk_norm_rope`
- RMSNorm: :func:`.rms_norm.apply_rms_norm`
- LayerScale: :func:`.layer_scale.scaled_linear`
"""
# only the switch here: the layers' plan imports it, and the op modules import the layers'
# blocks of code that use them
from .dispatch import HAS_TRITON, reset_triton_failure, run_kernel, triton_enabled, triton_failure

__all__ = ['HAS_TRITON', 'reset_triton_failure', 'run_kernel', 'triton_enabled',
           'triton_failure']
