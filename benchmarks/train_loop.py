"""The whole ``tools/train.py`` loop against the model-only step (``--train-log``).

Reads img/s and peak memory from an mmengine training log (iterations after the first), times
the same detector's model-only training step in this process, and reports the loop / model
ratio (data loading is not the limit when it is near 1) and the backbone's model FLOPs
utilisation against the GPU's dense bf16 peak; on a CPU (a rehearsal) against the matmul rate
measured there, and named so. The plan is the one the loop's log states (ViT5 logs each plan it
runs), the training step's.
"""
import re
import statistics
from typing import Dict, Optional

import torch

from .core import Setup, progress
from .flops import count_flops
from .peers import build_vit5
from .targets import _detector_step
from .timing import interleaved_latencies, matmul_gflop_s

# dense bf16 tensor-core peaks in TFLOP/s (SXM parts), by a name fragment of the device
BF16_PEAK_TFLOPS = {'H200': 989.0, 'H100': 989.0, 'A100': 312.0}


def read_log(path: str) -> Dict[str, float]:
    """Median seconds per iteration (the first left out), peak MiB and the training forward's
    execution plan (None where the log states none) of an mmengine log."""
    with open(path) as f:
        log = f.read()
    plans = [p for p in re.findall(r'ViT5 execution plan: (.*)', log) if 'gradients: on' in p]
    times = [float(t) for t in re.findall(r'Iter\(train\).* time: ([0-9.]+)', log)][1:]
    memory = [int(m) for m in re.findall(r'Iter\(train\).* memory: ([0-9]+)', log)]
    if not times:
        raise ValueError(f'{path}: no training iteration with a time logged after the first; '
                         'train for more iterations or lower default_hooks.logger.interval')
    return dict(s_per_iter=statistics.median(times),
                peak_mib=max(memory) if memory else float('nan'),
                plan=plans[-1].strip() if plans else None)


def bf16_peak_tflops(device: torch.device) -> Optional[float]:
    if device.type != 'cuda':
        return None
    name = torch.cuda.get_device_name(device)
    return next((peak for key, peak in BF16_PEAK_TFLOPS.items() if key in name), None)


def train_loop_report(log: str, config: str, arch: str, size: int, setup: Setup,
                      rounds: int) -> dict:
    """img/s of the loop and of the model alone, their ratio, peak GiB and backbone MFU."""
    from .full_model import build_full_model
    loop = read_log(log)
    progress(f'train loop {log}: model-only step of {config} x {rounds} rounds')
    model, batches = build_full_model(config, size, setup.batch, setup.device)
    step = _detector_step(model, batches['train'], setup)
    model_ms = statistics.median(interleaved_latencies(dict(model=step), setup, rounds)['model'])
    del model, batches, step
    backbone = build_vit5(arch, size)
    flops = count_flops(backbone, torch.zeros(1, 3, size, size))  # forward, one image
    loop_ips = setup.batch / loop['s_per_iter']
    peak, basis = bf16_peak_tflops(setup.device), 'dense bf16 peak of the GPU'
    if peak is None and setup.device.type == 'cpu':
        peak = matmul_gflop_s(setup, 1024) / 1e3
        basis = f'CPU counterpart: the {setup.dtype} matmul rate measured here'
    return dict(log=log, arch=arch, batch=setup.batch, size=size, loop_img_s=loop_ips,
                model_img_s=setup.batch / model_ms * 1e3,
                loop_over_model=loop_ips / (setup.batch / model_ms * 1e3),
                peak_gib=loop['peak_mib'] / 1024, plan=loop['plan'],
                backbone_mfu=None if peak is None else 3 * flops * loop_ips / (peak * 1e12),
                mfu_basis=basis if peak is not None else None)


def train_loop_table(rows) -> str:
    lines = ['| backbone | batch | input | loop img/s | model-only img/s | loop / model '
             '(>= 0.9) | peak GiB | backbone MFU |', '|---|---|---|---|---|---|---|---|']
    for r in rows:
        mfu = '-' if r['backbone_mfu'] is None else \
            f'{100 * r["backbone_mfu"]:.1f} % ({r.get("mfu_basis", "dense bf16 peak")})'
        lines.append(f'| {r["arch"]} | {r["batch"]} | {r["size"]}x{r["size"]} | '
                     f'{r["loop_img_s"]:.2f} | {r["model_img_s"]:.2f} | '
                     f'{r["loop_over_model"]:.2f} | {r["peak_gib"]:.1f} | {mfu} |')
    return '\n'.join(lines)
