"""Results harness: what a finished work dir measured, and the README results table.

``tools/train.py`` records the config, the mmvit5 commit, the date and the machine of each run
in the work dir (:func:`record_run`); :func:`collect_runs` reads them back with the latest
evaluation: the metrics ``tools/test.py`` wrote into the same work dir, else the last
validation of training. :func:`save_runs` keeps them in ``results/runs.json``, from which
``python -m benchmarks.tables`` writes the table. :func:`results_table` puts the runs next to the
published anchors; a recipe without a run reads "not yet measured", and a run of any other
config (a smoke run, a toy run) is listed under its own name, never as a shipped recipe.
"""
import argparse
import glob
import json
import os
import os.path as osp
import re
import subprocess
import time
from dataclasses import asdict, dataclass, field
from typing import Dict, List, NamedTuple, Optional, Sequence

RUN_FILE = 'mmvit5_run.json'
NOT_MEASURED = 'not yet measured'
NOT_RECORDED = 'not recorded'


def begin_marker(name: str) -> str:
    """The comment line after which a generated table ``name`` starts in a Markdown file."""
    return f'<!-- {name} table: generated from results/ by python -m benchmarks.tables; do not edit -->'


def end_marker(name: str) -> str:
    return f'<!-- end of {name} table -->'


BEGIN, END = begin_marker('results'), end_marker('results')
# (metric keys, how the table shows them): mmdet reports AP as a fraction, mmseg mIoU in %
# panoptic quality in %, depth RMSE in metres; a panoptic run also reports AP: PQ comes first
METRICS = ((('coco_panoptic/PQ', ), 1.0), (('coco/bbox_mAP', 'coco/segm_mAP'), 100.0),
           (('mIoU', ), 1.0), (('rmse', ), 1.0))


class Anchor(NamedTuple):
    """A row of the table: a published figure, and the config that would reproduce it here."""
    task: str
    model: str
    published: str
    config: Optional[str] = None  # None: a reference row with no mmvit5 counterpart


COCO, ADE = 'COCO box / mask AP', 'ADE20K mIoU'
PANOPTIC, NYU = 'COCO panoptic PQ', 'NYU-Depth-v2 RMSE (m)'
SIZES = (('S', '-s'), ('B', ''), ('L', '-l'))  # name and config prefix
ANCHORS = (
    Anchor(COCO, 'ViTDet ViT-B Mask R-CNN (MAE, 100 ep)',
           '51.6 / 45.9 (detectron2), 51.6 / 45.7 (mmdet)'),
    Anchor(COCO, 'ViTDet ViT-B Cascade Mask R-CNN (MAE, 100 ep)', '54.0 / 46.7'),
    *(Anchor(COCO, f'ViT5-{size} {head}', '(no COCO figure in the paper)',
             f'vit5{prefix}_{name}_coco.py')
      for head, name in (('Mask R-CNN', 'maskrcnn'), ('Cascade Mask R-CNN', 'cascade-maskrcnn'))
      for size, prefix in SIZES),
    Anchor(ADE, 'DeiT-III-B UperNet', "49.3 (ViT-5 paper's DeiT-III row)"),
    Anchor(ADE, 'BEiT-B UperNet (640 crops, mmseg)', '53.1'),
    Anchor(ADE, 'MAE-B UperNet (512 crops)', '48.1 (MAE paper)'),
    Anchor(ADE, 'ViT5-S UperNet', '(not in the paper)', 'vit5-s_upernet_ade20k.py'),
    Anchor(ADE, 'ViT5-B UperNet', '(not in the paper)', 'vit5_upernet_ade20k.py'),
    Anchor(ADE, 'ViT5-B UperNet, 384 checkpoint', '(not in the paper)',
           'vit5-b384_upernet_ade20k.py'),
    Anchor(ADE, 'ViT5-L UperNet', '52.0 (ViT-5 paper)', 'vit5-l_upernet_ade20k.py'),
    Anchor(ADE, 'ViT5-L UperNet, 384 checkpoint', '(not in the paper)',
           'vit5-l384_upernet_ade20k.py'),
    # Mask2Former and depth: docs/en/user_guides/{mask2former,depth}.md cite each figure
    Anchor(ADE, 'ViT-Adapter-L (BEiT-L) Mask2Former (640 crops)', '58.3 single-scale (ViT-Adapter)'),
    *(Anchor(ADE, f'ViT5-{size} Mask2Former', '(not in the paper)',
             f'vit5{prefix}_mask2former_ade20k.py') for size, prefix in SIZES[1:]),
    Anchor(COCO, 'ViT-Adapter-L (BEiTv2-L) Mask2Former, panoptic-trained (3x + MS)',
           '52.9 / 48.9 (ViT-Adapter)'),
    *(Anchor(COCO, f'ViT5-{size} Mask2Former (instance)', '(not in the paper)',
             f'vit5{prefix}_mask2former-ins_coco.py') for size, prefix in SIZES[1:]),
    Anchor(PANOPTIC, 'ViT-Adapter-L (BEiTv2-L) Mask2Former (3x + MS)', '58.4 (ViT-Adapter)'),
    *(Anchor(PANOPTIC, f'ViT5-{size} Mask2Former', '(not in the paper)',
             f'vit5{prefix}_mask2former-pan_coco.py') for size, prefix in SIZES[1:]),
    Anchor(NYU, 'DINOv2 ViT-B/14 / ViT-L/14, frozen, linear on 4 layers', '0.362 / 0.333 (DINOv2 model card)'),
    Anchor(NYU, 'DPT-Hybrid (fine-tuned)', '0.357 (DPT paper)'),
    *(Anchor(NYU, f'ViT5-{size} DPT head', '(not in the paper)', f'vit5{prefix}_depth_nyu.py')
      for size, prefix in SIZES[1:]),
)


@dataclass
class Run:
    """One finished work dir."""
    work_dir: str
    config: str  # file name of the config that ran, e.g. 'vit5_maskrcnn_coco.py'
    commit: str
    max_iters: int
    iters: int  # iterations trained
    metrics: Dict[str, float] = field(default_factory=dict)
    evaluated_by: str = ''  # 'test' (tools/test.py) or 'val' (validation during training)
    date: str = NOT_RECORDED  # UTC date the training started
    machine: str = NOT_RECORDED  # e.g. '8 x NVIDIA H100 80GB HBM3'


def git_commit(path: str) -> str:
    """Short commit of the checkout holding ``path``, '+dirty' with uncommitted changes
    outside ``results/`` (what the tools write while measuring does not change the code
    measured: the second row of a results file would otherwise name a dirty commit).

    ``MMVIT5_COMMIT`` wins where set: a copy of the checkout without ``.git`` (a lent GPU
    machine gets the working tree only) can still name what it measured.
    """
    if os.environ.get('MMVIT5_COMMIT'):
        return os.environ['MMVIT5_COMMIT']
    def git(*args: str) -> str:
        return subprocess.run(['git', '-C', path, *args], capture_output=True, text=True,
                              check=True).stdout.strip()
    try:
        commit = git('rev-parse', '--short', 'HEAD')
        dirty = git('status', '--porcelain', '--untracked-files=no', '--', '.',
                    ':(top,exclude)results')
    except (OSError, subprocess.CalledProcessError):
        return 'unknown (not a git checkout)'
    return commit + ('+dirty' if dirty else '')


def machine() -> str:
    """The devices a run trains on: 'N x <GPU name>' with CUDA, else the CPU count."""
    import torch
    if torch.cuda.is_available():
        return f'{torch.cuda.device_count()} x {torch.cuda.get_device_name()}'
    return f'CPU, {os.cpu_count()} cores'


def stamped(meta: dict, command: str) -> dict:
    """``meta`` plus what a table's caption names: the date, the commit and ``command``."""
    return dict(meta, date=time.strftime('%Y-%m-%d', time.gmtime()),
                commit=git_commit(osp.dirname(osp.abspath(__file__))), command=command)


def write_results(path: str, meta: dict, command: str, **records) -> None:
    """Write a tool's measurements to ``path`` (JSON under ``results/``) with what a table's
    caption names (:func:`stamped`)."""
    os.makedirs(osp.dirname(osp.abspath(path)), exist_ok=True)
    with open(path, 'w') as f:
        json.dump(dict(meta=stamped(meta, command), **records), f, indent=1)


def record_run(work_dir: str, config_path: str, max_iters: int) -> None:
    """Write what the harness needs and the work dir does not say: config, commit, date and
    machine."""
    os.makedirs(work_dir, exist_ok=True)
    info = dict(config=osp.basename(config_path), config_path=osp.abspath(config_path),
                commit=git_commit(osp.dirname(osp.abspath(__file__))), max_iters=max_iters,
                date=time.strftime('%Y-%m-%d', time.gmtime()), machine=machine())
    with open(osp.join(work_dir, RUN_FILE), 'w') as f:
        json.dump(info, f, indent=1)


def suite_file_times(junit) -> Dict[str, float]:
    """``{'tests/test_x.py': seconds}`` from pytest's JUnit XML (its root element): the time
    of each test file's tests (set-up, call and teardown; a session fixture's set-up with the
    first test that asks for it); under pytest-xdist a sum over the workers, not a wall
    time."""
    files: Dict[str, float] = {}
    for case in junit.iter('testcase'):
        parts = case.get('classname', '').split('.')
        module = next((i for i, part in enumerate(parts) if part.startswith('test_')), None)
        if module is not None:
            name = '/'.join(parts[:module + 1]) + '.py'
            files[name] = files.get(name, 0.0) + float(case.get('time') or 0.0)
    return {name: round(seconds, 1) for name, seconds in sorted(files.items())}


def record_test_suite(path: str, junit: str, seconds: int, command: str, fresh: bool = False,
                      label: Optional[str] = None) -> None:
    """``results/test_suite.json``: a run of the whole test suite, its wall time, its counts
    and each file's time (from pytest's JUnit XML ``junit``), written by
    ``python -m benchmarks.results`` (which ``tools/run_tests.sh --record`` runs after the
    whole suite).

    Without ``label`` the run is the file's own (the docs' suite time); with one, it is kept
    under ``baselines[label]`` (replacing an earlier run of that label) as a column of the
    per-file table, beside the file's own run. The commit recorded is this checkout's, or
    ``MMVIT5_COMMIT`` for a run of another tree."""
    import xml.etree.ElementTree as ElementTree
    root = ElementTree.parse(junit).getroot()
    suite = root if root.tag == 'testsuite' else root.find('testsuite')
    counts = {key: int(suite.get(key, 0)) for key in ('tests', 'failures', 'errors', 'skipped')}
    where = machine() + (', a fresh virtualenv' if fresh else '')
    run = dict(meta=stamped(dict(machine=where), command), seconds=int(seconds), **counts,
               files=suite_file_times(root))
    data = {}
    if osp.isfile(path):
        with open(path) as f:
            data = json.load(f)
    baselines = data.get('baselines', {})
    if label is None:
        data = run
    else:
        baselines[label] = run
    os.makedirs(osp.dirname(osp.abspath(path)), exist_ok=True)
    with open(path, 'w') as f:
        json.dump(dict(data, baselines=baselines), f, indent=1)


def _read_jsonl(path: str) -> List[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def _has_metric(record: dict) -> bool:
    return any(key in record for keys, _ in METRICS for key in keys)


def read_run(work_dir: str) -> Run:
    """The run of one work dir; FileNotFoundError when it holds no tools/train.py run."""
    info_path = osp.join(work_dir, RUN_FILE)
    if not osp.isfile(info_path):
        raise FileNotFoundError(f'{work_dir} has no {RUN_FILE}: collect_results reads work '
                                'dirs of tools/train.py runs (which record config and commit)')
    with open(info_path) as f:
        info = json.load(f)
    run = Run(work_dir, info['config'], info['commit'], info['max_iters'], iters=0,
              date=info.get('date', NOT_RECORDED), machine=info.get('machine', NOT_RECORDED))
    last = osp.join(work_dir, 'last_checkpoint')
    if osp.isfile(last):  # the logger may skip the final iteration; the last save does not
        with open(last) as f:
            saved = re.search(r'iter_(\d+)\.pth', f.read())
        run.iters = int(saved.group(1)) if saved else 0
    # mmengine writes one timestamped folder per train / test invocation
    for stamp in sorted(d for d in os.listdir(work_dir) if osp.isdir(osp.join(work_dir, d))):
        scalars = osp.join(work_dir, stamp, 'vis_data', 'scalars.json')
        records = _read_jsonl(scalars) if osp.isfile(scalars) else []
        steps = [r['step'] for r in records if 'loss' in r]
        run.iters = max([run.iters, *steps])
        evaluations = [r for r in records if _has_metric(r)]
        if evaluations:
            run.metrics, run.evaluated_by = evaluations[-1], 'val'
        test = osp.join(work_dir, stamp, f'{stamp}.json')
        if osp.isfile(test) and not steps:
            with open(test) as f:
                run.metrics, run.evaluated_by = json.load(f), 'test'
    return run


def collect_runs(work_dirs: Sequence[str]) -> List[Run]:
    """Runs of ``work_dirs`` (each a tools/train.py work dir, or a folder of them)."""
    runs = []
    for work_dir in work_dirs:
        if osp.isfile(osp.join(work_dir, RUN_FILE)):
            runs.append(read_run(work_dir))
            continue
        found = sorted(glob.glob(osp.join(work_dir, '*', RUN_FILE)))
        if not found:
            raise FileNotFoundError(f'no {RUN_FILE} in {work_dir} or its sub-folders: pass '
                                    'work dirs of tools/train.py runs')
        runs.extend(read_run(osp.dirname(path)) for path in found)
    return runs


def format_metrics(run: Run) -> str:
    """'51.6 / 45.9' (box / mask AP), '47.5' (mIoU, PQ) or '0.345' (RMSE), with the iterations
    it took."""
    for keys, scale in METRICS:
        if keys[0] in run.metrics:
            digits = 3 if keys[0] == 'rmse' else 1
            values = ' / '.join(f'{run.metrics[k] * scale:.{digits}f}' for k in keys
                                if k in run.metrics)
            return (f'{values} ({run.evaluated_by} after {run.iters:,} of '
                    f'{run.max_iters:,} it)')
    return f'no evaluation yet ({run.iters:,} of {run.max_iters:,} it)'


def _provenance(run: Run) -> str:
    return f'{run.commit}, {run.date}, {run.machine}'


def results_table(runs: Sequence[Run]) -> str:
    """The README results table: every anchor, then every run of another config."""
    latest = {run.config: run for run in runs}  # a later work dir of a config wins
    lines = ['| task | model | published | config | mmvit5 | commit, date, machine |',
             '|---|---|---|---|---|---|']
    for anchor in ANCHORS:
        run = latest.pop(anchor.config, None) if anchor.config else None
        config = f'`{anchor.config}`' if anchor.config else '-'
        measured = format_metrics(run) if run else (NOT_MEASURED if anchor.config else '-')
        lines.append(f'| {anchor.task} | {anchor.model} | {anchor.published} | {config} | '
                     f'{measured} | {_provenance(run) if run else "-"} |')
    for run in latest.values():
        task = next((task for key, task in (('coco_panoptic/PQ', PANOPTIC), ('mIoU', ADE),
                                             ('rmse', NYU)) if key in run.metrics), COCO)
        lines.append(f'| {task} | (not a shipped recipe) | - | `{run.config}` | '
                     f'{format_metrics(run)} | {_provenance(run)} |')
    return '\n'.join(lines)


def save_runs(path: str, runs: Sequence[Run]) -> List[Run]:
    """Add ``runs`` to the records of ``path`` (a run of the same work dir replaces its
    record); returns every record, oldest first."""
    kept = {run.work_dir: run for run in load_runs(path) + list(runs)}
    with open(path, 'w') as f:
        json.dump([asdict(run) for run in kept.values()], f, indent=1)
        f.write('\n')
    return list(kept.values())


def load_runs(path: str) -> List[Run]:
    """The run records of ``path``; none when the file does not exist yet."""
    if not osp.isfile(path):
        return []
    with open(path) as f:
        return [Run(**record) for record in json.load(f)]


def fill_table(text: str, name: str, table: str, where: str = 'the text') -> str:
    """``text`` with the generated table ``name`` (between its :func:`begin_marker` and
    :func:`end_marker` lines) replaced by ``table``."""
    begin, end = begin_marker(name), end_marker(name)
    if begin not in text or end not in text:
        raise ValueError(f'{where} has no markers for the {name} table; put the lines {begin!r} '
                         f'and {end!r} where the table goes')
    head, rest = text.split(begin, 1)
    return f'{head}{begin}\n{table}\n{end}{rest.split(end, 1)[1]}'


def write_into(path: str, table: str, name: str = 'results') -> None:
    """Replace the generated table ``name`` in the Markdown file ``path``."""
    with open(path) as f:
        text = f.read()
    text = fill_table(text, name, table, path)
    with open(path, 'w') as f:
        f.write(text)


def main() -> None:
    parser = argparse.ArgumentParser(
        prog='python -m benchmarks.results',
        description="Record a run of the whole test suite in results/test_suite.json (what "
        "bash tools/run_tests.sh --record does), read from pytest's JUnit XML.",
        epilog='a run of another commit, kept as a column of the per-file table: '
        'MMVIT5_COMMIT=4d5fe0b python -m benchmarks.results JUNIT SECONDS --label before '
        "--command 'python -m pytest --junitxml=JUNIT'")
    parser.add_argument('junit', help="pytest's --junitxml file of the run")
    parser.add_argument('seconds', type=int, help='wall time of the run')
    parser.add_argument('--command', required=True, help='the command that ran the suite')
    parser.add_argument('--fresh', action='store_true',
                        help='the run was in a new virtualenv (bash tools/run_tests.sh --fresh)')
    parser.add_argument('--label', help='keep the run as this column of the per-file table '
                        "(e.g. 'before') instead of as the suite's own run")
    parser.add_argument('--out', default=osp.join(osp.dirname(osp.dirname(osp.abspath(__file__))), 'results',
                                             'test_suite.json'))
    args = parser.parse_args()
    record_test_suite(args.out, args.junit, args.seconds, args.command, fresh=args.fresh,
                      label=args.label)


if __name__ == '__main__':
    main()
