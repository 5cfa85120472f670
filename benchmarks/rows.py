"""Rows of the main table: a backbone's forward and train steps and their variants."""
from typing import Callable, List, Optional, Tuple

import torch
import torch.nn as nn

from .core import (Row, Setup, describe, forward_step, free_memory, make_input, outputs_of,
                   plan_of, prepare, progress, train_step)
from .flops import count_flops, with_flops
from .peers import build_vit5
from .timing import measure


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
    rows = [with_flops(measure(Row(name, label, mode, setup.batch, note=note,
                                   plan=plan_of(model, x, None, mode == 'train')),
                               make(model, x), model, [x], setup), flops, setup)
            for mode, make in (('forward', forward_step), ('train', train_step))]
    model.zero_grad(set_to_none=True)
    return rows, model, x


def compiled_row(name: str, model: nn.Module, x: torch.Tensor, eager: Row,
                 flops: Optional[float], setup: Setup) -> Row:
    """torch.compile'd forward; the note holds its speedup and output difference vs eager."""
    row = Row(name, eager.input, 'forward (compiled)', setup.batch,
              plan=plan_of(model, x, None, False, compiled=True))
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
    torch.manual_seed(0)
    model = prepare(build_vit5(name, size, with_cp=True), setup)
    row = with_flops(measure(Row(name, plain.input, 'train (with_cp)', setup.batch,
                                 plan=plan_of(model, x, None, True)),
                             train_step(model, x), model, [x], setup), flops, setup)
    if row.status == 'ok' and plain.status == 'ok':
        row.note = (f'checkpointing: peak {row.peak_mib / plain.peak_mib:.2f}x, '
                    f'latency {row.latency_ms / plain.latency_ms:.2f}x of without')
    return row
