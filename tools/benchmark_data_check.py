#!/usr/bin/env python
"""What tools/finetune.py's own-data check costs per 1,000 images: every image decoded.

    python tools/benchmark_data_check.py --images 1000 --json results/data_check.json

Writes ``--images`` photo-like JPEGs (``--size``, quality 90) and as many PNG masks into a
temporary folder, reads each once to warm the page cache, then times, in alternated rounds,
the header read the check did before (``read_frame``), the check's decoding of every image as
the recipes load them (mmcv's OpenCV decoder, then Pillow's strict one) on all cores and on one
thread, mmcv's decoding alone (what the pipeline pays per image anyway), and the mask check
(Pillow decode and the values of every mask). Prints seconds per 1,000 files, the median of
``--rounds``; ``--json`` keeps them with the machine, date and commit.
"""
import argparse
import os
import os.path as osp
import statistics
import sys
import tempfile
import time

REPO = osp.dirname(osp.dirname(osp.abspath(__file__)))
sys.path.insert(0, REPO)  # benchmarks/ beside tools/


def write_files(folder: str, images: int, size: int, seed: int = 0) -> tuple:
    """``images`` JPEGs of ``size`` x 3/4 ``size`` (blurred noise with edges, about as
    compressible as a photo) and as many single-channel PNG masks of 4 labels."""
    import cv2
    import numpy as np
    rng = np.random.default_rng(seed)
    height = size * 3 // 4
    jpegs, masks = [], []
    for k in range(images):
        picture = cv2.GaussianBlur(rng.integers(0, 256, (height, size, 3), np.uint8), (5, 5), 2)
        mask = np.zeros((height, size), np.uint8)
        for label in range(1, 4):
            x, y = rng.integers(0, size // 2), rng.integers(0, height // 2)
            mask[y:y + height // 3, x:x + size // 3] = label
            cv2.rectangle(picture, (int(x), int(y)), (int(x) + size // 3, int(y) + height // 3),
                          tuple(int(c) for c in rng.integers(0, 256, 3)), -1)
        jpegs.append(osp.join(folder, f'{k:06d}.jpg'))
        masks.append(osp.join(folder, f'{k:06d}.png'))
        cv2.imwrite(jpegs[-1], picture, [cv2.IMWRITE_JPEG_QUALITY, 90])
        cv2.imwrite(masks[-1], mask)
    return jpegs, masks


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--images', type=int, default=1000)
    parser.add_argument('--size', type=int, default=640, help='image width; height is 3/4')
    parser.add_argument('--rounds', type=int, default=3)
    parser.add_argument('--json', help='write the results here (results/data_check.json)')
    args = parser.parse_args()
    if args.images < 1 or args.rounds < 1 or args.size < 16:
        parser.error('--images and --rounds must be >= 1, --size >= 16')
    import mmcv

    from benchmarks.results import machine, write_results
    from mmvit5.utils.image_decode import decode_all
    from mmvit5.utils.image_frames import AS_STORED, UPRIGHT, read_frame

    def mmcv_decode(paths):
        for path in paths:
            with open(path, 'rb') as f:
                mmcv.imfrombytes(f.read())

    with tempfile.TemporaryDirectory() as folder:
        jpegs, masks = write_files(folder, args.images, args.size)
        for path in jpegs + masks:  # the page cache: the cost of a cold disk is the disk's
            with open(path, 'rb') as f:
                f.read()
        ways = {
            'header only (the check before)': lambda: [read_frame(p) for p in jpegs],
            'images: the check, all cores': lambda: decode_all(jpegs, UPRIGHT),
            'images: the check, one thread': lambda: decode_all(jpegs, UPRIGHT, workers=1),
            'images: mmcv decode alone, one thread': lambda: mmcv_decode(jpegs),
            'masks: the check, all cores': lambda: decode_all(masks, AS_STORED, values=True),
        }
        seconds = {name: [] for name in ways}
        for _ in range(args.rounds):
            for name, run in ways.items():
                start = time.perf_counter()
                run()
                seconds[name].append(time.perf_counter() - start)
    per_1000 = {name: round(statistics.median(s) * 1000 / args.images, 3)
                for name, s in seconds.items()}
    print(f'| {args.images} files, {args.size}x{args.size * 3 // 4}, '
          f'{machine()} | s per 1,000 |\n|---|---|')
    for name, value in per_1000.items():
        print(f'| {name} | {value} |')
    if args.json:
        meta = dict(machine=machine(), images=args.images, size=[args.size, args.size * 3 // 4],
                    rounds=args.rounds, load=os.getloadavg()[0])
        write_results(args.json, meta, 'python tools/benchmark_data_check.py ' +
                      ' '.join(sys.argv[1:]), seconds_per_1000=per_1000)
    return 0


if __name__ == '__main__':
    sys.exit(main())
