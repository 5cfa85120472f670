"""Dynamic whole-model graphs at any side (issue 42): ``tools/export_onnx.py CONFIG --dynamic``
passes its own default check for every shipped and toy ViT-5 config, and the dense and
panoptic graphs give the config's own ``test_step`` at sides that are multiples of neither 16
nor 32 (primes among them), batch 2 included; and a dynamic graph slid over images larger
than the config's sliding window (mmvit5.deploy.slide) gives test_step's map too.

Each config is shrunk as tests/test_recipes.py shrinks it (one 32-wide block, 16-wide heads,
Mask2Former with one layer and 10 queries), except the toy UperNet, exported as shipped.
Configs whose shrunk models are the same but for the training-only stochastic depth (the
ViT-5 S/B/L variants of one recipe) are exported once. The ablation configs (backbone
switches on the Mask R-CNN and UperNet recipes) are not looped over, and the toy Mask R-CNN
and Mask2Former (instances) are left to tests/test_two_stage_onnx.py and
tests/test_deploy_tasks.py, which compare their dynamic graphs with test_step, and the toy
Cascade, the shipped Mask R-CNN and instance Mask2Former and the toy depth model to the
exports that hold all their parts (``COVERED``).
"""
import contextlib
import functools
import glob
import io
import json
import os.path as osp

import pytest
import torch
from mmengine.config import Config

from conftest import REPO, assert_same_depth, small_mask2former
from mmvit5.deploy import build_model, deploy, example_input, export_onnx, model_kind
from mmvit5.deploy.predict import OnnxModel
from mmvit5.utils import shrink_model

pytest.importorskip('onnxruntime')

# (batch, H, W): multiples of neither 16 nor 32; 97, 131, 101 and 67 are primes
SIDES = ((2, 97, 131), (1, 101, 70), (1, 67, 250))
AS_SHIPPED = ('toy/vit5-tiny_upernet_shapes.py', )
# configs whose dynamic graph another test checks more strictly, and where
COVERED = {'toy/vit5-tiny_maskrcnn_shapes.py': 'tests/test_two_stage_onnx.py (its dynamic graph '
           'of the trained toy against test_step at sides not multiples of 32, batch 2)',
           'toy/vit5-tiny_mask2former-ins_shapes.py': 'tests/test_deploy_tasks.py (its dynamic '
           'graph of the trained toy against test_step and COCO mAP, and at sides not '
           'multiples of 32 against the exported module)',
           # the toy Cascade is the toy Mask R-CNN's backbone, neck and box heads in the
           # shipped Cascade's three stages: each part's dynamic graph is checked elsewhere
           'toy/vit5-tiny_cascade-maskrcnn_shapes.py': 'tests/test_two_stage_onnx.py (the toy '
           'Mask R-CNN) and vit5-l_cascade-maskrcnn_coco.py here (the cascade)',
           # shrunk, the shipped Mask R-CNN is the shipped Cascade's backbone, neck, RPN, RoI
           # extractors, mask head and test settings with one stage of its box heads
           'vit5-l_maskrcnn_coco.py': 'vit5-l_cascade-maskrcnn_coco.py here (every part of it)',
           # the shipped instance Mask2Former is the panoptic one's pixel and transformer
           # decoders (8 heads, 80 thing classes) with the toy's instance outputs (3 classes)
           'vit5-l_mask2former-ins_coco.py': 'vit5-l_mask2former-pan_coco.py here (its decoders) '
           'and tests/test_deploy_tasks.py (the instance outputs of the toy Mask2Former)',
           # the toy depth model is the shipped one's, tested whole where that one adds flips
           'toy/vit5-tiny_depth_shapes.py': 'vit5-l_depth_nyu.py here (the same model, with '
           'flips at these sides)'}


def shrunk(name: str) -> Config:
    cfg = Config.fromfile(osp.join(REPO, 'configs', name))
    if name not in AS_SHIPPED:
        shrink_model(cfg.model, embed_dim=32, depth=1, num_heads=2, width=16)
    if 'panoptic_head' in cfg.model or \
            cfg.model.get('decode_head', {}).get('type') == 'Mask2FormerHead':
        small_mask2former(cfg.model)
    if 'panoptic_fusion_head' in cfg.model:  # a random model keeps segments to compare
        cfg.model.test_cfg.update(object_mask_thr=0.1, iou_thr=0.1)
    return cfg


# the shipped and toy configs (not their _base_ parts nor the ablations)
CONFIGS = sorted(osp.relpath(p, osp.join(REPO, 'configs')) for p in
                 glob.glob(osp.join(REPO, 'configs', '*.py')) +
                 glob.glob(osp.join(REPO, 'configs', 'toy', '*.py')))


@functools.lru_cache(maxsize=None)
def groups() -> dict:
    """``{config: the first config with the same shrunk model}`` over :data:`CONFIGS` with a
    ViT-5 backbone and a whole-model graph (built on first use: collecting stays quick)."""
    firsts, found = {}, {}
    for name in CONFIGS:
        model = Config.fromfile(osp.join(REPO, 'configs', name)).get('model') or {}
        if model.get('backbone', {}).get('type') != 'ViT5' or \
                model.get('type') == 'ImageClassifier':
            continue
        cfg = shrunk(name)
        for key in ('img_size', 'drop_path_rate'):  # neither changes the eval graph
            cfg.model.backbone.pop(key, None)
        key = json.dumps(cfg.model.to_dict(), sort_keys=True, default=str)
        found[name] = firsts.setdefault(key, name)
    return found


def perturbed_checkpoint(cfg: Config, path: str) -> torch.nn.Module:
    """The config's model with its initial weights moved off their symmetric values (zeroed
    heads give maps that hide errors), saved as an mmengine checkpoint at ``path``."""
    model = build_model(cfg)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=generator) * 0.02)
    torch.save(dict(state_dict=model.state_dict(), meta={}), path)
    return model


def batch(kind: str, count: int, height: int, width: int) -> dict:
    """A loader's batch of ``count`` random images, as loaded at their size."""
    if kind == 'panoptic':
        from mmdet.structures import DetDataSample as Sample
    else:
        from mmseg.structures import SegDataSample as Sample
    generator = torch.Generator().manual_seed(height * width)
    images = (torch.rand(count, 3, height, width, generator=generator) * 255).to(torch.uint8)
    meta = dict(img_shape=(height, width), ori_shape=(height, width), scale_factor=(1.0, 1.0))
    return dict(inputs=list(images), data_samples=[Sample(metainfo=meta) for _ in images])


def agree(kind: str, ours, theirs) -> None:
    if kind == 'semantic':
        a, b = ours.seg_logits.data, theirs.seg_logits.data
        assert a.shape == b.shape and (a - b).abs().max() <= 1e-4 * max(1, b.abs().max())
        labels = ours.pred_sem_seg.data == theirs.pred_sem_seg.data
        assert labels.float().mean() >= 0.999
    elif kind == 'depth':
        a, b = ours.pred_depth_map.data, theirs.pred_depth_map.data
        assert_same_depth(a, b)
    else:
        a, b = ours.pred_panoptic_seg.sem_seg, theirs.pred_panoptic_seg.sem_seg
        assert a.shape == b.shape and (a == b).float().mean() >= 0.999


@pytest.mark.slow  # exports a graph per config group (20-60 s each on 2 shared cores)
@pytest.mark.parametrize('name', CONFIGS)
def test_dynamic_export_passes_its_check_and_equals_test_step(name, tmp_path, monkeypatch):
    import export_onnx
    if name not in groups():
        pytest.skip(f'{name}: no ViT-5 whole model (a classifier, or another backbone)')
    if groups()[name] != name:
        pytest.skip(f'{name}: the same shrunk model as {groups()[name]}, exported there')
    if name in COVERED:
        pytest.skip(f'{name}: checked by {COVERED[name]}')
    cfg = shrunk(name)
    config, checkpoint = tmp_path / 'config.py', tmp_path / 'model.pth'
    cfg.dump(str(config))
    model = perturbed_checkpoint(cfg, str(checkpoint))
    kind = model_kind(model)
    out = tmp_path / 'model.onnx'
    monkeypatch.chdir(tmp_path)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        # the size is the toys' (the shipped LSJ recipes' 1024 is the tool's default)
        # the exporter's optimiser (a third of the time) runs for the one config exported as
        # shipped; what it does to a graph is the same for all, and ONNX Runtime repeats it
        code = export_onnx.main([str(config), '--checkpoint', str(checkpoint), '--dynamic',
                                 '--shape', '128', '160', '--rounds', '0', '--out', str(out),
                                 *([] if name in AS_SHIPPED else ['--no-optimize'])])
    rows = [line for line in printed.getvalue().splitlines() if line.startswith('| 1')]
    # the default check: the export size, another batch, and sides not multiples of 32
    assert code == 0 and len(rows) == 3 and all(r.endswith('| yes |') for r in rows), \
        printed.getvalue()[-3000:]
    if kind not in ('semantic', 'depth', 'panoptic'):
        return  # instance graphs: tests/test_two_stage_onnx.py, tests/test_deploy_tasks.py
    onnx = OnnxModel(str(out))
    for count, height, width in SIDES:
        data = batch(kind, count, height, width)
        with torch.no_grad():
            expected = model.test_step(data)
        for ours, theirs in zip(onnx.predict(data), expected):
            agree(kind, ours, theirs)


@pytest.mark.slow  # exports two graphs
@pytest.mark.parametrize('name, mode', [('toy/vit5-tiny_upernet_shapes.py', 'slide'),
                                        ('toy/vit5-tiny_depth_shapes.py', 'slide_flip')])
def test_windows_slid_around_the_dynamic_graph_equal_test_step(name, mode, tmp_path):
    """Images of 2 and 3 windows a side: mmvit5.deploy.slide runs the one-window graph over
    each (OnnxModel does, from the file's metadata) and gives test_step's map."""
    cfg = Config.fromfile(osp.join(REPO, 'configs', name))
    shrink_model(cfg.model, embed_dim=32, depth=1, num_heads=2, width=16)
    cfg.model.test_cfg = dict(mode=mode, crop_size=(64, 80), stride=(48, 48))
    model = perturbed_checkpoint(cfg, str(tmp_path / 'model.pth'))
    kind = model_kind(model)
    path = str(tmp_path / 'model.onnx')
    export_onnx(deploy(model, cfg, dynamic=True), example_input((1, 3, 64, 80), 'model'), path,
                dynamic=True)
    onnx = OnnxModel(path)
    assert onnx.windows == dict(crop_size=[64, 80], stride=[48, 48])
    for count, height, width in ((2, 150, 170), (1, 113, 121)):  # 3x3 and 3x2 windows
        data = batch(kind, count, height, width)
        with torch.no_grad():
            expected = model.test_step(data)
        for ours, theirs in zip(onnx.predict(data), expected):
            agree(kind, ours, theirs)


def test_part_segmentor_is_model_with_a_deprecation_line(capsys):
    import export_onnx
    args = export_onnx.parse_args(['config.py', '--part', 'segmentor'])
    assert args.part == 'model'
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and 'deprecated' in err[0] and '--part model' in err[0]


def test_slide_helper_runs_without_torch(tmp_path):
    """mmvit5/deploy/slide.py alone, where importing torch fails: a per-pixel map slid over
    3x3 windows is the map of the whole image; a graph that pads is refused by name."""
    import subprocess
    import sys
    path = osp.join(REPO, 'mmvit5', 'deploy', 'slide.py')
    code = (f"import sys, importlib.util; sys.modules['torch'] = None\n"
            f"import numpy as np\n"
            f"spec = importlib.util.spec_from_file_location('slide', {path!r})\n"
            f"m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
            f"image = np.random.default_rng(0).random((2, 3, 150, 170), np.float32) * 255\n"
            f"run = lambda x: np.stack([x.sum(1), x[:, 0] - x[:, 2]], 1)\n"
            f"assert len(m.windows(150, 170, (64, 80), (48, 48))) == 9\n"
            f"out = m.slide_windows(run, image, (64, 80), (48, 48))\n"
            f"assert np.abs(out - run(image)).max() < 1e-3, np.abs(out - run(image)).max()\n"
            f"meta = dict(dynamic='true', mode='\"slide\"', crop_size='[64, 80]',\n"
            f"            stride='[48, 48]', size_divisor='null')\n"
            f"assert m.windows_from_metadata(meta) == dict(crop_size=[64, 80], stride=[48, 48])\n"
            f"try:\n"
            f"    m.windows_from_metadata(dict(meta, size_divisor='32'))\n"
            f"except ValueError as e:\n"
            f"    assert 'multiples of 32' in str(e)\n"
            f"else:\n"
            f"    raise AssertionError('a padding graph was not refused')\n")
    subprocess.run([sys.executable, '-c', code], cwd=tmp_path, check=True)
