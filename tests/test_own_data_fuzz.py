"""Your data, content too (docs/en/user_guides/custom_dataset.md, issue 44): no json and no
folder a user can write gives tools/finetune.py a traceback. Seeded random mutations of a small
valid COCO split (a field deleted, a type changed, strings, null, NaN, negative or huge
numbers, a wrong nesting, an entry repeated) go through the checks finetune.py runs before it
builds anything; each ends in a one-line refusal or in data whose every sample mmdet's real
datasets and pipelines load as the guide says. A sample goes through the command itself; the
image and mask folder's mistakes likewise. Every image and mask is decoded before training: a
file cut in half is refused by name."""
import copy
import json
import random
import traceback

import cv2
import numpy as np
import pytest
from test_custom_dataset import ADE, ADE_LAYOUT, MASKRCNN, UPERNET, finetune_fails
from test_own_data import built_samples, finetune, rle

from mmvit5.utils import load_config, read_coco_splits, use_coco_data
from mmvit5.utils.image_decode import PROGRESS_FROM, decode_all
from mmvit5.utils.image_frames import UPRIGHT

COCO = 'data/toy/coco'
TRAIN = 'annotations/instances_train2017.json'
VAL = 'annotations/instances_val2017.json'
MUTATIONS = 320
# what a user's json holds where it should not: JSON's types, its extremes, numbers as text
ODD_VALUES = (None, float('nan'), float('inf'), -float('inf'), -1, 0, -5.5, 1e308, 10 ** 20,
              0.5, True, False, '', 'abc', '10', ' ', [], {}, [[]], [1, 2], {'size': [1, 1]},
              'ü \u0000')


@pytest.fixture(scope='module')
def toy(tmp_path_factory):
    """A 2 + 1 image COCO split: polygons, an RLE mask, a crowd region as uncompressed RLE."""
    from make_toy_data import make_dataset
    root = tmp_path_factory.mktemp('fuzz')
    make_dataset(str(root / 'data' / 'toy'), train=2, val=1, size=64, seed=4)
    path = root / COCO / TRAIN
    train = json.loads(path.read_text())
    image = {i['id']: i for i in train['images']}
    first, second = train['annotations'][:2]
    height, width = image[first['image_id']]['height'], image[first['image_id']]['width']
    first['segmentation'] = rle(first['segmentation'], height, width)
    mask = np.zeros((height, width), np.uint8)
    mask[:height // 2, :width // 2] = 1
    flat = mask.flatten(order='F')  # uncompressed RLE: run lengths, column by column, 0s first
    counts = np.diff([0, *(np.flatnonzero(np.diff(flat)) + 1), flat.size]).tolist()
    second.update(iscrowd=1, segmentation=dict(size=[height, width], counts=counts))
    path.write_text(json.dumps(train))
    return root


@pytest.fixture(scope='module')
def det_cfg(toy):
    return load_config(MASKRCNN, None, str(toy / 'w'), check_data=False, max_iters=1)


def _locations(node, path=()):
    """Every (container, key, path) in the json, the path with list indices as '*'."""
    items = node.items() if isinstance(node, dict) else enumerate(node)
    for key, value in items:
        here = path + (key if isinstance(key, str) else '*',)
        yield node, key, here
        if isinstance(value, (dict, list)):
            yield from _locations(value, here)


def mutate(jsons: dict, rng: random.Random) -> str:
    """Change one thing of the train (or val) json in place; returns what was done. A
    location's kind (e.g. annotations.*.bbox.*) is drawn first, so that the polygons' many
    numbers do not crowd out the rest."""
    split = 'train' if rng.random() < 0.8 else 'val'
    kinds = {}
    for container, key, path in _locations(jsons[split]):
        kinds.setdefault(path, []).append((container, key))
    path = rng.choice(sorted(kinds, key=str))
    container, key = rng.choice(kinds[path])
    value = container[key]
    op = rng.choice(('delete', 'odd', 'odd', 'text', 'wrap', 'unwrap', 'negate', 'half',
                     'repeat'))
    if op == 'delete':
        del container[key]
    elif op == 'odd':
        container[key] = copy.deepcopy(rng.choice(ODD_VALUES))
    elif op == 'text':
        container[key] = value if isinstance(value, str) else json.dumps(value)
    elif op == 'wrap':
        container[key] = [value]
    elif op == 'unwrap':
        inner = list(value.values() if isinstance(value, dict) else value) \
            if isinstance(value, (dict, list)) else []
        container[key] = inner[0] if inner else {}
    elif op == 'negate':
        container[key] = -value if isinstance(value, (int, float)) else None
    elif op == 'half':
        container[key] = value + 0.5 if isinstance(value, (int, float)) else \
            value * 2 if isinstance(value, (str, list)) else None
    elif isinstance(container, list):  # repeat
        container.insert(key, copy.deepcopy(value))
    else:
        container[key] = [value, copy.deepcopy(value)]
    return f'{split} {".".join(map(str, path))} {op} (was {json.dumps(value)[:40]})'


def _write(root, jsons):
    for split, name in (('train', TRAIN), ('val', VAL)):
        (root / COCO / name).write_text(json.dumps(jsons[split]))


def _check_run(data_root: str, cfg):
    """What finetune.py runs before it builds anything, on a copy of the loaded recipe."""
    cfg = copy.deepcopy(cfg)
    jsons = read_coco_splits(data_root, TRAIN, VAL)
    data = use_coco_data(cfg, data_root, TRAIN, 'train2017', VAL, 'val2017', True, jsons)
    return cfg, data


def _loads_as_the_guide_says(cfg, data):
    """Every sample of both splits through mmdet's real dataset and pipeline: a box and a
    mask for every object, its labels among the classes."""
    for loader in ('train_dataloader', 'val_dataloader'):
        samples = built_samples(cfg, loader)
        if loader == 'val_dataloader':  # validation keeps every image
            assert len(samples) == int(data.summary[1].split(' images')[0].split()[-1])
        for sample in samples:
            instances = sample['data_samples'].gt_instances
            labels = instances.labels.tolist()
            assert all(0 <= label < len(data.classes) for label in labels), labels
            assert len(instances.masks) == len(instances.bboxes) == len(labels)


def mutations(base: dict):
    """(k, both jsons, what was done) for each of the seeded mutations of ``base``."""
    rng = random.Random(44)
    for k in range(MUTATIONS):
        jsons = copy.deepcopy(base)
        what = mutate(jsons, rng)
        yield k, jsons, what


def _base(toy) -> dict:
    return {split: json.loads((toy / COCO / name).read_text())
            for split, name in (('train', TRAIN), ('val', VAL))}


def test_no_mutation_of_a_coco_json_gives_a_traceback(toy, det_cfg):
    base = _base(toy)
    refused, trained, failures = [], [], []
    try:
        for k, jsons, what in mutations(base):
            _write(toy, jsons)
            try:
                cfg, data = _check_run(str(toy / COCO), det_cfg)
            except (ValueError, FileNotFoundError) as e:  # what finetune.py prints, one line
                message = str(e)
                if '\n' in message or '/annotations/instances_' not in message:
                    failures.append(f'{k} {what}: refused in more than one line or without '
                                    f'naming the file: {message!r}')
                refused.append(message)
                continue
            except Exception:
                failures.append(f'{k} {what}: {traceback.format_exc(limit=-2)}')
                continue
            try:
                _loads_as_the_guide_says(cfg, data)
                trained.append(what)
            except Exception:
                failures.append(f'{k} {what}: passed the checks, then '
                                f'{traceback.format_exc(limit=-3)}')
    finally:
        _write(toy, base)
    assert not failures, '\n'.join(failures)
    # both ends are reached often: the fuzz is not all refusals nor all harmless changes
    assert len(refused) >= MUTATIONS // 2 and len(trained) >= MUTATIONS // 20, \
        (len(refused), len(trained))
    # the refusals say what they found, not how the code broke
    assert not [m for m in refused if 'Error' in m or 'Traceback' in m]


def test_a_sample_of_the_mutations_through_the_command(toy, det_cfg, monkeypatch, capsys):
    """Every 32nd mutation through tools/finetune.py itself: it prints the checks' refusal as
    its one line, or builds the run's config and prints its summary."""
    base = _base(toy)
    outcomes = set()
    try:
        for k, jsons, what in mutations(base):
            if k % 32:
                continue
            _write(toy, jsons)
            monkeypatch.chdir(toy)  # the paths in the messages as the command prints them
            try:
                _, data = _check_run(COCO, det_cfg)
                refusal = None
            except (ValueError, FileNotFoundError) as e:
                refusal = f'[finetune] {type(e).__name__}: {e}'
            args = ['det', COCO, '--config', MASKRCNN, '--work-dir', 'w', '--iters', '1']
            if refusal:
                assert finetune_fails(args, toy, monkeypatch, capsys) == refusal, what
            else:
                _, out = finetune(args, toy, monkeypatch, capsys)
                assert f'[finetune] {data.summary[0]}' in out, (what, out)
            outcomes.add(refusal is None)
    finally:
        _write(toy, base)
    assert outcomes == {True, False}  # the sample holds both ends


def test_named_mistakes_through_the_command(toy, monkeypatch, capsys):
    """The issue's mistakes and a few more, each with the words the user needs."""
    base = _base(toy)
    cases = [
        ('bbox as strings', lambda j: j['train']['annotations'][0].update(
            bbox=['10', '20', '30', '40']), ['annotation id', '"bbox" ["10", "20", "30", "40"]',
                                             'expected a box [x, y, width, height]']),
        ('image id null', lambda j: j['train']['images'][1].update(id=None),
         ['image id null (not an integer)', '"id" null', 'expected an integer']),
        ('width NaN', lambda j: j['val']['images'][0].update(width=float('nan')),
         ['"width" NaN', 'a whole number of pixels above 0']),
        ('RLE counts cut', lambda j: j['train']['annotations'][0]['segmentation'].update(
            counts=j['train']['annotations'][0]['segmentation']['counts'][:-3]),
         ['"segmentation" counts whose runs add up to', 'with "size"']),
        ('annotations an object', lambda j: j['train'].update(annotations={'0': 1}),
         ['"annotations" is an object', 'expected a list of objects']),
        ('file listed twice', lambda j: j['train']['images'].append(
            dict(j['train']['images'][0], id=77)),
         ['lists the file', 'as 2 images, ids 1, 77', 'one file is one image']),
    ]
    try:
        for name, change, expected in cases:
            jsons = copy.deepcopy(base)
            change(jsons)
            _write(toy, jsons)
            out = finetune_fails(['det', COCO, '--config', MASKRCNN, '--work-dir', 'w',
                                  '--iters', '1'], toy, monkeypatch, capsys)
            assert out.startswith('[finetune] ValueError: ') and '\n' not in out, (name, out)
            for fragment in expected:
                assert fragment in out, (name, fragment, out)
        assert not (toy / 'w').exists()
    finally:
        _write(toy, base)


def test_a_json_that_is_no_json_is_named(toy, monkeypatch, capsys):
    path = toy / COCO / TRAIN
    text = path.read_text()
    try:
        for broken, fragment in ((text[:len(text) // 2], 'is not a JSON file'),
                                 ('[1, 2]', 'holds a list, not an object'),
                                 (b'\xff\xfe{}', 'is not a JSON file')):
            path.write_bytes(broken if isinstance(broken, bytes) else broken.encode())
            out = finetune_fails(['det', COCO, '--config', MASKRCNN, '--work-dir', 'w'], toy,
                                 monkeypatch, capsys)
            assert out.startswith("[finetune] ValueError: 'data/toy/coco/annotations/"
                                  "instances_train2017.json' ") and fragment in out, out
            assert '\n' not in out
    finally:
        path.write_text(text)


# ----------------------------------------------------------------- every pixel decoded
def _cut(path, keep: float = 0.5):
    data = path.read_bytes()
    path.write_bytes(data[:int(len(data) * keep)])


def test_half_cut_images_are_refused_by_name_and_count(toy, monkeypatch, capsys):
    """A JPEG cut in half, as an interrupted copy leaves it; then three more: the first three
    are named, with the count. --no-image-check skips the decoding."""
    folder = toy / COCO / 'train2017'
    saved = {p: p.read_bytes() for p in folder.iterdir()}
    train = json.loads((toy / COCO / TRAIN).read_text())
    try:
        first = train['images'][0]['file_name']
        _cut(folder / first)
        out = finetune_fails(['det', COCO, '--config', MASKRCNN, '--work-dir', 'w'], toy,
                             monkeypatch, capsys)
        assert out.startswith('[finetune] ValueError: 1 of the 2 images '), out
        assert f"'{first}' (id {train['images'][0]['id']}): image file is truncated" in out
        assert 'copy them again from their source' in out and '--no-image-check' in out
        assert '\n' not in out and not (toy / 'w').exists()
        # skipped on request: the config is built as before
        cfg, _ = finetune(['det', COCO, '--config', MASKRCNN, '--work-dir', 'w',
                           '--no-image-check'], toy, monkeypatch, capsys)
        assert cfg.train_dataloader.dataset.ann_file == TRAIN
    finally:
        for path, data in saved.items():
            path.write_bytes(data)


def test_every_decoder_refuses_a_cut_file(tmp_path, capsys):
    """JPEG (baseline and progressive), PNG, WebP, TIFF and BMP cut at several points, with
    both of mmcv's backends; a text file named .jpg; more than a few hundred files show a
    progress bar."""
    from PIL import Image
    rng = np.random.default_rng(0)
    picture = cv2.GaussianBlur(rng.integers(0, 255, (120, 160, 3), np.uint8), (9, 9), 3)
    paths = []
    for suffix, options in (('jpg', {}), ('jpeg', dict(progressive=True)), ('png', {}),
                            ('webp', {}), ('tif', {}), ('bmp', {})):
        whole = tmp_path / f'whole.{suffix}'
        Image.fromarray(picture).save(whole, **options)
        for keep in (0.3, 0.6, 0.9, 0.99):
            path = tmp_path / f'cut{keep}.{suffix}'
            path.write_bytes(whole.read_bytes()[:int(whole.stat().st_size * keep)])
            paths.append(str(path))
        paths.append(str(whole))
    (tmp_path / 'notes.jpg').write_text('not an image')
    paths.append(str(tmp_path / 'notes.jpg'))
    for backend in ('cv2', 'pillow'):
        rule = UPRIGHT._replace(backend=backend)
        errors = {p: d.error for p, d in zip(paths, decode_all(paths, rule))}
        assert [p for p, e in errors.items() if not e] == \
            [p for p in paths if 'whole' in p], (backend, errors)
    many = [paths[4]] * PROGRESS_FROM  # the whole JPEG, read as many times
    assert not any(d.error for d in decode_all(many, UPRIGHT))
    err = capsys.readouterr().err
    assert f'[finetune] decoding images: {PROGRESS_FROM}/{PROGRESS_FROM}' in err and \
        f'decoding images: {PROGRESS_FROM // 4}/{PROGRESS_FROM}' in err


# ----------------------------------------------------------------- images and masks folders
def _ade(root):
    return root / ADE


def _first_mask(root):
    return sorted((_ade(root) / 'annotations' / 'training').glob('*.png'))[0]


def _first_image(root):
    return sorted((_ade(root) / 'images' / 'training').glob('*.jpg'))[0]


def _rename_all(folder, old, new):
    for path in folder.glob(f'*{old}'):
        path.rename(path.with_suffix(new))


LAYOUTS = {
    'missing-mask': (lambda r: _first_mask(r).unlink(),
                     ['have no mask (first: ', "holds 1 '.png' file,"]),
    'images-with-another-suffix': (
        lambda r: _rename_all(_ade(r) / 'images' / 'training', '.jpg', '.JPG'),
        ["no '.jpg' images in", "it holds 2 '.JPG' files", '--img-suffix']),
    'masks-with-another-suffix': (
        lambda r: _rename_all(_ade(r) / 'annotations' / 'training', '.png', '.tif'),
        ['have no mask', "holds 2 '.tif' files", '--mask-suffix']),
    'empty-class-file': (lambda r: (_ade(r) / 'classes.txt').write_text('\n \n'),
                         ["classes.txt' has no class name"]),
    'class-file-not-text': (lambda r: (_ade(r) / 'classes.txt').write_bytes(b'\xff\xfe\x00a'),
                            ['is not UTF-8 text']),
    'class-named-twice': (lambda r: (_ade(r) / 'classes.txt').write_text('a\nb\na\nc\n'),
                          ["names ['a'] more than once"]),
    'mask-cut-in-half': (lambda r: _cut(_first_mask(r)), [
        '1 of the 2 masks in the mask folders do not decode', 'image file is truncated']),
    'image-cut-in-half': (lambda r: _cut(_first_image(r)), [
        '1 of the 2 images in ', 'do not decode', 'image file is truncated']),
    'text-file-as-image': (lambda r: _first_image(r).write_text('hello'), [
        'do not decode', 'not an image format Pillow knows']),
    'colour-mask': (lambda r: cv2.imwrite(str(_first_mask(r)), np.zeros((8, 8, 3), np.uint8)),
                    ['has 3 channels']),
    'empty-mask-folder': (lambda r: [p.unlink() for p in (_ade(r) / 'annotations' / 'training')
                                     .iterdir()], ['have no mask', 'holds no file']),
}


@pytest.mark.parametrize('layout', sorted(LAYOUTS))
def test_each_folder_mistake_is_refused_in_one_line(layout, tmp_path, monkeypatch, capsys):
    from make_toy_data import make_dataset
    make_dataset(str(tmp_path / 'data' / 'toy'), train=2, val=1, size=64, seed=5)
    change, expected = LAYOUTS[layout]
    change(tmp_path)
    out = finetune_fails(['seg', ADE, *ADE_LAYOUT, '--reduce-zero-label', '--config', UPERNET,
                          '--work-dir', 'w'], tmp_path, monkeypatch, capsys)
    assert out.startswith('[finetune] ') and '\n' not in out, out
    assert 'Traceback' not in out
    for fragment in expected:
        assert fragment in out, (fragment, out)
    assert not (tmp_path / 'w').exists()


def test_an_extra_mask_is_counted_and_the_rest_trains(tmp_path, monkeypatch, capsys):
    """A mask without its image is never read by mmseg: said, not refused (one mask folder
    may serve several image folders)."""
    from make_toy_data import make_dataset
    make_dataset(str(tmp_path / 'data' / 'toy'), train=2, val=1, size=64, seed=5)
    mask = _first_mask(tmp_path)
    (mask.parent / 'orphan.png').write_bytes(mask.read_bytes())
    cfg, out = finetune(['seg', ADE, *ADE_LAYOUT, '--reduce-zero-label', '--config', UPERNET,
                         '--work-dir', 'w'], tmp_path, monkeypatch, capsys)
    assert "train: 2 images; 1 mask without an image (first: 'data/toy/ade/" \
           "ADEChallengeData2016/annotations/training/orphan.png'): not used" in out, out
    assert len(built_samples(cfg)) == 2 and cfg.model.decode_head.num_classes == 4
