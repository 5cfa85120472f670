"""Record a run of the whole test suite in results/test_suite.json: its wall time, its counts
and each test file's time, read from pytest's JUnit XML. ``tools/run_tests.sh --record`` calls it
after a run of the whole suite; ``python tools/make_tables.py`` renders the file into
docs/en/get_started/install.md.

    python tools/record_test_suite.py JUNIT SECONDS --command 'bash tools/run_tests.sh'
    # a run of another commit, kept as a column of the per-file table beside the suite's own
    MMVIT5_COMMIT=4d5fe0b python tools/record_test_suite.py JUNIT SECONDS --label before \\
        --command 'python -m pytest --junitxml=JUNIT'
"""
import argparse
import os.path as osp

REPO = osp.dirname(osp.dirname(osp.abspath(__file__)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('junit', help="pytest's --junitxml file of the run")
    parser.add_argument('seconds', type=int, help='wall time of the run')
    parser.add_argument('--command', required=True, help='the command that ran the suite')
    parser.add_argument('--fresh', action='store_true',
                        help='the run was in a new virtualenv (bash tools/run_tests.sh --fresh)')
    parser.add_argument('--label', help='keep the run as this column of the per-file table '
                        "(e.g. 'before') instead of as the suite's own run")
    parser.add_argument('--out', default=osp.join(REPO, 'results', 'test_suite.json'))
    args = parser.parse_args()
    from benchmarks.results import record_test_suite  # after parsing: --help needs no torch
    record_test_suite(args.out, args.junit, args.seconds, args.command, fresh=args.fresh,
                      label=args.label)


if __name__ == '__main__':
    main()
