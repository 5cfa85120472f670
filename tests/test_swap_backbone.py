"""The README's snippet: swap backbone/neck/optimizer of unmodified upstream configs, train a step.

The configs come from the installed mmdet / mmseg packages; the data from the generated COCO
and ADE20K sets through each config's own training pipeline.
"""
import os.path as osp

import pytest
import torch
from mmengine.config import Config
from mmengine.dataset import pseudo_collate
from mmengine.optim import build_optim_wrapper
from mmengine.registry import DefaultScope, init_default_scope

import mmvit5  # noqa: F401

pytestmark = pytest.mark.slow  # trains upstream configs with ViT5 swapped in

TINY = dict(embed_dim=64, depth=2, num_heads=2)


def upstream(name, tmp_path):
    """An unmodified upstream config, inherited as a user's config file would."""
    path = tmp_path / 'user_config.py'
    path.write_text(f"_base_ = ['{name}']\ncustom_imports = dict(imports=['mmvit5'])\n")
    return Config.fromfile(str(path))


def swap(cfg, out_indices, neck):
    """What a user writes: replace backbone, neck and optimizer, keep everything else.

    (``_delete_`` only where the upstream config has the entry: mmseg's UperNet has no neck.)
    """
    neck = dict(type='SimpleFeaturePyramid', **neck)
    if cfg.model.get('neck'):
        neck['_delete_'] = True
    cfg.merge_from_dict(dict(
        model=dict(
            backbone=dict(_delete_=True, type='ViT5', arch=TINY, img_size=64,
                          out_indices=out_indices, drop_path_rate=0.1),
            neck=neck),
        optim_wrapper=dict(_delete_=True, type='OptimWrapper',
                           constructor='ViT5LayerDecayOptimizerConstructor',
                           paramwise_cfg=dict(layer_decay_rate=0.7),
                           optimizer=dict(type='AdamW', lr=1e-4, weight_decay=0.05))))
    return cfg


def train_step(cfg, dataset_cfg, scope):
    # drop path may skip a block for both images, leaving its weights as they were: which
    # blocks it skips must not depend on the tests that ran before in this process
    torch.manual_seed(0)
    init_default_scope(scope)
    registry = __import__(f'{scope}.registry', fromlist=['MODELS', 'DATASETS'])
    with DefaultScope.overwrite_default_scope(scope):
        model = registry.MODELS.build(cfg.model)
        model.init_weights()
        dataset = registry.DATASETS.build(dataset_cfg)
        optim = build_optim_wrapper(model, cfg.optim_wrapper)
        before = [p.detach().clone() for p in model.backbone.parameters()]
        losses = model.train_step(pseudo_collate([dataset[0], dataset[1]]), optim)
    assert all(torch.isfinite(v).all() for v in losses.values()), losses
    changed = sum(not torch.equal(a, b) for a, b in zip(before, model.backbone.parameters()))
    assert changed > 0.9 * len(before)
    return losses


@pytest.mark.parametrize('name', ['mask_rcnn/mask-rcnn_r50_fpn_1x_coco.py',
                                  'cascade_rcnn/cascade-mask-rcnn_r50_fpn_1x_coco.py'])
def test_mmdet_configs(toy_root, tmp_path, name):
    cfg = swap(upstream(f'mmdet::{name}', tmp_path), (-1, ),
               dict(in_channels=64, out_channels=256, num_outs=5))
    data = cfg.train_dataloader.dataset
    data.update(data_root=osp.join(toy_root, 'data/toy/coco/'),
                metainfo=dict(classes=('rectangle', 'ellipse', 'triangle')))
    losses = train_step(cfg, data, 'mmdet')
    assert any('mask' in k for k in losses)


@pytest.mark.parametrize('name', ['upernet/upernet_r50_4xb4-160k_ade20k-512x512.py',
                                  'deeplabv3plus/deeplabv3plus_r50-d8_4xb4-160k_ade20k-512x512.py'])
def test_mmseg_configs(toy_root, tmp_path, name):
    cfg = upstream(f'mmseg::{name}', tmp_path)
    head = cfg.model.decode_head
    if head.type == 'UPerHead':
        cfg = swap(cfg, (0, 1, 1, 1), dict(in_channels=[64] * 4, out_channels=64, num_outs=4))
        # 64 wide, not 512: its 2048-channel fusion conv over the stride-4 map of a 512 crop
        # was most of the step
        cfg.model.decode_head.update(in_channels=[64] * 4, channels=64)
    else:  # DeepLabV3+: stride-4 low-level features (c1) and the stride-16 map for ASPP
        cfg = swap(cfg, (0, 1), dict(in_channels=[64, 64], out_channels=64,
                                     scale_factors=(4.0, 1.0), num_outs=2))
        cfg.model.decode_head.update(in_channels=64, in_index=1, c1_in_channels=64)
    cfg.model.pretrained = None
    cfg.model.auxiliary_head.update(in_channels=64, in_index=1)
    norm = dict(type='BN', requires_grad=True)  # SyncBN only runs on CUDA
    cfg.model.decode_head.norm_cfg = norm
    cfg.model.auxiliary_head.norm_cfg = norm
    data = cfg.train_dataloader.dataset
    data.update(data_root=osp.join(toy_root, 'data/toy/ade/ADEChallengeData2016'))
    train_step(cfg, data, 'mmseg')


def test_deformable_detr_config(toy_root, tmp_path):
    """mmcv's MultiScaleDeformableAttention through the swap path (its CUDA kernel is served by
    mmcv's own PyTorch implementation: tests/test_ops.py). The images are resized to 256 rather
    than the config's 800-1333: the encoder's deformable attention runs per pixel of 4 levels."""
    cfg = swap(upstream('mmdet::deformable_detr/deformable-detr_r50_16xb2-50e_coco.py', tmp_path),
               (-1, ), dict(in_channels=64, out_channels=256, scale_factors=(2.0, 1.0, 0.5),
                            num_outs=4))
    data = cfg.train_dataloader.dataset
    data.update(data_root=osp.join(toy_root, 'data/toy/coco/'),
                metainfo=dict(classes=('rectangle', 'ellipse', 'triangle')),
                pipeline=[dict(type='LoadImageFromFile'), dict(type='LoadAnnotations'),
                          dict(type='Resize', scale=(256, 256), keep_ratio=True),
                          dict(type='PackDetInputs')])
    losses = train_step(cfg, data, 'mmdet')
    assert {'loss_cls', 'loss_bbox', 'loss_iou', 'd0.loss_cls'} <= set(losses), sorted(losses)
