"""Serve ``mmcv._ext`` from torchvision when mmcv has no compiled ops (mmvit5's default install),
and keep mmpretrain's models importable beside a transformers that lacks what they import.

``mmvit5-mmcv-ext.pth`` in site-packages runs :func:`install` at interpreter start, so every
Python process of the environment (mmdet's and mmseg's own tools too, configs that never import
mmvit5) can ``import mmcv.ops`` and ``mmdet.models``. It imports only the standard library:
torch is loaded when, and only if, something imports ``mmcv._ext``. That finder sits *last* on
``sys.meta_path``, after the path finder, so a real compiled ``mmcv/_ext*.so`` always wins.
``MMVIT5_MMCV_EXT=0`` turns it off for one process. Kept outside the ``mmvit5`` package, whose
import loads torch and mmengine.
"""
import importlib.abc
import importlib.util
import os
import sys

NAME = 'mmcv._ext'
# what mmpretrain 1.2.0's multimodal models import from transformers.modeling_utils
MULTIMODAL_NAMES = ('PreTrainedModel', 'apply_chunking_to_forward',
                    'find_pruneable_heads_and_indices', 'prune_linear_layer')
MULTIMODAL_PATCH = 'skip_unimportable_multimodal'  # its name in mmvit5.compat
MULTIMODAL_RANGE = 'mmpretrain>=1.0.0,<=1.2.0'  # the mmpretrain releases that have the bug
DISABLE_ENV = 'MMVIT5_DISABLE_PATCHES'  # patch names (or all) to leave out; mmvit5.compat's too
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


def skip_unimportable_multimodal() -> None:
    """Register mmpretrain's multimodal models as its placeholders where they cannot import.

    ``mmdet.models`` imports ``mmpretrain.models`` whenever mmpretrain is installed, and
    mmpretrain <= 1.2.0 defines its multimodal models (BLIP, CLIP, ...) whenever transformers >=
    4.28 is. They subclass ``transformers.modeling_utils.PreTrainedModel`` and import three
    helpers beside it; transformers 5 no longer has them there, mmpretrain's fallback sets the
    base class to None and the import raises ``TypeError: NoneType takes no arguments``. The
    models are then registered as mmpretrain's own placeholders, as when transformers is absent.
    Call it before ``mmpretrain.models`` is imported.
    """
    if importlib.util.find_spec('mmpretrain') is None or \
            importlib.util.find_spec('transformers') is None:
        return
    from mmpretrain.utils import dependency
    if not dependency.WITH_MULTIMODAL or 'mmpretrain.models' in sys.modules:
        return
    try:
        from transformers import modeling_utils
        usable = all(hasattr(modeling_utils, name) for name in MULTIMODAL_NAMES)
    except Exception:  # noqa: BLE001 - any failure here is the failure mmpretrain would hit
        usable = False
    if not usable:
        dependency.WITH_MULTIMODAL = False


class BeforeMMPretrainModels(importlib.abc.MetaPathFinder):
    """One-shot: runs :func:`skip_unimportable_multimodal` as ``mmpretrain.models`` is imported,
    then lets the other finders find it."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname == 'mmpretrain.models':
            sys.meta_path.remove(self)
            from importlib.metadata import PackageNotFoundError, version

            from packaging.requirements import Requirement  # mmpretrain's own dependency
            try:
                old = Requirement(MULTIMODAL_RANGE).specifier.contains(version('mmpretrain'),
                                                                  prereleases=True)
            except PackageNotFoundError:
                old = False
            if old:
                skip_unimportable_multimodal()
        return None


def disabled_names() -> set:
    """The names that ``MMVIT5_DISABLE_PATCHES`` lists (patch names, or ``all``)."""
    return {n.strip() for n in os.environ.get(DISABLE_ENV, '').split(',') if n.strip()}


def install() -> None:
    """Put the ``mmcv._ext`` finder last on ``sys.meta_path`` and the mmpretrain guard first
    (once per process; ``MMVIT5_DISABLE_PATCHES=skip_unimportable_multimodal`` or ``all``
    leaves the guard out, as it does mmvit5.compat's patch)."""
    if os.environ.get('MMVIT5_MMCV_EXT', '1') != '0' and \
            not any(isinstance(finder, MMCVExtFinder) for finder in sys.meta_path):
        sys.meta_path.append(MMCVExtFinder())
    if not disabled_names() & {MULTIMODAL_PATCH, 'all'} and \
            'mmpretrain.models' not in sys.modules and \
            not any(isinstance(finder, BeforeMMPretrainModels) for finder in sys.meta_path):
        sys.meta_path.insert(0, BeforeMMPretrainModels())


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
