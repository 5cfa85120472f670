# ViT5-L UperNet: 24 blocks (features from 8, 12, 16, 24), drop path 0.3, layer decay 0.9.
_base_ = ['./vit5_upernet_ade20k.py']
model = dict(
    backbone=dict(arch='large', out_indices=(7, 11, 15, 23), drop_path_rate=0.3,
                  init_cfg=dict(checkpoint={{_base_.pretrained_large}})),
    neck=dict(in_channels=[1024] * 4, out_channels=1024),
    decode_head=dict(in_channels=[1024] * 4),
    auxiliary_head=dict(in_channels=1024))
optim_wrapper = dict(paramwise_cfg=dict(layer_decay_rate=0.9))
