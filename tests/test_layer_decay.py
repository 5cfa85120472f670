"""ViT5LayerDecayOptimizerConstructor through mmengine's build_optim_wrapper."""
import pytest
import torch.nn as nn
from mmengine.optim import build_optim_wrapper

from mmvit5.engine import ViT5LayerDecayOptimizerConstructor
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


def test_layer_depth_rule():
    depth = ViT5LayerDecayOptimizerConstructor.layer_depth
    assert depth('backbone.blocks.11.attn.qkv.weight', 'backbone.', 12) == 12
    assert depth('backbone.pos_embed', 'backbone.', 12) == 0
    assert depth('decode_head.conv_seg.weight', 'backbone.', 12) == 13


def test_bad_rate_and_model():
    with pytest.raises(ValueError, match='layer_decay_rate must be in'):
        build(1.5)
    with pytest.raises(TypeError, match='needs a model with a ViT5 backbone'):
        build_optim_wrapper(nn.Linear(2, 2), dict(
            type='OptimWrapper', constructor='ViT5LayerDecayOptimizerConstructor',
            optimizer=dict(type='AdamW', lr=1.0), paramwise_cfg=dict(layer_decay_rate=0.7)))
