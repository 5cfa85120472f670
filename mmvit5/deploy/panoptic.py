"""The panoptic map of an exported Mask2Former, from its per-query logits, in numpy.

This module imports numpy and nothing else (no torch, no mmvit5): copy it beside ONNX Runtime
code on a machine without them. :func:`panoptic_map` is mmdet 3.3's
``MaskFormerFusionHead.panoptic_postprocess``, step for step, and gives the same map.
"""
import json
from typing import Dict

import numpy as np

INSTANCE_OFFSET = 1000  # mmdet's: a thing pixel holds label + instance_id * INSTANCE_OFFSET


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def panoptic_map(cls_logits: np.ndarray, mask_logits: np.ndarray, num_things_classes: int,
                 object_mask_thr: float = 0.8, iou_thr: float = 0.8,
                 filter_low_score: bool = False, **unused) -> np.ndarray:
    """mmdet's panoptic map of one image from Mask2Former's per-query outputs.

    Each query is kept if its most likely class is not "no object" and has probability above
    ``object_mask_thr``; every pixel goes to the kept query with the largest class probability
    times mask probability; a query whose pixels are fewer than ``iou_thr`` of its own mask
    (mask probability >= 0.5) is dropped.

    Args:
        cls_logits (ndarray): (Q, C + 1) class logits of one image, the last "no object" (the
            graph's ``cls_logits[i]``).
        mask_logits (ndarray): (Q, H, W) mask logits (``mask_logits[i]``); resize them to the
            original image first (bilinear) to get its map.
        num_things_classes (int): Classes ``0 .. num_things_classes - 1`` are things (one id
            per instance), the rest stuff.
        object_mask_thr, iou_thr, filter_low_score: The config's
            ``panoptic_fusion_head.test_cfg`` (the exported file's metadata has them:
            ``panoptic_map(c, m, **settings)`` with ``settings`` from
            :func:`settings_from_metadata`).

    Returns:
        ndarray: (H, W) int32: a stuff pixel holds its class, a thing pixel
        ``class + instance_id * 1000`` (ids from 1), a pixel of no segment ``C`` (mmdet's
        encoding, what its ``CocoPanopticMetric`` reads).
    """
    num_classes = cls_logits.shape[-1] - 1
    probs = _softmax(cls_logits.astype(np.float32))
    scores, labels = probs.max(-1), probs.argmax(-1)
    masks = 1.0 / (1.0 + np.exp(-mask_logits.astype(np.float32)))
    keep = (labels != num_classes) & (scores > object_mask_thr)
    scores, labels, masks = scores[keep], labels[keep], masks[keep]
    height, width = mask_logits.shape[-2:]
    panoptic = np.full((height, width), num_classes, dtype=np.int32)
    if not len(labels):
        return panoptic
    owner = (scores[:, None, None] * masks).argmax(0)
    instance_id = 1
    for k, label in enumerate(labels):
        mask = owner == k
        mask_area = int(mask.sum())
        original_area = int((masks[k] >= 0.5).sum())
        if filter_low_score:
            mask = mask & (masks[k] >= 0.5)
        if mask_area > 0 and original_area > 0:
            if mask_area / original_area < iou_thr:
                continue
            if label >= num_things_classes:
                panoptic[mask] = label
            else:
                panoptic[mask] = label + instance_id * INSTANCE_OFFSET
                instance_id += 1
    return panoptic


def settings_from_metadata(metadata: Dict[str, str]) -> Dict[str, object]:
    """:func:`panoptic_map`'s settings from an exported file's metadata
    (``session.get_modelmeta().custom_metadata_map`` in ONNX Runtime)."""
    keys = ('num_things_classes', 'object_mask_thr', 'iou_thr', 'filter_low_score')
    return {key: json.loads(metadata[key]) for key in keys}
