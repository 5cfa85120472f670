"""Which path the fused kernels take: Triton on CUDA, PyTorch elsewhere, or as forced; and
the PyTorch path when a Triton kernel fails.

``MMVIT5_TRITON=1`` forces the Triton kernels (on a CPU only under Triton's interpreter,
``TRITON_INTERPRET=1`` set before :mod:`mmvit5` is imported: that is how CI runs them);
``MMVIT5_TRITON=0`` forces the PyTorch path, also on CUDA (to compare or to bisect).

A Triton kernel that cannot compile or launch (no C compiler or ``Python.h`` for Triton's
launcher, an unsupported GPU, a driver error) does not end the run: :func:`run_kernel` warns
once, naming the cause, and this process takes the PyTorch path from then on. Running out of
memory and wrong inputs are no kernel failures: they are raised.
"""
import contextlib
import os
import warnings
from typing import Callable, Optional

import torch

try:
    import triton
except ImportError:  # CPU-only wheels and other platforms: the PyTorch path runs
    triton = None

HAS_TRITON = triton is not None
if HAS_TRITON:
    # whether the kernels were decorated under Triton's interpreter (the one place that asks)
    from .triton_helpers import INTERPRET
else:
    INTERPRET = False


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """Where statistics are computed: float32 for half precision and float32 (as released),
    float64 stays float64."""
    return torch.promote_types(dtype, torch.float32)


def triton_enabled(t: torch.Tensor) -> bool:
    """Whether the fused ops run their Triton kernels for tensors like ``t``.

    By default: ``t`` is on CUDA and Triton imports. ``MMVIT5_TRITON`` (``1`` | ``0``)
    forces the choice.
    """
    flag = os.environ.get('MMVIT5_TRITON', '')
    if flag not in ('', '0', '1'):
        raise ValueError(f"MMVIT5_TRITON must be '1' (Triton kernels), '0' (PyTorch path) or "
                         f'unset (Triton on CUDA), got {flag!r}')
    if flag == '0' or _failure is not None:
        return False
    if flag == '1':
        if not HAS_TRITON:
            raise RuntimeError('MMVIT5_TRITON=1 but triton does not import; install the '
                               'triton that matches torch, or unset MMVIT5_TRITON')
        if t.device.type != 'cuda' and not INTERPRET:
            raise RuntimeError(f'MMVIT5_TRITON=1 with tensors on {t.device}: Triton runs them '
                               'only under its interpreter; set TRITON_INTERPRET=1 before '
                               'importing mmvit5, or unset MMVIT5_TRITON')
        return True
    return HAS_TRITON and t.device.type == 'cuda'


_failure: Optional[str] = None  # the first Triton failure of this process: PyTorch path since


def triton_failure() -> Optional[str]:
    """Why the Triton kernels were given up in this process, or None."""
    return _failure


def reset_triton_failure() -> None:
    """Try the Triton kernels again (after fixing what made them fail)."""
    global _failure
    _failure = None


def _device_guard(t: torch.Tensor):
    # Triton launches on the current CUDA device: a model on cuda:1 needs it made current
    return torch.cuda.device(t.device) if t.is_cuda else contextlib.nullcontext()


def run_kernel(name: str, kernel: Callable, fallback: Callable, *args):
    """``kernel(*args)`` under the device guard of ``args[0]``; if it raises, one warning names
    the cause, the process gives the Triton kernels up and ``fallback(*args)`` (the PyTorch
    path, same contract) answers instead, and every later call goes straight to it.

    Not a Triton failure, so raised as is: ``torch.OutOfMemoryError`` (the PyTorch path needs
    the memory too), and an error in the caller's inputs, that is one the PyTorch path raises
    as well (its error is raised, and the kernels stay on).

    Args:
        name (str): The op, for the warning.
        kernel (Callable): The Triton op.
        fallback (Callable): The PyTorch op taking and returning the same.
    """
    global _failure
    if _failure is not None:
        return fallback(*args)
    with _device_guard(args[0]):
        try:
            return kernel(*args)
        except torch.OutOfMemoryError:
            raise
        except Exception as e:  # compile, launcher build (C compiler, Python.h), launch
            error = e
    result = fallback(*args)  # raises where the inputs are wrong
    _failure = f'{name}: {type(error).__name__}: {error}'.splitlines()[0][:500]
    warnings.warn(
        f'mmvit5: the Triton kernel {_failure} -- the PyTorch path runs from now on in this '
        'process (the same results, slower). Set MMVIT5_TRITON=0 to choose it up front; '
        '`python tools/check_env.py` checks what Triton needs (a C compiler and Python.h for '
        'its launcher).', RuntimeWarning, stacklevel=2)
    return result
