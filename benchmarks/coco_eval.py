"""COCO evaluation, faster-coco-eval against pycocotools: the same numbers, and the time each
takes (``tools/benchmark_coco_eval.py``).

:func:`make_ground_truth` generates a COCO-like set deterministically (polygon masks, a few
crowd regions as uncompressed RLE, as COCO has, over small, medium and large objects), and
:func:`make_detections` about ``dets_per_image`` detections per image of any such set, in the
form mmdet's ``CocoMetric`` writes them (``xywh`` boxes, compressed RLE masks, float32
scores): near copies of the ground truth at a spread of overlaps, some with the wrong class,
and false positives. :func:`evaluate`
runs one backend the way ``CocoMetric.compute_metrics`` does (its ``maxDets``, ``catIds`` and
``imgIds``; masks evaluated without their boxes); :func:`differences` compares two runs bit for
bit: the summary statistics and the accumulated precision, recall and score arrays.
"""
import contextlib
import io
import json
import os
import os.path as osp
import platform
import statistics
import tempfile
import time
from typing import Dict, List, Sequence

import numpy as np
from pycocotools import mask as mask_utils

# CocoMetric's defaults: proposal_nums=(100, 300, 1000) are the evaluation's maxDets
MMDET_MAX_DETS = (100, 300, 1000)
IOU_TYPES = ('bbox', 'segm')


def _polygon(box: np.ndarray, rng: np.random.Generator) -> List[float]:
    """A star-shaped polygon (8-24 vertices) inscribed in ``box`` = (x, y, w, h)."""
    x, y, w, h = box
    n = int(rng.integers(8, 25))
    t = np.sort(rng.uniform(0, 2 * np.pi, n))
    r = rng.uniform(0.6, 1.0, n)
    xs = x + w / 2 * (1 + r * np.cos(t))
    ys = y + h / 2 * (1 + r * np.sin(t))
    return np.stack([xs, ys], 1).round(2).flatten().tolist()


def _random_box(height: int, width: int, rng: np.random.Generator) -> np.ndarray:
    """(x, y, w, h) with a log-uniform area from 6x6 to most of the image (COCO's small,
    medium and large all present) and aspect ratios from 1:2 to 2:1."""
    side = np.exp(rng.uniform(np.log(6), np.log(0.9 * min(height, width))))
    aspect = np.exp(rng.uniform(-0.7, 0.7))
    w, h = min(side * aspect, width - 1), min(side / aspect, height - 1)
    return np.array([rng.uniform(0, width - w), rng.uniform(0, height - h), w, h])


def _jitter(box: np.ndarray, noise: float, height: int, width: int,
            rng: np.random.Generator) -> np.ndarray:
    """``box`` moved and rescaled by ``noise`` (relative to its size), kept in the image."""
    x, y, w, h = box
    w2, h2 = w * np.exp(rng.normal(0, noise)), h * np.exp(rng.normal(0, noise))
    x2, y2 = x + rng.normal(0, noise) * w, y + rng.normal(0, noise) * h
    x2, y2 = np.clip(x2, 0, width - 2), np.clip(y2, 0, height - 2)
    return np.array([x2, y2, max(1.0, min(w2, width - x2)), max(1.0, min(h2, height - y2))])


def _uncompressed_rle(polygon: List[float], height: int, width: int) -> dict:
    """COCO's crowd layout: run lengths as a list of ints, column-major, from the polygon."""
    mask = mask_utils.decode(mask_utils.frPyObjects([polygon], height, width))[..., 0]
    flat = mask.flatten(order='F')
    changes = np.flatnonzero(np.diff(flat)) + 1
    runs = np.diff(np.concatenate([[0], changes, [flat.size]]))
    counts = ([0] if flat[0] else []) + runs.tolist()
    return dict(counts=counts, size=[height, width])


def _score(rng: np.random.Generator, a: float, b: float) -> float:
    """A float32 score as mmdet writes it; one in ten quantized to 2 decimals, so ties occur."""
    score = rng.beta(a, b)
    if rng.random() < 0.1:
        score = round(score, 2)
    return float(np.float32(score))


def make_ground_truth(images: int, seed: int = 0, classes: int = 80) -> dict:
    """A COCO instances dict, the same for the same arguments: about 7 objects per image (as
    COCO), polygon masks, one in a hundred a crowd region (uncompressed RLE).

    Args:
        images (int): number of images (COCO val2017 has 5,000).
        seed (int): the random seed.
        classes (int): categories, with non-contiguous ids as COCO's (1-90 with gaps).
    """
    rng = np.random.default_rng(seed)
    cat_ids = sorted(rng.choice(np.arange(1, classes + classes // 8 + 1), classes,
                                replace=False).tolist())
    gt = dict(images=[], annotations=[],
              categories=[dict(id=c, name=f'class{c}', supercategory='thing') for c in cat_ids])
    for image_id in range(1, images + 1):
        height, width = int(rng.integers(360, 641)), int(rng.integers(360, 641))
        gt['images'].append(dict(id=image_id, file_name=f'{image_id:012d}.jpg',
                                 height=height, width=width))
        for _ in range(int(rng.poisson(7))):
            polygon = _polygon(_random_box(height, width, rng), rng)
            crowd = rng.random() < 0.01
            x0, y0 = min(polygon[0::2]), min(polygon[1::2])
            area = mask_utils.area(mask_utils.frPyObjects([polygon], height, width)[0])
            gt['annotations'].append(dict(
                id=len(gt['annotations']) + 1, image_id=image_id,
                category_id=int(rng.choice(cat_ids)), iscrowd=int(crowd), area=float(area),
                bbox=[x0, y0, max(polygon[0::2]) - x0, max(polygon[1::2]) - y0],
                segmentation=(_uncompressed_rle(polygon, height, width) if crowd
                              else [polygon])))
    return gt


def make_detections(gt: dict, dets_per_image: int = 100, seed: int = 0) -> List[dict]:
    """About ``dets_per_image`` detections per image of ``gt`` (any COCO instances dict), as
    ``CocoMetric.results2json`` writes them, the same for the same arguments: 1-3 near copies
    of each object at a spread of overlaps (one in ten with a wrong class), then false
    positives; float32 scores, ``xywh`` boxes and compressed RLE masks."""
    rng = np.random.default_rng(seed)
    cat_ids = [c['id'] for c in gt['categories']]
    objects: Dict[int, list] = {image['id']: [] for image in gt['images']}
    for ann in gt['annotations']:
        objects[ann['image_id']].append((np.array(ann['bbox']), ann['category_id']))
    detections = []
    for image in gt['images']:
        height, width = image['height'], image['width']
        count = int(rng.integers(max(1, dets_per_image - 10), dets_per_image + 1))
        boxes = []
        for box, label in objects[image['id']]:
            for _ in range(int(rng.integers(1, 4))):
                if len(boxes) < count:
                    wrong = rng.random() < 0.1
                    boxes.append((_jitter(box, rng.uniform(0.02, 0.4), height, width, rng),
                                  int(rng.choice(cat_ids)) if wrong else label,
                                  _score(rng, 5, 2)))
        while len(boxes) < count:
            boxes.append((_random_box(height, width, rng), int(rng.choice(cat_ids)),
                          _score(rng, 1, 5)))
        for box, label, score in boxes:
            rle = mask_utils.frPyObjects([_polygon(box, rng)], height, width)[0]
            rle['counts'] = rle['counts'].decode()  # as CocoMetric.results2json writes it
            detections.append(dict(image_id=image['id'], score=score, category_id=label,
                                   bbox=[float(np.float32(v)) for v in box], segmentation=rle))
    return detections


def records(detections: List[dict], iou_type: str) -> List[dict]:
    """What ``CocoMetric`` loads for ``iou_type``: boxes without masks, or masks without boxes
    (their areas then come from the masks); new dicts, as loading them adds keys."""
    if iou_type == 'bbox':
        return [dict(image_id=d['image_id'], category_id=d['category_id'], score=d['score'],
                     bbox=list(d['bbox'])) for d in detections]
    return [dict(image_id=d['image_id'], category_id=d['category_id'], score=d['score'],
                 segmentation=dict(d['segmentation'])) for d in detections]


def evaluate(backend: str, coco_gt, detections: List[dict], iou_type: str,
             max_dets: Sequence[int] = MMDET_MAX_DETS) -> Dict[str, np.ndarray]:
    """One evaluation as ``CocoMetric.compute_metrics`` runs it (its ``maxDets``, ``catIds``
    and ``imgIds``), from loading the detections to ``summarize``. ``coco_gt`` is the
    backend's COCO object (:func:`load_gt`).

    Returns:
        dict[str, np.ndarray]: the summary ``stats`` and the accumulated ``precision``,
        ``recall`` and ``scores``.
    """
    from mmvit5.evaluation.coco_metric import coco_api
    _, evaluator = coco_api(backend)
    with contextlib.redirect_stdout(io.StringIO()):  # pycocotools' progress and summary
        coco_eval = evaluator(coco_gt, coco_gt.loadRes(records(detections, iou_type)),
                              iou_type)
        coco_eval.params.catIds = coco_gt.get_cat_ids()
        coco_eval.params.imgIds = coco_gt.get_img_ids()
        coco_eval.params.maxDets = list(max_dets)
        coco_eval.evaluate()
        coco_eval.accumulate()
        coco_eval.summarize()
    return dict(stats=np.asarray(coco_eval.stats),
                **{key: coco_eval.eval[key] for key in ('precision', 'recall', 'scores')})


def load_gt(backend: str, ann_file: str):
    """The backend's COCO object of the annotation file ``ann_file``, as CocoMetric loads it."""
    from mmvit5.evaluation.coco_metric import coco_api
    coco, _ = coco_api(backend)
    with contextlib.redirect_stdout(io.StringIO()):  # pycocotools' progress lines
        return coco(ann_file)


def differences(a: Dict[str, np.ndarray], b: Dict[str, np.ndarray]) -> Dict[str, float]:
    """What differs between two evaluations (:func:`evaluate`): the largest absolute
    difference of each array (``inf`` where the shapes differ); empty when they are equal bit
    for bit."""
    found = {}
    for name in a:
        if a[name].shape != b[name].shape:
            found[name] = float('inf')
        elif a[name].tobytes() != b[name].tobytes():
            found[name] = float(np.abs(a[name] - b[name]).max())
    return found


def time_backends(ann_file: str, detections: List[dict], rounds: int,
                  backends: Sequence[str], progress=print) -> Dict[str, dict]:
    """Per IoU type: each backend's seconds per round, from loading the detections to
    ``summarize`` (the ground truth is loaded anew, untimed, for every run: the first
    evaluation also converts its polygons to RLE); the order reversed every other round, so
    that a drift of the machine hits both alike. Also what differs between the backends'
    results, and the summary statistics."""
    report = {}
    for iou_type in IOU_TYPES:
        seconds = {backend: [] for backend in backends}
        last = {}
        for i in range(rounds):
            for backend in backends if i % 2 == 0 else backends[::-1]:
                coco_gt = load_gt(backend, ann_file)
                start = time.perf_counter()
                last[backend] = evaluate(backend, coco_gt, detections, iou_type)
                seconds[backend].append(round(time.perf_counter() - start, 3))
                progress(f'[coco_eval] {iou_type} round {i + 1}/{rounds} {backend}: '
                         f'{seconds[backend][-1]:.1f} s')
        report[iou_type] = dict(seconds=seconds,
                                differences=differences(*(last[b] for b in backends)),
                                stats=last[backends[0]]['stats'].tolist())
    return report


def cpu_name() -> str:
    """The CPU model and the cores this process may use (the evaluation runs on the CPU)."""
    model = platform.processor() or 'CPU'
    if osp.isfile('/proc/cpuinfo'):
        with open('/proc/cpuinfo') as f:
            model = next((line.split(':', 1)[1].strip() for line in f
                          if line.startswith('model name')), model)
    return f'{model}, {len(os.sched_getaffinity(0))} cores'


def benchmark(images: int, dets_per_image: int, rounds: int, seed: int = 0,
              progress=print) -> dict:
    """Generate the set (:func:`make_ground_truth`, :func:`make_detections`) and time both
    backends on it (:func:`time_backends`); returns ``meta`` (machine, versions, sizes) and
    ``results``, what ``tools/benchmark_coco_eval.py --json`` writes."""
    from mmvit5.evaluation.coco_metric import BACKENDS, backend_version
    start = time.perf_counter()
    gt = make_ground_truth(images, seed=seed)
    detections = make_detections(gt, dets_per_image, seed=seed + 1)
    progress(f'[coco_eval] {len(gt["images"])} images, {len(gt["annotations"])} objects, '
             f'{len(detections)} detections generated in {time.perf_counter() - start:.0f} s')
    with tempfile.TemporaryDirectory() as tmp:
        ann_file = osp.join(tmp, 'instances.json')
        with open(ann_file, 'w') as f:
            json.dump(gt, f)
        del gt
        results = time_backends(ann_file, detections, rounds, BACKENDS, progress)
    versions = {b: backend_version(b) for b in BACKENDS}
    meta = dict(machine=cpu_name(), backends=list(BACKENDS), versions=versions, images=images,
                detections=len(detections), rounds=rounds, seed=seed,
                note=f'{images} generated images, {len(detections) / images:.0f} detections '
                f'each (boxes and RLE masks), median of {rounds} alternated rounds; '
                + ', '.join(f'{b} {v}' for b, v in versions.items()))
    return dict(meta=meta, results=results)


def speedup_table(data: dict) -> str:
    """The table of a ``tools/benchmark_coco_eval.py --json`` file: each backend's median
    seconds per IoU type, the speed-up and whether the numbers were equal bit for bit."""
    fast, slow = data['meta']['backends']
    lines = [f'| evaluation | {slow} (s) | {fast} (s) | speed-up | same numbers |',
             '|---|---|---|---|---|']
    for iou_type, found in data['results'].items():
        a = statistics.median(found['seconds'][slow])
        b = statistics.median(found['seconds'][fast])
        same = ('yes, bit for bit' if not found['differences'] else
                'no: ' + ', '.join(f'{k} by {v:.3g}' for k, v in found['differences'].items()))
        lines.append(f'| {iou_type} | {a:.1f} | {b:.1f} | {a / b:.1f}x | {same} |')
    return '\n'.join(lines)
