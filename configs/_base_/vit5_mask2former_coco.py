# The ViT5 parts of the COCO Mask2Former recipes (instance and panoptic), read into `model` and
# `optim_wrapper` by ../vit5{,-l}_mask2former-{ins,pan}_coco.py. The backbone is the ViTDet one
# of ../vit5_maskrcnn_coco.py (./vit5_vitdet.py): windowed attention (14, global blocks 2, 5,
# 8, 11), linear drop path 0.1, at mmdet's 1024 LSJ crops; `m2f_large_model` makes it ViTDet-L.
_base_ = ['./vit5_mask2former.py']
custom_imports = dict(imports=['mmvit5'], allow_failed_imports=False)

m2f_model = dict(
    backbone={{_base_.vitdet_backbone}},
    neck={{_base_.m2f_neck}},
    panoptic_head=dict(in_channels=[256] * 4))
# ViTDet-L: 24 blocks, global attention in 5, 11, 17, 23, drop path 0.4 (layer decay 0.8: the
# -l configs set it)
m2f_large_model = dict(
    backbone=dict(arch='large', drop_path_rate=0.4, global_attn_indices=(5, 11, 17, 23),
                  init_cfg=dict(checkpoint={{_base_.pretrained_large}})),
    neck=dict(in_channels=1024))
# ViTDet-B's layer decay
m2f_optim_wrapper = dict(paramwise_cfg=dict(layer_decay_rate=0.7))
