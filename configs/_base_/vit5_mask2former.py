# The ViT5 parts every Mask2Former recipe shares (ADE20K semantic, COCO instance and panoptic),
# as variables the recipes read into `model` and `optim_wrapper` (a base that set those itself
# would clash with mmdet's / mmseg's Mask2Former configs). Recipe diff against the published
# anchors: docs/en/user_guides/mask2former.md.
# (through ViTDet's backbone, which the COCO pair reads: two bases that both inherit the
# checkpoint paths would clash)
_base_ = ['./vit5_vitdet.py', './vit5_resume.py']
# ResNet-50 gives the pixel decoder 4 maps at strides 4-32; ViTDet's simple feature pyramid
# makes them from the ViT's one stride-16 map (in_channels: ViT5-B's width; -l configs: 1024)
m2f_neck = dict(
    type='SimpleFeaturePyramid',
    in_channels=768,
    out_channels=256,
    scale_factors=(4.0, 2.0, 1.0, 0.5),
    num_outs=4,
    norm_cfg=dict(type='LN2d', eps=1e-6))
# upstream: backbone lr x 0.1 (ResNet), query / level embeddings without weight decay; ours:
# layer-wise lr decay over the ViT (0.65 as the ADE20K UperNet recipe; the COCO base sets
# ViTDet's 0.7), and the constructor decays every matrix outside the backbone. Upstream's
# AdamW 1e-4 / wd 0.05 and its gradient clipping (0.01) are kept.
m2f_optim_wrapper = dict(
    _delete_=True,
    type='OptimWrapper',
    constructor='ViT5LayerDecayOptimizerConstructor',
    paramwise_cfg=dict(layer_decay_rate=0.65),
    optimizer=dict(type='AdamW', lr=1e-4, betas=(0.9, 0.999), weight_decay=0.05, eps=1e-8),
    clip_grad=dict(max_norm=0.01, norm_type=2))
