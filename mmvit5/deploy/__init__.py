"""Deployment: ONNX export of ViT-5 backbones (+ neck) and UperNet segmentors, checked in
ONNX Runtime (``tools/export_onnx.py``)."""
from .onnx import check_sides, complex_values, errors_at, export_onnx, max_abs_error, ort_session
from .two_stage import TwoStageInstances
from .wrappers import (
    PARTS,
    BackboneWithNeck,
    MatmulAdaptiveAvgPool2d,
    SegmentorLogits,
    build_part,
    coarsest_stride,
    example_input,
    exportable,
    output_names,
    pad_to_multiple,
)

__all__ = [
    'PARTS', 'BackboneWithNeck', 'MatmulAdaptiveAvgPool2d', 'SegmentorLogits', 'TwoStageInstances',
    'build_part', 'check_sides', 'coarsest_stride', 'complex_values', 'errors_at', 'example_input',
    'export_onnx', 'exportable', 'max_abs_error', 'ort_session', 'output_names', 'pad_to_multiple'
]
