"""Run a part of mmvit5 right after a package is imported, without importing it.

``import mmvit5`` imports no torch: the backbone is registered in MMEngine's registry when
``mmengine.model`` is imported, the ViT-5 models in timm's registry when timm is, its COCO
metric with mmdet, and the upstream patches of :mod:`mmvit5.compat` when the module each one
patches is imported. Importing those packages costs every process (each tool, each test
subprocess) seconds, and most never use all of them. :func:`import_after` and
:func:`call_after` defer the work to the moment anything imports the package:
a finder first on ``sys.meta_path`` sees that import once, finds the package as the other
finders would, and runs the work when the package's ``__init__`` has run; :func:`call_around`
runs the package's ``__init__`` inside a context.
"""
import contextlib
import importlib
import importlib.abc
import sys
import warnings
from typing import Any, Callable, ContextManager, Dict, List, Sequence, Union

# package -> what runs once it is imported, in the order it was asked for
_PENDING: Dict[str, List[Callable[[], None]]] = {}
# package -> contexts its import runs in
_AROUND: Dict[str, List[Callable[[], ContextManager]]] = {}


Work = Union[Callable[[], Any], str]  # a function, or 'module:function' imported when called


def _resolve(work: Work) -> Callable[[], Any]:
    if callable(work):
        return work
    module, _, name = work.partition(':')

    def call() -> Any:
        return getattr(importlib.import_module(module), name)()

    call.__qualname__ = work  # what a failure's warning names
    return call


def _run(package: str, work: Callable[[], None]) -> None:
    try:
        work()
    except Exception as exc:  # the package must stay importable whatever happens here
        name = getattr(work, '__qualname__', repr(work))
        warnings.warn(f'{name} failed after importing {package} ({type(exc).__name__}: {exc})')


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
            with contextlib.ExitStack() as stack:
                for context in _AROUND.pop(self.package, []):
                    stack.enter_context(context())
                execute(module)
            if self in sys.meta_path:
                sys.meta_path.remove(self)
            for work in _PENDING.pop(self.package, []):
                _run(self.package, work)

        spec.loader.exec_module = exec_module
        return spec


def _wait_for(package: str) -> None:
    if package not in _PENDING:
        _PENDING[package] = []
        sys.meta_path.insert(0, _AfterImport(package))


def call_after(packages: Union[str, Sequence[str]], work: Work) -> None:
    """Call ``work()`` once ``packages`` (a package or submodule name, or several, all of
    which must be) are imported: now if they are already, else right after anything imports
    the last of them. Nothing happens where one is not installed. ``work`` may be named as
    ``'module:function'``, imported when it runs."""
    work = _resolve(work)
    names = (packages, ) if isinstance(packages, str) else tuple(packages)
    missing = [name for name in names if sys.modules.get(name) is None]
    if not missing:
        work()
        return
    _wait_for(missing[0])

    def rest() -> None:
        call_after(missing[1:], work)

    rest.__qualname__ = getattr(work, '__qualname__', repr(work))  # what a warning names
    _PENDING[missing[0]].append(rest)


def call_around(package: str, context: Work) -> None:
    """Run ``package``'s import (its ``__init__`` or module code) inside ``context()``, where
    nothing has imported it yet; nothing happens where it is imported already. ``context`` may
    be named as ``'module:function'``."""
    if sys.modules.get(package) is None:
        _wait_for(package)
        _AROUND.setdefault(package, []).append(_resolve(context))


def import_after(package: str, module: str) -> None:
    """Import ``module`` once ``package`` is imported (see :func:`call_after`)."""
    def import_module() -> None:
        importlib.import_module(module)

    import_module.__qualname__ = module  # what a failure's warning names
    call_after(package, import_module)
