"""Your own dataset (docs/en/user_guides/custom_dataset.md): tools/finetune.py trains the
shipped recipes on COCO-format instances and on a folder of images and PNG masks, the class
names read from the files into the datasets and every head; bad data is refused with the value,
what was expected and what to change. The guide's commands run here for 2 iterations on the
generated shapes set, then tools/test.py on the saved config with the real metrics."""
import copy
import glob
import importlib
import json
import math
import os.path as osp
import shutil

import cv2
import numpy as np
import pytest
import torch
from mmengine.config import Config

from conftest import REPO, config, run_tool_here, small_mask2former
from mmvit5.utils import (
    check_masks,
    coco_classes,
    fit_schedule,
    load_config,
    read_class_file,
    set_num_classes,
)

MASKRCNN = config('toy/vit5-tiny_maskrcnn_shapes.py')
UPERNET = config('toy/vit5-tiny_upernet_shapes.py')
ADE = 'data/toy/ade/ADEChallengeData2016'
ADE_LAYOUT = ['--train-img', 'images/training', '--train-mask', 'annotations/training',
              '--val-img', 'images/validation', '--val-mask', 'annotations/validation']


@pytest.fixture
def shapes(tmp_path):
    """A private copy of the generated set: the tests rewrite its class files."""
    from make_toy_data import make_dataset
    make_dataset(str(tmp_path / 'data' / 'toy'), train=4, val=2, size=128, seed=3)
    return tmp_path


def metrics_of(output: str) -> dict:
    lines = [line for line in output.splitlines() if line.startswith('[test] metrics ')]
    assert lines, output[-3000:]
    return json.loads(lines[-1][len('[test] metrics '):])


def finetune_fails(args, cwd, monkeypatch, capsys) -> str:
    with pytest.raises(SystemExit) as raised:
        run_tool_here('finetune.py', args, cwd, monkeypatch, capsys)
    return str(raised.value)


# ----------------------------------------------------------------- class names
def test_class_file_one_name_a_line(tmp_path):
    path = tmp_path / 'classes.txt'
    path.write_text('road\n\n  car \nperson\n')
    assert read_class_file(str(path)) == ('road', 'car', 'person')
    path.write_text('\n\n')
    with pytest.raises(ValueError, match='has no class name; write one class name a line'):
        read_class_file(str(path))
    path.write_text('car\nroad\ncar\n')
    with pytest.raises(ValueError, match=r"names \['car'\] more than once"):
        read_class_file(str(path))
    with pytest.raises(FileNotFoundError, match='missing.txt.* does not exist'):
        read_class_file(str(tmp_path / 'missing.txt'))


def test_coco_classes_follow_the_json_order_as_mmdet_labels_them(tmp_path):
    """Ids out of order and with gaps: mmdet's CocoDataset numbers the categories as the json
    lists them, and so do the class names read from it."""
    from mmdet.datasets import CocoDataset
    ann = tmp_path / 'train.json'
    ann.write_text(json.dumps(dict(
        images=[dict(id=1, file_name='a.jpg', height=32, width=32)],
        annotations=[dict(id=1, image_id=1, category_id=2, bbox=[0, 0, 8, 8], area=64,
                          iscrowd=0, segmentation=[[0, 0, 8, 0, 8, 8]])],
        categories=[dict(id=7, name='zebra'), dict(id=2, name='apple')])))
    classes = coco_classes(str(ann))
    assert classes == ('zebra', 'apple')
    dataset = CocoDataset(ann_file=str(ann), metainfo=dict(classes=classes), pipeline=[],
                          data_prefix=dict(img=str(tmp_path)),
                          filter_cfg=None)
    assert dataset.cat2label == {7: 0, 2: 1}
    assert dataset[0]['instances'][0]['bbox_label'] == classes.index('apple')
    ann.write_text(json.dumps(dict(images=[], annotations=[], categories=[])))
    with pytest.raises(ValueError, match='has no class name; list every class'):
        coco_classes(str(ann))


@pytest.mark.parametrize('name, heads', [
    ('vit5_maskrcnn_coco.py', ['roi_head.bbox_head', 'roi_head.mask_head']),
    ('vit5-s_cascade-maskrcnn_coco.py',
     [f'roi_head.bbox_head.{i}' for i in range(3)] + ['roi_head.mask_head']),
    ('vit5_upernet_ade20k.py', ['decode_head', 'auxiliary_head']),
])
def test_every_head_gets_the_class_count(name, heads):
    cfg = Config.fromfile(config(name))
    set_num_classes(cfg.model, 5)
    for head in heads:
        module = cfg.model
        for key in head.split('.'):
            module = module[int(key)] if key.isdigit() else module[key]
        assert module.num_classes == 5, head


@pytest.mark.parametrize('name, head', [('vit5_mask2former-ins_coco.py', 'panoptic_head'),
                                        ('vit5_mask2former_ade20k.py', 'decode_head')])
def test_mask2former_gets_the_class_count_and_keeps_its_no_object_weight(name, head):
    """Built, the query classifier has 5 classes + "no object", whose weight stays 0.1."""
    from mmengine.registry import DefaultScope

    from mmvit5.utils import shrink_model
    cfg = Config.fromfile(config(name))
    set_num_classes(cfg.model, 5)
    assert cfg.model[head].loss_cls.class_weight == [1.0] * 5 + [0.1]
    shrink_model(cfg.model)
    registry = importlib.import_module(f'{cfg.default_scope}.registry')
    with DefaultScope.overwrite_default_scope(cfg.default_scope):
        model = registry.MODELS.build(cfg.model)
    built = getattr(model, head)
    assert built.cls_embed.out_features == 6
    assert built.loss_cls.class_weight == [1.0] * 5 + [0.1]
    if head == 'panoptic_head':
        assert model.panoptic_fusion_head.num_things_classes == 5


def model_of(name: str, **options):
    cfg = Config.fromfile(config(name))
    cfg.merge_from_dict({f'model.{key}': value for key, value in options.items()})
    return cfg.model


@pytest.mark.parametrize('model, message', [
    (lambda: model_of('vit5_mask2former-pan_coco.py'),
     r'is panoptic \(53 stuff classes\).*vit5_mask2former-ins_coco.py'),
    (lambda: model_of('vit5_mask2former_ade20k.py', **{
        'decode_head.loss_cls.class_weight': [2.0] * 150 + [0.1]}),
     'Mask2FormerHead weights its 150 classes one by one'),
    (lambda: model_of('vit5_upernet_ade20k.py', **{
        'decode_head.loss_decode.class_weight': [1.0] * 150}),
     'UPerHead weights its 150 classes one by one'),
    (lambda: Config(dict(model=dict(type='RetinaNet', bbox_head=dict(num_classes=80)))).model,
     "model type 'RetinaNet' has none"),
])
def test_heads_it_cannot_set_are_refused(model, message):
    with pytest.raises(ValueError, match=message):
        set_num_classes(model(), 5)


# ----------------------------------------------------------------- masks
def test_masks_hold_labels_or_are_refused(tmp_path):
    mask = np.zeros((8, 8), np.uint8)
    mask[0, :3] = (1, 2, 255)
    path = str(tmp_path / 'a.png')
    cv2.imwrite(path, mask)
    empty = str(tmp_path / 'empty.png')
    cv2.imwrite(empty, np.full((8, 8), 255, np.uint8))
    # 0-2 and ignored 255; the second mask labels no pixel
    assert check_masks([path, empty], 3, reduce_zero_label=False) == 1
    with pytest.raises(ValueError, match=r"a.png' has value 2 but there are 2 classes, so "
                                         r'values must be in 0..1 .*--reduce-zero-label'):
        check_masks([path], 2, reduce_zero_label=False)
    check_masks([path], 2, reduce_zero_label=True)  # 0 unlabelled, 1-2 = classes 0-1
    with pytest.raises(ValueError, match=r'value 2 but there are 1 classes, so values must be '
                                         r'in 1..1 \(value v is class v - 1'):
        check_masks([path], 1, reduce_zero_label=True)
    cv2.imwrite(path, np.zeros((8, 8, 3), np.uint8))
    with pytest.raises(ValueError, match='has 3 channels; .*convert colour masks to indices'):
        check_masks([path], 2, reduce_zero_label=False)


def test_bad_folders_are_refused_with_the_option_to_change(shapes, monkeypatch, capsys):
    """Through the tool: a layout that is not there, an image without a mask, a mask value
    beyond the class file, an empty class file, images the json names but does not have."""
    common = ['--config', UPERNET, '--iters', '2', '--work-dir', str(shapes / 'w')]
    out = finetune_fails(['seg', ADE, *common], shapes, monkeypatch, capsys)
    assert "image folder 'data/toy/ade/ADEChallengeData2016/img_dir/train' does not " \
           'exist; pass the folder with --train-img (relative to DATA_ROOT)' in out
    out = finetune_fails(['seg', ADE, *ADE_LAYOUT, *common], shapes, monkeypatch, capsys)
    assert 'has value 4 but there are 4 classes, so values must be in 0..3' in out
    assert 'pass --reduce-zero-label' in out

    (shapes / ADE / 'annotations' / 'validation' / '000000100001.png').unlink()
    out = finetune_fails(['seg', ADE, *ADE_LAYOUT, '--reduce-zero-label', *common], shapes,
                         monkeypatch, capsys)
    assert "1 of the 2 images in 'data/toy/ade/ADEChallengeData2016/images/validation' have " \
           "no mask (first: 'data/toy/ade/ADEChallengeData2016/annotations/validation/" \
           "000000100001.png')" in out
    (shapes / ADE / 'classes.txt').write_text('\n')
    out = finetune_fails(['seg', ADE, *ADE_LAYOUT, '--reduce-zero-label', *common], shapes,
                         monkeypatch, capsys)
    assert 'classes.txt\' has no class name' in out

    out = finetune_fails(['det', 'data/toy/coco', '--train-img', 'val2017', '--config',
                          MASKRCNN], shapes, monkeypatch, capsys)
    assert "4 of the 4 images 'data/toy/coco/annotations/instances_train2017.json' lists are " \
           "not in 'data/toy/coco/val2017'" in out and 'point --train-img at' in out
    out = finetune_fails(['det', 'data/elsewhere'], shapes, monkeypatch, capsys)
    assert "data root 'data/elsewhere' does not exist; pass the folder with DATA_ROOT" in out
    assert not (shapes / 'w').exists()  # refused before the runner made its work dir


def test_unknown_category_ids_are_refused_and_images_without_objects_counted(
        shapes, monkeypatch, capsys):
    """An image without objects is named in the split's summary with its fate (dropped by the
    training filter_cfg, kept for validation); an annotation whose category_id the json's
    categories lack is refused with the id, the file and the fix, before anything is built."""
    from finetune import finetune_config, parse_args
    monkeypatch.chdir(shapes)
    jsons = {split: shapes / 'data' / 'toy' / 'coco' / 'annotations' / f'instances_{split}.json'
             for split in ('train2017', 'val2017')}
    for path in jsons.values():  # the first image of each split loses its objects
        coco = json.loads(path.read_text())
        coco['annotations'] = [a for a in coco['annotations']
                               if a['image_id'] != coco['images'][0]['id']]
        path.write_text(json.dumps(coco))
    kept = len(json.loads(jsons['train2017'].read_text())['annotations'])
    args = ['det', 'data/toy/coco', '--config', MASKRCNN, '--work-dir', str(shapes / 'w')]
    finetune_config(parse_args(args))
    out = capsys.readouterr().out
    assert (f'[finetune] train: 4 images, {kept} objects; 1 image without objects: dropped '
            'from training by filter_empty_gt (train_dataloader.dataset.filter_cfg') in out
    assert '1 image without objects: kept (validation and test keep every image)' in out
    finetune_config(parse_args([*args, '--cfg-options',
                                'train_dataloader.dataset.filter_cfg.filter_empty_gt=False']))
    assert '1 image without objects: kept as background' in capsys.readouterr().out

    coco = json.loads(jsons['train2017'].read_text())
    known = sorted(c['id'] for c in coco['categories'])
    coco['annotations'].append(dict(coco['annotations'][0], id=999, category_id=7))
    jsons['train2017'].write_text(json.dumps(coco))
    out = finetune_fails(args, shapes, monkeypatch, capsys)
    assert ("'data/toy/coco/annotations/instances_train2017.json' has annotations with "
            'category_id 7 (1 annotation) (first: annotation id 999 on image') in out
    assert f'its "categories" list the ids {known}' in out
    assert 'Add {"id": 7, "name": ...} to "categories"' in out
    assert not (shapes / 'w').exists()


# ----------------------------------------------------------------- schedule
@pytest.mark.parametrize('name', ['vit5_maskrcnn_coco.py', 'vit5_upernet_ade20k.py'])
def test_fit_schedule_keeps_the_recipe_shape(name):
    cfg = Config.fromfile(config(name))
    old, iters = cfg.train_cfg.max_iters, 2000
    warmup, decay = (dict(s) for s in cfg.param_scheduler)
    fit_schedule(cfg, iters)
    new_warmup, new_decay = cfg.param_scheduler
    assert cfg.train_cfg.max_iters == iters and new_decay.end == iters
    assert new_warmup.end == min(warmup['end'], iters // 4)  # 250 of 2000, ADE's 1500 capped
    if 'milestones' in decay:  # COCO: the steps keep their place in the run
        assert [m / iters for m in new_decay.milestones] == pytest.approx(
            [m / old for m in decay['milestones']], abs=1e-3)
    else:  # ADE20K: the poly decay still follows the warm-up
        assert new_decay.begin == new_warmup.end
    # as many evaluations and checkpoints per run as the recipe, but at most 10
    recipe_count = old / Config.fromfile(config(name)).train_cfg.val_interval
    assert iters / cfg.train_cfg.val_interval == pytest.approx(min(recipe_count, 10), rel=0.05)


RECIPES = sorted(osp.relpath(p, osp.dirname(config('x'))) for pattern in (
    '*.py', 'toy/*.py', 'ablations/*.py') for p in glob.glob(config(pattern)))


@pytest.mark.parametrize('name', RECIPES)
def test_fit_schedule_fits_every_recipe(name):
    """Every shipped recipe, fitted to 1, 60 and 2000 iterations: no iteration of the
    schedule lies beyond the run (Mask2Former's dynamic_intervals milestone included),
    validation and checkpoints come at most 10 times a run, the warm-up takes at most a
    quarter, what followed it still does, and mmengine builds every scheduler."""
    from mmengine.registry import PARAM_SCHEDULERS
    recipe = Config.fromfile(config(name))
    if 'max_iters' not in (recipe.get('train_cfg') or {}):  # the epoch-based classifier
        with pytest.raises(ValueError, match='--iters needs an iteration-based recipe'):
            fit_schedule(recipe, 60)
        return
    old_first = _schedulers(recipe)[0]
    for iters in (1, 60, 2000):
        cfg = copy.deepcopy(recipe)
        fit_schedule(cfg, iters)
        floor, train = math.ceil(iters / 10), cfg.train_cfg
        assert train.max_iters == iters
        intervals = [train.val_interval, cfg.default_hooks.checkpoint.interval,
                     *(i for _, i in train.get('dynamic_intervals') or [])]
        assert all(floor <= i <= iters for i in intervals), (iters, intervals)
        milestones = [m for m, _ in train.get('dynamic_intervals') or []]
        assert milestones == sorted(set(milestones)) and all(1 <= m <= iters for m in milestones)
        assert cfg.default_hooks.logger.interval <= floor
        for key in ('train_cfg', 'param_scheduler', 'custom_hooks'):
            assert max(_ints(cfg.get(key)), default=0) <= iters, (iters, key, cfg.get(key))
        schedulers = _schedulers(cfg)
        if old_first.get('end', 0) < recipe.train_cfg.max_iters and iters > 1:  # a warm-up
            warm_end = schedulers[0].end
            assert 1 <= warm_end <= max(iters // 4, 1)
            for before, after in zip(_schedulers(recipe)[1:], schedulers[1:]):
                if before.get('begin') == old_first.end:
                    assert after.begin == warm_end
        optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
        for scheduler in schedulers:
            assert 0 <= scheduler.get('begin', 0) < scheduler.get('end', iters) <= iters
            assert all(1 <= m <= iters for m in scheduler.get('milestones', []))
            scheduler = {k: v for k, v in scheduler.items() if k != '_scope_'}
            PARAM_SCHEDULERS.build(dict(scheduler, optimizer=optimizer))


def _schedulers(cfg: Config) -> list:
    schedulers = cfg.get('param_scheduler') or []
    return list(schedulers) if isinstance(schedulers, (list, tuple)) else [schedulers]


def _ints(value):
    """Every integer in a nested config value (bools are no iterations)."""
    if isinstance(value, dict):
        for item in value.values():
            yield from _ints(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _ints(item)
    elif isinstance(value, int) and not isinstance(value, bool):
        yield value



def test_train_iters_fits_the_schedule_and_cfg_options_win():
    """tools/train.py --iters (load_config's max_iters): the toy recipe's 40 iterations become
    200 with its warm-up, step and checkpoint moved along; an explicit val_interval stays."""
    cfg = load_config(MASKRCNN, {'train_cfg.val_interval': 50}, 'w', check_data=False,
                      max_iters=200)
    warmup, step = cfg.param_scheduler
    assert cfg.train_cfg.max_iters == 200 and cfg.train_cfg.val_interval == 50
    assert (warmup.end, step.end, step.milestones) == (20, 200, [180])
    assert cfg.default_hooks.checkpoint.interval == 50  # a quarter of the run, as 10 of 40
    epochs = Config(dict(train_cfg=dict(type='EpochBasedTrainLoop', max_epochs=12)))
    with pytest.raises(ValueError, match=r"'max_epochs': 12}.*--cfg-options train_cfg\.max_epochs"):
        fit_schedule(epochs, 100)
    with pytest.raises(ValueError, match='--iters must be an integer >= 1, got 0'):
        fit_schedule(cfg, 0)

def test_tools_test_checks_only_its_split_and_data_paths_become_absolute(shapes, monkeypatch):
    """load_config as tools/test.py calls it: a missing training folder is no error there, a
    missing test folder is, citing the guide's data section; the folders found from here and
    the work dir become absolute, so the config written into the work dir runs anywhere."""
    monkeypatch.chdir(shapes)
    gone = {'train_dataloader.dataset.data_root': 'data/gone/'}
    with pytest.raises(FileNotFoundError, match=r"train_dataloader.dataset.data_root 'data/gone/' "
                                                r'does not exist.*train_test.md#data'):
        load_config(MASKRCNN, gone)
    cfg = load_config(MASKRCNN, gone, check_data=('test',))
    coco = shapes / 'data' / 'toy' / 'coco'
    assert cfg.test_dataloader.dataset.data_root == f'{coco}/'
    assert cfg.test_evaluator.ann_file == str(coco / 'annotations' / 'instances_val2017.json')
    assert cfg.train_dataloader.dataset.data_root == 'data/gone/'  # not found: left as it was
    assert cfg.work_dir == str(shapes / 'work_dirs' / 'vit5-tiny_maskrcnn_shapes')
    with pytest.raises(FileNotFoundError, match="test_dataloader.dataset.data_root 'data/gone/'"):
        load_config(MASKRCNN, {'test_dataloader.dataset.data_root': 'data/gone/'},
                    check_data=('test',))


# ----------------------------------------------------------------- class colours
def test_small_class_counts_are_drawn_in_distinct_colours():
    """A 2-class set without a palette: mmseg makes up two greens; usable_palette gives blue
    and orange instead, drawn so by mmseg's own SegLocalVisualizer. A chosen palette stays."""
    from mmengine.structures import PixelData
    from mmseg.structures import SegDataSample
    from mmseg.visualization import SegLocalVisualizer

    from mmvit5.utils import distinct_palette, usable_palette
    from mmvit5.utils.palette import mmseg_random_palette
    for n in (1, 2, 10, 11, 150):
        assert len({tuple(c) for c in distinct_palette(n)}) == n
    made_up = mmseg_random_palette(2)
    assert usable_palette(2, made_up) == distinct_palette(2)
    assert usable_palette(2, None) == usable_palette(2, [[0, 0, 0]] * 2) == distinct_palette(2)
    assert usable_palette(2, [[0, 0, 0], [255, 255, 255]]) == [[0, 0, 0], [255, 255, 255]]

    labels = np.zeros((1, 8, 16), np.int64)
    labels[:, :, 8:] = 1  # left class 0, right class 1
    sample = SegDataSample(pred_sem_seg=PixelData(data=torch.from_numpy(labels)))
    image = np.full((8, 16, 3), 128, np.uint8)

    def dominant_channels(palette):
        visualizer = SegLocalVisualizer(name=f'palette{id(palette)}', alpha=0.8)
        visualizer.set_dataset_meta(classes=['a', 'b'], palette=palette)
        visualizer.add_datasample('x', image, sample, draw_gt=False, with_labels=False)
        drawn = visualizer.get_image()
        return [int(np.argmax(drawn[:, half].reshape(-1, 3).mean(0)))
                for half in (slice(0, 8), slice(8, 16))]

    assert dominant_channels(made_up) == [1, 1]  # both green: the bug
    assert dominant_channels(usable_palette(2, made_up)) == [2, 0]  # blue, orange


# ----------------------------------------------------------------- end to end
@pytest.mark.slow  # trains a Mask R-CNN twice, tests it
def test_coco_format_dataset_trains_and_tests(shapes, monkeypatch, capsys):
    """The guide's command on the generated COCO set. With ``frozen_stages=2`` the stem and
    the first two blocks never change and are not optimized. Then its jsons are edited
    ('rectangle' renamed, 'triangle' and its objects dropped) and the first run's checkpoint
    fine-tuned on them (``load_from``): two classes reach every head, the class-specific
    layers are skipped, and tools/test.py evaluates the result."""
    work = shapes / 'work'
    out = run_tool_here('finetune.py', [
        'det', 'data/toy/coco', '--config', MASKRCNN, '--iters', '2', '--work-dir', work,
        '--cfg-options', 'model.backbone.frozen_stages=2', 'default_hooks.checkpoint.interval=1'],
        shapes, monkeypatch, capsys)
    assert ('[finetune] 3 classes from data/toy/coco/annotations/instances_train2017.json: '
            'rectangle, ellipse, triangle') in out
    first, last = (torch.load(work / f'iter_{i}.pth', map_location='cpu', weights_only=False)
                   for i in (1, 2))
    frozen = ('backbone.patch_embed.', 'backbone.blocks.0.', 'backbone.blocks.1.',
              'backbone.pos_embed', 'backbone.cls_token', 'backbone.reg_token')
    names = list(first['state_dict'])
    assert any(n.startswith(frozen[1]) for n in names)
    for name in names:
        same = torch.equal(first['state_dict'][name], last['state_dict'][name])
        if name.startswith(frozen):
            assert same, name
        elif name.startswith('backbone.blocks.3.') and name.endswith('weight'):
            assert not same, name  # the blocks after them train
    optimized = [n for g in last['optimizer']['param_groups'] for n in g['param_names']]
    assert optimized and not any(n.startswith(frozen) for n in optimized)

    ann_dir = shapes / 'data' / 'toy' / 'coco' / 'annotations'
    for split in ('train2017', 'val2017'):
        path = ann_dir / f'instances_{split}.json'
        ann = json.loads(path.read_text())
        ann['categories'] = [dict(c, name='box') if c['name'] == 'rectangle' else c
                             for c in ann['categories'] if c['name'] != 'triangle']
        kept = {c['id'] for c in ann['categories']}
        ann['annotations'] = [a for a in ann['annotations'] if a['category_id'] in kept]
        path.write_text(json.dumps(ann))
    tuned = shapes / 'tuned'
    out = run_tool_here('finetune.py', [
        'det', 'data/toy/coco', '--config', MASKRCNN, '--iters', '2', '--work-dir', tuned,
        '--cfg-options', f'load_from={work}/iter_2.pth'], shapes, monkeypatch, capsys)
    assert ('[finetune] 2 classes from data/toy/coco/annotations/instances_train2017.json: '
            'box, ellipse') in out
    saved = tuned / osp.basename(MASKRCNN)
    command = out.split('[finetune] evaluate with: python ')[1].splitlines()[0].split()
    assert command == [osp.join(REPO, 'tools', 'test.py'), f'tuned/{saved.name}',
                       'tuned/iter_2.pth']  # from where the user ran, the tool wherever it is
    cfg = Config.fromfile(str(saved))
    assert cfg.model.roi_head.bbox_head.num_classes == 2
    assert cfg.model.roi_head.mask_head.num_classes == 2
    for loader in ('train_dataloader', 'val_dataloader', 'test_dataloader'):
        assert cfg[loader].dataset.metainfo.classes == ('box', 'ellipse')
        assert cfg[loader].dataset.data_root == str(shapes / 'data' / 'toy' / 'coco')
    # the printed command, with pictures; the run's config stays as training wrote it. The
    # two validation images move into two folders under one name: two pictures, one a folder
    val = ann_dir / 'instances_val2017.json'
    ann = json.loads(val.read_text())
    assert len(ann['images']) == 2
    for folder, image in zip(('batch1', 'batch2'), ann['images']):
        source = shapes / 'data' / 'toy' / 'coco' / 'val2017' / image['file_name']
        (source.parent / folder).mkdir()
        source.rename(source.parent / folder / 'photo.jpg')
        image['file_name'] = f'{folder}/photo.jpg'
    val.write_text(json.dumps(ann))
    before = saved.read_bytes()
    out = run_tool_here('test.py', [*command[1:], '--show-dir', 'vis'], shapes, monkeypatch,
                        capsys)
    metrics = metrics_of(out)
    for key in ('coco/bbox_mAP', 'coco/segm_mAP'):
        assert 0.0 <= metrics[key] <= 1.0, metrics
    assert saved.read_bytes() == before
    tested = list(tuned.glob(f'*/{saved.name}'))  # <work_dir>/<timestamp>/, beside the log
    assert len(tested) == 1 and 'ShowDirHook' in tested[0].read_text()
    assert sorted(str(p.relative_to(shapes / 'vis')) for p in (shapes / 'vis').rglob('*.*')) \
        == ['batch1/photo.png', 'batch2/photo.png']


@pytest.mark.slow  # trains and tests an UperNet
def test_image_and_mask_folders_train_and_test(shapes, monkeypatch, capsys):
    """The guide's command on the generated ADE20K-layout set, with the names of its
    classes.txt replaced: they reach the datasets, both heads and the per-class table."""
    names = ('ground', 'box', 'oval', 'wedge')
    (shapes / ADE / 'classes.txt').write_text('\n'.join(names) + '\n')
    work = shapes / 'work'
    out = run_tool_here('finetune.py', ['seg', ADE, *ADE_LAYOUT, '--reduce-zero-label',
                                        '--config', UPERNET, '--iters', '2', '--work-dir', work],
                        shapes, monkeypatch, capsys)
    assert f'[finetune] 4 classes from {ADE}/classes.txt: ground, box, oval, wedge' in out
    saved = work / osp.basename(UPERNET)
    cfg = Config.fromfile(str(saved))
    assert cfg.model.decode_head.num_classes == cfg.model.auxiliary_head.num_classes == 4
    dataset = cfg.test_dataloader.dataset
    assert dataset.type == 'BaseSegDataset' and dataset.metainfo.classes == names
    assert dataset.reduce_zero_label
    # from another folder: the saved config's data paths are absolute; the pictures land in
    # --show-dir as for detection
    elsewhere = shapes / 'elsewhere'
    elsewhere.mkdir()
    out = run_tool_here('test.py', [saved, work / 'iter_2.pth', '--show-dir', 'vis'],
                        elsewhere, monkeypatch, capsys)
    metrics = metrics_of(out)
    assert 0.0 <= metrics['mIoU'] <= 100.0, metrics
    assert sorted(p.name for p in (elsewhere / 'vis').iterdir()) == sorted(
        p.stem + '.png' for p in (shapes / ADE / 'images' / 'validation').iterdir())
    assert not (elsewhere / 'work_dirs').exists() and not (shapes / 'vis_test').exists()
    # the demo draws the classes in the distinct colours finetune gave them; a checkpoint of a
    # dataset without a palette (mmseg's made-up one) gets distinct ones too
    from demo import build_inferencer

    from mmvit5.utils import distinct_palette
    from mmvit5.utils.palette import mmseg_random_palette
    inferencer = build_inferencer(str(saved), str(work / 'iter_2.pth'), 'cpu')
    assert inferencer.model.dataset_meta['palette'] == distinct_palette(4)
    checkpoint = torch.load(work / 'iter_2.pth', map_location='cpu', weights_only=False)
    checkpoint['meta']['dataset_meta']['palette'] = mmseg_random_palette(4)
    torch.save(checkpoint, work / 'no_palette.pth')
    inferencer = build_inferencer(str(saved), str(work / 'no_palette.pth'), 'cpu')
    assert inferencer.model.dataset_meta['palette'] == distinct_palette(4)


def test_default_layout_is_mmseg_img_dir_ann_dir(shapes, monkeypatch, capsys):
    """Without layout options the tool looks for mmseg's img_dir/{train,val} and
    ann_dir/{train,val} beside classes.txt; no --reduce-zero-label: values are classes."""
    root = shapes / 'mine'
    for split, ade in (('train', 'training'), ('val', 'validation')):
        shutil.copytree(shapes / ADE / 'images' / ade, root / 'img_dir' / split)
        shutil.copytree(shapes / ADE / 'annotations' / ade, root / 'ann_dir' / split)
    (root / 'classes.txt').write_text('unused\nground\nbox\noval\nwedge\n')  # value 0 unused
    mask = next((root / 'ann_dir' / 'val').iterdir())
    cv2.imwrite(str(mask), np.full_like(cv2.imread(str(mask)), 255)[..., 0])  # labels nothing
    from finetune import finetune_config, parse_args
    monkeypatch.chdir(shapes)
    cfg = finetune_config(parse_args(['seg', 'mine', '--config', UPERNET]))
    out = capsys.readouterr().out
    assert '[finetune] train: 4 images\n' in out
    assert ('[finetune] val: 2 images; 1 mask without a labelled pixel (only ignored values): '
            'kept') in out
    dataset = cfg.train_dataloader.dataset
    assert dataset.data_prefix == dict(img_path='img_dir/train', seg_map_path='ann_dir/train')
    assert not dataset.reduce_zero_label and cfg.model.decode_head.num_classes == 5
    assert cfg.work_dir == str(shapes / 'work_dirs' / 'vit5-tiny_upernet_shapes_mine')
    loads = [t for t in cfg.val_dataloader.dataset.pipeline if t.type == 'LoadAnnotations']
    assert loads and not any('reduce_zero_label' in t for t in loads)  # the dataset's holds


def finetune_shrunk(name: str, data_args: list, shapes, monkeypatch, capsys):
    """tools/finetune.py DATA_ARGS on the shipped recipe ``name``, shrunk, 2 iterations at
    batch 1; returns its output and work dir (where the run's config is ``recipe.py``)."""
    from mmvit5.utils import shrink_model
    cfg = Config.fromfile(config(name))
    shrink_model(cfg.model)
    if 'mask2former' in name:
        small_mask2former(cfg.model)
    for loader in ('val_dataloader', 'test_dataloader'):  # tools/test.py's; workers take
        cfg[loader].update(num_workers=0, persistent_workers=False)  # 15 s to shut down
    recipe = str(shapes / 'recipe.py')
    cfg.dump(recipe)
    work = shapes / 'work'
    out = run_tool_here('finetune.py', [
        *data_args, '--config', recipe, '--iters', '2', '--work-dir', work, '--cfg-options',
        'train_dataloader.batch_size=1', 'train_dataloader.num_workers=0',
        'train_dataloader.persistent_workers=False'], shapes, monkeypatch, capsys)
    return out, work


@pytest.mark.slow  # trains and tests a (shrunk) Mask2Former
def test_coco_format_dataset_trains_mask2former(shapes, monkeypatch, capsys):
    """The instance Mask2Former recipe, shrunk, on the generated COCO set: the json's 3
    classes reach the query classifier (3 + "no object", still weighted 0.1) and the fusion
    head, and tools/test.py evaluates it with CocoMetric."""
    out, work = finetune_shrunk('vit5_mask2former-ins_coco.py', ['det', 'data/toy/coco'],
                                shapes, monkeypatch, capsys)
    assert '[finetune] 3 classes from' in out
    saved = Config.fromfile(str(work / 'recipe.py'))
    head = saved.model.panoptic_head
    assert (head.num_things_classes, head.num_stuff_classes) == (3, 0)
    assert head.loss_cls.class_weight == [1.0, 1.0, 1.0, 0.1]
    assert saved.model.panoptic_fusion_head.num_things_classes == 3
    out = run_tool_here('test.py', [work / 'recipe.py', work / 'iter_2.pth', '--work-dir',
                                    work / 'test'], shapes, monkeypatch, capsys)
    metrics = metrics_of(out)
    for key in ('coco/bbox_mAP', 'coco/segm_mAP'):
        assert 0.0 <= metrics[key] <= 1.0, metrics


@pytest.mark.slow  # trains and tests a (shrunk) Mask2Former
def test_image_and_mask_folders_train_mask2former(shapes, monkeypatch, capsys):
    """The ADE20K Mask2Former recipe, shrunk, on the image + mask folders: classes.txt's 4
    classes reach the head (4 + "no object", still weighted 0.1); tools/test.py gives mIoU."""
    out, work = finetune_shrunk('vit5_mask2former_ade20k.py',
                                ['seg', ADE, *ADE_LAYOUT, '--reduce-zero-label'],
                                shapes, monkeypatch, capsys)
    assert f'[finetune] 4 classes from {ADE}/classes.txt' in out
    head = Config.fromfile(str(work / 'recipe.py')).model.decode_head
    assert head.num_classes == 4 and head.loss_cls.class_weight == [1.0] * 4 + [0.1]
    out = run_tool_here('test.py', [work / 'recipe.py', work / 'iter_2.pth', '--work-dir',
                                    work / 'test'], shapes, monkeypatch, capsys)
    assert 0.0 <= metrics_of(out)['mIoU'] <= 100.0
