"""Every tool answers ``--help`` from the standard library alone: torch and OpenMMLab are
imported after the flags are parsed (tools/cli_options.py), so a user's first look at a tool
takes a fraction of a second instead of ~10 s of imports. Checked by what the process has
imported, not by a wall-clock time that a loaded machine would make flaky."""
import glob
import os.path as osp
import subprocess
import sys

import pytest

from conftest import REPO

HEAVY = ('torch', 'mmengine', 'mmcv', 'mmdet', 'mmseg', 'mmpretrain', 'mmvit5', 'matplotlib')
TOOLS = sorted(path for path in glob.glob(osp.join(REPO, 'tools', '*.py'))
               if "__name__ == '__main__'" in open(path).read())
# runs the tool as `python tools/X.py ARGS` would, then reports what got imported
PROBE = '''
import runpy, sys
sys.argv = sys.argv[1:]
sys.path.insert(0, __import__('os').path.dirname(sys.argv[0]))
try:
    runpy.run_path(sys.argv[0], run_name='__main__')
except SystemExit as e:
    code = e.code
else:
    code = 'no exit'
print('IMPORTED', sorted(m for m in {heavy} if m in sys.modules), 'EXIT', code)
'''.format(heavy=HEAVY)


def test_every_tool_is_checked():
    names = {osp.basename(p) for p in TOOLS}
    assert {'train.py', 'test.py', 'finetune.py', 'export_onnx.py', 'benchmark.py'} <= names


@pytest.mark.parametrize('tool', TOOLS, ids=osp.basename)
def test_help_imports_no_torch_nor_openmmlab(tool):
    args = ['det', '--help'] if osp.basename(tool) == 'finetune.py' else ['--help']
    result = subprocess.run([sys.executable, '-c', PROBE, tool, *args], capture_output=True,
                            text=True, cwd=REPO, timeout=120)
    assert 'usage:' in result.stdout, result.stdout + result.stderr
    last = result.stdout.strip().splitlines()[-1]
    assert last == 'IMPORTED [] EXIT 0', f'{osp.basename(tool)} --help: {last}'
