# ViT5-B Mask2Former on ADE20K (semantic), 512x512 crops, 160k iterations: mmseg's
# mask2former_r50_8xb2-160k_ade20k-512x512 with ViT5-B and ViTDet's simple feature pyramid in
# place of ResNet-50 (strides 4-32 from the last block's stride-16 map), AdamW with layer-wise
# lr decay as the UperNet recipe. Total batch 16 (8 GPUs x 2 images); --auto-scale-lr for
# another. Recipe diff: docs/en/user_guides/mask2former.md.
#
# Published anchor (literature, not a run of this config): ViT-Adapter-L (BEiT-L, IN-22k) +
# Mask2Former, 640 crops, 160k it at batch 16: 58.3 mIoU single-scale, 59.0 multi-scale
# (ViT-Adapter, Chen et al., ICLR 2023; czczup/ViT-Adapter segmentation/configs/ade20k/
# README.md, the Mask2Former BEiT-L row). An adapter on a plain ViT, not a plain ViT; no plain
# ViT-B Mask2Former figure on ADE20K was verified, so this config has no B-sized anchor.
_base_ = [
    'mmseg::mask2former/mask2former_r50_8xb2-160k_ade20k-512x512.py',
    './_base_/vit5_mask2former.py',
]
# the published anchor above (read by nothing at run time; the docs table lists it)
anchor = dict(model='ViT-Adapter-L (BEiT-L) + Mask2Former, 640 crops, 160k', metric='mIoU',
              value=58.3, source='czczup/ViT-Adapter segmentation/configs/ade20k/README.md, '
              'Mask2Former BEiT-L row, mIoU (SS)')
# mmvit5 first: it serves mmcv's deformable attention op (pixel decoder) where mmcv has none
custom_imports = dict(imports=['mmvit5', 'mmdet.models'], allow_failed_imports=False)

crop_size = (512, 512)
pretrained = {{_base_.pretrained_base}}

model = dict(
    data_preprocessor=dict(size=crop_size),
    backbone=dict(
        _delete_=True,
        type='ViT5',
        arch='base',
        img_size=224,  # the pretraining size; crops are 512x512
        out_indices=(-1, ),
        drop_path_rate=0.1,
        rope_mode='interpolate',
        init_cfg=dict(type='Pretrained', checkpoint=pretrained)),
    neck={{_base_.m2f_neck}},
    decode_head=dict(in_channels=[256] * 4))
optim_wrapper = {{_base_.m2f_optim_wrapper}}
# upstream: poly from step 0; a pretrained ViT gets a linear warm-up first, as UperNet's recipe
param_scheduler = [
    dict(type='LinearLR', start_factor=1e-6, by_epoch=False, begin=0, end=1500),
    dict(type='PolyLR', power=0.9, eta_min=0.0, by_epoch=False, begin=1500, end=160000),
]
auto_scale_lr = dict(enable=False, base_batch_size=16)
