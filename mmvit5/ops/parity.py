"""mmvit5's torchvision backend against compiled mmcv, in one process.

The served backend is loaded a second time under a name of its own, beside the compiled
``mmcv._ext``; :func:`use_backend` points every ``mmcv.ops`` module's ``ext_module`` at one of
them, so the same seeded training run can be repeated on either and compared step by step.
"""
import contextlib
import importlib.util
import sys
import time
from types import ModuleType
from typing import Dict, Iterator, List

from mmengine.hooks import Hook
from mmengine.registry import HOOKS

import _mmvit5_hook


def served_backend() -> ModuleType:
    """mmvit5's ``ext.py`` as a module of its own (not ``mmcv._ext``)."""
    spec = importlib.util.spec_from_file_location('mmvit5_served_ext',
                                                  _mmvit5_hook.backend_path())
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@contextlib.contextmanager
def use_backend(backend: ModuleType) -> Iterator[None]:
    """Route every loaded ``mmcv.ops`` module's compiled calls to ``backend``."""
    import mmcv.ops  # noqa: F401  (loads every op module)
    modules = [m for name, m in list(sys.modules.items())
               if name.startswith('mmcv.ops.') and hasattr(m, 'ext_module')]
    saved = [m.ext_module for m in modules]
    for module in modules:
        module.ext_module = backend
    try:
        yield
    finally:
        for module, ext in zip(modules, saved):
            module.ext_module = ext


@HOOKS.register_module()
class StepTraceHook(Hook):
    """Keeps each training iteration's losses, gradient norm and wall time."""

    priority = 'LOWEST'  # after the optimizer wrapper has logged the gradient norm

    def __init__(self) -> None:
        self.steps: List[Dict[str, float]] = []

    def before_train_iter(self, runner, batch_idx, data_batch=None) -> None:
        self._start = time.perf_counter()

    def after_train_iter(self, runner, batch_idx, data_batch=None, outputs=None) -> None:
        step = {k: float(v) for k, v in (outputs or {}).items()}
        step['grad_norm'] = float(runner.message_hub.get_scalar('train/grad_norm').current())
        step['time'] = time.perf_counter() - self._start
        self.steps.append(step)
