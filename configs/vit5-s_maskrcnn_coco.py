# ViT5-S Mask R-CNN: the ViTDet-B recipe with the small backbone (ViTDet publishes no S;
# its B settings, decay 0.7 and drop path 0.1, and B's 12-block window layout apply).
_base_ = ['./vit5_maskrcnn_coco.py']
model = dict(backbone=dict(arch='small', init_cfg=dict(checkpoint={{_base_.pretrained_small}})),
             neck=dict(in_channels=384))
