# A CPU-sized ViT-5 Cascade Mask R-CNN on the generated shapes set (tools/make_toy_data.py):
# the toy Mask R-CNN (vit5-tiny_maskrcnn_shapes.py: 4-block, 96-wide ViT-5 from scratch, 256
# input, same schedule) with the three cascade stages of ../vit5_cascade-maskrcnn_coco.py
# (_base_/vitdet_cascade.py: IoU 0.5 / 0.6 / 0.7, class-agnostic boxes, a box and a mask head
# per stage), each stage with the Mask R-CNN toy's heads: a 128-wide 2fc box head and the
# plain 4-conv mask head, 64 channels, no norm, 128 sampled RoIs. The recipe's heads as they
# are (256 channels, a 1024 fc, 512 RoIs, three times) took 33.6 s an iteration on 2 CPU
# cores; ViTDet's LN2d'd 4conv1fc heads at 64 channels learned too late for 200 iterations
# (0.18 bbox mAP, nothing scored before iteration 150; these heads 0.29, at 1.4x the Mask
# R-CNN toy's step: docs/en/get_started/quickstart.md, "The toy models").
_base_ = ['./vit5-tiny_maskrcnn_shapes.py']

num_classes = 3
channels = 64
stage_stds = ([0.1, 0.1, 0.2, 0.2], [0.05, 0.05, 0.1, 0.1], [0.033, 0.033, 0.067, 0.067])

# the Mask R-CNN toy's RoI extractors and mask head serve every stage as they are
model = dict(
    type='CascadeRCNN',
    roi_head=dict(
        type='CascadeRoIHead',
        num_stages=3,
        stage_loss_weights=[1, 0.5, 0.25],
        bbox_head=[
            dict(type='Shared2FCBBoxHead', in_channels=channels, fc_out_channels=128,
                 roi_feat_size=7, num_classes=num_classes, norm_cfg=None,
                 reg_class_agnostic=True,
                 bbox_coder=dict(type='DeltaXYWHBBoxCoder', target_means=[0.0] * 4,
                                 target_stds=stds),
                 loss_cls=dict(type='CrossEntropyLoss', use_sigmoid=False, loss_weight=1.0),
                 loss_bbox=dict(type='SmoothL1Loss', beta=1.0, loss_weight=1.0))
            for stds in stage_stds
        ]),
    train_cfg=dict(rcnn=[
        dict(assigner=dict(type='MaxIoUAssigner', pos_iou_thr=iou, neg_iou_thr=iou,
                           min_pos_iou=iou, match_low_quality=False, ignore_iof_thr=-1),
             sampler=dict(type='RandomSampler', num=128, pos_fraction=0.25, neg_pos_ub=-1,
                          add_gt_as_proposals=True),
             mask_size=28, pos_weight=-1, debug=False)
        for iou in (0.5, 0.6, 0.7)
    ]))
