"""mmseg's sliding-window inference around an exported dense graph, in numpy.

A graph with symbolic sides (``tools/export_onnx.py --dynamic``) runs the config's
``slide`` / ``slide_flip`` test as one window over the whole image (each window's mirror image
included): what mmseg computes for an image no larger than ``crop_size``. For larger images
:func:`slide_windows` runs the graph window by window and averages the overlaps as mmseg's
``slide_inference`` does, and gives the config's ``test_step`` map.

This module imports numpy and nothing else (no torch, no mmvit5): copy it beside ONNX Runtime
code on a machine without them.
"""
import json
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np


def windows(height: int, width: int, crop_size: Sequence[int],
            stride: Sequence[int]) -> List[Tuple[int, int, int, int]]:
    """(y1, y2, x1, x2) of mmseg's sliding windows over a ``height`` x ``width`` image."""
    (h_crop, w_crop), (h_stride, w_stride) = crop_size, stride
    h_grids = max(height - h_crop + h_stride - 1, 0) // h_stride + 1
    w_grids = max(width - w_crop + w_stride - 1, 0) // w_stride + 1
    found = []
    for h_idx in range(h_grids):
        for w_idx in range(w_grids):
            y2 = min(h_idx * h_stride + h_crop, height)
            x2 = min(w_idx * w_stride + w_crop, width)
            found.append((max(y2 - h_crop, 0), y2, max(x2 - w_crop, 0), x2))
    return found


def slide_windows(run: Callable[[np.ndarray], np.ndarray], image: np.ndarray,
                  crop_size: Sequence[int], stride: Sequence[int]) -> np.ndarray:
    """The map of a dense graph over ``image`` as mmseg's sliding inference computes it.

    Args:
        run (callable): The graph on a window: (N, 3, h, w) float32 image to its (N, C, h, w)
            map, e.g. ``lambda x: session.run(None, {'image': x})[0]``.
        image (ndarray): (N, 3, H, W) float32, 0-255, the loader's channel order.
        crop_size, stride (Sequence[int]): (h, w) of the windows and of their steps (the
            config's ``test_cfg``; :func:`windows_from_metadata` reads them from the file).

    Returns:
        ndarray: (N, C, H, W): each window's map summed where it lies, divided by how many
        windows cover each pixel (class logits, or depth in metres).
    """
    height, width = image.shape[-2:]
    out, count = None, np.zeros((height, width), np.float32)
    for y1, y2, x1, x2 in windows(height, width, crop_size, stride):
        found = run(np.ascontiguousarray(image[:, :, y1:y2, x1:x2]))
        if out is None:
            out = np.zeros((*found.shape[:2], height, width), np.float32)
        out[:, :, y1:y2, x1:x2] += found
        count[y1:y2, x1:x2] += 1
    return out / count


def windows_from_metadata(metadata: Dict[str, str]) -> Optional[Dict[str, list]]:
    """``crop_size`` and ``stride`` for :func:`slide_windows` from an exported file's metadata
    (``session.get_modelmeta().custom_metadata_map``): those of a dynamic dense graph whose
    config slides; None for one that runs the whole image (``mode='whole'``, or a fixed-size
    graph, whose windows are in the graph).

    Raises:
        ValueError: For a graph that pads the image (``size_divisor``): mmseg pads the whole
            image, then slides, which windows cut from the unpadded image do not give.
    """
    decoded = {k: json.loads(v) for k, v in metadata.items()
               if k in ('dynamic', 'mode', 'crop_size', 'stride', 'size_divisor')}
    if not decoded.get('dynamic') or decoded.get('mode', 'whole') == 'whole':
        return None
    if decoded.get('size_divisor'):
        raise ValueError(f'the graph pads images to multiples of {decoded["size_divisor"]} '
                         'and its config slides windows over the padded image; export it '
                         'without padding (no size_divisor in the config\'s test_cfg) to '
                         'slide around it')
    return dict(crop_size=decoded['crop_size'], stride=decoded['stride'])
