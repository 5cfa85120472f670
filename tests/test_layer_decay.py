"""ViT5LayerDecayOptimizerConstructor through mmengine's build_optim_wrapper."""
import pytest
import torch.nn as nn
from mmengine.optim import build_optim_wrapper

from mmvit5.models import SimpleFeaturePyramid, ViT5


class Detector(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = ViT5(arch=dict(embed_dim=32, depth=3, num_heads=2))
        self.neck = SimpleFeaturePyramid(in_channels=32, out_channels=8, num_outs=4)


def build(rate=0.5):
    cfg = dict(type='OptimWrapper', constructor='ViT5LayerDecayOptimizerConstructor',
               optimizer=dict(type='AdamW', lr=1.0, weight_decay=0.1),
               paramwise_cfg=dict(layer_decay_rate=rate))
    return build_optim_wrapper(Detector(), cfg)


def groups_by_name(wrapper):
    return {name: group for group in wrapper.optimizer.param_groups
            for name in group['param_names']}


def test_depths_rates_and_weight_decay():
    groups = groups_by_name(build(0.5))
    # 3 blocks: patch embed / tokens depth 0 -> 0.5 ** 4, block i -> 0.5 ** (3 - i)
    expected_lr = {
        'backbone.patch_embed.proj.weight': 0.5**4, 'backbone.cls_token': 0.5**4,
        'backbone.reg_token': 0.5**4, 'backbone.pos_embed': 0.5**4,
        'backbone.blocks.0.attn.qkv.weight': 0.5**3, 'backbone.blocks.2.mlp.fc1.weight': 0.5,
        'backbone.norm.weight': 1.0, 'neck.stages.0.0.weight': 1.0,
    }
    for name, lr in expected_lr.items():
        assert groups[name]['lr'] == pytest.approx(lr), name
    no_decay = ['backbone.cls_token', 'backbone.reg_token', 'backbone.pos_embed',
                'backbone.blocks.1.gamma_1', 'backbone.blocks.1.norm1.weight',
                'backbone.blocks.1.attn.q_norm.weight', 'backbone.blocks.1.attn.proj.bias',
                'backbone.patch_embed.proj.bias', 'backbone.norm.weight']
    for name in no_decay:
        assert groups[name]['weight_decay'] == 0.0, name
    for name in ('backbone.blocks.1.attn.qkv.weight', 'backbone.patch_embed.proj.weight',
                 'neck.stages.0.0.weight'):
        assert groups[name]['weight_decay'] == pytest.approx(0.1), name
    total = sum(p.numel() for g in build().optimizer.param_groups for p in g['params'])
    assert total == sum(p.numel() for p in Detector().parameters())


def test_layer_depth_follows_mmpretrain():
    """ViT5.get_layer_depth numbers what mmpretrain's VisionTransformer numbers the same way."""
    from mmpretrain.models import VisionTransformer
    ours = ViT5(arch=dict(embed_dim=32, depth=12, num_heads=2))
    theirs = VisionTransformer(arch=dict(embed_dims=32, num_layers=12, num_heads=2,
                                         feedforward_channels=64), img_size=32)
    pairs = [('backbone.patch_embed.proj.weight', 'backbone.patch_embed.projection.weight'),
             ('backbone.pos_embed', 'backbone.pos_embed'),
             ('backbone.cls_token', 'backbone.cls_token'),
             ('backbone.blocks.0.attn.qkv.weight', 'backbone.layers.0.attn.qkv.weight'),
             ('backbone.blocks.11.mlp.fc2.bias', 'backbone.layers.11.ffn.layers.1.bias'),
             ('backbone.norm.weight', 'backbone.ln1.weight'),
             ('decode_head.conv_seg.weight', 'decode_head.conv_seg.weight')]
    for name, their_name in pairs:
        assert ours.get_layer_depth(name, 'backbone.') == \
            theirs.get_layer_depth(their_name, 'backbone.'), name
    assert ours.get_layer_depth('reg_token') == (0, 14)
    assert ours.get_layer_depth('blocks.3.gamma_1') == (4, 14)


def test_constructor_asks_the_backbone():
    """Any backbone with mmpretrain's get_layer_depth gets the same groups (not only ViT5)."""
    from mmpretrain.models import VisionTransformer

    class Classifier(nn.Module):
        def __init__(self):
            super().__init__()
            self.backbone = VisionTransformer(arch=dict(embed_dims=32, num_layers=3,
                                                        num_heads=2, feedforward_channels=64),
                                              img_size=32)
            self.head = nn.Linear(32, 3)

    cfg = dict(type='OptimWrapper', constructor='ViT5LayerDecayOptimizerConstructor',
               optimizer=dict(type='AdamW', lr=1.0, weight_decay=0.1),
               paramwise_cfg=dict(layer_decay_rate=0.5))
    groups = groups_by_name(build_optim_wrapper(Classifier(), cfg))
    assert groups['backbone.pos_embed']['lr'] == pytest.approx(0.5**4)
    assert groups['backbone.layers.2.attn.qkv.weight']['lr'] == pytest.approx(0.5)
    assert groups['head.weight']['lr'] == 1.0


def test_num_layers_counts_more_blocks():
    cfg = dict(type='OptimWrapper', constructor='ViT5LayerDecayOptimizerConstructor',
               optimizer=dict(type='AdamW', lr=1.0),
               paramwise_cfg=dict(layer_decay_rate=0.5, num_layers=5))
    groups = groups_by_name(build_optim_wrapper(Detector(), cfg))
    assert groups['backbone.blocks.2.mlp.fc1.weight']['lr'] == pytest.approx(0.5**3)
    assert groups['backbone.cls_token']['lr'] == pytest.approx(0.5**6)
    assert groups['backbone.norm.weight']['lr'] == 1.0


@pytest.mark.parametrize('paramwise_cfg, message', [
    (dict(layer_decay_rate=1.5), r'layer_decay_rate must be a number in \(0, 1\], got 1.5'),
    (dict(layer_decay_rate=0), r'layer_decay_rate must be a number in \(0, 1\], got 0'),
    (dict(layer_decay_rate='0.7'), "layer_decay_rate must be a number .*got '0.7'"),
    (dict(layer_decay_rate=0.7, num_layers=2),
     "num_layers must be an integer >= 3, got 2; .*leave it out for the backbone's 3"),
    (dict(layer_decay_rate=0.7, num_layers=4.0), 'num_layers must be an integer'),
    (dict(layer_decay_rate=0.7, decay_mult=2), 'accepts layer_decay_rate and num_layers'),
])
def test_bad_paramwise_cfg(paramwise_cfg, message):
    cfg = dict(type='OptimWrapper', constructor='ViT5LayerDecayOptimizerConstructor',
               optimizer=dict(type='AdamW', lr=1.0), paramwise_cfg=paramwise_cfg)
    with pytest.raises(ValueError, match=message):
        build_optim_wrapper(Detector(), cfg)


def test_model_without_layer_depths():
    with pytest.raises(TypeError, match=r'needs a backbone with get_layer_depth'):
        build_optim_wrapper(nn.Linear(2, 2), dict(
            type='OptimWrapper', constructor='ViT5LayerDecayOptimizerConstructor',
            optimizer=dict(type='AdamW', lr=1.0), paramwise_cfg=dict(layer_decay_rate=0.7)))
