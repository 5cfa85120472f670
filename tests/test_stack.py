"""Stack smoke test: unmodified upstream configs (ResNet-50 Mask R-CNN, UperNet), shrunk by
overrides, train and evaluate through the real runners, CocoMetric and IoUMetric.

A broken mmcv install, mmdet/mmseg/mmengine incompatibility or metric dependency shows up here,
independent of anything ViT-5 adds. The configs never name mmvit5 and run through mmdet's and
mmseg's own packaged tools/train.py: RoIAlign and NMS come from the start-up hook alone.
"""
import importlib
import os.path as osp
import re
import sys

import pytest

from conftest import run_tool

pytestmark = pytest.mark.slow  # trains with the upstream tools in a subprocess

MASK_RCNN = """_base_ = ['mmdet::mask_rcnn/mask-rcnn_r50_fpn_1x_coco.py']
data_root = 'data/toy/coco/'
metainfo = dict(classes=('rectangle', 'ellipse', 'triangle'))
model = dict(backbone=dict(depth=18, init_cfg=None), neck=dict(in_channels=[64, 128, 256, 512]),
             roi_head=dict(bbox_head=dict(num_classes=3), mask_head=dict(num_classes=3)),
             # at most 16 positive RoIs an image in training, 20 detections in testing (not
             # 128 and 100): the mask head's four 256-wide convs over each were most of the time
             train_cfg=dict(rcnn=dict(sampler=dict(num=64))),
             test_cfg=dict(rpn=dict(nms_pre=200, max_per_img=200), rcnn=dict(max_per_img=20)))
train_pipeline = [dict(type='LoadImageFromFile'),
                  dict(type='LoadAnnotations', with_bbox=True, with_mask=True),
                  dict(type='Resize', scale=(256, 160), keep_ratio=True),
                  dict(type='RandomFlip', prob=0.5), dict(type='PackDetInputs')]
test_pipeline = [dict(type='LoadImageFromFile'),
                 dict(type='Resize', scale=(256, 160), keep_ratio=True),
                 dict(type='LoadAnnotations', with_bbox=True, with_mask=True),
                 dict(type='PackDetInputs', meta_keys=('img_id', 'img_path', 'ori_shape',
                                                       'img_shape', 'scale_factor'))]
train_dataloader = dict(batch_size=2, num_workers=0, persistent_workers=False, dataset=dict(
    data_root=data_root, metainfo=metainfo, filter_cfg=dict(min_size=8), pipeline=train_pipeline))
val_dataloader = dict(batch_size=2, num_workers=0, persistent_workers=False, dataset=dict(
    data_root=data_root, metainfo=metainfo, pipeline=test_pipeline))
test_dataloader = val_dataloader
val_evaluator = dict(ann_file=data_root + 'annotations/instances_val2017.json')
test_evaluator = val_evaluator
train_cfg = dict(max_epochs=1, val_interval=1)
"""

UPERNET = """_base_ = ['mmseg::upernet/upernet_r50_4xb4-160k_ade20k-512x512.py']
norm_cfg = dict(type='BN', requires_grad=True)
crop_size = (128, 128)
model = dict(pretrained=None, data_preprocessor=dict(size=crop_size),
             backbone=dict(depth=18, norm_cfg=norm_cfg),
             decode_head=dict(in_channels=[64, 128, 256, 512], channels=64, norm_cfg=norm_cfg),
             auxiliary_head=dict(in_channels=256, channels=32, norm_cfg=norm_cfg))
data_root = 'data/toy/ade/ADEChallengeData2016'
# the base's pipelines at a quarter of its sizes (the toy images are 160 px)
train_pipeline = [dict(type='LoadImageFromFile'),
                  dict(type='LoadAnnotations', reduce_zero_label=True),
                  dict(type='RandomResize', scale=(512, 128), ratio_range=(0.5, 2.0),
                       keep_ratio=True),
                  dict(type='RandomCrop', crop_size=crop_size, cat_max_ratio=0.75),
                  dict(type='RandomFlip', prob=0.5), dict(type='PhotoMetricDistortion'),
                  dict(type='PackSegInputs')]
test_pipeline = [dict(type='LoadImageFromFile'),
                 dict(type='Resize', scale=(512, 128), keep_ratio=True),
                 dict(type='LoadAnnotations', reduce_zero_label=True),
                 dict(type='PackSegInputs')]
train_dataloader = dict(batch_size=2, num_workers=0, persistent_workers=False,
                        dataset=dict(data_root=data_root, pipeline=train_pipeline))
val_dataloader = dict(batch_size=1, num_workers=0, persistent_workers=False,
                      dataset=dict(data_root=data_root, pipeline=test_pipeline))
test_dataloader = val_dataloader
train_cfg = dict(max_iters=4, val_interval=4)
default_hooks = dict(checkpoint=dict(interval=4))
"""


@pytest.mark.parametrize('package, text, metric', [
    ('mmdet', MASK_RCNN, r'coco/segm_mAP: \d'),
    ('mmseg', UPERNET, r'mIoU: \d')], ids=['mask_rcnn', 'upernet'])
def test_upstream_config_trains_with_upstream_tool(toy_root, tmp_path, package, text, metric):
    cfg = tmp_path / 'upstream.py'
    cfg.write_text(text)
    train = osp.join(osp.dirname(importlib.import_module(package).__file__), '.mim', 'tools',
                     'train.py')
    script = (f'import runpy, sys\n'
              f'sys.argv = [{train!r}, {str(cfg)!r}, "--work-dir", {str(tmp_path / "w")!r}]\n'
              f'runpy.run_path({train!r}, run_name="__main__")\n'
              f'print("mmvit5 imported:", "mmvit5" in sys.modules)\n')
    out = run_tool([sys.executable, '-c', script], cwd=toy_root)
    assert re.search(r'(Iter|Epoch)\(val\).*' + metric, out), out[-3000:]
    assert 'mmvit5 imported: False' in out
