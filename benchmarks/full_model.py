"""Training step and inference of a whole detector / segmentor config on fake batches."""
import importlib
import os
from typing import List, Optional, Tuple

import torch
import torch.nn as nn
from mmengine.config import Config

from .core import Row, Setup, describe
from .timing import measure

# the mean number of classes in an ADE20K image is 10.5 (Zhou et al., "Semantic Understanding
# of Scenes through the ADE20K Dataset", 2017)
CLASSES_PER_IMAGE = 10


def full_model_rows(config_path: str, size: int, batch: int, setup: Setup,
                    root: str = '.') -> List[Row]:
    """Training step (loss + backward) and inference of a detector/segmentor config
    (``config_path`` relative to ``root``)."""
    name = os.path.splitext(os.path.basename(config_path))[0]
    label = f'{size}x{size}'
    if not os.path.isfile(os.path.join(root, config_path)):
        return [Row(name, label, 'full model', batch, status='skipped',
                    note=f'{config_path} does not exist yet')]
    try:
        model, batches = build_full_model(os.path.join(root, config_path), size, batch,
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


def build_full_model(path: str, size: int, batch: int, device: torch.device,
                     backbone: Optional[dict] = None) -> Tuple[nn.Module, dict]:
    """The config's model (random init, input size S) and preprocessed fake batches;
    ``backbone`` replaces the config's backbone, or, without a ``type``, updates its
    arguments."""
    # first: mmvit5 resolves the configs' mmdet::/mmseg:: bases without pkg_resources, which
    # a Python without setuptools lacks (mmvit5.compat)
    importlib.import_module('mmvit5')
    cfg = Config.fromfile(path)
    if backbone is not None:
        cfg.model.backbone = backbone if 'type' in backbone else {**cfg.model.backbone,
                                                                   **backbone}
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
    model = MODELS.build(cfg.model).to(device)
    packed = fake_batch(cfg, size, batch)
    batches = {'train': model.data_preprocessor(packed, True),
               'test': model.data_preprocessor(packed, False)}
    return model, batches


def num_classes(cfg: Config) -> int:
    """Classes of a detector's (first) box head, a Mask2Former's panoptic head or a segmentor's
    decode head (1 for a depth head)."""
    if 'decode_head' in cfg.model:
        return cfg.model.decode_head.get('num_classes', 1)
    if 'panoptic_head' in cfg.model:
        head = cfg.model.panoptic_head
        return head.num_things_classes + head.num_stuff_classes
    head = cfg.model.roi_head.bbox_head
    return (head[0] if isinstance(head, list) else head).num_classes


def fake_batch(cfg: Config, size: int, batch: int) -> dict:
    """``batch`` images of ``size`` x ``size`` with targets for the config's model."""
    if cfg.model.get('type') == 'DepthEstimator':
        return fake_depth_batch(size, batch)
    if 'decode_head' in cfg.model:
        return fake_seg_batch(num_classes(cfg), size, batch)
    panoptic = bool(cfg.model.get('panoptic_head', {}).get('num_stuff_classes'))
    return fake_det_batch(num_classes(cfg), size, batch, with_semantic=panoptic)


def fake_det_batch(classes: int, size: int, batch: int, with_semantic: bool = False) -> dict:
    from mmdet.testing import demo_mm_inputs
    return demo_mm_inputs(batch, image_shapes=[(3, size, size)] * batch, num_items=[4] * batch,
                          num_classes=classes, with_mask=True, with_semantic=with_semantic)


def fake_depth_batch(size: int, batch: int) -> dict:
    """Images with depth maps (metres, 0.5-10) for mmseg's DepthEstimator."""
    from mmengine.structures import PixelData
    from mmseg.structures import SegDataSample
    samples = []
    for _ in range(batch):
        sample = SegDataSample(metainfo=dict(img_shape=(size, size), ori_shape=(size, size),
                                             pad_shape=(size, size)))
        sample.gt_depth_map = PixelData(data=torch.rand(1, size, size) * 9.5 + 0.5)
        samples.append(sample)
    inputs = [torch.randint(0, 256, (3, size, size), dtype=torch.uint8) for _ in range(batch)]
    return dict(inputs=inputs, data_samples=samples)


def fake_seg_batch(classes: int, size: int, batch: int) -> dict:
    """Images whose label maps hold :data:`CLASSES_PER_IMAGE` classes, in vertical bands: a
    mask-classification head (Mask2Former) matches and samples one target per class present,
    so labels drawn per pixel (every class in every image) made the shrunk ADE20K recipe's step
    5.7x too slow on the CPU."""
    from mmengine.structures import PixelData
    from mmseg.structures import SegDataSample
    samples = []
    band = torch.arange(size) * min(classes, CLASSES_PER_IMAGE) // size
    for _ in range(batch):
        sample = SegDataSample(metainfo=dict(img_shape=(size, size), ori_shape=(size, size),
                                             pad_shape=(size, size)))
        present = torch.randperm(classes)[:CLASSES_PER_IMAGE]
        labels = present[band].expand(1, size, size).clone()
        sample.gt_sem_seg = PixelData(data=labels)
        samples.append(sample)
    inputs = [torch.randint(0, 256, (3, size, size), dtype=torch.uint8) for _ in range(batch)]
    return dict(inputs=inputs, data_samples=samples)
