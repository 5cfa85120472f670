"""The docs cannot rot: the site builds with warnings as errors, every ```python block of the
README and of docs/en runs (a config snippet is built into its model), and every measured
table is what tools/make_tables.py writes from results/."""
import ast
import glob
import os
import os.path as osp
import re
import subprocess
import sys

import pytest
from mmengine.config import Config
from mmengine.registry import DefaultScope, init_default_scope

from benchmarks.results import begin_marker, end_marker
from conftest import REPO, run_tool, tool
from mmvit5.utils import check_config

sys.path.insert(0, REPO)  # benchmarks/ beside tools/, as the tools import it
from benchmarks.tables import MARKER, TABLES, expected_text  # noqa: E402

PAGES = [osp.join(REPO, 'README.md'),
         *sorted(glob.glob(osp.join(REPO, 'docs', 'en', '**', '*.md'), recursive=True))]
BLOCK = re.compile(r'^```python\n(.*?)^```', re.DOTALL | re.MULTILINE)
# blocks that need a file another test makes, and that test runs them
RUN_ELSEWHERE = {
    'docs/en/user_guides/onnx.md#0': 'tests/test_deploy.py runs it on the graph it exports'}


def python_blocks():
    for page in PAGES:
        with open(page) as f:
            for i, match in enumerate(BLOCK.finditer(f.read())):
                block = f'{osp.relpath(page, REPO)}#{i}'
                marks = [pytest.mark.skip(RUN_ELSEWHERE[block])] if block in RUN_ELSEWHERE else []
                yield pytest.param(match.group(1), id=block, marks=marks)


def is_config(code: str) -> bool:
    """A config snippet assigns ``_base_`` at top level (mmengine's inheritance)."""
    return any(isinstance(node, ast.Assign) and any(getattr(t, 'id', '') == '_base_'
                                                    for t in node.targets)
               for node in ast.parse(code).body)


def test_site_builds_without_warnings(tmp_path):
    result = subprocess.run([sys.executable, '-m', 'sphinx', '-W', '--keep-going', '-q', '-b',
                             'html', osp.join(REPO, 'docs', 'en'), str(tmp_path / 'html')],
                            capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 0, result.stderr[-5000:]
    assert (tmp_path / 'html' / 'api.html').read_text().count('ViT5') > 10


@pytest.mark.parametrize('code', python_blocks())
def test_python_block_runs(code, tmp_path, monkeypatch):
    """Each block on its own: a config is built as a user's file beside configs/ would be;
    any other block is executed from the repository root, as a reader would run it."""
    if not is_config(code):
        monkeypatch.chdir(REPO)
        exec(compile(code, '<docs block>', 'exec'), {'__name__': '__docs__'})
        return
    os.symlink(osp.join(REPO, 'configs'), tmp_path / 'configs')
    path = tmp_path / 'my_configs' / 'snippet.py'
    path.parent.mkdir()
    path.write_text(code)
    cfg = Config.fromfile(str(path))
    check_config(cfg, str(path), check_data=False)  # scope, custom_imports, channel widths
    init_default_scope(cfg.default_scope)
    registry = __import__(f'{cfg.default_scope}.registry', fromlist=['MODELS'])
    with DefaultScope.overwrite_default_scope(cfg.default_scope):
        model = registry.MODELS.build(cfg.model)
    assert type(model.backbone).__name__ == 'ViT5'


def test_every_page_has_a_block_or_none_is_lost():
    """The collection above sees the blocks (a changed fence would silently test nothing)."""
    blocks = list(python_blocks())
    assert len(blocks) >= 10
    assert sum(is_config(b.values[0]) for b in blocks) >= 3


def test_generated_tables_match_the_results_files():
    stale = [osp.relpath(p, REPO) for p in PAGES if open(p).read() != expected_text(p)]
    assert not stale, f'{stale}: run python tools/make_tables.py and commit the result'


def test_every_table_is_placed_and_says_where_and_when():
    placed = [name for page in PAGES for name in MARKER.findall(open(page).read())]
    assert sorted(set(placed)) == sorted({'results', *TABLES})
    for page in PAGES:
        text = open(page).read()
        for name in MARKER.findall(text):
            body = text.split(begin_marker(name), 1)[1].split(end_marker(name), 1)[0]
            if name != 'results':  # that one has a commit, date, machine column per run
                assert all(f'{key}: ' in body for key in ('machine', 'date', 'commit')), name


def test_make_tables_check_names_a_stale_file(tmp_path):
    page = tmp_path / 'page.md'
    name = 'ablations-toy'
    page.write_text(f'# x\n\n{begin_marker(name)}\nold\n{end_marker(name)}\n')
    status, out = run_tool(tool('make_tables.py') + ['--check', str(page)], cwd=REPO,
                           check=False)
    assert status == 1 and 'page.md: out of date' in out
    run_tool(tool('make_tables.py') + [str(page)], cwd=REPO)
    assert 'no-abs-pos' in page.read_text()
    run_tool(tool('make_tables.py') + ['--check', str(page)], cwd=REPO)


def test_learning_table_refuses_curves_of_different_validations():
    from benchmarks.tables import learning
    curve = dict(model='M', iters=8, batch=2, chance=0, steps=[4, 8],
                 metrics={'bbox mAP': [10.0, 20.0]})
    assert '| M | 8 (batch 2) | bbox mAP 10.0 / **20.0** | 0 |' in learning(dict(curves=[curve]))
    other = dict(curve, model='U', steps=[2, 4, 6, 8], metrics={'mIoU': [1.0, 2.0, 3.0, 4.0]})
    with pytest.raises(ValueError, match=r'U was validated at \[2, 4, 6, 8\].*same --val-every'):
        learning(dict(curves=[curve, other]))
