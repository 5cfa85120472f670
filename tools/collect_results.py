"""Write the README results table from finished work dirs.

    python tools/collect_results.py work_dirs/vit5_maskrcnn_coco work_dirs/... [--readme README.md]
    python tools/collect_results.py work_dirs            # every run folder inside
    python tools/collect_results.py work_dirs --save results/runs.json   # keep them, then
    python -m benchmarks.tables                          # rewrite README and docs tables

Each work dir is a tools/train.py run (it records config, commit, date and machine); the
metrics are those tools/test.py wrote into the same work dir (``--work-dir`` of the training
run), else the last validation of training. Recipes without a run keep "not yet measured".
Prints the table; ``--readme`` also replaces the table between its markers in that file;
``--save`` adds the runs to the records the README table is generated from.
"""
import argparse

from benchmarks.results import collect_runs, results_table, save_runs, write_into


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('work_dirs', nargs='*', help='tools/train.py work dirs, or folders of them')
    parser.add_argument('--readme', help='file whose results table to replace')
    parser.add_argument('--save', metavar='JSON',
                        help='add the runs to these records (results/runs.json), replacing '
                             'earlier records of the same work dirs')
    args = parser.parse_args()
    runs = collect_runs(args.work_dirs)
    if args.save:
        runs = save_runs(args.save, runs)
    table = results_table(runs)
    if args.readme:
        write_into(args.readme, table)
    print(table)


if __name__ == '__main__':
    main()
