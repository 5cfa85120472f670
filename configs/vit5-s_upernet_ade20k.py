# ViT5-S UperNet: the base recipe with the small backbone.
_base_ = ['./vit5_upernet_ade20k.py']
model = dict(
    backbone=dict(arch='small', init_cfg=dict(checkpoint={{_base_.pretrained_small}})),
    neck=dict(in_channels=[384] * 4, out_channels=384),
    decode_head=dict(in_channels=[384] * 4),
    auxiliary_head=dict(in_channels=384))
