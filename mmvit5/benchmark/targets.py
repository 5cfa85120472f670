"""The issue's target ratios: latency ratios timed in alternation, memory and matmul share
read from the main rows."""
import statistics
from dataclasses import dataclass
from typing import Dict, List, NamedTuple, Optional, Tuple

import torch
import torch.nn as nn

from .core import (Row, Setup, describe, forward_step, free_memory, make_input, prepare,
                   progress, train_step)
from .peers import BASELINE, PEERS, VIT5_ARCHS, build_vit5, unavailable_reason
from .report import fmt
from .timing import interleaved_latencies


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
