"""Mask R-CNN and Cascade Mask R-CNN exported whole (mmvit5/deploy/two_stage.py): ONNX Runtime
against mmdet's own test_step on briefly trained toys, at sides that are not multiples of 32
and at batch 2, and COCO mAP from ONNX Runtime's predictions on the toy val set."""
import contextlib
import copy

import cv2
import numpy as np
import pytest
import torch
import torch.nn as nn
from mmengine.config import Config

from conftest import config, guide_snippets
from mmvit5.deploy import deploy, export_onnx, ort_session
from mmvit5.deploy.predict import OnnxModel
from mmvit5.deploy.two_stage import (
    TwoStageInstances,
    batched_nms_keep,
    decode_deltas,
    extract_rois,
    paste_masks,
)
from mmvit5.utils import shrink_model

pytest.importorskip('onnxruntime')

OUTPUTS = ['boxes', 'scores', 'labels', 'masks']
CROP = 128  # training crops: the toy images are 160 px at most
# sides that are not multiples of 32, each one in a batch of two val images
SIDES = [(118, 141), (150, 97)]


def toy_training(cfg: Config, root, work_dir: str, iters: int):
    """The model of ``cfg`` trained ``iters`` iterations on the generated COCO set in ``CROP``
    crops, in eval mode, and the config it was trained with. Its val pipeline keeps the
    images' own sizes (resize by 1: test_step's predictions are then in input pixels, as the
    graph's)."""
    data_root = str(root / 'data' / 'toy' / 'coco') + '/'
    toy = Config.fromfile(config('toy/vit5-tiny_maskrcnn_shapes.py'))
    cfg.model.data_preprocessor.batch_augments = None
    for step in toy.train_pipeline:
        if step.type == 'RandomResize':
            step.scale = (CROP, CROP)
        elif step.type == 'RandomCrop':
            step.crop_size = (CROP, CROP)
    test_pipeline = [dict(type='Resize', scale_factor=1.0) if s.type == 'Resize' else s
                     for s in toy.test_pipeline]
    cfg.train_dataloader = toy.train_dataloader
    cfg.train_dataloader.dataset.update(data_root=data_root, pipeline=toy.train_pipeline)
    cfg.train_cfg = dict(type='IterBasedTrainLoop', max_iters=iters, val_interval=iters + 1)
    for key in ('val', 'test'):
        cfg[f'{key}_cfg'] = cfg[f'{key}_dataloader'] = cfg[f'{key}_evaluator'] = None
    cfg.optim_wrapper = toy.optim_wrapper
    cfg.optim_wrapper.optimizer.lr = 2e-3
    cfg.param_scheduler = [dict(type='LinearLR', start_factor=0.1, by_epoch=False, begin=0,
                                end=10)]
    cfg.default_hooks = dict(logger=dict(type='LoggerHook', interval=iters), checkpoint=None)
    cfg.randomness = dict(seed=0)
    cfg.work_dir = work_dir
    from mmengine.runner import Runner
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the toys' steps are 10x slower with 2 threads on 2 shared cores
    try:
        runner = Runner.from_cfg(cfg)
        runner.train()
    finally:
        torch.set_num_threads(threads)
    cfg.val_dataloader = toy.val_dataloader
    cfg.val_dataloader.update(batch_size=1)
    cfg.val_dataloader.dataset.update(data_root=data_root, pipeline=test_pipeline)
    cfg.val_evaluator = dict(type='CocoMetric', metric=['bbox', 'segm'],
                             ann_file=data_root + 'annotations/instances_val2017.json')
    return runner.model.eval(), cfg


def export(model, cfg, example: torch.Tensor, path: str, dynamic: bool) -> str:
    """The whole model as tools/export_onnx.py --part model writes it: the config's
    preprocessing (BGR -> RGB, mean / std, padding) in front of TwoStageInstances."""
    export_onnx(deploy(model, cfg, dynamic=dynamic), example, path, dynamic=dynamic)
    return path


@pytest.fixture(scope='module')
def maskrcnn(toy_root, tmp_path_factory):
    """The toy Mask R-CNN (one block) trained 60 iterations, and its graph: dynamic sides,
    batch 2."""
    work = tmp_path_factory.mktemp('maskrcnn_onnx')
    cfg = Config.fromfile(config('toy/vit5-tiny_maskrcnn_shapes.py'))
    cfg.model.backbone.arch.depth = 1
    model, cfg = toy_training(cfg, toy_root, str(work), iters=60)
    example = torch.randint(0, 256, (2, 3, *SIDES[0])).float()
    path = export(model, cfg, example, str(work / 'maskrcnn.onnx'), True)
    return model, cfg, path


@pytest.fixture(scope='module')
def cascade(toy_root, tmp_path_factory):
    """The shipped ViT5-S Cascade Mask R-CNN shrunk (test_recipes.py's way: one block, heads 32
    wide) trained 60 iterations on the toy set, and its graph: fixed at batch 2 x ``SIDES[0]``.

    At width 16 the RPN's ReLUs die over whole regions, which then score exactly alike: mmdet
    breaks such ties in the order of torch's (unstable) sort, which no graph reproduces."""
    work = tmp_path_factory.mktemp('cascade_onnx')
    cfg = Config.fromfile(config('vit5-s_cascade-maskrcnn_coco.py'))
    shrink_model(cfg.model, depth=1, width=32)
    roi = cfg.model.roi_head
    for head in roi.bbox_head:
        head.num_classes = 3
    roi.mask_head.num_classes = 3
    for stage in cfg.model.train_cfg.rcnn:  # 1-4 shapes per image: sample fewer RoIs
        stage.sampler.update(num=64, pos_fraction=0.5)
    model, cfg = toy_training(cfg, toy_root, str(work), iters=60)
    example = torch.randint(0, 256, (2, 3, *SIDES[0])).float()
    path = export(model, cfg, example, str(work / 'cascade.onnx'), False)
    return model, cfg, path


def val_images(root, side):
    """The first two toy val images (BGR, as the loader reads them) resized to ``side``."""
    paths = sorted((root / 'data' / 'toy' / 'coco' / 'val2017').glob('*.jpg'))[:2]
    return torch.stack([torch.from_numpy(cv2.resize(cv2.imread(str(p)), side[::-1]))
                        for p in paths]).permute(0, 3, 1, 2).contiguous()


@contextlib.contextmanager
def stable_sort():
    """torch's ``Tensor.sort`` with ``stable=True`` meanwhile.

    mmdet ranks RPN scores and NMS candidates with ``Tensor.sort``, whose order of exactly
    equal scores torch leaves open (it differs between CPU and CUDA, and between lengths).
    The briefly trained toys have such ties (regions where every ReLU of the RPN is off score
    alike), and the graph breaks them by index (ONNX TopK's rule): mmdet is compared with the
    same rule. Where no two scores are equal, the patch changes nothing."""
    sort = torch.Tensor.sort

    def stable(self, dim=-1, descending=False, stable=None):
        return sort(self, stable=True, dim=dim, descending=descending)

    torch.Tensor.sort = stable
    try:
        yield
    finally:
        torch.Tensor.sort = sort


def mmdet_predictions(model, images):
    """mmdet's test_step on (N, 3, H, W) uint8 images, predictions in their pixels."""
    from mmdet.structures import DetDataSample
    shape = tuple(images.shape[2:])
    samples = [DetDataSample(metainfo=dict(img_shape=shape, ori_shape=shape,
                                           scale_factor=(1.0, 1.0))) for _ in images]
    with torch.no_grad(), stable_sort():
        return model.test_step(dict(inputs=list(images), data_samples=samples))


def assert_same_instances(expected, outputs, where):
    """ONNX Runtime's rows against mmdet's instances, image by image: the same number above
    0.3 and in all; each of mmdet's detections found (same label, nearest box) with its box
    within 1 px, its score within 1e-3 and its mask at IoU >= 0.97. Returns the detections
    compared, the largest box and score differences and the smallest mask IoU."""
    boxes, scores, labels, masks = outputs
    assert boxes.shape[:2] == scores.shape == labels.shape == masks.shape[:2]
    assert boxes.shape[0] == len(expected) and labels.dtype == np.int64
    found, box_error, score_error, worst_iou = 0, 0.0, 0.0, 1.0
    for i, sample in enumerate(expected):
        pred = sample.pred_instances.numpy()
        at = f'{where}, image {i}'
        assert (scores[i] > 0.3).sum() == (pred.scores > 0.3).sum(), at
        assert (scores[i] > 0).sum() == len(pred.scores), at
        for box, score, label, mask in zip(pred.bboxes, pred.scores, pred.labels, pred.masks):
            same = np.flatnonzero((labels[i] == label) & (scores[i] > 0))
            assert len(same), f'{at}: no row of label {label}'
            row = same[np.abs(boxes[i, same] - box).max(1).argmin()]
            ours = masks[i, row].astype(bool)
            box_error = max(box_error, float(np.abs(boxes[i, row] - box).max()))
            score_error = max(score_error, float(abs(scores[i, row] - score)))
            worst_iou = min(worst_iou, (ours & mask).sum() / max((ours | mask).sum(), 1))
            assert box_error <= 1 and score_error <= 1e-3 and worst_iou >= 0.97, (
                at, boxes[i, row], box, scores[i, row], score, worst_iou)
        found += len(pred.scores)
        assert not masks[i][scores[i] == 0].any() and not boxes[i][scores[i] == 0].any()
    print(f'{where}: {found} detections ({int((scores > 0.3).sum())} above 0.3), largest box '
          f'difference {box_error:.1e} px, score {score_error:.1e}, smallest mask IoU '
          f'{worst_iou:.4f}')
    return found


@pytest.mark.slow  # trains a toy and exports it (module fixture)
def test_maskrcnn_onnx_equals_test_step_at_padded_sides(maskrcnn, toy_root):
    import onnx
    model, _, path = maskrcnn
    graph = onnx.load(path)
    domains = {node.domain for node in graph.graph.node}
    assert domains <= {'', 'ai.onnx'} and not graph.functions, domains
    ops = {node.op_type for node in graph.graph.node}
    assert {'NonMaxSuppression', 'RoiAlign'} <= ops
    assert [o.name for o in graph.graph.output] == OUTPUTS
    print('Mask R-CNN graph operators:', ' '.join(sorted(ops)))
    session = ort_session(path)
    for side in SIDES:
        images = val_images(toy_root, side)
        outputs = session.run(None, {'image': images.float().numpy()})
        assert outputs[3].shape == (2, 20, *side) and outputs[3].dtype == np.uint8
        found = assert_same_instances(mmdet_predictions(model, images), outputs,
                                      f'Mask R-CNN {side}')
        assert found > 0


@pytest.mark.slow  # trains a toy and exports it (module fixture)
def test_cascade_onnx_equals_test_step(cascade, toy_root):
    model, _, path = cascade
    images = val_images(toy_root, SIDES[0])
    outputs = ort_session(path).run(None, {'image': images.float().numpy()})
    assert outputs[0].shape == (2, 100, 4)  # the shipped test_cfg.rcnn.max_per_img
    assert_same_instances(mmdet_predictions(model, images), outputs, 'cascade')


def coco_metrics(model, cfg, onnx_model=None):
    """bbox and segm mAP on the toy val set, of test_step's predictions or, with
    ``onnx_model``, of ONNX Runtime's through :class:`OnnxModel` (each image fed twice: the
    graph's batch is 2)."""
    from mmengine.evaluator import Evaluator
    from mmengine.runner import Runner
    loader = Runner.build_dataloader(cfg.val_dataloader)
    evaluator = Evaluator(copy.deepcopy(cfg.val_evaluator))
    evaluator.dataset_meta = loader.dataset.metainfo
    for data in loader:
        if onnx_model is None:
            with torch.no_grad(), stable_sort():
                samples = model.test_step(data)
        else:
            twice = dict(inputs=data['inputs'] * 2, data_samples=data['data_samples'] * 2)
            samples = onnx_model.predict(twice)
            for name in ('bboxes', 'scores', 'labels', 'masks'):  # the batch rows agree
                assert torch.equal(samples[0].pred_instances.get(name),
                                   samples[1].pred_instances.get(name)), name
            samples = samples[:1]
        evaluator.process(samples, data)
    return evaluator.evaluate(len(loader.dataset))


@pytest.mark.slow  # trains a toy and exports it (module fixture)
def test_maskrcnn_onnx_coco_map_equals_pytorch(maskrcnn):
    model, cfg, path = maskrcnn
    expected = coco_metrics(model, cfg)
    ours = coco_metrics(model, cfg, OnnxModel(path))
    keys = ('coco/bbox_mAP', 'coco/segm_mAP', 'coco/bbox_mAP_50', 'coco/segm_mAP_50')
    print('COCO on the toy val, PyTorch / ONNX Runtime:',
          ', '.join(f'{k} {expected[k]} / {ours[k]}' for k in keys))
    for key in keys:  # within 0.1 AP point (mmdet reports AP in 0-1, to 3 decimals)
        assert round(abs(ours[key] - expected[key]), 6) <= 1e-3, (key, ours[key], expected[key])
    assert expected['coco/bbox_mAP_50'] > 0, expected  # the toy finds shapes


@pytest.mark.slow  # trains a toy and exports it (module fixture)
def test_guide_snippet_runs_the_instances_graph(maskrcnn, toy_root, tmp_path, monkeypatch):
    """onnx.md's instances snippet, as written, on the batch-2 Mask R-CNN graph."""
    _, _, path = maskrcnn
    snippet = guide_snippets('user_guides/onnx.md')['instances']
    assert "paths = ['demo.jpg']" in snippet
    monkeypatch.chdir(tmp_path)
    (tmp_path / 'model.onnx').symlink_to(path)
    images = val_images(toy_root, SIDES[1])
    paths = [f'snippet{i}.png' for i in range(2)]  # lossless: the same pixels as ``images``
    for p, image in zip(paths, images):
        cv2.imwrite(p, image.permute(1, 2, 0).numpy())
    namespace = {}
    exec(compile(snippet.replace("paths = ['demo.jpg']", f'paths = {paths}'), 'onnx.md',
                 'exec'), namespace)
    boxes, scores, labels, masks = ort_session(path).run(None, {'image': images.float().numpy()})
    assert len(namespace['found']) == 2
    for image, s, c, m in zip(namespace['found'], scores, labels, masks):
        np.testing.assert_array_equal(image['labels'], c[s > 0.3])
        np.testing.assert_array_equal(image['masks'], m[s > 0.3] >= 0.5)


def test_unsupported_heads_are_refused_by_name():
    from mmdet.registry import MODELS
    from mmdet.utils import register_all_modules
    register_all_modules(init_default_scope=False)
    cfg = Config.fromfile(config('toy/vit5-tiny_maskrcnn_shapes.py'))
    cfg.model.backbone.arch.depth = 1
    cfg.model.test_cfg.rcnn.nms = dict(type='soft_nms', iou_threshold=0.5)
    with pytest.raises(ValueError, match=r"test_cfg.rcnn.nms=.*soft_nms.*NonMaxSuppression"):
        TwoStageInstances(MODELS.build(cfg.model))
    cfg.model.test_cfg.rcnn.nms.type = 'nms'
    cfg.model.roi_head.mask_head = None
    with pytest.raises(ValueError, match='roi_head without a mask head'):
        TwoStageInstances(MODELS.build(cfg.model))


def test_paste_equals_mmdet_cpu_paste():
    """The two-matmul paste against mmdet's _do_paste_mask as its CPU path runs it (one box at
    a time, within one pixel of the box): fractional, wider than 3 mask widths, clipped and
    zero-wide boxes."""
    from mmdet.models.roi_heads.mask_heads.fcn_mask_head import _do_paste_mask
    generator = torch.Generator().manual_seed(0)
    masks = torch.rand(5, 28, 28, generator=generator)
    boxes = torch.tensor([[10.3, 5.7, 40.2, 33.9], [0.0, 0.0, 97.0, 61.0], [60.5, 40.1, 97.0,
                          61.0], [20.0, 10.0, 20.0, 30.0], [3.0, 50.2, 90.6, 51.1]])
    ours = paste_masks(masks, boxes, 61, 97)
    for mask, box, pasted in zip(masks, boxes, ours):
        expected = torch.zeros(61, 97)
        values, (rows, cols) = _do_paste_mask(mask[None, None], box[None], 61, 97)
        expected[rows, cols] = values[0]
        torch.testing.assert_close(pasted, expected, rtol=0, atol=1e-5)


def test_decode_and_nms_equal_mmdet():
    """decode_deltas against DeltaXYWHBBoxCoder.decode (clipped to the image, large deltas
    clamped), batched_nms_keep against mmcv's batched_nms (boxes shifted per group, invalid
    candidates left out)."""
    from mmcv.ops import batched_nms
    from mmdet.models.task_modules.coders import DeltaXYWHBBoxCoder
    generator = torch.Generator().manual_seed(0)
    corners = torch.rand(400, 2, generator=generator) * torch.tensor([90.0, 60.0])
    priors = torch.cat([corners, corners + 4 + 30 * torch.rand(400, 2, generator=generator)], 1)
    deltas = torch.randn(400, 4, generator=generator) * 2
    coder = DeltaXYWHBBoxCoder(target_means=[0.0] * 4, target_stds=[0.1, 0.1, 0.2, 0.2])
    boxes = decode_deltas(coder, priors, deltas, 61, 97)
    torch.testing.assert_close(boxes, coder.decode(priors, deltas, max_shape=(61, 97)),
                               rtol=0, atol=0)
    scores = torch.rand(400, generator=generator)
    groups = torch.randint(0, 3, (400, ), generator=generator)
    valid = scores > 0.3
    nms_cfg = dict(type='nms', iou_threshold=0.5)
    keep = batched_nms_keep(boxes, scores, valid, groups, nms_cfg)
    index = valid.nonzero()[:, 0]
    _, kept = batched_nms(boxes[index], scores[index], groups[index], nms_cfg)
    assert 0 < keep.sum() < valid.sum()
    assert keep.nonzero()[:, 0].tolist() == sorted(index[kept].tolist())


@pytest.mark.slow  # exports to ONNX
def test_onnx_runtime_roi_align_equals_mmdet_extractor(tmp_path):
    """ONNX Runtime's CPU RoiAlign has had alignment bugs (microsoft/onnxruntime#6921, #7354):
    the multi-level extraction in ONNX Runtime against mmdet's SingleRoIExtractor (mmcv's
    RoIAlign, aligned, adaptive sampling) on RoIs below a pixel, fractional, past the map's
    border and larger than it."""
    import onnx
    from mmdet.models.roi_heads.roi_extractors import SingleRoIExtractor
    extractor = SingleRoIExtractor(dict(type='RoIAlign', output_size=7, sampling_ratio=0),
                                   out_channels=8, featmap_strides=[4, 8, 16, 32])
    generator = torch.Generator().manual_seed(0)
    feats = tuple(torch.randn(2, 8, 96 // s, 128 // s, generator=generator)
                  for s in (4, 8, 16, 32))
    rois = torch.tensor([[0, 10.2, 20.7, 10.6, 21.0], [1, 3.3, 4.1, 57.9, 40.2],
                         [0, -12.0, 30.5, 140.0, 99.0], [1, 60.0, 10.0, 127.5, 95.5],
                         [0, 0.0, 0.0, 0.0, 0.0], [1, 100.25, 70.75, 250.0, 300.0]])

    class Extract(nn.Module):
        def forward(self, *maps):
            return extract_rois(extractor, maps[:-1], maps[-1])

    path = str(tmp_path / 'roi_align.onnx')
    with torch.no_grad():
        expected = extractor(feats, rois)
        program = torch.export.export(Extract(), (*feats, rois), strict=False)
        torch.onnx.export(program, (*feats, rois), dynamo=True, opset_version=18).save(path)
    session = ort_session(path)
    inputs = {i.name: x.numpy() for i, x in zip(session.get_inputs(), (*feats, rois))}
    (pooled, ) = session.run(None, inputs)
    assert np.abs(pooled - expected.numpy()).max() <= 1e-5
    assert 'RoiAlign' in {node.op_type for node in onnx.load(path).graph.node}
