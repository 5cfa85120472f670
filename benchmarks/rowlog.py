"""Rows that survive a killed run: each measurement is printed and appended to a JSON-lines
file the moment it is measured.

A tool that prints its table at the end loses everything when a time cap (``timeout``, a
lent GPU's 10-minute command limit) stops it halfway. :class:`RowLog` writes one line per
row instead, opening the file in append mode and flushing it to the OS before it returns,
so a killed process leaves every finished row on disk, and several runs (the sections of
``tools/gpu_check.sh``) can share one file.

Each line is a JSON object: ``tag`` (which run or section measured it), ``time`` (UTC),
``kind`` (the record's class, e.g. ``Row``, ``Target``, ``SmokeCase``), the ``meta`` fields
the tool gave (:func:`run_meta`: device, torch and Triton versions, commit), ``plan`` (the
execution plan of the ViT5 measured, None where no ViT5 was), ``triton_failure`` (why this
process gave the Triton kernels up, or None) and the record's own fields.
:func:`check_rows` reads them back: whether every row says which path ran, and whether that
is the path the run meant (``python -m benchmarks.rowlog OUT --fused Triton``).
"""
import argparse
import json
import math
import os
import re
import sys
import time
from dataclasses import asdict, is_dataclass
from typing import Any, Dict, List, Optional


def _plain(record: Any) -> Dict[str, Any]:
    if is_dataclass(record):
        # with what its properties derive (a target's ``met``)
        derived = {name: getattr(record, name) for name, value in vars(type(record)).items()
                   if isinstance(value, property)}
        return {**asdict(record), **derived}
    if hasattr(record, '_asdict'):  # NamedTuple
        return dict(record._asdict())
    if isinstance(record, dict):
        return dict(record)
    raise TypeError(f'RowLog records dataclasses, NamedTuples or dicts, got '
                    f'{type(record).__name__}: {record!r}')


def _json_safe(value: Any) -> Any:
    """NaN and infinities as strings: strict JSON readers refuse the bare tokens."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def _short(value: Any) -> str:
    if isinstance(value, float):
        return f'{value:.4g}'
    return str(value)


class RowLog:
    """Print each record and append it to ``path`` (JSON lines) as soon as it is measured.

    Args:
        path (str, optional): The JSON-lines file; its folder is created. None: print only.
        tag (str): Names the run in every line (e.g. the gpu_check section).
        meta (dict, optional): Fields added to every line (device, dtype, versions).
        echo (bool): Print a one-line summary of each record to stdout (flushed).
    """

    def __init__(self, path: Optional[str] = None, tag: str = '',
                 meta: Optional[Dict[str, Any]] = None, echo: bool = True) -> None:
        self.path = os.path.abspath(path) if path else None
        self.tag, self.meta, self.echo = tag, dict(meta or {}), echo
        self.count = 0
        if self.path:
            os.makedirs(os.path.dirname(self.path), exist_ok=True)

    def __call__(self, record: Any) -> None:
        fields = _plain(record)
        kind = fields.pop('kind', 'dict') if isinstance(record, dict) else type(record).__name__
        from mmvit5.models.layers.kernels import triton_failure
        # the record's own fields win over the run's (a row's batch over --batch)
        line = {'tag': self.tag, 'time': time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime()),
                'kind': kind, **self.meta, 'plan': None, 'triton_failure': triton_failure(),
                **fields}
        if self.path:
            with open(self.path, 'a') as f:
                f.write(json.dumps(_json_safe(line)) + '\n')
                f.flush()
                os.fsync(f.fileno())
        self.count += 1
        if self.echo:
            # scalars only: lists (per-round latencies) stay in the file
            shown = ' '.join(f'{k}={_short(v)}' for k, v in fields.items()
                             if v not in (None, '') and not isinstance(v, (list, dict)))
            head = ' '.join(p for p in ('[row]', self.tag, f'{kind}:') if p)
            print(f'{head} {shown}', flush=True)

    def extend(self, records) -> None:
        for record in records:
            self(record)


def read_rows(path: str) -> List[Dict[str, Any]]:
    """Every line of a RowLog file; a last line cut off by a kill is skipped."""
    rows = []
    with open(path) as f:
        for text in f:
            try:
                rows.append(json.loads(text))
            except json.JSONDecodeError:
                continue
    return rows


def run_meta(device: str, repo: str, **more: Any) -> Dict[str, Any]:
    """The fields every row of a run carries: the device, the torch and Triton versions, the
    commit of ``repo`` (and ``more``)."""
    import torch

    from .results import git_commit
    try:
        import triton
        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    return dict(device=device, torch=torch.__version__, triton_version=triton_version,
                commit=git_commit(repo), **more)


REQUIRED = ('tag', 'kind', 'device', 'torch', 'triton_version', 'commit', 'plan',
            'triton_failure')
# what comes back from a lent GPU machine's $OUT (the device notes)
OUT_FILES, OUT_FILE_BYTES, OUT_DEPTH = 8, 16 * 2**20, 2
OUT_NAME = re.compile(r'^[A-Za-z0-9._-]+$')


def _measured_vit5(row: Dict[str, Any]) -> bool:
    """A row that measured a ViT5 model (so it must say how it ran)."""
    if row.get('kind') == 'Row':
        return row.get('status') == 'ok' and str(row.get('model', '')).startswith('vit5')
    if row.get('kind') == 'Target':
        return row.get('ratio') is not None and 'ViT5' in str(row.get('claim', ''))
    return row.get('kind') == 'TrainLoop'


def check_rows(out: str, fused: Optional[str] = None, rows_file: str = 'rows.jsonl'
               ) -> List[str]:
    """What is wrong with a gpu_check OUT folder; empty when nothing is.

    Every row of ``rows_file`` carries :data:`REQUIRED`; every row that measured a ViT5 has
    its plan; with ``fused`` ('Triton' or 'PyTorch'), every plan outside the smoke ran that
    path and no row outside the smoke saw a Triton failure. OUT itself must come back from a
    lent machine whole: at most 8 files of at most 16 MiB, 2 folders deep, plain names.
    """
    problems = []
    path = os.path.join(out, rows_file)
    rows = read_rows(path) if os.path.isfile(path) else []
    if not rows:
        problems.append(f'{path}: no rows')
    for number, row in enumerate(rows, 1):
        where = f'{rows_file}:{number} ({row.get("tag")} {row.get("kind")})'
        missing = [key for key in REQUIRED if key not in row]
        if missing:
            problems.append(f'{where}: no {", ".join(missing)}')
        if _measured_vit5(row) and not row.get('plan'):
            problems.append(f'{where}: measured ViT5 without its plan')
        if fused and not str(row.get('tag', '')).startswith('smoke'):
            if row.get('plan') and f'fused ops: {fused}' not in row['plan']:
                problems.append(f'{where}: ran {row["plan"]!r}, the run meant {fused}')
            if row.get('triton_failure'):
                problems.append(f'{where}: Triton failed: {row["triton_failure"]}')
    files = []
    for folder, dirs, names in os.walk(out):
        depth = os.path.relpath(folder, out).count(os.sep) + (folder != out)
        for name in names + dirs:
            if not OUT_NAME.match(name):
                problems.append(f'{os.path.join(folder, name)}: a name that does not come back')
        for name in names:
            files.append(os.path.join(folder, name))
            if depth > OUT_DEPTH:
                problems.append(f'{files[-1]}: more than {OUT_DEPTH} folders down')
            if os.path.getsize(files[-1]) > OUT_FILE_BYTES:
                problems.append(f'{files[-1]}: over 16 MiB')
    if len(files) > OUT_FILES:
        problems.append(f'{out}: {len(files)} files, at most {OUT_FILES} come back')
    return problems


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description='Check the rows and files of a gpu_check '
                                     'OUT folder (benchmarks.rowlog.check_rows).')
    parser.add_argument('out', help='the OUT folder, holding rows.jsonl')
    parser.add_argument('--fused', choices=['Triton', 'PyTorch'],
                        help='the path every row after the smoke must have run')
    args = parser.parse_args(argv)
    problems = check_rows(args.out, args.fused)
    for problem in problems:
        print(f'[rows] {problem}')
    rows = read_rows(os.path.join(args.out, 'rows.jsonl')) if not problems else []
    print(f'[rows] {"FAILED: " + str(len(problems)) + " problems" if problems else "ok"}'
          f'{"" if problems else f": {len(rows)} rows, each with its plan and Triton state"}'
          f'{", fused ops " + args.fused if args.fused else ""}')
    return int(bool(problems))


if __name__ == '__main__':
    sys.exit(main())
