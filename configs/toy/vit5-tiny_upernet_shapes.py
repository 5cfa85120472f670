# A CPU-sized ViT-5 UperNet on the generated shapes set (tools/make_toy_data.py): the ADE20K
# recipe of ../vit5_upernet_ade20k.py with a 4-block, 96-wide ViT-5 from scratch, 128 crops.
# What differs from the recipe besides the sizes, and why (docs/en/get_started/quickstart.md,
# "Why the toy UperNet once stayed at chance"):
# - the set's own 4 classes, named after the shapes (classes.txt), not ADE20K's 150: 146 heads
#   for classes that never occur took most of the loss for the first 100 iterations;
# - the images at their own size (the recipe's scale would halve them: a 20-60 px shape
#   over 1-4 patches of 16 px), 128 crops, and the test in 128-px windows as the recipe's
#   (slide): the interpolated RoPE and position embedding see the grid they were trained on.
_base_ = ['../vit5_upernet_ade20k.py']

data_root = 'data/toy/ade/ADEChallengeData2016'
crop_size = (128, 128)
scale = (256, 256)
norm_cfg = dict(type='BN', requires_grad=True)  # SyncBN needs CUDA when distributed
# classes.txt of the generated set; the palette gives each shape its hue in the images
metainfo = dict(classes=('background', 'rectangle', 'ellipse', 'triangle'),
                palette=[[128, 128, 128], [230, 25, 25], [25, 200, 25], [40, 40, 230]])
num_classes = 4

model = dict(
    data_preprocessor=dict(size=crop_size),
    backbone=dict(arch=dict(_delete_=True, embed_dim=96, depth=4, num_heads=3), img_size=64,
                  out_indices=(0, 1, 2, 3), drop_path_rate=0.0, init_cfg=None),
    neck=dict(in_channels=[96] * 4, out_channels=96),
    decode_head=dict(in_channels=[96] * 4, channels=64, norm_cfg=norm_cfg,
                     num_classes=num_classes),
    auxiliary_head=dict(in_channels=96, channels=32, norm_cfg=norm_cfg,
                        num_classes=num_classes),
    test_cfg=dict(mode='slide', crop_size=crop_size, stride=(85, 85)))

train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations', reduce_zero_label=True),
    dict(type='RandomResize', scale=scale, ratio_range=(0.75, 1.5), keep_ratio=True),
    dict(type='RandomCrop', crop_size=crop_size, cat_max_ratio=0.9),
    dict(type='RandomFlip', prob=0.5),
    dict(type='PackSegInputs'),
]
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='Resize', scale=scale, keep_ratio=True),
    dict(type='LoadAnnotations', reduce_zero_label=True),
    dict(type='PackSegInputs'),
]
shapes = dict(type='BaseSegDataset', data_root=data_root, metainfo=metainfo,
              img_suffix='.jpg', seg_map_suffix='.png', reduce_zero_label=True)
train_dataloader = dict(
    batch_size=4, num_workers=0, persistent_workers=False,
    dataset=dict(**shapes, pipeline=train_pipeline))
val_dataloader = dict(
    batch_size=1, num_workers=0, persistent_workers=False,
    dataset=dict(**shapes, pipeline=test_pipeline))
test_dataloader = val_dataloader

max_iters = 40
train_cfg = dict(max_iters=max_iters, val_interval=max_iters)
param_scheduler = [
    dict(type='LinearLR', start_factor=0.01, by_epoch=False, begin=0, end=20),
    dict(type='PolyLR', power=1.0, eta_min=0.0, by_epoch=False, begin=20, end=max_iters),
]
# trained from scratch: no pretrained early layers to protect, so no layer decay
optim_wrapper = dict(optimizer=dict(lr=1e-3, weight_decay=0.05),
                     paramwise_cfg=dict(layer_decay_rate=1.0),
                     clip_grad=dict(max_norm=1.0))
# a checkpoint every quarter of the run, as the recipes save several: a killed run resumes
# from the last one (docs/en/user_guides/train_test.md#resuming)
default_hooks = dict(logger=dict(interval=10),
                     checkpoint=dict(interval=max_iters // 4, max_keep_ckpts=2),
                     visualization=dict(type='SegVisualizationHook', draw=False))
randomness = dict(seed=0)
