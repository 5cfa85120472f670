"""Peak memory of one step: CUDA allocator statistics, or profiler events on CPU."""
import contextlib
import os
import sys
from typing import Callable, Iterable, Sequence

import torch
import torch.nn as nn

from .core import Setup, synchronize


def tensor_bytes(tensors: Iterable[torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


@contextlib.contextmanager
def native_stderr_silenced():
    """Point fd 2 at /dev/null: kineto writes banner lines there that no env var turns off."""
    sys.stderr.flush()
    saved = os.dup(2)
    with open(os.devnull, 'w') as null:
        os.dup2(null.fileno(), 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def cpu_step_peak_bytes(step: Callable[[], None]) -> int:
    """Highest live CPU tensor bytes above the starting point during one ``step``."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile
    with native_stderr_silenced(), profile(activities=[ProfilerActivity.CPU],
                                           profile_memory=True) as prof:
        step()
    # allocator events in time order; the running sum is the live-bytes curve
    events = sorted((e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events()
                    if e.name() == '[memory]' and e.device_type() == DeviceType.CPU)
    live = peak = 0
    for _, nbytes in events:
        live += nbytes
        peak = max(peak, live)
    return peak


def peak_memory_mib(step: Callable[[], None], model: nn.Module, live: Sequence[torch.Tensor],
                    setup: Setup) -> float:
    """Peak memory of one step, see the module docstring for what each device counts."""
    # gradients of the previous step would otherwise be freed inside the window
    model.zero_grad(set_to_none=True)
    if setup.device.type == 'cuda':
        synchronize(setup.device)
        torch.cuda.reset_peak_memory_stats(setup.device)
        step()
        synchronize(setup.device)
        return torch.cuda.max_memory_allocated(setup.device) / 2**20
    resident = tensor_bytes([*model.parameters(), *model.buffers(), *live])
    return (resident + cpu_step_peak_bytes(step)) / 2**20


def step_peak_mib(step: Callable[[], None], model: nn.Module, setup: Setup) -> float:
    """What one ``step`` adds at its peak to the memory allocated before it (the weights, the
    input): after one untimed step, CUDA's allocator peak minus what it held at the start, or
    on the CPU the profiler's peak of the tensors the step allocates."""
    step()  # lazy state (caches, workspaces) is made here, not counted
    model.zero_grad(set_to_none=True)
    if setup.device.type == 'cuda':
        synchronize(setup.device)
        before = torch.cuda.memory_allocated(setup.device)
        torch.cuda.reset_peak_memory_stats(setup.device)
        step()
        synchronize(setup.device)
        return (torch.cuda.max_memory_allocated(setup.device) - before) / 2**20
    return cpu_step_peak_bytes(step) / 2**20
