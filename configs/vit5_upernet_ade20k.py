# ViT5-B UperNet on ADE20K, 512x512 crops, 160k iterations (BEiT/MAE recipe): features from
# blocks 4, 6, 8 and 12 turned into strides 4-32 by the simple pyramid, AdamW with layer-wise
# lr decay 0.65. Total batch size 16 (8 GPUs x 2 images); scale lr linearly for another batch.
# Row by row against mmseg's mae-base_upernet_8xb2-amp-160k_ade20k-512x512 and
# beit-base_upernet_8xb2-160k_ade20k-640x640: README, "Recipe diff".
_base_ = [
    'mmseg::upernet/upernet_r50_4xb4-160k_ade20k-512x512.py',
    './_base_/vit5_pretrained.py',
    './_base_/vit5_resume.py',
]
custom_imports = dict(imports=['mmvit5'], allow_failed_imports=False)

crop_size = (512, 512)
embed_dim = 768
pretrained = {{_base_.pretrained_base}}

model = dict(
    pretrained=None,
    data_preprocessor=dict(size=crop_size),
    backbone=dict(
        _delete_=True,
        type='ViT5',
        arch='base',
        img_size=224,  # the pretraining size; crops are 512x512
        out_indices=(3, 5, 7, 11),
        drop_path_rate=0.1,
        rope_mode='interpolate',
        init_cfg=dict(type='Pretrained', checkpoint=pretrained)),
    # BEiT/MAE: Feature2Pyramid (deconvs / max-pool only); ours adds ViTDet's LN'd 1x1 + 3x3
    # convs per level, the same neck as the detectors
    neck=dict(
        type='SimpleFeaturePyramid',
        in_channels=[embed_dim] * 4,
        out_channels=embed_dim,
        scale_factors=(4.0, 2.0, 1.0, 0.5),
        num_outs=4),
    # BEiT/MAE: 768 decoder channels; 512 is mmseg's UperNet default (ResNet configs)
    decode_head=dict(in_channels=[embed_dim] * 4, channels=512, num_classes=150),
    auxiliary_head=dict(in_channels=embed_dim, in_index=2, num_classes=150),
    test_cfg=dict(mode='slide', crop_size=crop_size, stride=(341, 341)))

train_dataloader = dict(batch_size=2)
optim_wrapper = dict(
    _delete_=True,
    type='OptimWrapper',
    constructor='ViT5LayerDecayOptimizerConstructor',
    paramwise_cfg=dict(layer_decay_rate=0.65),
    optimizer=dict(type='AdamW', lr=1e-4, betas=(0.9, 0.999), weight_decay=0.05))
param_scheduler = [
    dict(type='LinearLR', start_factor=1e-6, by_epoch=False, begin=0, end=1500),
    dict(type='PolyLR', power=1.0, eta_min=0.0, by_epoch=False, begin=1500, end=160000),
]
auto_scale_lr = dict(enable=False, base_batch_size=16)
