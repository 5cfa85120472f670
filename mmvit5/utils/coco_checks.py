"""What ``tools/finetune.py det`` checks in a COCO instances json before anything is built, and
the summary line it prints a split.

Each check stops on a mistake that mmdet (through pycocotools) would train on silently or
that would kill the run late: the message names the file, the id, the value, what was expected
and the fix. What mmdet does fairly (skipping an object of no area, clipping a box that reaches
beyond its image) is counted in the summary instead.
"""
import json
from collections import Counter
from typing import Dict, List

from ..checks import count

IMAGE_KEYS = ('id', 'file_name', 'width', 'height')
ANNOTATION_KEYS = ('id', 'image_id', 'category_id', 'bbox', 'area', 'segmentation')
HOW = ('COCO\'s "images" are {"id", "file_name", "width", "height"}, its "annotations" '
       '{"id", "image_id", "category_id", "bbox": [x, y, width, height], "area", '
       '"segmentation": polygons or RLE}')


def check_coco(coco: dict, ann_file: str) -> None:
    """Fail on a json mmdet would misread: no images or no annotations, an entry without a
    key mmdet reads, an image or annotation id used twice, an annotation of an image or a
    category the json does not list, a box without area, a polygon of fewer than 3 points, an
    empty mask, an RLE mask of another size than its image.

    Args:
        coco (dict): The json's content.
        ann_file (str): Its path, for the messages.
    """
    images = coco.get('images') or []
    annotations = coco.get('annotations') or []
    if not images:
        raise ValueError(f'{ann_file!r} lists no "images"; a COCO json needs one entry per '
                         'image: {"id", "file_name", "height", "width"}')
    if not annotations:
        raise ValueError(f'{ann_file!r} has no "annotations" (the list is empty or missing): '
                         'there is no object to learn or to score; annotate the images, or '
                         'pass the json that has them (--train-ann / --val-ann)')
    for kind, entries, keys in (('image', images, IMAGE_KEYS),
                                ('annotation', annotations, ANNOTATION_KEYS)):
        for index, entry in enumerate(entries):
            missing = [k for k in keys if k not in entry]
            if missing:
                raise ValueError(f'{ann_file!r}: {kind} {index} of "{kind}s" (id '
                                 f'{entry.get("id")!r}) has no {", ".join(missing)}; {HOW}')
    _unique_ids(images, ann_file, 'image', lambda i: repr(i['file_name']),
                'pycocotools keeps one image an id, so the other would never be read and its '
                'objects would land on the wrong image: give every image its own "id" and '
                'point its annotations\' "image_id" at it')
    _unique_ids(annotations, ann_file, 'annotation', lambda a: f'on image {a["image_id"]!r}',
                'pycocotools keeps one annotation an id, so one object would stand in for the '
                'other (and mmdet stops the run once its dataset is built): number the '
                'annotations uniquely')
    files = {i['id']: i['file_name'] for i in images}
    orphans = [a for a in annotations if a['image_id'] not in files]
    if orphans:
        raise ValueError(f'{ann_file!r} has {count(len(orphans), "annotation")} whose '
                         f'"image_id" is not among its "images" (first: annotation id '
                         f'{orphans[0]["id"]!r}, image_id {orphans[0]["image_id"]!r}); mmdet '
                         'would drop them without a word: list the image in "images" or '
                         'correct the image_id')
    check_coco_categories(coco, ann_file)
    sizes = {i['id']: (i['width'], i['height']) for i in images}
    for check in (_box_size, _polygons, _rle_size):
        bad = [(a, problem) for a in annotations
               for problem in [check(a, *sizes[a['image_id']])] if problem]
        if bad:
            ann, (value, expected, fix) = bad[0]
            others = f' ({len(bad) - 1} more like it)' if len(bad) > 1 else ''
            raise ValueError(f'{ann_file!r}: annotation id {ann["id"]!r} on image '
                             f'{ann["image_id"]!r} ({files[ann["image_id"]]!r}) has {value}'
                             f'{others}; {expected}: {fix}')


def _unique_ids(entries: List[dict], ann_file: str, kind: str, describe, why: str) -> None:
    repeated = [i for i, n in Counter(e['id'] for e in entries).items() if n > 1]
    if repeated:
        twins = [describe(e) for e in entries if e['id'] == repeated[0]]
        more = f' ({len(repeated) - 1} more ids repeat)' if len(repeated) > 1 else ''
        raise ValueError(f'{ann_file!r} uses {kind} id {repeated[0]!r} for {len(twins)} '
                         f'{kind}s ({", ".join(twins)}){more}; {why}')


def _box_size(ann: dict, width: int, height: int):
    box = ann['bbox']
    if len(box) != 4 or box[2] <= 0 or box[3] <= 0:
        return (f'"bbox" {box}', 'a COCO box is [x, y, width, height], width and height '
                'above 0', 'correct the box or delete the annotation (mmdet would skip it '
                'without a word)')


def _polygons(ann: dict, width: int, height: int):
    mask = ann['segmentation']
    if not mask:
        return ('no mask ("segmentation" is empty)', 'the instance recipes learn a mask for '
                'every object, and mmdet would ignore this one without a word',
                'draw its polygon or delete the annotation')
    if isinstance(mask, list):
        for polygon in mask:
            if len(polygon) < 6 or len(polygon) % 2:
                return (f'a polygon of {len(polygon)} numbers ({polygon[:8]}'
                        f'{" ..." * (len(polygon) > 8)})', 'a polygon is x, y pairs, at least '
                        '3 of them (6 numbers), and mmdet would ignore the object without a '
                        'word', 'redraw it or delete the annotation')


def _rle_size(ann: dict, width: int, height: int):
    mask = ann['segmentation']
    if isinstance(mask, dict) and list(mask.get('size') or ()) != [height, width]:
        return (f'an RLE mask of "size" {mask.get("size")} (height, width)', f'the json says '
                f'its image is {height} high and {width} wide, and a mask covers its whole '
                'image (mmdet would stop the run with "all input arrays must have the same '
                'shape")', 'encode the mask at its image\'s size, or correct the image\'s '
                '"width" and "height"')


def check_coco_categories(coco: dict, ann_file: str) -> None:
    """Fail on a category id listed twice, or an annotation whose ``category_id`` the json's
    ``categories`` do not list: mmdet's ``CocoDataset`` would drop that object without a
    word."""
    known = [c.get('id') for c in coco.get('categories') or []]
    twice = sorted({i for i in known if known.count(i) > 1})
    if twice:
        raise ValueError(f'{ann_file!r} lists the category ids {twice} more than once in '
                         '"categories"; every category needs its own id')
    known = sorted(known)
    unknown = Counter(a.get('category_id') for a in coco.get('annotations') or []
                      if a.get('category_id') not in known)
    if unknown:
        first = next(a for a in coco['annotations'] if a.get('category_id') in unknown)
        ids = ', '.join(f'{i!r} ({n} annotation{"s" * (n > 1)})' for i, n in unknown.items())
        raise ValueError(
            f'{ann_file!r} has annotations with category_id {ids} (first: annotation id '
            f'{first.get("id")!r} on image {first.get("image_id")!r}), but its "categories" '
            f'list the ids {known}; mmdet would drop these objects without a word. Add '
            f'{{"id": {next(iter(unknown))!r}, "name": ...}} to "categories", or correct the '
            'annotations\' category_id')


def check_same_categories(train: dict, val: dict, train_file: str, val_file: str) -> None:
    """Fail unless both jsons list the same categories, ids and names, in the same order:
    mmdet numbers the labels in the order of ``categories``, and ``CocoMetric`` maps them back
    to the validation json's ids."""
    lists = [[(c.get('id'), c.get('name')) for c in coco.get('categories') or []]
             for coco in (train, val)]
    if lists[0] == lists[1]:
        return
    k = next((k for k, (a, b) in enumerate(zip(*lists)) if a != b), min(map(len, lists)))
    entries = [json.dumps(dict(id=c[k][0], name=c[k][1])) if k < len(c) else 'nothing'
               for c in lists]
    raise ValueError(f'the training json {train_file!r} and the validation json {val_file!r} '
                     f'list different "categories": entry {k} is {entries[0]} in training but '
                     f'{entries[1]} in validation; mmdet numbers the labels in the order of '
                     '"categories" and the evaluation maps them back by id, so both need the '
                     'same ids and names in the same order: copy the training json\'s '
                     '"categories" into the validation json')


def coco_summary(coco: dict, split: str, filter_cfg: dict = None) -> str:
    """One line on a COCO split as mmdet will read it: images, objects, and what happens to
    the images without objects, the images under ``filter_cfg.min_size``, the objects mmdet
    skips and the boxes that reach beyond their image (``filter_cfg`` is the training
    dataset's; a validation split keeps every image, since mmdet filters nothing in test
    mode)."""
    images = coco.get('images') or []
    annotations = coco.get('annotations') or []
    with_objects = {a.get('image_id') for a in annotations}
    empty = sum(i.get('id') not in with_objects for i in images)
    sizes: Dict = {i.get('id'): (i.get('width', 0), i.get('height', 0)) for i in images}
    kept = [(a, sizes.get(a.get('image_id'), (0, 0))) for a in annotations]
    kept = [(a, size) for a, size in kept if not (a.get('ignore') or _skipped(a, *size))]
    skipped = len(annotations) - len(kept)
    beyond = sum(_beyond(a, *size) for a, size in kept)
    crowd = sum(1 for a in annotations if a.get('iscrowd'))
    parts = [f'{split}: {len(images)} images, {len(annotations) - skipped} objects']
    if crowd:
        parts.append(f'{crowd} of them crowd regions (iscrowd, ignored in the loss)')
    if skipped:
        parts.append(f'{count(skipped, "object")} skipped by mmdet (ignore flag, or a box of '
                     'no area, under 1 px or outside its image)')
    if beyond:
        fate = ('clipped to it by the resize (mmdet\'s clip_object_border), its mask cut at '
                'the border' if split == 'train' else
                'scored as the json has them (the predictions stay inside)')
        parts.append(f'{count(beyond, "object")} reaching beyond its image: {fate}')
    filter_cfg = filter_cfg or {}
    if empty:
        if split != 'train':
            fate = 'kept (validation and test keep every image)'
        elif filter_cfg.get('filter_empty_gt'):
            fate = ('dropped from training by filter_empty_gt (train_dataloader.dataset.'
                    'filter_cfg; set it False to train on them as background)')
        else:
            fate = 'kept as background (filter_empty_gt is off)'
        parts.append(f'{count(empty, "image")} without objects: {fate}')
    min_size = filter_cfg.get('min_size', 0) if split == 'train' else 0
    small = sum(1 for i in images if min(i.get('width', 0), i.get('height', 0)) < min_size)
    if small:
        parts.append(f'{count(small, "image")} under filter_cfg.min_size='
                     f'{min_size} px on a side: dropped from training')
    return '; '.join(parts)


def _skipped(ann: dict, width: int, height: int) -> bool:
    """Whether mmdet's ``CocoDataset.parse_data_info`` skips this object."""
    x, y, w, h = ann.get('bbox') or (0, 0, 0, 0)
    inside = (max(0, min(x + w, width) - max(x, 0)) * max(0, min(y + h, height) - max(y, 0)))
    return inside == 0 or ann.get('area', 0) <= 0 or w < 1 or h < 1


def _beyond(ann: dict, width: int, height: int) -> bool:
    """Whether the object's box or polygons reach beyond its image."""
    x, y, w, h = ann.get('bbox') or (0, 0, 0, 0)
    points = [p for polygon in ann.get('segmentation') or () if isinstance(polygon, list)
              for p in zip(polygon[::2], polygon[1::2])]
    return (x < 0 or y < 0 or x + w > width or y + h > height
            or any(px < 0 or py < 0 or px > width or py > height for px, py in points))
