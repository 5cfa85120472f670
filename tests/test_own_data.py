"""Your own photos (docs/en/user_guides/custom_dataset.md, issue 35): phone JPEGs with an EXIF
orientation, grayscale images, subfolders, RLE masks, a crowd region and non-contiguous
category ids train as annotated; each data defect is refused through tools/finetune.py with one
line (file or id, value, what was expected, the fix) before anything is built, or counted in
the split's summary where mmdet's way is fair; ``--show-dir`` pictures keep their paths."""
import json
import shutil

import cv2
import mmcv
import numpy as np
import pytest
from PIL import Image
from test_custom_dataset import ADE, ADE_LAYOUT, MASKRCNN, UPERNET, finetune_fails

from conftest import run_tool_here
from mmvit5.engine.hooks.show_dir_hook import picture_names
from mmvit5.utils.image_frames import (
    AS_STORED,
    ORIENTATION,
    LoadRule,
    read_frame,
    strip_orientation,
)

COCO = 'data/toy/coco'
TRAIN = f'{COCO}/annotations/instances_train2017.json'
VAL = f'{COCO}/annotations/instances_val2017.json'
# --iters 1: a defect that is not refused costs one iteration, not the toy's schedule
DET = ['det', COCO, '--config', MASKRCNN, '--work-dir', 'w', '--iters', '1']
SEG = ['seg', ADE, *ADE_LAYOUT, '--reduce-zero-label', '--config', UPERNET, '--work-dir', 'w',
       '--iters', '1']
# the training images, as a phone and a few folders leave them
FILES = ['batch1/IMG_0001.jpg', 'batch2/IMG_0001.jpg', 'batch2/gray.jpg', 'batch1/phone.jpg']
CATEGORY_IDS = {1: 7, 2: 3, 3: 12}  # rectangle, ellipse, triangle: out of order, with gaps


def rle(polygons, height, width) -> dict:
    from pycocotools import mask as masks
    encoded = masks.merge(masks.frPyObjects(polygons, height, width))
    return dict(size=encoded['size'], counts=encoded['counts'].decode())


def tag(path, orientation: int = 6, turn: bool = False) -> None:
    """Give the image an EXIF orientation; with ``turn`` also store its pixels turned back, so
    that it loads as it was (a phone photo taken sideways)."""
    picture = Image.open(path)
    if turn:  # 6 shows the stored pixels turned 90° clockwise
        picture = picture.transpose(Image.Transpose.ROTATE_90)
    exif = Image.Exif()
    exif[ORIENTATION] = orientation
    picture.save(path, exif=exif, quality=95)


def edit_json(path, change) -> None:
    coco = json.loads(path.read_text())
    change(coco)
    path.write_text(json.dumps(coco))


@pytest.fixture(scope='module')
def photos_source(tmp_path_factory):
    from make_toy_data import make_dataset
    root = tmp_path_factory.mktemp('photos')
    make_dataset(str(root / 'data' / 'toy'), train=4, val=2, size=96, seed=6)
    folder = root / COCO / 'train2017'
    train = json.loads((root / TRAIN).read_text())
    for image, name in zip(train['images'], FILES):
        (folder / name).parent.mkdir(exist_ok=True)
        picture = Image.open(folder / image['file_name'])
        (folder / image['file_name']).unlink()
        image['file_name'] = name
        if name == 'batch2/gray.jpg':
            picture = picture.convert('L')
        picture.save(folder / name, quality=95)
        assert image['width'] != image['height']  # a turn shows in the size
        if name == 'batch1/phone.jpg':
            np.save(root / 'phone_upright.npy', mmcv.imread(folder / name))
            tag(folder / name, turn=True)  # the json keeps the upright size
    for image, crowd in ((train['images'][3], 0), (train['images'][0], 1)):
        ann = next(a for a in train['annotations'] if a['image_id'] == image['id'])
        ann.update(segmentation=rle(ann['segmentation'], image['height'], image['width']),
                   iscrowd=crowd)  # the phone photo's first object, and one crowd region
    (root / TRAIN).write_text(json.dumps(train))
    for path in (root / TRAIN, root / VAL):
        edit_json(path, lambda coco: [entry.update(**{key: CATEGORY_IDS[entry[key]]})
                                      for key, entries in (('id', coco['categories']),
                                                           ('category_id', coco['annotations']))
                                      for entry in entries])
    return root


@pytest.fixture
def photos(photos_source, tmp_path):
    shutil.copytree(photos_source, tmp_path, dirs_exist_ok=True)
    return tmp_path


def finetune(args, root, monkeypatch, capsys):
    """tools/finetune.py's config and printed lines, without the training."""
    from finetune import finetune_config, parse_args
    monkeypatch.chdir(root)
    cfg = finetune_config(parse_args(args))
    return cfg, capsys.readouterr().out


def built_samples(cfg, loader='train_dataloader'):
    """Every sample of the run's dataset, through its real pipeline."""
    import importlib

    from mmengine.registry import DefaultScope
    registry = importlib.import_module(f'{cfg.default_scope}.registry')
    # serialize_data packs the list for worker processes after a gc.collect (0.5 s here)
    with DefaultScope.overwrite_default_scope(cfg.default_scope):
        dataset = registry.DATASETS.build(dict(cfg[loader].dataset, serialize_data=False))
        return [dataset[i] for i in range(len(dataset))]


# ----------------------------------------------------------------- the frame mmcv loads
def test_header_predicts_the_frame_mmcv_decodes(tmp_path):
    """For JPEG, PNG, WebP and TIFF, every orientation, both of mmcv's decoders and the colour
    types that follow or ignore the tag: the header alone gives the size mmcv decodes. Pillow
    also reads an XMP-only orientation, OpenCV does not."""
    picture = Image.fromarray(np.random.default_rng(0).integers(0, 255, (30, 50, 3), np.uint8))
    for suffix in ('jpg', 'png', 'webp', 'tif'):
        for orientation in range(1, 9):
            path = str(tmp_path / f'{orientation}.{suffix}')
            exif = Image.Exif()
            exif[ORIENTATION] = orientation
            picture.save(path, exif=exif)
            for backend in ('cv2', 'pillow'):
                for color_type in ('color', 'grayscale', 'unchanged',
                                   'color_ignore_orientation'):
                    rule = LoadRule(color_type in ('color', 'grayscale'), backend, color_type)
                    height, width = mmcv.imread(path, color_type, backend=backend).shape[:2]
                    assert read_frame(path, rule).loaded == (width, height), \
                        (suffix, orientation, backend, color_type)
    xmp = (b'<x:xmpmeta xmlns:x="adobe:ns:meta/"><rdf:RDF xmlns:rdf="http://www.w3.org/1999/'
           b'02/22-rdf-syntax-ns#"><rdf:Description xmlns:tiff="http://ns.adobe.com/tiff/1.0/"'
           b' tiff:Orientation="6"/></rdf:RDF></x:xmpmeta>')
    path = str(tmp_path / 'xmp.jpg')
    picture.save(path, xmp=xmp)
    for backend in ('cv2', 'pillow'):
        height, width = mmcv.imread(path, backend=backend).shape[:2]
        assert read_frame(path, LoadRule(True, backend, 'color')).loaded == (width, height)
    assert read_frame(path, AS_STORED).loaded == (50, 30)


@pytest.mark.parametrize('suffix', ['jpg', 'png', 'webp', 'tif'])
def test_strip_orientation_changes_the_tag_only(tmp_path, suffix):
    """The documented fix sets the tag to 1 in place: two bytes (and a PNG chunk's CRC)
    change, the decoded pixels are those stored, and the file still opens everywhere."""
    path = str(tmp_path / f'a.{suffix}')
    pixels = np.random.default_rng(1).integers(0, 255, (30, 50, 3), np.uint8)
    exif = Image.Exif()
    exif[ORIENTATION] = 8
    Image.fromarray(pixels).save(path, exif=exif, lossless=True)  # WebP's option
    # libtiff turns a TIFF whatever the flag; the JPEG is lossy
    stored = mmcv.imread(path, 'color_ignore_orientation') if suffix == 'jpg' else \
        pixels[..., ::-1]
    before = open(path, 'rb').read()
    assert strip_orientation(path) and not strip_orientation(path)
    after = open(path, 'rb').read()
    assert len(after) == len(before)
    assert sum(a != b for a, b in zip(before, after)) <= (5 if suffix == 'png' else 1)
    assert Image.open(path).getexif().get(ORIENTATION) == 1
    for backend in ('cv2', 'pillow'):
        assert np.array_equal(mmcv.imread(path, backend=backend), stored), backend


# ----------------------------------------------------------------- what trains as annotated
def test_phone_photos_load_in_the_frame_of_their_annotations(photos, monkeypatch, capsys):
    """A sideways-stored photo tagged 6 whose json has the upright size is accepted and named
    in the summary; mmcv loads it upright, so every sample (grayscale and in subfolders too)
    has the json's size and its RLE masks that of the image: the late 'all input arrays must
    have the same shape' of issue 35 cannot happen."""
    cfg, out = finetune(DET, photos, monkeypatch, capsys)
    train = json.loads((photos / TRAIN).read_text())
    assert (f"[finetune] train: 4 images, {len(train['annotations'])} objects; 1 of them crowd "
            "regions (iscrowd, ignored in the loss); 1 image with an EXIF orientation (first: "
            "'batch1/phone.jpg' (id 4), 6: turned 90° clockwise): loaded turned as the tag "
            'says, annotations read in that frame\n') in out
    assert '[finetune] val: 2 images, ' in out and 'EXIF' not in out.split('val: ')[1]
    sizes = {osp_name(i['file_name']): (i['height'], i['width']) for i in train['images']}
    cfg.train_dataloader.dataset.pipeline = [  # as loaded: before the random resize and crop
        step for step in cfg.train_dataloader.dataset.pipeline
        if step.type not in ('RandomResize', 'RandomCrop', 'RandomFlip')]
    samples = built_samples(cfg)
    assert sorted(osp_name(s['data_samples'].img_path) for s in samples) == sorted(sizes)
    for sample in samples:
        meta = sample['data_samples']
        assert meta.ori_shape == sizes[osp_name(meta.img_path)] == sample['inputs'].shape[1:]
        assert sample['inputs'].shape[0] == 3  # the grayscale image too
        assert meta.gt_instances.masks.masks.shape[1:] == meta.ori_shape
    upright = np.load(photos / 'phone_upright.npy')
    loaded = mmcv.imread(photos / COCO / 'train2017' / 'batch1' / 'phone.jpg')
    assert loaded.shape == upright.shape
    assert np.abs(loaded.astype(int) - upright).mean() < 4  # the same picture, re-encoded


def osp_name(path: str) -> str:
    return '/'.join(str(path).split('/')[-2:])


def test_box_beyond_its_image_is_counted_and_clipped(photos, monkeypatch, capsys):
    """mmdet's fair choice: a box reaching beyond its image is clipped by the resize. The
    summary counts it, and the real training pipeline gives it back inside the image."""
    def widen(coco):
        ann = _first(coco, iscrowd=0)
        width = _image(coco, ann['image_id'])['width']
        ann['bbox'][2] = width + 40 - ann['bbox'][0]
    edit_json(photos / TRAIN, widen)
    cfg, out = finetune(DET, photos, monkeypatch, capsys)
    assert ('; 1 object reaching beyond its image: clipped to it by the resize (mmdet\'s '
            'clip_object_border), its mask cut at the border') in out
    widened = _first(json.loads((photos / TRAIN).read_text()), iscrowd=0)['image_id']
    cfg.train_dataloader.dataset.pipeline = [  # the resize alone: no crop to clip it instead
        step for step in cfg.train_dataloader.dataset.pipeline
        if step.type not in ('RandomCrop', 'RandomFlip')]
    for sample in built_samples(cfg):
        height, width = sample['inputs'].shape[1:]
        boxes = sample['data_samples'].gt_instances.bboxes.tensor
        assert boxes.min() >= 0 and boxes[:, 1::2].max() <= height
        if sample['data_samples'].img_id == widened:
            assert boxes[:, 0::2].max() == width  # reached beyond, now ends at the border
        assert boxes[:, 0::2].max() <= width


# ----------------------------------------------------------------- refused, one line each
def _first(coco, **where):
    return next(a for a in coco['annotations'] if all(a.get(k) == v for k, v in where.items()))


def _image(coco, image_id):
    return next(i for i in coco['images'] if i['id'] == image_id)


def _stored_rle(coco):  # the phone photo's RLE, encoded on the stored (sideways) pixels
    ann = next(a for a in coco['annotations'] if isinstance(a['segmentation'], dict)
               and _image(coco, a['image_id'])['file_name'] == 'batch1/phone.jpg')
    ann['segmentation']['size'] = ann['segmentation']['size'][::-1]


def _resized(root):  # an image made smaller after it was annotated
    path = str(root / COCO / 'train2017' / 'batch1' / 'IMG_0001.jpg')
    image = cv2.imread(path)
    cv2.imwrite(path, cv2.resize(image, (image.shape[1] // 2, image.shape[0] // 2)))


def _train(change):
    return lambda root: edit_json(root / TRAIN, change)


def _val(change):
    return lambda root: edit_json(root / VAL, change)


def _renumber(coco, old, new):
    for entry in coco['categories']:
        entry['id'] = new if entry['id'] == old else entry['id']
    for entry in coco['annotations']:
        entry['category_id'] = new if entry['category_id'] == old else entry['category_id']


DEFECTS = {
    'rle-mask-of-another-size': (_train(_stored_rle), [
        "annotation id", "('batch1/phone.jpg') has an RLE mask of \"size\" [", 'encode the '
        "mask at its image's size"]),
    'polygon-mask-on-a-resized-image': (_resized, [
        "1 image loads at another size than the size 'data/toy/coco/annotations/"
        "instances_train2017.json' gives them (first: 'batch1/IMG_0001.jpg' (id 1) loads as",
        "write each image's size into its \"width\" and \"height\""]),
    'polygon-of-2-points': (_train(lambda c: c['annotations'][1].update(
        segmentation=[[10.0, 10.0, 30.0, 30.0]])), [
        'has a polygon of 4 numbers ([10.0, 10.0, 30.0, 30.0])',
        'at least 3 of them (6 numbers)', 'redraw it or delete the annotation']),
    'duplicate-image-id': (_train(lambda c: c['images'][1].update(id=c['images'][0]['id'])), [
        "uses image id 1 for 2 images ('batch1/IMG_0001.jpg', 'batch2/IMG_0001.jpg')",
        'give every image its own "id"']),
    'duplicate-annotation-id': (_train(lambda c: c['annotations'][2].update(
        id=c['annotations'][0]['id'])), ['uses annotation id', 'for 2 annotations',
                                         'number the annotations uniquely']),
    'annotation-of-an-unlisted-image': (_train(lambda c: c['annotations'][3].update(
        image_id=999)), ['1 annotation whose "image_id" is not among its "images"',
                         'image_id 999', 'list the image in "images" or correct the image_id']),
    'empty-annotations': (_val(lambda c: c.update(annotations=[])), [
        "'data/toy/coco/annotations/instances_val2017.json' has no \"annotations\"",
        'annotate the images']),
    'box-of-zero-width': (_train(lambda c: c['annotations'][0]['bbox'].__setitem__(2, 0)), [
        'has "bbox" [', ', 0, ', 'width and height above 0']),
    'box-of-negative-height': (_train(lambda c: c['annotations'][2].update(
        bbox=[40.0, 40.0, 20.0, -5.0])), ['has "bbox" [40.0, 40.0, 20.0, -5.0]',
                                          'correct the box or delete the annotation']),
    'annotation-without-area': (_train(lambda c: c['annotations'][0].pop('area')), [
        'has no area', '"area"']),
    'category-ids-differ': (_val(lambda c: _renumber(c, 3, 4)), [
        'list different "categories": entry 1 is {"id": 3, "name": "ellipse"} in training but '
        '{"id": 4, "name": "ellipse"} in validation', 'copy the training json\'s']),
    'category-names-differ': (_val(lambda c: c['categories'][2].update(name='wedge')), [
        'entry 2 is {"id": 12, "name": "triangle"} in training but {"id": 12, "name": '
        '"wedge"} in validation']),
}


@pytest.mark.parametrize('defect', sorted(DEFECTS))
def test_each_defect_is_refused_before_anything_is_built(defect, photos, monkeypatch, capsys):
    make, expected = DEFECTS[defect]
    make(photos)
    out = finetune_fails(DET, photos, monkeypatch, capsys)
    assert out.startswith('[finetune] ValueError: ') and '\n' not in out, out
    for fragment in expected:
        assert fragment in out, (fragment, out)
    assert not (photos / 'w').exists()


def test_photo_annotated_as_stored_is_refused_until_its_tag_is_stripped(
        photos, monkeypatch, capsys):
    """The tag added to pixels that were annotated as stored (the json has their size): mmcv
    would load them turned. Refused with the files and the one command; after it, accepted."""
    tag(photos / COCO / 'train2017' / 'batch2' / 'IMG_0001.jpg')
    out = finetune_fails(DET, photos, monkeypatch, capsys)
    assert ("1 image carries an EXIF orientation, which mmcv applies when it loads them, but "
            "the size 'data/toy/coco/annotations/instances_train2017.json' gives them is that "
            'of their stored pixels, so their annotations are in the stored frame (first: '
            "'batch2/IMG_0001.jpg' (id 2), orientation 6: loads as ") in out
    command = out.split('#phone-photos-exif-orientation): python ')[1].split()
    assert command == ['tools/strip_exif_orientation.py',
                       f'{COCO}/train2017/batch2/IMG_0001.jpg']
    run_tool_here(command[0].split('/')[1], command[1:], photos, monkeypatch, capsys)
    finetune(DET, photos, monkeypatch, capsys)  # accepted: the phone photo's tag stays


def test_segmentation_photo_and_mask_frames(photos, monkeypatch, capsys):
    """Image + mask folders: a photo stored sideways with its mask drawn upright is accepted
    (and loads at its mask's size through mmseg's pipeline); a tag on pixels whose mask is as
    stored is refused with the command, and accepted after it; a mask of another size than its
    image is refused."""
    images = sorted((photos / ADE / 'images' / 'training').glob('*.jpg'))
    upright, stored, resized = images[:3]
    tag(upright, turn=True)
    tag(stored)
    out = finetune_fails(SEG, photos, monkeypatch, capsys)
    name = f'{ADE}/images/training/{stored.name}'
    assert (f"1 image carries an EXIF orientation, which mmcv applies when it loads them, but "
            f"the size of their masks is that of their stored pixels, so their annotations are "
            f"in the stored frame (first: '{name}', orientation 6: loads as ") in out
    assert f"its mask '{ADE}/annotations/training/{stored.stem}.png' is " in out
    assert out.endswith(f'python tools/strip_exif_orientation.py {name}')
    run_tool_here('strip_exif_orientation.py', [name], photos, monkeypatch, capsys)
    cfg, out = finetune(SEG, photos, monkeypatch, capsys)
    assert (f"[finetune] train: 4 images; 1 image with an EXIF orientation (first: "
            f"'{ADE}/images/training/{upright.name}', 6: turned 90° clockwise): loaded turned "
            'as the tag says, annotations read in that frame\n') in out
    cfg.train_dataloader.dataset.pipeline = cfg.train_dataloader.dataset.pipeline[:2]
    for sample in built_samples(cfg):  # as loaded, before any transform
        assert sample['img'].shape[:2] == sample['gt_seg_map'].shape, sample['img_path']

    mask = str(photos / ADE / 'annotations' / 'training' / f'{resized.stem}.png')
    cv2.imwrite(mask, cv2.resize(cv2.imread(mask, cv2.IMREAD_UNCHANGED), (20, 10),
                                 interpolation=cv2.INTER_NEAREST))
    out = finetune_fails(SEG, photos, monkeypatch, capsys)
    assert (f"1 image loads at another size than the size of their masks (first: "
            f"'{ADE}/images/training/{resized.name}' loads as ") in out
    assert ", its mask '" in out and "is 20x10 (width x height)); a mask has its image's size" \
        in out


# ----------------------------------------------------------------- pictures
def test_pictures_keep_the_images_paths():
    """--show-dir's names: the path below the images' common folder, never two the same."""
    names = picture_names(['/d/val/batch1/x.jpg', '/d/val/batch2/x.jpg', '/d/val/y.jpg',
                           '/d/val/batch1/z.jpg', '/d/val/batch1/z.png'])
    assert names == {'/d/val/batch1/x.jpg': 'batch1/x.png', '/d/val/batch2/x.jpg': 'batch2/x.png',
                     '/d/val/y.jpg': 'y.png', '/d/val/batch1/z.jpg': 'batch1/z.jpg.png',
                     '/d/val/batch1/z.png': 'batch1/z.png.png'}
    assert picture_names(['/d/val/a/x.jpg']) == {'/d/val/a/x.jpg': 'x.png'}
