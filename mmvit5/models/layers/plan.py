"""How a forward runs, decided once: the :class:`ExecutionPlan` that ViT5 hands to its layers.

timm reads ``use_fused_attn()`` once and its layers follow it; here one call,
:func:`make_plan`, reads everything that picks a code path (the device, autocast, the Triton
switch, gradients, activation checkpointing, compiling or exporting) and the layers only
follow the plan. A printed plan (``print(model.plan(x))``, and the log line ViT5 writes when
its plan changes) says which path ran.

Modes: eager runs take the custom autograd functions, saved-tensor hooks, caches and (where
the plan says so) the Triton kernels; compiled graphs take plain tensor code that Inductor
fuses; exported graphs (torch.export, the TorchScript ONNX exporter that mmdeploy drives) take
operators that ONNX has and compute what eager code would look up in a cache.
"""
import enum
from typing import NamedTuple, Optional

import torch

from .kernels.dispatch import compute_dtype, triton_enabled  # noqa: F401  compute_dtype: the layers'

# the attention kernel: 'auto' (SDPA; windows batched by size), 'sdpa', 'flex' (windowed
# blocks through flex_attention; global blocks stay SDPA) or 'math'
# (the explicit softmax formula, kept to check the fused kernels)
ATTN_IMPLS = ('auto', 'sdpa', 'flex', 'math')


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


def autocast_dtype(device_type: str) -> Optional[torch.dtype]:
    """autocast's dtype on ``device_type`` where autocast is on there, else None."""
    return torch.get_autocast_dtype(device_type) \
        if torch.is_autocast_enabled(device_type) else None


def window_kernel(attn_impl: str, mode: ExecutionMode) -> str:
    """What windowed blocks run for ``attn_impl``: ``'flex'`` or ``'sdpa'`` (windows batched
    by size, :func:`.windows.grouped_window_attention`).

    SDPA unless flex is asked for: flex's block mask visits about 3.6x the score blocks the
    rule needs at 1024x1024, window 14 (``python tools/window_mask.py``), and flex is unmeasured
    on a GPU. Exported graphs take SDPA: ONNX has no flex_attention.
    """
    return 'flex' if attn_impl == 'flex' and mode is not ExecutionMode.EXPORTING else 'sdpa'


class ExecutionPlan(NamedTuple):
    """How one forward runs (:func:`make_plan`)."""
    #: Device type of the input ('cuda', 'cpu', ...).
    device: str
    #: Eager, compiling or exporting: the code that makes the plan (with ``compile_blocks``
    #: the blocks are compiled under an eager caller).
    mode: ExecutionMode
    #: autocast's dtype on ``device``, None without autocast.
    autocast: Optional[torch.dtype]
    #: The fused ops run their Triton kernels (else the PyTorch path).
    triton: bool
    #: What windowed blocks run, ``'flex'`` or ``'sdpa'``.
    window_kernel: str
    #: Attention of a window or a global block, ``'sdpa'`` or ``'math'`` (the kernel behind
    #: :meth:`.Attention.attend`, or :func:`.attention.math_attention`).
    attention: str
    #: Gradients are on.
    grad: bool
    #: Activation checkpointing of the blocks this forward (non-reentrant
    #: ``torch.utils.checkpoint`` around each block, the one mechanism).
    checkpoint: bool
    #: The blocks run as compiled graphs.
    compile_blocks: bool

    @property
    def eager(self) -> bool:
        """The blocks run eagerly (neither in a compiled or exported graph nor compiled on
        their own): hooks, custom autograd functions and complex arithmetic are allowed."""
        return self.mode is ExecutionMode.EAGER and not self.compile_blocks

    @property
    def exporting(self) -> bool:
        return self.mode is ExecutionMode.EXPORTING

    @property
    def traced(self) -> bool:
        """The backbone's own code runs inside a compiled or exported graph (blocks compiled on
        their own under an eager backbone do not count): no caches, no one-time builds."""
        return self.mode is not ExecutionMode.EAGER

    @property
    def autograd_functions(self) -> bool:
        """Eager with gradients on: where the memory-saving autograd functions pay."""
        return self.eager and self.grad

    def recompute_qk(self, kernel: Optional[str]) -> bool:
        """Whether attention's saved q and k are recomputed in backward for a block whose
        attention runs ``kernel`` (None: global). Not under checkpointing, which recomputes
        everything, nor around the compiled flex_attention, whose graph keeps what it
        chooses."""
        return self.autograd_functions and not self.checkpoint and kernel != 'flex'

    def __str__(self) -> str:
        dtype = 'float32 (no autocast)' if self.autocast is None else \
            f'{str(self.autocast).replace("torch.", "")} autocast'
        return (f'{self.device}, {self.mode.value}, {dtype}, '
                f'fused ops: {"Triton" if self.triton else "PyTorch"}, '
                f'attention: {self.attention}, windows: {self.window_kernel}, '
                f'gradients: {"on" if self.grad else "off"}, '
                f'checkpoint: {"on" if self.checkpoint else "off"}, '
                f'compiled blocks: {"on" if self.compile_blocks else "off"}')


def make_plan(x: torch.Tensor, attn_impl: str = 'auto', checkpoint: bool = False,
              compile_blocks: bool = False) -> ExecutionPlan:
    """The plan for a forward over ``x`` now: read the switches once.

    Args:
        x (Tensor): The input (its device decides the kernels).
        attn_impl (str): One of :data:`ATTN_IMPLS` (checked by :class:`.ViT5Config`).
        checkpoint (bool): Checkpoint the blocks' activations where gradients are on.
        compile_blocks (bool): Whether the blocks are compiled.
    """
    mode = execution_mode()
    grad = torch.is_grad_enabled()
    device = x.device.type
    kernel = window_kernel(attn_impl, mode)
    if kernel == 'flex' and device == 'cpu' and grad:
        raise ValueError("attn_impl='flex' cannot train on the CPU (flex_attention has no CPU "
                         "backward); use attn_impl='auto' or 'sdpa' there, or torch.no_grad()")
    return ExecutionPlan(
        device=device, mode=mode, autocast=autocast_dtype(device),
        triton=triton_enabled(x) and mode is not ExecutionMode.EXPORTING,
        window_kernel=kernel, attention='math' if attn_impl == 'math' else 'sdpa', grad=grad,
        checkpoint=checkpoint and grad, compile_blocks=compile_blocks)
