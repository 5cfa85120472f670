"""How the layers are being run: the one place that decides, as timm's ``is_exportable()``.

Layers choose kernels by it: eager runs take the custom autograd functions, saved-tensor hooks,
caches and (on CUDA) the Triton kernels; compiled graphs take plain tensor code that Inductor
fuses; exported graphs (torch.export, the TorchScript ONNX exporter that mmdeploy drives) take
operators that ONNX has and compute what eager code would look up in a cache.
"""
import enum

import torch


class ExecutionMode(enum.Enum):
    EAGER = 'eager'
    COMPILING = 'compiling'
    EXPORTING = 'exporting'


def execution_mode() -> ExecutionMode:
    """The mode of the code being run now (exporting wins: torch.export also compiles)."""
    if torch.onnx.is_in_onnx_export() or torch.compiler.is_exporting():
        return ExecutionMode.EXPORTING
    if torch.compiler.is_compiling():
        return ExecutionMode.COMPILING
    return ExecutionMode.EAGER


def eager() -> bool:
    """Neither compiling nor exporting: caches, hooks and custom kernels are allowed."""
    return execution_mode() is ExecutionMode.EAGER


def eager_training() -> bool:
    """Eager with gradients on: where the memory-saving autograd functions pay."""
    return torch.is_grad_enabled() and eager()
