"""The tree passes ruff (ruff.toml: pyflakes, pycodestyle, import order), as pre-commit runs it."""
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
