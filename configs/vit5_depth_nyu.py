# ViT5-B monocular depth on NYU-Depth-v2 through mmseg's DepthEstimator: features of blocks 3,
# 6, 9 and 12 reassembled and fused by DPT's decoder (DPTDepthHead, metric depth up to 10 m,
# SiLog loss), mmseg's NYU data settings (480x480 crops, depth in mm PNGs) and its DepthMetric
# (NYU eval crop). AdamW with layer-wise lr decay; 25k iterations at total batch 32 (4 GPUs x 8,
# as mmseg's VPD recipe); --auto-scale-lr for another. Recipe diff: docs/en/user_guides/depth.md.
#
# Published anchors (literature, not runs of this config), NYU-Depth-v2 RMSE (m):
#   DINOv2 ViT-B/14, frozen, linear head on 4 layers: 0.362 (Oquab et al., 2023;
#   facebookresearch/dinov2 MODEL_CARD.md, Evaluation table, "NYU-Depth v2 depth (RMSE),
#   linear 4 layers" column);
#   DPT-Hybrid (R50 stem + ViT-B/16), fine-tuned on NYU: 0.357 RMSE, delta1 0.904 (Ranftl et
#   al., ICCV 2021; the paper's dpt_hybrid_nyu result as isl-org/DPT EVALUATION.md reprints
#   it). DPT reports no plain ViT-B/L fine-tuned on NYU.
_base_ = [
    'mmseg::_base_/datasets/nyu.py',
    'mmseg::_base_/default_runtime.py',
    './_base_/vit5_pretrained.py',
    './_base_/vit5_resume.py',
]
anchor = dict(model='DINOv2 ViT-B/14 frozen, linear on 4 layers', metric='RMSE', value=0.362,
              source='facebookresearch/dinov2 MODEL_CARD.md, NYU-Depth v2 linear 4 layers')
# the depth head needs mmseg.models (and so timm): imported by the configs that use it
custom_imports = dict(imports=['mmvit5', 'mmvit5.models.heads'], allow_failed_imports=False)

crop_size = (480, 480)
embed_dim = 768
pretrained = {{_base_.pretrained_base}}

model = dict(
    type='DepthEstimator',
    data_preprocessor=dict(
        type='SegDataPreProcessor',
        mean=[123.675, 116.28, 103.53],
        std=[58.395, 57.12, 57.375],
        bgr_to_rgb=True,
        pad_val=0,
        seg_pad_val=0,
        size=crop_size),
    backbone=dict(
        type='ViT5',
        arch='base',
        img_size=224,  # the pretraining size; crops are 480x480
        out_indices=(2, 5, 8, 11),  # DPT-Base's hooks
        drop_path_rate=0.1,
        rope_mode='interpolate',
        init_cfg=dict(type='Pretrained', checkpoint=pretrained)),
    decode_head=dict(
        type='DPTDepthHead',
        in_channels=embed_dim,
        post_process_channels=(96, 192, 384, 768),  # DPT-Base's
        channels=256,
        max_depth=10.0,
        loss_decode=dict(type='SiLogLoss')),
    test_cfg=dict(mode='slide_flip', crop_size=crop_size, stride=(160, 160)))

# mmseg's NYU pipeline; its Albu colour jitter (an extra dependency, albumentations) is
# replaced by mmseg's own PhotoMetricDistortion
train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadDepthAnnotation', depth_rescale_factor=1e-3),
    dict(type='RandomDepthMix', prob=0.25),
    dict(type='RandomFlip', prob=0.5),
    dict(type='RandomCrop', crop_size=crop_size),
    dict(type='PhotoMetricDistortion'),
    dict(type='PackSegInputs'),
]
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='Resize', scale=(2000, 480), keep_ratio=True),
    dict(type='LoadDepthAnnotation', depth_rescale_factor=1e-3),
    dict(type='PackSegInputs'),
]
train_dataloader = dict(dataset=dict(pipeline=train_pipeline))
val_dataloader = dict(dataset=dict(pipeline=test_pipeline))
test_dataloader = val_dataloader

optim_wrapper = dict(
    type='OptimWrapper',
    constructor='ViT5LayerDecayOptimizerConstructor',
    paramwise_cfg=dict(layer_decay_rate=0.65),
    optimizer=dict(type='AdamW', lr=1e-4, betas=(0.9, 0.999), weight_decay=0.05))
max_iters = 25000
param_scheduler = [
    dict(type='LinearLR', start_factor=1e-6, by_epoch=False, begin=0, end=1500),
    dict(type='PolyLR', power=0.9, eta_min=0.0, by_epoch=False, begin=1500, end=max_iters),
]
train_cfg = dict(type='IterBasedTrainLoop', max_iters=max_iters, val_interval=1000)
val_cfg = dict(type='ValLoop')
test_cfg = dict(type='TestLoop')
default_hooks = dict(
    logger=dict(type='LoggerHook', interval=50, log_metric_by_epoch=False),
    checkpoint=dict(type='CheckpointHook', by_epoch=False, interval=2000, save_best='rmse',
                    rule='less', max_keep_ckpts=1),
    visualization=dict(type='SegVisualizationHook'))
log_processor = dict(by_epoch=False)
auto_scale_lr = dict(enable=False, base_batch_size=32)
