"""Generate a small shapes dataset in the real COCO, COCO panoptic, ADE20K and NYU-Depth-v2
file layouts.

Each image holds a few non-overlapping filled rectangles, ellipses and triangles on a noisy
gradient background. The same scenes are written three times:

- COCO instances: ``<out>/coco/{train2017,val2017}/*.jpg`` and
  ``<out>/coco/annotations/instances_{train2017,val2017}.json`` (polygon masks, categories
  ``rectangle``, ``ellipse``, ``triangle`` with ids 1-3);
- COCO panoptic: ``<out>/coco/annotations/panoptic_{train2017,val2017}.json`` and one PNG per
  image in ``panoptic_{train2017,val2017}/`` (segment id = R + 256 G + 256^2 B), the shapes
  as things (ids 1-3) and the rest as the stuff class ``background`` (id 4);
- ADE20K semantic maps: ``<out>/ade/ADEChallengeData2016/images/{training,validation}/*.jpg``
  and ``annotations/{training,validation}/*.png`` with 1 = background and 2-4 = the shapes,
  so that with ``reduce_zero_label=True`` they are ADE20K classes 0-3, named in
  ``classes.txt`` beside ``images/`` (one a line, for ``tools/finetune.py seg``).

Separate scenes with a depth map go into the NYU-Depth-v2 layout of mmseg's ``NYUDataset``:
``<out>/nyu/images/{train,test}/<room>_<id>.jpg`` and ``annotations/{train,test}/*.png``
(uint16, millimetres). Depth is a receding floor/wall plane (far at the top) with the shapes
standing nearer; brightness falls with depth, so depth is learnable from the image.

``<out>/VERSION`` names the generator's version: ``--if-stale`` (the quick start's) writes
the set again only where it is missing or older.

Usage:
    python tools/make_toy_data.py data --train 32 --val 8 --size 256 [--if-stale]
"""
import argparse
import json
import os
import sys
from typing import List, Tuple

import cv2
import numpy as np

CLASSES = ('rectangle', 'ellipse', 'triangle')
STUFF = 'background'  # the panoptic stuff class: every pixel that is no shape
NYU_ROOM = 'living_room'  # NYUDataset reads the scene category from the file name
# written to <out>/VERSION; --if-stale writes the set again when it differs. 2: each shape in
# its class's hue (1 wrote the drawn hue, saturation, value as blue, green, red)
VERSION = '2'
LAYOUTS = ('coco', 'ade', 'nyu')


def _polygon(kind: str, box: Tuple[int, int, int, int], rng: np.random.Generator) -> np.ndarray:
    x0, y0, x1, y1 = box
    if kind == 'rectangle':
        return np.array([[x0, y0], [x1, y0], [x1, y1], [x0, y1]], dtype=np.float32)
    if kind == 'ellipse':
        t = np.linspace(0, 2 * np.pi, 24, endpoint=False)
        cx, cy, rx, ry = (x0 + x1) / 2, (y0 + y1) / 2, (x1 - x0) / 2, (y1 - y0) / 2
        return np.stack([cx + rx * np.cos(t), cy + ry * np.sin(t)], 1).astype(np.float32)
    apex = rng.uniform(x0, x1)
    return np.array([[apex, y0], [x1, y1], [x0, y1]], dtype=np.float32)


def _boxes(size: Tuple[int, int], count: int, rng: np.random.Generator) -> List[tuple]:
    """Up to ``count`` boxes, non-overlapping with a margin, each 15-45 % of the short side."""
    h, w = size
    boxes = []
    for _ in range(50 * count):
        if len(boxes) == count:
            break
        bw, bh = (rng.uniform(0.15, 0.45, 2) * min(h, w)).astype(int)
        x0, y0 = rng.integers(0, w - bw), rng.integers(0, h - bh)
        box = (int(x0), int(y0), int(x0 + bw), int(y0 + bh))
        if all(box[2] + 4 < b[0] or b[2] + 4 < box[0] or box[3] + 4 < b[1] or b[3] + 4 < box[1]
               for b in boxes):
            boxes.append(box)
    return boxes


def make_scene(size: Tuple[int, int], rng: np.random.Generator):
    """One image (H, W, 3) uint8 BGR, its objects and its semantic map (H, W) uint8."""
    h, w = size
    gradient = np.linspace(0, 1, w)[None, :, None] * rng.uniform(40, 120, 3)
    image = rng.uniform(60, 140, 3) + gradient + rng.normal(0, 12, (h, w, 3))
    semantic = np.ones((h, w), np.uint8)
    objects = []
    for box in _boxes(size, int(rng.integers(1, 5)), rng):
        label = int(rng.integers(len(CLASSES)))
        poly = _polygon(CLASSES[label], box, rng)
        mask = np.zeros((h, w), np.uint8)
        cv2.fillPoly(mask, [np.round(poly).astype(np.int32)], 1)
        if mask.sum() < 16:
            continue
        # each class has its own hue range (HSV, hue on 0-255) so colour alone is informative
        # but noisy
        hsv = np.array([(label * 85 + rng.uniform(-25, 25)) % 255, rng.uniform(150, 255),
                        rng.uniform(120, 255)], np.float32)
        color = cv2.cvtColor(hsv.astype(np.uint8)[None, None], cv2.COLOR_HSV2BGR_FULL)[0, 0]
        image[mask > 0] = color + rng.normal(0, 10, (int(mask.sum()), 3))
        semantic[mask > 0] = label + 2
        objects.append(dict(label=label, polygon=poly, mask=mask, mask_area=int(mask.sum()),
                            bbox=_bbox(mask)))
    return np.clip(image, 0, 255).astype(np.uint8), objects, semantic


def write_split(out: str, split: str, count: int, size: int, rng: np.random.Generator,
                start_id: int) -> None:
    coco_split = {'train': 'train2017', 'val': 'val2017'}[split]
    ade_split = {'train': 'training', 'val': 'validation'}[split]
    coco_dir = os.path.join(out, 'coco')
    ade_dir = os.path.join(out, 'ade', 'ADEChallengeData2016')
    panoptic_dir = os.path.join(coco_dir, 'annotations', f'panoptic_{coco_split}')
    for d in (os.path.join(coco_dir, coco_split), panoptic_dir,
              os.path.join(ade_dir, 'images', ade_split),
              os.path.join(ade_dir, 'annotations', ade_split)):
        os.makedirs(d, exist_ok=True)
    images, annotations, panoptic = [], [], []
    for i in range(count):
        # mildly non-square images, as real datasets
        shape = (int(size * rng.uniform(0.75, 1.0)), int(size * rng.uniform(0.75, 1.0)))
        image, objects, semantic = make_scene(shape, rng)
        image_id = start_id + i
        name = f'{image_id:012d}'
        cv2.imwrite(os.path.join(coco_dir, coco_split, name + '.jpg'), image)
        cv2.imwrite(os.path.join(ade_dir, 'images', ade_split, name + '.jpg'), image)
        cv2.imwrite(os.path.join(ade_dir, 'annotations', ade_split, name + '.png'), semantic)
        segments = panoptic_png(os.path.join(panoptic_dir, name + '.png'), objects, semantic)
        panoptic.append(dict(image_id=image_id, file_name=name + '.png',
                             segments_info=segments))
        images.append(dict(id=image_id, file_name=name + '.jpg', height=shape[0],
                           width=shape[1]))
        for obj in objects:
            annotations.append(dict(
                id=len(annotations) + 1 + start_id * 10, image_id=image_id,
                category_id=obj['label'] + 1, bbox=obj['bbox'], area=obj['mask_area'],
                segmentation=[obj['polygon'].round(1).flatten().tolist()], iscrowd=0))
        if (i + 1) % max(1, count // 4) == 0 or i + 1 == count:
            print(f'[make_toy_data] {split}: {i + 1}/{count} images', file=sys.stderr)
    categories = [dict(id=i + 1, name=n, supercategory='shape') for i, n in enumerate(CLASSES)]
    with open(os.path.join(ade_dir, 'classes.txt'), 'w') as f:  # labels 0-3 = values 1-4
        f.write('\n'.join((STUFF, *CLASSES)) + '\n')
    with open(os.path.join(coco_dir, 'annotations', f'instances_{coco_split}.json'), 'w') as f:
        json.dump(dict(images=images, annotations=annotations, categories=categories), f)
    categories = [dict(c, isthing=1) for c in categories] + [
        dict(id=len(CLASSES) + 1, name=STUFF, supercategory='stuff', isthing=0)]
    with open(os.path.join(coco_dir, 'annotations', f'panoptic_{coco_split}.json'), 'w') as f:
        json.dump(dict(images=images, annotations=panoptic, categories=categories), f)


def _bbox(mask: np.ndarray) -> List[float]:
    ys, xs = np.nonzero(mask)
    return [float(xs.min()), float(ys.min()), float(xs.max() - xs.min() + 1),
            float(ys.max() - ys.min() + 1)]


def panoptic_png(path: str, objects: List[dict], semantic: np.ndarray) -> List[dict]:
    """Write the COCO panoptic PNG of one scene; returns its ``segments_info``.

    Segment ``k`` (1-based) is object ``k``; the last one is the stuff ``background``. The
    semantic map (1 = background, 2-4 = shapes) tells the pixels: objects never overlap.
    """
    ids = np.zeros(semantic.shape, np.int64)
    segments = []
    for k, obj in enumerate(objects, start=1):
        ids[obj['mask'] > 0] = k
        segments.append(dict(id=k, category_id=obj['label'] + 1, iscrowd=0,
                             bbox=obj['bbox'], area=obj['mask_area']))
    stuff = semantic == 1
    if stuff.any():
        k = len(objects) + 1
        ids[stuff] = k
        segments.append(dict(id=k, category_id=len(CLASSES) + 1, iscrowd=0, bbox=_bbox(stuff),
                             area=int(stuff.sum())))
    rgb = np.stack([ids % 256, ids // 256 % 256, ids // 256**2], axis=-1).astype(np.uint8)
    cv2.imwrite(path, rgb[..., ::-1])  # cv2 writes BGR
    return segments


def make_depth_scene(size: Tuple[int, int], rng: np.random.Generator):
    """One image (H, W, 3) uint8 BGR and its depth (H, W) in metres."""
    h, w = size
    near, far = rng.uniform(1.0, 2.0), rng.uniform(4.0, 8.0)
    depth = np.repeat(np.linspace(far, near, h)[:, None], w, axis=1)  # floor receding upwards
    for box in _boxes(size, int(rng.integers(1, 4)), rng):
        label = int(rng.integers(len(CLASSES)))
        mask = np.zeros((h, w), np.uint8)
        cv2.fillPoly(mask, [np.round(_polygon(CLASSES[label], box, rng)).astype(np.int32)], 1)
        # an object stands on the floor: nearer than the floor behind it
        depth[mask > 0] = depth[box[3] - 1, 0] * rng.uniform(0.5, 0.9)
    tint = rng.uniform(0.7, 1.0, 3)
    image = 255 * (1 - depth[..., None] / 10) * tint + rng.normal(0, 6, (h, w, 3))
    return np.clip(image, 0, 255).astype(np.uint8), depth


def write_depth_split(out: str, split: str, count: int, size: int, rng: np.random.Generator,
                      start_id: int) -> None:
    nyu_split = {'train': 'train', 'val': 'test'}[split]
    image_dir = os.path.join(out, 'nyu', 'images', nyu_split)
    depth_dir = os.path.join(out, 'nyu', 'annotations', nyu_split)
    for d in (image_dir, depth_dir):
        os.makedirs(d, exist_ok=True)
    for i in range(count):
        shape = (int(size * rng.uniform(0.75, 1.0)), int(size * rng.uniform(0.75, 1.0)))
        image, depth = make_depth_scene(shape, rng)
        name = f'{NYU_ROOM}_{start_id + i:05d}'
        cv2.imwrite(os.path.join(image_dir, name + '.jpg'), image)
        cv2.imwrite(os.path.join(depth_dir, name + '.png'),
                    np.round(depth * 1000).astype(np.uint16))


def make_dataset(out: str, train: int = 32, val: int = 8, size: int = 256,
                 seed: int = 0) -> str:
    """Write every layout under ``out``; returns ``out``."""
    rng = np.random.default_rng(seed)
    write_split(out, 'train', train, size, rng, start_id=1)
    write_split(out, 'val', val, size, rng, start_id=100000)
    write_depth_split(out, 'train', train, size, rng, start_id=1)
    write_depth_split(out, 'val', val, size, rng, start_id=100000)
    with open(os.path.join(out, 'VERSION'), 'w') as f:
        f.write(VERSION + '\n')
    return out


def is_current(out: str) -> bool:
    """Whether ``out`` holds every layout, written by this version of the generator."""
    try:
        with open(os.path.join(out, 'VERSION')) as f:
            version = f.read().strip()
    except OSError:
        return False
    return version == VERSION and all(os.path.isdir(os.path.join(out, d)) for d in LAYOUTS)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('out', help='output folder (gets coco/, ade/ and nyu/ inside)')
    parser.add_argument('--train', type=int, default=32, help='training images')
    parser.add_argument('--val', type=int, default=8, help='validation images')
    parser.add_argument('--size', type=int, default=256, help='longest image side')
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument('--if-stale', action='store_true',
                        help='write nothing if OUT already holds a set of this version')
    args = parser.parse_args()
    if args.train < 1 or args.val < 1 or args.size < 64:
        parser.error('--train and --val must be >= 1 and --size >= 64')
    if args.if_stale and is_current(args.out):
        print(f'[make_toy_data] {args.out} is current (version {VERSION}); kept')
        return
    make_dataset(args.out, args.train, args.val, args.size, args.seed)
    print(f'[make_toy_data] wrote {args.out}/coco (instances and panoptic), '
          f'{args.out}/ade/ADEChallengeData2016 and {args.out}/nyu')


if __name__ == '__main__':
    main()
