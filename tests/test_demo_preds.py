"""tools/demo.py writes predictions as data (issue 42): DetInferencer's JSON with COCO RLE
masks and class names, class-id PNGs, depth in metres (.npy) or millimetres (16-bit PNG); it
says when nothing reaches --score-thr, and takes a folder with a progress bar. The same
files from --onnx: tests/test_deploy_tasks.py (test_onnx_demo_draws_the_pytorch_demo_picture).
"""
import json
import os.path as osp
import runpy
import sys

import cv2
import numpy as np
import pytest
import torch
from mmengine.config import Config

from conftest import REPO, config
from mmvit5.deploy import build_model
from mmvit5.deploy.build import dataset_meta
from mmvit5.utils import shrink_model


def checkpoint(name: str, folder) -> str:
    """The toy config ``name`` shrunk, and a checkpoint of its initial weights with the
    dataset's classes; returns the config file (the checkpoint beside it, model.pth)."""
    cfg = Config.fromfile(config(name))
    shrink_model(cfg.model, embed_dim=32, depth=1, num_heads=2, width=16)
    cfg.dump(str(folder / 'config.py'))
    torch.manual_seed(0)
    model = build_model(cfg)
    torch.save(dict(state_dict=model.state_dict(),
                    meta=dict(dataset_meta=dataset_meta(cfg, model))), folder / 'model.pth')
    return str(folder / 'config.py')


def images(folder, count: int = 2):
    folder.mkdir()
    generator = np.random.default_rng(0)
    for i in range(count):
        cv2.imwrite(str(folder / f'im{i}.jpg'),
                    generator.integers(0, 255, (90 + 7 * i, 121, 3), dtype=np.uint8))
    return folder


def demo(monkeypatch, capsys, *args) -> str:
    monkeypatch.setattr(sys, 'argv', ['demo.py', *map(str, args)])
    runpy.run_path(osp.join(REPO, 'tools', 'demo.py'), run_name='__main__')
    return capsys.readouterr().err


def test_detector_writes_detinferencer_json_and_says_when_nothing_is_drawn(
        tmp_path, monkeypatch, capsys):
    from pycocotools import mask as coco_mask
    cfg = checkpoint('toy/vit5-tiny_maskrcnn_shapes.py', tmp_path)
    folder = images(tmp_path / 'images')
    out = tmp_path / 'out'
    err = demo(monkeypatch, capsys, cfg, tmp_path / 'model.pth', folder, '--out-dir', out,
               '--score-thr', '1.01')
    for name in ('im0', 'im1'):
        assert (out / f'{name}.png').is_file()
        found = json.loads((out / 'preds' / f'{name}.json').read_text())
        assert found['classes'] == ['rectangle', 'ellipse', 'triangle']
        assert len(found['labels']) == len(found['scores']) == len(found['bboxes']) == \
            len(found['masks']) == len(found['label_names']) > 0
        assert found['label_names'] == [found['classes'][i] for i in found['labels']]
        height = 90 + 7 * int(name[-1])
        masks = coco_mask.decode(found['masks'])
        assert masks.shape == (height, 121, len(found['labels']))
        best = max(found['scores'])
        line = f'[demo] {name}: no detection reaches --score-thr 1.01 (the best score is ' \
               f'{best:.3f})'
        assert line in err
    assert '100%' in err or '2/2' in err  # the folder's progress bar
    assert '[demo] 2 images -> ' in err


def test_depth_in_metres_or_millimetres_and_segmentor_class_ids(tmp_path, monkeypatch,
                                                                capsys):
    folder = images(tmp_path / 'images', 1)
    image = folder / 'im0.jpg'
    (tmp_path / 'depth').mkdir()
    cfg = checkpoint('toy/vit5-tiny_depth_shapes.py', tmp_path / 'depth')
    weights = tmp_path / 'depth' / 'model.pth'
    demo(monkeypatch, capsys, cfg, weights, image, '--out-dir', tmp_path / 'npy')
    demo(monkeypatch, capsys, cfg, weights, image, '--out-dir', tmp_path / 'mm',
         '--depth-format', 'png')
    metres = np.load(tmp_path / 'npy' / 'preds' / 'im0.npy')
    millimetres = cv2.imread(str(tmp_path / 'mm' / 'preds' / 'im0.png'), cv2.IMREAD_UNCHANGED)
    assert metres.shape == millimetres.shape == (90, 121) and metres.dtype == np.float32
    assert millimetres.dtype == np.uint16 and 0 < metres.min() and metres.max() < 10
    np.testing.assert_array_equal(millimetres, np.round(metres * 1000).astype(np.uint16))
    (tmp_path / 'seg').mkdir()
    cfg = checkpoint('toy/vit5-tiny_upernet_shapes.py', tmp_path / 'seg')
    demo(monkeypatch, capsys, cfg, tmp_path / 'seg' / 'model.pth', image, '--out-dir',
         tmp_path / 'seg_out')
    labels = cv2.imread(str(tmp_path / 'seg_out' / 'preds' / 'im0.png'), cv2.IMREAD_UNCHANGED)
    found = json.loads((tmp_path / 'seg_out' / 'preds' / 'im0.json').read_text())
    assert labels.shape == (90, 121) and labels.dtype == np.uint8
    assert found['sem_seg'] == 'im0.png' and len(found['classes']) > labels.max()


def test_help_says_what_is_written():
    import subprocess
    out = subprocess.run([sys.executable, osp.join(REPO, 'tools', 'demo.py'), '--help'],
                         capture_output=True, text=True).stdout
    text = ' '.join(out.split())
    for said in ('COCO RLE', 'class ids', '16-bit PNG in millimetres', 'best score',
                 'progress bar', '--depth-format'):
        assert said in text, said


pytest.importorskip('pycocotools')
