"""Export to ONNX through ``torch.export`` and check the graph against PyTorch in ONNX Runtime.

Under ``torch.export`` ViT-5's RoPE takes its real-arithmetic branch, so the graph holds no
complex tensor (:func:`complex_values` checks the file), and with ``dynamic=True`` height and
width are symbolic: the RoPE table and the absolute-embedding resize are computed in the graph
from them. The modules of :func:`~mmvit5.deploy.build_part` pad the image to a multiple of
their ``size_divisor`` in the graph, so every side gives PyTorch's numbers; a bare module is
exported for multiples of ``size_divisor`` only.
"""
import copy
import os
from typing import Dict, List, Optional, Sequence

import numpy as np
import torch
import torch.nn as nn

from .wrappers import example_input, exportable, output_names


def export_onnx(model: nn.Module, example: torch.Tensor, path: str, dynamic: bool = False,
                size_divisor: int = 32, max_side: int = 4096, opset: int = 18,
                optimize: bool = True) -> None:
    """Write ``model`` (one image tensor in) as an ONNX file, float32, eval mode.

    The input is named ``image``; the outputs are named by
    :func:`~mmvit5.deploy.wrappers.output_names` (``logits``; ``p2`` .. ``p6``; ``block<i>``).

    Args:
        model (nn.Module): E.g. :func:`~mmvit5.deploy.wrappers.build_part`'s module. A copy
            is exported, its adaptive pooling swapped (:func:`~mmvit5.deploy.exportable`).
        example (Tensor): (B, 3, H, W) example input; B is fixed in the graph.
        path (str): Output ``.onnx`` file.
        dynamic (bool): Symbolic H and W up to ``max_side``: any side for a model that pads
            its input (a ``size_divisor`` attribute that is not None, as
            :func:`~mmvit5.deploy.build_part`'s modules have), else multiples of
            ``size_divisor`` from twice it; False fixes the example's H x W.
        size_divisor (int): What the dynamic sides of a model that does not pad are multiples
            of: the coarsest stride of its maps (:func:`~mmvit5.deploy.coarsest_stride`; 16
            for a bare ViT-5). Such a graph does not check it: feed multiples.
        max_side (int): Largest dynamic side.
        opset (int): ONNX opset. Defaults to 18.
        optimize (bool): Run the exporter's graph optimiser (constant folding, fusions; ONNX
            Runtime also optimises at load, other runtimes may not). Defaults to True.

    Raises:
        ValueError: On an example side (dynamic) that is not a multiple of ``size_divisor`` or
            is below twice it (:func:`check_sides`), or a graph that holds complex values.
    """
    # the exported copy pools with matmuls (exportable); ``model`` stays the reference
    model = copy.deepcopy(model).eval()
    exportable(model)
    dynamic_shapes = None
    if dynamic and getattr(model, 'size_divisor', None):
        # sides that are not multiples are padded in the graph: its shape arithmetic (ceil
        # division) is beyond what torch.export proves for a named Dim, DYNAMIC accepts it
        side = torch.export.Dim.DYNAMIC(min=2, max=max_side)
        dynamic_shapes = ({2: side, 3: side}, )
    elif dynamic:
        check_sides(example.shape[2:], size_divisor)
        units = max_side // size_divisor
        dynamic_shapes = ({2: size_divisor * torch.export.Dim('h', min=2, max=units),
                           3: size_divisor * torch.export.Dim('w', min=2, max=units)}, )
    names = output_names(model, example)
    with torch.no_grad():
        program = torch.export.export(model, (example, ), dynamic_shapes=dynamic_shapes,
                                      strict=False)
        onnx_program = torch.onnx.export(program, (example, ), dynamo=True, opset_version=opset,
                                         input_names=['image'], output_names=names,
                                         optimize=optimize, verbose=False)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    onnx_program.save(path)
    found = complex_values(path)
    if found:
        raise ValueError(f'{path} holds complex values {found[:5]}: ONNX Runtime has no complex '
                         'kernels; RoPE must take its real-arithmetic branch under export')


def check_sides(sides: Sequence[int], size_divisor: int) -> None:
    """Raise unless every side is a multiple of ``size_divisor`` and at least two of them
    (torch.export assumes symbolic sizes are not 1: a side of one unit would make the
    stride-``size_divisor`` map 1 wide, outside what the graph was traced for)."""
    sides = tuple(int(s) for s in sides)
    fixed = tuple(max(-(-s // size_divisor), 2) * size_divisor for s in sides)
    if sides != fixed:
        raise ValueError(f'input sides {sides} must be multiples of {size_divisor} and at '
                         f'least {2 * size_divisor} for the dynamic graph; pad or resize to '
                         f'e.g. {fixed}')


def complex_values(path: str) -> List[str]:
    """Names of the graph's inputs, outputs, intermediate values and initializers (subgraphs
    included) whose element type is complex, after ONNX shape inference."""
    import onnx
    complex_types = {onnx.TensorProto.COMPLEX64, onnx.TensorProto.COMPLEX128}
    model = onnx.shape_inference.infer_shapes(onnx.load(path, load_external_data=False))
    found = []

    def visit(graph) -> None:
        for value in (*graph.input, *graph.output, *graph.value_info):
            if value.type.tensor_type.elem_type in complex_types:
                found.append(value.name)
        found.extend(t.name for t in graph.initializer if t.data_type in complex_types)
        for node in graph.node:
            for attribute in node.attribute:
                if attribute.t.data_type in complex_types:
                    found.append(f'{node.name}.{attribute.name}')
                for subgraph in (attribute.g, *attribute.graphs):
                    visit(subgraph)

    visit(model.graph)
    return found


def ort_session(path: str, threads: Optional[int] = None, arena: bool = True):
    """An ONNX Runtime CPU session of ``path`` (CUDA first when onnxruntime-gpu has it) with
    full graph optimisation and ``threads`` intra-op threads (default: torch's). ``arena=False``
    returns a run's CPU buffers when it ends, for many sessions side by side."""
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.enable_cpu_mem_arena = arena
    options.intra_op_num_threads = threads or torch.get_num_threads()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3  # constant-folding notes on every load are not problems
    providers = [p for p in ('CUDAExecutionProvider', 'CPUExecutionProvider')
                 if p in ort.get_available_providers()]
    return ort.InferenceSession(path, options, providers=providers)


def run_session(session, x: torch.Tensor) -> List[np.ndarray]:
    """Outputs of ``session`` for the one image input ``x``."""
    return session.run(None, {session.get_inputs()[0].name: x.detach().cpu().numpy()})


def max_abs_error(model: nn.Module, session, x: torch.Tensor) -> float:
    """Largest ``|ONNX Runtime - PyTorch|`` over all outputs of ``model`` and ``session`` on ``x``.

    Raises:
        ValueError: When the two give different numbers or shapes of outputs.
    """
    with torch.no_grad():
        reference = model(x)
    reference = [reference] if isinstance(reference, torch.Tensor) else list(reference)
    outputs = run_session(session, x)
    shapes = [tuple(t.shape) for t in reference], [tuple(o.shape) for o in outputs]
    if shapes[0] != shapes[1]:
        raise ValueError(f'ONNX Runtime output shapes {shapes[1]} differ from PyTorch\'s '
                         f'{shapes[0]} at input {tuple(x.shape)}')
    return max(float(np.abs(o - t.float().cpu().numpy()).max())
               for o, t in zip(outputs, reference))


def errors_at(model: nn.Module, session, shapes: Sequence[Sequence[int]],
              part: str) -> Dict[str, float]:
    """``{'HxW': max abs error}`` on one :func:`example_input` of each (B, 3, H, W) shape."""
    return {f'{s[2]}x{s[3]}': max_abs_error(model, session, example_input(s, part))
            for s in shapes}
