"""Check that the mmvit5 stack is installed and usable.

Exit status 0 when torch and torchvision lie in the supported ranges of
``requirements/runtime.txt``, every ``==`` pin of the runtime and of the checked extras
(``requirements/<extra>.txt``, ``--extras``) is installed at that version, mmcv 2.1.0 imports
``mmcv.ops`` (compiled, or served from torchvision by mmvit5's start-up hook, without importing
mmvit5), the OpenMMLab packages and the extras' modules import, and ``mmvit5`` resolves to the
checkout given by ``--repo``.
``tools/install.sh`` calls this first, so a complete environment costs one check.
"""
import argparse
import importlib
import os
import re
import shutil
import sys
import sysconfig
from importlib import metadata
from typing import List, Sequence

MMCV_VERSION = '2.1.0'
# mmcv.ops before mmvit5: it must import through the .pth hook alone
IMPORTS = ['mmengine', 'mmcv.ops', 'mmdet', 'mmseg', 'mmpretrain', 'pycocotools', 'ftfy',
           'regex']
# what each extra of setup.py (requirements/<extra>.txt) must make importable
EXTRA_IMPORTS = {'tests': ['pytest', 'xdist', 'panopticapi'],
                 'benchmark': ['timm', 'fvcore', 'matplotlib', 'faster_coco_eval'],
                 'deploy': ['onnx', 'onnxruntime', 'onnxscript'],
                 'docs': ['sphinx', 'myst_parser', 'sphinx_rtd_theme', 'sphinx_copybutton'],
                 'hf': ['transformers', 'accelerate']}
# without --extras: what a GPU image with the wheels of tools/dev/make_wheels.sh has (no docs)
DEFAULT_EXTRAS = 'tests,benchmark,deploy'
INSTALL_TORCH = ('pip install torch==2.14.1 torchvision==0.29.1 (or the CUDA build of a torch '
                 'in the range with its matching torchvision), then rerun bash tools/install.sh')


def _version_tuple(version: str) -> tuple:
    return tuple(int(part) for part in re.findall(r'\d+', version.split('+')[0])[:3])


def requirements(path: str) -> dict:
    """``{name: [(op, version), ...]}`` for the ``==``, ``>=`` and ``<`` lines of a file."""
    found = {}
    with open(path) as f:
        for line in f:
            match = re.match(r'^([A-Za-z0-9_.\-]+)\s*((?:[=<>]=?[^,\s#;]+,?)+)', line.strip())
            if match:
                found[match.group(1)] = re.findall(r'(==|>=|<)([^,\s#;]+)', match.group(2))
    return found


def requirement_files(repo: str, extras: Sequence[str]) -> dict:
    """The ranges and pins of ``requirements/runtime.txt`` and of each extra's file."""
    found = {}
    for name in ('runtime', *extras):
        found.update(requirements(os.path.join(repo, 'requirements', f'{name}.txt')))
    return found


def parse_extras(spec: str) -> List[str]:
    """``'tests,docs'`` -> ``['tests', 'docs']``; ``'all'`` -> every extra; ``''`` -> none."""
    extras = list(EXTRA_IMPORTS) if spec == 'all' else [e for e in spec.split(',') if e]
    unknown = [e for e in extras if e not in EXTRA_IMPORTS]
    if unknown:
        raise ValueError(f'--extras {spec!r}: unknown extra(s) {unknown}; choose a comma list '
                         f'of {list(EXTRA_IMPORTS)}, or all')
    return extras


def satisfies(installed: str, specs) -> bool:
    have = _version_tuple(installed)  # local tags such as 2.14.1+cu130 satisfy 2.14.1
    checks = {'==': lambda want: have == want, '>=': lambda want: have >= want,
              '<': lambda want: have < want}
    return all(checks[op](_version_tuple(version)) for op, version in specs)


def torch_problems(reqs: dict) -> list:
    found = []
    for name in ('torch', 'torchvision'):
        want = ','.join(op + v for op, v in reqs[name])
        try:
            installed = metadata.version(name)
        except metadata.PackageNotFoundError:
            found.append(f'{name} is not installed (supported: {want}): {INSTALL_TORCH}')
            continue
        if not satisfies(installed, reqs[name]):
            found.append(f'{name} {installed} is outside the supported range {want}: '
                         f'{INSTALL_TORCH}')
    if not found:
        try:
            import torchvision  # noqa: F401  (a torch/torchvision mismatch fails here)
        except Exception as exc:  # noqa: BLE001
            found.append(f'torchvision does not import beside this torch ({exc}): install the '
                         f'torchvision release made for torch {metadata.version("torch")}')
    return found


def mmcv_problems(mmcv_ops: str) -> list:
    try:
        import mmcv
    except ImportError:
        return [f'mmcv is not installed (want {MMCV_VERSION})']
    if mmcv.__version__ != MMCV_VERSION:
        return [f'mmcv {mmcv.__version__} is installed, want {MMCV_VERSION}']
    try:
        importlib.import_module('mmcv.ops')
        import _mmvit5_hook
        backend = _mmvit5_hook.mmcv_ops_backend()
    except Exception as exc:  # noqa: BLE001
        return [f'import mmcv.ops failed ({type(exc).__name__}: {exc}): mmcv has no compiled '
                f'ops and mmvit5\'s start-up file is missing; run bash tools/install.sh']
    if mmcv_ops == 'compiled' and backend != 'compiled':
        return ['mmcv has no compiled ops (MMCV_OPS=compiled asked for them)']
    return []


def problems(repo: str, mmcv_ops: str, extras: Sequence[str]) -> list:
    reqs = requirement_files(repo, extras)
    found = torch_problems(reqs) + mmcv_problems(mmcv_ops)
    for name, specs in reqs.items():
        if name in ('torch', 'torchvision') or not any(op == '==' for op, _ in specs):
            continue
        try:
            installed = metadata.version(name)
        except metadata.PackageNotFoundError:
            found.append(f'{name} is not installed (want {specs[0][1]})')
            continue
        if not satisfies(installed, specs):
            found.append(f'{name} {installed} is installed, want {specs[0][1]}')
    if 'tests' in extras:
        found += panopticapi_problems(repo)
    extra_imports = [module for extra in extras for module in EXTRA_IMPORTS[extra]]
    for module in IMPORTS + extra_imports + ['mmvit5']:
        try:
            imported = importlib.import_module(module)
        except Exception as exc:  # noqa: BLE001 - any import failure means "not usable"
            found.append(f'import {module} failed: {type(exc).__name__}: {exc}')
            continue
        if module == 'mmvit5':
            where = os.path.realpath(os.path.dirname(imported.__file__))
            want = os.path.realpath(os.path.join(repo, 'mmvit5'))
            if where != want:
                found.append(f'mmvit5 imports from {where}, not from this checkout {want}')
    return found


def panopticapi_problems(repo: str) -> list:
    """The panoptic API must be the checkout's third_party/panopticapi: panopticapi-lite,
    its PyPI repackaging, declares numpy<2 and scikit-image, which `pip check` reports."""
    with open(os.path.join(repo, 'third_party', 'panopticapi', 'pyproject.toml')) as f:
        want = re.search(r'^version = "([^"]+)"', f.read(), re.M)[1]
    found = []
    for name, wanted in (('panopticapi', True), ('panopticapi-lite', False)):
        try:
            installed = metadata.version(name)
        except metadata.PackageNotFoundError:
            installed = None
        if wanted and installed != want:
            found.append(f'panopticapi {installed or "is not installed"}, want {want} from '
                         'third_party/panopticapi: rerun bash tools/install.sh')
        elif not wanted and installed:
            found.append(f'panopticapi-lite {installed} is installed; it declares numpy<2: pip '
                         'uninstall panopticapi-lite, then rerun bash tools/install.sh')
    return found


def triton_will_run() -> bool:
    """Whether mmvit5's Triton kernels will be compiled here (``MMVIT5_TRITON``, as
    ``mmvit5.models.layers.kernels.dispatch`` reads it): on CUDA, or forced, not interpreted."""
    flag = os.environ.get('MMVIT5_TRITON', '')
    if flag == '0' or os.environ.get('TRITON_INTERPRET', '0') not in ('', '0'):
        return False
    try:
        import torch
        import triton  # noqa: F401
    except ImportError:
        return False
    return flag == '1' or torch.cuda.is_available()


def triton_build_problems(will_run: bool) -> list:
    """What Triton needs to build its kernel launcher, where its kernels will run: a C
    compiler and ``Python.h``. Without them the first forward warns and mmvit5 falls back to
    the PyTorch path (slower), so the fix is named here, before a run."""
    if not will_run:
        return []
    found = []
    fallback = 'or set MMVIT5_TRITON=0 to run the PyTorch path'
    compiler = os.environ.get('CC') or next(
        (shutil.which(c) for c in ('cc', 'gcc', 'clang') if shutil.which(c)), None)
    if not compiler:
        found.append('Triton finds no C compiler to build its kernel launcher (CC unset, no '
                     f'cc/gcc/clang on PATH): install gcc (apt-get install gcc) {fallback}')
    header = os.path.join(sysconfig.get_paths()['include'], 'Python.h')
    if not os.path.exists(header):
        found.append(f'Triton needs {header} to build its kernel launcher: install the Python '
                     f'development headers (apt-get install python3-dev) {fallback}')
    return found


# what a test run states first, so that a failure read later says which stack failed
STACK = ('torch', 'torchvision', 'triton', 'mmcv', 'mmcv-lite', 'mmengine', 'mmdet',
         'mmsegmentation', 'mmpretrain', 'onnxruntime', 'numpy')


def stack_line() -> str:
    """One line of the installed versions of :data:`STACK`, read from package metadata."""
    def version(name: str) -> str:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return 'none'
    import platform
    return ', '.join([f'python {platform.python_version()}'] +
                     [f'{name} {version(name)}' for name in STACK
                      if not (name.startswith('mmcv') and version(name) == 'none')])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--repo', default=os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))), help='mmvit5 checkout (default: this one)')
    parser.add_argument('--mmcv-ops', choices=('torchvision', 'compiled'), default='torchvision',
                        help='compiled: require mmcv\'s own compiled ops (torchvision accepts '
                             'either)')
    parser.add_argument('--extras', default=DEFAULT_EXTRAS,
                        help=f'extras of setup.py to check besides the runtime: a comma list of '
                             f'{list(EXTRA_IMPORTS)}, all, or "" (default: {DEFAULT_EXTRAS})')
    scope = parser.add_mutually_exclusive_group()
    scope.add_argument('--torch-only', action='store_true', help='check torch/torchvision only')
    scope.add_argument('--mmcv-only', action='store_true', help='check mmcv only')
    scope.add_argument('--stack', action='store_true',
                       help='print the installed versions of the stack and check nothing')
    parser.add_argument('--quiet', action='store_true', help='print nothing, exit status only')
    args = parser.parse_args()
    if args.stack:
        print(f'[check_env] stack: {stack_line()}')
        return 0
    try:
        extras = parse_extras(args.extras)
    except ValueError as exc:
        parser.error(str(exc))
    # the checkout itself must not shadow the installed package during the check
    sys.path = [p for p in sys.path if os.path.realpath(p or '.') != os.path.realpath(args.repo)]
    if args.torch_only:
        found = torch_problems(requirement_files(args.repo, []))
    elif args.mmcv_only:
        found = mmcv_problems(args.mmcv_ops)
    else:
        found = problems(args.repo, args.mmcv_ops, extras) + \
            triton_build_problems(triton_will_run())
    if not args.quiet:
        for line in found:
            print(f'[check_env] {line}')
        if not found and not (args.torch_only or args.mmcv_only):
            import mmcv
            import torch

            import _mmvit5_hook
            print(f'[check_env] ok: torch {torch.__version__}, mmcv {mmcv.__version__} with '
                  f'{_mmvit5_hook.mmcv_ops_backend()} ops, mmdet/mmseg/mmpretrain import, '
                  f'mmvit5 from {args.repo}')
    return 1 if found else 0


if __name__ == '__main__':
    sys.exit(main())
