"""What a config will cost before renting GPUs: parameters, FLOPs at its input size, one real
training step (time and peak memory per image on this device), schedule length and the total
batch its learning rate assumes (``tools/dry_run.py``)."""
import importlib
import os.path as osp
import time
from dataclasses import dataclass
from typing import Optional, Tuple

import torch
import torch.nn as nn
from mmengine.config import Config
from mmengine.model import revert_sync_batchnorm
from mmengine.optim import build_optim_wrapper
from mmengine.registry import DefaultScope

from .flops import count_flops
from .full_model import fake_batch
from .memory import cpu_step_peak_bytes, tensor_bytes

# training images after mmdet's filter_empty_gt / of ADE20K, for schedules without the data here
STANDARD_TRAIN_IMAGES = {'CocoDataset': 117266, 'ADE20KDataset': 20210}


@dataclass
class DryRun:
    """What :func:`dry_run` measured; sizes in images, memory in MiB, time in s."""
    params: int
    trainable: int
    input_size: Tuple[int, int]
    gflops: Optional[float]
    flops_of: str
    device: str
    batch: int
    step_s: float
    peak_mib: float
    max_iters: int
    per_device_batch: int
    total_batch: int
    train_images: int
    train_images_from: str

    @property
    def epochs(self) -> float:
        return self.max_iters * self.total_batch / self.train_images


def input_size(cfg: Config) -> Tuple[int, int]:
    """The (H, W) every training image reaches the backbone at."""
    if 'decode_head' in cfg.model:
        return tuple(cfg.model.data_preprocessor.size)
    for augment in cfg.model.data_preprocessor.get('batch_augments') or []:
        if augment.type == 'BatchFixedSizePad':
            return tuple(augment.size)
    raise ValueError('dry_run: this detector config pads to no fixed size (BatchFixedSizePad); '
                     'its input size varies per batch, so FLOPs and memory are not defined')


def build_model(cfg: Config) -> nn.Module:
    """The config's model in its scope, randomly initialised (no pretrained file needed)."""
    scope = importlib.import_module(f'{cfg.default_scope}.utils')
    scope.register_all_modules(init_default_scope=False)
    importlib.import_module('mmvit5')
    registry = importlib.import_module(f'{cfg.default_scope}.registry')
    cfg.model.backbone.init_cfg = None
    with DefaultScope.overwrite_default_scope(cfg.default_scope):
        # SyncBN needs a process group; one device runs plain BN, as mmengine's Runner does
        return revert_sync_batchnorm(registry.MODELS.build(cfg.model))


def model_flops(model: nn.Module, batch: dict) -> Tuple[Optional[float], str]:
    """FLOPs of the whole model's tensor forward, else of backbone + neck (some heads do not
    trace); the second value says which."""
    data = model.data_preprocessor(batch, False)
    inputs, samples = data['inputs'], data['data_samples']

    class Forward(nn.Module):
        def __init__(self, whole: bool) -> None:
            super().__init__()
            self.model, self.whole = model, whole

        def forward(self, x: torch.Tensor):
            return self.model._forward(x, samples) if self.whole else self.model.extract_feat(x)

    for whole, label in ((True, 'whole model'), (False, 'backbone + neck')):
        try:
            return count_flops(Forward(whole), inputs), label
        except Exception:  # noqa: BLE001 - tracing fails on data-dependent heads
            continue
    return None, 'not countable'


def train_images(cfg: Config) -> Tuple[int, str]:
    """Length of the training set, read from the data when it is there."""
    dataset = cfg.train_dataloader.dataset
    while 'dataset' in dataset:
        dataset = dataset.dataset
    root = dataset.get('data_root')
    if root and osp.isdir(root):
        registry = importlib.import_module(f'{cfg.default_scope}.registry')
        with DefaultScope.overwrite_default_scope(cfg.default_scope):
            return len(registry.DATASETS.build(dataset)), f'{root} (read)'
    if dataset.type not in STANDARD_TRAIN_IMAGES:
        raise ValueError(f'dry_run: {dataset.type} is not in {sorted(STANDARD_TRAIN_IMAGES)} '
                         f'and its data_root {root!r} does not exist; put the data there for '
                         'the epoch count')
    return STANDARD_TRAIN_IMAGES[dataset.type], f'standard {dataset.type} train split'


def time_and_peak(step, model: nn.Module, optim_wrapper, device: torch.device,
                  warmup: int) -> Tuple[float, float]:
    """Seconds of one ``step`` after ``warmup`` untimed ones, and its peak memory in MiB."""
    for _ in range(warmup):
        step()
    if device.type == 'cuda':
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
    begin = time.perf_counter()
    step()
    if device.type == 'cuda':
        torch.cuda.synchronize(device)
        return time.perf_counter() - begin, torch.cuda.max_memory_allocated(device) / 2**20
    seconds = time.perf_counter() - begin
    # weights and optimizer state live across steps; one more step measures the rest
    state = [t for s in optim_wrapper.optimizer.state.values() for t in s.values()
             if isinstance(t, torch.Tensor)]
    resident = tensor_bytes([*model.parameters(), *model.buffers(), *state])
    model.zero_grad(set_to_none=True)
    return seconds, (resident + cpu_step_peak_bytes(step)) / 2**20


def dry_run(cfg: Config, device: torch.device, warmup: int = 0) -> DryRun:
    """Build the config's model and optimizer, count and run one training step of one image
    (two for segmentors: BatchNorm in UperNet's pooling module sees 1x1 maps)."""
    if cfg.train_cfg.get('type') != 'IterBasedTrainLoop':
        raise ValueError(f"dry_run reads iteration-based schedules; train_cfg.type is "
                         f"{cfg.train_cfg.get('type')!r}")
    size = input_size(cfg)
    if size[0] != size[1]:
        raise ValueError(f'dry_run: non-square input {size} is not supported')
    model = build_model(cfg).to(device)
    # two for segmentors: BatchNorm in UperNet's pooling module sees 1x1 maps
    images = 2 if 'decode_head' in cfg.model else 1
    batch = fake_batch(cfg, size[0], images)
    model.eval()
    gflops, flops_of = model_flops(model, batch)
    model.train()
    optim_wrapper = build_optim_wrapper(model, cfg.optim_wrapper)
    seconds, peak = time_and_peak(lambda: model.train_step(batch, optim_wrapper), model,
                                  optim_wrapper, device, warmup)
    train_size, source = train_images(cfg)
    return DryRun(
        params=sum(p.numel() for p in model.parameters()),
        trainable=sum(p.numel() for p in model.parameters() if p.requires_grad),
        input_size=size, gflops=None if gflops is None else gflops / 1e9, flops_of=flops_of,
        device=str(device), batch=images, step_s=seconds, peak_mib=peak,
        max_iters=cfg.train_cfg.max_iters, per_device_batch=cfg.train_dataloader.batch_size,
        total_batch=cfg.auto_scale_lr.base_batch_size, train_images=train_size,
        train_images_from=source)


def report(run: DryRun, name: str) -> str:
    """The dry run as lines of ``key: value``."""
    flops = 'n/a' if run.gflops is None else f'{run.gflops:,.1f} GFLOPs ({run.flops_of}, forward)'
    devices = run.total_batch / run.per_device_batch
    return '\n'.join([
        f'[dry_run] {name}',
        f'  parameters:        {run.params / 1e6:,.1f}M ({run.trainable / 1e6:,.1f}M trainable)',
        f'  input size:        {run.input_size[0]}x{run.input_size[1]}',
        f'  FLOPs per image:   {flops}',
        f'  train step:        {run.step_s / run.batch:.2f} s per image on {run.device} '
        f'({run.batch} image{"s" * (run.batch > 1)}: forward, loss, backward, optimizer step)',
        f'  peak memory:       {run.peak_mib:,.0f} MiB for {run.batch} image'
        f'{"s" * (run.batch > 1)} on {run.device} (weights and optimizer state included)',
        f'  schedule:          {run.max_iters:,} iterations = {run.epochs:.1f} epochs of '
        f'{run.train_images:,} images ({run.train_images_from})',
        f'  total batch:       {run.total_batch} (the lr assumes it: {run.per_device_batch} '
        f'per device x {devices:g} devices; otherwise --auto-scale-lr)',
    ])
