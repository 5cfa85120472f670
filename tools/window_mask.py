"""Report the score blocks flex_attention's block mask visits for ViTDet windows against the
rule's exact fraction (benchmarks/window_mask.py): why batched SDPA windows are the default.

    python tools/window_mask.py [--sizes 512,1024,1536] [--window 14] [--registers 4]
"""
import argparse
import datetime
import os.path as osp


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--sizes', default='512,1024,1536',
                        help='image sides in pixels, comma-separated (patch 16)')
    parser.add_argument('--window', type=int, default=14, help='window side in patches')
    parser.add_argument('--registers', type=int, default=4, help='register tokens')
    args = parser.parse_args()
    from benchmarks.results import git_commit, machine
    from benchmarks.window_mask import coverage_table, mask_coverage
    try:
        sizes = [int(s) for s in args.sizes.split(',')]
    except ValueError:
        parser.error(f'--sizes must be integers separated by commas, got {args.sizes!r}')
    rows = [mask_coverage(s, args.window, args.registers) for s in sizes]
    root = osp.dirname(osp.dirname(osp.abspath(__file__)))
    print(f'flex_attention block mask against the window rule; {machine()}, '
          f'{datetime.date.today()}, commit {git_commit(root)}')
    print(coverage_table(rows))


if __name__ == '__main__':
    main()
