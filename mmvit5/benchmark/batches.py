"""Packed, not yet preprocessed batches of random images and targets for one model step."""
import torch
from mmengine.config import Config


def num_classes(cfg: Config) -> int:
    """Classes of a detector's (first) box head or a segmentor's decode head."""
    if 'decode_head' in cfg.model:
        return cfg.model.decode_head.num_classes
    head = cfg.model.roi_head.bbox_head
    return (head[0] if isinstance(head, list) else head).num_classes


def fake_batch(cfg: Config, size: int, batch: int) -> dict:
    """``batch`` images of ``size`` x ``size`` with targets for the config's model."""
    if 'decode_head' in cfg.model:
        return fake_seg_batch(num_classes(cfg), size, batch)
    return fake_det_batch(num_classes(cfg), size, batch)


def fake_det_batch(classes: int, size: int, batch: int) -> dict:
    from mmdet.testing import demo_mm_inputs
    return demo_mm_inputs(batch, image_shapes=[(3, size, size)] * batch, num_items=[4] * batch,
                          num_classes=classes, with_mask=True)


def fake_seg_batch(classes: int, size: int, batch: int) -> dict:
    from mmengine.structures import PixelData
    from mmseg.structures import SegDataSample
    samples = []
    for _ in range(batch):
        sample = SegDataSample(metainfo=dict(img_shape=(size, size), ori_shape=(size, size),
                                             pad_shape=(size, size)))
        labels = torch.randint(0, classes, (1, size, size))
        sample.gt_sem_seg = PixelData(data=labels)
        samples.append(sample)
    inputs = [torch.randint(0, 256, (3, size, size), dtype=torch.uint8) for _ in range(batch)]
    return dict(inputs=inputs, data_samples=samples)
