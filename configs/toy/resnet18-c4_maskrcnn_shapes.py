# Control for the learning curves (README, "The models learn"): the toy Mask R-CNN with a
# from-scratch ResNet-18's stride-16 C4 map in place of the ViT, through the same simple feature
# pyramid (LN2d as ViTDet; a GN variant for comparison:
#   --cfg-options model.neck.norm_cfg.type=GN model.neck.norm_cfg.num_groups=32)
_base_ = ['./vit5-tiny_maskrcnn_shapes.py']

model = dict(
    backbone=dict(
        _delete_=True, type='ResNet', depth=18, num_stages=3, strides=(1, 2, 2),
        dilations=(1, 1, 1), out_indices=(2, ), frozen_stages=-1, norm_eval=False,
        norm_cfg=dict(type='GN', num_groups=32, requires_grad=True), style='pytorch',
        init_cfg=None),
    neck=dict(in_channels=256))
# the layer-decay constructor needs a ViT5 backbone
optim_wrapper = dict(constructor='DefaultOptimWrapperConstructor',
                     paramwise_cfg=dict(_delete_=True))
