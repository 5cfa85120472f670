# ViT5-S Mask R-CNN: the base recipe with the small backbone (ViTDet uses decay 0.7 for S/B).
_base_ = ['./vit5_maskrcnn_coco.py']
model = dict(backbone=dict(arch='small', init_cfg=dict(checkpoint={{_base_.pretrained_small}})),
             neck=dict(in_channels=384))
