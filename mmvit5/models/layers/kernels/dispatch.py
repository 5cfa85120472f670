"""Which path the fused kernels take: Triton on CUDA, PyTorch elsewhere, or as forced.

``MMVIT5_TRITON=1`` forces the Triton kernels (on a CPU only under Triton's interpreter,
``TRITON_INTERPRET=1`` set before :mod:`mmvit5` is imported: that is how CI runs them);
``MMVIT5_TRITON=0`` forces the PyTorch path, also on CUDA (to compare or to bisect).
"""
import os

import torch

try:
    import triton
except ImportError:  # CPU-only wheels and other platforms: the PyTorch path runs
    triton = None

HAS_TRITON = triton is not None


def _interpreting() -> bool:
    return os.environ.get('TRITON_INTERPRET', '0') not in ('', '0')


def triton_enabled(t: torch.Tensor) -> bool:
    """Whether the fused ops run their Triton kernels for tensors like ``t``.

    By default: ``t`` is on CUDA and Triton imports. ``MMVIT5_TRITON`` (``1`` | ``0``)
    forces the choice.
    """
    flag = os.environ.get('MMVIT5_TRITON', '')
    if flag not in ('', '0', '1'):
        raise ValueError(f"MMVIT5_TRITON must be '1' (Triton kernels), '0' (PyTorch path) or "
                         f'unset (Triton on CUDA), got {flag!r}')
    if flag == '0':
        return False
    if flag == '1':
        if not HAS_TRITON:
            raise RuntimeError('MMVIT5_TRITON=1 but triton does not import; install the '
                               'triton that matches torch, or unset MMVIT5_TRITON')
        if t.device.type != 'cuda' and not _interpreting():
            raise RuntimeError(f'MMVIT5_TRITON=1 with tensors on {t.device}: Triton runs them '
                               'only under its interpreter; set TRITON_INTERPRET=1 before '
                               'importing mmvit5, or unset MMVIT5_TRITON')
        return True
    return HAS_TRITON and t.device.type == 'cuda'
