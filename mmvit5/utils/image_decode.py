"""Every image and mask of a dataset decoded once before training, as its pipeline will load
it and stricter: ``tools/finetune.py`` refuses a file cut short by an interrupted copy before
the run, where mmcv would stop it at the iteration that draws the file ("failed to load
image"), or train on it without a word if the run never draws it.

The pixels are decoded by mmcv with the pipeline's backend and colour type (what
``LoadImageFromFile`` and mmseg's ``LoadAnnotations`` do), and where that backend is not Pillow,
once more by Pillow, which refuses a file whose end is missing: OpenCV builds differ in what
they accept of a truncated JPEG. The decoders release the GIL, so threads share the cores.
"""
import io
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import List, NamedTuple, Optional, Sequence

import mmcv
import numpy as np
from PIL import Image, UnidentifiedImageError

from .image_frames import ImageFrame, LoadRule, read_frame

PROGRESS_FROM = 300  # images; fewer are read before a bar would show


class Decoded(NamedTuple):
    """What one file gave."""
    frame: Optional[ImageFrame]  #: its header's frame (None if it does not decode)
    error: str  #: why it does not decode ('' if it does)
    channels: int = 0  #: of the decoded pixels
    values: Optional[np.ndarray] = None  #: the distinct pixel values, if asked for


def decode_all(paths: Sequence[str], rule: LoadRule, values: bool = False,
               what: str = 'images', workers: Optional[int] = None) -> List[Decoded]:
    """Decode every file of ``paths`` in parallel, as ``rule`` loads it.

    Args:
        paths (Sequence[str]): The files.
        rule (LoadRule): How the pipeline decodes them.
        values (bool): Also return each file's distinct pixel values (masks).
        what (str): What they are, for the progress bar.
        workers (int, optional): Threads; default one a core (16 at most).

    Returns:
        list[Decoded]: One a file, in the order of ``paths``.
    """
    workers = max(1, min(len(paths), workers or os.cpu_count() or 1, 16))
    show = len(paths) >= PROGRESS_FROM
    # a terminal's line is redrawn each percent; a log gets a line each quarter
    every = max(1, len(paths) // (100 if sys.stderr.isatty() else 4))
    decoded = []
    with ThreadPoolExecutor(workers) as pool:
        for result in pool.map(lambda p: _decode(p, rule, values), paths):
            decoded.append(result)
            done = len(decoded)
            if show and (done % every == 0 or done == len(paths)):
                end = '\n' if done == len(paths) or not sys.stderr.isatty() else ''
                print(f'\r[finetune] decoding {what}: {done}/{len(paths)}', end=end,
                      file=sys.stderr, flush=True)
    return decoded


def refuse_undecodable(decoded: Sequence[Decoded], names: Sequence[str], what: str,
                       where: str, fix: str) -> None:
    """Fail naming the first three files that do not decode and their count.

    Args:
        decoded (Sequence[Decoded]): What :func:`decode_all` returned.
        names (Sequence[str]): How to name each file, e.g. ``"'a.jpg' (id 3)"``.
        what (str): 'images' or 'masks'.
        where (str): Where they are listed, e.g. ``"the json 'train.json' lists"``.
        fix (str): What to do beyond copying them again.
    """
    bad = [(name, d.error) for name, d in zip(names, decoded) if d.error]
    if not bad:
        return
    first = '; '.join(f'{name}: {error}' for name, error in bad[:3])
    raise ValueError(f'{len(bad)} of the {len(decoded)} {what} {where} do not decode as '
                     f'training would load them ({first}{"; ..." * (len(bad) > 3)}); a file '
                     'cut short by an interrupted copy or download, or not an image: copy '
                     f'them again from their source, or {fix}')


def _decode(path: str, rule: LoadRule, values: bool) -> Decoded:
    try:
        with open(path, 'rb') as f:
            data = f.read()
        if rule.backend != 'pillow':  # every pixel by Pillow too, a missing end an error
            with Image.open(io.BytesIO(data)) as image:
                image.load()
        pixels = mmcv.imfrombytes(data, flag=rule.color_type, backend=rule.backend)
        if pixels is None:  # what LoadImageFromFile asserts on ("failed to load image")
            return Decoded(None, f'mmcv ({rule.backend}) cannot decode it')
        frame = read_frame(path, rule)
    except UnidentifiedImageError:
        return Decoded(None, 'not an image format Pillow knows')
    except Exception as e:  # whatever fails in a decoder is the file's
        return Decoded(None, ' '.join(str(e).split())[:120] or type(e).__name__)
    return Decoded(frame, '', 1 if pixels.ndim == 2 else pixels.shape[2],
                   _distinct(pixels) if values else None)


def _distinct(pixels: np.ndarray) -> np.ndarray:
    """The sorted distinct values; counted per value for 8 and 16 bits (half the time of
    np.unique on a 640x480 mask)."""
    if pixels.dtype in (np.uint8, np.uint16):
        return np.flatnonzero(np.bincount(pixels.ravel())).astype(pixels.dtype)
    return np.unique(pixels)
