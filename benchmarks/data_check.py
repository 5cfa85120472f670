"""What tools/finetune.py's own-data check costs per 1,000 images: every image decoded.

    python -m benchmarks.data_check --images 1000 --json results/data_check.json

Writes ``--images`` photo-like JPEGs (``--size`` wide, 3/4 as high) and as many PNG masks into
a temporary folder, reads each once to warm the page cache, then times in alternated rounds
the header read the check did before, the check's decoding of every image as the recipes load
them (mmcv's OpenCV decoder, then Pillow's strict one) on a thread a core and on one thread,
mmcv's decoding alone (what the pipeline pays per image anyway) and the mask check. Prints
seconds per 1,000 files, the median of ``--rounds``; ``--json`` keeps them with the machine,
date and commit, from which ``python -m benchmarks.tables`` writes the table of
docs/en/user_guides/custom_dataset.md.
"""
import argparse
import os
import os.path as osp
import statistics
import sys
import tempfile
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
    """The table of a ``python -m benchmarks.data_check --json`` file."""
    meta = data['meta']
    width, height = meta['size']
    lines = [f'| {meta["images"]} files of {width}x{height}, median of {meta["rounds"]} rounds '
             f'(load average {meta["load"]:.1f}) | s per 1,000 files |', '|---|---|']
    lines += [f'| {name} | {value:.2f} |' for name, value in data['seconds_per_1000'].items()]
    return '\n'.join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(prog='python -m benchmarks.data_check',
                                     description=__doc__.splitlines()[0])
    parser.add_argument('--images', type=int, default=1000)
    parser.add_argument('--size', type=int, default=640, help='image width; height is 3/4')
    parser.add_argument('--rounds', type=int, default=3)
    parser.add_argument('--json', help='write the results here (results/data_check.json)')
    args = parser.parse_args()
    if args.images < 1 or args.rounds < 1 or args.size < 16:
        parser.error('--images and --rounds must be >= 1, --size >= 16')
    from .results import machine, write_results
    with tempfile.TemporaryDirectory() as folder:
        jpegs, masks = write_files(folder, args.images, args.size)
        per_1000 = measure(jpegs, masks, args.rounds)
    meta = dict(machine=machine(), images=args.images, size=[args.size, args.size * 3 // 4],
                rounds=args.rounds, load=round(os.getloadavg()[0], 1))
    print(check_table(dict(meta=meta, seconds_per_1000=per_1000)))
    if args.json:
        write_results(args.json, meta, 'python -m benchmarks.data_check ' +
                      ' '.join(sys.argv[1:]), seconds_per_1000=per_1000)
    return 0


if __name__ == '__main__':
    sys.exit(main())
