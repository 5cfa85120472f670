"""SimpleFeaturePyramid: strides, channels, multi-layer input, errors."""
import pytest
import torch

from mmvit5.models import SimpleFeaturePyramid, ViT5


def test_single_input_five_levels():
    neck = SimpleFeaturePyramid(in_channels=64, out_channels=32, num_outs=5)
    outs = neck((torch.randn(2, 64, 8, 12), ))
    assert [tuple(o.shape) for o in outs] == [(2, 32, 32, 48), (2, 32, 16, 24), (2, 32, 8, 12),
                                              (2, 32, 4, 6), (2, 32, 2, 3)]
    # LN2d from the registry, as norm_cfg asks
    assert any(type(m).__name__ == 'LayerNorm2d' for m in neck.modules())


def test_multi_layer_input_uses_one_input_per_level():
    neck = SimpleFeaturePyramid(in_channels=[16, 16, 16, 16], out_channels=8, num_outs=4)
    inputs = [torch.randn(1, 16, 4, 4) for _ in range(4)]
    base = neck(inputs)
    inputs[0] = inputs[0] + 1  # only the stride-4 level reads the first input
    changed = neck(inputs)
    assert not torch.allclose(base[0], changed[0])
    assert all(torch.equal(a, b) for a, b in zip(base[1:], changed[1:]))
    with pytest.raises(ValueError, match='built for 4 inputs'):
        neck(inputs[:2])


def test_backbone_to_neck_shapes_non_square():
    backbone = ViT5(arch=dict(embed_dim=64, depth=2, num_heads=2), img_size=64,
                    out_indices=(0, 1, 1, 1)).eval()
    neck = SimpleFeaturePyramid(in_channels=[64] * 4, out_channels=16, num_outs=4)
    outs = neck(backbone(torch.randn(1, 3, 96, 160)))
    assert [o.shape[-2:] for o in outs] == [(24, 40), (12, 20), (6, 10), (3, 5)]


@pytest.mark.parametrize('kwargs, message', [
    (dict(in_channels=8, scale_factors=(3.0, )), 'scale_factors may contain'),
    (dict(in_channels=8, num_outs=2), 'num_outs 2 is smaller'),
    (dict(in_channels=[8, 8]), 'one entry per scale factor'),
])
def test_config_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SimpleFeaturePyramid(**kwargs)
