"""Patches for bugs of the pinned OpenMMLab stack (mmengine 0.10.7, mmcv 2.1.0, mmpretrain
1.2.0) on a modern torch, on CPUs: one function per upstream bug, each declared with the
upstream versions that have it and applied only where those are installed, the moment the
upstream modules it patches are imported, so that ``import mmvit5`` imports none of them (nor
torch: this module imports the standard library and ``packaging`` only).

Each patch is registered with :func:`upstream_patch`: the package versions it applies to (PEP
440 ranges, all of which the installed versions must meet), the upstream issue or the reason,
and the modules whose import it waits for (``after``). :func:`apply_patches` applies what fits,
and logs once each patch that it skips because an installed version is outside its range (the
bug may be fixed there, or the patched internals changed: check, then widen the range).
``MMVIT5_DISABLE_PATCHES=name1,name2`` (or ``all``), set before ``import mmvit5``, turns patches
off. ``docs/en/advanced/upstream_patches.md`` lists them (:func:`markdown_table`).
"""
import argparse
import contextlib
import functools
import importlib.metadata
import importlib.util
import logging
import os
import pickle
import subprocess
import sys
import time
import types
from dataclasses import dataclass
from typing import Callable, Dict, Iterable, Iterator, Optional, Tuple, Union

from packaging.requirements import Requirement

import _mmvit5_hook

from .utils.after_import import call_after

DISABLE_ENV = _mmvit5_hook.DISABLE_ENV
# import name -> the distributions that may provide it (mmcv ships as mmcv or mmcv-lite)
DISTRIBUTIONS = {'mmcv': ('mmcv', 'mmcv-lite', 'mmcv-full')}


@dataclass(frozen=True)
class Patch:
    """One upstream bug and the function that works around it.

    Args:
        name (str): The function's name; what ``MMVIT5_DISABLE_PATCHES`` lists.
        applies_to (tuple[str]): Requirements such as ``'mmengine>=0.10.0,<=0.10.7'`` that
            the installed packages must all meet (import names; prereleases count).
        reason (str): The upstream issue, or why the patch exists.
        apply (Callable[[], None]): Applies the patch; idempotent.
        after (tuple[str]): The modules whose import the patch waits for (it patches their
            code), all of them.
    """
    name: str
    applies_to: Tuple[str, ...]
    reason: str
    apply: Callable[[], None]
    after: Tuple[str, ...]

    def why_not(self) -> Optional[str]:
        """None when every installed package is in range, else why the patch does not apply."""
        for requirement in map(Requirement, self.applies_to):
            version = installed_version(requirement.name)
            if version is None:
                return f'{requirement.name} is not installed'
            if not requirement.specifier.contains(version, prereleases=True):
                return f'installed {requirement.name} {version} is outside {requirement}'
        return None


PATCHES: Dict[str, Patch] = {}
_LOGGED = set()


def upstream_patch(*applies_to: str, reason: str, after: Union[str, Tuple[str, ...]]) -> Callable:
    """Register the decorated function as the patch of one upstream bug (see :class:`Patch`)."""

    def register(function: Callable[[], None]) -> Callable[[], None]:
        PATCHES[function.__name__] = Patch(function.__name__, applies_to, reason, function,
                                           (after, ) if isinstance(after, str) else after)
        return function

    return register


def installed_version(name: str) -> Optional[str]:
    """The installed version of the package imported as ``name``, or None."""
    for distribution in DISTRIBUTIONS.get(name, (name, )):
        try:
            return importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            continue
    if importlib.util.find_spec(name) is None:
        return None
    # installed without metadata (e.g. a source checkout on PYTHONPATH)
    return getattr(__import__(name), '__version__', None)


def disabled_patches() -> set:
    """The patch names that ``MMVIT5_DISABLE_PATCHES`` turns off (all of them for ``all``)."""
    names = _mmvit5_hook.disabled_names()
    if 'all' in names:
        return set(PATCHES)
    unknown = names - set(PATCHES)
    if unknown:
        _log_once(f'{DISABLE_ENV} names unknown patches {sorted(unknown)}; the patches are '
                  f'{sorted(PATCHES)} (or all)', logging.WARNING)
    return names & set(PATCHES)


def apply_patches(names: Optional[Iterable[str]] = None) -> Dict[str, str]:
    """Apply the registered patches (``names``, by default all) that fit the installed versions.

    Returns:
        dict: Patch name -> ``'applied'``, or why it was not (disabled, version out of range,
        package not installed).
    """
    disabled = disabled_patches()
    status = {}
    for name in (PATCHES if names is None else names):
        patch = PATCHES[name]
        why_not = f'disabled by {DISABLE_ENV}' if name in disabled else patch.why_not()
        if why_not is None:
            patch.apply()
            status[name] = 'applied'
            continue
        status[name] = f'not applied: {why_not}'
        if 'outside' in why_not:  # a newer upstream: worth a look, once
            _log_once(f'mmvit5: upstream patch {name} not applied: {why_not} ({patch.reason}). '
                      'If the bug is still there, widen the range in mmvit5/compat.py',
                      logging.WARNING)
        elif name in disabled:
            _log_once(f'mmvit5: upstream patch {name} {status[name]}', logging.INFO)
    return status


def install_patches() -> None:
    """Apply each patch now, or as soon as the modules it waits for are imported
    (``import mmvit5`` calls this)."""
    for patch in PATCHES.values():
        apply = functools.partial(apply_patches, [patch.name])
        apply.__qualname__ = patch.name  # what a failure's warning names
        call_after(patch.after, apply)


@contextlib.contextmanager
def transformers_optimizers_deferred() -> Iterator[None]:
    """Import mmengine's optimizer builder (``mmengine.model`` does) without transformers.

    mmengine <= 0.10.7 imports transformers, and through it torchvision, as
    ``mmengine.optim.optimizer.builder`` is imported, only to register transformers'
    ``Adafactor``: about a second for every process (a timm or torch user registering ViT-5,
    each tool), where few ever build it. ``import mmvit5`` runs that import inside this block,
    where transformers is unimportable (if nothing has imported it yet), so mmengine registers
    none; :func:`register_transformers_optimizers` registers it without the import.
    """
    block = 'transformers' not in sys.modules
    if block:
        sys.modules['transformers'] = None  # an import of it raises ImportError
    try:
        yield
    finally:
        if block and sys.modules.get('transformers', 0) is None:
            del sys.modules['transformers']


def _adafactor(*args, **kwargs):
    """transformers' ``Adafactor``, imported when a config builds it."""
    from transformers import Adafactor  # the optional heavy package, on use only
    return Adafactor(*args, **kwargs)


def register_transformers_optimizers() -> None:
    """``Adafactor`` in mmengine's optimizer registry where transformers is installed, as
    ``mmengine.optim`` registers it on import, but built (and transformers imported) on use."""
    builder = importlib.import_module('mmengine.optim.optimizer.builder')
    if 'Adafactor' in builder.TRANSFORMERS_OPTIMIZERS or \
            importlib.util.find_spec('transformers') is None:
        return
    builder.OPTIMIZERS.register_module(name='Adafactor', module=_adafactor)
    builder.TRANSFORMERS_OPTIMIZERS.append('Adafactor')


def markdown_table() -> str:
    """The registered patches as the Markdown table of the docs."""
    rows = ['| Patch | Applies to | Applied | Upstream issue or reason |',
            '| --- | --- | --- | --- |']
    for patch in PATCHES.values():
        when = 'when ' + ' and '.join(f'`{module}`' for module in patch.after) + \
            (' are' if len(patch.after) > 1 else ' is') + ' imported'
        rows.append(f'| `{patch.name}` | {", ".join(f"`{r}`" for r in patch.applies_to)} | '
                    f'{when} | {patch.reason} |')
    return '\n'.join(rows)


def _log_once(message: str, level: int) -> None:
    if message not in _LOGGED:
        _LOGGED.add(message)
        # imported by then: each patch follows an mmengine module or a library built on it
        from mmengine.logging import print_log
        print_log(message, logger='current', level=level)


# HistoryBuffer registers these on first use (``_set_default_statistics``)
STATISTICS_METHODS = ('min', 'max', 'current', 'mean')


def history_buffer_method(obj, name: str):
    """``getattr`` as a pickle may use it inside an mmengine checkpoint, and no further."""
    if obj is sys.modules['mmengine.logging'].HistoryBuffer and name in STATISTICS_METHODS:
        return getattr(obj, name)
    raise pickle.UnpicklingError(
        f'checkpoint asks for attribute {name!r} of {obj!r}; under weights_only=True only '
        f'the statistics methods {STATISTICS_METHODS} of mmengine\'s HistoryBuffer are allowed')


def _numpy_globals() -> list:
    import numpy as np  # torch's dependency, imported by then
    # numpy 2 pickles through numpy._core, numpy 1 through numpy.core
    core = getattr(np, '_core', None) or np.core
    # float/int/bool: HistoryBuffer values; uint32: numpy's RNG state (RNGStateHook)
    dtypes = [type(np.dtype(t))
              for t in ('float64', 'float32', 'int64', 'int32', 'uint32', 'bool')]
    return [core.multiarray._reconstruct, core.multiarray.scalar, np.ndarray, np.dtype,
            *dtypes]


@upstream_patch('torch>=2.6',
                reason='torch >= 2.6 loads with weights_only=True, and mmengine passes nothing '
                'else (https://github.com/open-mmlab/mmengine/issues/1655); mmvit5 reads '
                'checkpoints the same way', after=('torch', 'mmengine.logging'))
def allow_mmengine_checkpoints() -> None:
    """Allow-list mmengine's checkpoint contents for ``torch.load(weights_only=True)``.

    torch >= 2.6 loads with ``weights_only=True`` by default, and mmengine's ``torch.load``
    calls pass nothing else, so resuming fails on the checkpoints mmengine itself wrote.
    Rather than turning ``weights_only`` off, this allow-lists exactly the non-tensor types
    those checkpoints (and the released ViT-5 files) hold:

    - ``argparse.Namespace``: the ``args`` entry of DeiT-style release files;
    - numpy's RNG state (a uint32 array), which :class:`~mmvit5.engine.RNGStateHook` saves;
    - mmengine's ``HistoryBuffer`` with its numpy arrays and scalars (the ``message_hub``
      entry);
    - the statistics methods in a ``HistoryBuffer``'s method table (``HistoryBuffer.min``,
      ``.mean``, ...), which pickle as ``getattr(HistoryBuffer, name)``. ``getattr`` itself
      is *not* allowed: a restricted stand-in resolves only those names on that class.
    """
    import torch
    from mmengine.logging import HistoryBuffer
    torch.serialization.add_safe_globals([
        argparse.Namespace,
        HistoryBuffer,
        (history_buffer_method, 'builtins.getattr'),
        *_numpy_globals(),
    ])


@upstream_patch('mmengine>=0.10.0,<=0.10.7',
                reason="mmengine's is_installed and get_installed_path, which resolve the "
                '`mmdet::` and `mmseg::` bases of every recipe, import pkg_resources: a '
                'deprecation warning on each config load (pkg_resources leaves setuptools in '
                '81); importlib.metadata gives the same answers', after='mmengine.utils')
def installed_packages_without_pkg_resources() -> None:
    """Answer mmengine's "is this package installed, and where" from importlib.metadata.

    mmengine 0.10's ``is_installed`` imports and reloads ``pkg_resources`` on every call and
    ``get_installed_path`` imports it, so each config with a package-scoped base logs
    setuptools' "pkg_resources is deprecated as an API" warning (twice), and both fail where
    setuptools no longer ships it. The replacements keep mmengine's results: a distribution of
    that name, else an importable module of that name; the path is the module's folder.
    ``mmengine.config.config`` and ``mmengine.hub.hub`` bound the functions by name, so they
    are replaced there too where already imported (an import later binds the replacements).
    """
    for module_name in ('mmengine.utils', 'mmengine.utils.package_utils',
                        'mmengine.config.config', 'mmengine.hub.hub'):
        module = sys.modules.get(module_name)
        if module is None:
            continue
        for name, function in (('is_installed', _is_installed),
                               ('get_installed_path', _installed_path)):
            if hasattr(module, name):
                setattr(module, name, function)


def _is_installed(package: str) -> bool:
    """mmengine's ``is_installed``: a distribution named ``package``, or a module."""
    try:
        importlib.metadata.distribution(package)
        return True
    except importlib.metadata.PackageNotFoundError:
        spec = importlib.util.find_spec(package)
        return spec is not None and spec.origin is not None


def _installed_path(package: str) -> str:
    """mmengine's ``get_installed_path``: the folder of the module that ``package``
    installs (``mmcv`` for the distribution ``mmcv-full``)."""
    names = [package]
    try:
        top_level = importlib.metadata.distribution(package).read_text('top_level.txt')
        names += (top_level or '').split()
    except importlib.metadata.PackageNotFoundError:
        pass
    for name in names:
        spec = importlib.util.find_spec(name.replace('-', '_'))
        if spec is not None and spec.origin is not None:
            return os.path.dirname(spec.origin)
    raise importlib.metadata.PackageNotFoundError(
        f'{package}: no installed distribution or importable module of that name (a namespace '
        'package has no single folder)')


@upstream_patch('mmengine>=0.10.0,<=0.10.7',
                reason="mmengine's pytorch launcher calls torch.cuda.set_device and gives DDP "
                'device_ids whether or not CUDA exists, so CPU-only (gloo) runs fail',
                after='mmengine.dist')
def allow_cpu_distributed() -> None:
    """Let mmengine's ``pytorch`` launcher run on machines without CUDA (gloo backend).

    mmengine 0.10.7 calls ``torch.cuda.set_device`` unconditionally when initialising the
    process group and passes ``device_ids=[LOCAL_RANK]`` to DDP, which PyTorch rejects for a
    CPU module. Both are skipped only when no CUDA device exists; GPU runs are unchanged. The
    DDP wrapper is patched once ``mmengine.model`` is imported (it imports ``mmengine.dist``).
    """
    import torch
    from mmengine.dist import utils as dist_utils
    if getattr(dist_utils._init_dist_pytorch, '_mmvit5', False):
        return
    init_on_cuda = dist_utils._init_dist_pytorch

    def init_dist_pytorch(backend='nccl', init_backend='torch', **kwargs):
        if torch.cuda.is_available():
            return init_on_cuda(backend, init_backend=init_backend, **kwargs)
        if backend == 'nccl':
            raise RuntimeError("NCCL needs CUDA and this machine has none: set "
                               "env_cfg.dist_cfg.backend='gloo' (--cfg-options "
                               'env_cfg.dist_cfg.backend=gloo) to train on CPUs')
        torch.distributed.init_process_group(backend=backend, **kwargs)

    init_dist_pytorch._mmvit5 = True
    dist_utils._init_dist_pytorch = init_dist_pytorch
    call_after('mmengine.model', _ddp_on_cpu)


def _ddp_on_cpu() -> None:
    """mmengine's DDP wrapper without ``device_ids`` for a module on the CPU."""
    from mmengine.model.wrappers import MMDistributedDataParallel
    ddp_init = MMDistributedDataParallel.__init__

    def ddp_init_cpu_aware(self, module, detect_anomalous_params=False, **kwargs):
        if kwargs.get('device_ids') and all(p.device.type == 'cpu' for p in module.parameters()):
            kwargs['device_ids'] = None
        ddp_init(self, module, detect_anomalous_params, **kwargs)

    MMDistributedDataParallel.__init__ = ddp_init_cpu_aware


# mmengine releases whose ``_init_dist_slurm`` calls ``torch.cuda.set_device`` unconditionally:
# every release up to 0.10.7, the newest checked. A later one is left alone until checked.
@upstream_patch('mmengine>=0.10.0,<=0.10.7',
                reason="mmengine's slurm launcher calls torch.cuda.set_device before "
                'init_process_group whatever the backend, so CPU partitions fail',
                after='mmengine.dist')
def allow_cpu_slurm() -> None:
    """Let mmengine's ``slurm`` launcher run on nodes without CUDA (gloo backend).

    mmengine <= 0.10.7 sets the CUDA device before ``init_process_group`` whatever the backend,
    so ``srun python tools/train.py ... --launcher=slurm`` dies with "Found no NVIDIA driver"
    on a CPU partition. Without CUDA, SLURM's task variables are mapped onto torchrun's
    (``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``; ``MASTER_ADDR`` the job's first node and
    ``MASTER_PORT`` 29500 unless set) and the ``pytorch`` initialisation runs, which
    :func:`allow_cpu_distributed` makes CPU-aware. With CUDA, mmengine's own code runs.
    """
    import torch
    from mmengine.dist import utils as dist_utils
    if getattr(dist_utils._init_dist_slurm, '_mmvit5', False):
        return
    init_on_cuda = dist_utils._init_dist_slurm

    def init_dist_slurm(backend='nccl', port=None, init_backend='torch', **kwargs):
        if torch.cuda.is_available():
            return init_on_cuda(backend, port=port, init_backend=init_backend, **kwargs)
        env = os.environ
        if 'MASTER_ADDR' not in env:
            env['MASTER_ADDR'] = subprocess.check_output(
                ['scontrol', 'show', 'hostnames', env['SLURM_NODELIST']], text=True).split()[0]
        env['MASTER_PORT'] = str(port or env.get('MASTER_PORT', 29500))
        env['WORLD_SIZE'] = env['SLURM_NTASKS']
        env['RANK'] = env['SLURM_PROCID']
        env['LOCAL_RANK'] = env['SLURM_LOCALID']
        # looked up now: allow_cpu_distributed may have replaced it after this patch
        dist_utils._init_dist_pytorch(backend, init_backend=init_backend, **kwargs)

    init_dist_slurm._mmvit5 = True
    dist_utils._init_dist_slurm = init_dist_slurm


class _DeferredRemovals:
    """A file backend whose ``remove``/``rmtree`` calls wait in ``pending`` until run."""

    def __init__(self, backend):
        self.backend = backend
        self.pending = []

    def remove(self, path) -> None:
        self.pending.append((self.backend.remove, path))

    def rmtree(self, path) -> None:
        self.pending.append((self.backend.rmtree, path))

    def __getattr__(self, name):
        return getattr(self.backend, name)


@upstream_patch('mmengine>=0.10.0,<=0.10.7',
                reason="mmengine's CheckpointHook deletes the oldest checkpoint before writing "
                'the next, and writes files in place: a kill mid-save leaves no resumable '
                'checkpoint', after='mmengine.runner')
def crash_safe_checkpoints() -> None:
    """Make a kill at any moment of mmengine's checkpointing leave a resumable work dir.

    mmengine 0.10.7 writes ``iter_N.pth`` and then ``last_checkpoint`` in place, so a kill
    mid-write leaves a truncated file; and with ``max_keep_ckpts`` its ``CheckpointHook``
    deletes the oldest checkpoint *before* writing the new one, so with ``max_keep_ckpts=1`` a
    kill during the write leaves ``last_checkpoint`` naming a deleted file. Here the local file
    backend and the hook write through :func:`~mmvit5.utils.atomic_file.atomic_open`, and
    outdated checkpoints are deleted only once the new one and the pointer are on disk.
    """
    from mmengine.fileio.backends import local_backend
    from mmengine.hooks import checkpoint_hook

    from .utils.atomic_file import open_atomic_writes
    hook = checkpoint_hook.CheckpointHook
    if getattr(hook._save_checkpoint_with_step, '_mmvit5', False):
        return
    # both modules write only in ``with open(path, 'w'/'wb')`` blocks; reads pass through
    local_backend.open = checkpoint_hook.open = open_atomic_writes
    save = hook._save_checkpoint_with_step

    def save_then_prune(self, runner, step, meta):
        backend = self.file_backend
        self.file_backend = deferred = _DeferredRemovals(backend)
        try:
            save(self, runner, step, meta)
        finally:
            self.file_backend = backend
        for remove, path in deferred.pending:
            remove(path)

    save_then_prune._mmvit5 = True
    hook._save_checkpoint_with_step = save_then_prune


@upstream_patch('mmcv>=2.0.0,<=2.2.0',
                reason='https://github.com/open-mmlab/mmcv/issues/2203', after='mmcv.ops')
def contiguous_roi_align() -> None:
    """Make mmcv's ``RoIAlign`` pool channels-last maps correctly.

    mmcv 2.1.0's ``roi_align_forward`` indexes its input as contiguous NCHW memory and ignores
    strides, so a channels-last map (a ViT's transposed tokens, a permute-based LayerNorm2d and
    every conv after them) is pooled at the wrong locations, without an error: mmdet's box and
    mask heads then learn nothing while the RPN trains normally. The input is made contiguous
    first, which costs nothing when it already is. Without compiled ops there is nothing to
    patch (and no RoIAlign to call).
    """
    try:
        from mmcv.ops.roi_align import RoIAlignFunction
    except ImportError:
        return
    forward = RoIAlignFunction.forward
    if getattr(forward, '_mmvit5', False):
        return

    def forward_contiguous(ctx, input, rois, *args, **kwargs):
        return forward(ctx, input.contiguous(), rois, *args, **kwargs)

    forward_contiguous._mmvit5 = True
    RoIAlignFunction.forward = staticmethod(forward_contiguous)


@upstream_patch('mmengine>=0.10.0,<=0.10.7',
                reason="mmengine formats the config with yapf again for every log, dump and "
                'checkpoint: seconds each time for a detector config',
                after='mmengine.config.config')
def format_config_once() -> None:
    """Format each config text with yapf once per process.

    ``Config.pretty_text`` runs yapf over the whole config each time it is read: when the
    Runner logs the environment, when ``RuntimeInfoHook`` starts, on every ``dump`` and for the
    ``meta`` of every checkpoint. yapf takes 2-4 s for a Mask2Former or Mask R-CNN config on a
    CPU core, so a short run or a tool start spends most of its time there. The formatted
    text depends only on the unformatted text and the style, so it is kept for the texts seen
    last (the same string as yapf returns).
    """
    config_module = importlib.import_module('mmengine.config.config')
    format_code = config_module.FormatCode
    if getattr(format_code, '_mmvit5', False):
        return

    @functools.lru_cache(maxsize=32)
    def format_text(text: str, style: Tuple[Tuple[str, object], ...]):
        return format_code(text, style_config=dict(style))

    def format_once(text, style_config=None, **kwargs):
        if kwargs or not isinstance(style_config, dict):  # what mmengine does not pass
            return format_code(text, style_config=style_config, **kwargs)
        return format_text(text, tuple(sorted(style_config.items())))

    format_once._mmvit5 = True
    config_module.FormatCode = format_once


@upstream_patch('mmengine>=0.10.0,<=0.10.7',
                reason='mmengine sleeps 2 s at the end of every pass over the training data, '
                'against a deadlock of loader workers (https://github.com/open-mmlab/mmcv/pull/'
                '306): a loader without workers has none, and a small set sleeps most of its run',
                after='mmengine.runner.loops')
def no_epoch_sleep_without_workers() -> None:
    """Restart a training loader that has no worker processes without mmengine's 2 s sleep.

    ``IterBasedTrainLoop`` starts a finite loader (``DefaultSampler``) again at the end of
    each pass over the data, and sleeps 2 s first: a workaround for worker processes not yet
    released (open-mmlab/mmcv#306). With ``num_workers=0`` there is none to wait for, and the
    toy Mask2Former on 8 images in batches of 4 slept 1 s per iteration, most of its run.
    Loaders with workers keep the sleep.
    """
    loops = importlib.import_module('mmengine.runner.loops')
    iterator = loops._InfiniteDataloaderIterator
    upstream = iterator.__next__
    if getattr(upstream, '_mmvit5', False):
        return
    awake = types.SimpleNamespace(sleep=lambda seconds: None)

    def next_batch(self):
        if self._dataloader.num_workers:
            return upstream(self)
        loops.time = awake  # that sleep is the module's only use of time
        try:
            return upstream(self)
        finally:
            loops.time = time

    next_batch._mmvit5 = True
    iterator.__next__ = next_batch


@upstream_patch(_mmvit5_hook.MULTIMODAL_RANGE,
                reason="mmpretrain's multimodal models import names that newer transformers "
                'no longer has; every mmdet model build then fails', after='mmpretrain')
def skip_unimportable_multimodal() -> None:
    """Keep a newer transformers from breaking every mmdet model build (the start-up file's
    guard does the same in processes that never import mmvit5:
    :func:`_mmvit5_hook.skip_unimportable_multimodal`)."""
    _mmvit5_hook.skip_unimportable_multimodal()
