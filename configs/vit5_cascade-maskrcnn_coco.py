# ViT5-B Cascade Mask R-CNN on COCO: the ViT5-B Mask R-CNN recipe (backbone, LSJ, schedule,
# optimizer) with ViTDet's cascade heads (_base_/vitdet_cascade.py).
_base_ = ['./vit5_maskrcnn_coco.py', './_base_/vitdet_cascade.py']
model = dict(type='CascadeRCNN', roi_head={{_base_.cascade_roi_head}},
             train_cfg=dict(rcnn={{_base_.cascade_rcnn_train_cfg}}))
