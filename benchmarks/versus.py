"""One benchmark, two checkouts: ``tools/benchmark.py --versus CHECKOUT``.

The rows the other flags ask for (``--models``, ``--sizes``, ``--with-cp`` ...) are measured by
this checkout and by another one (an older commit: ``git worktree add /tmp/old COMMIT``), each
by its own ``tools/benchmark.py`` in a process of its own (two versions of mmvit5 cannot share
one), so each version runs its own code under the same flags. The checkouts alternate over
``--versus-rounds`` rounds (ABBA...), and each row keeps the median over rounds of its
per-process median latency, of its peak memory, and of its latency over the train step of the
same run (a ratio within one process: load on a shared machine moves it less than the
latencies). The table puts the two checkouts side by side, with the ratio of this one to the
other.
"""
import argparse
import json
import os
import os.path as osp
import statistics
import subprocess
import sys
import tempfile
from typing import Dict, List, Optional, Tuple

from .core import progress
from .results import git_commit, machine, write_results

REPO = osp.dirname(osp.dirname(osp.abspath(__file__)))
# the flags a row depends on, passed to both checkouts' tools/benchmark.py
ROW_FLAGS = ('models', 'sizes', 'peers', 'batch', 'threads', 'device', 'dtype', 'warmup',
             'repeats', 'matmul_size', 'window')
ROW_SWITCHES = ('with_cp', 'compile')


def child_command(checkout: str, args: argparse.Namespace, out: str) -> List[str]:
    """``tools/benchmark.py`` of ``checkout`` with the row flags of ``args``, rows to ``out``."""
    cmd = [sys.executable, osp.join(checkout, 'tools', 'benchmark.py'), '--json', out,
           '--plot', osp.splitext(out)[0] + '.png']
    for name in ROW_FLAGS:
        value = getattr(args, name)
        if value not in (None, '', 0) or name == 'peers':
            cmd += [f'--{name.replace("_", "-")}', str(value)]
    return cmd + [f'--{name.replace("_", "-")}' for name in ROW_SWITCHES if getattr(args, name)]


def measure(checkout: str, args: argparse.Namespace, tmp: str, tag: str) -> dict:
    """One run of ``checkout``'s benchmark: its JSON (meta, rows)."""
    out = osp.join(tmp, f'{tag}.json')
    # the child imports mmvit5 (and benchmarks) from its own checkout
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [checkout, *filter(None, [os.environ.get('PYTHONPATH')])]))
    progress(f'versus: {tag} ({checkout})')
    subprocess.run(child_command(checkout, args, out), env=env, check=True,
                   stdout=subprocess.DEVNULL)
    with open(out) as f:
        return json.load(f)


def row_key(row: dict) -> Tuple[str, str, str]:
    return row['model'], row['input'], row['mode']


def merge_rounds(runs: List[dict]) -> List[dict]:
    """Rows of several runs of one checkout: medians of latency and peak per row, and of
    ``vs_train``, the latency over the train row of the same model and input in the same run
    (a ratio within one process, which load on a shared machine moves less)."""
    merged: Dict[Tuple[str, str, str], List[dict]] = {}
    for run in runs:
        train = {row_key(r)[:2]: r['latency_ms'] for r in run['rows']
                 if r['mode'] == 'train' and r['status'] == 'ok'}
        for row in run['rows']:
            base = train.get(row_key(row)[:2])
            vs_train = row['latency_ms'] / base if base and row['latency_ms'] else None
            merged.setdefault(row_key(row), []).append(dict(row, vs_train=vs_train))
    rows = []
    for found in merged.values():
        ok = [r for r in found if r['status'] == 'ok']
        row = dict(found[0], status='ok' if len(ok) == len(found) else 'failed',
                   rounds=len(found))
        for key in ('latency_ms', 'peak_mib', 'vs_train'):
            values = [r[key] for r in ok if r[key] is not None]
            row[key] = statistics.median(values) if values else None
        rows.append(row)
    return rows


def run_versus(args: argparse.Namespace) -> int:
    """Measure both checkouts, print the table, write ``--json``."""
    other = osp.abspath(args.versus)
    if not osp.isfile(osp.join(other, 'tools', 'benchmark.py')):
        sys.exit(f'--versus {args.versus}: no tools/benchmark.py there; give an mmvit5 '
                 'checkout (e.g. git worktree add /tmp/old COMMIT)')
    checkouts = {'this': REPO, 'versus': other}
    runs: Dict[str, List[dict]] = {name: [] for name in checkouts}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.versus_rounds):
            order = list(checkouts) if i % 2 == 0 else list(checkouts)[::-1]
            for name in order:
                runs[name].append(measure(checkouts[name], args, tmp, f'{name}{i}'))
    sides = {name: dict(commit=git_commit(path), rows=merge_rounds(runs[name]),
                        torch=runs[name][0]['meta'].get('torch'))
             for name, path in checkouts.items()}
    data = dict(meta=dict(machine=machine(), device=runs['this'][0]['meta'].get('device'),
                          dtype=args.dtype, batch=args.batch, repeats=args.repeats,
                          warmup=args.warmup, rounds=args.versus_rounds,
                          torch=sides['this']['torch']),
                this=sides['this'], versus=sides['versus'])
    print(versus_table(data))
    if args.json:
        write_results(args.json, data['meta'], args.command, this=data['this'],
                      versus=data['versus'])
        progress(f'rows saved to {args.json}')
    return int(any(r['status'] != 'ok' for side in sides.values() for r in side['rows']))


def versus_table(data: dict) -> str:
    """Each row of both checkouts side by side: latency, latency over the same run's train
    step, peak memory, and the ratios of this checkout to the other."""
    this, other = data['this'], data['versus']
    found = {row_key(r): r for r in other['rows']}
    a, b = f'`{other["commit"]}`', f'`{this["commit"]}`'
    lines = [f'| model | input | mode | ms {a} | ms {b} | {b} / {a} | x train {a} | '
             f'x train {b} | peak MiB {a} | peak MiB {b} | {b} / {a} |',
             '|---|---|---|' + '---:|' * 8]

    def number(value: Optional[float], fmt: str) -> str:
        return format(value, fmt) if value else '-'

    def cells(key: str, old: dict, new: dict, ratio: bool = True) -> List[str]:
        u, v = old.get(key), new.get(key)
        fmt = '.2f' if key == 'vs_train' else ',.1f'
        return [number(u, fmt), number(v, fmt)] + \
            ([f'{v / u:.2f}x' if u and v else '-'] if ratio else [])

    for row in this['rows']:
        old = found.get(row_key(row), {})
        lines.append('| ' + ' | '.join([*row_key(row), *cells('latency_ms', old, row),
                                         *cells('vs_train', old, row, ratio=False),
                                         *cells('peak_mib', old, row)]) + ' |')
    return '\n'.join(lines)
