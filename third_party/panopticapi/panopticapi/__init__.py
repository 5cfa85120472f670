"""The part of the COCO panoptic API (github.com/cocodataset/panopticapi) that mmdet imports."""
