"""Class colours for drawing segmentations: distinct ones where a dataset has none.

mmseg's ``BaseSegDataset`` gives a dataset without a palette random colours (seeded with 42),
and for a 2-class set those are two greens: ``[[102, 179, 92], [14, 106, 71]]``.
"""
import colorsys
from typing import List, Optional, Sequence

import numpy as np

# matplotlib's "tab10": ten colours told apart at a glance, also over a photograph
TAB10 = ((31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40), (148, 103, 189),
         (140, 86, 75), (227, 119, 194), (127, 127, 127), (188, 189, 34), (23, 190, 207))
GOLDEN = 0.618033988749895  # hue step beyond ten classes: each new hue far from the last ones


def distinct_palette(num_classes: int) -> List[List[int]]:
    """``num_classes`` RGB colours: tab10's for up to 10 classes, then hues a golden ratio
    apart at alternating brightness, so that neighbouring labels never look alike.

    Example:
        >>> distinct_palette(2)
        [[31, 119, 180], [255, 127, 14]]
    """
    colours = [list(c) for c in TAB10[:num_classes]]
    for i in range(len(colours), num_classes):
        hue = (i * GOLDEN) % 1.0
        value = (0.95, 0.75, 0.55)[i % 3]
        colours.append([round(255 * c) for c in colorsys.hsv_to_rgb(hue, 0.8, value)])
    return colours


def mmseg_random_palette(num_classes: int) -> List[List[int]]:
    """The palette mmseg's ``BaseSegDataset`` makes up for a dataset that has none."""
    return np.random.RandomState(42).randint(0, 255, size=(num_classes, 3)).tolist()


def usable_palette(num_classes: int, palette: Optional[Sequence]) -> List[List[int]]:
    """``palette`` if it gives each of ``num_classes`` classes its own chosen colour, else
    :func:`distinct_palette`: when it is missing, of another length, repeats a colour, or is
    mmseg's made-up random one (a dataset without a palette)."""
    colours = [list(map(int, c)) for c in palette or ()]
    chosen = (len(colours) == num_classes
              and len({tuple(c) for c in colours}) == num_classes
              and colours != mmseg_random_palette(num_classes))
    return colours if chosen else distinct_palette(num_classes)
