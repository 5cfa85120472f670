"""Latency of a step: one at a time after warm-up, or several in alternation."""
import statistics
import time
from typing import Callable, Dict, List, Sequence

import torch
import torch.nn as nn

from .core import Row, Setup, describe, free_memory, progress, synchronize
from .memory import peak_memory_mib


def time_step(step: Callable[[], None], setup: Setup, warmup: int,
              repeats: int) -> List[float]:
    """Wall time of each of ``repeats`` steps in ms, after ``warmup`` untimed steps."""
    for _ in range(warmup):
        step()
    times = []
    for _ in range(repeats):
        if setup.device.type == 'cuda':
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            synchronize(setup.device)
            start.record()
            step()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        else:
            begin = time.perf_counter()
            step()
            times.append((time.perf_counter() - begin) * 1e3)
    return times


def interleaved_latencies(steps: Dict[str, Callable[[], None]], setup: Setup,
                          rounds: int) -> Dict[str, List[float]]:
    """ms per step: one untimed step each, then ``rounds`` rounds timing each step once, the
    order reversed every other round so that a drift of the machine hits all alike."""
    for step in steps.values():
        step()
    times: Dict[str, List[float]] = {name: [] for name in steps}
    order = list(steps)
    for i in range(rounds):
        for name in order if i % 2 == 0 else order[::-1]:
            times[name] += time_step(steps[name], setup, warmup=0, repeats=1)
    return times


def measure(row: Row, step: Callable[[], None], model: nn.Module,
            live: Sequence[torch.Tensor], setup: Setup) -> Row:
    """Fill latency, throughput and peak memory of ``row`` by running ``step``."""
    progress(f'{row.model} {row.input} {row.mode} batch {row.batch}')
    try:
        times = time_step(step, setup, setup.warmup, setup.repeats)
        row.peak_mib = peak_memory_mib(step, model, live, setup)
    except Exception as exc:  # noqa: BLE001 - one failed row (e.g. OOM) must not end the run
        row.status, row.note = 'failed', describe(exc)
        free_memory(setup.device)
        return row
    row.latencies_ms = times
    row.latency_ms = statistics.median(times)
    row.img_s = row.batch / (row.latency_ms / 1e3)
    return row


def matmul_gflop_s(setup: Setup, n: int) -> float:
    """The machine's N x N matmul rate in the run's dtype: the ceiling of the % column."""
    progress(f'matmul {n}x{n} {setup.dtype}')
    a = torch.randn(n, n, device=setup.device, dtype=setup.dtype)
    b = torch.randn(n, n, device=setup.device, dtype=setup.dtype)
    times = time_step(lambda: torch.mm(a, b), setup, warmup=2, repeats=max(setup.repeats, 5))
    return 2 * n**3 / (statistics.median(times) / 1e3) / 1e9
