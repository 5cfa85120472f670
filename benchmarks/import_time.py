"""What ``import mmvit5`` costs a process, beside what it defers to the libraries' imports.

    python -m benchmarks.import_time --rounds 5 --json results/import_time.json

Each statement runs in a new interpreter, timed around the statement itself (the interpreter's
start-up is the same for all), with the modules it loads counted; the statements alternate
within a round, after one warm-up round (the file system's caches), and the table gives the
median of ``--rounds`` with the range. ``--json`` keeps them with the machine, date and commit,
from which ``python -m benchmarks.tables`` writes the table of docs/en/get_started/install.md.
"""
import argparse
import os
import statistics
import subprocess
import sys
from typing import Dict, List, Tuple

# the statement, and what it stands for
STATEMENTS = {
    'import mmvit5': 'what a config\'s custom_imports or a timm user pays to register',
    'import torch': 'the floor of anything that builds a model',
    'import torch, mmengine.model': 'what the backbone is built on',
    'from mmvit5 import ViT5': 'the backbone itself (the line above, and mmvit5.models)',
}
PROBE = ('import sys, time\n'
         'before = len(sys.modules)\n'
         'start = time.perf_counter()\n'
         'exec(sys.argv[1])\n'
         'print(time.perf_counter() - start, len(sys.modules) - before)\n')


def run(statement: str) -> Tuple[float, int]:
    """Seconds and modules loaded for ``statement`` in a new interpreter."""
    out = subprocess.run([sys.executable, '-c', PROBE, statement], capture_output=True,
                         text=True, check=True)
    seconds, modules = out.stdout.split()
    return float(seconds), int(modules)


def measure(rounds: int) -> Dict[str, dict]:
    """Median, minimum and maximum seconds of each statement over ``rounds`` alternated
    rounds (after a warm-up round), and the modules it loads."""
    for statement in STATEMENTS:
        run(statement)
    seconds: Dict[str, List[float]] = {s: [] for s in STATEMENTS}
    modules = {}
    for k in range(rounds):
        order = list(STATEMENTS) if k % 2 == 0 else list(STATEMENTS)[::-1]
        for statement in order:
            took, modules[statement] = run(statement)
            seconds[statement].append(took)
    return {s: dict(median=round(statistics.median(t), 3), min=round(min(t), 3),
                    max=round(max(t), 3), modules=modules[s]) for s, t in seconds.items()}


def import_table(data: dict) -> str:
    """The table of a ``python -m benchmarks.import_time --json`` file."""
    lines = [f'| statement (a new process) | s, median of {data["meta"]["rounds"]} | range | '
             'modules loaded | what it stands for |', '|---|---|---|---|---|']
    lines += [f'| `{s}` | {r["median"]:.2f} | {r["min"]:.2f} - {r["max"]:.2f} | '
              f'{r["modules"]:,} | {STATEMENTS.get(s, "")} |' for s, r in data['rows'].items()]
    return '\n'.join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(prog='python -m benchmarks.import_time',
                                     description=__doc__.splitlines()[0])
    parser.add_argument('--rounds', type=int, default=5)
    parser.add_argument('--json', help='write the results here (results/import_time.json)')
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error('--rounds must be >= 1')
    from .results import machine, write_results
    rows = measure(args.rounds)
    meta = dict(machine=machine(), rounds=args.rounds, load=round(os.getloadavg()[0], 1))
    print(import_table(dict(meta=meta, rows=rows)))
    if args.json:
        write_results(args.json, meta, 'python -m benchmarks.import_time ' +
                      ' '.join(sys.argv[1:]), rows=rows)
    return 0


if __name__ == '__main__':
    sys.exit(main())
