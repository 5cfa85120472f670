"""The tree passes ruff (ruff.toml: pyflakes, pycodestyle, import order), as pre-commit runs it."""
import os
import os.path as osp
import shutil
import subprocess
import sys

import pytest

REPO = osp.dirname(osp.dirname(osp.abspath(__file__)))


def ruff_command():
    if shutil.which('ruff'):
        return ['ruff']
    pytest.importorskip('ruff', reason='ruff is in requirements.txt (tests: lint)')
    return [sys.executable, '-m', 'ruff']


def test_ruff_check_passes():
    proc = subprocess.run([*ruff_command(), 'check', '--no-cache', '.'], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]


def test_ruff_finds_what_it_should(tmp_path):
    """The configured rules fire (an unused import, misordered imports, a long line)."""
    bad = tmp_path / 'bad.py'
    bad.write_text('import sys\nimport os\n\nx = 1' + ' + 1' * 30 + '\n')
    proc = subprocess.run([*ruff_command(), 'check', '--no-cache', '--config',
                           osp.join(REPO, 'ruff.toml'), '--output-format', 'concise', str(bad)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    for rule in ('F401', 'I001', 'E501'):
        assert rule in proc.stdout, proc.stdout


def lint_imports(*args: str, cwd: str = REPO) -> subprocess.CompletedProcess:
    pytest.importorskip('importlinter', reason='import-linter is in requirements/tests.txt')
    return subprocess.run([sys.executable, '-c', 'from importlinter.cli import lint_imports_command'
                           ' as c; c()', '--no-cache', *args], cwd=cwd, capture_output=True,
                          text=True, timeout=300, env=dict(os.environ, PYTHONPATH=cwd))


def test_layers_import_only_downward():
    """.importlinter's contracts hold: models/ imports nothing of utils, engine, deploy or
    evaluation, the kernels nothing of the layers above them (function-level imports count)."""
    proc = lint_imports()
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    assert 'broken' in proc.stdout and ' 0 broken' in proc.stdout


def test_an_upward_import_breaks_the_contract(tmp_path):
    """A function-level import of utils inside models/ (what once dodged a cycle) is caught."""
    shutil.copytree(osp.join(REPO, 'mmvit5'), tmp_path / 'mmvit5')
    shutil.copy(osp.join(REPO, '.importlinter'), tmp_path)
    with open(tmp_path / 'mmvit5' / 'models' / 'layers' / 'pos_embed.py', 'a') as f:
        f.write('\n\ndef upward():\n    from ...utils import widths\n    return widths\n')
    proc = lint_imports(cwd=str(tmp_path))
    assert proc.returncode == 1 and 'mmvit5.models.layers.pos_embed -> mmvit5.utils' in \
        proc.stdout, proc.stdout[-3000:]
