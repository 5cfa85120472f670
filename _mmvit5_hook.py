"""Serve ``mmcv._ext`` from torchvision when mmcv has no compiled ops (mmvit5's default install).

``mmvit5-mmcv-ext.pth`` in site-packages runs :func:`install` at interpreter start, so every
Python process of the environment (mmdet's and mmseg's own tools too, configs that never import
mmvit5) can ``import mmcv.ops``. It imports only the standard library: torch is loaded when, and
only if, something imports ``mmcv._ext``. The finder sits *last* on ``sys.meta_path``, after the
path finder, so a real compiled ``mmcv/_ext*.so`` always wins. ``MMVIT5_MMCV_EXT=0`` turns it
off for one process. Kept outside the ``mmvit5`` package, whose import loads torch and mmengine.
"""
import importlib.abc
import importlib.util
import os
import sys

NAME = 'mmcv._ext'
PTH_NAME = 'mmvit5-mmcv-ext.pth'
# .pth lines that start with "import" are executed; this one tolerates an uninstalled mmvit5
PTH_LINE = ("import importlib.util as u; u.find_spec('_mmvit5_hook') and "
            "__import__('_mmvit5_hook').install()\n")


def backend_path():
    """Where ``mmvit5/ops/ext.py`` is, found without importing the ``mmvit5`` package."""
    spec = importlib.util.find_spec('mmvit5')
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        path = os.path.join(location, 'ops', 'ext.py')
        if os.path.isfile(path):
            return path
    return None


class MMCVExtFinder(importlib.abc.MetaPathFinder):
    """Finds ``mmcv._ext`` as mmvit5's torchvision backend, for no other name."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != NAME:
            return None
        source = backend_path()
        return importlib.util.spec_from_file_location(NAME, source) if source else None


def install() -> None:
    """Put the finder last on ``sys.meta_path`` (once per process)."""
    if os.environ.get('MMVIT5_MMCV_EXT', '1') == '0':
        return
    if not any(isinstance(finder, MMCVExtFinder) for finder in sys.meta_path):
        sys.meta_path.append(MMCVExtFinder())


def mmcv_ops_backend() -> str:
    """``'compiled'`` when mmcv's own ``_ext`` extension is loaded, else ``'torchvision'``."""
    import importlib.machinery

    import mmcv._ext
    loader = mmcv._ext.__spec__.loader
    return 'compiled' if isinstance(loader, importlib.machinery.ExtensionFileLoader) else \
        'torchvision'


def write_pth(site_packages: str) -> str:
    """Write the start-up file into ``site_packages``; returns its path."""
    path = os.path.join(site_packages, PTH_NAME)
    with open(path, 'w') as f:
        f.write(PTH_LINE)
    return path


if __name__ == '__main__':
    # python _mmvit5_hook.py [SITE_PACKAGES]: what tools/install.sh runs after `pip install -e`
    import sysconfig
    print(write_pth(sys.argv[1] if len(sys.argv) > 1 else sysconfig.get_paths()['purelib']))
