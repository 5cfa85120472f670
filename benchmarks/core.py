"""What every measurement shares: the row and run records, the input, the steps timed."""
import gc
import sys
from dataclasses import dataclass, field
from typing import Callable, List, Optional

import torch
import torch.nn as nn


@dataclass
class Row:
    """One measurement; ``None`` where a value does not apply or was not measured."""
    model: str
    input: str
    mode: str
    batch: int
    status: str = 'ok'  # 'ok', 'skipped' (peer or config unavailable) or 'failed'
    img_s: Optional[float] = None
    latency_ms: Optional[float] = None
    peak_mib: Optional[float] = None
    gflops: Optional[float] = None  # per image, 2 x multiply-adds
    gflop_s: Optional[float] = None
    pct_matmul: Optional[float] = None
    vs_timm_vit_b: Optional[float] = None
    note: str = ''
    latencies_ms: List[float] = field(default_factory=list)
    plan: Optional[str] = None  # the ViT5's execution plan (benchmarks.core.plan_of)


@dataclass
class Setup:
    """What every measurement of the run shares."""
    device: torch.device
    dtype: torch.dtype
    batch: int
    warmup: int
    repeats: int
    matmul_gflop_s: float = float('nan')


def progress(message: str) -> None:
    print(f'[benchmark] {message}', file=sys.stderr, flush=True)


def describe(exc: Exception) -> str:
    """First line of an exception, short enough for a table cell."""
    return f'{type(exc).__name__}: {exc}'.splitlines()[0][:200]


def outputs_of(result) -> List[torch.Tensor]:
    if isinstance(result, torch.Tensor):
        return [result]
    if isinstance(result, dict):
        result = list(result.values())
    return [t for item in result for t in outputs_of(item)]


def vit5_of(model: nn.Module) -> Optional[nn.Module]:
    """The ViT5 inside ``model`` (itself, a detector's backbone, a wrapped one), or None."""
    from mmvit5.models import ViT5
    return next((m for m in model.modules() if isinstance(m, ViT5)), None)


def plan_of(model: nn.Module, x: torch.Tensor, autocast: Optional[torch.dtype], grad: bool,
            compiled: bool = False) -> Optional[str]:
    """The execution plan the ViT5 in ``model`` makes for ``x`` under ``autocast`` (a dtype, or
    None for none) with gradients on or off, as its string; None for a model without ViT5.
    ``compiled``: the plan it makes inside ``torch.compile`` (the same switches read there)."""
    from mmvit5.models.layers.plan import ExecutionMode
    vit5 = vit5_of(model)
    if vit5 is None:
        return None
    with torch.autocast(x.device.type, dtype=autocast or torch.bfloat16,
                        enabled=autocast is not None), torch.set_grad_enabled(grad):
        plan = vit5.plan(x)
    return str(plan._replace(mode=ExecutionMode.COMPILING) if compiled else plan)


def synchronize(device: torch.device) -> None:
    if device.type == 'cuda':
        torch.cuda.synchronize(device)


def free_memory(device: torch.device) -> None:
    gc.collect()
    if device.type == 'cuda':
        torch.cuda.empty_cache()


def forward_step(model: nn.Module, x: torch.Tensor) -> Callable[[], None]:
    model.eval()

    def step() -> None:
        with torch.no_grad():
            model(x)
    return step


def train_step(model: nn.Module, x: torch.Tensor) -> Callable[[], None]:
    model.train()

    def step() -> None:
        model.zero_grad(set_to_none=True)
        sum(t.float().sum() for t in outputs_of(model(x))).backward()
    return step


def make_input(size: int, setup: Setup) -> torch.Tensor:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(setup.batch, 3, size, size, generator=generator)
    return x.to(setup.device, setup.dtype)


def prepare(model: nn.Module, setup: Setup) -> nn.Module:
    return model.to(setup.device, setup.dtype)
