"""Export to ONNX through ``torch.export`` and check the graph against PyTorch in ONNX Runtime.

Under ``torch.export`` ViT-5's RoPE takes its real-arithmetic branch, so the graph holds no
complex tensor (:func:`complex_values` checks the file). A fixed-size graph holds ViT-5's RoPE
tables and resized position embeddings as constants (:func:`~.build.fix_position_tables`);
with ``dynamic=True`` batch, height and width are symbolic and the tables are computed in the
graph from them. Every node must be in the default ONNX domain (:func:`graph_ops`): no
custom-op library. The whole model (:func:`~mmvit5.deploy.build_part`) pads the image in the
graph where its config pads it, so every side gives PyTorch's numbers; a bare backbone is
exported for multiples of ``size_divisor`` only.
"""
import copy
import os
from collections import Counter
from typing import Dict, List, Optional, Sequence

import numpy as np
import torch
import torch.nn as nn

from .build import fix_position_tables
from .wrappers import example_input, exportable, output_names


def export_onnx(model: nn.Module, example: torch.Tensor, path: str, dynamic: bool = False,
                size_divisor: int = 32, max_side: int = 4096, opset: int = 18,
                optimize: bool = True, static_rope: Optional[bool] = None,
                dynamic_batch: bool = False) -> None:
    """Write ``model`` (one image tensor in) as an ONNX file, float32, eval mode.

    The input is named ``image``; the outputs are named by
    :func:`~mmvit5.deploy.wrappers.output_names` (``logits``, ``depth``, ``boxes`` ...;
    ``p2`` .. ``p6``; ``block<i>``). A module with a ``metadata`` dict (the whole model,
    :class:`~mmvit5.deploy.build.Deployed`) has it written into the file's
    ``metadata_props``.

    Args:
        model (nn.Module): E.g. :func:`~mmvit5.deploy.build_part`'s module. A copy is
            exported, made exportable (:func:`~mmvit5.deploy.exportable`).
        example (Tensor): (B, 3, H, W) example input; B and H x W are fixed in a static
            graph.
        path (str): Output ``.onnx`` file.
        dynamic (bool): Symbolic batch (the example's for a model whose ``batch_fixed`` is
            true: two-stage detectors), H and W (up to ``max_side``): any side for a model
            that pads its input itself or needs no padding (the whole model; a backbone
            part with a ``size_divisor``), else multiples of ``size_divisor`` from twice it;
            False fixes the example's shape.
        size_divisor (int): What the dynamic sides of a part that does not pad are multiples
            of: the coarsest stride of its maps (:func:`~mmvit5.deploy.coarsest_stride`; 16
            for a bare ViT-5). Such a graph does not check it: feed multiples.
        max_side (int): Largest dynamic side.
        opset (int): ONNX opset (16 or later: ``GridSample``, ``RoiAlign`` with
            ``half_pixel``). Defaults to 18.
        optimize (bool): Run the exporter's graph optimiser (constant folding, fusions; ONNX
            Runtime also optimises at load, other runtimes may not). Defaults to True.
        static_rope (bool, optional): Fold ViT5's RoPE tables and resized position
            embeddings into constants for the example's size (``ViT5.fix_tables``). None:
            on for static graphs; True with ``dynamic`` is refused.
        dynamic_batch (bool): With fixed sides, a symbolic batch (refused where the model's
            batch is fixed).

    Raises:
        ValueError: On ``static_rope`` with ``dynamic``, ``dynamic_batch`` for a model
            whose batch is fixed, an example side (dynamic, a part
            that does not pad) that is not a multiple of ``size_divisor`` or is below twice
            it (:func:`check_sides`), or a graph that holds complex values or operators
            outside the default ONNX domain.
    """
    if static_rope and dynamic:
        raise ValueError('static_rope folds the RoPE tables of one input size into the graph; '
                         'a dynamic graph computes them from its symbolic size: drop one of '
                         'the two (--static-rope, --dynamic)')
    batch_fixed = getattr(model, 'batch_fixed', False)
    if dynamic_batch and batch_fixed:
        raise ValueError(f'{type(model).__name__} runs NMS image by image: its graph takes the '
                         f'example\'s batch ({example.shape[0]}) only; drop --dynamic-batch '
                         'and export with --batch N')
    # the exported copy is rewritten (exportable, fixed tables); ``model`` stays the reference
    model = copy.deepcopy(model).eval()
    exportable(model)
    if static_rope or (static_rope is None and not dynamic):
        fix_position_tables(model, example)
    dynamic_shapes = None
    if dynamic and (hasattr(model, 'preprocess') or getattr(model, 'size_divisor', None)):
        # sides that are not multiples are padded in the graph: its shape arithmetic (ceil
        # division) is beyond what torch.export proves for a named Dim, DYNAMIC accepts it
        side = torch.export.Dim.DYNAMIC(min=2, max=max_side)
        dynamic_shapes = ({2: side, 3: side} if batch_fixed else
                          {0: torch.export.Dim.DYNAMIC, 2: side, 3: side}, )
    elif dynamic:
        check_sides(example.shape[2:], size_divisor)
        units = max_side // size_divisor
        dynamic_shapes = ({0: torch.export.Dim.DYNAMIC,
                           2: size_divisor * torch.export.Dim('h', min=2, max=units),
                           3: size_divisor * torch.export.Dim('w', min=2, max=units)}, )
    elif dynamic_batch:
        dynamic_shapes = ({0: torch.export.Dim.DYNAMIC}, )
    if dynamic_shapes and 0 in dynamic_shapes[0] and example.shape[0] == 1:
        example = torch.cat((example, example))  # torch.export fixes a batch of 1
    names = output_names(model, example)
    with torch.no_grad():
        program = torch.export.export(model, (example, ), dynamic_shapes=dynamic_shapes,
                                      strict=False)
    with torch.no_grad():
        onnx_program = torch.onnx.export(program, (example, ), dynamo=True, opset_version=opset,
                                         input_names=['image'], output_names=names,
                                         optimize=optimize, verbose=False)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    onnx_program.save(path)
    metadata = getattr(model, 'metadata', None)
    if metadata:
        write_metadata(path, metadata)
    found = complex_values(path)
    if found:
        raise ValueError(f'{path} holds complex values {found[:5]}: ONNX Runtime has no complex '
                         'kernels; RoPE must take its real-arithmetic branch under export')
    foreign = sorted({f'{domain}::{op}' for domain, op in graph_ops(path) if domain})
    if foreign:
        raise ValueError(f'{path} holds operators outside the default ONNX domain {foreign}: '
                         'a runtime would need a custom-op library for them')


def write_metadata(path: str, metadata: Dict[str, str]) -> None:
    """Set ``metadata`` (string values) as the ``metadata_props`` of the ONNX file ``path``."""
    import onnx
    model = onnx.load(path, load_external_data=False)
    del model.metadata_props[:]
    for key, value in metadata.items():
        model.metadata_props.add(key=key, value=value)
    onnx.save(model, path)


def graph_ops(path: str) -> Counter:
    """``Counter`` of (domain, op type) over every node of the ONNX file ``path``, function
    bodies and subgraphs included; the default domain is ``''``."""
    import onnx
    model = onnx.load(path, load_external_data=False)
    found = Counter()

    def visit(nodes) -> None:
        for node in nodes:
            found[('' if node.domain == 'ai.onnx' else node.domain, node.op_type)] += 1
            for attribute in node.attribute:
                for subgraph in (attribute.g, *attribute.graphs):
                    visit(subgraph.node)

    visit(model.graph.node)
    for function in model.functions:
        visit(function.node)
    return found


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


def ort_session(path: str, threads: Optional[int] = None, arena: bool = True,
                spinning: bool = False):
    """An ONNX Runtime CPU session of ``path`` (CUDA first when onnxruntime-gpu has it) with
    full graph optimisation and ``threads`` intra-op threads (default: torch's). ``arena=False``
    returns a run's CPU buffers when it ends, for many sessions side by side. ``spinning``
    keeps ONNX Runtime's idle threads busy-waiting after a run (its default, quicker for runs
    back to back); off here, where its runs alternate with PyTorch's, whose threads the
    spinning ones would otherwise take the cores from (the toy models timed 10-30x slower in
    PyTorch right after ONNX Runtime on 2 cores)."""
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.enable_cpu_mem_arena = arena
    if not spinning:
        options.add_session_config_entry('session.intra_op.allow_spinning', '0')
    options.intra_op_num_threads = threads or torch.get_num_threads()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3  # constant-folding notes on every load are not problems
    providers = [p for p in ('CUDAExecutionProvider', 'CPUExecutionProvider')
                 if p in ort.get_available_providers()]
    return ort.InferenceSession(path, options, providers=providers)


def run_session(session, x: torch.Tensor) -> List[np.ndarray]:
    """Outputs of ``session`` for the one image input ``x``."""
    return session.run(None, {session.get_inputs()[0].name: x.detach().cpu().numpy()})


def output_errors(names: Sequence[str], reference, outputs: Sequence[np.ndarray],
                  tie: float = 1e-4) -> Dict[str, float]:
    """Largest ``|ONNX Runtime - PyTorch|`` per output name.

    Instance outputs (``scores`` among the names) are rows sorted by score, and rows of
    scores within ``tie`` of a neighbour may come in either order: ``scores`` is compared
    sorted, the other outputs on the rows whose score stands apart (a random-weight model
    ties many).

    Raises:
        ValueError: When the two give different numbers or shapes of outputs.
    """
    reference = [reference] if isinstance(reference, torch.Tensor) else list(reference)
    reference = [t.detach().float().cpu().numpy() for t in reference]
    shapes = [r.shape for r in reference], [o.shape for o in outputs]
    if shapes[0] != shapes[1]:
        raise ValueError(f'ONNX Runtime output shapes {shapes[1]} differ from PyTorch\'s '
                         f'{shapes[0]}')
    found = dict(zip(names, reference)), dict(zip(names, outputs))
    rows = None
    if 'scores' in names:
        scores = found[0]['scores']
        gaps = np.abs(np.diff(scores, axis=1)) > tie
        apart = np.ones_like(scores, dtype=bool)
        apart[:, 1:] &= gaps
        apart[:, :-1] &= gaps
        rows = apart
    errors = {}
    for name in names:
        ref, out = found[0][name], found[1][name].astype(np.float32)
        if rows is not None and name != 'scores':
            ref, out = ref[rows], out[rows]
        errors[name] = float(np.abs(out - ref).max()) if ref.size else 0.0
    return errors


def max_abs_error(model: nn.Module, session, x: torch.Tensor) -> float:
    """Largest ``|ONNX Runtime - PyTorch|`` over all outputs of ``model`` and ``session`` on
    ``x`` (:func:`output_errors`)."""
    with torch.no_grad():
        reference = model(x)
    names = [o.name for o in session.get_outputs()]
    try:
        errors = output_errors(names, reference, run_session(session, x))
    except ValueError as e:
        raise ValueError(f'{e} at input {tuple(x.shape)}') from None
    return max(errors.values())


def errors_at(model: nn.Module, session, shapes: Sequence[Sequence[int]],
              part: str) -> Dict[str, float]:
    """``{'HxW': max abs error}`` (``'HxW batch B'`` for B > 1) on one :func:`example_input`
    of each (B, 3, H, W) shape."""
    return {f'{s[2]}x{s[3]}' + (f' batch {s[0]}' if s[0] > 1 else ''):
            max_abs_error(model, session, example_input(s, part)) for s in shapes}
