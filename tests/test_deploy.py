"""ONNX export (mmvit5/deploy, tools/export_onnx.py): the pieces of the exported graphs equal
what mmdet/mmseg compute, layers without a standard operator are refused, and the tool's
graphs run in ONNX Runtime and equal PyTorch at the export size and at others. The trained
whole models against their test_step: tests/test_deploy_tasks.py."""
import json
import os.path as osp
import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.nn as nn
from mmengine.config import Config

from conftest import REPO, config, run_tool, tool
from mmvit5.deploy import (
    MatmulAdaptiveAvgPool2d,
    NotExportable,
    Preprocess,
    build_part,
    check_sides,
    complex_values,
    deploy,
    errors_at,
    example_input,
    export_onnx,
    model_kind,
    ort_session,
    size_divisor_line,
)
from mmvit5.deploy.onnx import run_session

pytest.importorskip('onnxruntime')

# one block keeps the export fast; every layer kind of the model is still in the graph
ONE_BLOCK = {'model.backbone.arch.depth': 1}


@pytest.mark.parametrize('size,out', [((7, 9), (6, 6)), ((2, 3), (6, 6)), ((12, 12), (1, 3))])
def test_matmul_adaptive_pool_equals_torch(size, out):
    x = torch.randn(2, 4, *size, dtype=torch.float64)
    expected = nn.AdaptiveAvgPool2d(out)(x)
    torch.testing.assert_close(MatmulAdaptiveAvgPool2d(out)(x), expected, rtol=0, atol=1e-12)


def test_dynamic_sides_must_be_multiples_with_the_fix_named():
    with pytest.raises(ValueError, match=r'\(100, 64\) must be multiples of 32.*\(128, 64\)'):
        check_sides((100, 64), 32)
    with pytest.raises(ValueError, match=r'at least 64.*\(64, 64\)'):
        check_sides((32, 64), 32)


def test_complex_values_are_found(tmp_path):
    import onnx
    from onnx import TensorProto, helper
    graph = helper.make_graph(
        [helper.make_node('Identity', ['z'], ['y'])], 'g',
        [helper.make_tensor_value_info('z', TensorProto.COMPLEX64, [2])],
        [helper.make_tensor_value_info('y', TensorProto.COMPLEX64, [2])])
    onnx.save(helper.make_model(graph), str(tmp_path / 'c.onnx'))
    assert complex_values(str(tmp_path / 'c.onnx')) == ['z', 'y']


@pytest.mark.parametrize('name, pads', [('vit5_maskrcnn_coco.py', 32),
                                        ('vit5_mask2former-ins_coco.py', 32),
                                        ('vit5_mask2former_ade20k.py', 32),
                                        ('vit5_upernet_ade20k.py', None),
                                        ('vit5_depth_nyu.py', None)])
def test_graph_pads_where_the_shipped_config_pads(name, pads):
    """mmdet pads test images to pad_size_divisor; mmseg only with a test_cfg (issue 35.5)."""
    cfg = Config.fromfile(config(name))
    import mmdet.registry
    import mmseg.registry
    from mmengine.registry import DefaultScope
    registry = (mmseg if cfg.default_scope == 'mmseg' else mmdet).registry.MODELS
    with DefaultScope.overwrite_default_scope(cfg.default_scope):  # whatever ran before
        preprocessor = registry.build(cfg.model.data_preprocessor)
    holder = nn.Module()
    holder.data_preprocessor = preprocessor
    preprocess = Preprocess.from_model(holder)
    assert preprocess.size_divisor == pads and preprocess.flip_channels
    assert Preprocess.from_model(holder, size_divisor=64).size_divisor == 64
    assert ('test_cfg' in size_divisor_line(preprocess, 64)) == (cfg.default_scope == 'mmseg')


def seg_test_step(segmentor, image: torch.Tensor) -> torch.Tensor:
    """The logits mmseg's test_step gives for one (3, H, W) uint8 image loaded at its size."""
    from mmseg.structures import SegDataSample
    side = tuple(image.shape[1:])
    sample = SegDataSample(metainfo=dict(img_shape=side, ori_shape=side))
    with torch.no_grad():
        return segmentor.test_step(dict(inputs=[image], data_samples=[sample]))[0].seg_logits.data


def test_whole_model_is_the_shipped_config_test_step():
    """A shipped UperNet config, unchanged (sliding windows of 512, no test padding): the
    exported module's logits are its test_step's at sides that are not multiples of 32
    (tests/test_deploy_tasks.py compares its ONNX files with test_step); with
    --size-divisor 32 they are once the printed config line is applied (issue 35.5)."""
    from mmseg.registry import MODELS
    from mmseg.utils import register_all_modules
    register_all_modules(init_default_scope=False)
    cfg = Config.fromfile(config('vit5-s_upernet_ade20k.py'))
    cfg.model.backbone.init_cfg = None  # PyTorch's initialisation: any weights will do
    segmentor = MODELS.build(cfg.model).eval()
    model = deploy(segmentor, cfg)
    assert model.kind == 'semantic' and model.task.mode == 'slide'
    assert model.preprocess.size_divisor is None
    padded = deploy(segmentor, cfg, size_divisor=32)
    # small sides: the UperNet's 512-wide head costs seconds per image at 150x200
    images = [torch.randint(0, 256, (3, *side), dtype=torch.uint8) for side in
              [(70, 45), (45, 99)]]
    for image in images:
        with torch.no_grad():
            logits = model(image[None].float())[0]
        torch.testing.assert_close(logits, seg_test_step(segmentor, image))
    assert 'test_cfg=dict(size_divisor=32)' in size_divisor_line(padded.preprocess, 32)
    segmentor.data_preprocessor.test_cfg = dict(size_divisor=32)
    with torch.no_grad():
        logits = padded(images[0][None].float())[0]
    torch.testing.assert_close(logits, seg_test_step(segmentor, images[0]))


def test_fixed_tables_are_what_the_model_computes():
    from mmvit5.models import ViT5
    model = ViT5(arch=dict(embed_dim=32, depth=1, num_heads=2), img_size=32,
                 window_size=3, global_attn_indices=()).eval()
    x = torch.randn(1, 3, 80, 48)
    with torch.no_grad():
        expected = model(x)[0]
        model.fix_tables((5, 3))
        torch.testing.assert_close(model(x)[0], expected, rtol=0, atol=0)
        # a table is read, not recomputed: a wrong one changes the output
        model._fixed_tables[(5, 3)][1].mul_(0.5)
        assert not torch.equal(model(x)[0], expected)
        # another grid computes its own
        torch.testing.assert_close(model(torch.randn(1, 3, 64, 64))[0].shape[-2:],
                                   torch.Size((4, 4)))


def test_refused_naming_the_layer_or_the_model_and_why():
    cfg = Config.fromfile(config('toy/vit5-tiny_upernet_shapes.py'))
    cfg.merge_from_dict({**ONE_BLOCK, 'model.backbone.out_indices': (0, 0, 0, 0),
                         'model.decode_head.conv_cfg': dict(type='DCNv2')})
    with pytest.raises(NotExportable, match=r'decode_head\.\S+ \(ModulatedDeformConv2dPack\) '
                       r'cannot be exported: modulated deformable convolution \(DCNv2\) has '
                       'no standard ONNX operator'):
        build_part(cfg, 'model')
    with pytest.raises(NotExportable, match='Linear has no whole-model ONNX graph'):
        model_kind(nn.Linear(2, 2))


def test_maskrcnn_is_an_instance_model_exported_by_two_stage_or_refused():
    cfg = Config.fromfile(config('toy/vit5-tiny_maskrcnn_shapes.py'))
    cfg.merge_from_dict(ONE_BLOCK)
    try:
        import mmvit5.deploy.two_stage  # noqa: F401  (another change brings it)
    except ImportError:
        with pytest.raises(NotExportable, match=r'needs mmvit5.deploy.two_stage.*--part neck'):
            build_part(cfg, 'model')
    else:
        assert build_part(cfg, 'model').kind == 'instances'


def test_mask_boxes_are_mmdet_mask2bbox():
    from mmdet.structures.mask import mask2bbox

    from mmvit5.deploy.mask2former import mask_boxes
    masks = torch.rand(6, 17, 23) > 0.97
    masks[0] = False
    masks[1, 3:9, 5:6] = True
    torch.testing.assert_close(mask_boxes(masks), mask2bbox(masks))


def test_panoptic_map_is_mmdet_panoptic_postprocess_without_torch(tmp_path):
    from mmdet.models.seg_heads.panoptic_fusion_heads import MaskFormerFusionHead
    generator = torch.Generator().manual_seed(0)
    queries, things, stuff, size = 12, 3, 2, (19, 26)
    cls_logits = torch.randn(queries, things + stuff + 1, generator=generator) * 4
    mask_logits = torch.randn(queries, *size, generator=generator) * 3
    path = osp.join(REPO, 'mmvit5', 'deploy', 'panoptic.py')
    for settings in (dict(object_mask_thr=0.3, iou_thr=0.5, filter_low_score=True),
                     dict(object_mask_thr=0.4, iou_thr=0.2, filter_low_score=False)):
        head = MaskFormerFusionHead(things, stuff, test_cfg=settings)
        expected = head.panoptic_postprocess(cls_logits, mask_logits).sem_seg[0].numpy()
        np.save(tmp_path / 'cls.npy', cls_logits.numpy())
        np.save(tmp_path / 'mask.npy', mask_logits.numpy())
        # the module alone, where importing torch fails
        code = (f"import sys, json, importlib.util; sys.modules['torch'] = None\n"
                f"import numpy as np\n"
                f"spec = importlib.util.spec_from_file_location('panoptic', {path!r})\n"
                f"m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
                f"out = m.panoptic_map(np.load('cls.npy'), np.load('mask.npy'), {things}, "
                f"**json.loads({json.dumps(json.dumps(settings))}))\n"
                f"np.save('out.npy', out)\n")
        subprocess.run([sys.executable, '-c', code], cwd=tmp_path, check=True)
        found = np.load(tmp_path / 'out.npy')
        assert len(np.unique(expected)) > 2  # things and stuff kept
        np.testing.assert_array_equal(found, expected)


@pytest.mark.slow  # exports to ONNX
def test_maskrcnn_backbone_and_neck_dynamic_onnx_equals_pytorch(tmp_path):
    cfg = Config.fromfile(config('toy/vit5-tiny_maskrcnn_shapes.py'))
    cfg.merge_from_dict(ONE_BLOCK)
    model = build_part(cfg, 'neck')
    # five levels down to stride 64: the graph pads the image to multiples of it
    assert model.size_divisor == 64
    x = example_input((2, 3, 128, 192), 'neck')
    path = str(tmp_path / 'neck.onnx')
    export_onnx(model, x, path, dynamic=True)
    session = ort_session(path)
    assert [o.name for o in session.get_outputs()] == ['p2', 'p3', 'p4', 'p5', 'p6']
    # a multiple of 64, and sides that are not (padded to 256x128 and 192x256), batches 1, 3
    errors = errors_at(model, session, [(1, 3, 256, 128), (3, 3, 201, 100), (1, 3, 150, 200)],
                       'neck')
    assert max(errors.values()) <= 1e-4, errors
    outputs = run_session(session, example_input((1, 3, 201, 100), 'neck'))
    assert [o.shape[2:] for o in outputs] == [(64, 32), (32, 16), (16, 8), (8, 4), (4, 2)]


@pytest.mark.slow  # exports to ONNX
def test_export_tool_dynamic_upernet_and_its_errors(tmp_path):
    import onnxruntime as ort
    out = tmp_path / 'upernet.onnx'
    results = tmp_path / 'latency.json'
    output = run_tool([*tool('export_onnx.py'), config('toy/vit5-tiny_upernet_shapes.py'),
                       '--shape', '64', '96', '--dynamic', '--out', str(out), '--rounds', '1',
                       '--size-divisor', '32', '--json', str(results),
                       # other sizes and batches than the export's, below the pyramid
                       # pooling's 6x6 bins too, and 303x384 and 400x600 scaled down
                       '--check-shapes', '64x96,2x128x64,224x160,101x128,3x100x150',
                       '--cfg-options', 'model.backbone.arch.depth=1',
                       'model.backbone.out_indices=(0,0,0,0)'], cwd=tmp_path)
    assert out.is_file()
    assert 'part model (semantic), dynamic batch, H and W' in output
    assert 'every one in the default ONNX domain, no complex value' in output
    assert '- input: image; outputs: logits' in output
    for size in ('64x96', '128x64 batch 2', '224x160', '101x128', '100x150 batch 3'):
        row = next(line for line in output.splitlines() if line.startswith(f'| {size} | '))
        assert float(row.split('|')[2]) <= 1e-4 and row.endswith('| yes |'), row
    assert 'ORT / PyTorch' in output
    assert 'model = dict(data_preprocessor=dict(test_cfg=dict(size_divisor=32)))' in output
    from benchmarks.onnx_latency import latency_table
    table = latency_table(json.loads(results.read_text()))
    row = table.splitlines()[-1]
    assert row.startswith('| semantic | `vit5-tiny_upernet_shapes` (model.backbone.arch.depth=1')
    assert '| dynamic 1x64x96, ' in row
    # ONNX Runtime's own errors for a wrong channel count or dtype, as the guide quotes them
    session = ort.InferenceSession(str(out), providers=['CPUExecutionProvider'])
    with open(osp.join(REPO, 'docs', 'en', 'user_guides', 'onnx.md')) as f:
        guide = ' '.join(f.read().split())
    for image, quoted in [
            (np.zeros((1, 4, 64, 64), np.float32), 'index: 1 Got: 4 Expected: 3'),
            (np.zeros((1, 3, 64, 64), np.uint8),
             'Unexpected input data type. Actual: (tensor(uint8)) , expected: (tensor(float))'),
            (np.zeros((64, 64, 3), np.float32),
             'Invalid rank for input: image Got: 3 Expected: 4')]:
        with pytest.raises(Exception) as error:
            session.run(None, {'image': image})
        assert quoted in ' '.join(str(error.value).split()) and quoted in guide


@pytest.mark.slow  # exports to ONNX
def test_torchscript_onnx_exporter_of_mmdeploy_takes_the_backbone(tmp_path):
    """mmdeploy drives torch.onnx's TorchScript exporter, which has no complex type and no
    fused RMSNorm: ViT5 takes its real-arithmetic RoPE and composite RMSNorm there."""
    from mmvit5.models import ViT5
    model = ViT5(arch=dict(embed_dim=64, depth=1, num_heads=2), img_size=32).eval()
    x = torch.randn(1, 3, 48, 64)
    path = str(tmp_path / 'legacy.onnx')
    torch.onnx.export(model, (x, ), path, dynamo=False, opset_version=17)
    assert complex_values(path) == []
    with torch.no_grad():
        expected = model(x)[0].numpy()
    assert np.abs(run_session(ort_session(path), x)[0] - expected).max() <= 1e-4
