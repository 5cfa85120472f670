"""What ``tools/finetune.py``'s own-data check costs per 1,000 files (``tools/
benchmark_data_check.py``): photo-like JPEGs and PNG masks written to a folder, read once to
warm the page cache, then timed in alternated rounds."""
import os.path as osp
import statistics
import time
from typing import Callable, Dict, List, Tuple


def write_files(folder: str, images: int, size: int, seed: int = 0) -> Tuple[list, list]:
    """``images`` JPEGs (quality 90) of ``size`` x 3/4 ``size``, blurred noise with filled
    rectangles (about as compressible as a photo), and as many single-channel PNG masks of 4
    labels."""
    import cv2
    import numpy as np
    rng = np.random.default_rng(seed)
    height = size * 3 // 4
    jpegs, masks = [], []
    for k in range(images):
        picture = cv2.GaussianBlur(rng.integers(0, 256, (height, size, 3), np.uint8), (5, 5), 2)
        mask = np.zeros((height, size), np.uint8)
        for label in range(1, 4):
            x, y = int(rng.integers(0, size // 2)), int(rng.integers(0, height // 2))
            mask[y:y + height // 3, x:x + size // 3] = label
            cv2.rectangle(picture, (x, y), (x + size // 3, y + height // 3),
                          tuple(int(c) for c in rng.integers(0, 256, 3)), -1)
        jpegs.append(osp.join(folder, f'{k:06d}.jpg'))
        masks.append(osp.join(folder, f'{k:06d}.png'))
        cv2.imwrite(jpegs[-1], picture, [cv2.IMWRITE_JPEG_QUALITY, 90])
        cv2.imwrite(masks[-1], mask)
    return jpegs, masks


def ways(jpegs: List[str], masks: List[str]) -> Dict[str, Callable[[], object]]:
    """What is timed: the header read the check did before, the check's decoding of the
    images on every core and on one thread, mmcv's decoding alone (what the pipeline pays per
    image anyway), and the mask check."""
    import mmcv

    from mmvit5.utils.image_decode import decode_all
    from mmvit5.utils.image_frames import AS_STORED, UPRIGHT, read_frame

    def mmcv_decode():
        for path in jpegs:
            with open(path, 'rb') as f:
                mmcv.imfrombytes(f.read())

    return {
        'header only (the check before)': lambda: [read_frame(p) for p in jpegs],
        'images: the check, a thread a core': lambda: decode_all(jpegs, UPRIGHT),
        'images: the check, one thread': lambda: decode_all(jpegs, UPRIGHT, workers=1),
        'images: mmcv decode alone, one thread': mmcv_decode,
        'masks: the check, a thread a core': lambda: decode_all(masks, AS_STORED, values=True),
    }


def measure(jpegs: List[str], masks: List[str], rounds: int) -> Dict[str, float]:
    """Median seconds per 1,000 files of each way, over ``rounds`` alternated rounds."""
    for path in jpegs + masks:  # the page cache: a cold disk's cost is the disk's
        with open(path, 'rb') as f:
            f.read()
    timed = ways(jpegs, masks)
    seconds = {name: [] for name in timed}
    for _ in range(rounds):
        for name, run in timed.items():
            start = time.perf_counter()
            run()
            seconds[name].append(time.perf_counter() - start)
    return {name: round(statistics.median(s) * 1000 / len(jpegs), 3)
            for name, s in seconds.items()}


def check_table(data: dict) -> str:
    """The table of a ``tools/benchmark_data_check.py --json`` file."""
    meta = data['meta']
    width, height = meta['size']
    lines = [f'| {meta["images"]} files of {width}x{height}, median of {meta["rounds"]} rounds '
             f'(load average {meta["load"]:.1f}) | s per 1,000 files |', '|---|---|']
    lines += [f'| {name} | {value:.2f} |' for name, value in data['seconds_per_1000'].items()]
    return '\n'.join(lines)
