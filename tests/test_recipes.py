"""Every shipped COCO / ADE20K / NYU config trains for real: shrunk, with its own pipeline (LSJ
at 1024, 512 crops, slide inference), 2 iterations through tools/train.py on generated data in
the real dataset layouts (COCO instances and panoptic, ADE20K, NYU-Depth-v2), resumes (one
recipe of each kind), then tools/test.py with the real metrics, then the results harness.
Width mismatches fail before anything is built. Shipped configs whose smoke configs are the
same but for what shrinking leaves without effect on the code that runs (drop path and layer
decay rates, the pretrained file, the position-embedding size) run once.
"""
import glob
import json
import os
import os.path as osp
import re

import pytest
from mmengine.config import Config

from benchmarks.results import BEGIN, END, collect_runs, results_table
from conftest import (
    REPO,
    assert_same_training_state,
    config,
    logged_iterations,
    run_tool_here,
    small_mask2former,
)
from mmvit5.utils import load_config, shrink_model

SHIPPED = sorted(osp.basename(p) for p in glob.glob(osp.join(REPO, 'configs', 'vit5*.py'))
                 if p.endswith(('_coco.py', '_ade20k.py', '_nyu.py')))
TOY_CLASSES = ('rectangle', 'ellipse', 'triangle')
TOY_STUFF = ('background', )  # the generated panoptic set's stuff class
LOADERS = ('train_dataloader', 'val_dataloader', 'test_dataloader')
# one recipe of each kind resumes, half of them by path and half from last_checkpoint: the
# S/B/L variants of a kind differ in widths and weights only, not in the code that resumes
RESUMED = {'vit5_maskrcnn_coco.py': 'path', 'vit5_cascade-maskrcnn_coco.py': 'auto',
           'vit5_upernet_ade20k.py': 'auto', 'vit5_mask2former_ade20k.py': 'path',
           'vit5_mask2former-ins_coco.py': 'path', 'vit5_mask2former-pan_coco.py': 'auto',
           'vit5_depth_nyu.py': 'auto'}


@pytest.fixture(scope='module')
def data_root(tmp_path_factory):
    """data/coco and data/ade/ADEChallengeData2016 where the shipped configs look: 2 training
    images and 1 validation image."""
    from make_toy_data import make_dataset
    root = tmp_path_factory.mktemp('real_layout')
    make_dataset(str(root / 'data'), train=2, val=1, size=128, seed=1)
    return root


def smoke_config(name: str, path: str) -> None:
    """The shipped config, shrunk, on the generated set (its 3 COCO / 4 ADE20K classes),
    2 iterations, a checkpoint after each."""
    cfg = Config.fromfile(config(name))
    shrink_model(cfg.model)
    if 'panoptic_head' in cfg.model:  # Mask2Former (mmdet): things, and stuff if panoptic
        stuff = TOY_STUFF if cfg.model.panoptic_head.num_stuff_classes else ()
        for loader in LOADERS:
            cfg[loader].dataset.metainfo = dict(classes=TOY_CLASSES + stuff,
                                                thing_classes=TOY_CLASSES, stuff_classes=stuff)
        for head in (cfg.model.panoptic_head, cfg.model.panoptic_fusion_head):
            head.update(num_things_classes=len(TOY_CLASSES), num_stuff_classes=len(stuff))
        classes = len(TOY_CLASSES) + len(stuff)
        cfg.model.panoptic_head.loss_cls.class_weight = [1.0] * classes + [0.1]
        small_mask2former(cfg.model)
    elif cfg.default_scope == 'mmdet':
        for loader in LOADERS:
            cfg[loader].dataset.metainfo = dict(classes=TOY_CLASSES)
        roi = cfg.model.roi_head
        for head in roi.bbox_head if isinstance(roi.bbox_head, list) else [roi.bbox_head]:
            head.num_classes = len(TOY_CLASSES)
        roi.mask_head.num_classes = len(TOY_CLASSES)
    for loader in LOADERS:
        cfg[loader].update(batch_size=1, num_workers=0, persistent_workers=False)
    if cfg.model.get('type') == 'DepthEstimator':
        cfg.model.test_cfg.stride = cfg.model.test_cfg.crop_size  # one window per image
    elif cfg.default_scope == 'mmseg':
        # background + 3 shapes: 150 logit maps at 512x512 would be most of the step
        decode = cfg.model.decode_head
        decode.num_classes = 4
        if decode.type == 'Mask2FormerHead':
            decode.loss_cls.class_weight = [1.0] * 4 + [0.1]
            small_mask2former(cfg.model)
        else:
            cfg.model.auxiliary_head.num_classes = 4
            cfg.train_dataloader.batch_size = 2  # UperNet's pooling module has BN on 1x1 maps
    # evaluation happens once, in tools/test.py (mmengine validates at the last iteration
    # from val_begin on)
    cfg.train_cfg.update(max_iters=2, val_begin=3)
    cfg.default_hooks.checkpoint.update(interval=1, max_keep_ckpts=2)
    cfg.default_hooks.logger.interval = 1
    cfg.dump(path)


# what the S/B/L variants of one recipe differ in once shrunk: rates and files, not code paths
VARIANT_KEYS = ('drop_path_rate', 'layer_decay_rate', 'init_cfg', 'img_size')


@pytest.fixture(scope='module')
def smoke_groups(tmp_path_factory) -> dict:
    """``{config: (the config that trains for it, that one's smoke config file)}``: the resumed
    one of its group (or the first), the group being the configs whose smoke configs
    (:func:`smoke_config`, written once each) are equal but for :data:`VARIANT_KEYS`, the
    pretrained file names included."""
    def strip(value):
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items()
                    if k not in VARIANT_KEYS and not k.startswith('pretrained')}
        return [strip(v) for v in value] if isinstance(value, (list, tuple)) else value

    folder, groups = tmp_path_factory.mktemp('smoke_groups'), {}
    for name in SHIPPED:
        path = str(folder / f'smoke_{name}')
        smoke_config(name, path)
        key = json.dumps(strip(Config.fromfile(path).to_dict()), sort_keys=True, default=str)
        groups.setdefault(key, []).append(name)
    trains = {name: next((n for n in group if n in RESUMED), group[0])
              for group in groups.values() for name in group}
    return {name: (first, str(folder / f'smoke_{first}')) for name, first in trains.items()}


def test_every_recipe_is_covered():
    # Mask R-CNN and Cascade S/B/L, UperNet S/B/L/B384/L384, Mask2Former semantic / instance /
    # panoptic B/L, depth B/L
    assert len(SHIPPED) == 19, SHIPPED
    kinds = {re.sub(r'^vit5-[a-z0-9]+_', 'vit5_', name) for name in SHIPPED}
    assert kinds == set(RESUMED), kinds ^ set(RESUMED)


def check_resume(smoke: str, work, mode: str, cwd, monkeypatch, capsys, trained: str) -> None:
    """Iteration 2 again, resumed from iter_1.pth (``mode`` 'path': --resume PATH; 'auto':
    --resume, from last_checkpoint as a run killed during iteration 2 leaves it): the lr and
    loss that the uninterrupted run (output ``trained``) printed, and its final state bit for
    bit. The recipes set no seed: the resumed run must take the checkpoint's."""
    os.replace(work / 'iter_2.pth', work / 'uninterrupted.pth')
    (work / 'last_checkpoint').write_text(str(work / 'iter_1.pth'))
    resume = ['--resume', work / 'iter_1.pth'] if mode == 'path' else ['--resume']
    out = run_tool_here('train.py', [smoke, '--work-dir', work, *resume], cwd, monkeypatch,
                        capsys)
    assert 'resumed epoch: 0, iter: 1' in out, out[-3000:]
    ours, theirs = logged_iterations(out), logged_iterations(trained)
    assert list(ours) == [2] and ours[2] == theirs[2], (ours, theirs)
    assert_same_training_state(work / 'iter_2.pth', work / 'uninterrupted.pth')


def evaluation_metric(cfg: Config) -> str:
    """The metric tools/test.py must report for ``cfg``."""
    if cfg.model.get('type') == 'DepthEstimator':
        return 'rmse'
    if cfg.default_scope == 'mmseg':
        return 'mIoU'
    if cfg.model.get('panoptic_head', {}).get('num_stuff_classes'):
        return 'coco_panoptic/PQ'
    return 'coco/segm_mAP'


@pytest.mark.slow  # trains and tests each recipe
@pytest.mark.parametrize('name', SHIPPED)
def test_shipped_config_trains_and_tests(data_root, smoke_groups, tmp_path, monkeypatch, capsys,
                                        name):
    trains, smoke = smoke_groups[name]
    if trains != name:
        pytest.skip(f'{name}: the same smoke config as {trains} but for {VARIANT_KEYS}, '
                    'trained there')
    cfg = Config.fromfile(smoke)
    # the real input sizes: LSJ pads to 1024x1024, ADE20K trains on 512 crops (UperNet tests
    # sliding), NYU on 480 crops tested sliding with flips
    if cfg.default_scope == 'mmdet':
        assert cfg.model.data_preprocessor.batch_augments[0].size == (1024, 1024)
        jitter = [t for t in cfg.train_pipeline if t.type == 'RandomResize']
        assert jitter[0].ratio_range == (0.1, 2.0)
    elif cfg.model.type == 'DepthEstimator':
        assert cfg.model.data_preprocessor.size == (480, 480)
        assert cfg.model.test_cfg.mode == 'slide_flip'
    else:
        assert cfg.model.data_preprocessor.size == (512, 512)
        assert cfg.model.test_cfg.mode == ('slide' if 'upernet' in name else 'whole')
    work = tmp_path / 'work'
    out = run_tool_here('train.py', [smoke, '--work-dir', work], data_root, monkeypatch, capsys)
    assert (work / 'iter_2.pth').is_file()
    if name in RESUMED:
        check_resume(smoke, work, RESUMED[name], data_root, monkeypatch, capsys, out)
    out = run_tool_here('test.py', [smoke, work / 'iter_2.pth', '--work-dir', work], data_root,
                        monkeypatch, capsys)
    metric = evaluation_metric(cfg)
    assert f'"{metric}"' in out, out[-3000:]

    # the harness reports the smoke run under its own name, never as the shipped recipe
    runs = collect_runs([str(work)])
    assert [r.config for r in runs] == [f'smoke_{name}'] and runs[0].iters == 2
    assert metric in runs[0].metrics
    table = results_table(runs)
    assert f'`smoke_{name}`' in table and runs[0].commit in table
    shipped_rows = [line for line in table.splitlines() if f'`{name}`' in line]
    assert all('not yet measured' in line for line in shipped_rows), table
    readme = tmp_path / 'README.md'
    readme.write_text(f'# x\n\n{BEGIN}\nold table\n{END}\n\nafter\n')
    run_tool_here('collect_results.py', [work, '--readme', readme], data_root, monkeypatch,
                  capsys)
    assert readme.read_text() == f'# x\n\n{BEGIN}\n{table}\n{END}\n\nafter\n'


@pytest.mark.parametrize('name, options, fields', [
    ('vit5_maskrcnn_coco.py', {'model.backbone.arch': 'small'}, ['model.neck.in_channels=384']),
    ('vit5-l_cascade-maskrcnn_coco.py', {'model.neck.out_channels': 128},
     ['model.rpn_head.in_channels=128', 'model.roi_head.bbox_roi_extractor.out_channels=128',
      'model.roi_head.mask_roi_extractor.out_channels=128']),
    ('vit5_upernet_ade20k.py', {'model.backbone.arch': 'large'},
     ['model.neck.in_channels=[1024,1024,1024,1024]']),
    ('vit5-s_upernet_ade20k.py', {'model.neck.out_channels': 768},
     ['model.decode_head.in_channels=[768,768,768,768]', 'model.auxiliary_head.in_channels=768']),
])
def test_width_mismatch_names_the_fields_to_set(name, options, fields):
    with pytest.raises(ValueError, match='channel widths do not match') as error:
        load_config(config(name), options, check_data=False)
    for field in fields:
        assert field in str(error.value), str(error.value)


@pytest.mark.slow  # builds ViT5-L recipes
@pytest.mark.parametrize('name', ['vit5-l_cascade-maskrcnn_coco.py', 'vit5-l384_upernet_ade20k.py'])
def test_dry_run_reports_costs_and_schedule(monkeypatch, capsys, name):
    out = run_tool_here('dry_run.py', [config(name), '--shrink'], REPO, monkeypatch, capsys)
    assert f'{name} (shrunk)' in out, out
    size = '1024x1024' if 'coco' in name else '512x512'
    assert f'input size:        {size}' in out
    assert re.search(r'FLOPs per image: +[0-9.,]+ GFLOPs \(whole model', out), out
    assert re.search(r'train step: +[0-9.]+ s per image on cpu', out), out
    images = '1 image ' if 'coco' in name else '2 images'
    assert re.search(f'peak memory: +[1-9][0-9,]* MiB for {images}', out), out
    schedule = ('184,375 iterations = 100.6 epochs of 117,266' if 'coco' in name
                else '160,000 iterations = 126.7 epochs of 20,210')
    assert schedule in out, out
    total = 'total batch:       64 (the lr assumes it: 4 per device x 16' if 'coco' in name \
        else 'total batch:       16 (the lr assumes it: 2 per device x 8'
    assert total in out, out
