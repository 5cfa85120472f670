"""Run a part of mmvit5 right after an optional package is imported, without importing it.

``import mmvit5`` registers the ViT-5 models in timm's registry when timm is installed, its
COCO metric with mmdet, and applies the upstream patches of :mod:`mmvit5.compat` to mmengine's
runner and mmcv's ops; importing those packages costs every process (each tool, each test
subprocess) seconds, and most never use them. :func:`import_after` and :func:`call_after` defer
the work to the moment anything imports the package: a finder first on ``sys.meta_path`` sees
that import once, finds the package as the other finders would, and runs the work when the
package's ``__init__`` has run.
"""
import importlib
import importlib.abc
import sys
import warnings
from typing import Callable, Dict, List

# package -> what runs once it is imported, in the order it was asked for
_PENDING: Dict[str, List[Callable[[], None]]] = {}


def _run(package: str, work: Callable[[], None]) -> None:
    try:
        work()
    except Exception as exc:  # the package must stay importable whatever happens here
        warnings.warn(f'{work.__qualname__} failed after importing {package} '
                      f'({type(exc).__name__}: {exc})')


class _AfterImport(importlib.abc.MetaPathFinder):
    """One-shot finder: on the import of ``package``, runs what waits for it."""

    def __init__(self, package: str) -> None:
        self.package = package

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.package:
            return None
        # found as the other finders find it; this finder stays until the package is executed,
        # since a look-up alone (importlib.util.find_spec) also lands here and loads nothing
        index = sys.meta_path.index(self)
        sys.meta_path.remove(self)
        try:
            spec = next((found for found in (finder.find_spec(fullname, path, target)
                                             for finder in sys.meta_path
                                             if hasattr(finder, 'find_spec')) if found), None)
        finally:
            sys.meta_path.insert(index, self)
        if spec is None or spec.loader is None or not hasattr(spec.loader, 'exec_module'):
            return spec
        execute = spec.loader.exec_module  # a loader instance of this import only

        def exec_module(module):
            execute(module)
            if self in sys.meta_path:
                sys.meta_path.remove(self)
            for work in _PENDING.pop(self.package, []):
                _run(self.package, work)

        spec.loader.exec_module = exec_module
        return spec


def call_after(package: str, work: Callable[[], None]) -> None:
    """Call ``work()`` once ``package`` (a package or a submodule) is imported: now if it is
    already, else right after anything imports it. Nothing happens where it is not installed."""
    if sys.modules.get(package) is not None:
        work()
        return
    if package not in _PENDING:
        _PENDING[package] = []
        sys.meta_path.insert(0, _AfterImport(package))
    _PENDING[package].append(work)


def import_after(package: str, module: str) -> None:
    """Import ``module`` once ``package`` is imported (see :func:`call_after`)."""
    def import_module() -> None:
        importlib.import_module(module)

    import_module.__qualname__ = module  # what a failure's warning names
    call_after(package, import_module)
