"""Mask2Former and depth heads on ViT5: the DPT depth head, the generated COCO-panoptic / NYU
layouts, widths named when ``arch`` changes, the dry run, and the toy depth and Mask2Former models
that learn.
(Every shipped Mask2Former / depth config trains and tests for real in test_recipes.py.)"""
import glob
import json
import re

import cv2
import numpy as np
import pytest
import torch

from conftest import config, last_val, run_tool_here
from mmvit5.models.heads import DPTDepthHead
from mmvit5.utils import load_config

DEPTH = 'toy/vit5-tiny_depth_shapes.py'
MASK2FORMER = 'toy/vit5-tiny_mask2former-ins_shapes.py'


def test_dpt_depth_head_shapes_and_range():
    head = DPTDepthHead(in_channels=32, post_process_channels=(8, 16, 32, 32), channels=16,
                        max_depth=10.0)
    maps = [torch.randn(2, 32, 6, 8) for _ in range(4)]
    depth = head(maps)
    assert depth.shape == (2, 1, 96, 128)  # full resolution of the 96x128 image
    assert 0 < depth.min() and depth.max() < 10.0
    resized = head.predict_by_feat(depth, [dict(img_shape=(96, 128))])
    assert resized.shape == (2, 1, 96, 128)
    with pytest.raises(ValueError, match='reassembles 4 backbone maps, got 3'):
        head(maps[:3])
    with pytest.raises(TypeError, match='in_channels is the width of every backbone map'):
        DPTDepthHead(in_channels=[32] * 4)


def test_panoptic_and_depth_layouts(toy_root):
    from panopticapi.utils import rgb2id
    coco = toy_root / 'data/toy/coco/annotations'
    panoptic = json.loads((coco / 'panoptic_val2017.json').read_text())
    instances = json.loads((coco / 'instances_val2017.json').read_text())
    assert [c['isthing'] for c in panoptic['categories']] == [1, 1, 1, 0]
    assert len(panoptic['annotations']) == len(instances['images'])
    things = sum(1 for a in panoptic['annotations'] for s in a['segments_info'] if s['id'] and
                 s['category_id'] <= 3)
    assert things == len(instances['annotations'])
    for ann in panoptic['annotations']:
        png = cv2.imread(str(coco / 'panoptic_val2017' / ann['file_name']))[..., ::-1]
        ids, counts = np.unique(rgb2id(png), return_counts=True)
        areas = {s['id']: s['area'] for s in ann['segments_info']}
        assert dict(zip(ids.tolist(), counts.tolist())) == areas  # every pixel in a segment
    depth_maps = glob.glob(str(toy_root / 'data/toy/nyu/annotations/test/*.png'))
    assert len(depth_maps) == 4
    depth = cv2.imread(depth_maps[0], cv2.IMREAD_UNCHANGED)
    image = cv2.imread(depth_maps[0].replace('annotations', 'images')[:-4] + '.jpg')
    assert depth.dtype == np.uint16 and 500 <= depth.min() and depth.max() <= 8000  # mm
    assert depth.shape == image.shape[:2]


@pytest.mark.parametrize('name, options, fields', [
    ('vit5_mask2former-pan_coco.py', {'model.backbone.arch': 'large'},
     ['model.neck.in_channels=1024']),
    ('vit5_mask2former-ins_coco.py', {'model.neck.out_channels': 128},
     ['model.panoptic_head.in_channels=[128,128,128,128]']),
    ('vit5-l_mask2former_ade20k.py', {'model.neck.out_channels': 512},
     ['model.decode_head.in_channels=[512,512,512,512]']),
    ('vit5_depth_nyu.py', {'model.backbone.arch': 'small'}, ['model.decode_head.in_channels=384']),
])
def test_width_mismatch_names_the_fields_to_set(name, options, fields):
    with pytest.raises(ValueError, match='channel widths do not match') as error:
        load_config(config(name), options, check_data=False)
    for field in fields:
        assert field in str(error.value), str(error.value)


@pytest.mark.parametrize('name, size, data', [
    ('vit5_mask2former_ade20k.py', '512x512', '160,000 iterations = 126.7 epochs of 20,210'),
    ('vit5-l_depth_nyu.py', '480x480', '25,000 iterations'),
])
def test_dry_run(toy_root, monkeypatch, capsys, name, size, data):
    args = [config(name), '--shrink']
    if 'nyu' in name:  # no standard NYU count here: the generated set is read
        args += ['--cfg-options', 'train_dataloader.dataset.data_root=data/toy/nyu']
    out = run_tool_here('dry_run.py', args, toy_root, monkeypatch, capsys)
    assert f'input size:        {size}' in out, out[-3000:]
    assert re.search(r'FLOPs per image: +[0-9.,]+ GFLOPs', out), out[-3000:]
    assert re.search(r'train step: +[0-9.]+ s per image on cpu', out)
    assert data in out


def test_dry_run_fake_scene_holds_the_classes_of_an_ade20k_scene():
    """The dry run's fake segmentation batch holds as many classes per image as an ADE20K scene
    (10.5 on average), not all 150: Mask2Former matches and samples one target per class
    present, and labels drawn per pixel made the shrunk recipe's step 5.7x slower on the CPU
    (11.5 s per image against 2.0) and 4x heavier."""
    from benchmarks.full_model import CLASSES_PER_IMAGE, fake_batch
    cfg = load_config(config('vit5_mask2former_ade20k.py'), check_data=False)
    for sample in fake_batch(cfg, 64, 2)['data_samples']:
        labels = sample.gt_sem_seg.data.unique()
        assert len(labels) == CLASSES_PER_IMAGE == 10 and labels.max() < 150, labels


@pytest.mark.slow
def test_toy_depth_model_learns(toy_root, tmp_path, monkeypatch, capsys, one_thread):
    """60 iterations from scratch bring the RMSE well below predicting the training set's mean
    depth everywhere (measured where set: 0.62 m against 1.18 m; 0.58 m at 200 iterations).
    The run validates once, at its end, on the config's test set (its test loader and
    evaluator are the val ones)."""
    iters = 60
    out = run_tool_here('train.py', [config(DEPTH), '--work-dir', tmp_path / 'depth',
                                     '--cfg-options', f'train_cfg.max_iters={iters}',
                                     f'train_cfg.val_interval={iters}',
                                     f'param_scheduler.1.end={iters}',
                                     f'default_hooks.checkpoint.interval={iters}'],
                        toy_root, monkeypatch, capsys)
    rmse = last_val(out, 'rmse')
    nyu = toy_root / 'data/toy/nyu/annotations'
    train = np.concatenate([cv2.imread(f, cv2.IMREAD_UNCHANGED).ravel() / 1000
                            for f in glob.glob(str(nyu / 'train/*.png'))])
    # DepthMetric averages the per-image RMSE: so does the baseline
    baseline = np.mean([np.sqrt(((cv2.imread(f, cv2.IMREAD_UNCHANGED) / 1000 - train.mean())**2)
                                .mean()) for f in glob.glob(str(nyu / 'test/*.png'))])
    assert rmse < 0.6 * baseline, (rmse, baseline)


def blind_segm_map(coco_root) -> float:
    """Chance for instance masks: the segm mAP (percent) of a predictor that knows the training
    set but not the image. Every training mask, at its place and with its class, is predicted
    on every validation image, scored at random."""
    import contextlib
    import io

    import pycocotools.mask as mask_utils
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval
    train = json.loads((coco_root / 'annotations/instances_train2017.json').read_text())
    with contextlib.redirect_stdout(io.StringIO()):  # pycocotools prints as it goes
        gt = COCO(str(coco_root / 'annotations/instances_val2017.json'))
        scores = np.random.default_rng(0)
        dets = []
        for image in gt.dataset['images']:
            for ann in train['annotations']:
                rle = mask_utils.merge(mask_utils.frPyObjects(ann['segmentation'],
                                                              image['height'], image['width']))
                dets.append(dict(image_id=image['id'], category_id=ann['category_id'],
                                 segmentation=rle, score=float(scores.random())))
        evaluation = COCOeval(gt, gt.loadRes(dets), 'segm')
        evaluation.evaluate()
        evaluation.accumulate()
        evaluation.summarize()
    return 100 * max(evaluation.stats[0], 0.0)


@pytest.mark.slow
def test_toy_mask2former_learns(toy_root, tmp_path, monkeypatch, capsys, one_thread):
    """60 iterations from scratch on 8 images: the loss falls and the held-out instance mask mAP
    is well above an image-blind predictor's (0.06 on this set; the model reached 6.6, and 2.5 at
    40 iterations: fewer would make the margin thin)."""
    iters = 60
    out = run_tool_here('train.py', [config(MASK2FORMER), '--work-dir', tmp_path / 'm2f',
                                     '--iters', iters], toy_root, monkeypatch, capsys)
    losses = [float(v) for v in re.findall(r'Iter\(train\).* loss: ([0-9.]+)', out)]
    assert len(losses) >= iters // 10 and losses[-1] < 0.8 * losses[0], losses
    segm_map = 100 * last_val(out, 'coco/segm_mAP')
    chance = blind_segm_map(toy_root / 'data/toy/coco')
    assert segm_map > max(10 * chance, chance + 2), (segm_map, chance)
