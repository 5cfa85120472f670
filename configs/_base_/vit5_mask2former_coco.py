# The ViT5 parts of the COCO Mask2Former recipes (instance and panoptic), read into `model` and
# `optim_wrapper` by ../vit5_mask2former-{ins,pan}_coco.py (a base that set them itself would
# clash with mmdet's). The backbone is the ViTDet-B one of ../vit5_maskrcnn_coco.py: windowed
# attention (14, global blocks 2, 5, 8, 11), linear drop path 0.1, at mmdet's 1024 LSJ crops.
_base_ = ['./vit5_pretrained.py']
m2f_embed_dim = 768
m2f_backbone = dict(
    _delete_=True,
    type='ViT5',
    arch='base',
    img_size=224,
    out_indices=(-1, ),
    drop_path_rate=0.1,
    drop_path_schedule='linear',
    window_size=14,
    global_attn_indices=(2, 5, 8, 11),
    rope_mode='interpolate',
    init_cfg=dict(type='Pretrained', checkpoint={{_base_.pretrained_base}}))
# strides 4-32, the four levels of ResNet-50 that Mask2Former's pixel decoder reads
m2f_neck = dict(
    type='SimpleFeaturePyramid',
    in_channels=m2f_embed_dim,
    out_channels=256,
    scale_factors=(4.0, 2.0, 1.0, 0.5),
    num_outs=4,
    norm_cfg=dict(type='LN2d', eps=1e-6))
# upstream: backbone lr x 0.1 (ResNet), query/level embeddings without wd; ours: ViTDet-B's
# layer decay 0.7 over the ViT (the constructor decays every matrix outside it); upstream's
# AdamW 1e-4 / wd 0.05 and gradient clipping 0.01 are kept
m2f_optim_wrapper = dict(
    _delete_=True,
    type='OptimWrapper',
    constructor='ViT5LayerDecayOptimizerConstructor',
    paramwise_cfg=dict(layer_decay_rate=0.7),
    optimizer=dict(type='AdamW', lr=1e-4, betas=(0.9, 0.999), weight_decay=0.05, eps=1e-8),
    clip_grad=dict(max_norm=0.01, norm_type=2))
