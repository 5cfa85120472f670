# ViT5-L Mask2Former, COCO panoptic: 24 blocks, global attention in 5, 11, 17, 23, drop path
# 0.4 and layer decay 0.8, as ViTDet-L. Published anchor: see ./vit5_mask2former-pan_coco.py.
_base_ = ['./vit5_mask2former-pan_coco.py']
model = {{_base_.m2f_large_model}}
optim_wrapper = dict(paramwise_cfg=dict(layer_decay_rate=0.8))
