"""Rows that survive a killed run: each measurement is printed and appended to a JSON-lines
file the moment it is measured.

A tool that prints its table at the end loses everything when a time cap (``timeout``, a
lent GPU's 10-minute command limit) stops it halfway. :class:`RowLog` writes one line per
row instead, opening the file in append mode and flushing it to the OS before it returns,
so a killed process leaves every finished row on disk, and several runs (the sections of
``tools/gpu_check.sh``) can share one file.

Each line is a JSON object: ``tag`` (which run or section measured it), ``time`` (UTC),
``kind`` (the record's class, e.g. ``Row``, ``Target``, ``SmokeCase``), the ``meta`` fields
the tool gave (device, dtype, torch, commit) and the record's own fields.
"""
import json
import math
import os
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
        # the record's own fields win over the run's (a row's batch over --batch)
        line = {'tag': self.tag, 'time': time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime()),
                'kind': kind, **self.meta, **fields}
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
