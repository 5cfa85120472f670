# ViT5-B ImageNet-1k classifier (mmpretrain) built straight from the released file, backbone
# and head, to check a download by top-1 (84.2 for vit5_base_patch16_224):
#   python tools/test.py configs/vit5_base_in1k.py none --cfg-options \
#       test_dataloader.dataset.data_root=data/imagenet
# (mmpretrain's tools/test.py works too; the checkpoint argument is not needed: init_cfg loads).
_base_ = [
    'mmpretrain::_base_/datasets/imagenet_bs64_swin_224.py',
    'mmpretrain::_base_/default_runtime.py',
    './_base_/vit5_pretrained.py',
]
custom_imports = dict(imports=['mmvit5'], allow_failed_imports=False)
pretrained = {{_base_.pretrained_base}}

model = dict(
    type='ImageClassifier',
    backbone=dict(
        type='ViT5',
        arch='base',
        img_size=224,
        out_type='cls_token',
        init_cfg=dict(type='Pretrained', checkpoint=pretrained)),
    neck=None,
    head=dict(
        type='LinearClsHead',
        num_classes=1000,
        in_channels=768,
        loss=dict(type='CrossEntropyLoss', loss_weight=1.0),
        init_cfg=dict(type='ReleasedPretrained', checkpoint=pretrained, prefix='head.',
                      target_prefix='fc.')))
