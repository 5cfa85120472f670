"""The module that is exported for a config: the whole model (image to results), or its
backbone (+ neck), chosen by the model's kind.

- mmseg ``EncoderDecoder`` (UperNet, Mask2Former): ``semantic``, ``logits`` (N, C, H, W);
- mmseg ``DepthEstimator``: ``depth``, ``depth`` (N, 1, H, W);
- mmdet ``Mask2Former`` with panoptic off, and two-stage detectors (Mask R-CNN, Cascade):
  ``instances``, ``boxes``, ``scores``, ``labels``, ``masks``;
- mmdet ``Mask2Former`` with panoptic on: ``panoptic``, ``cls_logits``, ``mask_logits``.

Every graph starts with the data preprocessor (:class:`~.preprocess.Preprocess`) and takes
``image`` (N, 3, H, W), float32, 0-255, in the loader's channel order.
"""
import json
from typing import Dict, List, Optional, Tuple

import torch
import torch.nn as nn

from .preprocess import Preprocess
from .wrappers import BackboneWithNeck, coarsest_stride, example_input

PARTS = ('model', 'backbone', 'neck')
OUTPUTS = {
    'semantic': ('logits', ),
    'depth': ('depth', ),
    'instances': ('boxes', 'scores', 'labels', 'masks'),
    'panoptic': ('cls_logits', 'mask_logits'),
}
# mmcv layers with no standard ONNX operator (mmdeploy ships custom ops for some of them)
NOT_EXPORTABLE = {
    'ModulatedDeformConv2d': 'modulated deformable convolution (DCNv2) has no standard ONNX '
                             'operator',
    'DeformConv2d': 'deformable convolution (DCN) has no standard ONNX operator',
    'DeformRoIPool': 'deformable RoI pooling has no standard ONNX operator',
    'RoIPool': 'max RoI pooling has no standard ONNX operator (RoiAlign is average pooling)',
    'CARAFE': 'CARAFE upsampling has no standard ONNX operator',
    'CrissCrossAttention': 'criss-cross attention has no standard ONNX operator',
    'PSAMask': 'PSANet\'s mask has no standard ONNX operator',
}


class NotExportable(ValueError):
    """A config whose model has a layer or a kind this exporter has no graph for."""


class Deployed(nn.Module):
    """The exported whole model: :class:`~.preprocess.Preprocess`, then the task module.

    Args:
        preprocess (Preprocess): Channel order, mean/std, padding.
        task (nn.Module): ``task(x, height, width)``: the padded batch (N, 3, H', W') and
            the images' height and width (ints, symbolic under export).
        kind (str): ``semantic``, ``depth``, ``instances`` or ``panoptic``.
        metadata (dict): Written into the ONNX file (classes, palette, settings that
            post-processing reads).

    Shape:
        - Input: ``image`` (N, 3, H, W), float32, 0-255, in the loader's channel order.
        - Output: :data:`OUTPUTS` of ``kind``.
    """

    def __init__(self, preprocess: Preprocess, task: nn.Module, kind: str,
                 metadata: Dict[str, object]) -> None:
        super().__init__()
        self.preprocess = preprocess
        self.task = task
        self.kind = kind
        self.output_names = list(OUTPUTS[kind])
        self.metadata = metadata

    @property
    def size_divisor(self) -> Optional[int]:
        return self.preprocess.size_divisor

    @property
    def batch_fixed(self) -> bool:
        """Whether the graph's batch must be the example's (two-stage detectors)."""
        return getattr(self.task, 'batch_fixed', False)

    def forward(self, image: torch.Tensor):
        return self.task(self.preprocess(image), image.shape[2], image.shape[3])


def model_kind(model: nn.Module) -> str:
    """:data:`OUTPUTS` key of an mmdet/mmseg model; :class:`NotExportable` where there is no
    whole-model graph for it."""
    name = type(model).__name__
    if name == 'DepthEstimator':
        return 'depth'
    if hasattr(model, 'decode_head'):
        return 'semantic'
    if hasattr(model, 'panoptic_fusion_head') and hasattr(model, 'panoptic_head'):
        test_cfg = model.panoptic_fusion_head.test_cfg or {}
        return 'panoptic' if test_cfg.get('panoptic_on', True) and \
            model.panoptic_fusion_head.num_stuff_classes else 'instances'
    if hasattr(model, 'roi_head') and hasattr(model, 'rpn_head'):
        return 'instances'
    raise NotExportable(
        f'{name} has no whole-model ONNX graph here (semantic and depth segmentors, '
        'Mask2Former, Mask R-CNN and Cascade have one); export --part neck and run its head '
        'in PyTorch or through mmdeploy')


def check_exportable(model: nn.Module) -> None:
    """Raise :class:`NotExportable` naming the first layer of ``model`` that has no standard
    ONNX operator, where it sits and why."""
    for name, module in model.named_modules():
        for base in type(module).__mro__:
            if base.__name__ in NOT_EXPORTABLE:
                raise NotExportable(
                    f'{name} ({type(module).__name__}) cannot be exported: '
                    f'{NOT_EXPORTABLE[base.__name__]}, and this exporter writes standard '
                    'ONNX operators only; replace that layer in the config (e.g. a plain '
                    'Conv2d / RoIAlign) or use mmdeploy with its custom-op library')


def task_module(model: nn.Module, kind: str, dynamic: bool = False) -> nn.Module:
    """The module of ``kind`` from the padded batch and (height, width) to the outputs."""
    if kind in ('semantic', 'depth'):
        from .dense import DenseMap
        return DenseMap(model, one_window=dynamic)
    if hasattr(model, 'panoptic_head'):
        from .mask2former import Mask2FormerInstances, Mask2FormerQueries
        return Mask2FormerQueries(model) if kind == 'panoptic' else Mask2FormerInstances(model)
    from .two_stage import TwoStageInstances
    return TwoStageInstances(model)


def dataset_meta(cfg, model: nn.Module) -> Dict[str, object]:
    """Classes and palette: the checkpoint's, else the config's test dataset's (its class's
    ``METAINFO`` updated by the config's ``metainfo``, as the dataset merges them)."""
    meta = dict(getattr(model, 'dataset_meta', None) or {})
    dataset = (cfg.get('test_dataloader') or {}).get('dataset') or {}  # None: a train-only cfg
    if 'classes' not in meta and dataset.get('type'):
        registry = __import__(f'{cfg.get("default_scope", "mmdet")}.registry',
                              fromlist=['DATASETS']).DATASETS
        meta = dict(getattr(registry.get(dataset.type), 'METAINFO', {}),
                    **(dataset.get('metainfo') or {}))
    return {k: [list(c) for c in v] if k == 'palette' else list(v)
            for k, v in meta.items() if k in ('classes', 'palette') and v is not None}


def model_metadata(cfg, model: nn.Module, kind: str, preprocess: Preprocess,
                   dynamic: bool) -> Dict[str, str]:
    """What the ONNX file records about itself (``metadata_props``, JSON values): read back
    by :func:`mmvit5.deploy.predict.read_metadata`."""
    meta = dict(task=kind, outputs=list(OUTPUTS[kind]), dynamic=dynamic,
                flip_channels=preprocess.flip_channels, size_divisor=preprocess.size_divisor,
                **dataset_meta(cfg, model))
    if kind in ('semantic', 'depth'):
        from .dense import test_mode
        head = model.decode_head if kind == 'semantic' else model
        meta['align_corners'] = bool(getattr(head, 'align_corners', False))
        # what mmvit5.deploy.slide needs to slide a dynamic graph over larger images
        meta['mode'] = test_mode(model)
        if meta['mode'] != 'whole':
            meta.update(crop_size=list(model.test_cfg.crop_size),
                        stride=list(model.test_cfg.stride))
    elif hasattr(model, 'panoptic_fusion_head'):
        fusion = model.panoptic_fusion_head
        test_cfg = fusion.test_cfg or {}
        # boxes_from_masks: mmdet resizes the masks to the original image, then boxes them
        meta.update(boxes_from_masks=True, num_things_classes=fusion.num_things_classes,
                    num_stuff_classes=fusion.num_stuff_classes,
                    object_mask_thr=test_cfg.get('object_mask_thr', 0.8),
                    iou_thr=test_cfg.get('iou_thr', 0.8),
                    filter_low_score=test_cfg.get('filter_low_score', False),
                    instance_on=test_cfg.get('instance_on', False),
                    max_per_image=test_cfg.get('max_per_image', 100))
    return {k: json.dumps(v) for k, v in meta.items()}


def build_model(cfg, checkpoint: Optional[str] = None) -> nn.Module:
    """The eval-mode mmdet/mmseg model of ``cfg``, with ``checkpoint``'s weights (an mmengine
    checkpoint of the whole model) or random ones (the backbone's pretrained file is not
    read): enough to check and time a graph."""
    from mmengine.logging import MMLogger
    from mmengine.registry import DefaultScope
    from mmengine.runner import load_checkpoint
    is_seg = cfg.get('default_scope') == 'mmseg' or 'decode_head' in cfg.model
    if is_seg:
        from mmseg.registry import MODELS
        from mmseg.utils import register_all_modules
    else:
        from mmdet.registry import MODELS
        from mmdet.utils import register_all_modules
    register_all_modules(init_default_scope=False)
    cfg.model.backbone.init_cfg = None
    # the scope the runner would set: parts built inside (data preprocessors) resolve there
    with DefaultScope.overwrite_default_scope('mmseg' if is_seg else 'mmdet'):
        model = MODELS.build(cfg.model)
    if checkpoint:
        loaded = load_checkpoint(model, checkpoint, map_location='cpu', strict=True)
        meta = loaded.get('meta', {}).get('dataset_meta')
        if meta:
            model.dataset_meta = meta
    else:
        logger = MMLogger.get_current_instance()
        level = logger.level
        logger.setLevel('WARNING')  # init_weights logs every parameter
        try:
            model.init_weights()
        finally:
            logger.setLevel(level)
    return model.eval()


def deploy(model: nn.Module, cfg, size_divisor: Optional[int] = None,
           dynamic: bool = False) -> Deployed:
    """The whole-model module of a built mmdet/mmseg ``model`` of ``cfg`` (e.g. a runner's,
    after training); arguments as :func:`build_part`'s."""
    kind = model_kind(model)
    check_exportable(model)
    preprocess = Preprocess.from_model(model, size_divisor)
    return Deployed(preprocess, task_module(model.eval(), kind, dynamic), kind,
                    model_metadata(cfg, model, kind, preprocess, dynamic)).eval()


def build_part(cfg, part: str = 'model', checkpoint: Optional[str] = None,
               size_divisor: Optional[int] = None, dynamic: bool = False) -> nn.Module:
    """The eval-mode module of ``part`` of an mmdet/mmseg config, ready for export.

    Args:
        cfg (mmengine.Config): A detector, segmentor or depth config with a ViT5 backbone.
        part (str): ``'model'`` (image to results, :class:`Deployed`), ``'neck'`` (backbone
            + neck, normalised image to maps) or ``'backbone'``.
        checkpoint (str, optional): An mmengine checkpoint of the whole model; None: random
            weights.
        size_divisor (int, optional): ``model``: pad to multiples of it instead of what the
            config does (:func:`~.preprocess.size_divisor_line` says how to make the config's
            test agree); ``backbone`` / ``neck``: what the input is padded to, default the
            coarsest stride of the maps.
        dynamic (bool): For a graph with symbolic sides (one sliding window, see
            :class:`~.dense.DenseMap`).

    Raises:
        NotExportable: A model kind or a layer without a standard-operator graph.
    """
    if part not in PARTS:
        raise ValueError(f'part must be one of {PARTS}, got {part!r}')
    model = build_model(cfg, checkpoint)
    if part == 'model':
        return deploy(model, cfg, size_divisor, dynamic)
    neck = getattr(model, 'neck', None) if part == 'neck' else None
    wrapped = BackboneWithNeck(model.backbone, neck).eval()
    # a probe at a side every stride divides (ViT-5's coarsest pyramid level is 64)
    wrapped.size_divisor = size_divisor or coarsest_stride(
        wrapped, example_input((1, 3, 128, 128), part))
    return wrapped


def fix_position_tables(model: nn.Module, example: torch.Tensor) -> List[Tuple[int, int]]:
    """Make the RoPE tables and resized position embeddings of every ViT5 in ``model``
    constants for the patch grids that ``example`` gives them (``ViT5.fix_tables``); returns
    the grids. For fixed-size graphs (TensorRT takes no shape-dependent RoPE)."""
    from ..models import ViT5
    grids = {}

    def record(module, args):
        height, width = args[0].shape[-2:]
        size = module.patch_size  # ViT5 pads the image to whole patches
        grids.setdefault(module, set()).add((-(-height // size), -(-width // size)))

    handles = [m.register_forward_pre_hook(record) for m in model.modules()
               if isinstance(m, ViT5)]
    try:
        with torch.no_grad():
            model(example)
    finally:
        for handle in handles:
            handle.remove()
    for module, found in grids.items():
        for grid in found:
            module.fix_tables(grid)
    return sorted({g for found in grids.values() for g in found})
