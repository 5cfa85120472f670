"""mmcv's compiled-op interface without a compiler.

``ext.py`` is loaded *as* ``mmcv._ext`` by the import hook of ``_mmvit5_hook`` whenever mmcv has
no compiled extension, not as ``mmvit5.ops.ext`` (that would be a second copy of its state);
:mod:`.parity` loads a second copy on purpose, to compare it with compiled mmcv.
"""
from _mmvit5_hook import install as install_hook
from _mmvit5_hook import mmcv_ops_backend

__all__ = ['install_hook', 'mmcv_ops_backend']
