# ViT5-B Mask2Former, COCO panoptic: mmdet's mask2former_r50_8xb2-lsj-50e_coco-panoptic (1024
# LSJ, 50 epochs at total batch 16, 8 GPUs x 2) with ViT5-B and ViTDet's simple feature pyramid
# in place of ResNet-50 (_base_/vit5_mask2former_coco.py). Evaluated by CocoPanopticMetric
# (panopticapi) and CocoMetric on the same predictions. Recipe diff:
# docs/en/user_guides/mask2former.md.
#
# Published anchor (literature, not a run of this config): ViT-Adapter-L (BEiTv2-L) +
# Mask2Former, 3x + multi-scale training, COCO val2017: 58.4 PQ (ViT-Adapter, Chen et al., ICLR
# 2023; czczup/ViT-Adapter detection/configs/mask2former/README.md). No plain-ViT-B panoptic
# Mask2Former figure was verified: this config has no B-sized anchor.
_base_ = [
    'mmdet::mask2former/mask2former_r50_8xb2-lsj-50e_coco-panoptic.py',
    './_base_/vit5_mask2former_coco.py',
]
anchor = dict(model='ViT-Adapter-L (BEiTv2-L) + Mask2Former, 3x + MS', metric='PQ', value=58.4,
              source='czczup/ViT-Adapter detection/configs/mask2former/README.md, '
              'COCO val2017 table, PQ column')
model = {{_base_.m2f_model}}
optim_wrapper = {{_base_.m2f_optim_wrapper}}
