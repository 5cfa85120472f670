from .coco_metric import FasterCocoMetric

__all__ = ['FasterCocoMetric']
