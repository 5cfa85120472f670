"""The GPU smoke (``tools/gpu_smoke.py``): one ViT5 training step per autocast dtype at the
recipes' shapes, checked against float32 on the CPU.

``tools/gpu_check.sh`` runs it first, once with the Triton kernels and once without
(``MMVIT5_TRITON=1`` / ``0``, each in its own process: a failed kernel launch can leave the
CUDA context unusable), and exports the PyTorch path for the later sections only when this
smoke passed on it.

The model is a two-block ViT5-B slice: width 768, 12 heads of 64 (as every recipe), block 0
windowed (window 14, with padding: 64 tokens per side at 1024 is no multiple of 14) and
block 1 global, as the detection recipes interleave them; ``tiny`` keeps the head size and the
window padding at CPU-test size. LayerScale starts at 1 so both blocks change the output.
Each dtype runs forward + backward under autocast with float32 weights (as mmengine's
``AmpOptimWrapper``), and passes when

* every output and every parameter gradient is finite and no parameter is left without one;
* the outputs and the gradients are within :data:`TOLERANCE` (relative L2) of the same weights'
  float32 step on the CPU, which takes no Triton kernel (``MMVIT5_TRITON=0`` while it runs,
  whatever the smoke's own setting) and no flex_attention: a kernel that runs but computes
  something else fails here, not only a crash;
* the step ran the path asked for (:func:`path_problems`): with ``MMVIT5_TRITON=1`` the
  model's plan says Triton and no kernel fell back to the PyTorch path; with ``0``, PyTorch.

Each case is a :class:`SmokeCase` record, handed to ``log`` the moment it is measured.
"""
import contextlib
import copy
import os
import statistics
import time
import traceback
import warnings
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn as nn

from mmvit5.models.layers.kernels import triton_failure

from .core import describe, outputs_of, plan_of, synchronize

# the recipes' ViT5-B at LSJ 1024; tiny: the same head size and window padding at CPU-test size
SHAPES = {
    'real': dict(arch=dict(embed_dim=768, depth=2, num_heads=12), img_size=1024,
                 window_size=14, input=(2, 3, 1024, 1024)),
    'tiny': dict(arch=dict(embed_dim=128, depth=2, num_heads=2), img_size=64,
                 window_size=4, input=(2, 3, 96, 128)),
}
# relative L2 error against the float32 CPU step. bf16 keeps 8 mantissa bits (2^-8 = 0.4 %
# per rounding), fp16 11; two blocks, the norms and the backward compound a few roundings
TOLERANCE = {'bfloat16': (0.05, 0.1), 'float16': (0.02, 0.05)}  # (outputs, gradients)


@dataclass
class SmokeCase:
    """One dtype's training step on the smoke model."""
    case: str  # e.g. 'bfloat16 autocast, MMVIT5_TRITON=1'
    dtype: str
    triton: str  # MMVIT5_TRITON as the process had it ('' = unset: Triton on CUDA)
    device: str
    model: str  # the shapes
    status: str = 'failed'  # 'ok' or 'failed'
    first_step_s: Optional[float] = None  # compiles included (Triton, flex_attention)
    step_ms: Optional[float] = None  # median of the later steps
    out_rel_err: Optional[float] = None
    grad_rel_err: Optional[float] = None
    worst_grad: str = ''  # the parameter with the largest gradient error
    peak_mib: Optional[float] = None
    plan: str = ''  # how the step ran (ViT5.plan)
    ref_plan: str = ''  # how the float32 CPU reference ran
    triton_failure: Optional[str] = None  # a Triton kernel that fell back, in this process
    warnings: str = ''
    note: str = ''


def build_smoke_model(shape: str = 'real') -> Tuple[nn.Module, torch.Tensor]:
    """The seeded two-block ViT5 (module docstring) and its input, both on the CPU."""
    from mmvit5.models.backbones import ViT5
    spec = SHAPES[shape]
    torch.manual_seed(0)
    model = ViT5(arch=spec['arch'], img_size=spec['img_size'], window_size=spec['window_size'],
                 global_attn_indices=(1, ), out_indices=(0, 1), out_type='featmap',
                 layer_scale_init_value=1.0)
    x = torch.randn(*spec['input'], generator=torch.Generator().manual_seed(1))
    return model, x


def describe_shape(shape: str) -> str:
    spec = SHAPES[shape]
    arch = spec['arch']
    return (f"{'x'.join(map(str, spec['input']))}, width {arch['embed_dim']}, "
            f"{arch['num_heads']} heads of {arch['embed_dim'] // arch['num_heads']}, "
            f"block 0 window {spec['window_size']}, block 1 global")


def _loss_weights(outputs: Sequence[torch.Tensor]) -> List[torch.Tensor]:
    """Fixed random weights of a linear loss: the gradient entering the backward is the same
    in every dtype, so its error measures the backward alone."""
    generator = torch.Generator().manual_seed(2)
    return [torch.randn(o.shape, generator=generator) for o in outputs]


def _step(model: nn.Module, x: torch.Tensor, weights: Optional[List[torch.Tensor]],
          dtype: Optional[torch.dtype]) -> List[torch.Tensor]:
    model.zero_grad(set_to_none=True)
    context = (torch.autocast(x.device.type, dtype=dtype) if dtype is not None
               else torch.autocast(x.device.type, enabled=False))
    with context:
        outputs = outputs_of(model(x))
    if weights is None:
        weights = [w.to(x.device) for w in _loss_weights(outputs)]
    sum((o.float() * w).sum() for o, w in zip(outputs, weights)).backward()
    return [o.detach().float().cpu() for o in outputs]


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.float() - b.float()).norm() / b.float().norm().clamp_min(1e-12)).item()


def _grads(model: nn.Module) -> Dict[str, Optional[torch.Tensor]]:
    return {name: None if p.grad is None else p.grad.detach().float().cpu()
            for name, p in model.named_parameters() if p.requires_grad}


@contextlib.contextmanager
def pytorch_path():
    """``MMVIT5_TRITON=0`` within: the reference takes no Triton kernel, also where the smoke
    forces them (on CUDA, CPU tensors would be refused the kernels, not interpreted)."""
    saved = os.environ.get('MMVIT5_TRITON')
    os.environ['MMVIT5_TRITON'] = '0'
    try:
        yield
    finally:
        if saved is None:
            del os.environ['MMVIT5_TRITON']
        else:
            os.environ['MMVIT5_TRITON'] = saved


def path_problems(case: SmokeCase) -> List[str]:
    """Where ``case`` ran another path than the one asked for: the reference not on the
    PyTorch path, the step not on Triton with ``MMVIT5_TRITON=1`` (or a kernel fell back), or
    not on PyTorch with ``0``."""
    problems = []
    if 'fused ops: PyTorch' not in case.ref_plan:
        problems.append(f'the float32 reference ran {case.ref_plan!r}, not the PyTorch path')
    want = {'1': 'Triton', '0': 'PyTorch'}.get(case.triton)
    if want and f'fused ops: {want}' not in case.plan:
        problems.append(f'MMVIT5_TRITON={case.triton} ran {case.plan!r}, not {want}')
    if case.triton == '1' and case.triton_failure:
        problems.append(f'a Triton kernel fell back to PyTorch: {case.triton_failure}')
    return problems


def check(case: SmokeCase, outputs: List[torch.Tensor], ref_outputs: List[torch.Tensor],
          grads: Dict[str, Optional[torch.Tensor]],
          ref_grads: Dict[str, Optional[torch.Tensor]]) -> None:
    """Fill the errors of ``case`` and its status: 'ok' only within :data:`TOLERANCE`."""
    problems = []
    if not all(torch.isfinite(o).all() for o in outputs):
        problems.append('non-finite outputs')
    missing = [n for n, g in grads.items() if g is None and ref_grads.get(n) is not None]
    if missing:
        problems.append(f'no gradient for {missing[:3]}')
    bad = [n for n, g in grads.items() if g is not None and not torch.isfinite(g).all()]
    if bad:
        problems.append(f'non-finite gradients in {bad[:3]}')
    case.out_rel_err = max(_rel(o, r) for o, r in zip(outputs, ref_outputs))
    errors = {n: _rel(g, ref_grads[n]) for n, g in grads.items()
              if g is not None and ref_grads.get(n) is not None}
    case.worst_grad = max(errors, key=errors.get)
    case.grad_rel_err = errors[case.worst_grad]
    out_tol, grad_tol = TOLERANCE[case.dtype]
    if not case.out_rel_err <= out_tol:
        problems.append(f'outputs {case.out_rel_err:.3g} from float32 CPU, expected <= '
                        f'{out_tol}')
    if not case.grad_rel_err <= grad_tol:
        problems.append(f'gradient of {case.worst_grad} {case.grad_rel_err:.3g} from float32 '
                        f'CPU, expected <= {grad_tol}')
    case.status = 'failed' if problems else 'ok'
    case.note = '; '.join(problems)


def run_smoke(device: str = 'cuda', dtypes: Sequence[str] = ('bfloat16', 'float16'),
              shape: str = 'real', steps: int = 3,
              log: Optional[Callable[[SmokeCase], None]] = None) -> List[SmokeCase]:
    """One :class:`SmokeCase` per dtype (module docstring); ``log`` gets each as it is done."""
    model, x = build_smoke_model(shape)
    with pytorch_path():
        ref_outputs = _step(model, x, None, None)
        ref_plan = plan_of(model, x, None, True)
    ref_grads = _grads(model)
    weights = _loss_weights(ref_outputs)
    triton = os.environ.get('MMVIT5_TRITON', '')
    cases = []
    model = copy.deepcopy(model).to(device)
    x, weights = x.to(device), [w.to(device) for w in weights]
    dev = torch.device(device)
    for dtype in dtypes:
        case = SmokeCase(f'{dtype} autocast, MMVIT5_TRITON={triton or "unset"}', dtype, triton,
                         torch.cuda.get_device_name(dev) if dev.type == 'cuda' else 'CPU',
                         describe_shape(shape))
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter('always')
                if dev.type == 'cuda':
                    torch.cuda.reset_peak_memory_stats(dev)
                begin = time.perf_counter()
                outputs = _step(model, x, weights, getattr(torch, dtype))
                synchronize(dev)
                case.first_step_s = time.perf_counter() - begin
                grads = _grads(model)
                times = []
                for _ in range(steps):
                    begin = time.perf_counter()
                    _step(model, x, weights, getattr(torch, dtype))
                    synchronize(dev)
                    times.append((time.perf_counter() - begin) * 1e3)
                case.step_ms = statistics.median(times) if times else None
                if dev.type == 'cuda':
                    case.peak_mib = torch.cuda.max_memory_allocated(dev) / 2**20
                case.plan = plan_of(model, x, getattr(torch, dtype), True)
            case.ref_plan, case.triton_failure = ref_plan, triton_failure()
            case.warnings = ' | '.join(dict.fromkeys(
                f'{w.category.__name__}: {str(w.message)[:160]}' for w in caught))
            check(case, outputs, ref_outputs, grads, ref_grads)
            problems = path_problems(case)
            if problems:
                case.status = 'failed'
                case.note = '; '.join(filter(None, [case.note, *problems]))
        except Exception as exc:  # noqa: BLE001 - one failed dtype must not hide the other
            traceback.print_exc()
            case.status, case.note = 'failed', describe(exc)
        cases.append(case)
        if log:
            log(case)
    return cases


def summary(cases: Sequence[SmokeCase]) -> str:
    """One line: how many cases passed, and each case's verdict."""
    passed = sum(c.status == 'ok' for c in cases)
    parts = []
    for c in cases:
        timing = f'first step {c.first_step_s:.1f} s' if c.first_step_s is not None else ''
        if c.step_ms is not None:
            timing += f', then {c.step_ms:.1f} ms'
        detail = c.note or f'{timing}, error {c.out_rel_err:.2g} / {c.grad_rel_err:.2g}'
        parts.append(f'{c.dtype} {c.status} ({detail})')
    triton = cases[0].triton if cases else ''
    return (f'ViT5 smoke, MMVIT5_TRITON={triton or "unset"}: {passed} of {len(cases)} passed: '
            + '; '.join(parts))
