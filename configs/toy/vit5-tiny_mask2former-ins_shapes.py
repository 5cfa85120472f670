# A CPU-sized ViT-5 Mask2Former (instances) on the generated shapes set
# (tools/make_toy_data.py): the COCO recipe of ../vit5_mask2former-ins_coco.py with a 4-block,
# 96-wide ViT-5 from scratch and a shrunk head at 128x128, so that a few hundred iterations
# take minutes on a laptop CPU. What is shrunk and why:
# - the simple feature pyramid and the whole head are 64 wide (upstream 256);
# - the deformable pixel decoder has 1 encoder layer (upstream 6), the transformer decoder 3
#   layers, one round over the 3 feature levels (upstream 9, three rounds);
# - 10 queries (upstream 100): the scenes hold 1-4 objects;
# - the mask loss samples 1024 points (upstream 12544 = 112^2): the predicted masks are 32x32
#   (stride 4 of 128), 1024 points in all.
# Everything else (the Hungarian matching, the losses and their weights, the fusion head) is
# upstream's.
_base_ = ['../vit5_mask2former-ins_coco.py']

data_root = 'data/toy/coco/'
image_size = (128, 128)
metainfo = dict(classes=('rectangle', 'ellipse', 'triangle'))
num_classes = 3
channels = 64

model = dict(
    data_preprocessor=dict(batch_augments=[
        dict(type='BatchFixedSizePad', size=image_size, img_pad_value=0, pad_mask=True,
             mask_pad_value=0, pad_seg=False)]),
    backbone=dict(arch=dict(_delete_=True, embed_dim=96, depth=4, num_heads=3), img_size=64,
                  drop_path_rate=0.0, window_size=0, init_cfg=None),
    neck=dict(in_channels=96, out_channels=channels),
    panoptic_head=dict(
        in_channels=[channels] * 4,
        feat_channels=channels,
        out_channels=channels,
        num_things_classes=num_classes,
        num_stuff_classes=0,
        num_queries=10,
        pixel_decoder=dict(
            norm_cfg=dict(type='GN', num_groups=16),
            encoder=dict(
                num_layers=1,
                layer_cfg=dict(
                    self_attn_cfg=dict(embed_dims=channels, num_heads=4),
                    ffn_cfg=dict(embed_dims=channels, feedforward_channels=4 * channels))),
            positional_encoding=dict(num_feats=channels // 2)),
        positional_encoding=dict(num_feats=channels // 2),
        transformer_decoder=dict(
            num_layers=3,
            layer_cfg=dict(
                self_attn_cfg=dict(embed_dims=channels, num_heads=4),
                cross_attn_cfg=dict(embed_dims=channels, num_heads=4),
                ffn_cfg=dict(embed_dims=channels, feedforward_channels=4 * channels))),
        loss_cls=dict(class_weight=[1.0] * num_classes + [0.1])),
    panoptic_fusion_head=dict(num_things_classes=num_classes, num_stuff_classes=0),
    train_cfg=dict(num_points=1024),
    test_cfg=dict(max_per_image=10))

train_pipeline = [
    dict(type='LoadImageFromFile', to_float32=True),
    dict(type='LoadAnnotations', with_bbox=True, with_mask=True),
    dict(type='RandomFlip', prob=0.5),
    dict(type='RandomResize', scale=image_size, ratio_range=(0.8, 1.25), keep_ratio=True),
    dict(type='RandomCrop', crop_size=image_size, crop_type='absolute', recompute_bbox=True,
         allow_negative_crop=True),
    dict(type='FilterAnnotations', min_gt_bbox_wh=(1e-5, 1e-5), by_mask=True),
    dict(type='PackDetInputs'),
]
test_pipeline = [
    dict(type='LoadImageFromFile', to_float32=True),
    dict(type='Resize', scale=image_size, keep_ratio=True),
    dict(type='LoadAnnotations', with_bbox=True, with_mask=True),
    dict(type='PackDetInputs',
         meta_keys=('img_id', 'img_path', 'ori_shape', 'img_shape', 'scale_factor')),
]
train_dataloader = dict(
    batch_size=4, num_workers=0, persistent_workers=False,
    dataset=dict(data_root=data_root, metainfo=metainfo, pipeline=train_pipeline,
                 filter_cfg=dict(filter_empty_gt=True, min_size=8)))
val_dataloader = dict(
    batch_size=2, num_workers=0, persistent_workers=False,
    dataset=dict(data_root=data_root, metainfo=metainfo, pipeline=test_pipeline))
test_dataloader = val_dataloader
val_evaluator = dict(ann_file=data_root + 'annotations/instances_val2017.json')
test_evaluator = val_evaluator

max_iters = 400
# no dynamic intervals: upstream's switch to one last validation sits at iteration 365001
train_cfg = dict(max_iters=max_iters, val_interval=max_iters, dynamic_intervals=None)
param_scheduler = [
    dict(type='LinearLR', start_factor=0.01, by_epoch=False, begin=0, end=20),
    dict(type='MultiStepLR', begin=0, end=max_iters, by_epoch=False,
         milestones=[int(max_iters * 0.9)], gamma=0.1),
]
# trained from scratch: no pretrained early layers to protect, so no layer decay; a larger lr
# than upstream's 1e-4, and clipping at 10: the gradient norm starts near 50, and upstream's
# 0.01 (or 1) cut every early step of a from-scratch model to a fraction (60 iterations on 8
# images: 0.6 segm mAP clipped at 1, 3.8 at 10; 20 queries: 0.6, 10 queries: 5.4)
optim_wrapper = dict(paramwise_cfg=dict(layer_decay_rate=1.0),
                     optimizer=dict(lr=1e-3, weight_decay=0.05),
                     clip_grad=dict(max_norm=10.0))
# a checkpoint every quarter of the run, as the recipes save several: a killed run resumes
# from the last one (docs/en/user_guides/train_test.md#resuming)
default_hooks = dict(logger=dict(interval=10),
                     checkpoint=dict(interval=max_iters // 4, max_keep_ckpts=2))
randomness = dict(seed=0)
