"""Mask R-CNN and Cascade Mask R-CNN from the padded batch to fixed-size instances, in ops that
export to standard ONNX (no custom-op library).

:class:`TwoStageInstances` runs a trained mmdet two-stage detector's test-time path, mmdet
3.3.0's semantics step by step, with every output of a size that depends on the input sizes
only: the RPN keeps ``test_cfg.rpn.max_per_img`` proposal rows per image and the RoI heads
``K`` detection rows, where mmdet keeps lists of varying length. Rows beyond what mmdet keeps
are carried along as invalid and never change a valid row: proposals are pooled and classified
one by one, and NMS only sees valid candidates (``nonzero`` -> ``NonZero``, so an image with
few candidates costs little in ONNX Runtime's greedy NMS). The ops that export to standard
ONNX: torchvision's ``nms`` (``NonMaxSuppression``) and ``roi_align`` (``RoiAlign``,
``half_pixel`` for ``aligned=True``, opset 16 or later).
"""
import math
from typing import List, Sequence, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor
from torchvision.ops import nms, roi_align

NMS_KEYS = {'type', 'iou_threshold', 'class_agnostic', 'split_thr'}


def decode_deltas(coder, priors: Tensor, deltas: Tensor, height, width) -> Tensor:
    """mmdet's ``DeltaXYWHBBoxCoder.decode`` (``delta2bbox``) of (M, 4) deltas on (M, 4)
    xyxy priors, clipped to the ``height`` x ``width`` image when the coder clips.

    The clip is written without mmdet's in-place writes into column slices (exported, those
    become ``ScatterND``).
    """
    means = deltas.new_tensor(coder.means)
    stds = deltas.new_tensor(coder.stds)
    deltas = deltas * stds + means
    centres = (priors[:, :2] + priors[:, 2:]) * 0.5
    sizes = priors[:, 2:] - priors[:, :2]
    shift = sizes * deltas[:, :2]
    max_ratio = abs(math.log(16 / 1000))  # decode's default wh_ratio_clip
    if coder.add_ctr_clamp:
        shift = shift.clamp(min=-coder.ctr_clamp, max=coder.ctr_clamp)
        scale = deltas[:, 2:].clamp(max=max_ratio)
    else:
        scale = deltas[:, 2:].clamp(min=-max_ratio, max=max_ratio)
    centres = centres + shift
    sizes = sizes * scale.exp()
    x1, y1 = (centres - sizes * 0.5).unbind(1)
    x2, y2 = (centres + sizes * 0.5).unbind(1)
    if coder.clip_border:
        x1, x2 = x1.clamp(min=0, max=width), x2.clamp(min=0, max=width)
        y1, y2 = y1.clamp(min=0, max=height), y2.clamp(min=0, max=height)
    return torch.stack([x1, y1, x2, y2], 1)


def ranked(scores: Tensor, dim: int = -1) -> Tuple[Tensor, Tensor]:
    """``scores`` sorted highest first along ``dim``, and their indices; equal scores keep
    their index order.

    That is the tie rule of ONNX's ``TopK``, which the graph gets under ``torch.export``
    (``topk`` of the whole length; ``sort(stable=True)`` has no ONNX translation). In eager
    PyTorch ``topk`` leaves the order of equal scores unspecified, a stable sort gives the
    rule. mmdet sorts with torch's unstable sort, whose order of equal scores differs between
    CPU and CUDA: exactly equal scores (e.g. a region where an RPN's ReLUs are all off), and
    scores that differ in the last bits between PyTorch and ONNX Runtime, are where the graph
    can keep other boxes than a given mmdet run.
    """
    if torch.compiler.is_exporting():
        return scores.topk(scores.shape[dim], dim=dim)
    return scores.sort(dim=dim, descending=True, stable=True)


def batched_nms_keep(boxes: Tensor, scores: Tensor, valid: Tensor, groups: Tensor,
                     nms_cfg: dict) -> Tensor:
    """Which of the (M, 4) ``boxes`` mmcv's ``batched_nms`` keeps when it is given the
    ``valid`` ones: an (M,) bool mask.

    As mmcv, NMS runs once over all groups (levels or classes), each group's boxes shifted by
    ``group * (largest coordinate of the valid boxes + 1)`` so that groups never overlap
    (``class_agnostic`` shifts none). The boxes are visited in :func:`ranked` order (NMS is
    handed their ranks as scores), so that exactly equal scores give the same boxes in
    PyTorch and in ONNX Runtime.
    """
    if not nms_cfg.get('class_agnostic', False):
        largest = torch.where(valid[:, None], boxes, float('-inf')).max()
        boxes = boxes + (groups.to(boxes) * (largest + 1))[:, None]
    index = valid.nonzero()[:, 0]
    index = index[ranked(scores[index])[1]]
    ranks = torch.arange(index.shape[0], 0, -1, device=boxes.device).to(boxes.dtype)
    # mmcv's kernel compares float32 IoUs with a float32 threshold, as NonMaxSuppression does
    threshold = float(torch.tensor(nms_cfg['iou_threshold'], dtype=torch.float32))
    kept = index[nms(boxes[index], ranks, threshold)]
    return scores.new_zeros(scores.shape).scatter(0, kept, 1.0) > 0


def gather_rows(values: Tensor, index: Tensor) -> Tensor:
    """``values`` (N, M, ...) at the (N, R) row ``index``: (N, R, ...)."""
    index = index.view(*index.shape, *(1, ) * (values.dim() - 2))
    return values.gather(1, index.expand(-1, -1, *values.shape[2:]))


def top_rows(scores: Tensor, count: int, fill: float, *values: Tensor) -> Tuple[Tensor, ...]:
    """The ``count`` highest of (N, M) ``scores``, highest first, and the same rows of each
    (N, M, ...) tensor of ``values``. ``count`` rows of score ``fill`` and zero values are
    appended first, so that an M below ``count`` (e.g. a small image's anchors) still gives
    ``count`` rows."""
    scores = F.pad(scores, (0, count), value=fill)
    values = [F.pad(v, (0, 0) * (v.dim() - 2) + (0, count)) for v in values]
    scores, index = (t[:, :count] for t in ranked(scores, dim=1))
    return (scores, *(gather_rows(v, index) for v in values))


def extract_rois(extractor, feats: Sequence[Tensor], rois: Tensor) -> Tensor:
    """mmdet's ``SingleRoIExtractor`` on (M, 5) ``rois`` (image index, xyxy): RoIAlign on the
    level each RoI maps to (``map_roi_levels``). Every level pools every RoI and the RoI's own
    level is selected, so no shape depends on how the RoIs spread over the levels."""
    feats = feats[:extractor.num_inputs]
    rois = rois.type_as(feats[0])
    levels = extractor.map_roi_levels(rois, len(feats))
    pooled = None
    for level, (feat, layer) in enumerate(zip(feats, extractor.roi_layers)):
        out = roi_align(feat, rois, layer.output_size, layer.spatial_scale,
                        layer.sampling_ratio, layer.aligned)
        pooled = out if pooled is None else torch.where(
            (levels == level)[:, None, None, None], out, pooled)
    return pooled


def _paste_weights(low: Tensor, high: Tensor, length, size: int) -> Tensor:
    """(M, length, size) weights of ``grid_sample``'s bilinear taps (``align_corners=False``,
    zero padding) that map a ``size``-long mask row onto ``length`` image pixels between
    ``low`` and ``high``, zero outside the one-pixel margin mmdet's CPU paste is limited to."""
    pixels = torch.arange(length, device=low.device).to(low.dtype)
    grid = (pixels + 0.5 - low[:, None]) / (high - low)[:, None] * 2 - 1
    grid = torch.where(torch.isinf(grid), 0.0, grid)  # as mmdet does for a zero-wide box
    position = ((grid + 1) * size - 1) / 2
    taps = torch.arange(size, device=low.device).to(low.dtype)
    weights = (1 - (position[..., None] - taps).abs()).clamp(min=0)
    inside = (pixels >= low[:, None].floor() - 1) & (pixels < high[:, None].ceil() + 1)
    return weights * inside[..., None]


def paste_masks(masks: Tensor, boxes: Tensor, height, width) -> Tensor:
    """mmdet's ``_do_paste_mask`` (CPU: one box at a time, ``skip_empty``): (M, S, S) mask
    probabilities in their (M, 4) boxes, resampled onto the ``height`` x ``width`` image.

    ``grid_sample`` on a grid whose x depends on the column only and y on the row only is
    separable: the paste is two batched matmuls with the bilinear weight matrices, and needs
    no (M, H, W, 2) grid.
    """
    rows = _paste_weights(boxes[:, 1], boxes[:, 3], height, masks.shape[1])
    cols = _paste_weights(boxes[:, 0], boxes[:, 2], width, masks.shape[2])
    return rows @ masks @ cols.transpose(1, 2)


class TwoStageInstances(nn.Module):
    """An mmdet Mask R-CNN or Cascade Mask R-CNN from the preprocessed batch to instances of
    a fixed count, equal to its ``test_step`` on the unpadded images, in ops that export to
    standard ONNX.

    Covers: ``RPNHead`` (anchors, top ``nms_pre`` per level, delta decoding, per-level NMS,
    ``min_bbox_size``, ``max_per_img``); ``StandardRoIHead`` and ``CascadeRoIHead`` (stages
    refining the RoIs with the top class's deltas, class logits averaged over the stages, mask
    probabilities averaged over the stages' mask heads); ``SingleRoIExtractor`` with RoIAlign;
    the box head's softmax, score threshold and per-class NMS; ``FCNMaskHead`` masks pasted at
    the input size and thresholded at ``mask_thr_binary``.

    Args:
        detector (nn.Module): mmdet ``MaskRCNN`` / ``CascadeRCNN`` (a ``TwoStageDetector``
            with a mask head), eval mode.
        max_per_img (int, optional): K, the detection rows per image. Defaults to the
            config's ``test_cfg.rcnn.max_per_img``.

    Shape:
        - x: (N, 3, Hp, Wp), normalised and padded as the config's data preprocessor leaves
          the batch (zeros at the bottom and right up to multiples of ``pad_size_divisor``).
        - image_size: (H, W), the unpadded size (ints; symbolic under ``torch.export``).
        - Outputs: ``boxes`` (N, K, 4) xyxy in input pixels, ``scores`` (N, K), ``labels``
          (N, K) int64, ``masks`` (N, K, H, W): uint8 0/1 at ``mask_thr_binary`` (float
          probabilities where it is negative). Detections come highest score first; rows past
          them have score 0, box 0, label 0 and an empty mask.

    Raises:
        ValueError: For a detector part this module does not cover, naming it and why.
    """

    # NMS and the top-K selections run image by image: the exported batch is the example's
    batch_fixed = True

    def __init__(self, detector: nn.Module, max_per_img: int = None) -> None:
        super().__init__()
        check_exportable(detector)
        self.detector = detector
        self.rpn_cfg = detector.test_cfg.rpn
        self.rcnn_cfg = detector.test_cfg.rcnn
        self.max_per_img = max_per_img or self.rcnn_cfg.max_per_img
        roi_head = detector.roi_head
        self.cascade = hasattr(roi_head, 'num_stages')
        self.bbox_heads = list(roi_head.bbox_head) if self.cascade else [roi_head.bbox_head]
        self.mask_heads = list(roi_head.mask_head) if self.cascade else [roi_head.mask_head]
        extractors = (roi_head.bbox_roi_extractor, roi_head.mask_roi_extractor)
        self.bbox_extractors, self.mask_extractors = (
            list(e) if isinstance(e, nn.ModuleList) else [e] * len(self.bbox_heads)
            for e in extractors)

    def forward(self, x: Tensor, height, width) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
        feats = self.detector.extract_feat(x)
        proposals, valid = self.propose(feats, height, width)
        boxes, scores, labels = self.detect(feats, proposals, valid, height, width)
        masks = self.segment(feats, boxes, labels, scores > 0, height, width)
        return boxes, scores, labels, masks

    def propose(self, feats: Sequence[Tensor], height, width) -> Tuple[Tensor, Tensor]:
        """mmdet's ``RPNHead.predict`` (``rescale=False``): (N, P, 4) proposals, P the RPN's
        ``max_per_img``, and the (N, P) mask of those mmdet would return."""
        head, cfg = self.detector.rpn_head, self.rpn_cfg
        cls_scores, deltas = head(feats)
        count = cls_scores[0].shape[0]
        priors = head.prior_generator.grid_priors([s.shape[-2:] for s in cls_scores],
                                                  dtype=feats[0].dtype, device=feats[0].device)
        nms_pre = cfg.get('nms_pre', -1)
        level_scores, level_boxes, level_ids = [], [], []
        for level, (score, delta, prior) in enumerate(zip(cls_scores, deltas, priors)):
            score = score.permute(0, 2, 3, 1).reshape(count, -1, head.cls_out_channels)
            score = score.sigmoid()[..., 0] if head.use_sigmoid_cls else score.softmax(-1)[..., 0]
            delta = delta.permute(0, 2, 3, 1).reshape(count, -1, 4)
            prior = prior.expand(count, -1, -1)
            if nms_pre > 0:
                top = torch.sym_min(nms_pre, score.shape[1])
                score, index = (t[:, :top] for t in ranked(score, dim=1))
                prior, delta = gather_rows(prior, index), gather_rows(delta, index)
            boxes = decode_deltas(head.bbox_coder, prior.reshape(-1, 4), delta.reshape(-1, 4),
                                  height, width)
            level_scores.append(score)
            level_boxes.append(boxes.view(count, -1, 4))
            level_ids.append(torch.full(score.shape[1:], level, dtype=torch.long,
                                        device=score.device))
        scores, boxes, ids = (torch.cat(level_scores, 1), torch.cat(level_boxes, 1),
                              torch.cat(level_ids))
        valid = torch.ones_like(scores, dtype=torch.bool)
        if cfg.get('min_bbox_size', -1) >= 0:
            sizes = boxes[..., 2:] - boxes[..., :2]
            valid = (sizes > cfg.min_bbox_size).all(-1)
        keep = torch.stack([batched_nms_keep(boxes[i], scores[i], valid[i], ids, cfg.nms)
                            for i in range(count)])
        scores, boxes = top_rows(torch.where(keep & valid, scores, -1.0), cfg.max_per_img, -1.0,
                                 boxes)
        return boxes, scores >= 0

    def detect(self, feats: Sequence[Tensor], proposals: Tensor, valid: Tensor, height,
               width) -> Tuple[Tensor, Tensor, Tensor]:
        """mmdet's ``predict_bbox`` of the RoI head on the proposals: (N, K, 4) boxes, (N, K)
        scores (0 past the detections) and (N, K) labels."""
        count, per_image = proposals.shape[:2]
        image = torch.arange(count, device=proposals.device).repeat_interleave(per_image)
        rois = proposals.reshape(-1, 4)
        logits, deltas = [], None
        for stage, (extractor, head) in enumerate(zip(self.bbox_extractors, self.bbox_heads)):
            if stage:  # cascade: the previous stage's top class and deltas refine the RoIs
                rois = self._regress(self.bbox_heads[stage - 1], rois,
                                     logits[-1][:, :-1].argmax(1), deltas, height, width)
            with_image = torch.cat([image[:, None].to(rois), rois], 1)
            cls_score, deltas = head(extract_rois(extractor, feats, with_image))
            logits.append(cls_score)
        head = self.bbox_heads[-1]
        scores = F.softmax(sum(logits) / len(logits), dim=-1)[:, :-1]
        classes = scores.shape[1]
        if head.reg_class_agnostic:
            boxes = decode_deltas(head.bbox_coder, rois, deltas, height, width)
            boxes = boxes[:, None].expand(-1, classes, -1)
        else:
            boxes = decode_deltas(head.bbox_coder, rois.repeat_interleave(classes, 0),
                                  deltas.reshape(-1, 4), height, width)
        # candidates in mmdet's multiclass_nms order: proposal-major, then class
        boxes = boxes.reshape(count, -1, 4)
        scores = scores.reshape(count, -1)
        labels = torch.arange(classes, device=scores.device).repeat(per_image)
        candidates = (scores > self.rcnn_cfg.score_thr) & valid.repeat_interleave(classes, 1)
        keep = torch.stack([batched_nms_keep(boxes[i], scores[i], candidates[i], labels,
                                             self.rcnn_cfg.nms) for i in range(count)])
        scores, boxes, labels = top_rows(torch.where(keep & candidates, scores, 0.0),
                                         self.max_per_img, 0.0, boxes,
                                         labels.expand(count, -1))
        found = scores > 0
        return boxes * found[..., None], scores, labels * found

    @staticmethod
    def _regress(head, rois: Tensor, labels: Tensor, deltas: Tensor, height, width) -> Tensor:
        """mmdet's ``BBoxHead.regress_by_class``: each RoI moved by its class's deltas."""
        if not head.reg_class_agnostic:
            deltas = deltas.view(deltas.shape[0], -1, 4).gather(
                1, labels[:, None, None].expand(-1, 1, 4))[:, 0]
        return decode_deltas(head.bbox_coder, rois, deltas, height, width)

    def segment(self, feats: Sequence[Tensor], boxes: Tensor, labels: Tensor, found: Tensor,
                height, width) -> Tensor:
        """mmdet's ``predict_mask`` (``rescale=True`` at scale 1): (N, K, H, W) masks of the
        detections, empty past them."""
        count, per_image = boxes.shape[:2]
        image = torch.arange(count, device=boxes.device).repeat_interleave(per_image)
        rois = torch.cat([image[:, None].to(boxes), boxes.reshape(-1, 4)], 1)
        probabilities = 0
        for extractor, head in zip(self.mask_extractors, self.mask_heads):
            logits = head(extract_rois(extractor, feats, rois))
            if not head.class_agnostic:
                logits = logits.gather(1, labels.reshape(-1, 1, 1, 1).expand(
                    -1, 1, *logits.shape[2:]))
            probabilities = probabilities + logits[:, 0].sigmoid()
        probabilities = probabilities / len(self.mask_heads)
        masks = paste_masks(probabilities, boxes.reshape(-1, 4), height, width)
        masks = masks.view(count, per_image, *masks.shape[1:]) * found[..., None, None]
        threshold = self.rcnn_cfg.mask_thr_binary
        return (masks >= threshold).to(torch.uint8) if threshold >= 0 else masks


def check_exportable(detector: nn.Module) -> None:
    """Raise a ValueError naming the first part of ``detector`` that
    :class:`TwoStageInstances` does not cover, and why."""
    problems: List[str] = []
    rpn_head = getattr(detector, 'rpn_head', None)
    roi_head = getattr(detector, 'roi_head', None)
    if rpn_head is None or roi_head is None:
        raise ValueError(f'{type(detector).__name__} is no two-stage detector (rpn_head and '
                         'roi_head): TwoStageInstances exports Mask R-CNN and Cascade Mask '
                         'R-CNN only')
    names = lambda m: type(m).__name__  # noqa: E731
    if names(rpn_head) != 'RPNHead':
        problems.append(f'rpn_head {names(rpn_head)}: only RPNHead\'s proposals are written')
    if names(roi_head) not in ('StandardRoIHead', 'CascadeRoIHead'):
        problems.append(f'roi_head {names(roi_head)}: only StandardRoIHead and CascadeRoIHead '
                        'are written')
    elif roi_head.with_shared_head:
        problems.append('roi_head.shared_head: a shared RoI head (C4) is not written')
    elif not roi_head.with_mask:
        problems.append('roi_head without a mask head: the outputs include masks')
    else:
        stages = lambda m: list(m) if isinstance(m, nn.ModuleList) else [m]  # noqa: E731
        for head in [rpn_head] + stages(roi_head.bbox_head):
            if names(head.bbox_coder) != 'DeltaXYWHBBoxCoder':
                problems.append(f'{names(head.bbox_coder)}: only DeltaXYWHBBoxCoder is decoded')
        for head in stages(roi_head.bbox_head):
            if head.custom_cls_channels:
                problems.append(f'{names(head.loss_cls)}: a custom class activation; the '
                                'export applies softmax')
        for head in stages(roi_head.mask_head):
            if names(head) != 'FCNMaskHead':
                problems.append(f'mask_head {names(head)}: only FCNMaskHead is written')
        for extractor in (stages(roi_head.bbox_roi_extractor)
                          + stages(roi_head.mask_roi_extractor)):
            if names(extractor) != 'SingleRoIExtractor':
                problems.append(f'{names(extractor)}: only SingleRoIExtractor is written')
                continue
            for layer in extractor.roi_layers:
                if names(layer) != 'RoIAlign' or getattr(layer, 'pool_mode', 'avg') != 'avg':
                    problems.append(f'roi_layer {names(layer)} ({getattr(layer, "pool_mode", "")})'
                                    ': ONNX RoiAlign is average-pooled RoIAlign only')
    for stage, cfg in (('rpn', detector.test_cfg.get('rpn')),
                       ('rcnn', detector.test_cfg.get('rcnn'))):
        nms_cfg = (cfg or {}).get('nms') or {}
        if nms_cfg.get('type', 'nms') != 'nms' or set(nms_cfg) - NMS_KEYS:
            problems.append(f'test_cfg.{stage}.nms={dict(nms_cfg)}: only plain NMS (type '
                            f"'nms', keys {sorted(NMS_KEYS)}) is a standard ONNX op "
                            '(NonMaxSuppression); soft NMS rescores boxes')
    if problems:
        raise ValueError(f'{type(detector).__name__} cannot be exported to standard ONNX ops: '
                         + '; '.join(problems))
