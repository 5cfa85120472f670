"""The generated shapes set (tools/make_toy_data.py) and the toy configs that train on it."""
import re

import cv2
import numpy as np
import pytest
from mmengine.config import Config

from conftest import config, last_val, run_tool_here

# measured where it was set: 43.86 mIoU (background 89.7, rectangle 85.7, the ellipses and
# triangles of the 4 test images not yet found) after 80 iterations on conftest.toy_root
FLOOR_UPERNET = 43.8
# box and mask mAP, measured where they were set (twice alike for the Mask R-CNN), on
# conftest.toy_root: the shortest budgets of those tried where the box mAP is clearly above 0
# (Mask R-CNN: 0.028 at 60 iterations; Cascade: 0.033 at 50, 0.028 at 64, 0.072 at 72)
ITERS_MASKRCNN, FLOOR_MASKRCNN = 80, (0.135, 0.192)
ITERS_CASCADE, FLOOR_CASCADE = 80, (0.178, 0.190)
CLASS_HUE_SPREAD = 25  # make_scene draws a class's hue in its centre +- 25 (of 256)


def test_each_shape_is_painted_in_its_class_hue():
    """The class's hue must reach the image: it once went in as the blue channel, painting
    every shape yellowish white on a background of the same colours (a triangle's pink was
    hardly to be seen), and the toy UperNet stayed at chance."""
    from make_toy_data import CLASSES, make_scene
    rng = np.random.default_rng(0)
    hits = 0
    for _ in range(20):
        image, objects, semantic = make_scene((128, 128), rng)
        hsv = cv2.cvtColor(image, cv2.COLOR_BGR2HSV_FULL)
        for obj in objects:
            inside = obj['mask'] > 0
            hue = np.median(hsv[..., 0][inside].astype(float))
            centre = obj['label'] * 256 / len(CLASSES)
            off = min(abs(hue - centre), 256 - abs(hue - centre))
            assert off <= CLASS_HUE_SPREAD + 8, (CLASSES[obj['label']], hue, centre)
            assert np.median(hsv[..., 1][inside]) >= 120, 'a shape is saturated'
            assert (semantic[inside] == obj['label'] + 2).all()
            hits += 1
    assert hits >= 20


def test_toy_upernet_names_the_shapes_of_its_set(toy_root):
    """The toy UperNet predicts the set's own classes (classes.txt), with their names in the
    per-class table and the pictures, not ADE20K's 150 ('wall' for the background)."""
    cfg = Config.fromfile(config('toy/vit5-tiny_upernet_shapes.py'))
    classes_txt = (toy_root / 'data/toy/ade/ADEChallengeData2016/classes.txt').read_text()
    names = tuple(classes_txt.split())
    assert names == ('background', 'rectangle', 'ellipse', 'triangle')
    for loader in ('train_dataloader', 'val_dataloader', 'test_dataloader'):
        dataset = cfg[loader].dataset
        assert dataset.type == 'BaseSegDataset' and dataset.metainfo.classes == names
        assert len(dataset.metainfo.palette) == len(names)
    assert cfg.model.decode_head.num_classes == cfg.model.auxiliary_head.num_classes == 4


@pytest.fixture
def train_toy(toy_root, tmp_path, monkeypatch, capsys, one_thread):
    """``train_toy(name, iters)``: train configs/toy/<name> for ``iters`` iterations on
    conftest.toy_root (seed 0, one thread: deterministic on a CPU) with tools/train.py, and
    return the log, ending with the validation."""
    def train(name: str, iters: int) -> str:
        return run_tool_here('train.py', [config(f'toy/{name}'), '--work-dir', tmp_path / 'w',
                                          '--iters', iters], toy_root, monkeypatch, capsys)
    return train


@pytest.mark.slow
def test_toy_upernet_floor(train_toy):
    """The floor of the toy UperNet at a short budget (80 iterations on the 8 images of the
    test set), well above the 25 mIoU of painting everything background, where the toy once
    stayed (26 at 200 iterations on 64 images)."""
    iters = 80
    out = train_toy('vit5-tiny_upernet_shapes.py', iters)
    table = out[out.rindex('per class results'):]
    iou = {name: float(value) for name, value in
           re.findall(r'\|\s*(background|rectangle|ellipse|triangle)\s*\|\s*([0-9.]+)', table)}
    miou = last_val(out, 'mIoU')
    print(f'[toy upernet] {iters} iterations: mIoU {miou}, {iou}')
    assert set(iou) == {'background', 'rectangle', 'ellipse', 'triangle'}, table[:2000]
    assert miou >= FLOOR_UPERNET and iou['rectangle'] >= 50, (miou, iou)


def assert_detector_floor(train_toy, name, iters, floor):
    """Train the toy detector ``name`` for ``iters`` iterations; its box and mask mAP must reach
    ``floor`` = (bbox, segm), both measured where they were set."""
    out = train_toy(name, iters)
    bbox, segm = last_val(out, 'coco/bbox_mAP'), last_val(out, 'coco/segm_mAP')
    print(f'[toy {name}] {iters} iterations: bbox mAP {bbox}, segm mAP {segm}')
    assert bbox >= floor[0] and segm >= floor[1], (bbox, segm)


@pytest.mark.slow
def test_toy_maskrcnn_floor(train_toy):
    """The toy Mask R-CNN learns to find the shapes in a short budget: its box mAP is clearly
    above the 0 of a model that found nothing."""
    assert_detector_floor(train_toy, 'vit5-tiny_maskrcnn_shapes.py', ITERS_MASKRCNN,
                          FLOOR_MASKRCNN)


@pytest.mark.slow
def test_toy_cascade_floor(train_toy):
    """The toy Cascade Mask R-CNN learns to find the shapes in a short budget: at 80 iterations
    it already has the box mAP that ViTDet's heads, once its heads, reached only at 200."""
    assert_detector_floor(train_toy, 'vit5-tiny_cascade-maskrcnn_shapes.py',
                          ITERS_CASCADE, FLOOR_CASCADE)
