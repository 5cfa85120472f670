"""mmcv's compiled-op interface without a compiler.

``ext.py`` is loaded *as* ``mmcv._ext`` by the import hook of ``_mmvit5_hook`` whenever mmcv has
no compiled extension; it is never imported under its own name (that would be a second copy).
"""
import importlib.machinery

import _mmvit5_hook


def install_hook() -> None:
    """Serve ``mmcv._ext`` in this process even without the start-up ``.pth`` file."""
    _mmvit5_hook.install()


def mmcv_ops_backend() -> str:
    """``'compiled'`` when mmcv's own ``_ext`` extension is loaded, else ``'torchvision'``."""
    import mmcv._ext
    loader = mmcv._ext.__spec__.loader
    return 'compiled' if isinstance(loader, importlib.machinery.ExtensionFileLoader) else \
        'torchvision'


__all__ = ['install_hook', 'mmcv_ops_backend']
