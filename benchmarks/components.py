"""What each ViT-5 part costs: the backbone timed with one part removed (or swapped) through
its switches, in PyTorch eager and in ONNX Runtime.

Every variant is built with ``img_size=224`` (the released pretraining size), so at 512 and
1024 the absolute embedding is resized in each forward, as a fine-tuned dense model does. The
variants of one input size are timed in alternation (:func:`~.timing.interleaved_latencies`),
per runtime, and each round gives one ratio ``full / variant``: the cost of a part is the median
of those ratios minus 1 (how much slower the released model is than the one without that
part), with their range.

ONNX graphs are exported once per variant with dynamic H x W (:mod:`mmvit5.deploy`): the RoPE
table and the embedding resize are computed in every run, where a fixed-size graph could fold
them into constants, so the ORT costs of RoPE and the absolute embedding are upper bounds.
"""
import os
import statistics
import tempfile
from dataclasses import dataclass, field
from typing import Callable, Dict, List, NamedTuple, Optional, Sequence

import torch
import torch.nn as nn

from .core import (Setup, describe, forward_step, free_memory, make_input, prepare, progress,
                   train_step)
from .peers import build_vit5
from .timing import interleaved_latencies

PRETRAIN_SIZE = 224


class Component(NamedTuple):
    """A part of ViT-5 and the ``ViT5`` switches that remove (or swap) it."""
    key: str  # the --components name
    part: str  # what the cost row is called
    variant: str  # the model without it
    switches: dict


FULL = Component('full', 'all parts', 'released ViT-5', {})
COMPONENTS = [
    Component('qk_norm', 'QK-Norm', 'no QK-Norm', dict(qk_norm=False)),
    Component('rope', '2D RoPE', 'no RoPE', dict(use_rope=False)),
    Component('registers', 'registers (4)', 'no registers', dict(num_registers=0)),
    Component('layer_scale', 'LayerScale', 'no LayerScale', dict(layer_scale_init_value=None)),
    Component('abs_pos', 'absolute embedding', 'no absolute embedding',
              dict(use_abs_pos=False)),
    Component('norm', 'RMSNorm against LayerNorm', 'LayerNorm for RMSNorm', dict(norm='ln')),
]
RUNTIMES = ('eager forward', 'ORT forward', 'eager train step')


def select_components(spec: str) -> List[Component]:
    """``all`` or a comma list of :data:`COMPONENTS` keys; the full model always comes first."""
    if spec == 'all':
        return [FULL, *COMPONENTS]
    keys = spec.split(',')
    unknown = [k for k in keys if k not in {c.key for c in COMPONENTS}]
    if unknown:
        raise ValueError(f'unknown components {unknown}; choose all or a comma list of '
                         f'{[c.key for c in COMPONENTS]}')
    return [FULL, *(c for c in COMPONENTS if c.key in keys)]


@dataclass
class ComponentTimes:
    """Latencies of every variant of one model, input size and runtime, one per round."""
    model: str
    input: str
    runtime: str
    latencies_ms: Dict[str, List[float]] = field(default_factory=dict)  # variant key -> ms
    note: str = ''

    def cost(self, key: str) -> Optional[List[float]]:
        """Per-round ``full / without key - 1``, or None when either was not timed."""
        if FULL.key not in self.latencies_ms or key not in self.latencies_ms:
            return None
        return [f / v - 1 for f, v in zip(self.latencies_ms[FULL.key], self.latencies_ms[key])]

    def median_ms(self, key: str) -> Optional[float]:
        times = self.latencies_ms.get(key)
        return statistics.median(times) if times else None


def onnx_step(model: torch.nn.Module, directory: str, name: str,
              threads: int) -> Callable[[torch.Tensor], Callable[[], None]]:
    """Export ``model`` once (dynamic H x W) and return a maker of ORT steps for an input."""
    from mmvit5.deploy import export_onnx, ort_session
    from mmvit5.deploy.onnx import run_session
    path = os.path.join(directory, f'{name}.onnx')
    example = torch.randn(1, 3, PRETRAIN_SIZE, PRETRAIN_SIZE)
    # unoptimised: ONNX Runtime optimises the graph when it loads it
    export_onnx(model.float().cpu(), example, path, dynamic=True, size_divisor=16,
                optimize=False)
    # seven ViT-B sessions keeping their 1024x1024 attention buffers exceed 24 GB
    session = ort_session(path, threads, arena=False)
    return lambda x: (lambda: run_session(session, x))


def component_times(name: str, components: Sequence[Component], sizes: Sequence[int],
                    train_sizes: Sequence[int], rounds: int, setup: Setup,
                    build: Optional[Callable[..., nn.Module]] = None,
                    log: Optional[Callable[[ComponentTimes], None]] = None
                    ) -> List[ComponentTimes]:
    """Time every variant of ``name`` at each size, per runtime (see the module docstring).

    Args:
        name (str): ``'vit5-s'``, ``'vit5-b'`` or ``'vit5-l'``, or the label of ``build``'s
            model.
        components (Sequence[Component]): :data:`FULL` first, then the parts to remove.
        sizes (Sequence[int]): Square input sides; ``train_sizes`` those where the training
            step is timed too.
        rounds (int): Alternated rounds per size and runtime.
        setup (Setup): Device, dtype and batch of the eager runs (ORT runs float32 on CPU,
            or on CUDA with onnxruntime-gpu).
        build (Callable, optional): ``build(**switches)`` -> backbone; default ``name``'s
            preset with ``img_size=224``.
        log (Callable, optional): Gets each size and runtime's times as soon as they are
            measured (:class:`~benchmarks.rowlog.RowLog`).

    Returns:
        list[ComponentTimes]: One per size and runtime; a variant that could not be built or
        exported is left out and named in the note.
    """
    build = build or (lambda **switches: build_vit5(name, PRETRAIN_SIZE, **switches))
    models, onnx_steps, notes = {}, {}, {}
    with tempfile.TemporaryDirectory() as directory:
        for component in components:
            torch.manual_seed(0)
            try:
                model = build(**component.switches)
                progress(f'{name} {component.variant}: exporting to ONNX')
                onnx_steps[component.key] = onnx_step(model, directory, component.key,
                                                      torch.get_num_threads())
                models[component.key] = prepare(model, setup)
            except Exception as exc:  # noqa: BLE001 - e.g. a switch this ViT5 lacks
                notes[component.key] = describe(exc)
        results = []
        cpu_clock = Setup(torch.device('cpu'), torch.float32, setup.batch, 0, 1)
        for size in sizes:
            x = make_input(size, setup)
            makers = {'eager forward': lambda m, k: forward_step(m, x),
                      'ORT forward': lambda m, k: onnx_steps[k](x.float().cpu()),
                      'eager train step': lambda m, k: train_step(m, x)}
            for runtime in RUNTIMES:
                if runtime == 'eager train step' and size not in train_sizes:
                    continue
                times = ComponentTimes(name, f'{size}x{size}', runtime,
                                       note='; '.join(f'{k}: {v}' for k, v in notes.items()))
                progress(f'{name} {size}x{size} {runtime}: {len(models)} variants x {rounds} '
                         'rounds')
                # session.run returns on the host: wall time, not CUDA events
                clock = cpu_clock if runtime == 'ORT forward' else setup
                try:
                    steps = {k: makers[runtime](m, k) for k, m in models.items()}
                    times.latencies_ms = interleaved_latencies(steps, clock, rounds)
                except Exception as exc:  # noqa: BLE001 - e.g. OOM at 1024; others go on
                    times.note = describe(exc)
                for model in models.values():
                    model.zero_grad(set_to_none=True)
                free_memory(setup.device)
                results.append(times)
                if log:
                    log(times)
    return results
