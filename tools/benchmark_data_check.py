#!/usr/bin/env python
"""What tools/finetune.py's own-data check costs per 1,000 images: every image decoded.

    python tools/benchmark_data_check.py --images 1000 --json results/data_check.json

Writes ``--images`` photo-like JPEGs (``--size`` wide, 3/4 as high) and as many PNG masks into
a temporary folder, reads each once to warm the page cache, then times in alternated rounds
the header read the check did before, the check's decoding of every image as the recipes load
them (mmcv's OpenCV decoder, then Pillow's strict one) on a thread a core and on one thread,
mmcv's decoding alone (what the pipeline pays per image anyway) and the mask check
(benchmarks/data_check.py). Prints seconds per 1,000 files, the median of ``--rounds``;
``--json`` keeps them with the machine, date and commit, from which ``tools/make_tables.py``
writes the table of docs/en/user_guides/custom_dataset.md.
"""
import argparse
import os
import os.path as osp
import sys
import tempfile

REPO = osp.dirname(osp.dirname(osp.abspath(__file__)))
sys.path.insert(0, REPO)  # benchmarks/ beside tools/


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--images', type=int, default=1000)
    parser.add_argument('--size', type=int, default=640, help='image width; height is 3/4')
    parser.add_argument('--rounds', type=int, default=3)
    parser.add_argument('--json', help='write the results here (results/data_check.json)')
    args = parser.parse_args()
    if args.images < 1 or args.rounds < 1 or args.size < 16:
        parser.error('--images and --rounds must be >= 1, --size >= 16')
    # here, not at the top: --help needs none of these
    from benchmarks.data_check import check_table, measure, write_files
    from benchmarks.results import machine, write_results
    with tempfile.TemporaryDirectory() as folder:
        jpegs, masks = write_files(folder, args.images, args.size)
        per_1000 = measure(jpegs, masks, args.rounds)
    meta = dict(machine=machine(), images=args.images, size=[args.size, args.size * 3 // 4],
                rounds=args.rounds, load=round(os.getloadavg()[0], 1))
    print(check_table(dict(meta=meta, seconds_per_1000=per_1000)))
    if args.json:
        write_results(args.json, meta, 'python tools/benchmark_data_check.py ' +
                      ' '.join(sys.argv[1:]), seconds_per_1000=per_1000)
    return 0


if __name__ == '__main__':
    sys.exit(main())
