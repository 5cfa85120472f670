"""Segment ids as the COCO panoptic PNGs store them: id = R + 256 * G + 256 ** 2 * B."""
import numpy as np


def rgb2id(color):
    """The segment id of an RGB colour, or the id map (H, W) of an RGB image (H, W, 3); uint8
    images are widened to int32 first."""
    if isinstance(color, np.ndarray) and color.ndim == 3:
        if color.dtype == np.uint8:
            color = color.astype(np.int32)
        return color[:, :, 0] + 256 * color[:, :, 1] + 256 * 256 * color[:, :, 2]
    return int(color[0] + 256 * color[1] + 256 * 256 * color[2])


def id2rgb(id_map):
    """The RGB colour of a segment id ([R, G, B]), or the uint8 image (..., 3) of an id map."""
    if isinstance(id_map, np.ndarray):
        rest = id_map.copy()
        rgb = np.zeros((*id_map.shape, 3), dtype=np.uint8)
        for channel in range(3):
            rgb[..., channel] = rest % 256
            rest //= 256
        return rgb
    rgb = []
    for _ in range(3):
        rgb.append(id_map % 256)
        id_map //= 256
    return rgb
