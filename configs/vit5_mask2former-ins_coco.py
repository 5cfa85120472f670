# ViT5-B Mask2Former, COCO instance segmentation: mmdet's mask2former_r50_8xb2-lsj-50e_coco
# (1024 LSJ, 50 epochs at total batch 16) with ViT5-B and ViTDet's simple feature pyramid in
# place of ResNet-50 (_base_/vit5_mask2former_coco.py). Recipe diff:
# docs/en/user_guides/mask2former.md.
#
# Published anchor (literature, not a run of this config): the panoptic ViT-Adapter-L
# (BEiTv2-L) + Mask2Former of ViT-Adapter (ICLR 2023), evaluated as instances on COCO val2017:
# 48.9 mask AP / 52.9 box AP (czczup/ViT-Adapter detection/configs/mask2former/README.md); a
# model trained for panoptic, not instance, segmentation. No plain-ViT-B instance Mask2Former
# figure was verified: this config has no B-sized anchor.
_base_ = [
    'mmdet::mask2former/mask2former_r50_8xb2-lsj-50e_coco.py',
    './_base_/vit5_mask2former_coco.py',
]
anchor = dict(model='ViT-Adapter-L (BEiTv2-L) + Mask2Former (panoptic-trained), 3x + MS',
              metric='mask AP', value=48.9,
              source='czczup/ViT-Adapter detection/configs/mask2former/README.md, '
              'COCO val2017 table, mask AP column')
model = {{_base_.m2f_model}}
optim_wrapper = {{_base_.m2f_optim_wrapper}}
# mmdet's CocoMetric evaluated by faster-coco-eval where it imports: pycocotools' numbers, bit
# for bit, several times faster (test_evaluator.coco_backend='pycocotools' runs mmdet's own)
val_evaluator = dict(type='FasterCocoMetric')
test_evaluator = val_evaluator
