"""What the pinned OpenMMLab stack (mmengine 0.10.7, mmcv 2.1.0) needs on a modern torch, on
CPUs, to survive being killed and to pool ViT maps. Each function patches one thing and is
applied on ``import mmvit5``.

torch >= 2.6 loads with ``weights_only=True`` by default, and mmengine's ``torch.load`` calls
pass nothing else, so resuming fails on the checkpoints mmengine itself wrote. Rather than
turning ``weights_only`` off, this allow-lists exactly the non-tensor types those checkpoints
(and the released ViT-5 files) hold:

- ``argparse.Namespace``: the ``args`` entry of DeiT-style release files;
- numpy's RNG state (a uint32 array), which :class:`~mmvit5.engine.RNGStateHook` saves;
- mmengine's ``HistoryBuffer`` with its numpy arrays and scalars (the ``message_hub`` entry);
- the statistics methods in a ``HistoryBuffer``'s method table (``HistoryBuffer.min``,
  ``.mean``, ...), which pickle as ``getattr(HistoryBuffer, name)``. ``getattr`` itself is
  *not* allowed: a restricted stand-in resolves only those names on that class.
"""
import argparse
import importlib.util
import os
import pickle
import subprocess
import sys

import numpy as np
import torch
from mmengine.logging import HistoryBuffer

# HistoryBuffer registers these on first use (``_set_default_statistics``)
STATISTICS_METHODS = ('min', 'max', 'current', 'mean')


def history_buffer_method(obj, name: str):
    """``getattr`` as a pickle may use it inside an mmengine checkpoint, and no further."""
    if obj is HistoryBuffer and name in STATISTICS_METHODS:
        return getattr(obj, name)
    raise pickle.UnpicklingError(
        f'checkpoint asks for attribute {name!r} of {obj!r}; under weights_only=True only '
        f'the statistics methods {STATISTICS_METHODS} of mmengine\'s HistoryBuffer are allowed')


def _numpy_globals() -> list:
    # numpy 2 pickles through numpy._core, numpy 1 through numpy.core
    core = getattr(np, '_core', None) or np.core
    # float/int/bool: HistoryBuffer values; uint32: numpy's RNG state (RNGStateHook)
    dtypes = [type(np.dtype(t))
              for t in ('float64', 'float32', 'int64', 'int32', 'uint32', 'bool')]
    return [core.multiarray._reconstruct, core.multiarray.scalar, np.ndarray, np.dtype,
            *dtypes]


def allow_mmengine_checkpoints() -> None:
    """Allow-list mmengine's checkpoint contents for ``torch.load(weights_only=True)``."""
    torch.serialization.add_safe_globals([
        argparse.Namespace,
        HistoryBuffer,
        (history_buffer_method, 'builtins.getattr'),
        *_numpy_globals(),
    ])


def allow_cpu_distributed() -> None:
    """Let mmengine's ``pytorch`` launcher run on machines without CUDA (gloo backend).

    mmengine 0.10.7 calls ``torch.cuda.set_device`` unconditionally when initialising the
    process group and passes ``device_ids=[LOCAL_RANK]`` to DDP, which PyTorch rejects for a
    CPU module. Both are skipped only when no CUDA device exists; GPU runs are unchanged.
    """
    from mmengine.dist import utils as dist_utils
    from mmengine.model.wrappers import MMDistributedDataParallel
    if getattr(dist_utils._init_dist_pytorch, '_mmvit5', False):
        return
    init_on_cuda = dist_utils._init_dist_pytorch
    ddp_init = MMDistributedDataParallel.__init__

    def init_dist_pytorch(backend='nccl', init_backend='torch', **kwargs):
        if torch.cuda.is_available():
            return init_on_cuda(backend, init_backend=init_backend, **kwargs)
        if backend == 'nccl':
            raise RuntimeError("NCCL needs CUDA and this machine has none: set "
                               "env_cfg.dist_cfg.backend='gloo' (--cfg-options "
                               'env_cfg.dist_cfg.backend=gloo) to train on CPUs')
        torch.distributed.init_process_group(backend=backend, **kwargs)

    def ddp_init_cpu_aware(self, module, detect_anomalous_params=False, **kwargs):
        if kwargs.get('device_ids') and all(p.device.type == 'cpu' for p in module.parameters()):
            kwargs['device_ids'] = None
        ddp_init(self, module, detect_anomalous_params, **kwargs)

    init_dist_pytorch._mmvit5 = True
    dist_utils._init_dist_pytorch = init_dist_pytorch
    MMDistributedDataParallel.__init__ = ddp_init_cpu_aware


# mmengine releases whose ``_init_dist_slurm`` calls ``torch.cuda.set_device`` unconditionally:
# every release up to 0.10.7, the newest checked. A later one is left alone until checked.
SLURM_CUDA_ONLY_MMENGINE = '0.10.7'


def allow_cpu_slurm() -> None:
    """Let mmengine's ``slurm`` launcher run on nodes without CUDA (gloo backend).

    mmengine <= 0.10.7 sets the CUDA device before ``init_process_group`` whatever the backend,
    so ``srun python tools/train.py ... --launcher=slurm`` dies with "Found no NVIDIA driver"
    on a CPU partition. Without CUDA, SLURM's task variables are mapped onto torchrun's
    (``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``; ``MASTER_ADDR`` the job's first node and
    ``MASTER_PORT`` 29500 unless set) and the ``pytorch`` initialisation runs, which
    :func:`allow_cpu_distributed` makes CPU-aware. With CUDA, mmengine's own code runs.
    """
    import mmengine
    from mmengine.dist import utils as dist_utils
    from mmengine.utils import digit_version
    if digit_version(mmengine.__version__) > digit_version(SLURM_CUDA_ONLY_MMENGINE) or \
            getattr(dist_utils._init_dist_slurm, '_mmvit5', False):
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


# what mmpretrain 1.2.0's multimodal models import from transformers.modeling_utils
_MULTIMODAL_NAMES = ('PreTrainedModel', 'apply_chunking_to_forward',
                     'find_pruneable_heads_and_indices', 'prune_linear_layer')


def skip_unimportable_multimodal() -> None:
    """Keep a newer transformers from breaking every mmdet model build.

    ``mmdet.models`` imports ``mmpretrain.models`` whenever mmpretrain is installed, and
    mmpretrain 1.2.0 defines its multimodal models (BLIP, CLIP, ...) whenever transformers >=
    4.28 is. They subclass ``transformers.modeling_utils.PreTrainedModel`` and import three
    helpers beside it; where that module no longer has them (seen on a GPU image with a recent
    transformers), mmpretrain's fallback sets the base class to None and the import raises
    ``TypeError: NoneType takes no arguments``. mmvit5 uses none of those models, so they are
    then registered as mmpretrain's own placeholders, as when transformers is absent.
    """
    if importlib.util.find_spec('mmpretrain') is None or \
            importlib.util.find_spec('transformers') is None:
        return
    from mmpretrain.utils import dependency
    if not dependency.WITH_MULTIMODAL or 'mmpretrain.models' in sys.modules:
        return
    try:
        from transformers import modeling_utils
        usable = all(hasattr(modeling_utils, name) for name in _MULTIMODAL_NAMES)
    except Exception:  # noqa: BLE001 - any failure here is the failure mmpretrain would hit
        usable = False
    if not usable:
        dependency.WITH_MULTIMODAL = False
