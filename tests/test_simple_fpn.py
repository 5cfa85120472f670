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


def test_backbone_width_mismatch_names_the_width_to_set():
    neck = SimpleFeaturePyramid(in_channels=768, out_channels=8)
    with pytest.raises(ValueError, match=r"in_channels \[768, 768, 768, 768\] but the backbone "
                                         r"gives \[384, 384, 384, 384\].*embed_dim \(384\)"):
        neck((torch.randn(1, 384, 4, 4), ))


def test_backbone_to_neck_shapes_non_square():
    backbone = ViT5(arch=dict(embed_dim=64, depth=2, num_heads=2), img_size=64,
                    out_indices=(0, 1, 1, 1)).eval()
    neck = SimpleFeaturePyramid(in_channels=[64] * 4, out_channels=16, num_outs=4)
    outs = neck(backbone(torch.randn(1, 3, 96, 160)))
    assert [o.shape[-2:] for o in outs] == [(24, 40), (12, 20), (6, 10), (3, 5)]


@pytest.mark.parametrize('kwargs, message', [
    (dict(in_channels=8, scale_factors=(3.0, )), 'scale_factors may contain'),
    (dict(in_channels=8, scale_factors=()), r'scale_factors may contain .*\(at least one\)'),
    (dict(in_channels=8, num_outs=2), 'num_outs must be an integer >= 4, got 2; one level per'),
    (dict(in_channels=8, num_outs=4.0), 'num_outs must be an integer >= 4, got 4.0'),
    (dict(in_channels=[8, 8]), 'one entry per scale factor'),
    (dict(in_channels=0), "in_channels must be an integer >= 4, got 0; the backbone's embed_dim"),
    (dict(in_channels=8, scale_factors=(1.0, ), num_outs=1, out_channels=0),
     'out_channels must be an integer >= 1, got 0'),
    (dict(in_channels=[8, 1, 8, 8]), 'in_channels must be an integer >= 2, got 1; .*scale '
     'factor 2 divides it by 2'),
    (dict(in_channels=[8, 8, 0.5, 8]), 'in_channels must be an integer >= 1, got 0.5'),
])
def test_config_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SimpleFeaturePyramid(**kwargs)


def test_roi_features_read_the_right_memory():
    """The backbone map and the neck outputs are plain NCHW (a ViT's transposed tokens and
    LN2d's permute are channels-last in memory), and mmdet's RoI extractors pool from them what
    torchvision's stride-aware roi_align pools."""
    from mmcv.ops import RoIAlign
    from torchvision.ops import roi_align

    torch.manual_seed(0)
    backbone = ViT5(arch=dict(embed_dim=64, depth=1, num_heads=2), img_size=64).eval()
    neck = SimpleFeaturePyramid(in_channels=64, out_channels=16, num_outs=4).eval()
    rois = torch.tensor([[0, 4., 6., 50., 40.], [1, 20., 10., 90., 60.]])
    with torch.no_grad():
        feature_map = backbone(torch.randn(2, 3, 64, 96))[0]
        assert feature_map.is_contiguous()
        # a channels-last input (e.g. mmpretrain's ViT output) comes out as plain NCHW too
        channels_last = feature_map.contiguous(memory_format=torch.channels_last)
        for inputs in ((feature_map, ), (channels_last, )):
            for stride, level in zip((4, 8, 16, 32), neck(inputs)):
                assert level.is_contiguous()
                mmcv_feats = RoIAlign(7, 1 / stride, sampling_ratio=0, aligned=True)(level, rois)
                expected = roi_align(level, rois, 7, 1 / stride, sampling_ratio=0, aligned=True)
                torch.testing.assert_close(mmcv_feats, expected)
