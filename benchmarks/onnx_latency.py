"""ONNX Runtime against PyTorch eager on the CPU, per exported task (``tools/export_onnx.py``).

One row per export: the graph (file size, operators), the largest |ORT - PyTorch| per checked
size, and the latency of both on the export input (median of alternated rounds). ``--json``
adds the row to a results file (a row of the same config, part, size and batch is replaced);
:func:`latency_table` renders the file for python -m benchmarks.tables.
"""
import json
import os
import os.path as osp
import statistics
import time
from typing import Dict

import torch

from .core import Setup, forward_step
from .results import git_commit, machine
from .timing import interleaved_latencies


def latency_row(args, name: str, model, session, x: torch.Tensor, path: str, seconds: float,
                errors: Dict[str, float]) -> dict:
    """What one export measured; PyTorch and ORT latencies with ``args.rounds`` > 0."""
    from mmvit5.deploy.onnx import graph_ops, run_session
    ops = graph_ops(path)
    options = ' '.join(f'{k}={v}' for k, v in (args.cfg_options or {}).items())
    row = dict(config=name, options=options, part=args.part,
               kind=getattr(model, 'kind', args.part),
               input=f'{x.shape[0]}x{x.shape[2]}x{x.shape[3]}', dynamic=args.dynamic,
               dynamic_batch=args.dynamic_batch,
               file=path, mib=os.path.getsize(path) / 2**20, export_s=seconds,
               nodes=sum(ops.values()), ops={op: n for (_, op), n in sorted(ops.items())},
               errors=errors, threads=args.threads, pytorch_ms=None, ort_ms=None,
               inputs=[i.name for i in session.get_inputs()],
               outputs=[o.name for o in session.get_outputs()])
    if args.rounds:
        setup = Setup(torch.device('cpu'), torch.float32, x.shape[0], 0, 1)
        times = interleaved_latencies(
            {'pytorch': forward_step(model, x), 'ort': lambda: run_session(session, x)}, setup,
            args.rounds)
        row.update(pytorch_ms=statistics.median(times['pytorch']),
                   ort_ms=statistics.median(times['ort']), rounds=args.rounds)
    return row


def print_report(row: dict, atol: float) -> None:
    """The tool's Markdown report of one export."""
    graph = 'dynamic batch, H and W' if row['dynamic'] else \
        f'fixed {row["input"]} (B x H x W)' + (', dynamic batch' if row['dynamic_batch'] else '')
    print(f'## ONNX export: {row["config"]}, part {row["part"]} ({row["kind"]}), {graph}\n')
    print(f'- file: {row["file"]} ({row["mib"]:,.1f} MiB), exported in {row["export_s"]:.0f} s')
    print(f'- input: {", ".join(row["inputs"])}; outputs: {", ".join(row["outputs"])}')
    print(f'- {row["nodes"]} nodes, every one in the default ONNX domain, no complex value: '
          + ', '.join(f'{op} {n}' for op, n in row['ops'].items()))
    print(f'\n| input | max abs error, ORT vs PyTorch (float32) | within atol {atol:g} |\n'
          '|---|---|---|')
    for size, error in row['errors'].items():
        print(f'| {size} | {error:.2e} | {"yes" if error <= atol else "**no**"} |')
    if row['pytorch_ms'] is not None:
        print(f'\n| {row["input"]}, {row["threads"]} threads | PyTorch eager ms | '
              f'ONNX Runtime ms | ORT / PyTorch |\n|---|---|---|---|\n'
              f'| median of {row["rounds"]} alternated rounds | {row["pytorch_ms"]:,.1f} | '
              f'{row["ort_ms"]:,.1f} | {row["ort_ms"] / row["pytorch_ms"]:.2f} |')


def add_row(path: str, row: dict, command: str) -> None:
    """Add ``row`` (with its date and commit) to the results file ``path``, replacing a row of
    the same config, part, input and graph kind; the file's meta names the machine."""
    if row['pytorch_ms'] is None:
        raise ValueError('a results row needs latencies: run with --rounds 1 or more')
    data = dict(meta={}, rows=[])
    if osp.isfile(path):
        with open(path) as f:
            data = json.load(f)
    row = dict(row, command=command, date=time.strftime('%Y-%m-%d', time.gmtime()),
               commit=git_commit(osp.dirname(osp.abspath(__file__))), machine=machine(),
               torch=torch.__version__)
    key = ('config', 'options', 'part', 'input', 'dynamic')
    data['rows'] = [r for r in data['rows'] if any(r.get(k) != row[k] for k in key)] + [row]
    machines = sorted({r['machine'] for r in data['rows']})
    data['meta'] = dict(machine='; '.join(machines), date=max(r['date'] for r in data['rows']),
                        commit=', '.join(sorted({r['commit'] for r in data['rows']})),
                        command='python tools/export_onnx.py CONFIG --shape H W --batch B '
                        f'--json {path}', note='float32, random weights, ONNX Runtime '
                        'CPUExecutionProvider, PyTorch eager; medians of alternated rounds on a '
                        'machine other jobs share: the ratios are rough')
    os.makedirs(osp.dirname(osp.abspath(path)), exist_ok=True)
    with open(path, 'w') as f:
        json.dump(data, f, indent=1)


def latency_table(data: dict) -> str:
    """The docs table of a results file of :func:`add_row`."""
    lines = ['| task | config | graph | ORT outputs vs PyTorch, max abs error | PyTorch eager '
             '| ONNX Runtime | ORT / PyTorch |', '|---|---|---|---|---|---|---|']
    for row in data['rows']:
        graph = ('dynamic' if row['dynamic'] else 'fixed') + \
            f' {row["input"]}, {row["mib"]:,.1f} MiB, {row["nodes"]} nodes'
        errors = ', '.join(f'{e:.1e} at {size}' for size, e in row['errors'].items())
        options = f' ({row["options"]})' if row.get('options') else ''
        lines.append(f'| {row["kind"]} | `{row["config"]}`{options} | {graph} | {errors} | '
                     f'{row["pytorch_ms"]:,.1f} ms | {row["ort_ms"]:,.1f} ms | '
                     f'{row["ort_ms"] / row["pytorch_ms"]:.2f} |')
    return '\n'.join(lines)
