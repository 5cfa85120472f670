"""Mask2Former (mmdet's instance and panoptic models, and the head of mmseg's semantic one)
as graphs of standard ONNX operators.

Two mmdet/mmcv routines keep the feature-map sizes in tensors and read them back as Python
numbers (``torch.split`` by sizes taken from a tensor), which ``torch.export`` cannot trace:
the deformable pixel decoder (``MSDeformAttnPixelDecoder``) and its multi-scale deformable
attention (mmcv's ``MultiScaleDeformableAttention``). :func:`exportable_mask2former` switches
the modules of an exported copy to subclasses that carry the sizes as (symbolic) integers and
compute the same numbers; the attention samples with ``F.grid_sample`` (mmcv's own PyTorch
path), ONNX's standard ``GridSample`` (opset 16 or later), so no custom op is needed.
"""
from typing import List, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from mmcv.ops.multi_scale_deform_attn import (
    MultiScaleDeformableAttention,
    multi_scale_deformable_attn_pytorch,
)
from mmdet.models.layers import MSDeformAttnPixelDecoder


class ExportableMSDeformAttn(MultiScaleDeformableAttention):
    """mmcv's ``MultiScaleDeformableAttention`` (its PyTorch computation) that also takes the
    level sizes as a list of (h, w) integers, ``level_sizes`` (symbolic under export), to split
    and sample the levels by; ``spatial_shapes`` (levels, 2), a tensor of the same sizes,
    normalises the offsets as in mmcv."""

    def forward(self, query: torch.Tensor, value: torch.Tensor = None,
                query_pos: torch.Tensor = None, key_padding_mask: torch.Tensor = None,
                reference_points: torch.Tensor = None, spatial_shapes: torch.Tensor = None,
                level_sizes: List[Tuple[int, int]] = None, **kwargs) -> torch.Tensor:
        if not self.batch_first:
            raise NotImplementedError('the exported pixel decoder is batch-first, as mmdet '
                                      "builds Mask2Former's")
        value = query if value is None else value
        identity = query
        if query_pos is not None:
            query = query + query_pos
        bs, num_query, _ = query.shape
        num_value = value.shape[1]
        value = self.value_proj(value)
        if key_padding_mask is not None:
            value = value.masked_fill(key_padding_mask[..., None], 0.0)
        value = value.view(bs, num_value, self.num_heads, -1)
        sampling_offsets = self.sampling_offsets(query).view(
            bs, num_query, self.num_heads, self.num_levels, self.num_points, 2)
        attention_weights = self.attention_weights(query).view(
            bs, num_query, self.num_heads, self.num_levels * self.num_points).softmax(-1)
        attention_weights = attention_weights.view(bs, num_query, self.num_heads,
                                                   self.num_levels, self.num_points)
        normalizer = torch.stack([spatial_shapes[..., 1], spatial_shapes[..., 0]], -1)
        sampling_locations = reference_points[:, :, None, :, None, :] + \
            sampling_offsets / normalizer[None, None, None, :, None, :]
        output = multi_scale_deformable_attn_pytorch(value, level_sizes, sampling_locations,
                                                     attention_weights)
        return self.dropout(self.output_proj(output)) + identity


class ExportablePixelDecoder(MSDeformAttnPixelDecoder):
    """mmdet's ``MSDeformAttnPixelDecoder.forward`` with the level sizes also as integers,
    ``level_sizes`` for the attention (:class:`ExportableMSDeformAttn`)."""

    def forward(self, feats: List[torch.Tensor]) -> Tuple[torch.Tensor, List[torch.Tensor]]:
        batch_size = feats[0].shape[0]
        inputs, masks, positions, shapes, spatial_shapes, references = [], [], [], [], [], []
        for i in range(self.num_encoder_levels):
            level_idx = self.num_input_levels - i - 1
            feat = feats[level_idx]
            height, width = feat.shape[-2:]
            # the sizes as a tensor too (mmdet's torch._shape_as_tensor does not export, and
            # new_tensor would bake the example's sizes in)
            feat_hw = torch.stack([feat.new_full((), side, dtype=torch.long)
                                   for side in (height, width)])
            mask = feat.new_zeros((batch_size, height, width), dtype=torch.bool)
            position = self.level_encoding.weight[i].view(1, -1, 1, 1) + \
                self.postional_encoding(mask)
            points = self.point_generator.single_level_grid_priors(
                (height, width), level_idx, device=feat.device)
            points = points / (feat_hw.unsqueeze(0).flip(dims=[0, 1]) * self.strides[level_idx])
            inputs.append(self.input_convs[i](feat).flatten(2).permute(0, 2, 1))
            masks.append(mask.flatten(1))
            positions.append(position.flatten(2).permute(0, 2, 1))
            shapes.append((height, width))
            spatial_shapes.append(feat_hw)
            references.append(points)
        references = torch.cat(references, dim=0)[None, :, None].repeat(
            batch_size, 1, self.num_encoder_levels, 1)
        memory = self.encoder(
            query=torch.cat(inputs, dim=1), query_pos=torch.cat(positions, dim=1),
            key_padding_mask=torch.cat(masks, dim=1),
            spatial_shapes=torch.cat(spatial_shapes).view(-1, 2), level_sizes=shapes,
            reference_points=references, level_start_index=None,
            valid_ratios=references.new_ones((batch_size, self.num_encoder_levels, 2)))
        memory = memory.permute(0, 2, 1)
        outs = torch.split(memory, [h * w for h, w in shapes], dim=-1)
        outs = [x.reshape(batch_size, -1, h, w) for x, (h, w) in zip(outs, shapes)]
        for i in range(self.num_input_levels - self.num_encoder_levels - 1, -1, -1):
            lateral = self.lateral_convs[i](feats[i])
            y = lateral + F.interpolate(outs[-1], size=lateral.shape[-2:], mode='bilinear',
                                        align_corners=False)
            outs.append(self.output_convs[i](y))
        return self.mask_feature(outs[-1]), outs[:self.num_outs]


def exportable_mask2former(model: nn.Module) -> int:
    """Switch the pixel decoders and deformable attentions of ``model`` (in place) to their
    exportable subclasses; returns how many modules were switched. The weights stay."""
    switched = 0
    for module in model.modules():
        for base, exportable in ((MSDeformAttnPixelDecoder, ExportablePixelDecoder),
                                 (MultiScaleDeformableAttention, ExportableMSDeformAttn)):
            if type(module) is base:
                module.__class__ = exportable
                switched += 1
    return switched


def query_logits(detector: nn.Module, x: torch.Tensor, height, width
                 ) -> Tuple[torch.Tensor, torch.Tensor]:
    """Class logits (N, Q, C + 1) and mask logits (N, Q, height, width) of an mmdet
    ``Mask2Former`` on the padded batch ``x``: its last decoder layer's predictions, the masks
    upsampled to ``x``'s size (``MaskFormerHead.predict``) and cropped to the image's
    (``MaskFormerFusionHead.predict``)."""
    cls_logits, mask_logits = detector.panoptic_head(detector.extract_feat(x), [])
    masks = F.interpolate(mask_logits[-1], size=x.shape[-2:], mode='bilinear',
                          align_corners=False)
    return cls_logits[-1], masks[:, :, :height, :width]


def mask_boxes(binary: torch.Tensor) -> torch.Tensor:
    """(..., 4) boxes x1, y1, x2, y2 (exclusive) around boolean masks (..., H, W): mmdet's
    ``mask2bbox``, zeros for an empty mask."""
    boxes = []
    for columns in (binary.any(-2), binary.any(-1)):  # along x, then y
        hit = columns.float()
        first = hit.argmax(-1)
        end = columns.shape[-1] - hit.flip(-1).argmax(-1)
        boxes.append((first, end))
    (x1, x2), (y1, y2) = boxes
    found = binary.flatten(-2).any(-1)
    return torch.stack((x1, y1, x2, y2), dim=-1).float() * found[..., None]


def mask_scores(probabilities: torch.Tensor, binary: torch.Tensor) -> torch.Tensor:
    """(...) mean probability inside each mask (..., H, W), as mmdet scores Mask2Former's."""
    inside = binary.float()
    return (probabilities * inside).flatten(-2).sum(-1) / (inside.flatten(-2).sum(-1) + 1e-6)


def query_instances(cls_logits: torch.Tensor, mask_logits: torch.Tensor, max_per_img: int,
                    num_things: int) -> Tuple[torch.Tensor, ...]:
    """mmdet's ``MaskFormerFusionHead.instance_postprocess``, batched, from the queries.

    The top ``max_per_img`` (query, class) pairs by class probability, each scored by its class
    probability times its mean mask probability inside the mask, boxed around its mask
    (``mask2bbox``). Stuff classes get score 0, where mmdet drops them. Rows are sorted by
    score.

    Args:
        cls_logits (Tensor): (N, Q, C + 1), the last "no object".
        mask_logits (Tensor): (N, Q, H, W).
        max_per_img (int): K.
        num_things (int): Classes below it are things.

    Returns:
        tuple[Tensor]: boxes (N, K, 4) xyxy pixels, scores (N, K), labels (N, K) int64, masks
        (N, K, H, W) probabilities.
    """
    probs = cls_logits.softmax(-1)[..., :-1]
    num_classes = probs.shape[-1]
    top, index = probs.flatten(1).topk(max_per_img, dim=1)
    labels = index % num_classes
    query = index // num_classes
    masks = torch.gather(mask_logits, 1, query[:, :, None, None].expand(
        -1, -1, mask_logits.shape[-2], mask_logits.shape[-1]))
    binary = masks > 0
    probabilities = masks.sigmoid()
    scores = top * mask_scores(probabilities, binary) * (labels < num_things)
    scores, order = scores.sort(dim=1, descending=True)
    labels = labels.gather(1, order)
    masks = probabilities.gather(1, order[:, :, None, None].expand_as(probabilities))
    boxes = mask_boxes(binary.gather(1, order[:, :, None, None].expand_as(binary)))
    return boxes, scores, labels, masks


class Mask2FormerInstances(nn.Module):
    """mmdet ``Mask2Former`` instance results as fixed-size tensors (:func:`query_instances`).

    Args:
        detector (nn.Module): mmdet ``Mask2Former``, eval mode.
        max_per_img (int, optional): K; default the config's ``test_cfg.max_per_image``.

    Shape:
        - Input: ``x`` (N, 3, H', W'), the padded batch; ``height`` and ``width`` of the
          images in it (H, W).
        - Output: boxes (N, K, 4) xyxy pixels, scores (N, K), labels (N, K) int64, masks
          (N, K, H, W) probabilities.
    """

    def __init__(self, detector: nn.Module, max_per_img: int = None) -> None:
        super().__init__()
        self.detector = detector
        fusion = detector.panoptic_fusion_head
        self.max_per_img = max_per_img or fusion.test_cfg.get('max_per_image', 100)
        self.num_things = fusion.num_things_classes

    def forward(self, x: torch.Tensor, height, width) -> Tuple[torch.Tensor, ...]:
        cls_logits, mask_logits = query_logits(self.detector, x, height, width)
        return query_instances(cls_logits, mask_logits, self.max_per_img, self.num_things)


class Mask2FormerQueries(nn.Module):
    """mmdet ``Mask2Former`` per-query class and mask logits: what the panoptic map is made
    of (:func:`mmvit5.deploy.panoptic.panoptic_map`, numpy).

    Shape:
        - Input: as :class:`Mask2FormerInstances`.
        - Output: class logits (N, Q, C + 1), the last one "no object"; mask logits
          (N, Q, H, W).
    """

    def __init__(self, detector: nn.Module) -> None:
        super().__init__()
        self.detector = detector

    def forward(self, x: torch.Tensor, height, width) -> Tuple[torch.Tensor, torch.Tensor]:
        return query_logits(self.detector, x, height, width)
