"""What ``tools/finetune.py det`` checks in a COCO instances json before anything is built, and
the summary line it prints a split.

Each check stops on a mistake that mmdet (through pycocotools) would train on silently or
that would kill the run late: the message names the file, the id, the value, what was expected
and the fix. What mmdet does fairly (skipping an object of no area, clipping a box that reaches
beyond its image) is counted in the summary instead.
"""
import json
import math
import os.path as osp
from collections import Counter
from typing import Dict, List

from ..checks import count

IMAGE_KEYS = ('id', 'file_name', 'width', 'height')
ANNOTATION_KEYS = ('id', 'image_id', 'category_id', 'bbox', 'area', 'segmentation')
HOW = ('COCO\'s "images" are {"id", "file_name", "width", "height"}, its "annotations" '
       '{"id", "image_id", "category_id", "bbox": [x, y, width, height], "area", '
       '"segmentation": polygons or RLE}')


def check_coco(coco, ann_file: str) -> None:
    """Fail on a json mmdet would misread: not COCO's nesting, a field of the wrong type or
    value (:func:`check_coco_types`), no images or no annotations, an image or annotation id
    used twice, a file listed twice, an annotation of an image or a category the json does not
    list, a box without area, a polygon of fewer than 3 points, an empty mask, an RLE mask of
    another size than its image.

    Args:
        coco: The json's content.
        ann_file (str): Its path, for the messages.
    """
    check_coco_types(coco, ann_file)
    images = coco.get('images') or []
    annotations = coco.get('annotations') or []
    _unique_ids(images, ann_file, 'image', lambda i: repr(i['file_name']),
                'pycocotools keeps one image an id, so the other would never be read and its '
                'objects would land on the wrong image: give every image its own "id" and '
                'point its annotations\' "image_id" at it')
    _unique_files(images, ann_file)
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


# ----------------------------------------------------------------- every field typed
def check_coco_types(coco, ann_file: str) -> None:
    """Fail unless the json nests as COCO does and every field mmdet and pycocotools read has
    its type and a value they can use: integer ids, a file name, a size of positive integers,
    boxes of 4 finite numbers, a finite area of 0 or more, ``iscrowd`` 0 or 1, polygons of
    finite numbers near their image, RLE masks whose runs cover their ``size``.

    The message names the entry (image or annotation id, or its place in the list), the field,
    its value and what was expected.

    Args:
        coco: The json's content.
        ann_file (str): Its path, for the messages.
    """
    _nesting(coco, ann_file, (('images', IMAGE_SHAPE), ('annotations', ANNOTATION_SHAPE),
                              ('categories', CATEGORY_SHAPE)))
    images = coco.get('images') or []
    annotations = coco.get('annotations') or []
    if not images:
        raise ValueError(f'{ann_file!r} lists no "images"; a COCO json needs one entry per '
                         f'image: {IMAGE_SHAPE}')
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
                                 f'{_short(entry.get("id"))}) has no {", ".join(missing)}; '
                                 f'{HOW}')
    _typed(ann_file, 'categories', coco.get('categories') or [], _category_name,
           CATEGORY_FIELDS)
    _typed(ann_file, 'images', images, _image_name, (
        ('id', _integer, 'an integer'),
        ('file_name', _name, 'a non-empty string, the path below the image folder'),
        ('width', _positive, 'a whole number of pixels above 0'),
        ('height', _positive, 'a whole number of pixels above 0')))
    _typed(ann_file, 'annotations', annotations, _annotation_name, (
        ('id', _integer, 'an integer'),
        ('image_id', _integer, 'an integer, the "id" of its image'),
        ('category_id', _integer, 'an integer, the "id" of its category'),
        ('bbox', _box, 'a box [x, y, width, height] of 4 finite numbers'),
        ('area', _area, 'the object\'s area in pixels, a finite number of 0 or more'),
        ('iscrowd', _crowd, '0 (an object) or 1 (a crowd region), or no field'),
        ('segmentation', _segmentation_type, 'polygons [[x1, y1, x2, y2, ...], ...] of finite '
         'numbers, or an RLE mask {"size": [height, width], "counts": ...}')))
    sizes = {i['id']: (i['width'], i['height']) for i in images}
    for check in (_polygon_reach, _rle_runs):
        bad = [(a, problem) for a in annotations if a['image_id'] in sizes
               for problem in [check(a['segmentation'], *sizes[a['image_id']])] if problem]
        if bad:
            ann, (value, expected) = bad[0]
            raise ValueError(f'{ann_file!r}: {_annotation_name(ann)} has "segmentation" '
                             f'{value}{_more(bad)}; expected {expected}: correct the mask or '
                             'delete the annotation')


def check_category_types(coco, ann_file: str) -> None:
    """Fail unless the json is an object whose ``categories`` (if any) are objects with an
    integer ``id`` and a non-empty ``name``; the part of :func:`check_coco_types` that reading
    the class names needs."""
    _nesting(coco, ann_file, (('categories', CATEGORY_SHAPE),))
    _typed(ann_file, 'categories', coco.get('categories') or [], _category_name,
           CATEGORY_FIELDS)


def _nesting(coco, ann_file: str, lists) -> None:
    if not isinstance(coco, dict):
        raise ValueError(f'{ann_file!r} holds {_json_type(coco)}, not an object; a COCO json '
                         'is {"images": [...], "annotations": [...], "categories": [...]}')
    for key, shape in lists:
        entries = coco.get(key)
        if entries is None:
            continue
        if not isinstance(entries, list):
            raise ValueError(f'{ann_file!r}: "{key}" is {_json_type(entries)} '
                             f'({_short(entries)}); expected a list of objects {shape}')
        odd = [k for k, e in enumerate(entries) if not isinstance(e, dict)]
        if odd:
            raise ValueError(f'{ann_file!r}: entry {odd[0]} of "{key}" is '
                             f'{_json_type(entries[odd[0]])} ({_short(entries[odd[0]])})'
                             f'{_more(odd)}; expected an object {shape}')


IMAGE_SHAPE = '{"id", "file_name", "width", "height"}'
ANNOTATION_SHAPE = ('{"id", "image_id", "category_id", "bbox", "area", "segmentation"'
                    ', "iscrowd"}')
CATEGORY_SHAPE = '{"id", "name"}'


def _typed(ann_file: str, key: str, entries: List[dict], name, fields) -> None:
    """The first entry whose field is missing or fails its test, named with the value and
    what was expected; only ``iscrowd`` may be left out."""
    for field, test, expected in fields:
        bad = [e for e in entries if (field in e or field != 'iscrowd') and
               not (field in e and test(e[field]))]
        if bad:
            found = f'"{field}" {_short(bad[0][field])}' if field in bad[0] else \
                f'no "{field}"'
            raise ValueError(f'{ann_file!r}: {name(bad[0])} has {found}{_more(bad)}; '
                             f'expected {expected}: correct the "{field}" of the entries of '
                             f'"{key}"')


def _more(bad: list) -> str:
    return f' ({len(bad) - 1} more like it)' if len(bad) > 1 else ''


def _entry_id(entry: dict) -> str:
    return _short(entry.get('id')) if _integer(entry.get('id')) else \
        f'{_short(entry.get("id"))} (not an integer)'


def _image_name(image: dict) -> str:
    return f'image id {_entry_id(image)} ({_short(image.get("file_name"))})'


def _annotation_name(ann: dict) -> str:
    return f'annotation id {_entry_id(ann)} on image {_short(ann.get("image_id"))}'


def _category_name(category: dict) -> str:
    return f'category id {_entry_id(category)}'


def _integer(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and \
        math.isfinite(value)


def _name(value) -> bool:
    return isinstance(value, str) and bool(value.strip())


CATEGORY_FIELDS = (('id', _integer, 'an integer'), ('name', _name, 'a non-empty string'))


def _positive(value) -> bool:
    return _integer(value) and value > 0


def _box(value) -> bool:
    return isinstance(value, list) and len(value) == 4 and _numbers(value)


def _area(value) -> bool:
    return _number(value) and value >= 0


def _crowd(value) -> bool:
    return _integer(value) and value in (0, 1)


def _numbers(values: list) -> bool:
    """All finite numbers, no booleans (at C speed: COCO's train json has 30 M of them; a
    sum that overflows means coordinates no image has)."""
    return set(map(type, values)) <= {int, float} and math.isfinite(sum(values))


def _segmentation_type(mask) -> bool:
    if isinstance(mask, list):
        return all(isinstance(p, list) and _numbers(p) for p in mask)
    if isinstance(mask, dict):
        size, counts = mask.get('size'), mask.get('counts')
        return (isinstance(size, list) and len(size) == 2 and all(map(_positive, size))
                and (isinstance(counts, str) or isinstance(counts, list)
                     and all(_integer(c) and c >= 0 for c in counts)))
    return False


def _polygon_reach(mask, width: int, height: int):
    """A polygon point more than an image's size outside it: no drawing tool puts one there,
    and pycocotools allocates its rasterising buffers from the points' spread."""
    for polygon in mask if isinstance(mask, list) else ():
        xs, ys = polygon[::2], polygon[1::2]
        if xs and ys and -width <= min(xs) <= max(xs) <= 2 * width and \
                -height <= min(ys) <= max(ys) <= 2 * height:
            continue
        for x, y in zip(xs, ys):
            if not (-width <= x <= 2 * width and -height <= y <= 2 * height):
                return (f'a polygon point ({x}, {y})', f'points on the {width}x{height} '
                        '(width x height) image, or near it')


def _rle_runs(mask, width: int, height: int):
    """RLE runs that do not add up to the mask's pixels: pycocotools' decoder writes past
    its buffer (a crash, or a garbled mask) on such counts."""
    if not isinstance(mask, dict):
        return None
    counts = mask['counts']
    runs = _rle_string_runs(counts) if isinstance(counts, str) else counts
    pixels = mask['size'][0] * mask['size'][1]
    if runs is None or sum(runs) != pixels:
        total = 'counts that do not decode' if runs is None else \
            f'counts whose runs add up to {sum(runs)} pixels'
        return (f'{total} ({_short(counts)}), with "size" {mask["size"]}',
                f'runs that add up to height x width = {pixels} pixels (pycocotools.mask.'
                'encode writes them)')


def _rle_string_runs(counts: str):
    """The runs of a compressed RLE string (pycocotools' ``rleFrString``), None if it is
    cut inside a number or holds a character outside its alphabet."""
    runs, k = [], 0
    while k < len(counts):
        value, shift, more = 0, 0, True
        while more:
            if k >= len(counts):
                return None
            c = ord(counts[k]) - 48
            if not 0 <= c < 64:
                return None
            value |= (c & 0x1f) << 5 * shift
            more = bool(c & 0x20)
            k += 1
            shift += 1
            if not more and c & 0x10:
                value |= -1 << 5 * shift
        if len(runs) > 2:
            value += runs[-2]
        runs.append(value)
    return runs if all(r >= 0 for r in runs) else None


def _json_type(value) -> str:
    for kind, name in ((bool, 'a boolean'), (int, 'a number'), (float, 'a number'),
                       (str, 'a string'), (list, 'a list'), (dict, 'an object')):
        if isinstance(value, kind):
            return name
    return 'null' if value is None else type(value).__name__


def _short(value, limit: int = 60) -> str:
    """``value`` as the json spells it, cut to ``limit`` characters."""
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):  # not from a json; repr tells it
        text = repr(value)
    return text if len(text) <= limit else text[:limit - 4] + ' ...'


def _unique_files(images: List[dict], ann_file: str) -> None:
    ids = {}
    for image in images:
        ids.setdefault(osp.normpath(image['file_name']), []).append(image['id'])
    twice = {name: i for name, i in ids.items() if len(i) > 1}
    if twice:
        name, repeated = next(iter(twice.items()))
        more = f' ({len(twice) - 1} more files listed twice)' if len(twice) > 1 else ''
        raise ValueError(f'{ann_file!r} lists the file {name!r} as {len(repeated)} images, ids '
                         f'{", ".join(map(repr, repeated))}{more}; one file is one image, and '
                         'mmdet would train on it once an id: merge their annotations under '
                         'one image id and delete the other entry')


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
