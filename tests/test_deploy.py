"""ONNX export (mmvit5/deploy, tools/export_onnx.py): graphs run in ONNX Runtime and equal
PyTorch, at the export size and, for dynamic graphs, at others."""
import os.path as osp
import re

import cv2
import numpy as np
import pytest
import torch
import torch.nn as nn
from mmengine.config import Config

from conftest import REPO, config, run_tool, tool
from mmvit5.deploy import (
    MatmulAdaptiveAvgPool2d,
    build_part,
    check_sides,
    complex_values,
    errors_at,
    example_input,
    export_onnx,
    ort_session,
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


# 64x96 is a multiple of UperNet's 32; 101x128 and 100x150 are 303x384 and 400x600 (where a
# graph that did not pad gave wrong logits or failed in ONNX Runtime) scaled down
def test_segmentor_logits_are_mmseg_whole_inference_with_padding():
    cfg = Config.fromfile(config('toy/vit5-tiny_upernet_shapes.py'))
    cfg.merge_from_dict({**ONE_BLOCK, 'model.backbone.out_indices': (0, 0, 0, 0)})
    model = build_part(cfg, 'segmentor')
    assert model.size_divisor == 32
    from mmseg.structures import SegDataSample
    segmentor = model.segmentor
    # mmseg pads test images to the divisor when the preprocessor has a test_cfg
    segmentor.data_preprocessor.test_cfg = dict(size_divisor=32)
    for side in [(64, 96), (101, 128), (100, 150)]:
        image = torch.randint(0, 256, (3, *side), dtype=torch.uint8)
        sample = SegDataSample(metainfo=dict(img_shape=side, ori_shape=side))
        data = segmentor.data_preprocessor(dict(inputs=[image], data_samples=[sample]))
        with torch.no_grad():
            expected = segmentor.predict(data['inputs'], data['data_samples'])[0].seg_logits
            logits = model(image[None].float())
        assert logits.shape == (1, 150, *side)
        torch.testing.assert_close(logits[0], expected.data, msg=f'at {side}')


@pytest.mark.slow  # exports to ONNX
def test_maskrcnn_backbone_and_neck_dynamic_onnx_equals_pytorch(tmp_path):
    cfg = Config.fromfile(config('toy/vit5-tiny_maskrcnn_shapes.py'))
    cfg.merge_from_dict(ONE_BLOCK)
    model = build_part(cfg, 'neck')
    # five levels down to stride 64: the graph pads the image to multiples of it
    assert model.size_divisor == 64
    x = example_input((1, 3, 128, 192), 'neck')
    path = str(tmp_path / 'neck.onnx')
    # unoptimised here: the tool's test below runs the exporter's optimiser
    export_onnx(model, x, path, dynamic=True, optimize=False)
    session = ort_session(path)
    assert [o.name for o in session.get_outputs()] == ['p2', 'p3', 'p4', 'p5', 'p6']
    # a multiple of 64, and sides that are not (padded to 256x128 and 192x256)
    errors = errors_at(model, session, [(1, 3, 256, 128), (1, 3, 201, 100), (1, 3, 150, 200)],
                       'neck')
    assert max(errors.values()) <= 1e-4, errors
    outputs = run_session(session, example_input((1, 3, 201, 100), 'neck'))
    assert [o.shape[2:] for o in outputs] == [(64, 32), (32, 16), (16, 8), (8, 4), (4, 2)]


@pytest.mark.slow  # exports to ONNX
def test_export_tool_upernet_image_to_logits_dynamic(tmp_path, monkeypatch):
    out = tmp_path / 'upernet.onnx'
    output = run_tool([*tool('export_onnx.py'), config('toy/vit5-tiny_upernet_shapes.py'),
                       '--shape', '64', '96', '--dynamic', '--out', str(out), '--rounds', '1',
                       # other sizes than the export's, below the pyramid pooling's 6x6 bins
                       # too, and 303x384 and 400x600 scaled down: sides the graph pads
                       '--check-shapes', '64x96,128x64,224x160,101x128,100x150', '--cfg-options',
                       'model.backbone.arch.depth=1', 'model.backbone.out_indices=(0,0,0,0)'],
                      cwd=tmp_path)
    assert out.is_file()
    assert ('part segmentor, dynamic H x W (padded to multiples of 32 in the graph), batch 1'
            in output)
    assert 'complex values in the graph: none' in output
    assert '- input: image; outputs: logits' in output
    for size in ('64x96', '128x64', '224x160', '101x128', '100x150'):
        row = next(line for line in output.splitlines() if line.startswith(f'| {size} | '))
        assert float(row.split('|')[2]) <= 1e-4 and row.endswith('| yes |'), row
    assert 'ORT / PyTorch' in output
    # the guide's ONNX Runtime snippet, on this graph and an image of a side it pads
    with open(osp.join(REPO, 'docs', 'en', 'user_guides', 'onnx.md')) as f:
        snippet = re.search(r'^```python\n(.*?)^```', f.read(), re.DOTALL | re.MULTILINE)[1]
    assert 'work_dirs/onnx/vit5_upernet_ade20k_segmentor.onnx' in snippet
    snippet = snippet.replace('work_dirs/onnx/vit5_upernet_ade20k_segmentor.onnx', str(out))
    cv2.imwrite(str(tmp_path / 'demo.jpg'), np.random.default_rng(0).integers(
        0, 256, (101, 75, 3), dtype=np.uint8))
    monkeypatch.chdir(tmp_path)
    namespace = {}
    exec(compile(snippet, 'onnx.md', 'exec'), namespace)
    assert namespace['logits'].shape == (1, 150, 101, 75) and np.std(namespace['logits']) > 1e-3
    assert namespace['labels'].shape == (101, 75)


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
