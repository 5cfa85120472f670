"""Whole models in ONNX Runtime against their config's own ``test_step``, on briefly trained
toys (issue 38; issue 35.5): UperNet (sliding windows), DPT depth (sliding window + flip),
Mask2Former instance, semantic and panoptic.

Each toy is trained for a few iterations (one 32-wide block, 16-wide heads) and exported once
with fixed sides that are not multiples of 32 and a symbolic batch (the Mask2Former instance
model with symbolic sides too); the toy val sets are resized to those sides and run at batch 2
through both, and the config's own evaluator scores both sets of predictions.
"""
import os
import os.path as osp

import cv2
import numpy as np
import pytest
import torch
from mmengine.config import Config

from conftest import REPO, assert_same_depth, config, guide_snippets, small_mask2former
from mmvit5.deploy import OUTPUTS, deploy, example_input, export_onnx, graph_ops
from mmvit5.deploy.onnx import output_errors
from mmvit5.deploy.predict import OnnxModel, evaluate
from mmvit5.utils import build_runner, load_config, shrink_model

pytest.importorskip('onnxruntime')

EVAL_SIZE = (100, 120)  # H, W: neither a multiple of 32
WINDOWS = dict(crop_size=(112, 80), stride=(64, 64))  # two overlapping windows at EVAL_SIZE
ITERS = 8
TASKS = {
    # name: (config, shipped (shrunk as tests/test_recipes.py does), overrides)
    'upernet': ('toy/vit5-tiny_upernet_shapes.py', False,
                {'model.test_cfg': dict(mode='slide', **WINDOWS)}),
    # one window (each window is a copy of the model in the graph) and its mirror image
    'depth': ('toy/vit5-tiny_depth_shapes.py', False,
              {'model.test_cfg': dict(mode='slide_flip', crop_size=(112, 128), stride=(64, 64))}),
    'instances': ('toy/vit5-tiny_mask2former-ins_shapes.py', False, {}),
    'm2f_semantic': ('vit5_mask2former_ade20k.py', True, {}),
    'panoptic': ('vit5_mask2former-pan_coco.py', True, {}),
}


def comparable_mask2former(cfg: Config) -> None:
    """small_mask2former, with the panoptic test settings that the ONNX comparisons need."""
    small_mask2former(cfg.model)
    if 'panoptic_fusion_head' in cfg.model:
        head = cfg.model.panoptic_head
        # every (query, class) pair: no pair sits at the top-K boundary, where float noise
        # could swap two equal class probabilities between PyTorch and ONNX Runtime
        cfg.model.test_cfg.max_per_image = head.num_queries * head.num_things_classes
        # a few steps leave no class probability near 0.8: keep segments for the panoptic map
        cfg.model.test_cfg.update(object_mask_thr=0.1, iou_thr=0.1)


def small_training(cfg: Config, side: int = 128) -> None:
    """The shipped recipes' training crops (1024 LSJ, 512) at ``side``."""
    pre = cfg.model.data_preprocessor
    if pre.get('size'):
        pre.size = (side, side)
    for augment in pre.get('batch_augments') or []:
        augment.size = (side, side)
    for step in cfg.train_dataloader.dataset.pipeline:
        if step.type == 'RandomResize':
            step.scale = (side, side)
        elif step.type == 'RandomChoiceResize':
            step.scales, step.max_size = [side], 2 * side
        elif step.type == 'RandomCrop':
            step.crop_size = (side, side)


def fixed_size_test(cfg: Config) -> None:
    """Test images resized to EVAL_SIZE (not keeping the ratio), at batch 2."""
    for loader in ('val_dataloader', 'test_dataloader'):
        pipeline = cfg[loader].dataset.pipeline
        resize = dict(type='Resize', scale=EVAL_SIZE[::-1], keep_ratio=False)
        steps = [i for i, step in enumerate(pipeline) if step.type == 'Resize']
        if steps:
            pipeline[steps[0]] = resize
        else:
            pipeline.insert(1, resize)
        cfg[loader].batch_size = 2


def prepare(name: str, work: str) -> Config:
    path, shipped, overrides = TASKS[name]
    if shipped:
        from test_recipes import smoke_config
        smoke_config(path, osp.join(work, 'smoke.py'))
        cfg = Config.fromfile(osp.join(work, 'smoke.py'))
        small_training(cfg)
    else:
        cfg = Config.fromfile(config(path))
    cfg.merge_from_dict(overrides)
    shrink_model(cfg.model, embed_dim=32, depth=1, num_heads=2, width=16)
    if 'Mask2Former' in cfg.model.type + cfg.model.get('decode_head', {}).get('type', ''):
        comparable_mask2former(cfg)
    fixed_size_test(cfg)
    cfg.train_dataloader.batch_size = 2
    cfg.train_cfg.update(max_iters=ITERS, val_interval=ITERS + 1)  # the tests evaluate
    cfg.param_scheduler = []  # a few steps at the recipe's learning rate
    cfg.default_hooks.checkpoint.update(interval=ITERS, save_best=None)
    cfg.dump(osp.join(work, 'config.py'))
    return load_config(osp.join(work, 'config.py'), work_dir=work)


class Trained:
    """One toy: its config, runner (trained model, val loader, evaluator) and ONNX file."""

    def __init__(self, name: str, root, work: str) -> None:
        self.name, self.root = name, root
        cwd, threads = os.getcwd(), torch.get_num_threads()
        os.chdir(root)
        torch.set_num_threads(1)
        try:
            self.cfg = prepare(name, work)
            self.runner = build_runner(self.cfg)
            self.runner.train()
            self.model = self.runner.model.eval()
            self.batches = list(self.runner.val_loop.dataloader)
        finally:
            os.chdir(cwd)
            torch.set_num_threads(threads)
        self.checkpoint = osp.join(work, f'iter_{ITERS}.pth')
        # the Mask2Former instance graph is dynamic (its pixel decoder keeps sizes in tensors)
        self.dynamic = name == 'instances'
        self.deployed = deploy(self.model, self.cfg, dynamic=self.dynamic)
        self.onnx = osp.join(work, f'{name}.onnx')
        images = torch.stack([x.float() for x in self.batches[0]['inputs']])
        export_onnx(self.deployed, images, self.onnx, dynamic=self.dynamic,
                    dynamic_batch=not self.dynamic)
        self.ort = OnnxModel(self.onnx)

    def evaluate(self, predict) -> dict:
        cwd = os.getcwd()
        os.chdir(self.root)  # the panoptic metric reads the ground truth from data/
        try:
            return evaluate(self.runner.val_loop.evaluator, self.batches, predict)
        finally:
            os.chdir(cwd)


@pytest.fixture(scope='module')
def trained(toy_root, tmp_path_factory):
    """``trained(name)``: the toy ``name`` of TASKS, trained and exported once per session."""
    found = {}
    # the toy sets where the toys and the shipped configs look, in a folder of this module's
    # own: in the shared toy root, data/ade would be read by later tests as the real ADE20K
    root = tmp_path_factory.mktemp('shipped_layout')
    (root / 'data').mkdir()
    for link, target in (('toy', ''), ('coco', 'coco'), ('ade', 'ade')):
        os.symlink(toy_root / 'data' / 'toy' / target, root / 'data' / link)

    def get(name: str) -> Trained:
        if name not in found:
            found[name] = Trained(name, root, str(tmp_path_factory.mktemp(name)))
        return found[name]

    return get


def test_semantic_upernet_windows_match_test_step(trained):
    toy = trained('upernet')
    assert toy.deployed.task.slide and toy.deployed.preprocess.size_divisor is None
    agree = []
    for batch in toy.batches:
        expected = toy.model.test_step(batch)
        for ours, theirs in zip(toy.ort.predict(batch), expected):
            agree.append((ours.pred_sem_seg.data == theirs.pred_sem_seg.data).float().mean())
    assert min(agree) >= 0.999, agree
    ours, theirs = toy.evaluate(toy.ort.predict), toy.evaluate(toy.model.test_step)
    assert abs(ours['mIoU'] - theirs['mIoU']) <= 0.1, (ours, theirs)


def test_depth_windows_and_flips_match_test_step(trained):
    toy = trained('depth')
    assert toy.deployed.task.flip and toy.deployed.task.slide
    assert toy.ort.metadata['task'] == 'depth'
    for batch in toy.batches:
        for ours, theirs in zip(toy.ort.predict(batch), toy.model.test_step(batch)):
            a, b = ours.pred_depth_map.data, theirs.pred_depth_map.data
            assert_same_depth(a, b)


def unscaled(batch: dict) -> dict:
    """``batch`` as if the images had been loaded at their size: results in input pixels."""
    samples = []
    for sample in batch['data_samples']:
        sample = sample.clone()
        sample.set_metainfo(dict(ori_shape=sample.img_shape, scale_factor=(1.0, 1.0)))
        samples.append(sample)
    return dict(inputs=batch['inputs'], data_samples=samples)


def test_mask2former_instances_match_test_step(trained):
    toy = trained('instances')
    for batch in map(unscaled, toy.batches):
        for ours, theirs in zip(toy.ort.predict(batch), toy.model.test_step(batch)):
            ours, theirs = ours.pred_instances, theirs.pred_instances
            assert (ours.scores > 0.3).sum() == (theirs.scores > 0.3).sum()
            # every (query, class) pair: rows of score 0 (an empty mask) are left out of ours
            assert len(theirs) == 30 and len(ours) == (theirs.scores > 0).sum()
            # mmdet's rows are unordered: each of its detections has its twin in ours, the
            # row of its label and mask closest in score (queries may repeat a mask)
            for i in torch.nonzero(theirs.scores > 0)[:, 0]:
                inter = (ours.masks & theirs.masks[i]).flatten(1).sum(1)
                union = (ours.masks | theirs.masks[i]).flatten(1).sum(1)
                iou = torch.where(union > 0, inter / union.clamp(min=1), 1.0)  # both empty: 1
                same = (ours.labels == theirs.labels[i]) & (iou >= 0.97)
                assert same.any(), (i, theirs.labels[i], iou)
                gaps = torch.where(same, (ours.scores - theirs.scores[i]).abs(), 1.0)
                twin = gaps.argmin()
                assert gaps[twin] <= 1e-3
                assert (ours.bboxes[twin] - theirs.bboxes[i]).abs().max() <= 1
    # the dynamic graph at other sizes and batches, where constants baked from the example's
    # sizes would show
    for shape in [(1, 3, 64, 130), (3, 3, 150, 97)]:
        image = example_input(shape, 'model')
        with torch.no_grad():
            expected = toy.deployed(image)
        found = toy.ort.session.run(None, {'image': image.numpy()})
        errors = output_errors(OUTPUTS['instances'], expected, found)
        assert max(errors.values()) <= 1e-4, (shape, errors)
    ours, theirs = toy.evaluate(toy.ort.predict), toy.evaluate(toy.model.test_step)
    for metric in ('coco/bbox_mAP', 'coco/segm_mAP'):
        assert abs(ours[metric] - theirs[metric]) * 100 <= 0.1, (metric, ours, theirs)


def test_mask2former_semantic_matches_test_step(trained):
    toy = trained('m2f_semantic')
    # the shipped recipe pads test images to multiples of 32: so does the graph
    assert toy.deployed.preprocess.size_divisor == 32
    for batch in toy.batches:
        for ours, theirs in zip(toy.ort.predict(batch), toy.model.test_step(batch)):
            agree = (ours.pred_sem_seg.data == theirs.pred_sem_seg.data).float().mean()
            assert agree >= 0.999
    ours, theirs = toy.evaluate(toy.ort.predict), toy.evaluate(toy.model.test_step)
    assert abs(ours['mIoU'] - theirs['mIoU']) <= 0.1, (ours, theirs)


def test_mask2former_panoptic_pq_matches_test_step(trained):
    toy = trained('panoptic')
    assert [o.name for o in toy.ort.session.get_outputs()] == list(OUTPUTS['panoptic'])
    for batch in map(unscaled, toy.batches):
        for ours, theirs in zip(toy.ort.predict(batch), toy.model.test_step(batch)):
            ours, theirs = ours.pred_panoptic_seg.sem_seg, theirs.pred_panoptic_seg.sem_seg
            assert len(theirs.unique()) > 1  # segments, not only "no segment"
            assert (ours == theirs).float().mean() >= 0.999
    ours, theirs = toy.evaluate(toy.ort.predict), toy.evaluate(toy.model.test_step)
    assert abs(ours['coco_panoptic/PQ'] - theirs['coco_panoptic/PQ']) <= 0.1, (ours, theirs)


def test_fixed_size_graph_holds_constant_rope_for_tensorrt(trained):
    """The fixed-size graph computes no position table: no sin/cos, no shape arithmetic, no
    scatter and no complex value; the RoPE table is an initializer equal to the model's."""
    import onnx
    from onnx import numpy_helper
    toy = trained('upernet')
    ops = {op for _, op in graph_ops(toy.onnx)}
    assert not ops & {'Sin', 'Cos', 'Range', 'ScatterND', 'ScatterElements'}, ops
    backbone = toy.model.backbone
    grid = (-(-WINDOWS['crop_size'][0] // 16), -(-WINDOWS['crop_size'][1] // 16))
    table = backbone.rope_table(grid, torch.float32, torch.device('cpu'), cache=False).numpy()
    constants = [numpy_helper.to_array(t).ravel()
                 for t in onnx.load(toy.onnx).graph.initializer]
    for part in (table[..., 0].ravel(), table[..., 1].ravel()):  # cos, sin
        assert any(c.size == part.size and np.allclose(c, part) for c in constants)


@pytest.mark.parametrize('task, toy_name', [('semantic', 'upernet'), ('depth', 'depth'),
                                            ('instances', 'instances'),
                                            ('panoptic', 'panoptic')])
def test_guide_snippet_runs(trained, tmp_path, monkeypatch, task, toy_name):
    toy = trained(toy_name)
    snippet = guide_snippets('user_guides/onnx.md')[task]
    assert 'model.onnx' in snippet
    monkeypatch.chdir(tmp_path)
    os.symlink(toy.onnx, tmp_path / 'model.onnx')
    image = toy.batches[0]['inputs'][0].permute(1, 2, 0).numpy()
    cv2.imwrite(str(tmp_path / 'demo.jpg'), image)
    namespace = {}
    exec(compile(snippet, 'onnx.md', 'exec'), namespace)
    expected = toy.ort(cv2.imread(str(tmp_path / 'demo.jpg')).transpose(2, 0, 1)[None])
    if task == 'semantic':
        np.testing.assert_array_equal(namespace['labels'], expected['logits'][0].argmax(0))
    elif task == 'depth':
        np.testing.assert_array_equal(namespace['depth'], expected['depth'][0, 0])
    elif task == 'instances':
        keep = expected['scores'][0] > 0.3
        (image, ) = namespace['found']
        np.testing.assert_array_equal(image['labels'], expected['labels'][0][keep])
        np.testing.assert_array_equal(image['masks'], expected['masks'][0][keep] >= 0.5)
    else:  # the guide reads the settings from the file's metadata
        from mmvit5.deploy.panoptic import panoptic_map
        metadata = toy.ort.metadata
        found = panoptic_map(expected['cls_logits'][0], expected['mask_logits'][0],
                             metadata['num_things_classes'], metadata['object_mask_thr'],
                             metadata['iou_thr'], metadata['filter_low_score'])
        np.testing.assert_array_equal(namespace['panoptic'], found)
        assert (namespace['classes'] >= -1).all()


@pytest.mark.parametrize('toy_name', ['upernet', 'instances'])
def test_onnx_demo_draws_the_pytorch_demo_picture(trained, tmp_path, monkeypatch, toy_name):
    import runpy
    import sys
    toy = trained(toy_name)
    image = toy.batches[0]['data_samples'][0].img_path
    config_file = osp.join(toy.cfg.work_dir, 'config.py')
    name = osp.splitext(osp.basename(image))[0]
    pictures, preds = [], []
    for source in ([toy.checkpoint], ['--onnx', toy.onnx]):
        out = tmp_path / source[0][-4:]
        monkeypatch.setattr(sys, 'argv', ['demo.py', config_file, *source, image, '--out-dir',
                                          str(out), '--score-thr', '0.05'])
        runpy.run_path(osp.join(REPO, 'tools', 'demo.py'), run_name='__main__')
        pictures.append(cv2.imread(str(out / (name + '.png'))))
        preds.append(out / 'preds')
    assert pictures[0].shape[:2] == cv2.imread(image).shape[:2]
    assert (pictures[0] == pictures[1]).all(-1).mean() >= 0.999
    # the predictions as data (issue 42), the same from the checkpoint and from the file
    if toy_name == 'upernet':
        labels = [cv2.imread(str(p / f'{name}.png'), cv2.IMREAD_UNCHANGED) for p in preds]
        assert labels[0].shape == pictures[0].shape[:2]
        assert (labels[0] == labels[1]).mean() >= 0.999
    else:
        import json
        found = [json.loads((p / f'{name}.json').read_text()) for p in preds]
        assert found[0]['classes'] == found[1]['classes'] == list(toy.ort.metadata['classes'])
        top = [sorted(f['scores'], reverse=True)[:5] for f in found]
        np.testing.assert_allclose(top[0], top[1], atol=1e-3)
        assert all(m['size'] == list(pictures[0].shape[:2]) for m in found[1]['masks'])
