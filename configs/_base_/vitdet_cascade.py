# ViTDet's Cascade Mask R-CNN heads (detectron2 cascade_mask_rcnn_vitdet_*_100ep: ViT-B 54.0
# box / 46.7 mask AP) in mmdet's terms: three stages (IoU 0.5, 0.6, 0.7), each a class-agnostic
# 4conv1fc box head with LN. The Cascade configs read these variables into `model`
# (a base file that set `model` itself would clash with the Mask R-CNN base).
cascade_norm_cfg = dict(type='LN2d', eps=1e-6)
cascade_roi_head = dict(
    _delete_=True,
    type='CascadeRoIHead',
    num_stages=3,
    stage_loss_weights=[1, 0.5, 0.25],
    bbox_roi_extractor=dict(
        type='SingleRoIExtractor',
        roi_layer=dict(type='RoIAlign', output_size=7, sampling_ratio=0),
        out_channels=256,
        featmap_strides=[4, 8, 16, 32]),
    bbox_head=[
        dict(type='Shared4Conv1FCBBoxHead', in_channels=256, conv_out_channels=256,
             fc_out_channels=1024, roi_feat_size=7, num_classes=80, norm_cfg=cascade_norm_cfg,
             bbox_coder=dict(type='DeltaXYWHBBoxCoder', target_means=[0.0] * 4,
                             target_stds=stds),
             reg_class_agnostic=True,
             loss_cls=dict(type='CrossEntropyLoss', use_sigmoid=False, loss_weight=1.0),
             loss_bbox=dict(type='SmoothL1Loss', beta=1.0, loss_weight=1.0))
        for stds in ([0.1, 0.1, 0.2, 0.2], [0.05, 0.05, 0.1, 0.1],
                     [0.033, 0.033, 0.067, 0.067])
    ],
    mask_roi_extractor=dict(
        type='SingleRoIExtractor',
        roi_layer=dict(type='RoIAlign', output_size=14, sampling_ratio=0),
        out_channels=256,
        featmap_strides=[4, 8, 16, 32]),
    # one dict: mmdet builds a mask head per stage and averages them at test time, where
    # detectron2 runs one mask head on the last stage's boxes (mmdet's cascade has no option)
    mask_head=dict(type='FCNMaskHead', num_convs=4, in_channels=256, conv_out_channels=256,
                   num_classes=80, norm_cfg=cascade_norm_cfg,
                   loss_mask=dict(type='CrossEntropyLoss', use_mask=True, loss_weight=1.0)))
cascade_rcnn_train_cfg = [
    dict(assigner=dict(type='MaxIoUAssigner', pos_iou_thr=iou, neg_iou_thr=iou, min_pos_iou=iou,
                       match_low_quality=False, ignore_iof_thr=-1),
         sampler=dict(type='RandomSampler', num=512, pos_fraction=0.25, neg_pos_ub=-1,
                      add_gt_as_proposals=True),
         mask_size=28, pos_weight=-1, debug=False)
    for iou in (0.5, 0.6, 0.7)
]
