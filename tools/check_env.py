"""Check that the pinned mmvit5 stack is installed and usable.

Exit status 0 when every ``==`` pin of ``requirements.txt`` is installed at that version,
mmcv has its compiled ops, the OpenMMLab packages import, and ``mmvit5`` resolves to the
checkout given by ``--repo``. ``tools/install.sh`` calls this first, so a complete
environment costs one check and nothing else.
"""
import argparse
import importlib
import os
import re
import sys
from importlib import metadata

IMPORTS = ['torch', 'torchvision', 'mmengine', 'mmcv._ext', 'mmdet', 'mmseg',
           'mmpretrain', 'fairscale', 'pycocotools', 'ftfy', 'regex']


def pinned_versions(requirements: str) -> dict:
    pins = {}
    with open(requirements) as f:
        for line in f:
            match = re.match(r'^([A-Za-z0-9_.\-]+)==([^\s#;]+)', line.strip())
            if match:
                pins[match.group(1)] = match.group(2)
    return pins


def problems(repo: str) -> list:
    found = []
    for name, version in pinned_versions(os.path.join(repo, 'requirements.txt')).items():
        try:
            installed = metadata.version(name)
        except metadata.PackageNotFoundError:
            found.append(f'{name} is not installed (want {version})')
            continue
        # local build tags such as 2.14.1+cu130 still satisfy the pin
        if installed.split('+')[0] != version:
            found.append(f'{name} {installed} is installed, want {version}')
    for module in IMPORTS + ['mmvit5']:
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--repo', default=os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))), help='mmvit5 checkout (default: this one)')
    parser.add_argument('--quiet', action='store_true', help='print nothing, exit status only')
    args = parser.parse_args()
    # the checkout itself must not shadow the installed package during the check
    sys.path = [p for p in sys.path if os.path.realpath(p or '.') != os.path.realpath(args.repo)]
    found = problems(args.repo)
    if not args.quiet:
        for line in found:
            print(f'[check_env] {line}')
        if not found:
            import mmcv
            import torch
            print(f'[check_env] ok: torch {torch.__version__}, mmcv {mmcv.__version__} '
                  f'with compiled ops, mmdet/mmseg/mmpretrain import, mmvit5 from {args.repo}')
    return 1 if found else 0


if __name__ == '__main__':
    sys.exit(main())
