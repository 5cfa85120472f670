# ViT5-L depth on NYU-Depth-v2: 24 blocks (features of 6, 12, 18, 24, DPT-Large's hooks), DPT-
# Large's reassemble widths, drop path 0.3, layer decay 0.9.
# Published anchor (literature): DINOv2 ViT-L/14, frozen, linear head on 4 layers: 0.333 RMSE
# (facebookresearch/dinov2 MODEL_CARD.md); DPT-Hybrid fine-tuned: 0.357 (./vit5_depth_nyu.py).
_base_ = ['./vit5_depth_nyu.py']
anchor = dict(model='DINOv2 ViT-L/14 frozen, linear on 4 layers', metric='RMSE', value=0.333,
              source='facebookresearch/dinov2 MODEL_CARD.md, NYU-Depth v2 linear 4 layers')
model = dict(
    backbone=dict(arch='large', out_indices=(5, 11, 17, 23), drop_path_rate=0.3,
                  init_cfg=dict(checkpoint={{_base_.pretrained_large}})),
    decode_head=dict(in_channels=1024, post_process_channels=(256, 512, 1024, 1024)))
optim_wrapper = dict(paramwise_cfg=dict(layer_decay_rate=0.9))
