"""Where a ViT-5 block's training cost goes, against timm's ViT-B block (``--breakdown``).

Two measurements of one block at the token count of an input size:

* **Saved activations**: every tensor autograd keeps for backward during one block forward,
  by the module (and op) that saved it, counted once per storage, parameters left out. The
  tensors that ViT-5's training path recomputes in backward instead of keeping are listed
  with size 0 kept (:func:`observe_saved`).
* **Time per part**: forward and backward of each part of the block on its own (fresh leaf
  inputs of the part's real shapes), ViT-5's and timm's part stepped in alternation, median
  over rounds. The ``attention`` part of ViT-5 is QK-Norm + RoPE + attention (backward
  includes recomputing the rotated q, k); timm's is attention alone.
"""
import collections
import contextlib
import os
import statistics
import sys
import time
from typing import Callable, Dict, Iterator, List, NamedTuple, Optional, Sequence, Tuple

import torch
import torch.nn as nn
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from mmvit5.models.layers import ExecutionPlan, make_plan

from .core import Setup, progress, synchronize
from .report import fmt


_TORCH_DIR = os.path.dirname(torch.__file__)


class Saved(NamedTuple):
    """One saved tensor (the first view saved of a storage)."""
    model: str
    module: str
    op: str
    shape: Tuple[int, ...]
    dtype: str
    mib: float
    recomputed: bool


class _TopOp(TorchFunctionMode):
    """The torch function running at the top level (the op that saves)."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: List[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.stack.append(getattr(func, '__name__', str(func)))
        try:
            return func(*args, **(kwargs or {}))
        finally:
            self.stack.pop()


def _calling_code() -> str:
    """``file:function`` that applied the custom autograd Function now saving: autograd calls
    the saved-tensor hooks after the Function's forward has returned, from its caller."""
    frame = sys._getframe(1)
    while frame is not None and (frame.f_code.co_name in ('observe', 'pack', '_pack') or
                                 frame.f_code.co_filename.startswith(_TORCH_DIR)):
        frame = frame.f_back
    if frame is None:
        return 'autograd.Function'
    return f'Function in {os.path.basename(frame.f_code.co_filename)}:{frame.f_code.co_name}'


@contextlib.contextmanager
def observe_saved(observer: Callable[[torch.Tensor, bool], None]) -> Iterator[None]:
    """Call ``observer(tensor, recomputed)`` for each tensor autograd saves in the context.

    Saved-tensor hooks do not nest: inside the training path's
    :class:`~mmvit5.models.layers.recompute.RecomputeSaved`, an outer
    ``saved_tensors_hooks`` sees nothing. So its packing is wrapped too (for the duration of
    the context), which also tells the tensors backward recomputes (``recomputed=True``).
    The tensors are kept as usual.
    """
    from mmvit5.models.layers.recompute import RecomputeSaved, _Recompute
    pack_recomputed = RecomputeSaved._pack

    def pack_observed(self, tensor: torch.Tensor):
        packed = pack_recomputed(self, tensor)
        observer(tensor, isinstance(packed, _Recompute))
        return packed

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        observer(tensor, False)
        return tensor

    RecomputeSaved._pack = pack_observed
    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
            yield
    finally:
        RecomputeSaved._pack = pack_recomputed


def setup_plan(setup: Setup) -> ExecutionPlan:
    """The execution plan a ViT5 forward makes under ``setup`` (its device and autocast)."""
    with torch.autocast(setup.device.type, dtype=setup.dtype,
                        enabled=setup.dtype != torch.float32):
        return make_plan(torch.empty(0, device=setup.device))


def saved_activations(model: str, block: nn.Module, args: Sequence, setup: Setup,
                      plan: Optional[ExecutionPlan] = None) -> List[Saved]:
    """What one forward of ``block(*args)`` keeps for backward (see the module docstring);
    ``plan``: the execution plan a ViT5 block takes (:func:`setup_plan`)."""
    names = {m: n for n, m in block.named_modules()}
    current: List[str] = []
    hooks = [m.register_forward_pre_hook(lambda m, _: current.append(names[m]))
             for m in block.modules()]
    hooks += [m.register_forward_hook(lambda *_: current.pop() and None)
              for m in block.modules()]
    params = {p.untyped_storage().data_ptr() for p in block.parameters()}
    seen: Dict[int, int] = {}
    records: List[Saved] = []
    ops = _TopOp()

    alive: List[torch.Tensor] = []  # no storage freed and reused inside the measurement

    def observe(tensor: torch.Tensor, recomputed: bool) -> None:
        alive.append(tensor)
        storage = tensor.untyped_storage()
        key = storage.data_ptr()
        if key in params:
            return
        if key in seen and not records[seen[key]].recomputed:
            return
        record = Saved(model, current[-1] if current else '', ops.stack[0] if ops.stack
                       else _calling_code(), tuple(tensor.shape),
                       str(tensor.dtype).replace('torch.', ''),
                       0.0 if recomputed else storage.nbytes() / 2**20, recomputed)
        if key in seen:  # first saved for recomputation, now kept after all
            records[seen[key]] = record
        else:
            seen[key] = len(records)
            records.append(record)

    autocast = torch.autocast(setup.device.type, dtype=setup.dtype,
                              enabled=setup.dtype != torch.float32)
    try:
        with observe_saved(observe), ops, autocast:
            block(*args) if plan is None else block(*args, plan=plan)
    finally:
        for hook in hooks:
            hook.remove()
    return records


class Part(NamedTuple):
    name: str
    vit5: Callable[[], Callable[[], torch.Tensor]]  # makes the inputs, returns the step
    timm: Callable[[], Callable[[], torch.Tensor]]


def _leaf(*shape: int, setup: Setup) -> torch.Tensor:
    return torch.randn(*shape, device=setup.device).requires_grad_()


def block_parts(vit5_block: nn.Module, timm_block: nn.Module, rope: torch.Tensor,
                grid: Tuple[int, int], setup: Setup) -> List[Part]:
    """The parts of both blocks at the token counts of ``grid`` (ViT-5 has 4 registers)."""
    attn, tattn = vit5_block.attn, timm_block.attn
    C = vit5_block.norm1.weight.shape[0]
    heads, D = attn.num_heads, attn.head_dim
    T5 = 1 + grid[0] * grid[1] + vit5_block_registers(rope, grid)
    T = 1 + grid[0] * grid[1]

    def part(fn, *shapes):
        def make():
            inputs = [_leaf(setup.batch, *s, setup=setup) for s in shapes]
            return lambda: fn(*inputs)
        return make

    from mmvit5.models.layers import scaled_linear
    from mmvit5.models.layers.recompute import RecomputeSaved
    plan = setup_plan(setup)

    def attention(qkv: torch.Tensor) -> torch.Tensor:  # as Attention.forward runs it
        with RecomputeSaved() as saved:
            return attn.attend(*attn._qkv_heads(qkv, rope, plan, saved))

    return [
        Part('norm1 (RMSNorm / LayerNorm)', part(lambda x: vit5_block.norm1(x, plan=plan),
                                                 (T5, C)),
             part(timm_block.norm1, (T, C))),
        Part('qkv (no bias / bias)', part(attn.qkv, (T5, C)), part(tattn.qkv, (T, C))),
        Part('attention (+ QK-Norm, RoPE)',
             part(attention, (T5, 3, heads, D)),
             part(lambda qkv: nn.functional.scaled_dot_product_attention(
                 *qkv.permute(2, 0, 3, 1, 4).unbind(0)), (T, 3, heads, D))),
        Part('proj (+ LayerScale)', part(lambda x: scaled_linear(x, attn.proj,
                                                                  vit5_block.gamma_1, plan=plan),
                                         (T5, C)),
             part(tattn.proj, (T, C))),
        Part('norm2 (RMSNorm / LayerNorm)', part(lambda x: vit5_block.norm2(x, plan=plan),
                                                 (T5, C)),
             part(timm_block.norm2, (T, C))),
        Part('fc1 + GELU', part(lambda x: vit5_block.mlp.act(vit5_block.mlp.fc1(x)), (T5, C)),
             part(lambda x: timm_block.mlp.act(timm_block.mlp.fc1(x)), (T, C))),
        Part('fc2 (+ LayerScale)',
             part(lambda x: scaled_linear(x, vit5_block.mlp.fc2, vit5_block.gamma_2, plan=plan),
                  (T5, 4 * C)),
             part(timm_block.mlp.fc2, (T, 4 * C))),
    ]


def vit5_block_registers(rope: torch.Tensor, grid: Tuple[int, int]) -> int:
    return rope.shape[0] - 1 - grid[0] * grid[1]


def _fwd_bwd(step: Callable[[], torch.Tensor], setup: Setup) -> Tuple[float, float]:
    """ms of the forward and of the backward of one ``step``."""
    autocast = torch.autocast(setup.device.type, dtype=setup.dtype,
                              enabled=setup.dtype != torch.float32)
    synchronize(setup.device)
    start = time.perf_counter()
    with autocast:
        out = step()
    synchronize(setup.device)
    middle = time.perf_counter()
    out.backward(torch.ones_like(out))
    synchronize(setup.device)
    return (middle - start) * 1e3, (time.perf_counter() - middle) * 1e3


class PartTime(NamedTuple):
    part: str
    vit5_fwd: float
    vit5_bwd: float
    timm_fwd: float
    timm_bwd: float


def part_times(parts: List[Part], setup: Setup, rounds: int) -> List[PartTime]:
    """Median forward/backward ms of each part, ViT-5's and timm's alternated per round."""
    results = []
    for p in parts:
        steps = {'vit5': p.vit5(), 'timm': p.timm()}
        times: Dict[str, List[Tuple[float, float]]] = {k: [] for k in steps}
        for name, step in steps.items():  # untimed
            _fwd_bwd(step, setup)
        for i in range(rounds):
            for name in (list(steps) if i % 2 == 0 else list(steps)[::-1]):
                times[name].append(_fwd_bwd(steps[name], setup))
        med = {k: (statistics.median(t[0] for t in v), statistics.median(t[1] for t in v))
               for k, v in times.items()}
        results.append(PartTime(p.name, *med['vit5'], *med['timm']))
    return results


class Launches(NamedTuple):
    """One block's forward + backward under the profiler and under :class:`DispatchCount`."""
    model: str
    # outermost aten ops under the profiler (a composite op counts once); None where Triton's
    # interpreter runs the kernels, whose own aten ops the profiler would count
    ops: Optional[int]
    kernels: int  # device kernels launched (CUDA only)
    kernel_ms: float  # summed kernel time (CUDA only)
    dispatched: Optional[int] = None  # :class:`DispatchCount` (not in older records)
    plan: Optional[str] = None  # the ViT5's execution plan, None for timm's block


class DispatchCount(TorchDispatchMode):
    """The ops dispatched to a backend that make tensors, view ops left out, by name: on the
    GPU one kernel launch each (ATen ops; mmvit5's Triton ops launch exactly one). Unlike the
    profiler's outermost ops, a composite op counts as the ops it runs, as the GPU runs them."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: collections.Counter = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if not func.is_view and any(isinstance(t, torch.Tensor) for t in tree_flatten(out)[0]):
            self.ops[str(func.overloadpacket)] += 1
        return out


def launches(model: str, step: Callable[[], torch.Tensor], setup: Setup,
             plan=None) -> Launches:
    """How many ops and kernels one forward + backward of ``step`` costs: at batch 1 on a
    GPU, a block of small elementwise kernels is bound by launching them, not by running.
    ``plan``: the execution plan of the model the step runs (None for no ViT5)."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    from .memory import native_stderr_silenced
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA]
                                           if setup.device.type == 'cuda' else [])
    _fwd_bwd(step, setup)
    with native_stderr_silenced(), profile(activities=activities) as prof:
        _fwd_bwd(step, setup)
    events = prof.events()
    # outermost aten ops: dispatched by Python or by the autograd engine, not by another op
    ops = sum(1 for e in events if e.name.startswith('aten::') and (
        e.cpu_parent is None or not e.cpu_parent.name.startswith('aten::')))
    if setup.device.type != 'cuda' and plan is not None and plan.triton:
        ops = None
    kernels = [e for e in events if e.device_type == DeviceType.CUDA]
    with DispatchCount() as counted:
        _fwd_bwd(step, setup)
    return Launches(model, ops, len(kernels), sum(e.device_time for e in kernels) / 1e3,
                    sum(counted.ops.values()), None if plan is None else str(plan))


def build_blocks(size: int, setup: Setup):
    """ViT5-B's first block (with the model's RoPE table), timm's ViT-B block, the token
    grid and the ViT5's execution plan of a training step in the run's dtype."""
    from timm.models.vision_transformer import Block as TimmBlock

    from .peers import build_vit5
    torch.manual_seed(0)
    vit5 = build_vit5('vit5-b', size).to(setup.device).train()
    grid = (size // 16, size // 16)
    rope = vit5.rope_table(grid, torch.float32, setup.device)
    timm_block = TimmBlock(768, 12, qkv_bias=True).to(setup.device).train()
    with torch.autocast(setup.device.type, dtype=setup.dtype,
                        enabled=setup.dtype != torch.float32):
        plan = vit5.plan(rope)
    return vit5.blocks[0], timm_block, rope, grid, plan


def block_launches(size: int, setup: Setup, blocks: Optional[tuple] = None) -> List[Launches]:
    """Launches of ViT5-B's block and timm's ViT-B block (``blocks``, else built as
    :func:`build_blocks`), forward + backward at ``size``."""
    block, timm_block, rope, grid, plan = blocks or build_blocks(size, setup)
    x5 = _leaf(setup.batch, rope.shape[0], 768, setup=setup)
    x = _leaf(setup.batch, 1 + grid[0] * grid[1], 768, setup=setup)
    return [launches('vit5-b', lambda: block(x5, rope, plan=plan), setup, plan),
            launches('timm-vit-b', lambda: timm_block(x), setup)]


def breakdown(size: int, setup: Setup, rounds: int
              ) -> Tuple[List[Saved], List[PartTime], List[Launches]]:
    """Saved activations, part times and launches of one block at ``size`` x ``size``."""
    blocks = build_blocks(size, setup)
    block, timm_block, rope, grid, _ = blocks
    T = 1 + grid[0] * grid[1]
    x5 = _leaf(setup.batch, rope.shape[0], 768, setup=setup)
    x = _leaf(setup.batch, T, 768, setup=setup)
    progress(f'breakdown {size}x{size}: saved activations')
    saved = saved_activations('vit5-b', block, (x5, rope), setup, setup_plan(setup)) + \
        saved_activations('timm-vit-b', timm_block, (x, ), setup)
    progress(f'breakdown {size}x{size}: part times x {rounds} rounds')
    times = part_times(block_parts(block, timm_block, rope, grid, setup), setup, rounds)
    progress(f'breakdown {size}x{size}: profiled launches')
    return saved, times, block_launches(size, setup, blocks)


def saved_table(saved: List[Saved]) -> str:
    """Saved activations of both blocks side by side, by module and op."""
    lines = ['| block | module | op | shape | dtype | MiB kept |', '|---|---|---|---|---|---|']
    for s in saved:
        kept = f'{s.mib:,.2f}' if not s.recomputed else '0 (recomputed in backward)'
        lines.append(f'| {s.model} | {s.module or "(block)"} | {s.op} | '
                     f'{"x".join(map(str, s.shape))} | {s.dtype} | {kept} |')
    for model in dict.fromkeys(s.model for s in saved):
        total = sum(s.mib for s in saved if s.model == model)
        lines.append(f'| {model} | **total** | | | | **{total:,.2f}** |')
    return '\n'.join(lines)


def part_table(times: List[PartTime]) -> str:
    lines = ['| part | ViT5-B fwd ms | timm fwd ms | ViT5-B bwd ms | timm bwd ms | '
             'ViT5-B - timm, fwd + bwd ms |', '|---|---|---|---|---|---|']
    for t in times:
        extra = t.vit5_fwd + t.vit5_bwd - t.timm_fwd - t.timm_bwd
        lines.append(f'| {t.part} | {fmt(t.vit5_fwd, 2)} | {fmt(t.timm_fwd, 2)} | '
                     f'{fmt(t.vit5_bwd, 2)} | {fmt(t.timm_bwd, 2)} | {extra:+.2f} |')
    sums = [sum(getattr(t, f) for t in times) for f in PartTime._fields[1:]]
    lines.append(f'| **sum** | {fmt(sums[0], 2)} | {fmt(sums[2], 2)} | {fmt(sums[1], 2)} | '
                 f'{fmt(sums[3], 2)} | {sums[0] + sums[1] - sums[2] - sums[3]:+.2f} |')
    return '\n'.join(lines)


def launches_table(counted: List[Launches]) -> str:
    lines = ['| block | ops dispatched (fused ops count 1) | outermost aten ops (profiler) | '
             'CUDA kernels | summed kernel ms |', '|---|---|---|---|---|']
    lines += [f'| {c.model} | {"-" if c.dispatched is None else c.dispatched} | '
              f'{"-" if c.ops is None else c.ops} | '
              f'{c.kernels or "-"} | {fmt(c.kernel_ms, 2) if c.kernels else "-"} |'
              for c in counted]
    if len(counted) == 2 and all(c.dispatched for c in counted):
        lines.append(f'| **ratio** | **{counted[0].dispatched / counted[1].dispatched:.2f}** '
                     '| | | |')
    return '\n'.join(lines)


def breakdown_report(sizes: Sequence[int], setup: Setup, rounds: int,
                     device: Optional[str] = None,
                     log: Optional[Callable[[dict], None]] = None) -> Tuple[str, dict]:
    """Markdown of both tables per size, and the raw records; ``log`` gets each size's
    records as soon as they are measured."""
    text, raw = [], {}
    for size in sizes:
        saved, times, counted = breakdown(size, setup, rounds)
        text.append(f'### One block at {size}x{size}: saved for backward\n\n{saved_table(saved)}'
                    f'\n\n### One block at {size}x{size}: time per part (median of {rounds} '
                    f'alternated rounds)\n\n{part_table(times)}\n\n### One block at '
                    f'{size}x{size}: forward + backward launches\n\n{launches_table(counted)}')
        raw[size] = dict(saved=[s._asdict() for s in saved],
                         times=[t._asdict() for t in times],
                         launches=[c._asdict() for c in counted])
        if log:
            log(dict(kind='Breakdown', size=size, **raw[size]))
    return '\n\n'.join(text), raw
