# ViT5-B Mask R-CNN on COCO, ViTDet recipe: simple feature pyramid, 1024x1024 large-scale
# jitter, AdamW with layer-wise lr decay 0.7, drop path 0.1, 184,375 iterations.
#
# Total batch size 64 (e.g. 8 GPUs x 8 images, or 16 x 4). With another total batch, scale
# the learning rate linearly: `--auto-scale-lr` (base_batch_size below) or set
# optim_wrapper.optimizer.lr = 1e-4 * total_batch / 64.
_base_ = [
    'mmdet::mask_rcnn/mask-rcnn_r50_fpn_1x_coco.py',
    './_base_/vit5_pretrained.py',
]
custom_imports = dict(imports=['mmvit5'], allow_failed_imports=False)
# exact resume: the RNG states (drop path, proposal sampling) travel with the checkpoints
custom_hooks = [dict(type='RNGStateHook')]

image_size = (1024, 1024)
arch = 'base'
embed_dim = 768
pretrained = {{_base_.pretrained_base}}

model = dict(
    data_preprocessor=dict(pad_size_divisor=32,
                           batch_augments=[dict(type='BatchFixedSizePad', size=image_size,
                                                pad_mask=True)]),
    backbone=dict(
        _delete_=True,
        type='ViT5',
        arch=arch,
        img_size=224,  # the pretraining size; inputs are 1024x1024
        out_indices=(-1, ),
        drop_path_rate=0.1,
        rope_mode='interpolate',
        init_cfg=dict(type='Pretrained', checkpoint=pretrained)),
    neck=dict(
        _delete_=True,
        type='SimpleFeaturePyramid',
        in_channels=embed_dim,
        out_channels=256,
        scale_factors=(4.0, 2.0, 1.0, 0.5),
        num_outs=5,
        norm_cfg=dict(type='LN2d', eps=1e-6)),
    rpn_head=dict(num_convs=2),
)

backend_args = None
train_pipeline = [
    dict(type='LoadImageFromFile', backend_args=backend_args),
    dict(type='LoadAnnotations', with_bbox=True, with_mask=True),
    dict(type='RandomResize', scale=image_size, ratio_range=(0.1, 2.0), keep_ratio=True),
    dict(type='RandomCrop', crop_type='absolute_range', crop_size=image_size,
         recompute_bbox=True, allow_negative_crop=True),
    dict(type='FilterAnnotations', min_gt_bbox_wh=(1e-2, 1e-2)),
    dict(type='RandomFlip', prob=0.5),
    dict(type='PackDetInputs'),
]
test_pipeline = [
    dict(type='LoadImageFromFile', backend_args=backend_args),
    dict(type='Resize', scale=image_size, keep_ratio=True),
    dict(type='LoadAnnotations', with_bbox=True, with_mask=True),
    dict(type='PackDetInputs',
         meta_keys=('img_id', 'img_path', 'ori_shape', 'img_shape', 'scale_factor')),
]
train_dataloader = dict(
    batch_size=4,
    num_workers=4,
    sampler=dict(type='InfiniteSampler', shuffle=True),
    dataset=dict(pipeline=train_pipeline))
val_dataloader = dict(dataset=dict(pipeline=test_pipeline))
test_dataloader = val_dataloader

max_iters = 184375
train_cfg = dict(_delete_=True, type='IterBasedTrainLoop', max_iters=max_iters,
                 val_interval=10000)
param_scheduler = [
    dict(type='LinearLR', start_factor=0.001, by_epoch=False, begin=0, end=250),
    dict(type='MultiStepLR', begin=0, end=max_iters, by_epoch=False,
         milestones=[163889, 177546], gamma=0.1),
]
optim_wrapper = dict(
    _delete_=True,
    type='OptimWrapper',
    constructor='ViT5LayerDecayOptimizerConstructor',
    paramwise_cfg=dict(layer_decay_rate=0.7),
    optimizer=dict(type='AdamW', lr=1e-4, betas=(0.9, 0.999), weight_decay=0.1),
    clip_grad=None)
default_hooks = dict(
    logger=dict(type='LoggerHook', interval=50, log_metric_by_epoch=False),
    checkpoint=dict(type='CheckpointHook', by_epoch=False, interval=10000, max_keep_ckpts=3))
log_processor = dict(by_epoch=False)
auto_scale_lr = dict(enable=False, base_batch_size=64)
