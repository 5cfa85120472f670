"""The docs cannot rot: the site builds with warnings as errors, every ```python block of the
README and of docs/en runs (a config snippet is built into its model), and every measured
table is what python -m benchmarks.tables writes from results/, with its commit; the API page lists
every class mmvit5 registers."""
import ast
import glob
import importlib
import importlib.util
import inspect
import os
import os.path as osp
import pkgutil
import pydoc
import re
import subprocess
import sys

import pytest
import yaml  # mmengine's dependency
from mmengine import registry as root
from mmengine.config import Config
from mmengine.registry import DefaultScope, init_default_scope

import mmvit5
from benchmarks.results import begin_marker, end_marker
from benchmarks.tables import MARKER, TABLES, expected_text
from conftest import REPO, run_tool
from mmvit5.utils import check_config

PAGES = [osp.join(REPO, 'README.md'),
         *sorted(glob.glob(osp.join(REPO, 'docs', 'en', '**', '*.md'), recursive=True))]
BLOCK = re.compile(r'^```python\n(.*?)^```', re.DOTALL | re.MULTILINE)
# blocks that need a file another test makes, and that test runs them
RUN_ELSEWHERE = {f'docs/en/user_guides/onnx.md#{i}': 'tests/test_deploy_tasks.py runs it on '
                 'the graph it exports' for i in range(4)}
RUN_ELSEWHERE['docs/en/user_guides/hf.md#2'] = ('tests/test_hf.py runs it shortened (300 CPU '
                                                'steps here)')


def python_blocks():
    for page in PAGES:
        with open(page) as f:
            for i, match in enumerate(BLOCK.finditer(f.read())):
                block = f'{osp.relpath(page, REPO)}#{i}'
                marks = [pytest.mark.skip(RUN_ELSEWHERE[block])] if block in RUN_ELSEWHERE else []
                if page.endswith('hf.md') and importlib.util.find_spec('transformers') is None:
                    marks.append(pytest.mark.skip('transformers is not installed (extra hf)'))
                yield pytest.param(match.group(1), id=block, marks=marks)


def is_config(code: str) -> bool:
    """A config snippet assigns ``_base_`` at top level (mmengine's inheritance)."""
    return any(isinstance(node, ast.Assign) and any(getattr(t, 'id', '') == '_base_'
                                                    for t in node.targets)
               for node in ast.parse(code).body)


@pytest.fixture(scope='module')
def site(tmp_path_factory):
    """The site, built once for the tests that read it: (sphinx's result, the html folder)."""
    html = tmp_path_factory.mktemp('site') / 'html'
    result = subprocess.run([sys.executable, '-m', 'sphinx', '-W', '--keep-going', '-q', '-b',
                             'html', osp.join(REPO, 'docs', 'en'), str(html)],
                            capture_output=True, text=True, cwd=REPO)
    return result, html


def test_site_builds_without_warnings(site):
    result, html = site
    assert result.returncode == 0, result.stderr[-5000:]
    assert (html / 'api.html').read_text().count('ViT5') > 10


def test_published_site_is_built_as_the_tests_build_it():
    """Read the Docs builds docs/en with warnings as errors, after an install that brings the
    docs extra (and the stack autodoc imports)."""
    with open(osp.join(REPO, '.readthedocs.yaml')) as f:
        rtd = yaml.safe_load(f)
    assert rtd['sphinx'] == dict(configuration='docs/en/conf.py', fail_on_warning=True)
    assert osp.isfile(osp.join(REPO, rtd['sphinx']['configuration']))
    assert any('tools/install.sh' in step for step in rtd['build']['jobs']['install'])
    with open(osp.join(REPO, 'tools', 'install.sh')) as f:
        assert '-r "$here/requirements.txt"' in f.read()
    with open(osp.join(REPO, 'requirements.txt')) as f:
        assert '-r requirements/docs.txt' in f.read().splitlines()


def test_navigation_follows_a_users_tasks():
    """The sidebar lists pages in the order a user needs them (explicit toctrees, never a glob,
    which sorts alphabetically): install before the guides, the reference last."""
    with open(osp.join(REPO, 'docs', 'en', 'index.md')) as f:
        text = f.read()
    assert ':glob:' not in text
    entries = [line for block in re.findall(r'```\{toctree\}\n(.*?)```', text, re.DOTALL)
               for line in block.splitlines() if line and not line.startswith(':')]
    tasks = ['get_started/install', 'get_started/quickstart', 'user_guides/train_test',
             'user_guides/custom_dataset', 'user_guides/swap_backbone', 'user_guides/checkpoints',
             'advanced/training_path', 'benchmarks/results', 'notes/faq', 'api']
    assert [e for e in entries if e in tasks] == tasks
    assert entries[-1] == 'api'


def registered_by_mmvit5() -> dict:
    """``{registered name: class}`` of everything any mmvit5 module registers, in mmengine's
    root registries or their mmdet / mmseg / mmpretrain children."""
    for package in ('mmdet', 'mmseg', 'mmpretrain'):  # their child registries
        importlib.import_module(f'{package}.registry')
    for module in pkgutil.walk_packages(mmvit5.__path__, 'mmvit5.'):
        if module.name != 'mmvit5.ops.ext':  # loaded as mmcv._ext; a copy would split its state
            importlib.import_module(module.name)  # a module `import mmvit5` skips registers too
    found, todo = {}, [r for r in vars(root).values() if isinstance(r, root.Registry)]
    while todo:
        registry = todo.pop()
        todo.extend(registry.children.values())
        found.update({f'{registry.scope}.{registry.name}: {name}': obj
                      for name, obj in registry.module_dict.items()
                      if getattr(obj, '__module__', '').startswith('mmvit5.')
                      and inspect.isclass(obj)})  # not compat's Adafactor: transformers' class
    return found


def test_api_reference_lists_every_registered_class(site):
    """A config's ``type`` can be looked up on the API page, and its forward shows no
    inherited nn.Module boilerplate."""
    registered = registered_by_mmvit5()
    assert {'ViT5', 'DPTDepthHead', 'StateDictConsistencyHook', 'WorldSizeChangeHook'} <= {
        obj.__name__ for obj in registered.values()}
    page = (site[1] / 'api.html').read_text()
    missing = [f'{key} ({obj.__module__}.{obj.__qualname__})'
               for key, obj in sorted(registered.items())
               if not re.search(rf'id="mmvit5(\.\w+)*\.{obj.__qualname__}"', page)]
    assert not missing, f'not in docs/en/api.rst: {missing}; add an autoclass for each'
    assert 'Define the computation performed at every call' not in page


def test_api_reference_documents_mmvit5_code_only(site):
    """Every method on the API page is written in mmvit5: none is an upstream one it inherits
    or borrows (pycocotools' ``COCOeval.summarize`` came with its typos)."""
    page = (site[1] / 'api.html').read_text()
    foreign = []
    for name in sorted(set(re.findall(r'id="(mmvit5(?:\.\w+)+)"', page))):
        obj = pydoc.locate(name)  # None: an instance attribute
        owner = getattr(getattr(obj, '__func__', obj), '__module__', None) or 'mmvit5'
        if callable(obj) and not owner.startswith('mmvit5'):
            foreign.append(f'{name} (from {owner})')
    assert not foreign, f'docs/en/api.rst documents upstream code: {foreign}'


def test_repository_licence_and_citation_agree():
    """One repository address (setup.py's ``url``) in the citation, the README and the docs'
    source link; the licence is Apache-2.0 in full; the citation names this version."""
    with open(osp.join(REPO, 'setup.py')) as f:
        url = re.search(r"url='([^']+)'", f.read()).group(1)
    with open(osp.join(REPO, 'CITATION.cff')) as f:
        citation = yaml.safe_load(f)
    assert citation['repository-code'] == url
    assert citation['version'] == mmvit5.__version__
    assert citation['preferred-citation']['url'] == 'https://arxiv.org/abs/2602.08071'
    with open(osp.join(REPO, 'README.md')) as f:
        readme = f.read()
    assert f'{url}/issues' in readme and 'arXiv:2602.08071' in readme
    assert f'version = {{{mmvit5.__version__}}}' in readme
    with open(osp.join(REPO, 'docs', 'en', 'conf.py')) as f:
        assert f"REPOSITORY = '{url}'" in f.read()
    with open(osp.join(REPO, 'LICENSE')) as f:
        licence = f.read()
    assert 'Apache License' in licence and 'END OF TERMS AND CONDITIONS' in licence


@pytest.mark.parametrize('code', python_blocks())
def test_python_block_runs(code, tmp_path, monkeypatch):
    """Each block on its own: a config is built as a user's file beside configs/ would be;
    any other block is executed from the repository root, as a reader would run it."""
    if not is_config(code):
        monkeypatch.chdir(REPO)
        # as in a reader's new interpreter: no default scope that an earlier test set
        monkeypatch.setattr(DefaultScope, '_instance_dict', type(DefaultScope._instance_dict)())
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


def test_no_line_is_lost_to_myst():
    """MyST reads a line that starts with ``%`` as a comment and drops it: a sentence that
    wraps before ``% of ...`` loses its end on the site (and not on GitHub). No text line may
    start so."""
    lost = []
    for page in PAGES:
        fenced = False
        with open(page) as f:
            for number, line in enumerate(f, 1):
                if line.lstrip().startswith(('```', '~~~')):
                    fenced = not fenced
                elif not fenced and line.lstrip().startswith('%'):
                    lost.append(f'{osp.relpath(page, REPO)}:{number}: {line.strip()}')
    assert not lost, 'MyST drops these lines (a leading %); rewrap them:\n' + '\n'.join(lost)


def test_generated_tables_match_the_results_files():
    stale = [osp.relpath(p, REPO) for p in PAGES if open(p).read() != expected_text(p)]
    assert not stale, f'{stale}: run python -m benchmarks.tables and commit the result'


def test_every_table_is_placed_and_says_where_and_when():
    placed = [name for page in PAGES for name in MARKER.findall(open(page).read())]
    assert sorted(set(placed)) == sorted({'results', *TABLES})
    for page in PAGES:
        text = open(page).read()
        for name in MARKER.findall(text):
            body = text.split(begin_marker(name), 1)[1].split(end_marker(name), 1)[0]
            if name != 'results':  # that one has a commit, date, machine column per run
                assert all(f'{key}: ' in body for key in ('machine', 'date', 'commit')), name
                # a caption names a commit hash, never only "not recorded" (issue 31)
                assert re.search(r'commit: [^;]*\b[0-9a-f]{7}\b', body), name


def test_every_commit_the_docs_name_is_in_the_history():
    """A commit named by a caption, the changelog or the text is one a reader can check out:
    a typo'd hash would pass the test above. A shallow clone lacks the history, so this needs
    a full one."""
    if subprocess.run(['git', '-C', REPO, 'rev-parse', '--is-shallow-repository'],
                      capture_output=True, text=True).stdout.strip() != 'false':
        pytest.skip('not a full git clone: the named commits cannot be looked up')
    # a short hash: 7 hex digits with a letter and a digit (no number or word looks like it)
    short_hash = re.compile(r'\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7}\b')
    named = {commit for page in PAGES for commit in short_hash.findall(open(page).read())}
    assert len(named) >= 30  # the captions' and the changelog's
    missing = [c for c in sorted(named) if subprocess.run(
        ['git', '-C', REPO, 'cat-file', '-e', f'{c}^{{commit}}'], capture_output=True).returncode]
    assert not missing, f'commits named in the docs that are not in the history: {missing}'


def test_make_tables_check_names_a_stale_file(tmp_path):
    page = tmp_path / 'page.md'
    name = 'ablations-toy'
    page.write_text(f'# x\n\n{begin_marker(name)}\nold\n{end_marker(name)}\n')
    tables = [sys.executable, '-m', 'benchmarks.tables']
    status, out = run_tool(tables + ['--check', str(page)], cwd=REPO, check=False)
    assert status == 1 and 'page.md: out of date' in out
    run_tool(tables + [str(page)], cwd=REPO)
    assert 'no-abs-pos' in page.read_text()
    run_tool(tables + ['--check', str(page)], cwd=REPO)


def test_learning_table_refuses_curves_of_different_validations():
    from benchmarks.tables import learning
    curve = dict(model='M', iters=8, batch=2, chance=0, steps=[4, 8],
                 metrics={'bbox mAP': [10.0, 20.0]})
    assert '| M | 8 (batch 2) | bbox mAP 10.0 / **20.0** | 0 |' in learning(dict(curves=[curve]))
    other = dict(curve, model='U', steps=[2, 4, 6, 8], metrics={'mIoU': [1.0, 2.0, 3.0, 4.0]})
    with pytest.raises(ValueError, match=r'U was validated at \[2, 4, 6, 8\].*same --val-every'):
        learning(dict(curves=[curve, other]))


# ----------------------------------------------------------------- cited documents
DOC_PATH = re.compile(r'(?<![\w/.-])(?:docs/en/)?((?:user_guides|get_started|advanced|benchmarks)'
                      r'/[\w.-]+\.md)(#[\w-]+)?')
README_SECTION = re.compile(r'README(?:\.md)?(?:,|\'s)?\s+(?:section\s+)?"([^"]+)"')


def headings(page: str) -> list:
    """The headings of a Markdown page, fenced code blocks left out."""
    found, fenced = [], False
    with open(page, encoding='utf-8') as f:
        for line in f:
            if line.startswith('```'):
                fenced = not fenced
            elif not fenced and re.match(r'#{1,6} ', line):
                found.append(line.lstrip('#').strip())
    return found


def anchor(heading: str) -> str:
    """MyST's (and GitHub's) anchor of a heading: lower case, punctuation dropped, spaces to
    hyphens."""
    return re.sub(r'[^\w\- ]', '', heading.lower()).replace(' ', '-')


def cited_documents(text: str):
    """(page relative to docs/en, anchor or None) and (None, README section) cited in text."""
    for match in DOC_PATH.finditer(text):
        yield match.group(1), (match.group(2) or '#')[1:] or None
    for match in README_SECTION.finditer(text):
        yield None, match.group(1)


def code_strings(path: str):
    """Every string constant of a Python file, implicit concatenations joined as Python joins
    them (a message split over lines is one string), f-strings' literal parts included."""
    with open(path, encoding='utf-8') as f:
        tree = ast.parse(f.read())
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.value


def test_cited_documents_parse():
    assert list(cited_documents('see README, "Data" and docs/en/user_guides/onnx.md#fixed'
                                ' (user_guides/cluster.md)')) == [
        ('user_guides/onnx.md', 'fixed'), ('user_guides/cluster.md', None), (None, 'Data')]


def test_every_document_a_message_cites_exists():
    """Error messages and docstrings of the package, the tools and the benchmarks send the
    reader to docs/en pages, their sections (#anchors) and README sections: all exist."""
    readme = headings(osp.join(REPO, 'README.md'))
    sources = [p for d in ('mmvit5', 'tools', 'benchmarks')
               for p in glob.glob(osp.join(REPO, d, '**', '*.py'), recursive=True)]
    cited, missing = 0, []
    for source in sources:
        for text in code_strings(source):
            for page, section in cited_documents(text):
                cited += 1
                where = osp.relpath(source, REPO)
                if page is None:
                    if section not in readme:
                        missing.append(f'{where}: README section "{section}" (README has '
                                       f'{readme})')
                    continue
                path = osp.join(REPO, 'docs', 'en', page)
                if not osp.isfile(path):
                    missing.append(f'{where}: docs/en/{page} does not exist')
                elif section and section not in map(anchor, headings(path)):
                    missing.append(f'{where}: docs/en/{page} has no section #{section}')
    assert cited > 5  # the scan finds the citations at all
    assert not missing, '\n'.join(missing)
