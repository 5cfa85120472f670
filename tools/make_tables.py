"""Rewrite the measured tables of the README and the docs from the raw files in results/.

    python tools/make_tables.py            # every generated table of README.md and docs/en
    python tools/make_tables.py --check    # exit 1, naming the files, where one is out of date

A table sits between ``<!-- NAME table: generated from results/ ... -->`` and
``<!-- end of NAME table -->``; benchmarks/tables.py says which results file each NAME reads.
"""
import argparse
import glob
import os.path as osp
import sys

REPO = osp.dirname(osp.dirname(osp.abspath(__file__)))


def markdown_files() -> list:
    from benchmarks.tables import MARKER  # here, not at the top: --help needs no torch
    found = [osp.join(REPO, 'README.md'),
             *sorted(glob.glob(osp.join(REPO, 'docs', 'en', '**', '*.md'), recursive=True))]
    return [path for path in found if MARKER.search(open(path).read())]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('files', nargs='*', help='Markdown files (default: README.md, docs/en)')
    parser.add_argument('--check', action='store_true',
                        help='write nothing; exit 1 when a file differs from what would be written')
    args = parser.parse_args()
    from benchmarks.tables import expected_text  # after parsing: --help needs none of these
    stale = []
    for path in args.files or markdown_files():
        with open(path) as f:
            text = f.read()
        expected = expected_text(path)
        if expected == text:
            continue
        stale.append(osp.relpath(path, REPO))
        if not args.check:
            with open(path, 'w') as f:
                f.write(expected)
    verb = 'out of date' if args.check else 'rewritten'
    for path in stale:
        print(f'[make_tables] {path}: {verb}')
    if args.check and stale:
        print('[make_tables] run python tools/make_tables.py and commit the result')
    return int(args.check and bool(stale))


if __name__ == '__main__':
    sys.exit(main())
