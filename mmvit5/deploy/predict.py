"""An exported whole model in ONNX Runtime as mmdet/mmseg predictions.

:class:`OnnxModel` runs the file on a loader's batch and returns the data samples that the
model's own ``test_step`` returns (results rescaled to each image's original size as mmdet's
and mmseg's post-processing does), so that the config's evaluator (``CocoMetric``,
``IoUMetric``, ``CocoPanopticMetric``, ``DepthMetric``) and visualiser take them unchanged
(``tools/demo.py --onnx``). Needs torch and mmdet/mmseg; ONNX Runtime alone needs none of
this (docs/en/user_guides/onnx.md has a snippet per task).
"""
import json
from typing import Dict, List, Optional, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from .onnx import ort_session
from .panoptic import panoptic_map, settings_from_metadata
from .slide import slide_windows, windows_from_metadata


def read_metadata(session) -> Dict[str, object]:
    """The ``metadata_props`` an export wrote (:func:`~.build.model_metadata`), decoded."""
    found = session.get_modelmeta().custom_metadata_map
    decoded = {}
    for key, value in found.items():
        try:
            decoded[key] = json.loads(value)
        except ValueError:
            decoded[key] = value
    return decoded


def _resize(x: torch.Tensor, size: Sequence[int], align_corners: bool = False) -> torch.Tensor:
    """(N, C, h, w) bilinear to ``size``; ``x`` itself at that size already."""
    if tuple(x.shape[-2:]) == tuple(size):
        return x
    return F.interpolate(x, size=tuple(size), mode='bilinear', align_corners=align_corners)


class OnnxModel:
    """A whole-model ONNX file (``tools/export_onnx.py --part model``) in ONNX Runtime.

    Args:
        path (str): The ``.onnx`` file.
        threads (int, optional): ONNX Runtime's intra-op threads.
    """

    def __init__(self, path: str, threads: Optional[int] = None) -> None:
        self.session = ort_session(path, threads)
        self.metadata = read_metadata(self.session)
        if 'task' not in self.metadata:
            raise ValueError(f'{path} has no task in its metadata: it is not a whole-model '
                             'export of tools/export_onnx.py (--part model)')
        self.task = self.metadata['task']
        self.output_names = [o.name for o in self.session.get_outputs()]
        self.windows = windows_from_metadata(self.session.get_modelmeta().custom_metadata_map)

    @property
    def dataset_meta(self) -> Dict[str, list]:
        """Classes and palette (colours as tuples, as mmdet's visualiser takes them)."""
        meta = {k: self.metadata[k] for k in ('classes', 'palette') if k in self.metadata}
        if 'palette' in meta:
            meta['palette'] = [tuple(c) for c in meta['palette']]
        return meta

    def __call__(self, images: np.ndarray) -> Dict[str, np.ndarray]:
        """Outputs by name for ``images`` (N, 3, H, W) float32, 0-255, loader's order; a
        dynamic dense graph whose config slides runs window by window
        (:func:`~.slide.slide_windows`), as the config's test does."""
        images = np.ascontiguousarray(images, np.float32)
        if self.windows is not None:
            return {self.output_names[0]: slide_windows(
                lambda x: self.session.run(None, {'image': x})[0], images, **self.windows)}
        outputs = self.session.run(None, {'image': images})
        return dict(zip(self.output_names, outputs))

    def predict(self, data: dict) -> list:
        """Data samples with predictions for a loader's batch (``inputs``: (3, H, W) images of
        one size; ``data_samples`` with their metainfo), as ``test_step`` returns them."""
        images = torch.stack([x.float() for x in data['inputs']]).numpy()
        outputs = {k: torch.from_numpy(v) for k, v in self(images).items()}
        samples = []
        for i, sample in enumerate(data['data_samples']):
            sample = sample.clone()
            getattr(self, f'_{self.task}')(sample, {k: v[i] for k, v in outputs.items()})
            samples.append(sample)
        return samples

    def _semantic(self, sample, out: Dict[str, torch.Tensor]) -> None:
        from mmengine.structures import PixelData
        logits = _resize(out['logits'][None], sample.ori_shape,
                         self.metadata.get('align_corners', False))[0]
        labels = logits.argmax(0, keepdim=True) if logits.shape[0] > 1 else \
            (logits.sigmoid() > 0.5).long()  # mmseg's threshold for one-class heads
        sample.set_data(dict(seg_logits=PixelData(data=logits),
                             pred_sem_seg=PixelData(data=labels)))

    def _depth(self, sample, out: Dict[str, torch.Tensor]) -> None:
        from mmengine.structures import PixelData
        depth = _resize(out['depth'][None], sample.ori_shape,
                        self.metadata.get('align_corners', False))[0]
        sample.set_data(dict(pred_depth_map=PixelData(data=depth)))

    @staticmethod
    def _instance_data(boxes, scores, labels, masks):
        from mmengine.structures import InstanceData
        keep = scores > 0  # rows past the detections
        return InstanceData(bboxes=boxes[keep], scores=scores[keep], labels=labels[keep],
                            masks=masks[keep] >= 0.5)

    def _instances(self, sample, out: Dict[str, torch.Tensor]) -> None:
        """Rescaled as mmdet does: a two-stage detector's boxes by the scale factor and its
        masks resized; Mask2Former's mask logits resized first, then boxed and scored
        anew (its score is class probability times mean mask probability)."""
        if not self.metadata.get('boxes_from_masks'):
            scale = out['boxes'].new_tensor(sample.scale_factor).repeat(2)
            # 0/1 (uint8) or probabilities, at the input size; mmdet pastes at the original
            masks = _resize(out['masks'][None].float(), sample.ori_shape)[0]
            sample.pred_instances = self._instance_data(out['boxes'] / scale, out['scores'],
                                                        out['labels'], masks)
            return
        from .mask2former import mask_boxes, mask_scores
        probabilities = out['masks']
        logits = _resize(torch.logit(probabilities, eps=1e-6)[None], sample.ori_shape)[0]
        before = mask_scores(probabilities, probabilities > 0.5)
        classes = torch.where(before > 0, out['scores'] / before.clamp(min=1e-12), 0.0)
        masks = logits.sigmoid()
        scores = classes * mask_scores(masks, logits > 0)
        sample.pred_instances = self._instance_data(mask_boxes(logits > 0), scores,
                                                    out['labels'], masks)

    def _panoptic(self, sample, out: Dict[str, torch.Tensor]) -> None:
        """mmdet's panoptic map (and, where the config asks, its instances) of the queries,
        the mask logits resized to the original image first, as mmdet does."""
        from mmengine.structures import PixelData
        masks = _resize(out['mask_logits'][None], sample.ori_shape)[0]
        settings = settings_from_metadata(self.session.get_modelmeta().custom_metadata_map)
        panoptic = panoptic_map(out['cls_logits'].numpy(), masks.numpy(), **settings)
        sample.pred_panoptic_seg = PixelData(sem_seg=torch.from_numpy(panoptic)[None])
        if self.metadata.get('instance_on'):
            from .mask2former import query_instances
            found = query_instances(out['cls_logits'][None], masks[None],
                                    self.metadata['max_per_image'],
                                    self.metadata['num_things_classes'])
            sample.pred_instances = self._instance_data(*(t[0] for t in found))


def evaluate(evaluator, batches: List[dict], predict) -> Dict[str, float]:
    """``evaluator``'s metrics for ``predict(batch)`` (a model's ``test_step``, or
    :meth:`OnnxModel.predict`) over ``batches`` of one loader."""
    count = 0
    with torch.no_grad():  # as mmengine's test loop runs test_step
        for batch in batches:
            samples = predict(batch)
            evaluator.process(data_samples=samples, data_batch=batch)
            count += len(samples)
    return evaluator.evaluate(count)
