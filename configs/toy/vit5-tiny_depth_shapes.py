# A CPU-sized ViT-5 depth model on the generated NYU-layout set (tools/make_toy_data.py): the
# NYU recipe of ../vit5_depth_nyu.py with a 4-block, 96-wide ViT-5 from scratch, 128 crops,
# whole-image inference, no NYU eval crop (the images are smaller than it).
_base_ = ['../vit5_depth_nyu.py']

data_root = 'data/toy/nyu'
crop_size = (128, 128)

model = dict(
    data_preprocessor=dict(size=crop_size),
    backbone=dict(arch=dict(_delete_=True, embed_dim=96, depth=4, num_heads=3), img_size=64,
                  out_indices=(0, 1, 2, 3), drop_path_rate=0.0, init_cfg=None),
    decode_head=dict(in_channels=96, post_process_channels=(24, 48, 96, 96), channels=64),
    test_cfg=dict(_delete_=True, mode='whole'))

train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadDepthAnnotation', depth_rescale_factor=1e-3),
    dict(type='RandomFlip', prob=0.5),
    dict(type='RandomCrop', crop_size=crop_size),
    dict(type='PackSegInputs'),
]
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadDepthAnnotation', depth_rescale_factor=1e-3),
    dict(type='PackSegInputs'),
]
train_dataloader = dict(batch_size=4, num_workers=0, persistent_workers=False,
                        dataset=dict(data_root=data_root, pipeline=train_pipeline))
val_dataloader = dict(batch_size=1, num_workers=0, persistent_workers=False,
                      dataset=dict(data_root=data_root, pipeline=test_pipeline))
test_dataloader = val_dataloader
val_evaluator = dict(crop_type=None)
test_evaluator = val_evaluator

max_iters = 40
train_cfg = dict(max_iters=max_iters, val_interval=max_iters)
param_scheduler = [
    dict(type='LinearLR', start_factor=0.01, by_epoch=False, begin=0, end=20),
    dict(type='PolyLR', power=1.0, eta_min=0.0, by_epoch=False, begin=20, end=max_iters),
]
# trained from scratch: no pretrained early layers to protect, so no layer decay
optim_wrapper = dict(optimizer=dict(lr=1e-3, weight_decay=0.05),
                     paramwise_cfg=dict(layer_decay_rate=1.0), clip_grad=dict(max_norm=1.0))
# a checkpoint every quarter of the run, as the recipes save several: a killed run resumes
# from the last one (docs/en/user_guides/train_test.md#resuming)
default_hooks = dict(logger=dict(interval=10),
                     checkpoint=dict(interval=max_iters // 4, save_best=None, max_keep_ckpts=2),
                     visualization=dict(draw=False))
randomness = dict(seed=0)
