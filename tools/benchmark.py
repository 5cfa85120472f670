#!/usr/bin/env python
"""Throughput, latency, memory and FLOP efficiency of the ViT-5 backbone next to its peers.

Measurement method (one run, one process, so every row sees the same machine state):

* Same conditions for every row: ``torch.set_num_threads(--threads)``, one seeded standard-normal
  input of ``--batch`` x 3 x S x S, weights and input cast to ``--dtype`` (no autocast; bf16 is
  the default on CUDA, float32 on CPU). Every backbone is built for the benchmarked size
  (``img_size=S``), so none pays a per-forward position-embedding resize, and all of them see
  (S / 16)^2 patch tokens.
* Modes: ``forward`` is ``model.eval()`` under ``torch.no_grad()``; ``train`` is ``model.train()``,
  forward, ``sum(output.sum())`` backward, gradients reset to ``None`` before each step (no
  optimizer step).
* Latency: the median over ``--repeats`` timed steps after ``--warmup`` untimed ones; CPU uses
  ``time.perf_counter``, CUDA uses CUDA events around each step and synchronizes on the end event.
  img/s = batch / median latency.
* Peak memory: one more step after the timed ones. CUDA: ``torch.cuda.max_memory_allocated`` after
  resetting the peak (weights, input, activations, gradients, workspaces). CPU: PyTorch keeps no
  CPU allocator statistics and RSS hides reuse of freed pages, so the step runs under
  ``torch.profiler`` with ``profile_memory=True``; the highest point of the running sum of its
  allocation/free events is added to the bytes of weights, buffers and input already alive.
* FLOPs: fvcore's ``FlopCountAnalysis`` (mmengine's ``FlopAnalyzer`` when fvcore is missing) on
  one batch-1 forward per model and size, with a handle for ``scaled_dot_product_attention``
  that neither ships. Both count one per multiply-add; the table doubles that so it is on the
  matmul's scale (2 N^3 for N x N times N x N). Elementwise ops are not counted. train rows use
  3 x the forward count (backward ~ 2 x forward), an estimate.
* Matmul peak: the median rate of an N x N @ N x N matmul in ``--dtype`` (N = ``--matmul-size``),
  measured in the same run; "% of matmul peak" is a row's GFLOP/s over it.
* "ratio to timm ViT-B": the row's img/s over timm ``vit_base_patch16_224``'s at the same input
  and mode (> 1 is faster).

* Targets (``--targets SIZES``): the issue's ratios, timed so that machine noise cancels. The
  models of a ratio are built side by side, stepped once untimed, then timed one step each per
  round for ``--target-rounds`` rounds, the order reversed every other round; each round gives
  one ratio of two latencies measured seconds apart, and the table reports the median and the
  range of those. Memory and matmul-share targets are read from the main rows.

Example: ``python tools/benchmark.py --models vit5-s,vit5-b --sizes 224,512,1024 --peers all``;
``--quick`` is the CI smoke preset.
"""
import argparse
import gc
import importlib
import importlib.util
import json
import os
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

import torch
import torch.nn as nn

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)  # run from a checkout without installing mmvit5

from mmvit5.benchmark.batches import fake_batch  # noqa: E402
from mmvit5.benchmark.measure import count_flops, cpu_step_peak_bytes, tensor_bytes  # noqa: E402

VIT5_ARCHS = {'vit5-s': 'small', 'vit5-b': 'base', 'vit5-l': 'large'}
BASELINE = 'timm-vit-b'
DEFAULT_FULL_CONFIGS = 'configs/vit5_maskrcnn_coco.py,configs/vit5_upernet_ade20k.py'
QUICK = dict(sizes='64', models='vit5-s', repeats=1, warmup=0, peers='timm-vit', matmul_size=1024)


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


# ----------------------------------------------------------------------------- models
class TimmFeatures(nn.Module):
    """timm model -> token features, so it does the backbone's work and not a pooled head."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model.forward_features(x)


def build_vit5(name: str, size: int, **kwargs) -> nn.Module:
    from mmvit5.models import ViT5
    return ViT5(arch=VIT5_ARCHS[name], img_size=size, out_indices=-1, out_type='featmap',
                **kwargs)


def build_mmseg_vit(size: int) -> nn.Module:
    from mmseg.models.backbones import VisionTransformer
    # DeiT-B as mmseg's ViT-B UperNet configs set it up
    return VisionTransformer(img_size=(size, size), embed_dims=768, num_layers=12,
                             num_heads=12, out_indices=(11, ), final_norm=True)


def build_mmpretrain_vit(size: int) -> nn.Module:
    from mmpretrain.models.backbones import VisionTransformer
    return VisionTransformer(arch='b', img_size=size, out_type='featmap',
                             interpolate_mode='bicubic')


def build_mmpretrain_eva02(size: int) -> nn.Module:
    from mmpretrain.models.backbones import ViTEVA02
    return ViTEVA02(arch='b', img_size=size, out_type='featmap')


def build_timm(name: str, size: int, **kwargs) -> nn.Module:
    import timm
    return TimmFeatures(timm.create_model(name, pretrained=False, img_size=size, num_classes=0,
                                          **kwargs))


# name -> (module whose import decides availability, builder)
PEERS: Dict[str, Tuple[str, Callable[[int], nn.Module]]] = {
    'mmseg-vit-b': ('mmseg.models', build_mmseg_vit),
    'mmpretrain-vit-b': ('mmpretrain.models', build_mmpretrain_vit),
    'mmpretrain-eva02-b': ('mmpretrain.models', build_mmpretrain_eva02),
    'timm-vit-b': ('timm', lambda size: build_timm('vit_base_patch16_224', size)),
    # timm's EVA-02 B is patch 14 only; patch 16 gives it the token count of the others
    'timm-eva02-b': ('timm', lambda size: build_timm('eva02_base_patch14_224.mim_in22k', size,
                                                     patch_size=16)),
}


def select_peers(spec: str) -> List[str]:
    """``all``, ``none`` or comma-separated names or prefixes (``timm``, ``mmpretrain-vit``)."""
    if spec == 'all':
        return list(PEERS)
    if spec == 'none':
        return []
    chosen = []
    for token in spec.split(','):
        matches = [n for n in PEERS if n == token or n.startswith(token + '-')]
        if not matches:
            raise SystemExit(f'--peers: unknown peer {token!r}; choose from {list(PEERS)}, '
                             'a prefix of them, all or none')
        chosen += [m for m in matches if m not in chosen]
    return chosen


def unavailable_reason(module: str) -> Optional[str]:
    """Why a peer's package cannot be used here, or None when it imports."""
    try:
        importlib.import_module(module)
    except Exception as exc:  # noqa: BLE001 - e.g. mmcv without compiled ops raises OSError
        return f'import {module} failed: {describe(exc)}'
    return None


# ----------------------------------------------------------------------------- timing/memory
def outputs_of(result) -> List[torch.Tensor]:
    if isinstance(result, torch.Tensor):
        return [result]
    if isinstance(result, dict):
        result = list(result.values())
    return [t for item in result for t in outputs_of(item)]


def synchronize(device: torch.device) -> None:
    if device.type == 'cuda':
        torch.cuda.synchronize(device)


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


def free_memory(device: torch.device) -> None:
    gc.collect()
    if device.type == 'cuda':
        torch.cuda.empty_cache()


def matmul_gflop_s(setup: Setup, n: int) -> float:
    """The machine's N x N matmul rate in the run's dtype: the ceiling of the % column."""
    progress(f'matmul {n}x{n} {setup.dtype}')
    a = torch.randn(n, n, device=setup.device, dtype=setup.dtype)
    b = torch.randn(n, n, device=setup.device, dtype=setup.dtype)
    times = time_step(lambda: torch.mm(a, b), setup, warmup=2, repeats=max(setup.repeats, 5))
    return 2 * n**3 / (statistics.median(times) / 1e3) / 1e9


# ----------------------------------------------------------------------------- steps
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


def with_flops(row: Row, flops_per_image: Optional[float], setup: Setup) -> Row:
    """Add GFLOPs per image, achieved GFLOP/s and the share of the matmul rate."""
    if row.status != 'ok' or flops_per_image is None:
        return row
    factor = 3.0 if row.mode.startswith('train') else 1.0
    row.gflops = factor * flops_per_image / 1e9
    row.gflop_s = row.gflops * row.batch / (row.latency_ms / 1e3)
    row.pct_matmul = 100.0 * row.gflop_s / setup.matmul_gflop_s
    return row


def bench_backbone(name: str, build: Callable[[], nn.Module], size: int, setup: Setup
                   ) -> Tuple[List[Row], Optional[nn.Module], Optional[torch.Tensor]]:
    """forward and train rows of one backbone at one size; returns the model for extra rows."""
    label = f'{size}x{size}'
    torch.manual_seed(0)
    try:
        model = prepare(build(), setup)
    except Exception as exc:  # noqa: BLE001 - report the row, go on with the others
        free_memory(setup.device)
        return [Row(name, label, mode, setup.batch, status='failed', note=describe(exc))
                for mode in ('forward', 'train')], None, None
    x = make_input(size, setup)
    progress(f'{name} {label} counting FLOPs')
    try:
        flops, note = count_flops(model, x[:1]), ''
    except Exception as exc:  # noqa: BLE001 - an untraceable model can still be timed
        flops, note = None, f'FLOPs not counted: {describe(exc)}'
    rows = [with_flops(measure(Row(name, label, mode, setup.batch, note=note), make(model, x),
                               model, [x], setup), flops, setup)
            for mode, make in (('forward', forward_step), ('train', train_step))]
    model.zero_grad(set_to_none=True)
    return rows, model, x


# ----------------------------------------------------------------------------- extra rows
def compiled_row(name: str, model: nn.Module, x: torch.Tensor, eager: Row,
                 flops: Optional[float], setup: Setup) -> Row:
    """torch.compile'd forward; the note holds its speedup and output difference vs eager."""
    row = Row(name, eager.input, 'forward (compiled)', setup.batch)
    model.eval()
    progress(f'{name} {eager.input} compiling')
    try:
        compiled = torch.compile(model)
        with torch.no_grad():
            reference = outputs_of(model(x))
            result = outputs_of(compiled(x))  # compiles here, outside the timed steps
        diff = max((a.float() - b.float()).abs().max().item() for a, b in zip(reference, result))
    except Exception as exc:  # noqa: BLE001 - e.g. no C++ compiler for inductor on CPU
        row.status, row.note = 'failed', describe(exc)
        return row
    row = with_flops(measure(row, forward_step(compiled, x), model, [x], setup), flops, setup)
    if row.status == 'ok' and eager.status == 'ok':
        row.note = (f'{eager.latency_ms / row.latency_ms:.2f}x eager speed, '
                    f'max abs diff vs eager {diff:.2e}')
    return row


def checkpointed_row(name: str, size: int, x: torch.Tensor, plain: Row,
                     flops: Optional[float], setup: Setup) -> Row:
    """train step with activation checkpointing; the note compares peak memory to ``plain``."""
    # fairscale is the backbone's default implementation; torch's is always there
    cp_impl = 'fairscale' if importlib.util.find_spec('fairscale') else 'torch'
    torch.manual_seed(0)
    model = prepare(build_vit5(name, size, with_cp=True, cp_impl=cp_impl), setup)
    row = with_flops(measure(Row(name, plain.input, 'train (with_cp)', setup.batch),
                             train_step(model, x), model, [x], setup), flops, setup)
    if row.status == 'ok' and plain.status == 'ok':
        row.note = (f'{cp_impl} checkpointing: peak {row.peak_mib / plain.peak_mib:.2f}x, '
                    f'latency {row.latency_ms / plain.latency_ms:.2f}x of without')
    return row


def full_model_rows(config_path: str, size: int, batch: int, setup: Setup) -> List[Row]:
    """Training step (loss + backward) and inference of a detector/segmentor config."""
    name = os.path.splitext(os.path.basename(config_path))[0]
    label = f'{size}x{size}'
    if not os.path.isfile(os.path.join(REPO, config_path)):
        return [Row(name, label, 'full model', batch, status='skipped',
                    note=f'{config_path} does not exist yet')]
    try:
        model, batches = build_full_model(os.path.join(REPO, config_path), size, batch,
                                          setup.device)
    except Exception as exc:  # noqa: BLE001 - mmdet/mmseg missing or config not buildable
        return [Row(name, label, 'full model', batch, status='skipped',
                    note=describe(exc))]
    # weights stay float32; a bf16 run uses autocast, as mmengine's AmpOptimWrapper would
    mixed = setup.dtype != torch.float32
    autocast = torch.autocast(setup.device.type, dtype=setup.dtype, enabled=mixed)
    note = 'fp32 weights, bf16 autocast' if mixed else 'fp32'

    def train() -> None:
        model.zero_grad(set_to_none=True)
        with autocast:
            loss, _ = model.parse_losses(model(**batches['train'], mode='loss'))
        loss.backward()

    def infer() -> None:
        with torch.no_grad(), autocast:
            model(**batches['test'], mode='predict')

    rows = []
    for mode, step, training in (('train step', train, True), ('inference', infer, False)):
        model.train(training)
        rows.append(measure(Row(name, label, mode, batch, note=note), step, model,
                            [batches['train' if training else 'test']['inputs']], setup))
    return rows


def build_full_model(path: str, size: int, batch: int,
                     device: torch.device) -> Tuple[nn.Module, dict]:
    """The config's model (random init, input size S) and preprocessed fake batches."""
    from mmengine.config import Config
    cfg = Config.fromfile(path)
    cfg.model.backbone.init_cfg = None
    is_segmentor = 'decode_head' in cfg.model
    # the benchmarked size must be the size the model really runs at
    if is_segmentor:
        from mmseg.registry import MODELS
        from mmseg.utils import register_all_modules
        cfg.model.data_preprocessor.size = (size, size)
        cfg.model.test_cfg = dict(mode='whole')
    else:
        from mmdet.registry import MODELS
        from mmdet.utils import register_all_modules
        for augment in cfg.model.data_preprocessor.get('batch_augments') or []:
            augment.size = (size, size)
    register_all_modules(init_default_scope=False)
    importlib.import_module('mmvit5')
    model = MODELS.build(cfg.model).to(device)
    packed = fake_batch(cfg, size, batch)
    batches = {'train': model.data_preprocessor(packed, True),
               'test': model.data_preprocessor(packed, False)}
    return model, batches


# ----------------------------------------------------------------------------- targets
@dataclass
class Target:
    """One target: a ratio, its bound and whether this run meets it."""
    claim: str
    input: str
    bound: str  # e.g. '<= 1.1'
    ratio: Optional[float] = None
    low: Optional[float] = None  # range of the per-round ratios
    high: Optional[float] = None
    note: str = ''

    @property
    def met(self) -> Optional[bool]:
        if self.ratio is None:
            return None
        op, value = self.bound.split()
        return self.ratio <= float(value) if op == '<=' else self.ratio >= float(value)


class TimedTarget(NamedTuple):
    """A target on the latency ratio ``numerator / denominator`` of two models in ``mode``."""
    claim: str
    numerator: str
    denominator: str
    mode: str
    bound: str

    @property
    def pair(self) -> Tuple[str, str]:
        return self.numerator, self.denominator


WINDOWED = 'vit5-b win14'  # ViTDet windows: 14, 4 global blocks
TIMED_TARGETS = [
    TimedTarget('ViT5-B forward time / timm ViT-B', 'vit5-b', BASELINE, 'forward', '<= 1.1'),
    TimedTarget('mmseg ViT-B forward time / ViT5-B', 'mmseg-vit-b', 'vit5-b', 'forward',
                '>= 1.2'),
    TimedTarget('ViT5-B global / window-14 forward time', 'vit5-b', WINDOWED, 'forward',
                '>= 2'),
    TimedTarget('ViT5-B global / window-14 train step time', 'vit5-b', WINDOWED, 'train',
                '>= 2'),
]


def target_model(name: str, size: int) -> nn.Module:
    if name == WINDOWED:
        return build_vit5('vit5-b', size, window_size=14)
    if name in VIT5_ARCHS:
        return build_vit5(name, size)
    reason = unavailable_reason(PEERS[name][0])
    if reason:
        raise ImportError(reason)
    return PEERS[name][1](size)


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


def timed_targets(size: int, rounds: int, setup: Setup) -> List[Target]:
    """The latency targets at one input size (see the module docstring)."""
    label = f'{size}x{size}'
    targets = [Target(spec.claim, label, spec.bound) for spec in TIMED_TARGETS]
    models: Dict[str, nn.Module] = {}
    for name in dict.fromkeys(n for spec in TIMED_TARGETS for n in spec.pair):
        torch.manual_seed(0)
        try:
            models[name] = prepare(target_model(name, size), setup)
        except Exception as exc:  # noqa: BLE001 - a missing peer leaves its targets open
            for target, spec in zip(targets, TIMED_TARGETS):
                if name in spec.pair:
                    target.note = f'{name}: {describe(exc)}'
    x = make_input(size, setup)
    for mode, make in (('forward', forward_step), ('train', train_step)):
        specs = [(t, spec) for t, spec in zip(targets, TIMED_TARGETS)
                 if spec.mode == mode and not t.note]
        names = list(dict.fromkeys(n for _, spec in specs for n in spec.pair))
        if not names:
            continue
        progress(f'targets {label} {mode}: {", ".join(names)} x {rounds} rounds')
        try:
            times = interleaved_latencies({n: make(models[n], x) for n in names}, setup, rounds)
        except Exception as exc:  # noqa: BLE001 - e.g. OOM; the other mode may still run
            for target, _ in specs:
                target.note = describe(exc)
            continue
        for target, spec in specs:
            per_round = [a / b for a, b in zip(times[spec.numerator], times[spec.denominator])]
            target.ratio = statistics.median(per_round)
            target.low, target.high = min(per_round), max(per_round)
    del models  # with the gradients of the train rounds
    free_memory(setup.device)
    return targets


def row_targets(rows: List[Row]) -> List[Target]:
    """The memory and matmul-share targets, read from the main rows of ViT5-B."""
    ok = {(r.model, r.input, r.mode): r for r in rows if r.status == 'ok'}
    targets = []
    for (model, size, mode), row in ok.items():
        if model != 'vit5-b':
            continue
        if mode == 'forward' and row.pct_matmul is not None:
            targets.append(Target('ViT5-B forward GFLOP/s / matmul GFLOP/s', size, '>= 0.6',
                                  row.pct_matmul / 100))
        plain = ok.get((model, size, 'train'))
        if mode == 'train (with_cp)' and plain is not None:
            targets.append(Target('ViT5-B with_cp / plain training peak memory', size, '<= 0.5',
                                  row.peak_mib / plain.peak_mib))
    return targets


def targets_table(targets: List[Target], rounds: int) -> str:
    lines = [f'| target | input | ratio | range over {rounds} alternated rounds | bound | met |',
             '|---|---|---|---|---|---|']
    for t in targets:
        spread = 'main table' if t.low is None else f'{t.low:.2f}-{t.high:.2f}'
        met = {True: 'yes', False: 'no', None: f'not measured: {t.note}'.replace('|', '/')}
        lines.append(f'| {t.claim} | {t.input} | {fmt(t.ratio, 2)} | {spread} | {t.bound} | '
                     f'{met[t.met]} |')
    return '\n'.join(lines)


# ----------------------------------------------------------------------------- report
def add_ratios(rows: List[Row]) -> None:
    baseline = {(r.input, r.mode): r.img_s for r in rows if r.model == BASELINE and r.img_s}
    for row in rows:
        if row.img_s and (row.input, row.mode) in baseline:
            row.vs_timm_vit_b = row.img_s / baseline[(row.input, row.mode)]


def fmt(value: Optional[float], digits: int) -> str:
    return 'n/a' if value is None else f'{value:,.{digits}f}'


def markdown_table(rows: List[Row], setup: Setup) -> str:
    memory = ('torch.cuda.max_memory_allocated' if setup.device.type == 'cuda' else
              'CPU: weights + input + profiler peak of live tensors during one step')
    header = ['model', 'input', 'mode', 'batch', 'img/s', 'latency ms (median)',
              f'peak mem MiB ({memory})', 'GFLOPs/img (2 x MACs; train = 3 x fwd)', 'GFLOP/s',
              f'% of matmul peak ({setup.matmul_gflop_s:,.0f} GFLOP/s)',
              'ratio to timm ViT-B (img/s, same input)', 'notes']
    lines = ['| ' + ' | '.join(header) + ' |', '|' + '---|' * len(header)]
    for r in rows:
        notes = r.note if r.status == 'ok' else f'{r.status}: {r.note}'
        cells = [r.model, r.input, r.mode, str(r.batch), fmt(r.img_s, 1), fmt(r.latency_ms, 2),
                 fmt(r.peak_mib, 1), fmt(r.gflops, 2), fmt(r.gflop_s, 1), fmt(r.pct_matmul, 1),
                 fmt(r.vs_timm_vit_b, 2), notes.replace('|', '/')]
        lines.append('| ' + ' | '.join(cells) + ' |')
    return '\n'.join(lines)


def save_plot(rows: List[Row], path: str) -> None:
    """Median latency against resolution, one line per model, forward and train side by side."""
    import matplotlib
    matplotlib.use('Agg')  # headless machines and CI have no display
    import matplotlib.pyplot as plt
    modes = ('forward', 'train')
    figure, axes = plt.subplots(1, len(modes), figsize=(12, 4.5), squeeze=False)
    for axis, mode in zip(axes[0], modes):
        points: Dict[str, List[Tuple[int, float]]] = {}
        for r in rows:
            if r.mode == mode and r.status == 'ok':
                points.setdefault(r.model, []).append((int(r.input.split('x')[0]), r.latency_ms))
        for model, series in points.items():
            sizes, latencies = zip(*sorted(series))
            axis.plot(sizes, latencies, marker='o', label=model)
        benchmarked = sorted({size for series in points.values() for size, _ in series})
        axis.set_xscale('log', base=2)  # sides usually double: 224, 512, 1024
        axis.set_xticks(benchmarked, [str(size) for size in benchmarked])
        axis.set(title=f'{mode} (batch {rows[0].batch if rows else "?"})',
                 xlabel='input side (px)', ylabel='median latency (ms)')
        axis.set_yscale('log')
        axis.grid(True, which='both', alpha=0.3)
        if points:
            axis.legend(fontsize=8)
    figure.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    figure.savefig(path, dpi=120)
    plt.close(figure)


# ----------------------------------------------------------------------------- main
def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--models', help=f'comma list of {list(VIT5_ARCHS)} '
                        '(default vit5-s,vit5-b)')
    parser.add_argument('--sizes', help='comma list of square input sides (default 224,512,1024)')
    parser.add_argument('--peers', help=f'all (default), none, or comma list of {list(PEERS)} '
                        'or their prefixes, e.g. timm')
    parser.add_argument('--batch', type=int, default=1)
    parser.add_argument('--threads', type=int, default=torch.get_num_threads())
    parser.add_argument('--device', default='cuda' if torch.cuda.is_available() else 'cpu')
    parser.add_argument('--dtype', choices=['float32', 'bfloat16'],
                        help='default bfloat16 on CUDA, float32 on CPU')
    parser.add_argument('--warmup', type=int)
    parser.add_argument('--repeats', type=int)
    parser.add_argument('--matmul-size', type=int,
                        help='side of the peak-rate matmul (default 8192 on CUDA, 2048 on CPU)')
    parser.add_argument('--compile', action='store_true', help='add torch.compile ViT5 rows')
    parser.add_argument('--with-cp', action='store_true',
                        help='add ViT5 train rows with activation checkpointing')
    parser.add_argument('--window', type=int, default=0,
                        help='add ViT5 rows with windowed attention of this size (ViTDet: 14; '
                        '4 global blocks)')
    parser.add_argument('--full-model', action='store_true',
                        help='add train step and inference of full detector/segmentor configs')
    parser.add_argument('--full-configs', default=DEFAULT_FULL_CONFIGS,
                        help='comma list of configs for --full-model, relative to the repo')
    parser.add_argument('--full-size', type=int, default=512,
                        help='input side of the --full-model rows')
    parser.add_argument('--full-batch', type=int, default=2,
                        help='batch of the --full-model rows (UperNet\'s pooled BatchNorm '
                        'cannot train on 1)')
    parser.add_argument('--targets', default='',
                        help='comma list of input sides at which to time the target ratios in '
                        'alternation (e.g. 512,1024; default none)')
    parser.add_argument('--target-rounds', type=int, default=5,
                        help='rounds of alternated steps per target ratio')
    parser.add_argument('--quick', action='store_true',
                        help='CI smoke preset: ' + ', '.join(f'{k}={v}' for k, v in QUICK.items()))
    parser.add_argument('--json', help='save the raw rows here')
    parser.add_argument('--plot', default='work_dirs/benchmark.png')
    args = parser.parse_args(argv)
    cuda = args.device.startswith('cuda')
    defaults = dict(sizes='224,512,1024', models='vit5-s,vit5-b', repeats=10, warmup=3,
                    peers='all', matmul_size=8192 if cuda else 2048)
    # explicit flags beat the preset, the preset beats the defaults
    for key, value in ({**defaults, **QUICK} if args.quick else defaults).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    args.dtype = args.dtype or ('bfloat16' if cuda else 'float32')
    unknown = set(args.models.split(',')) - set(VIT5_ARCHS)
    if unknown:
        parser.error(f'--models: unknown {sorted(unknown)}; choose from {list(VIT5_ARCHS)}')
    return args


def sizes(spec: str) -> List[int]:
    """``'512,1024'`` -> [512, 1024]; empty or ``none`` -> []."""
    return [] if spec in ('', 'none') else [int(side) for side in spec.split(',')]


def run(args: argparse.Namespace, setup: Setup) -> List[Row]:
    """Every row of the run, grouped by input size so peers sit next to each other."""
    peers = select_peers(args.peers)
    missing = {p: unavailable_reason(PEERS[p][0]) for p in peers}
    rows = [Row(p, '-', '-', setup.batch, status='skipped', note=reason)
            for p, reason in missing.items() if reason]
    for size in sizes(args.sizes):
        for name in args.models.split(','):
            new, model, x = bench_backbone(name, lambda: build_vit5(name, size), size, setup)
            rows += new
            # the variants do the same useful work as the eager forward
            flops = new[0].gflops * 1e9 if new[0].gflops else None
            if model is not None and args.compile:
                rows.append(compiled_row(name, model, x, new[0], flops, setup))
            if model is not None and args.with_cp:
                rows.append(checkpointed_row(name, size, x, new[1], flops, setup))
            del model, x
            free_memory(setup.device)
            if args.window:
                rows += bench_backbone(f'{name} win{args.window}', lambda: build_vit5(
                    name, size, window_size=args.window), size, setup)[0]
                free_memory(setup.device)
        for peer in (p for p in peers if not missing[p]):
            rows += bench_backbone(peer, lambda: PEERS[peer][1](size), size, setup)[0]
            free_memory(setup.device)
    if args.full_model:
        for config in args.full_configs.split(','):
            rows += full_model_rows(config, args.full_size, args.full_batch, setup)
    return rows


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    setup = Setup(torch.device(args.device), getattr(torch, args.dtype), args.batch,
                  args.warmup, args.repeats)
    setup.matmul_gflop_s = matmul_gflop_s(setup, args.matmul_size)
    rows = run(args, setup)
    add_ratios(rows)
    device = (torch.cuda.get_device_name(setup.device) if setup.device.type == 'cuda'
              else f'CPU, {args.threads} threads')
    print(f'## ViT-5 benchmark: {device}, {args.dtype}, batch {args.batch}, '
          f'median of {args.repeats} after {args.warmup} warmup, torch {torch.__version__}\n')
    print(markdown_table(rows, setup))
    targets = [t for size in sizes(args.targets)
               for t in timed_targets(size, args.target_rounds, setup)] + row_targets(rows)
    if targets:
        print(f'\n### Targets\n\n{targets_table(targets, args.target_rounds)}')
    save_plot(rows, args.plot)
    progress(f'plot saved to {args.plot}')
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        meta = dict(device=device, dtype=args.dtype, threads=args.threads, batch=args.batch,
                    warmup=args.warmup, repeats=args.repeats, matmul_size=args.matmul_size,
                    matmul_gflop_s=setup.matmul_gflop_s, target_rounds=args.target_rounds,
                    torch=torch.__version__)
        with open(args.json, 'w') as f:
            json.dump(dict(meta=meta, rows=[asdict(r) for r in rows],
                           targets=[dict(asdict(t), met=t.met) for t in targets]), f, indent=1)
        progress(f'rows saved to {args.json}')
    # peers may be skipped, but a run whose own backbone failed is a failed run
    return int(any(r.status == 'failed' and r.model in VIT5_ARCHS for r in rows))


if __name__ == '__main__':
    sys.exit(main())
