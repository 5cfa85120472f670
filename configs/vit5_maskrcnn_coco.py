# ViT5-B Mask R-CNN on COCO, point by point ViTDet's recipe (Li et al., 2022; mmdet's
# projects/ViTDet, detectron2's mask_rcnn_vitdet_b_100ep: 51.6 box / 45.9 mask AP):
# simple feature pyramid with LN, 2-conv RPN, 4conv1fc box head and FCN mask head with LN,
# windowed attention (14, global blocks 2, 5, 8, 11), 1024x1024 large-scale jitter, 100
# epochs at total batch 64, AdamW 1e-4 / wd 0.1, layer decay 0.7, drop path 0.1, fp16.
# Where ViT5 cannot or does not follow ViTDet, a comment says why (README, "Recipe diff").
#
# Total batch size 64 (16 GPUs x 4 images, or 8 x 8). With another total batch, scale the
# learning rate linearly: `--auto-scale-lr` (base_batch_size below) or set
# optim_wrapper.optimizer.lr = 1e-4 * total_batch / 64.
_base_ = [
    'mmdet::mask_rcnn/mask-rcnn_r50_fpn_1x_coco.py',
    './_base_/vit5_vitdet.py',
    './_base_/vit5_resume.py',
]
custom_imports = dict(imports=['mmvit5'], allow_failed_imports=False)

image_size = (1024, 1024)
embed_dim = 768
norm_cfg = dict(type='LN2d', eps=1e-6)  # ViTDet's channel LayerNorm in neck and heads

model = dict(
    data_preprocessor=dict(pad_size_divisor=32,
                           batch_augments=[dict(type='BatchFixedSizePad', size=image_size,
                                                pad_mask=True)]),
    backbone={{_base_.vitdet_backbone}},  # windows, drop path: _base_/vit5_vitdet.py
    neck=dict(
        _delete_=True,
        type='SimpleFeaturePyramid',
        in_channels=embed_dim,
        out_channels=256,
        scale_factors=(4.0, 2.0, 1.0, 0.5),
        num_outs=5,
        norm_cfg=norm_cfg),
    rpn_head=dict(num_convs=2),
    roi_head=dict(
        bbox_head=dict(type='Shared4Conv1FCBBoxHead', conv_out_channels=256,
                       norm_cfg=norm_cfg),
        mask_head=dict(norm_cfg=norm_cfg)),
)

backend_args = None
# large-scale jitter (LSJ), as ViTDet: resize 0.1-2.0 of 1024, crop/pad to 1024x1024
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
# mmdet's CocoMetric evaluated by faster-coco-eval where it imports: pycocotools' numbers, bit
# for bit, several times faster (test_evaluator.coco_backend='pycocotools' runs mmdet's own)
val_evaluator = dict(type='FasterCocoMetric')
test_evaluator = val_evaluator

# 100 epochs of COCO train2017 at batch 64, steps at 88.9 % and 96.3 % (ViTDet's iterations)
max_iters = 184375
train_cfg = dict(_delete_=True, type='IterBasedTrainLoop', max_iters=max_iters,
                 val_interval=10000)
param_scheduler = [
    dict(type='LinearLR', start_factor=0.001, by_epoch=False, begin=0, end=250),
    dict(type='MultiStepLR', begin=0, end=max_iters, by_epoch=False,
         milestones=[163889, 177546], gamma=0.1),
]
# fp16 with dynamic loss scale, as ViTDet (tools switch to bf16 autocast without CUDA);
# mmdet's ViTDet also compresses DDP gradients to fp16 (Fp16CompresssionHook, not in mmdet's
# wheel): a communication saving, left out.
# ViTDet exempts norms and pos_embed from weight decay; ours also biases, LayerScale gammas
# and the class/register tokens (every 1-D tensor, as BEiT/MAE fine-tuning does).
optim_wrapper = dict(
    _delete_=True,
    type='AmpOptimWrapper',
    loss_scale='dynamic',
    constructor='ViT5LayerDecayOptimizerConstructor',
    paramwise_cfg=dict(layer_decay_rate=0.7),
    optimizer=dict(type='AdamW', lr=1e-4, betas=(0.9, 0.999), weight_decay=0.1),
    clip_grad=None)
default_hooks = dict(
    logger=dict(type='LoggerHook', interval=50, log_metric_by_epoch=False),
    checkpoint=dict(type='CheckpointHook', by_epoch=False, interval=10000, max_keep_ckpts=3))
log_processor = dict(by_epoch=False)
auto_scale_lr = dict(enable=False, base_batch_size=64)
