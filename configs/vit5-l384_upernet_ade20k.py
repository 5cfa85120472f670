# ViT5-L UperNet from the 384x384 checkpoint (86.0 IN-1k top-1 against 84.9 at 224): its
# 24x24 position grid is closer to the 32x32 grid of the 512 crops. Recipe unchanged.
_base_ = ['./vit5-l_upernet_ade20k.py']
model = dict(backbone=dict(img_size=384,
                           init_cfg=dict(checkpoint={{_base_.pretrained_large_384}})))
