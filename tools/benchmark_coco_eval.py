#!/usr/bin/env python
"""COCO evaluation by faster-coco-eval and by pycocotools, side by side: time and equality.

    python tools/benchmark_coco_eval.py --images 5000 --dets 100 --rounds 3 \
        --json results/coco_eval.json

Generates a COCO-scale set (benchmarks/coco_eval.py: ground truth of ``--images`` images,
about ``--dets`` detections each with boxes and RLE masks, the same for the same ``--seed``),
then evaluates it as mmdet's CocoMetric does, boxes then masks, with both backends in
alternated rounds. Prints each backend's median seconds and the speed-up, and whether every
number (summary stats, accumulated precision, recall and scores) was equal bit for bit; exits
1 where one was not. ``--json`` keeps it all with the machine, date and commit, from which
``python -m benchmarks.tables`` writes the table of docs/en/user_guides/train_test.md.
"""
import argparse
import sys


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--images', type=int, default=5000, help='COCO val2017 has 5,000')
    parser.add_argument('--dets', type=int, default=100,
                        help='detections per image, about (mmdet keeps up to 100)')
    parser.add_argument('--rounds', type=int, default=3, help='alternated rounds per backend')
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument('--json', help='write the results here (results/coco_eval.json)')
    args = parser.parse_args()
    if args.images < 1 or args.dets < 1 or args.rounds < 1:
        parser.error('--images, --dets and --rounds must be >= 1')
    # here, not at the top: --help needs none of these
    from benchmarks.coco_eval import benchmark, speedup_table
    from benchmarks.results import write_results
    from mmvit5.evaluation.coco_metric import faster_import_error
    error = faster_import_error()
    if error:
        parser.error(f'faster-coco-eval does not import ({error}): pip install '
                     f'faster-coco-eval (or -e ".[benchmark]")')
    data = benchmark(args.images, args.dets, args.rounds, args.seed,
                     progress=lambda line: print(line, file=sys.stderr))
    print(speedup_table(data))
    if args.json:
        write_results(args.json, data['meta'], 'python tools/benchmark_coco_eval.py ' +
                      ' '.join(sys.argv[1:]), results=data['results'])
    return int(any(found['differences'] for found in data['results'].values()))


if __name__ == '__main__':
    sys.exit(main())
