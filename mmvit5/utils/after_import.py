"""Import a module of mmvit5 right after an optional package, without importing that package.

``import mmvit5`` registers the ViT-5 models in timm's registry when timm is installed, but
importing timm costs every process (each tool, each test subprocess) a second or so, and most
never use it. :func:`import_after` defers the registration to the moment anything imports
timm: a finder first on ``sys.meta_path`` sees that import once, finds the package as the
other finders would, and runs the registration when the package's ``__init__`` has run.
"""
import importlib
import importlib.abc
import sys
import warnings


class _AfterImport(importlib.abc.MetaPathFinder):
    """One-shot finder: on the import of ``package``, imports ``module`` after it."""

    def __init__(self, package: str, module: str) -> None:
        self.package = package
        self.module = module

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.package:
            return None
        sys.meta_path.remove(self)
        spec = next((found for found in (finder.find_spec(fullname, path, target)
                                         for finder in sys.meta_path
                                         if hasattr(finder, 'find_spec')) if found), None)
        if spec is None or spec.loader is None or not hasattr(spec.loader, 'exec_module'):
            return spec
        execute = spec.loader.exec_module  # a loader instance of this import only

        def exec_module(module):
            execute(module)
            try:
                importlib.import_module(self.module)
            except Exception as exc:  # the package must stay importable whatever happens here
                warnings.warn(f'{self.module} failed after importing {self.package} '
                              f'({type(exc).__name__}: {exc})')

        spec.loader.exec_module = exec_module
        return spec


def import_after(package: str, module: str) -> None:
    """Import ``module`` once ``package`` is imported: now if it is already, else right after
    anything imports it. Nothing happens where ``package`` is not installed."""
    if sys.modules.get(package) is not None:
        importlib.import_module(module)
    elif not any(isinstance(f, _AfterImport) and f.package == package for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport(package, module))
