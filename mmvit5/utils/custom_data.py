"""Point a shipped recipe at your own dataset: COCO-format instances for the detectors, a folder
of images and PNG masks for the segmentors (``tools/finetune.py``).

The class names are read from the data (the COCO json's ``categories``, or a text file with one
name a line), put into every dataset's ``metainfo`` and the heads' ``num_classes``; the files
are checked before anything is built, with errors that name the value, what was expected and
what to change. The mechanisms are mmdet's ``CocoDataset`` and mmseg's ``BaseSegDataset``; the
config keeps the recipe's model, pipelines and optimizer.
"""
import json
import os.path as osp
from collections import Counter
from typing import Dict, NamedTuple, Optional, Sequence, Tuple

import numpy as np
from mmengine.config import Config
from mmengine.fileio import list_dir_or_file

from .coco_checks import (
    check_category_types,
    check_coco,
    check_same_categories,
    coco_summary,
)
from .config import innermost_dataset
from .image_decode import Decoded, decode_all, refuse_undecodable
from .image_frames import AS_STORED, UPRIGHT, LoadRule, check_frames, load_rule
from .palette import distinct_palette

LOADERS = ('train_dataloader', 'val_dataloader', 'test_dataloader')
IGNORE_INDEX = 255  # mmseg's: pixels of this value count for no class


class OwnData(NamedTuple):
    """What :func:`use_coco_data` and :func:`use_seg_folder` found in the files."""
    classes: Tuple[str, ...]  #: the class names, label 0 first
    summary: Tuple[str, ...]  #: one line a split: images, objects, what happens to the empty


def read_class_file(path: str) -> Tuple[str, ...]:
    """Class names from a text file, one a line, in label order; blank lines are skipped.

    Args:
        path (str): e.g. ``data/mine/classes.txt``.

    Returns:
        tuple[str]: The names; the first is label 0.
    """
    if not osp.isfile(path):
        raise FileNotFoundError(f'class file {path!r} does not exist; write one class name a '
                                'line (label 0 first) or pass its path with --classes')
    try:
        with open(path, encoding='utf-8') as f:
            names = tuple(line.strip() for line in f if line.strip())
    except UnicodeDecodeError as e:
        raise ValueError(f'class file {path!r} is not UTF-8 text ({e}); write one class name '
                         'a line, saved as UTF-8') from e
    return _checked_names(names, f'class file {path!r}', 'write one class name a line')


def coco_classes(ann_file: str) -> Tuple[str, ...]:
    """Class names of a COCO instances json, in the order of its ``categories`` list.

    That order is mmdet's label order: ``CocoDataset`` looks the category ids up by name and
    numbers them as the json lists them, whatever their ids.

    Args:
        ann_file (str): e.g. ``data/mine/annotations/train.json``.
    """
    return _coco_names(_read_coco(ann_file), ann_file)


def _read_coco(ann_file: str) -> dict:
    if not osp.isfile(ann_file):
        raise FileNotFoundError(f'annotation file {ann_file!r} does not exist; pass the COCO '
                                'json of the split (--train-ann / --val-ann, relative to the '
                                'data root)')
    try:
        with open(ann_file, encoding='utf-8') as f:
            return json.load(f)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise ValueError(f'{ann_file!r} is not a JSON file ({" ".join(str(e).split())[:200]}); '
                         'pass the COCO json of the split, saved as UTF-8 (a json linter '
                         'shows where it breaks)') from e


def _coco_names(coco: dict, ann_file: str) -> Tuple[str, ...]:
    check_category_types(coco, ann_file)
    names = tuple(c['name'].strip() for c in coco.get('categories') or [])
    return _checked_names(names, f'{ann_file!r} (its "categories")',
                          'list every class as {"id": ..., "name": ...} in "categories"')


def _checked_names(names: Tuple[str, ...], where: str, fix: str) -> Tuple[str, ...]:
    if not names or not all(names):
        raise ValueError(f'{where} has {"no" if not names else "an empty"} class name; {fix}')
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ValueError(f'{where} names {repeated} more than once; class names must be '
                         'unique (rename or merge them)')
    return names


def set_num_classes(model: dict, num_classes: int) -> None:
    """Every classifying head of a Mask R-CNN / Cascade R-CNN, instance Mask2Former (mmdet),
    UperNet or Mask2Former (mmseg) config gets ``num_classes``: the box head(s) and mask head,
    the Mask2Former and fusion heads' things, or the decode and auxiliary heads.

    Mask2Former weighs every class 1 and its "no object" class apart (``class_weight`` of
    ``num_classes + 1``); that weighting is kept for the new count. Any other per-class
    weighting is the user's to set.

    Args:
        model (dict): The ``model`` of a config, changed in place.
        num_classes (int): The class count, background not counted for the detectors.
    """
    if 'roi_head' in model:
        heads = [*_as_list(model.roi_head.bbox_head), *_as_list(model.roi_head.get('mask_head'))]
    elif 'panoptic_head' in model:  # mmdet's MaskFormer / Mask2Former
        stuff = model.panoptic_head.get('num_stuff_classes')
        if stuff:
            raise ValueError(f'{model.type} here is panoptic ({stuff} stuff classes) but '
                             'COCO-format instances have things only: fine-tune '
                             'configs/vit5_mask2former-ins_coco.py, or set things, stuff and '
                             'the datasets\' metainfo with --cfg-options')
        _keep_no_object_weight(model.panoptic_head, model.panoptic_head.num_things_classes,
                               num_classes)
        for head in (model.panoptic_head, model.get('panoptic_fusion_head')):
            if head is not None:
                head.num_things_classes = num_classes
        return
    elif 'decode_head' in model:
        heads = [model.decode_head, *_as_list(model.get('auxiliary_head'))]
    else:
        raise ValueError(f'set_num_classes handles two-stage detectors (roi_head), Mask2Former '
                         f'(panoptic_head) and segmentors (decode_head); model type '
                         f'{model.get("type")!r} has none: set its heads\' class counts with '
                         '--cfg-options')
    for head in heads:
        if 'class_weight' in (head.get('loss_decode') or {}):
            raise ValueError(f'{head.type} weights its {head.num_classes} classes one by one '
                             '(class_weight); set the weights for your classes yourself')
        _keep_no_object_weight(head, head.num_classes, num_classes)
        head.num_classes = num_classes


def _keep_no_object_weight(head: dict, old: int, new: int) -> None:
    """``[1] * old + [w]`` (MaskFormer's classes and "no object") becomes ``[1] * new + [w]``;
    other class weights are refused."""
    weight = (head.get('loss_cls') or {}).get('class_weight')
    if weight is None:
        return
    if len(weight) != old + 1 or any(w != 1.0 for w in weight[:-1]):
        raise ValueError(f'{head.type} weights its {old} classes one by one (class_weight); '
                         'set the weights for your classes yourself')
    head.loss_cls.class_weight = [1.0] * new + [weight[-1]]


def _as_list(value) -> list:
    if value is None:
        return []
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _require_dir(path: str, what: str, option: str) -> None:
    if not osp.isdir(path):
        where = '' if option == 'DATA_ROOT' else ' (relative to DATA_ROOT)'
        raise FileNotFoundError(f'{what} {path!r} does not exist; pass the folder with '
                                f'{option}{where}')


def check_coco_images(ann_file: str, img_dir: str, option: str, coco: dict,
                      rule: LoadRule = UPRIGHT) -> str:
    """Fail unless every image the json lists is in ``img_dir``, decodes as ``rule`` loads it
    (a file cut short is refused), and loads in the frame the json's ``width`` and ``height``
    give it (EXIF orientation included). Decodes every image once, in parallel
    (:func:`~mmvit5.utils.image_decode.decode_all`).

    Args:
        ann_file (str): The json's path, for the messages.
        img_dir (str): The folder its file names are relative to.
        option (str): The option that sets ``img_dir``, for the messages.
        coco (dict): The json's content (a COCO train json is ~450 MB: read it once).
        rule (LoadRule): How the split's pipeline loads images (:func:`load_rule`).

    Returns:
        str: The summary's note on images with an EXIF orientation ('' if none).
    """
    _require_dir(img_dir, 'image folder', option)
    images = coco['images']
    paths = [osp.join(img_dir, i['file_name']) for i in images]
    missing = [i['file_name'] for i, path in zip(images, paths) if not osp.isfile(path)]
    if missing:
        raise FileNotFoundError(f'{len(missing)} of the {len(images)} images {ann_file!r} '
                                f'lists are not in {img_dir!r} (first: {missing[0]!r}); point '
                                f'{option} at the folder the "file_name"s are relative to')
    names = [f'{i["file_name"]!r} (id {i["id"]!r})' for i in images]
    decoded = decode_all(paths, rule)
    refuse_undecodable(decoded, names, 'images', f'{ann_file!r} lists',
                       'delete them and their annotations from the json '
                       '(--no-image-check skips this check)')
    return check_frames(
        [(path, name, 'the json says', (i['width'], i['height']), d.frame)
         for path, name, i, d in zip(paths, names, images, decoded)], rule,
        f'the size {ann_file!r} gives them',
        'write each image\'s size into its "width" and "height", and check that its '
        'annotations were drawn on that image (a resized image needs them scaled too)')


def read_coco_splits(data_root: str, train_ann: str, val_ann: str) -> Dict[str, dict]:
    """The training and validation jsons, each checked
    (:func:`mmvit5.utils.coco_checks.check_coco`), with the same categories in the same order
    (mmdet numbers the labels in that order and ``CocoMetric`` maps them back to the
    validation json's ids). Needs no config: ``tools/finetune.py`` refuses bad jsons before it
    loads one.

    Returns:
        dict: ``{'train': ..., 'val': ...}``, the jsons' contents.
    """
    _require_dir(data_root, 'data root', 'DATA_ROOT')
    paths = dict(train=osp.join(data_root, train_ann), val=osp.join(data_root, val_ann))
    jsons = {split: _read_coco(path) for split, path in paths.items()}
    for split, path in paths.items():
        check_coco(jsons[split], path)
        _coco_names(jsons[split], path)
    check_same_categories(jsons['train'], jsons['val'], paths['train'], paths['val'])
    return jsons


def use_coco_data(cfg: Config, data_root: str, train_ann: str, train_img: str, val_ann: str,
                  val_img: str, check_images: bool = True,
                  jsons: Optional[Dict[str, dict]] = None) -> Tuple[str, ...]:
    """Train ``cfg`` (a Mask R-CNN, Cascade R-CNN or instance Mask2Former recipe) on a
    COCO-format dataset.

    The class names are those of the training json; the jsons are checked
    (:func:`read_coco_splits`) before the config is changed.

    Args:
        cfg (Config): Changed in place: datasets, evaluators, heads' ``num_classes``.
        data_root (str): The dataset folder; the other paths are relative to it. The config
            gets it as an absolute path, so that it runs from any folder.
        train_ann (str): Training COCO json, e.g. ``annotations/instances_train2017.json``.
        train_img (str): Folder the training json's file names are relative to.
        val_ann (str): Validation json (also the test split).
        val_img (str): Folder of the validation images.
        check_images (bool): Check that every listed image is there, decodes, and loads at
            the size the json gives it (every image decoded once).
        jsons (dict, optional): What :func:`read_coco_splits` returned, if it ran already.

    Returns:
        OwnData: The class names, label 0 first, and a summary line a split.
    """
    jsons = jsons or read_coco_splits(data_root, train_ann, val_ann)
    splits = (('train', train_ann, train_img, '--train-img', 'train_dataloader'),
              ('val', val_ann, val_img, '--val-img', 'val_dataloader'))
    classes = _coco_names(jsons['train'], osp.join(data_root, train_ann))
    notes = {}
    for split, ann, img, option, loader in splits:
        pipeline = innermost_dataset(cfg[loader].dataset).get('pipeline')
        notes[split] = check_coco_images(
            osp.join(data_root, ann), osp.join(data_root, img), option, jsons[split],
            load_rule(pipeline)) if check_images else ''
    for loader, ann, img in (('train_dataloader', train_ann, train_img),
                             ('val_dataloader', val_ann, val_img),
                             ('test_dataloader', val_ann, val_img)):
        dataset = innermost_dataset(cfg[loader].dataset)
        dataset.update(data_root=osp.abspath(data_root), ann_file=ann,
                       data_prefix=dict(img=_as_dir(img)), metainfo=dict(classes=classes))
    for evaluator in ('val_evaluator', 'test_evaluator'):
        for metric in _as_list(cfg.get(evaluator)):
            metric.ann_file = osp.abspath(osp.join(data_root, val_ann))
    set_num_classes(cfg.model, len(classes))
    filter_cfg = innermost_dataset(cfg.train_dataloader.dataset).get('filter_cfg')
    return OwnData(classes, tuple('; '.join(filter(None, (
        coco_summary(jsons[split], split, filter_cfg), notes[split]))) for split in notes))


def seg_pairs(img_dir: str, mask_dir: str, img_suffix: str, mask_suffix: str,
              img_option: str, mask_option: str) -> list:
    """(image, mask) paths as mmseg's ``BaseSegDataset`` pairs them: every ``*img_suffix``
    under ``img_dir`` (recursively) with the same name, ``mask_suffix``, under ``mask_dir``."""
    _require_dir(img_dir, 'image folder', img_option)
    _require_dir(mask_dir, 'mask folder', mask_option)
    images = sorted(list_dir_or_file(img_dir, list_dir=False, suffix=img_suffix,
                                     recursive=True))
    if not images:
        raise FileNotFoundError(f'no {img_suffix!r} images in {img_dir!r} (it holds '
                                f'{_endings(img_dir)}); '
                                f'pass the folder with {img_option}, or the file ending with '
                                '--img-suffix')
    pairs = [(osp.join(img_dir, i), osp.join(mask_dir, i[:-len(img_suffix)] + mask_suffix))
             for i in images]
    missing = [m for _, m in pairs if not osp.isfile(m)]
    if missing:
        raise FileNotFoundError(f'{len(missing)} of the {len(pairs)} images in {img_dir!r} '
                                f'have no mask (first: {missing[0]!r}); {mask_dir!r} holds '
                                f'{_endings(mask_dir)}, and a mask has its '
                                f'image\'s name ending in {mask_suffix!r} (--mask-suffix) in '
                                f'{mask_option}')
    return pairs


def _endings(folder: str) -> str:
    """``"3 '.png', 1 '.txt' files"``: the file endings in ``folder``, most common first."""
    endings = Counter(osp.splitext(f)[1] or f for f in list_dir_or_file(
        folder, list_dir=False, recursive=True))
    listed = ', '.join(f'{n} {e!r}' for e, n in endings.most_common(3))
    return f'{listed} file{"s" * (sum(endings.values()) > 1)}' if listed else 'no file'


def unpaired_masks(mask_dir: str, pairs: Sequence[Tuple[str, str]], mask_suffix: str) -> list:
    """The masks under ``mask_dir`` that no image of ``pairs`` has: mmseg lists the images,
    so these are never read."""
    used = {osp.normpath(m) for _, m in pairs}
    return sorted(m for m in (osp.normpath(osp.join(mask_dir, f)) for f in list_dir_or_file(
        mask_dir, list_dir=False, suffix=mask_suffix, recursive=True)) if m not in used)


def check_masks(masks: Sequence[str], num_classes: int, reduce_zero_label: bool,
                decoded: Optional[Sequence[Decoded]] = None) -> int:
    """Fail on a mask mmseg would misread: one that does not decode, not one channel, or a
    value that is no label. Returns how many masks label no pixel at all (only ignored
    values).

    Masks are read as mmseg's ``LoadAnnotations`` reads them (pillow, unchanged: a palette PNG
    gives its indices). Labels are ``0 .. num_classes - 1``, or with ``reduce_zero_label``
    ``1 .. num_classes`` (0 is then ignored); 255 is ignored either way.

    Args:
        masks (Sequence[str]): The mask files.
        num_classes (int): The class count.
        reduce_zero_label (bool): Value 0 is unlabelled, value v class v - 1.
        decoded (Sequence[Decoded], optional): What ``decode_all(masks, AS_STORED,
            values=True)`` returned, if it ran already.
    """
    if decoded is None:
        decoded = decode_all(masks, AS_STORED, values=True, what='masks')
    refuse_undecodable(decoded, [repr(m) for m in masks], 'masks', 'in the mask folders',
                       'delete them and their images (--no-mask-check skips this check)')
    low, high = (1, num_classes) if reduce_zero_label else (0, num_classes - 1)
    unlabelled = 0
    for path, mask in zip(masks, decoded):
        if mask.channels != 1:
            raise ValueError(f'mask {path!r} has {mask.channels} channels; mmseg reads one '
                             'class index a pixel from single-channel (grayscale or palette) '
                             'PNGs: convert colour masks to indices')
        values = mask.values
        unlabelled += not np.any((values >= low) & (values <= high))
        bad = values[((values < low) | (values > high)) & (values != IGNORE_INDEX)]
        if reduce_zero_label:
            bad = bad[bad != 0]
        if bad.size:
            reading = ('value v is class v - 1 (--reduce-zero-label), 0 and 255 ignored'
                       if reduce_zero_label else 'value v is class v, 255 ignored')
            raise ValueError(
                f'mask {path!r} has value {int(bad.max())} but there are {num_classes} '
                f'classes, so values must be in {low}..{high} ({reading}); add the missing '
                'class names to the class file'
                + ('' if reduce_zero_label else ', or pass --reduce-zero-label if 0 marks '
                   'unlabelled pixels and classes start at 1'))
    return unlabelled


def use_seg_folder(cfg: Config, data_root: str, classes_file: str, train_img: str,
                   train_mask: str, val_img: str, val_mask: str, img_suffix: str = '.jpg',
                   mask_suffix: str = '.png', reduce_zero_label: bool = False,
                   check: bool = True) -> Tuple[str, ...]:
    """Train ``cfg`` (an UperNet recipe) on a folder of images and PNG masks.

    Args:
        cfg (Config): Changed in place: datasets (mmseg's ``BaseSegDataset``), the
            ``LoadAnnotations`` of every pipeline (left to the dataset's
            ``reduce_zero_label``), heads' ``num_classes``.
        data_root (str): The dataset folder; the other paths are relative to it (absolute in
            the config, as above).
        classes_file (str): One class name a line, label 0 first.
        train_img (str): Training images, e.g. ``img_dir/train``.
        train_mask (str): Their masks, same names, e.g. ``ann_dir/train``.
        val_img (str): Validation images (also the test split).
        val_mask (str): Their masks.
        img_suffix (str): Image file ending.
        mask_suffix (str): Mask file ending.
        reduce_zero_label (bool): Mask value 0 is unlabelled and value ``v`` is class
            ``v - 1`` (ADE20K's convention); else value ``v`` is class ``v``.
        check (bool): Decode every image and mask once (a file cut short is refused), and
            check that every image loads at its mask's size (EXIF orientation included) and
            every mask's values.

    Returns:
        OwnData: The class names, label 0 first, and a summary line a split.
    """
    _require_dir(data_root, 'data root', 'DATA_ROOT')
    classes = read_class_file(osp.join(data_root, classes_file))
    summary = []
    for split, img, mask, img_option, mask_option, loader in (
            ('train', train_img, train_mask, '--train-img', '--train-mask', 'train_dataloader'),
            ('val', val_img, val_mask, '--val-img', '--val-mask', 'val_dataloader')):
        pairs = seg_pairs(osp.join(data_root, img), osp.join(data_root, mask), img_suffix,
                          mask_suffix, img_option, mask_option)
        line = f'{split}: {len(pairs)} images'
        extra = unpaired_masks(osp.join(data_root, mask), pairs, mask_suffix)
        if extra:
            line += (f'; {len(extra)} mask{"s" * (len(extra) > 1)} without an image (first: '
                     f'{extra[0]!r}): not used')
        if check:
            rule = load_rule(innermost_dataset(cfg[loader].dataset).get('pipeline'))
            images = decode_all([i for i, _ in pairs], rule)
            refuse_undecodable(images, [repr(i) for i, _ in pairs], 'images',
                               f'in {osp.join(data_root, img)!r}', 'delete them and their '
                               'masks (--no-mask-check skips this check)')
            masks = decode_all([m for _, m in pairs], AS_STORED, values=True, what='masks')
            empty = check_masks([m for _, m in pairs], len(classes), reduce_zero_label, masks)
            note = check_frames(
                [(i, repr(i), f'its mask {m!r} is', mask.frame.loaded, image.frame)
                 for (i, m), image, mask in zip(pairs, images, masks)], rule,
                'the size of their masks', 'a mask has its image\'s size: resize the mask '
                'with nearest-neighbour (interpolated labels are no labels), or pair it with '
                'its own image')
            if empty:
                line += (f'; {empty} mask{"s" * (empty > 1)} without a labelled pixel (only '
                         'ignored values): kept, adding nothing to the loss or the score')
            line += f'; {note}' if note else ''
        summary.append(line)
    for loader, img, mask in (('train_dataloader', train_img, train_mask),
                              ('val_dataloader', val_img, val_mask),
                              ('test_dataloader', val_img, val_mask)):
        dataset = innermost_dataset(cfg[loader].dataset)
        dataset.update(type='BaseSegDataset', data_root=osp.abspath(data_root),
                       data_prefix=dict(img_path=img, seg_map_path=mask),
                       img_suffix=img_suffix, seg_map_suffix=mask_suffix,
                       reduce_zero_label=reduce_zero_label,
                       # mmseg would make up random colours, for 2 classes two greens
                       metainfo=dict(classes=classes, palette=distinct_palette(len(classes))))
        for step in dataset.pipeline:
            if step.type == 'LoadAnnotations':  # then it follows the dataset's (mmseg's way)
                step.pop('reduce_zero_label', None)
    set_num_classes(cfg.model, len(classes))
    return OwnData(classes, tuple(summary))


def _as_dir(path: str) -> str:
    return path if path.endswith('/') else path + '/'
