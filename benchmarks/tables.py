"""The measured tables of the README and the docs, generated from the raw files in results/.

Every table sits between the comment lines :func:`benchmarks.results.begin_marker` and
:func:`~benchmarks.results.end_marker` of its name in a Markdown file; :func:`render` makes its
text from one results file, with a caption that says the machine, the date and the commit
(from the file's own ``meta``, else ``results/provenance.json``; a run that did not record its
commit names the commit that first reported it, as an upper bound).
``python -m benchmarks.tables`` rewrites them (:func:`expected_text`; ``--check`` writes
nothing and exits 1 naming the stale files); ``tests/test_docs.py`` checks that the committed
files are what it would write.

Kinds of results files:

* ``tools/benchmark.py --json`` output: ``targets`` (``--targets`` / ``--detector-targets``),
  ``breakdown`` (``--breakdown``), ``launches`` (``--launches``), ``components``
  (``--components``);
* ``tools/ablation_study.py``'s ``results.json``: ``ablations``;
* ``tools/learning_curves.py --json``: ``learning``; ``python -m benchmarks.kernel_compile --json``:
  ``kernels``; ``tools/benchmark_coco_eval.py --json``: ``coco-eval``;
  ``python -m benchmarks.data_check --json``: ``data-check``;
  ``python -m benchmarks.import_time --json``: ``import-time``;
* ``tools/benchmark.py --versus CHECKOUT --json`` output: ``versus_table`` (two checkouts'
  rows side by side: ``cpu_training/checkpointing.json``);
* ``test_suite.json`` (``tools/run_tests.sh --record``): ``test_suite``;
* ``tools/export_onnx.py --json`` rows (``onnx_latency.json``): ``onnx-latency``;
* ``runs.json`` (``tools/collect_results.py --save``): the README results table;
* ``transcribed/*.json``: tables of earlier README versions whose raw output was not kept,
  copied cell by cell with the commit that reported them (``tables``).
"""
import argparse
import glob
import json
import os.path as osp
import re
import sys
from typing import Callable, Dict, NamedTuple

from .ablation import markdown_table as ablation_table
from .ablation import summarize
from .breakdown import Launches, PartTime, Saved, launches_table, part_table, saved_table
from .coco_eval import speedup_table
from .data_check import check_table
from .import_time import import_table
from .components import Component, ComponentTimes
from .kernel_compile import Compiled, compiled_table
from .onnx_latency import latency_table
from .report import components_tables
from .results import NOT_RECORDED, fill_table, load_runs, results_table
from .targets import Target, targets_table
from .versus import versus_table

REPO = osp.dirname(osp.dirname(osp.abspath(__file__)))
RESULTS = osp.join(REPO, 'results')
PROVENANCE = 'provenance.json'
MARKER = re.compile(r'<!-- (\S+) table: generated from results/')


def load(name: str, results: str = RESULTS) -> dict:
    with open(osp.join(results, name)) as f:
        return json.load(f)


def provenance(name: str, data: dict, results: str = RESULTS) -> Dict[str, str]:
    """machine, date, commit (and command, note, reported_in where known) of a results file."""
    recorded = load(PROVENANCE, results).get(name, {}) if osp.isfile(
        osp.join(results, PROVENANCE)) else {}
    meta = data.get('meta', {}) if isinstance(data, dict) else {}
    found = {key: meta.get(key, recorded.get(key)) for key in
             ('machine', 'date', 'commit', 'command', 'note', 'reported_in', 'source')}
    found['machine'] = found['machine'] or meta.get('device')
    for key in ('machine', 'date', 'commit'):
        found[key] = found[key] or NOT_RECORDED
    if NOT_RECORDED in found['commit'] and found['reported_in']:
        # The run predates write_results' commit field; the commit that first reported the
        # numbers bounds the code that produced them (it ran on that tree or an earlier one).
        found['commit'] = found['commit'].replace(
            NOT_RECORDED, f'{found["reported_in"]} or earlier (the run did not record it; '
                          f'{found["reported_in"]} first reported it)')
        found['reported_in'] = None  # said once, in the commit
    return found


def caption(name: str, data: dict, results: str = RESULTS) -> str:
    """One italic line under a table: where, when, at which commit, from which file."""
    about = provenance(name, data, results)
    parts = [f'machine: {about["machine"]}', f'date: {about["date"]}',
             f'commit: {about["commit"]}']
    if about['reported_in']:
        parts.append(f'first reported in commit {about["reported_in"]}')
    if about['command']:
        parts.append(f'command: `{about["command"]}`')
    if about['note']:
        parts.append(about['note'])
    source = f'; {about["source"]}' if about['source'] else ''
    return f'*Data: `results/{name}`{source}. ' + '; '.join(parts) + '.*'


def _meta_line(data: dict) -> str:
    meta = data.get('meta', {})
    settings = [meta.get('device'), meta.get('dtype'),
                f'batch {meta["batch"]}' if 'batch' in meta else None,
                (f'fused kernels {"on" if meta["fused_kernels"] else "off"}'
                 if 'fused_kernels' in meta else None),
                f'torch {meta["torch"]}' if 'torch' in meta else None,
                f'onnxruntime {meta["onnxruntime"]}' if 'onnxruntime' in meta else None]
    return ', '.join(s for s in settings if s)


def targets(data: dict) -> str:
    """The target ratios of a ``--targets`` / ``--detector-targets`` run."""
    found = [Target(**{k: v for k, v in t.items() if k != 'met'}) for t in data['targets']]
    return targets_table(found, data['meta']['target_rounds'])


def breakdown(data: dict) -> str:
    """Per size: time per part, launches, and what each block keeps for backward."""
    text = []
    rounds = data['meta'].get('rounds')
    for size, found in data['breakdown'].items():
        times = [PartTime(**t) for t in found['times']]
        counted = [Launches(**c) for c in found['launches']]
        saved = [Saved(**{**s, 'shape': tuple(s['shape'])}) for s in found['saved']]
        text.append(f'**{size}x{size}, time per part** (median of {rounds} alternated rounds)'
                    f'\n\n{part_table(times)}\n\n**{size}x{size}, forward + backward '
                    f'launches**\n\n{launches_table(counted)}\n\n**{size}x{size}, kept for '
                    f'backward**\n\n{saved_table(saved)}')
    return '\n\n'.join(text)


def launches(data: dict) -> str:
    """Per size: one block's ops and kernels, forward + backward (``--launches``)."""
    return '\n\n'.join(f'**{size}x{size}**\n\n' + launches_table([Launches(**c) for c in found])
                       for size, found in data['launches'].items())


def components(data: dict) -> str:
    """Latency of every variant, then the cost of each part (``--components``)."""
    parts = [Component(**c) for c in data['components']]
    times = [ComponentTimes(**t) for t in data['times']]
    return components_tables(times, parts).rstrip()


def ablations(data: dict) -> str:
    """The toy ablation study: every variant's metric over seeds, against the baseline."""
    return ablation_table(data['results'], summarize(data['results'], data['metric']),
                          data['metric'], data.get('seconds'))


def transcribed(data: dict) -> str:
    """Tables copied cell by cell from an earlier README."""
    out = []
    for table in data['tables']:
        lines = ['| ' + ' | '.join(table['columns']) + ' |',
                 '|' + '---|' * len(table['columns'])]
        lines += ['| ' + ' | '.join(row) + ' |' for row in table['rows']]
        out.append('\n'.join(lines))
    return '\n\n'.join(out)


def kernels(data: dict) -> str:
    """``python -m benchmarks.kernel_compile --json``: each kernel's resources per GPU architecture."""
    return compiled_table([Compiled(**c) for c in data['kernels']])


def learning(data: dict) -> str:
    """``tools/learning_curves.py --json``: each model's metrics at every validation."""
    curves = data['curves']
    steps = ' / '.join(map(str, curves[0]['steps']))
    lines = [f'| model | iterations (batch) | metric at {steps} | chance |', '|---|---|---|---|']
    for found in curves:
        if found['steps'] != curves[0]['steps']:
            raise ValueError(f'{found["model"]} was validated at {found["steps"]}, the others '
                             f'at {curves[0]["steps"]}: run both with the same --val-every')
        metrics = ', '.join(
            f'{name} ' + ' / '.join(f'{v:.1f}' for v in values[:-1]) + f' / **{values[-1]:.1f}**'
            for name, values in found['metrics'].items())
        chance = '-' if found['chance'] is None else f'{found["chance"]:g}'
        lines.append(f'| {found["model"]} | {found["iters"]} (batch {found["batch"]}) | '
                     f'{metrics} | {chance} |')
    return '\n'.join(lines)


def _suite_total(run: dict) -> str:
    minutes, seconds = divmod(run['seconds'], 60)
    time = f'{minutes} min {seconds:02d} s'
    if 'skipped' not in run:  # a transcribed total
        return f'{time}, {run["tests"]} tests'
    failed = run['failures'] + run['errors']
    passed = run['tests'] - failed - run['skipped']
    return (f'{time}, {passed} passed, {run["skipped"]} skipped' +
            (f', {failed} failed' if failed else ''))


def test_suite(data: dict) -> str:
    """``tools/run_tests.sh``'s record of the whole suite (``python -m benchmarks.results``): wall
    time and counts, then each test file's time in this run ('latest') and in the runs kept
    beside it (``--label``), the slowest first."""
    line = f'The whole suite (`pytest` in `tools/run_tests.sh`): **{_suite_total(data)}**.'
    runs = {**data.get('baselines', {}), 'latest': data}
    if not any('files' in run for run in runs.values()):
        return line
    names = {label: f'{label} ({run["meta"]["commit"]})' for label, run in runs.items()}
    files = sorted({name for run in runs.values() for name in run.get('files', {})},
                   key=lambda name: (-max(run.get('files', {}).get(name, 0)
                                          for run in runs.values()), name))
    rows = ['| test file | ' + ' | '.join(names.values()) + ' |',
            '|---|' + '---:|' * len(runs)]
    for name in files:
        cells = [f'{run["files"][name]:.0f}' if name in run.get('files', {}) else '-'
                 for run in runs.values()]
        rows.append(f'| `{name}` | ' + ' | '.join(cells) + ' |')
    totals = [f'{sum(run["files"].values()):.0f}' if 'files' in run else '-'
              for run in runs.values()]
    rows.append('| sum of the files | ' + ' | '.join(totals) + ' |')
    rows.append('| **wall time** | ' + ' | '.join(f'**{run["seconds"]}**'
                                                  for run in runs.values()) + ' |')
    about = [f'*{names[label]}: {_suite_total(run)}; machine: {run["meta"]["machine"]}; date: '
             f'{run["meta"]["date"]}; command: `{run["meta"]["command"]}`.*'
             for label, run in runs.items() if label != 'latest']
    return '\n\n'.join([
        line, 'Seconds per test file: the time of its tests, set-up and teardown included (a '
        'session fixture that trains counts where it is first used). Under pytest-xdist the '
        'files of a run overlap in time, so they add up to more than its wall time.',
        '\n'.join(rows), *about])


class Table(NamedTuple):
    """A generated table: the results file it reads and how it renders it."""
    source: str  # path under results/
    render: Callable[[dict], str]
    settings: bool = True  # add the file's run settings (device, dtype, batch, torch)


TABLES: Dict[str, Table] = {
    'cpu-targets': Table('cpu_training/targets.json', targets),
    'cpu-targets-512': Table('cpu_training/targets512.json', targets),
    'cpu-detector-target': Table('cpu_training/detector.json', targets),
    'h200-targets': Table('gpu_h200/targets.json', targets),
    'h200-targets-compiled': Table('gpu_h200/targets_compiled.json', targets),
    'h200-detector-target': Table('gpu_h200/detector.json', targets),
    'cpu-breakdown-512': Table('cpu_training/breakdown512.json', breakdown),
    'cpu-breakdown': Table('cpu_training/breakdown.json', breakdown),
    'h200-breakdown': Table('gpu_h200/breakdown.json', breakdown),
    'cpu-launches': Table('cpu_training/launches.json', launches),
    'components-1024-train': Table('components_1024_train.json', components),
    'ablations-toy': Table('ablations_toy.json', ablations),
    'plain-vit-upernet': Table('plain_vit_upernet.json', ablations),
    'plain-vit-maskrcnn': Table('plain_vit_maskrcnn.json', ablations),
    'cpu-benchmark': Table('transcribed/cpu_benchmark_2026-12-03.json', transcribed),
    'cpu-targets-forward': Table('transcribed/cpu_targets_2026-12-03.json', transcribed),
    'saved-per-block': Table('transcribed/saved_per_block.json', transcribed),
    'components-224-512': Table('transcribed/components_224_512.json', transcribed),
    'components-512-1024': Table('transcribed/components_512_1024.json', transcribed),
    'onnx-export': Table('transcribed/onnx_export_2026-12-04.json', transcribed),
    'onnx-latency': Table('onnx_latency.json', latency_table, settings=False),
    'learning-curves': Table('learning_curves.json', learning),
    'learning-curves-opt-in': Table('learning_curves_opt_in.json', learning),
    'kernel-compile': Table('kernel_compile.json', kernels),
    'coco-eval': Table('coco_eval.json', speedup_table),
    'data-check': Table('data_check.json', check_table),
    'import-time': Table('import_time.json', import_table, settings=False),
    'test-suite': Table('test_suite.json', test_suite, settings=False),
    'cpu-checkpointing': Table('cpu_training/checkpointing.json', versus_table),
}


def render(name: str, results: str = RESULTS) -> str:
    """The text between the markers of table ``name``: settings, table, caption."""
    if name == 'results':  # the README table: anchors and the recorded runs
        runs = load_runs(osp.join(results, 'runs.json'))
        note = ('*Data: `results/runs.json` (`tools/collect_results.py --save`); no run '
                'recorded yet: the build machines have neither the datasets nor a GPU.*'
                if not runs else '*Data: `results/runs.json` (`tools/collect_results.py '
                '--save`); commit, date and machine per run.*')
        return f'{results_table(runs)}\n\n{note}'
    if name not in TABLES:
        raise KeyError(f'no generated table named {name!r}; known: results, '
                       f'{", ".join(TABLES)} (benchmarks/tables.py TABLES)')
    table = TABLES[name]
    data = load(table.source, results)
    settings = _meta_line(data) if table.settings else ''
    head = f'{settings}\n\n' if settings else ''
    return f'{head}{table.render(data)}\n\n{caption(table.source, data, results)}'


def expected_text(path: str, results: str = RESULTS) -> str:
    """The Markdown file ``path`` with each of its generated tables rendered anew."""
    with open(path) as f:
        text = f.read()
    for name in MARKER.findall(text):
        text = fill_table(text, name, render(name, results), path)
    return text


def markdown_files() -> list:
    found = [osp.join(REPO, 'README.md'),
             *sorted(glob.glob(osp.join(REPO, 'docs', 'en', '**', '*.md'), recursive=True))]
    return [path for path in found if MARKER.search(open(path).read())]


def main() -> int:
    parser = argparse.ArgumentParser(
        prog='python -m benchmarks.tables',
        description='Rewrite the measured tables of the README and the docs from results/.')
    parser.add_argument('files', nargs='*', help='Markdown files (default: README.md, docs/en)')
    parser.add_argument('--check', action='store_true',
                        help='write nothing; exit 1 when a file differs from what would be written')
    args = parser.parse_args()
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
        print('[make_tables] run python -m benchmarks.tables and commit the result')
    return int(args.check and bool(stale))


if __name__ == '__main__':
    sys.exit(main())
