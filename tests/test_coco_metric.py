"""FasterCocoMetric: faster-coco-eval and pycocotools give the same COCO numbers, bit for bit.

On the toy sets (tools/make_toy_data.py) through the metric as the recipes build it, and on a
generated dense set through the evaluators alone, where every accumulated array is compared.
The COCO-scale set (5,000 images, ~100 detections each) is compared, and timed, by
tools/benchmark_coco_eval.py: pycocotools takes minutes there.
"""
import contextlib
import io
import json
import os.path as osp
import runpy
import sys

import numpy as np
import pytest
import torch
from mmdet.registry import METRICS
from mmengine.config import Config
from mmengine.logging import MMLogger
from mmengine.registry import init_default_scope

import mmvit5.evaluation
from benchmarks.coco_eval import (
    IOU_TYPES,
    differences,
    evaluate,
    load_gt,
    make_detections,
    make_ground_truth,
)
from conftest import REPO, config
from mmvit5.evaluation.coco_metric import FASTER, PYCOCOTOOLS, FasterCocoMetric

pytest.importorskip('faster_coco_eval')
BACKENDS = (FASTER, PYCOCOTOOLS)
TOY_CLASSES = ('rectangle', 'ellipse', 'triangle')
COCO_RECIPES = ('vit5_maskrcnn_coco.py', 'vit5_cascade-maskrcnn_coco.py',
                'vit5-l_mask2former-ins_coco.py', 'toy/vit5-tiny_maskrcnn_shapes.py',
                'toy/vit5-tiny_mask2former-ins_shapes.py', 'toy/resnet18-c4_maskrcnn_shapes.py')


def data_samples(gt: dict, detections: list) -> list:
    """``detections`` (CocoMetric's result records) as the model's outputs that
    ``CocoMetric.process`` takes: xyxy boxes, class indices, RLE masks."""
    label = {c['id']: i for i, c in enumerate(gt['categories'])}
    samples = []
    for image in gt['images']:
        mine = [d for d in detections if d['image_id'] == image['id']]
        boxes = torch.tensor([d['bbox'] for d in mine], dtype=torch.float32).reshape(-1, 4)
        boxes[:, 2:] += boxes[:, :2]
        samples.append(dict(img_id=image['id'], ori_shape=(image['height'], image['width']),
                            pred_instances=dict(
                                bboxes=boxes,
                                scores=torch.tensor([d['score'] for d in mine]),
                                labels=torch.tensor([label[d['category_id']] for d in mine]),
                                masks=[dict(d['segmentation']) for d in mine])))
    return samples


def run_metric(cfg: dict, samples: list, log_file) -> dict:
    """The metric built from ``cfg`` through mmdet's registry, over ``samples``."""
    init_default_scope('mmdet')
    metric = METRICS.build(cfg)
    metric.dataset_meta = dict(classes=TOY_CLASSES)
    metric.process({}, samples)
    MMLogger.get_instance(f'coco_metric_{log_file}', log_file=str(log_file))  # the current one
    with contextlib.redirect_stdout(io.StringIO()):  # pycocotools' summary table
        return metric.evaluate(len(samples))


@pytest.fixture(scope='module')
def toy_sets(toy_root):
    """Each toy split's annotation file, ground truth and ~100 detections per image."""
    found = []
    for split in ('val2017', 'train2017'):
        path = toy_root / 'data' / 'toy' / 'coco' / 'annotations' / f'instances_{split}.json'
        gt = json.loads(path.read_text())
        found.append((str(path), gt, make_detections(gt, dets_per_image=100, seed=1)))
    return found


def test_recipes_evaluate_with_it():
    for name in COCO_RECIPES:
        cfg = Config.fromfile(config(name))
        for evaluator in (cfg.val_evaluator, cfg.test_evaluator):
            assert evaluator.type == 'FasterCocoMetric' and 'coco_backend' not in evaluator, name
    # panoptic quality stays mmdet's; the panoptic recipe's instance AP too
    cfg = Config.fromfile(config('vit5_mask2former-pan_coco.py'))
    assert [e.type for e in cfg.test_evaluator] == ['CocoPanopticMetric', 'CocoMetric']


@pytest.mark.parametrize('options', [
    dict(classwise=True),  # the recipes': bbox, segm at proposal_nums (100, 300, 1000)
    dict(metric=['bbox', 'segm', 'proposal'], proposal_nums=(1, 10, 100)),  # COCO's maxDets
    # no 100 among maxDets: AP is -1; pycocotools compares iou_thrs with ==, so an array
    dict(proposal_nums=(10, 20, 50), iou_thrs=np.array([0.5, 0.75])),
])
def test_toy_sets_same_metrics(toy_sets, tmp_path, options):
    cfg = Config.fromfile(config('toy/vit5-tiny_maskrcnn_shapes.py')).test_evaluator
    for i, (ann_file, gt, detections) in enumerate(toy_sets):
        samples = data_samples(gt, detections)
        found = {}
        for backend in BACKENDS:
            log = tmp_path / f'{backend}_{i}.log'
            found[backend] = run_metric(dict(cfg, ann_file=ann_file, coco_backend=backend,
                                             **options), samples, log)
            ran = [line for line in log.read_text().splitlines() if 'COCO evaluation by' in line]
            assert len(ran) == 1 and f'by {backend} ' in ran[0], ran
        assert found[FASTER] == found[PYCOCOTOOLS]
        assert 'coco/bbox_mAP' in found[FASTER] and 'coco/segm_mAP' in found[FASTER]
        if options.get('classwise'):
            assert 'coco/rectangle_precision' in found[FASTER]
        if 'proposal' in options.get('metric', ()):
            assert 'coco/AR@100' in found[FASTER]
        if options.get('proposal_nums') == (10, 20, 50):
            assert found[FASTER]['coco/bbox_mAP'] == -1.0
        else:
            assert 0.0 < found[FASTER]['coco/bbox_mAP'] < 1.0


def test_toy_sets_bit_for_bit(toy_sets):
    for ann_file, gt, detections in toy_sets:
        for iou_type in IOU_TYPES:
            runs = [evaluate(b, load_gt(b, ann_file), detections, iou_type) for b in BACKENDS]
            assert differences(*runs) == {}, (ann_file, iou_type)


def test_dense_set_bit_for_bit(tmp_path):
    # 5 classes: a category then has ~200 objects (COCO's commonest have thousands), so the
    # first recall threshold past one true positive falls beyond the second detection
    gt = make_ground_truth(images=120, seed=3, classes=5)
    detections = make_detections(gt, dets_per_image=100, seed=4)
    assert 10_000 <= len(detections) <= 12_000
    path = tmp_path / 'gt.json'
    path.write_text(json.dumps(gt))
    precision = []
    for iou_type in IOU_TYPES:
        runs = [evaluate(b, load_gt(b, str(path)), detections, iou_type) for b in BACKENDS]
        assert differences(*runs) == {}, iou_type
        stats = runs[1]['stats']
        assert 0.0 < stats[0] < stats[1] < 1.0, stats
        precision.append(runs[1]['precision'])
    # faster-coco-eval's own arithmetic has 1.0 for both: 1 / (1 + eps) and 1.0 in pycocotools
    assert any((p == 1.0 / (1.0 + np.spacing(1))).any() for p in precision)
    assert any((p == 1.0).any() for p in precision)


def test_empty_results_same(tmp_path):
    """No detections at all: pycocotools cannot load them, and the metric reports nothing."""
    gt = dict(images=[dict(id=1, height=32, width=32)], categories=[
        dict(id=i + 1, name=n) for i, n in enumerate(TOY_CLASSES)],
        annotations=[dict(id=1, image_id=1, category_id=1, bbox=[1, 1, 9, 9], area=81.0,
                          iscrowd=0)])
    ann_file = tmp_path / 'gt.json'
    ann_file.write_text(json.dumps(gt))
    samples = [dict(img_id=1, ori_shape=(32, 32), pred_instances=dict(
        bboxes=torch.zeros(0, 4), scores=torch.zeros(0), labels=torch.zeros(0, dtype=int)))]
    for backend in BACKENDS:
        init_default_scope('mmdet')
        metric = METRICS.build(dict(type='FasterCocoMetric', ann_file=str(ann_file),
                                    metric=['bbox'], coco_backend=backend))
        metric.dataset_meta = dict(classes=TOY_CLASSES)
        metric.process({}, samples)
        assert metric.evaluate(1) == {}


def test_backend_choice(monkeypatch):
    assert FasterCocoMetric().coco_backend == FASTER  # installed: the default
    with pytest.raises(ValueError, match=r"coco_backend='faster': expected one of"):
        FasterCocoMetric(coco_backend='faster')
    # faster-coco-eval would sort maxDets; pycocotools evaluates them in the given order
    metric = FasterCocoMetric(proposal_nums=(1000, 100, 300))
    assert metric.coco_backend == PYCOCOTOOLS and 'ascending' in metric.backend_reason
    with pytest.raises(ValueError, match=r'proposal_nums=\(1000, 100, 300\)'):
        FasterCocoMetric(coco_backend=FASTER, proposal_nums=(1000, 100, 300))
    # where faster-coco-eval does not import
    monkeypatch.setitem(sys.modules, 'faster_coco_eval', None)
    monkeypatch.delitem(sys.modules, 'mmvit5.evaluation.faster_coco', raising=False)
    monkeypatch.delattr(mmvit5.evaluation, 'faster_coco', raising=False)
    metric = FasterCocoMetric()
    assert metric.coco_backend == PYCOCOTOOLS and 'does not import' in metric.backend_reason
    with pytest.raises(ImportError, match='pip install faster-coco-eval'):
        FasterCocoMetric(coco_backend=FASTER)


def test_benchmark_tool_writes_the_table(tmp_path, monkeypatch, capsys):
    """tools/benchmark_coco_eval.py on a tiny set: alternated rounds, a results file with
    machine, date and commit, and the table python -m benchmarks.tables renders from it."""
    from benchmarks.tables import render
    out = tmp_path / 'coco_eval.json'
    monkeypatch.setattr(sys, 'argv', ['benchmark_coco_eval.py', '--images', '6', '--dets', '30',
                                      '--rounds', '2', '--json', str(out)])
    with pytest.raises(SystemExit) as exit_code:
        runpy.run_path(osp.join(REPO, 'tools', 'benchmark_coco_eval.py'), run_name='__main__')
    assert exit_code.value.code == 0  # 1: some number differed
    data = json.loads(out.read_text())
    assert {'machine', 'date', 'commit', 'command'} <= set(data['meta'])
    for found in data['results'].values():
        assert all(len(times) == 2 for times in found['seconds'].values())
    table = render('coco-eval', results=str(tmp_path))
    assert table.count('yes, bit for bit') == 2 and 'commit: ' in table
    assert 'yes, bit for bit' in capsys.readouterr().out
