"""Deployment: ONNX export of whole ViT-5 models (image to results: semantic logits, depth,
instances, Mask2Former's panoptic queries) and of backbones (+ neck), in standard ONNX
operators, checked in ONNX Runtime (``tools/export_onnx.py``).

:mod:`mmvit5.deploy.panoptic` (the panoptic map from the exported queries) and
:mod:`mmvit5.deploy.slide` (sliding windows around a dynamic dense graph) need numpy only;
they are importable without torch.
"""
from .build import (
    OUTPUTS,
    PARTS,
    Deployed,
    NotExportable,
    build_model,
    build_part,
    check_exportable,
    deploy,
    fix_position_tables,
    model_kind,
)
from .onnx import (
    check_sides,
    complex_values,
    errors_at,
    export_onnx,
    graph_ops,
    max_abs_error,
    ort_session,
)
from .panoptic import panoptic_map
from .preprocess import Preprocess, pad_to_multiple, size_divisor_line
from .slide import slide_windows, windows_from_metadata
from .two_stage import TwoStageInstances
from .wrappers import (
    BackboneWithNeck,
    MatmulAdaptiveAvgPool2d,
    coarsest_stride,
    example_input,
    exportable,
    output_names,
)

__all__ = [
    'OUTPUTS', 'PARTS', 'BackboneWithNeck', 'Deployed', 'MatmulAdaptiveAvgPool2d', 'NotExportable',
    'Preprocess', 'TwoStageInstances', 'build_model', 'build_part', 'check_exportable',
    'check_sides', 'coarsest_stride', 'complex_values', 'deploy', 'errors_at', 'example_input',
    'export_onnx', 'exportable', 'fix_position_tables', 'graph_ops', 'max_abs_error', 'model_kind',
    'ort_session', 'output_names', 'pad_to_multiple', 'panoptic_map', 'size_divisor_line',
    'slide_windows', 'windows_from_metadata'
]
