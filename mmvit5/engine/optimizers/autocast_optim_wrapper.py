"""Mixed precision where mmengine's AmpOptimWrapper cannot go: machines without CUDA."""
from contextlib import contextmanager
from typing import Union

import torch
import torch.nn as nn
from mmengine.optim import OptimWrapper
from mmengine.registry import OPTIM_WRAPPERS


@OPTIM_WRAPPERS.register_module()
class AutocastOptimWrapper(OptimWrapper):
    """``OptimWrapper`` whose forward runs under ``torch.autocast`` (bf16 by default).

    mmengine 0.10.7's ``AmpOptimWrapper`` asserts a CUDA/NPU/MLU device; ``tools/train.py
    --amp`` picks this wrapper instead on CPU-only machines with native bf16
    (:func:`mmvit5.utils.amp_for_device`). bf16 keeps float32's exponent
    range, so no loss scaling is needed (nor done); parameters and optimizer state stay
    float32, and ViT-5's norms compute in float32 regardless.

    Args:
        dtype (str | torch.dtype): Autocast dtype, ``'bfloat16'`` or ``'float16'``.
        device_type (str): Autocast device type. Defaults to ``'cpu'``.
        **kwargs: Passed to ``OptimWrapper``.
    """

    def __init__(self, dtype: Union[str, torch.dtype] = 'bfloat16', device_type: str = 'cpu',
                 **kwargs) -> None:
        super().__init__(**kwargs)
        self.cast_dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype
        if self.cast_dtype not in (torch.bfloat16, torch.float16):
            raise ValueError(f'AutocastOptimWrapper dtype must be bfloat16 or float16, got '
                             f'{dtype!r}')
        self.device_type = device_type

    @contextmanager
    def optim_context(self, model: nn.Module):
        with super().optim_context(model), torch.autocast(self.device_type,
                                                          dtype=self.cast_dtype):
            yield
