# ViT5-L Mask2Former on ADE20K: 24 blocks, drop path 0.3, layer decay 0.9, as the UperNet-L
# recipe. Published anchor (literature): ViT-Adapter-L (BEiT-L) + Mask2Former, 640 crops:
# 58.3 mIoU single-scale (ViT-Adapter, ICLR 2023; see ./vit5_mask2former_ade20k.py).
_base_ = ['./vit5_mask2former_ade20k.py']
model = dict(
    backbone=dict(arch='large', drop_path_rate=0.3,
                  init_cfg=dict(checkpoint={{_base_.pretrained_large}})),
    neck=dict(in_channels=1024))
optim_wrapper = dict(paramwise_cfg=dict(layer_decay_rate=0.9))
