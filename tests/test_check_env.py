"""tools/check_env.py: the supported torch range and what it tells a user outside it; the
requirements split (runtime, and the extras of setup.py)."""
import os.path as osp
import re
import subprocess
import sys

import check_env
import pytest

from conftest import REPO


def write(tmp_path, text):
    path = tmp_path / 'requirements.txt'
    path.write_text(text)
    return check_env.requirements(str(path))


def test_ranges_and_pins_are_read(tmp_path):
    reqs = write(tmp_path, '# comment\ntorch>=2.6,<2.15\nmmengine==0.10.7\nregex\n')
    assert reqs == {'torch': [('>=', '2.6'), ('<', '2.15')], 'mmengine': [('==', '0.10.7')]}
    assert check_env.satisfies('2.14.1+cu130', reqs['torch'])
    assert check_env.satisfies('2.6.0', reqs['torch'])
    assert not check_env.satisfies('2.5.1', reqs['torch'])
    assert not check_env.satisfies('2.15.0', reqs['torch'])


def test_installed_torch_outside_the_range_is_refused_with_the_fix(tmp_path):
    reqs = write(tmp_path, 'torch>=99.0,<100\ntorchvision>=0.21,<0.30\n')
    problems = check_env.torch_problems(reqs)
    assert len(problems) == 1
    assert 'outside the supported range >=99.0,<100' in problems[0]
    assert 'pip install torch==2.14.1 torchvision==0.29.1' in problems[0]
    assert check_env.torch_problems(write(tmp_path, 'torch>=2.6,<2.15\n'
                                                    'torchvision>=0.21,<0.30\n')) == []


TOOL_ONLY = ('timm', 'fvcore', 'onnx', 'onnxruntime', 'onnxscript', 'matplotlib')


def _names(requirements):
    return {re.match(r'[A-Za-z0-9_.\-]+', line).group(0).lower() for line in requirements}


def test_plain_install_brings_no_tool_only_package(tmp_path):
    """setup.py's install_requires is the runtime; the measuring and export packages are
    extras (pip install -e .[benchmark] etc.)."""
    subprocess.run([sys.executable, 'setup.py', '-q', 'egg_info', '--egg-base', str(tmp_path)],
                   cwd=REPO, check=True, capture_output=True)
    text = (next(tmp_path.glob('*.egg-info')) / 'requires.txt').read_text()
    plain, *extras = text.split('\n[')
    assert not _names(plain.split()) & set(TOOL_ONLY)
    by_extra = {block.split(']')[0]: _names(block.split(']', 1)[1].split()) for block in extras}
    assert {'timm', 'fvcore', 'matplotlib'} <= by_extra['benchmark']
    assert {'onnx', 'onnxruntime', 'onnxscript'} <= by_extra['deploy']
    assert {'sphinx', 'myst-parser', 'sphinx-copybutton'} <= by_extra['docs']
    assert 'pytest' in by_extra['tests']
    assert {'transformers', 'accelerate'} <= by_extra['hf']
    assert by_extra['all'] == set().union(*(v for k, v in by_extra.items() if k != 'all'))


def test_extras_are_checked_as_asked():
    runtime = check_env.requirement_files(REPO, [])
    assert 'mmengine' in runtime and 'timm' not in runtime and 'torch' in runtime
    assert 'timm' in check_env.requirement_files(REPO, ['benchmark'])
    assert check_env.parse_extras('all') == list(check_env.EXTRA_IMPORTS)
    assert check_env.parse_extras('') == []
    with pytest.raises(ValueError, match=r"unknown extra\(s\) \['gpu'\]"):
        check_env.parse_extras('tests,gpu')


def test_install_script_checks_what_requirements_txt_installs():
    """install.sh's EXTRAS, the -r lines of requirements.txt and check_env agree, so a
    complete environment is recognised and an incomplete one is installed."""
    with open(osp.join(REPO, 'requirements.txt')) as f:
        listed = re.findall(r'^-r requirements/(\w+)\.txt', f.read(), re.MULTILINE)
    with open(osp.join(REPO, 'tools', 'install.sh')) as f:
        installed = re.search(r'^EXTRAS=([\w,]+)', f.read(), re.MULTILINE).group(1).split(',')
    assert listed == ['runtime', *installed]
    assert set(installed) == set(check_env.EXTRA_IMPORTS)


def test_runtime_package_imports_no_tool_code():
    """import mmvit5 (what a config's custom_imports does) needs neither the measuring code
    in benchmarks/ nor the tools' packages."""
    code = ('import sys, mmvit5; print(sorted(m for m in sys.modules if m.split(".")[0] in '
            f'{("benchmarks", *TOOL_ONLY[:-1])!r}))')
    out = subprocess.run([sys.executable, '-c', code], cwd=REPO, capture_output=True,
                         text=True, check=True).stdout
    assert out.strip() == '[]'
    assert not osp.exists(osp.join(REPO, 'mmvit5', 'benchmark'))


def test_triton_launcher_needs_are_checked_where_triton_runs(monkeypatch, tmp_path):
    """Without a C compiler Triton cannot build its launcher: check_env names the fix
    (install gcc, or MMVIT5_TRITON=0) wherever the kernels will be compiled."""
    import check_env
    assert check_env.triton_build_problems(False) == []
    assert not any('C compiler' in p for p in check_env.triton_build_problems(True))
    monkeypatch.delenv('CC', raising=False)
    monkeypatch.setenv('PATH', str(tmp_path))  # no compiler on it
    found = check_env.triton_build_problems(True)
    assert len(found) == 1 and 'no C compiler' in found[0] and 'MMVIT5_TRITON=0' in found[0]
    monkeypatch.setenv('MMVIT5_TRITON', '0')
    assert not check_env.triton_will_run()
