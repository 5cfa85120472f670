# A CPU-sized ViT-5 Mask R-CNN on the generated shapes set (tools/make_toy_data.py):
# the COCO recipe of ../vit5_maskrcnn_coco.py with a 4-block, 96-wide ViT-5 trained from
# scratch at 256x256. Used by the quick start, the tests and tools/learning_curves.py.
# It keeps the set-up its learning curves were measured with (README, "The models learn"):
# global attention (a 16x16 grid is about one 14x14 window), the 2fc box head and plain mask
# head, float32.
_base_ = ['../vit5_maskrcnn_coco.py']

data_root = 'data/toy/coco/'
image_size = (256, 256)
metainfo = dict(classes=('rectangle', 'ellipse', 'triangle'))
num_classes = 3
channels = 64

model = dict(
    data_preprocessor=dict(batch_augments=[
        dict(type='BatchFixedSizePad', size=image_size, pad_mask=True)]),
    backbone=dict(arch=dict(_delete_=True, embed_dim=96, depth=4, num_heads=3), img_size=64,
                  drop_path_rate=0.0, window_size=0, init_cfg=None),
    neck=dict(in_channels=96, out_channels=channels),
    # two anchor sizes per level: with one, most shapes (40-120 px) overlap no anchor by 0.7
    rpn_head=dict(in_channels=channels, feat_channels=channels,
                  anchor_generator=dict(scales=[4, 6])),
    roi_head=dict(
        bbox_roi_extractor=dict(out_channels=channels),
        bbox_head=dict(type='Shared2FCBBoxHead', in_channels=channels, fc_out_channels=128,
                       num_classes=num_classes, norm_cfg=None),
        mask_roi_extractor=dict(out_channels=channels),
        mask_head=dict(in_channels=channels, conv_out_channels=channels,
                       num_classes=num_classes, norm_cfg=None)),
    # 1-4 objects per image: 512 sampled RoIs would be ~98 % background, 128 keep ~25 % positive
    train_cfg=dict(rcnn=dict(sampler=dict(num=128))),
    test_cfg=dict(rpn=dict(nms_pre=300, max_per_img=300), rcnn=dict(max_per_img=20)))

train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations', with_bbox=True, with_mask=True),
    dict(type='RandomResize', scale=image_size, ratio_range=(0.8, 1.25), keep_ratio=True),
    dict(type='RandomCrop', crop_type='absolute_range', crop_size=image_size,
         recompute_bbox=True, allow_negative_crop=True),
    dict(type='FilterAnnotations', min_gt_bbox_wh=(1e-2, 1e-2)),
    dict(type='RandomFlip', prob=0.5),
    dict(type='PackDetInputs'),
]
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='Resize', scale=image_size, keep_ratio=True),
    dict(type='LoadAnnotations', with_bbox=True, with_mask=True),
    dict(type='PackDetInputs',
         meta_keys=('img_id', 'img_path', 'ori_shape', 'img_shape', 'scale_factor')),
]
train_dataloader = dict(
    batch_size=2, num_workers=0, persistent_workers=False,
    dataset=dict(data_root=data_root, metainfo=metainfo, pipeline=train_pipeline,
                 filter_cfg=dict(filter_empty_gt=True, min_size=8)))
val_dataloader = dict(
    batch_size=2, num_workers=0, persistent_workers=False,
    dataset=dict(data_root=data_root, metainfo=metainfo, pipeline=test_pipeline))
test_dataloader = val_dataloader
val_evaluator = dict(ann_file=data_root + 'annotations/instances_val2017.json')
test_evaluator = val_evaluator

max_iters = 40
train_cfg = dict(max_iters=max_iters, val_interval=max_iters)
param_scheduler = [
    dict(type='LinearLR', start_factor=0.01, by_epoch=False, begin=0, end=20),
    dict(type='MultiStepLR', begin=0, end=max_iters, by_epoch=False,
         milestones=[int(max_iters * 0.9)], gamma=0.1),
]
# trained from scratch: no pretrained early layers to protect, so no layer decay
optim_wrapper = dict(_delete_=True, type='OptimWrapper',
                     constructor='ViT5LayerDecayOptimizerConstructor',
                     paramwise_cfg=dict(layer_decay_rate=1.0),
                     optimizer=dict(type='AdamW', lr=1e-3, betas=(0.9, 0.999), weight_decay=0.05),
                     clip_grad=dict(max_norm=1.0))
# a checkpoint every quarter of the run, as the recipes save several: a killed run resumes
# from the last one (docs/en/user_guides/train_test.md#resuming)
default_hooks = dict(logger=dict(interval=10),
                     checkpoint=dict(interval=max_iters // 4, max_keep_ckpts=2))
randomness = dict(seed=0)
