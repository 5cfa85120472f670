"""ONNX export (mmvit5/deploy, tools/export_onnx.py): graphs run in ONNX Runtime and equal
PyTorch, at the export size and, for dynamic graphs, at others."""
import numpy as np
import pytest
import torch
import torch.nn as nn
from mmengine.config import Config

from conftest import config, run_tool, tool
from mmvit5.deploy import (
    MatmulAdaptiveAvgPool2d,
    build_part,
    check_sides,
    coarsest_stride,
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


def test_segmentor_logits_are_mmseg_whole_inference():
    cfg = Config.fromfile(config('toy/vit5-tiny_upernet_shapes.py'))
    cfg.merge_from_dict({**ONE_BLOCK, 'model.backbone.out_indices': (0, 0, 0, 0)})
    model = build_part(cfg, 'segmentor')
    from mmseg.structures import SegDataSample
    image = torch.randint(0, 256, (3, 64, 96), dtype=torch.uint8)
    segmentor = model.segmentor
    data = segmentor.data_preprocessor(
        dict(inputs=[image], data_samples=[SegDataSample(metainfo=dict(img_shape=(64, 96)))]))
    with torch.no_grad():
        expected = segmentor.encode_decode(data['inputs'], [dict(img_shape=(64, 96))])
        torch.testing.assert_close(model(image[None].float()), expected)


@pytest.mark.slow  # exports to ONNX
def test_maskrcnn_backbone_and_neck_dynamic_onnx_equals_pytorch(tmp_path):
    cfg = Config.fromfile(config('toy/vit5-tiny_maskrcnn_shapes.py'))
    cfg.merge_from_dict(ONE_BLOCK)
    model = build_part(cfg, 'neck')
    x = example_input((1, 3, 128, 192), 'neck')
    # five levels down to stride 64
    assert coarsest_stride(model, x, 'neck') == 64
    path = str(tmp_path / 'neck.onnx')
    # unoptimised here: the tool's test below runs the exporter's optimiser
    export_onnx(model, x, path, dynamic=True, size_divisor=64, optimize=False)
    session = ort_session(path)
    errors = errors_at(model, session, [(1, 3, 128, 192), (1, 3, 256, 128)], 'neck')
    assert max(errors.values()) <= 1e-4, errors
    outputs = run_session(session, example_input((1, 3, 256, 128), 'neck'))
    assert [o.shape[2:] for o in outputs] == [(64, 32), (32, 16), (16, 8), (8, 4), (4, 2)]


@pytest.mark.slow  # exports to ONNX
def test_export_tool_upernet_image_to_logits_dynamic(tmp_path):
    out = tmp_path / 'upernet.onnx'
    output = run_tool([*tool('export_onnx.py'), config('toy/vit5-tiny_upernet_shapes.py'),
                       '--shape', '64', '96', '--dynamic', '--out', str(out), '--rounds', '1',
                       # other sizes than the export's, below the pyramid pooling's 6x6 bins too
                       '--check-shapes', '64x96,128x64,224x160', '--cfg-options',
                       'model.backbone.arch.depth=1', 'model.backbone.out_indices=(0,0,0,0)'],
                      cwd=tmp_path)
    assert out.is_file()
    assert 'part segmentor, dynamic H x W (multiples of 32), batch 1' in output
    assert 'complex values in the graph: none' in output
    for size in ('64x96', '128x64', '224x160'):
        row = next(line for line in output.splitlines() if line.startswith(f'| {size} | '))
        assert float(row.split('|')[2]) <= 1e-4 and row.endswith('| yes |'), row
    assert 'ORT / PyTorch' in output
    session = ort_session(str(out))
    logits = run_session(session, example_input((1, 3, 128, 64), 'segmentor'))[0]
    assert logits.shape == (1, 150, 128, 64) and np.std(logits) > 1e-3


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
